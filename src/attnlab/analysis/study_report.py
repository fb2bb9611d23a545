"""A study folder as attnlab-compare reports it (issue 63): stage 1's tuning curve per arm (the
chosen point ringed; an edge, or a margin smaller than the seeds' spread, flagged), the primary
comparison the study file named before the runs (confirmatory), and every other comparison
labelled exploratory. The stage-2 statistics themselves are attnlab-compare's
(attnlab.analysis.report); this module adds what only a study has. A choice is one arm's record
of <study>/choice.json (attnlab.sweeps.choice.Choice: arm, points, chosen, margins, at_edge)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from attnlab.analysis.tables import fmt_number, fmt_value

CONFIRMATORY = "confirmatory (named in the study file before the runs)"
EXPLORATORY = "exploratory (not named in the study file: read as a lead, not as a result)"


def arm_text(arm: dict) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={fmt_value(v)}" for k, v in arm.items())


def spread(choice, stage2: Sequence[float] = ()) -> float | None:
    """The seeds' spread at the chosen point: the sample std of its tuning seeds' values, else
    (one tuning seed) of the tuning metric over stage 2's seeds, which ran at that point."""
    chosen = next((p for p in choice.points if p["value"] == choice.chosen), None)
    values = [v for v in (chosen or {}).get("values", []) if v is not None]
    if len(values) < 2:
        values = [v for v in stage2 if v is not None and math.isfinite(v)]
    return statistics.stdev(values) if len(values) >= 2 else None


def flags(choice, seeds_spread: float | None) -> list[str]:
    """What a reader must know before trusting an arm's choice."""
    out = []
    if choice.chosen is None:
        return ["no point completed: nothing chosen"]
    if choice.at_edge:
        out.append(f"AT THE EDGE after {choice.extended} extension(s): the best may lie beyond")
    margins = [m for m in (choice.margin_below, choice.margin_above) if m is not None]
    if margins and seeds_spread is not None and min(margins) < seeds_spread:
        out.append(
            f"margin {fmt_number(min(margins))} to a neighbour is below the seeds' spread "
            f"({fmt_number(seeds_spread)}): the neighbouring value is as good within noise"
        )
    return out


def tuning_rows(choices: Sequence, key: str, metric: str) -> list[list[str]]:
    """Header + one row per arm and point: value, mean score, per-seed values, status, chosen."""
    rows = [["arm", key, f"{metric} (mean over tuning seeds)", "per seed", "status", ""]]
    for c in choices:
        for p in c.points:
            per = ", ".join("-" if v is None else fmt_number(v) for v in p["values"])
            mark = "chosen" if p["value"] == c.chosen else ""
            rows.append([arm_text(c.arm), fmt_value(p["value"]), fmt_number(p["score"]), per,
                         ", ".join(p["statuses"]), mark])  # fmt: skip
    return rows


def plot_tuning(choices: Sequence, key: str, metric: str, log_x: bool, path: Path) -> bool:
    """tuning.png: one panel per arm, the metric against the tuned value (each tuning seed a
    dot, their mean a line), the chosen point ringed; a flagged arm's title says why."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numeric = [c for c in choices if c.points and all(_number(p["value"]) for p in c.points)]
    if not numeric:
        return False
    fig, axes = plt.subplots(1, len(numeric), figsize=(4 * len(numeric), 3.4), squeeze=False)
    for ax, c in zip(axes[0], numeric, strict=True):
        xs = [p["value"] for p in c.points]
        ys = [p["score"] for p in c.points]
        ax.plot([x for x, y in zip(xs, ys, strict=True) if y is not None],
                [y for y in ys if y is not None], "-", color="C0")  # fmt: skip
        for p in c.points:
            seeds = [v for v in p["values"] if v is not None]
            ax.plot([p["value"]] * len(seeds), seeds, ".", color="C0", alpha=0.5)
            if p["score"] is None:
                ax.plot([p["value"]], [ax.get_ylim()[1]], "x", color="C3")
        if c.chosen is not None:
            best = next(p["score"] for p in c.points if p["value"] == c.chosen)
            ax.plot([c.chosen], [best], "o", mfc="none", mec="C3", ms=14, mew=2)
        ax.set_xscale("log" if log_x else "linear")
        ax.set_title(arm_text(c.arm) + ("  (AT THE EDGE)" if c.at_edge else ""), fontsize=9)
        ax.set_xlabel(key)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(metric)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def family_mdd(
    values: dict[str, list[tuple]], baseline: str, test: str = "welch"
) -> tuple[dict[str, float | None], int]:
    """Per arm against the baseline (values: label -> its runs' (seed, value)): the smallest
    difference the primary's test (Welch's, or the paired one's by seed) detects with 80% power
    at Holm's strictest step, alpha / m with m the arms tested against the baseline (the
    Bonferroni bound of the family); and m. The statistics table's MDD column: the same tests
    through attnlab.analysis.stats.with_holm. ValueError when a paired test meets other seeds."""
    from attnlab.analysis import stats

    base = values.get(baseline, [])
    arms = [a for a in values if a != baseline]

    def difference(pairs: list[tuple]):
        if len(pairs) < 2 or len(base) < 2:
            return None
        if test == "paired":
            return stats.paired(dict(pairs), dict(base))
        return stats.welch([v for _, v in pairs], [v for _, v in base])

    diffs = stats.with_holm([difference(values[a]) for a in arms])
    tested = sum(d is not None and not math.isnan(d.p) for d in diffs)
    return {a: d.mdd for a, d in zip(arms, diffs, strict=True) if d is not None}, tested
