"""Timing contenders fairly on a shared machine: warm-up first, then repeats in which the
contenders take turns (ABBA order), each repeat timing a block of steps; the median of the
repeats is the figure, the spread (max - min over median) says how much to trust it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so the clock measures it (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_block(run: Callable[[], None], device: torch.device) -> float:
    """Wall seconds of run(), queued device work included."""
    synchronize(device)
    start = time.perf_counter()
    run()
    synchronize(device)
    return time.perf_counter() - start


def summarize(samples: list[float]) -> dict:
    """{"median_s", "min_s", "max_s", "spread_pct", "repeats"} of per-step seconds."""
    median = statistics.median(samples)
    return {
        "median_s": median,
        "min_s": min(samples),
        "max_s": max(samples),
        "spread_pct": 100.0 * (max(samples) - min(samples)) / median if median else 0.0,
        "repeats": len(samples),
    }


def interleave(blocks: dict[str, Callable[[], float]], repeats: int) -> dict[str, dict]:
    """Call each block `repeats` times, the contenders taking turns (order reversed every
    other repeat, so neither always runs first); each call returns seconds per step."""
    samples: dict[str, list[float]] = {name: [] for name in blocks}
    names = list(blocks)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            samples[name].append(blocks[name]())
    return {name: {**summarize(values), "samples_s": values} for name, values in samples.items()}


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """The distribution-free interval for the median of `values`: the order statistics
    (x_(k), x_(n+1-k)) with the largest k whose coverage, 1 - 2 P(Binomial(n, 1/2) < k), is
    still >= `confidence`; None where even (min, max) covers less (n < 6 for 95%)."""
    from scipy.stats import binom

    ordered, n = sorted(values), len(values)
    best = None
    for k in range(1, n // 2 + 1):
        if 1 - 2 * binom.cdf(k - 1, n, 0.5) < confidence:
            break
        best = (ordered[k - 1], ordered[n - k])
    return best


def median_interval_coverage(n: int, interval_k: int) -> float:
    """The coverage of (x_(k), x_(n+1-k)) for the median of n values."""
    from scipy.stats import binom

    return float(1 - 2 * binom.cdf(interval_k - 1, n, 0.5))


def ratio(slow: dict, fast: dict) -> float:
    """How many times faster `fast` is than `slow` (their median seconds per step)."""
    return slow["median_s"] / fast["median_s"]
