"""A metric's curve over training steps, read from a run's metrics.csv (Lightning's CSVLogger)."""

from __future__ import annotations

import csv
from pathlib import Path


def read_curve(metrics_csv: Path, metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric from a Lightning CSVLogger file (sparse rows skipped)."""
    points: dict[int, float] = {}
    try:
        with open(metrics_csv, newline="") as f:
            for row in csv.DictReader(f):
                step, value = row.get("step"), row.get(metric)
                if step not in (None, "") and value not in (None, ""):
                    try:
                        points[int(float(step))] = float(value)
                    except ValueError:
                        continue
    except OSError:
        return [], []
    steps = sorted(points)
    return steps, [points[s] for s in steps]
