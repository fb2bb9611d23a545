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

computed on the mean over seeds at each rate; its 95% interval is a percentile bootstrap over
seeds (scipy.stats.bootstrap, resampling whole seeds, i.e. a seed's values at every rate
together). The *best rate* is the rate of the best mean; the arms are then compared at their own
best rates with the usual statistics (attnlab.analysis.report.statistics_table). Choosing a rate
on the same seeds it is judged on flatters every arm (the largest of several noisy means is
biased upward); `select_seeds` picks each arm's rate on some seeds and compares on the others.
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


def higher_is_better(metric: str) -> bool:
    return any(word in metric for word in ("bleu", "chrf", "exact_match", "acc"))


@dataclass
class RatePoint:
    """One arm at one rate: each seed's (capped) value, which seeds ended badly, the runs."""

    rate: float
    values: dict[Any, float] = field(default_factory=dict)  # seed -> capped value
    ended_badly: set = field(default_factory=set)  # seeds that diverged or failed
    runs: list[Run] = field(default_factory=list)

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


@dataclass(frozen=True)
class Sensitivity:
    value: float | None
    ci: tuple[float, float] | None
    n_seeds: int  # seeds with a value at every rate (what the bootstrap resamples)


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
    the numeric swept keys if it is not one of them), else scheduler.peak_lr when swept."""
    numeric = numeric_keys(runs, keys)
    if requested is None:
        return DEFAULT_LR_KEY if DEFAULT_LR_KEY in numeric else None
    names = short_names(keys)
    match = [k for k in numeric if requested in (k, names[k])]
    if len(match) != 1:
        raise ValueError(
            f"--x {requested!r} is not a numeric swept key; expected one of: "
            + (", ".join(numeric) or "none (no numeric key differs between these runs)")
        )
    return match[0]


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


def arms(
    groups: Sequence[Group], keys: Sequence[str], x_key: str, metric: str, cap: float | None
) -> list[Arm]:
    """The groups (by every key, the rate included) regrouped into arms (every key but the
    rate), each with its points in increasing rate."""
    goal_max = higher_is_better(metric)
    arm_keys = [k for k in keys if k != x_key]
    by_arm: dict[tuple, Arm] = {}
    for g in groups:
        rate = g.values.get(x_key)
        if not isinstance(rate, int | float):
            continue
        values = {k: g.values[k] for k in arm_keys}
        ident = tuple(repr(v) for v in values.values())
        arm = by_arm.setdefault(ident, Arm(values, []))
        point = RatePoint(float(rate), runs=list(g.runs))
        for run in g.runs:
            value = run_value(run, metric, cap, goal_max)
            if value is not None:
                point.values[run.seed] = value
            if run.status in _ENDED_BADLY:
                point.ended_badly.add(run.seed)
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


def sensitivity(arm: Arm, goal_max: bool, n_resamples: int = 9999, seed: int = 0) -> Sensitivity:
    """The arm's LR sensitivity over the seeds that have a value at every rate, and its 95%
    percentile bootstrap interval over those seeds (None with fewer than 2)."""
    import numpy as np
    from scipy import stats

    seeds = set.intersection(*(set(p.values) for p in arm.points)) if arm.points else set()
    seeds = sorted(seeds, key=sort_key)
    if not seeds:
        return Sensitivity(None, None, 0)
    matrix = np.array([[p.values[s] for p in arm.points] for s in seeds])  # (seeds, rates)
    value = sensitivity_of(matrix.mean(axis=0).tolist(), goal_max)
    if len(seeds) < 2 or np.ptp(matrix, axis=0).max() == 0:
        return Sensitivity(value, None, len(seeds))

    def statistic(rows):
        return sensitivity_of(matrix[rows.astype(int)].mean(axis=0).tolist(), goal_max)

    result = stats.bootstrap(
        (np.arange(len(seeds)),),
        statistic,
        vectorized=False,
        n_resamples=n_resamples,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(seed),
    )
    ci = result.confidence_interval
    return Sensitivity(value, (float(ci.low), float(ci.high)), len(seeds))


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
        row = [_arm_label(arm, names)]
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
    return text


def _arm_label(arm: Arm, names: dict) -> str:
    return group_label(Group(arm.values), names) if arm.values else "all runs"


def summary_table(
    arms_: Sequence[Arm],
    keys: Sequence[str],
    x_key: str,
    metric: str,
    select_seeds: Sequence | None = None,
) -> list[list[str]]:
    """Header + one row per arm: its best rate (on select_seeds when given) and the metric
    there (mean, 95% t interval), the LR sensitivity with its bootstrap interval, and how many
    runs diverged or failed."""
    from attnlab.analysis import stats

    goal_max = higher_is_better(metric)
    names = short_names(keys)
    short_x = names.get(x_key, x_key)
    chosen = " (chosen on seeds " + ",".join(map(str, select_seeds)) + ")" if select_seeds else ""
    rows = [
        [
            "arm",
            f"best {short_x}{chosen}",
            f"{metric} there: mean",
            "95% CI",
            "LR sensitivity",
            "95% bootstrap CI",
            "seeds",
            "diverged / runs",
        ]
    ]
    for arm in arms_:
        point = arm.best(goal_max, select_seeds)
        summary = stats.summarize(list(point.values.values())) if point else None
        sens = sensitivity(arm, goal_max)
        ci = summary.ci if summary else None
        bad = sum(len(p.ended_badly) for p in arm.points)
        runs = sum(len(p.runs) for p in arm.points)
        rows.append(
            [
                _arm_label(arm, names),
                fmt_value(point.rate) if point else "",
                fmt_number(summary.mean) if summary else "",
                f"[{fmt_number(ci[0])}, {fmt_number(ci[1])}]" if ci else "",
                fmt_number(sens.value),
                f"[{fmt_number(sens.ci[0])}, {fmt_number(sens.ci[1])}]" if sens.ci else "",
                str(sens.n_seeds),
                f"{bad} / {runs}",
            ]
        )
    return rows


def plot(arms_: Sequence[Arm], keys: Sequence[str], x_key: str, metric: str, path) -> bool:
    """The metric against the rate on a log axis, one colour per arm: every seed a point, the
    mean a line, a run that diverged or failed an 'x' at the top of the axes. False when
    there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    names = short_names(keys)
    fig, ax = plt.subplots(figsize=(8, 5))
    top = blended_transform_factory(ax.transData, ax.transAxes)
    drawn = False
    marked = False
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
            ax.plot(xs, means, "-o", color=color, label=_arm_label(arm, names), markersize=4)
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xscale("log")
    values = [v for a in arms_ for p in a.points for v in p.values.values()]
    if values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_xlabel(names.get(x_key, x_key))
    ylabel = f"{metric} (mean over seeds; capped at the loss at initialization)"
    ax.set_ylabel(ylabel if not higher_is_better(metric) else metric)
    title = f"{metric} against {names.get(x_key, x_key)}"
    if marked:
        title += " (x at the top: a run that diverged, counted at the cap)"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
