#!/usr/bin/env python
"""Section 3c's seeds at each head count's best rate in one CSV (docs/REPRODUCTION.md, issue 51):
every h at peak 8e-3, seeds 1-5 (or more), each row with its own git_commit.

Joins
    <heads_best runs.csv>     sweeps/heads_best.yaml: every h, seeds 2-5 (attnlab-compare <its
                              --out> --out <dir>: <dir>/runs.csv)
    --more <runs.csv> ...     further seeds of every h at 8e-3 (sweeps/heads_best_more.yaml:
                              seeds 6-10), the same layout
    <seed-1 runs.csv> ...     single runs of seed 1 at 8e-3, each given as N=<runs.csv> (h = 8:
                              the heads_check rerun; h = 1: its rerun at the heads_best commit)
    docs/results/heads_rate.csv  the rate grids' seed-1 rows at 8e-3, for the h not given above
into one table keyed by (model.n_heads, seed) in runs.csv's layout, so attnlab-compare reads it
back as runs.

    python scripts/heads_best_csv.py <heads_best runs.csv> 8=<heads_check runs.csv> \
        1=<heads_h1_seed1 runs.csv> --more <heads_best_more runs.csv> \
        --out docs/results/heads_best.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

from heads_rate_csv import RESULTS, _rows, write_runs  # the grids' CSV: same layout

PEAK = 0.008


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("heads_best", type=Path, help="runs.csv of sweeps/heads_best.yaml")
    parser.add_argument("seed_one", nargs="*", help="N=<runs.csv>: h = N's seed-1 run at 8e-3")
    parser.add_argument("--more", type=Path, nargs="*", default=[], help="runs.csv of more seeds")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    table: dict[tuple, dict] = {}
    for row in _rows(RESULTS / "heads_rate.csv"):  # the grids' seed-1 points at 8e-3
        if float(row["scheduler.peak_lr"]) == PEAK and row["seed"] == "1":
            table[int(row["model.n_heads"]), 1] = row
    for given in args.seed_one:  # reruns at a newer commit replace them
        heads, _, path = given.partition("=")
        (row,) = _rows(Path(path))
        table[int(heads), 1] = {**row, "model.n_heads": heads, "seed": "1"}
    for path in (args.heads_best, *args.more):
        for row in _rows(path):
            key = int(row["model.n_heads"]), int(row["seed"])
            if key in table and int(row["seed"]) != 1:
                raise SystemExit(f"{path}: n_heads={key[0]} seed={key[1]} is in two inputs")
            if row["status"] == "completed":
                table[key] = row
    for row in table.values():  # a resumed run's record holds its last attempt's wall time only
        elapsed = row.get("time/elapsed_s") or ""
        if elapsed and float(elapsed) > float(row["wall_time_s"] or 0):
            row["wall_time_s"] = f"{float(elapsed):.2f}"  # training time over all attempts
    write_runs(args.out, ["model.n_heads"], table, drop=("scheduler.peak_lr",))


if __name__ == "__main__":
    main()
