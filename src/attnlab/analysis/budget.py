"""Was the budget enough? A run's monitored metric over the last 10% of its steps.

Every run selects its checkpoint on the unsmoothed validation nll (val/nll), so that is the
metric whose curve says whether a run had converged. For one run, `late_gain` is how much val/nll
still fell from the last validation at or before 90% of the run's steps to its final one (> 0:
still improving). An arm whose mean late gain exceeds the spread of its seeds' final val/nll (the
sample std) was still improving by more than the noise when it stopped, and a comparison of it
may answer a question about the budget rather than the architecture: attnlab-compare says so in
its verdict.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from attnlab.analysis.curves import read_curve

MONITORED = "val/nll"
LATE_GAIN = "budget/val_nll_late_gain"  # stored with the run's metrics (and in runs.csv)
LATE_FRACTION = 0.1
NOTE = "still improving at the end: a longer budget may change this comparison"


def late_gain(steps: Sequence[int], values: Sequence[float], fraction: float = LATE_FRACTION):
    """values[at the last step <= (1 - fraction) * final step] - values[final]; None with fewer
    than two points or no point that early."""
    if len(steps) < 2:
        return None
    cutoff = (1.0 - fraction) * steps[-1]
    earlier = [i for i, s in enumerate(steps[:-1]) if s <= cutoff]
    if not earlier:
        return None
    return float(values[earlier[-1]] - values[-1])


def run_late_gain(run_dir: Path) -> float | None:
    """late_gain of val/nll in the run's metrics.csv (None without one)."""
    steps, values = read_curve(run_dir / "metrics.csv", MONITORED)
    return late_gain(steps, values)


def still_improving(runs) -> tuple[float, float] | None:
    """(mean late gain, seeds' spread of the final val/nll) when the first exceeds the second
    for these completed runs, else None (also with fewer than 2 seeds: no spread to judge by)."""
    gains = [r.metrics[LATE_GAIN] for r in runs if LATE_GAIN in r.metrics]
    finals = [r.metrics[MONITORED] for r in runs if MONITORED in r.metrics]
    if len(gains) < 2 or len(finals) < 2:
        return None
    gain = statistics.fmean(gains)
    spread = statistics.stdev(finals)
    return (gain, spread) if gain > spread else None
