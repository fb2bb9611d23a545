"""How sensitive an arm is to its learning rate, measured so that the figure can be believed:
per seed, on a stated range of rates, with the basin's width beside it and a test between arms.

For one seed of an arm, with v(r) its (capped) metric at each grid rate r of a range R:

    sensitivity = mean over r in R of [ v(r) - min over R of v ]   (Wortsman et al., 2023)
    basin width = the rates of R with v(r) <= min over R of v + tol  (and their span in decades)

(for a metric to maximize, the signs turn). The arm's figure is the mean over its seeds with a
Student t interval (n - 1 degrees of freedom); a bootstrap over 3 seeds has only 10 distinct
resamples, so it is not used. Two arms are compared by Welch's t-test on their seeds' figures,
or by an exact permutation test where one arm has no spread (attnlab.analysis.stats).

Every figure depends on its grid: rates where an arm stalls (its seeds diverged, or their mean
final value is at the sweep's stall level, lr_sweep.stall_level) add a large constant excess
each. So the figures are given on the whole grid and on the *stable range*: the grid's rates
below the lowest rate at which any arm stalls (or --lr-range LO:HI). An arm that stalls at no
rate of the grid is flagged: its sensitivity and basin are lower bounds, the grid does not
reach its divergence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from attnlab.analysis import stats
from attnlab.analysis.groups import sort_key
from attnlab.analysis.lr_sweep import Arm, sensitivity_of

DEFAULT_TOL = 0.1  # basin tolerance, in the metric's units (nats for an nll)
LOWER_BOUND = "lower bound: the grid does not reach its divergence"


@dataclass(frozen=True)
class Range:
    """Rates from lo to hi (inclusive) and where the range came from."""

    lo: float
    hi: float
    why: str

    def holds(self, rate: float) -> bool:
        return self.lo * (1 - 1e-9) <= rate <= self.hi * (1 + 1e-9)

    @property
    def label(self) -> str:
        return f"{self.lo:g}-{self.hi:g}"


@dataclass(frozen=True)
class Reading:
    """One arm on one range: each seed's sensitivity and basin width (rates), their summaries,
    and the basin of the mean curve (rates, decades, rates within tol of every arm's best)."""

    rates: tuple[float, ...]
    sensitivity: dict  # seed -> sensitivity
    basin: dict  # seed -> rates within tol of that seed's best
    mean_basin: int
    mean_basin_decades: float
    basin_of_all: int

    @property
    def sensitivity_summary(self) -> stats.Summary:
        return stats.summarize(list(self.sensitivity.values()))

    @property
    def basin_summary(self) -> stats.Summary:
        return stats.summarize(list(self.basin.values()))


def parse_range(text: str) -> Range:
    """`LO:HI` (either side may be empty: the grid's end) -> Range; ValueError otherwise."""
    lo, sep, hi = text.partition(":")
    try:
        if not sep:
            raise ValueError
        low = float(lo) if lo.strip() else 0.0
        high = float(hi) if hi.strip() else math.inf
    except ValueError:
        raise ValueError(f"--lr-range {text!r} is not LO:HI, e.g. 1e-4:3e-2") from None
    if not 0 <= low <= high:
        raise ValueError(f"--lr-range {text!r}: expected 0 <= LO <= HI")
    return Range(low, high, "--lr-range")


def stable_range(arms: Sequence[Arm]) -> Range | None:
    """The grid's rates below the lowest rate at which any arm stalls; None where no arm stalls
    (the whole grid is stable) or the range would hold fewer than two rates."""
    rates = sorted({p.rate for a in arms for p in a.points})
    stalls = [p.rate for a in arms for p in a.points if p.stalled]
    if not stalls:
        return None
    below = [r for r in rates if r < min(stalls)]
    if len(below) < 2:
        return None
    return Range(below[0], below[-1], f"below {min(stalls):g}, where an arm first stalls")


def reaches_divergence(arm: Arm) -> bool:
    """Whether the arm stalls (lr_sweep.RatePoint.stalled) at some rate of the grid."""
    return any(p.stalled for p in arm.points)


def _seeds(arm: Arm, points) -> list:
    common = set.intersection(*(set(p.values) for p in points)) if points else set()
    return sorted(common, key=sort_key)


def _basin(values: Sequence[float], best: float, tol: float, goal_max: bool) -> int:
    return sum(1 for v in values if (best - v if goal_max else v - best) <= tol)


def _decades(rates: Sequence[float], values, best: float, tol: float, goal_max: bool) -> float:
    """The span, in factors of 10, of the unbroken run of rates within tol of the best around
    the best rate."""
    ok = [(best - v if goal_max else v - best) <= tol for v in values]
    i = values.index(best)
    lo = hi = i
    while lo > 0 and ok[lo - 1]:
        lo -= 1
    while hi < len(ok) - 1 and ok[hi + 1]:
        hi += 1
    return math.log10(rates[hi] / rates[lo])


def read(
    arm: Arm, goal_max: bool, tol: float, best_of_all: float, where: Range | None = None
) -> Reading | None:
    """The arm's Reading on `where` (None: the whole grid), over the seeds with a value at every
    rate of it; None with fewer than two rates or no such seed."""
    points = [p for p in arm.points if where is None or where.holds(p.rate)]
    seeds = _seeds(arm, points)
    if len(points) < 2 or not seeds:
        return None
    rates = tuple(p.rate for p in points)
    per_seed, basin = {}, {}
    for s in seeds:
        row = [p.values[s] for p in points]
        per_seed[s] = sensitivity_of(row, goal_max)
        basin[s] = _basin(row, max(row) if goal_max else min(row), tol, goal_max)
    means = [math.fsum(p.values[s] for s in seeds) / len(seeds) for p in points]
    best = max(means) if goal_max else min(means)
    return Reading(
        rates,
        per_seed,
        basin,
        _basin(means, best, tol, goal_max),
        _decades(rates, means, best, tol, goal_max),
        _basin(means, best_of_all, tol, goal_max),
    )


def best_of_all(arms: Sequence[Arm], goal_max: bool, where: Range | None = None) -> float | None:
    """The best mean of any arm at any rate of `where`."""
    means = [
        p.mean()
        for a in arms
        for p in a.points
        if p.mean() is not None and (where is None or where.holds(p.rate))
    ]
    if not means:
        return None
    return max(means) if goal_max else min(means)


def difference(arm: dict, base: dict) -> stats.Difference | None:
    """Arm against base (seed -> figure): Welch's t-test, or the exact permutation test where
    one or both have no spread (two equal constants: no test); None with fewer than two seeds
    in either."""
    if len(arm) < 2 or len(base) < 2:
        return None
    a, b = list(arm.values()), list(base.values())
    if len(set(a)) == 1 and len(set(b)) == 1 and a[0] != b[0]:  # both constant, apart
        return stats.exact(a, b)
    return stats.welch(a, b)
