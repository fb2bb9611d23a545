#!/usr/bin/env python
"""How many steps would a sweep's arms need to converge? A power law a + b * s^-c fitted to each
arm's mean validation curve (metrics.csv of its runs), and the first step S (searched in 5%
increments) where the last 10% of a run, from 0.9 S to S, would gain less than the seeds'
standard deviation at the end: attnlab-compare's budget rule (attnlab.analysis.budget) read
forward. An extrapolation from the curve's points, not a measurement.

    python scripts/budget_to_converge.py outputs/repro/heads_best --key model.n_heads
    python scripts/budget_to_converge.py outputs/repro/heads_best outputs/repro/heads_best_more \
        --key model.n_heads      # several sweeps' runs pooled by arm
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import curve_fit


def curves(folder: Path, key: str, metric: str) -> dict:
    """{arm value: [ {step: value} per run ]} from each run's results.json and metrics.csv."""
    found: dict = {}
    for results in sorted(folder.glob("*/results.json")):
        record = json.loads(results.read_text())
        arm = record["config"].get(key)
        with open(results.parent / "metrics.csv", newline="") as f:
            points = {
                int(r["step"]) + 1: float(r[metric]) for r in csv.DictReader(f) if r.get(metric)
            }
        found.setdefault(arm, []).append(points)
    return found


def power(s, a, b, c):
    return a + b * np.power(s, -c)


def converge_step(runs: list[dict], limit: float = 1e7) -> tuple[int, tuple, float]:
    """(S, the fit's (a, b, c), the seeds' final standard deviation)."""
    steps = sorted(set.intersection(*(set(r) for r in runs)))
    mean = np.array([statistics.fmean(r[s] for r in runs) for s in steps])
    sd = statistics.stdev(r[steps[-1]] for r in runs)
    fit, _ = curve_fit(power, np.array(steps, float), mean, p0=(mean[-1] * 0.8, 50.0, 0.7),
                       maxfev=20000)  # fmt: skip
    s = float(steps[-1])
    while power(0.9 * s, *fit) - power(s, *fit) >= sd and s < limit:
        s *= 1.05
    return int(s), tuple(fit), sd


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="+", help="sweep folders of runs (pooled)")
    parser.add_argument("--key", required=True, help="the swept key that names an arm")
    parser.add_argument("--metric", default="val/nll")
    args = parser.parse_args()
    found: dict = {}
    for folder in args.folder:
        for arm, runs in curves(folder, args.key, args.metric).items():
            found.setdefault(arm, []).extend(runs)
    if not found:
        where = " ".join(map(str, args.folder))
        print(f"budget_to_converge.py: error: no run with {args.metric} in {where}",
              file=sys.stderr)  # fmt: skip
        return 2
    for arm, runs in sorted(found.items(), key=lambda kv: str(kv[0])):
        if len(runs) < 2:
            print(f"{args.key}={arm}: one run; the seeds' spread is needed")
            continue
        s, (a, b, c), sd = converge_step(runs)
        fit = f"fit a={a:.3f} b={b:.1f} c={c:.2f}"
        print(f"{args.key}={arm}: {len(runs)} runs, sd {sd:.3g} at the end; {fit}; the last 10% "
              f"gains less than sd from about {s} steps")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
