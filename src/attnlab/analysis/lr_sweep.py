"""A learning-rate sweep read as Wortsman et al. (2023) read one: per arm, the final metric
against the learning rate, the best rate, and the LR sensitivity.

An *arm* is one combination of the swept keys other than the rate (and the seed), e.g. Post-LN
without warmup. For each arm and rate the seeds' values are taken as they are, except that a
run which did not complete (diverged, failed) counts at the cap, and a completed value beyond
the cap is capped: the cap is the loss at initialization (results.json's nll_init, for an
nll-like metric to minimize) or --cap. So a diverged run weighs on its arm, but no more than a
model that learned nothing.

    LR sensitivity = mean over the grid of [ capped(metric at rate) - best over the grid ]
                    (for a metric to maximize: best - capped(metric at rate))

computed per seed, with the basin's width, on the whole grid and on its stable range
(attnlab.analysis.lr_sensitivity). The *best rate* is the rate of the best mean; the arms are
then compared at their own best rates with the usual statistics
(attnlab.analysis.report.statistics_table). Choosing a rate on the same seeds it is judged on
flatters every arm (the largest of several noisy means is biased upward); `select_seeds` picks
each arm's rate on some seeds and compares on the others.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from attnlab.analysis.groups import MISSING, group_label, short_names, sort_key
from attnlab.analysis.runs import Group, Run
from attnlab.analysis.tables import fmt_number, fmt_value
from attnlab.runs.status import Status, status_counts

DEFAULT_LR_KEY = "scheduler.peak_lr"
INIT_KEY = "nll_init"  # results.json's loss at initialization, read as a metric
# Statuses that count at the cap: the run ended, without a usable final metric.
_ENDED_BADLY = (Status.DIVERGED, Status.FAILED)
# The stall level of a sweep to minimize: (1 - DID_NOT_TRAIN) x the median loss at
# initialization of its runs (one level for the sweep: the initial loss moves by seed, 3.3-3.8 in
# section 2). A completed run whose best value never went below it "did not train": it learned
# about the targets' frequencies and no more (section 2's reverse task: 2.79, against 2.6). An
# arm "stalls" at a rate where its seeds' mean final value is at or above it.
DID_NOT_TRAIN = 0.25


def is_diagnostic(metric: str) -> bool:
    """A diag/ metric (an attention logit, a gradient norm) is no loss: it has no best rate, no
    sensitivity and no cap, only its curve against the rate."""
    return metric.startswith("diag/")


def higher_is_better(metric: str) -> bool:
    return any(word in metric for word in ("bleu", "chrf", "exact_match", "acc"))


@dataclass
class RatePoint:
    """One arm at one rate: each seed's (capped) value, which seeds ended badly, the runs."""

    rate: float
    values: dict[Any, float] = field(default_factory=dict)  # seed -> capped value
    ended_badly: set = field(default_factory=set)  # seeds that diverged or failed
    runs: list[Run] = field(default_factory=list)
    did_not_train: set = field(default_factory=set)  # seeds whose best stayed at the stall level
    stall_level: float | None = None  # the sweep's (stall_level); None for a metric to maximize

    @property
    def stalled(self) -> bool:
        """The arm fails here: every seed diverged or failed, or the seeds' mean final value is
        at or above the stall level, whether they never left it or broke down later."""
        if not self.values:
            return False
        if set(self.values) <= self.ended_badly:
            return True
        level = self.stall_level
        return level is not None and statistics.fmean(self.values.values()) >= level

    def mean(self, seeds: Sequence | None = None) -> float | None:
        chosen = [v for s, v in self.values.items() if seeds is None or s in seeds]
        return statistics.fmean(chosen) if chosen else None


@dataclass
class Arm:
    """The swept keys other than the rate, and the arm's points in increasing rate."""

    values: dict[str, Any]
    points: list[RatePoint]

    def best(self, goal_max: bool, seeds: Sequence | None = None) -> RatePoint | None:
        scored = [(p.mean(seeds), p) for p in self.points if p.mean(seeds) is not None]
        if not scored:
            return None
        pick = max if goal_max else min
        return pick(scored, key=lambda mp: mp[0])[1]


def numeric_keys(runs: Sequence[Run], keys: Sequence[str]) -> list[str]:
    """The keys whose values are numbers (not booleans) in every run that has them."""
    found = []
    for key in keys:
        values = [r.config.get(key) for r in runs if r.config.get(key) not in (None, MISSING)]
        if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            found.append(key)
    return found


def choose_x_key(runs: Sequence[Run], keys: Sequence[str], requested: str | None) -> str | None:
    """The swept key to read as the x axis: `requested` (full or short name; ValueError naming
    the numeric swept keys if it is not one of them), else scheduler.peak_lr when some arm has
    two rates of it or more."""
    numeric = numeric_keys(runs, keys)
    if requested is None:  # a sweep only where some arm has two rates (not a search's reruns)
        swept = DEFAULT_LR_KEY in numeric and _rates_per_arm(runs, keys, DEFAULT_LR_KEY) > 1
        return DEFAULT_LR_KEY if swept else None
    names = short_names(keys)
    match = [k for k in numeric if requested in (k, names[k])]
    if len(match) != 1:
        raise ValueError(
            f"--x {requested!r} is not a numeric swept key; expected one of: "
            + (", ".join(numeric) or "none (no numeric key differs between these runs)")
        )
    return match[0]


def _rates_per_arm(runs: Sequence[Run], keys: Sequence[str], x_key: str) -> int:
    """The most distinct values of x_key that one arm (the other keys' values) has."""
    rates: dict[tuple, set] = {}
    for r in runs:
        arm = tuple(repr(r.config.get(k)) for k in keys if k != x_key)
        rates.setdefault(arm, set()).add(r.config.get(x_key))
    return max((len(v) for v in rates.values()), default=0)


def cap_of(run: Run, metric: str, cap: float | None) -> float | None:
    """The cap for `run`: --cap, else its loss at initialization for an nll metric."""
    if cap is not None:
        return cap
    if "nll" in metric and not higher_is_better(metric):
        return run.metrics.get(INIT_KEY)
    return None


def run_value(run: Run, metric: str, cap: float | None, goal_max: bool) -> float | None:
    """The run's value for the sweep: its metric, capped; the cap itself for a run that ended
    badly or left no finite value; None when it is still running or has no cap to stand for it."""
    limit = cap_of(run, metric, cap)
    value = run.metrics.get(metric)
    finite = value is not None and math.isfinite(value)
    if run.status == Status.COMPLETED and finite:
        if limit is None:
            return value
        return max(value, limit) if goal_max else min(value, limit)
    if run.status in _ENDED_BADLY or (run.status == Status.COMPLETED and not finite):
        return limit
    return None


def stall_level(runs: Sequence[Run], metric: str, cap: float | None) -> float | None:
    """(1 - DID_NOT_TRAIN) x the median cap of the runs (their loss at initialization, or --cap);
    None for a metric to maximize or without caps."""
    caps = [cap_of(r, metric, cap) for r in runs]
    caps = [c for c in caps if c is not None and math.isfinite(c)]
    if higher_is_better(metric) or not caps:
        return None
    return (1 - DID_NOT_TRAIN) * statistics.median(caps)


def did_not_train(run: Run, metric: str, level: float | None) -> bool:
    """A completed run whose best value of the metric (its `_best`, else its final) never went
    below the stall level."""
    value = run.metrics.get(f"{metric}_best", run.metrics.get(metric))
    if level is None or value is None or run.status != Status.COMPLETED:
        return False
    return not math.isfinite(value) or value >= level


def arms(
    groups: Sequence[Group], keys: Sequence[str], x_key: str, metric: str, cap: float | None
) -> list[Arm]:
    """The groups (by every key, the rate included) regrouped into arms (every key but the
    rate), each with its points in increasing rate."""
    goal_max = higher_is_better(metric)
    arm_keys = [k for k in keys if k != x_key]
    level = stall_level([r for g in groups for r in g.runs], metric, cap)
    by_arm: dict[tuple, Arm] = {}
    for g in groups:
        rate = g.values.get(x_key)
        if not isinstance(rate, int | float):
            continue
        values = {k: g.values[k] for k in arm_keys}
        ident = tuple(repr(v) for v in values.values())
        arm = by_arm.setdefault(ident, Arm(values, []))
        point = RatePoint(float(rate), runs=list(g.runs), stall_level=level)
        for run in g.runs:
            value = run_value(run, metric, cap, goal_max)
            if value is not None:
                point.values[run.seed] = value
            if run.status in _ENDED_BADLY:
                point.ended_badly.add(run.seed)
            elif did_not_train(run, metric, level):
                point.did_not_train.add(run.seed)
        arm.points.append(point)
    for arm in by_arm.values():
        arm.points.sort(key=lambda p: p.rate)
    return sorted(by_arm.values(), key=lambda a: [sort_key(v) for v in a.values.values()])


def sensitivity_of(means: Sequence[float], goal_max: bool) -> float:
    """Wortsman et al.'s LR sensitivity of per-rate (capped) values: the mean excess over the
    best of them."""
    best = max(means) if goal_max else min(means)
    excess = [(best - m) if goal_max else (m - best) for m in means]
    return math.fsum(excess) / len(excess)


def best_rate_groups(
    arms_: Sequence[Arm], goal_max: bool, select_seeds: Sequence | None = None
) -> list[Group]:
    """One group per arm: its runs at its best rate (chosen on `select_seeds`, then only the
    other seeds' runs kept), for report.statistics_table."""
    groups = []
    for arm in arms_:
        point = arm.best(goal_max, select_seeds)
        runs = [] if point is None else point.runs
        if select_seeds is not None:
            runs = [r for r in runs if r.seed not in select_seeds]
        groups.append(Group(dict(arm.values), runs))
    return groups


def curve_table(arms_: Sequence[Arm], x_key: str, keys: Sequence[str]) -> list[list[str]]:
    """Header + one row per arm: mean ± std (n) of the capped values at each rate, with the
    runs that ended badly counted ('2 div')."""
    rates = sorted({p.rate for a in arms_ for p in a.points})
    names = short_names(keys)
    rows = [[f"arm \\ {names.get(x_key, x_key)}", *[fmt_value(r) for r in rates]]]
    for arm in arms_:
        by_rate = {p.rate: p for p in arm.points}
        row = [arm_label(arm, names)]
        for rate in rates:
            p = by_rate.get(rate)
            row.append(_cell(p) if p is not None else "")
        rows.append(row)
    return rows


def _cell(p: RatePoint) -> str:
    values = list(p.values.values())
    if not values:
        return status_counts([r.status for r in p.runs]) if p.runs else ""  # "1 pruned"
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else None
    text = fmt_number(mean) + (f" ± {fmt_number(std)}" if std is not None else "")
    text += f" (n={len(values)})"
    if p.ended_badly:
        text += f", {len(p.ended_badly)} diverged"
    if p.did_not_train:
        text += f", {len(p.did_not_train)} did not train"
    return text


def arm_label(arm: Arm, names: dict) -> str:
    return group_label(Group(arm.values), names) if arm.values else "all runs"


MAX_ARMS_PER_AXES = 6  # more curves than this on one axes are not told apart


def panels(arms_: Sequence[Arm], keys: Sequence[str]) -> tuple[str | None, list[tuple]]:
    """The arms shared out over axes, at most MAX_ARMS_PER_AXES each: (the key that splits them,
    [(the axes' title, its arms)]). One axes for few arms; else one per value of the first arm
    key that splits them so, not one arm an axes (titled `key=value`); else in chunks, in order."""
    if len(arms_) <= MAX_ARMS_PER_AXES:
        return None, [(None, list(arms_))]
    names = short_names(keys)
    for key in keys:
        values = list(dict.fromkeys(arm.values.get(key) for arm in arms_))
        split = [[a for a in arms_ if a.values.get(key) == v] for v in values]
        if 1 < len(values) < len(arms_) and max(map(len, split)) <= MAX_ARMS_PER_AXES:
            shown = names.get(key, key)
            titles = [f"{shown}={fmt_value(v)}" for v in values]
            return key, list(zip(titles, split, strict=True))
    step = MAX_ARMS_PER_AXES
    return None, [(None, list(arms_[i : i + step])) for i in range(0, len(arms_), step)]


def plot(arms_: Sequence[Arm], keys: Sequence[str], x_key: str, metric: str, path) -> bool:
    """The metric against the rate on a log axis, one colour per arm: every seed a point, the
    mean a line, a run that diverged or failed an 'x' at the top of the axes. Many arms are
    drawn on a grid of axes that share both scales (panels). False when there is nothing to
    draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = short_names(keys)
    split_key, shares = panels(arms_, keys)
    ncols = min(3, len(shares))
    nrows = math.ceil(len(shares) / ncols)
    legend_h = 0 if split_key is None else 0.2 * max(len(share) for _, share in shares) + 0.4
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True,
                             figsize=(8 if ncols == 1 else 5 * ncols, (5 + legend_h) * nrows),
                             layout="constrained")  # fmt: skip
    drawn, marked = False, False
    for ax, (title, share) in zip(axes.flat, shares, strict=False):
        here, x_marks = _draw_arms(ax, share, names, split_key)
        drawn, marked = drawn or here, marked or x_marks
        if title:
            ax.set_title(title, fontsize=9)
    for ax in axes.flat[len(shares) :]:
        ax.set_visible(False)
    if not drawn:
        plt.close(fig)
        return False
    ax = axes.flat[0]
    ax.set_xscale("log")
    values = [v for a in arms_ for p in a.points for v in p.values.values()]
    if values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ylabel = f"{metric} (mean over seeds; capped at the loss at initialization)"
    plain = higher_is_better(metric) or is_diagnostic(metric)
    for row in axes:
        row[0].set_ylabel(metric + " (mean over seeds)" if plain else ylabel)
    for ax in axes[-1]:
        ax.set_xlabel(names.get(x_key, x_key))
    title = f"{metric} against {names.get(x_key, x_key)}"
    if marked:
        title += " (x at the top: a run that diverged, counted at the cap)"
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _draw_arms(ax, arms_: Sequence[Arm], names: dict, split_key=None) -> tuple[bool, bool]:
    """The arms' points and mean curves on one axes, labelled without the key that split them
    into panels (the axes' title has it); (anything drawn, any run marked 'x')."""
    from matplotlib.transforms import blended_transform_factory

    top = blended_transform_factory(ax.transData, ax.transAxes)
    drawn, marked = False, False
    for i, arm in enumerate(arms_):
        color = f"C{i % 10}"
        xs, means = [], []
        for p in arm.points:
            ok = [v for s, v in p.values.items() if s not in p.ended_badly]
            ax.scatter([p.rate] * len(ok), ok, color=color, s=14, alpha=0.6)
            if p.ended_badly:
                ax.scatter([p.rate] * len(p.ended_badly), [0.97] * len(p.ended_badly),
                           marker="x", color=color, s=40, transform=top, clip_on=False)  # fmt: skip
                marked = True
            if p.mean() is not None:
                xs.append(p.rate)
                means.append(p.mean())
        if xs:
            shown = Arm({k: v for k, v in arm.values.items() if k != split_key}, [])
            label = arm_label(shown, names) if split_key else arm_label(arm, names)
            ax.plot(xs, means, "-o", color=color, label=label, markersize=4)
            drawn = True
    ax.grid(True, which="both", alpha=0.3)
    if drawn and split_key:  # below the axes: a panel's curves fill it
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    elif drawn:
        ax.legend(fontsize=8)
    return drawn, marked
