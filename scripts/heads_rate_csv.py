#!/usr/bin/env python
"""Section 3c's rate grid in one CSV: every head count's seed-1 runs of the heads protocol at
each peak rate (docs/REPRODUCTION.md, issue 51).

Joins the rows of
    docs/results/heads_avg5.csv       the heads sweep (peak 2e-3): its seed-1 runs
    docs/results/heads_lr.csv         h = 1 and 8 at 1e-3 .. 3.2e-2 (2e-3: the same runs as above)
    <heads_rate export>               h = 4, 12, 16 at 4e-3, 8e-3, 1.6e-2 (sweeps/heads_rate.yaml,
                                      attnlab-compare <its --out> --out <dir>: <dir>/runs.csv)
into one table keyed by (model.n_heads, scheduler.peak_lr), each row with its own git_commit;
a pair present twice (h = 1 and 8 at 2e-3) is kept once, from heads_lr.csv. The heads sweep's
rows get scheduler.peak_lr 0.002, the rate its file pins.

    python scripts/heads_rate_csv.py <heads_rate runs.csv> --out docs/results/heads_rate.csv
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("heads_rate", type=Path, help="runs.csv of sweeps/heads_rate.yaml")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    heads = [
        {**r, "scheduler.peak_lr": "0.002"}
        for r in _rows(RESULTS / "heads_avg5.csv")
        if r["seed"] == "1"
    ]
    table: dict[tuple, dict] = {}
    for row in [*heads, *_rows(RESULTS / "heads_lr.csv"), *_rows(args.heads_rate)]:
        key = (int(row["model.n_heads"]), float(row["scheduler.peak_lr"]))
        table[key] = row  # later sources win: heads_lr's 2e-3 rows are the same runs
    write_runs(args.out, ["model.n_heads", "scheduler.peak_lr"], table)


def write_runs(out: Path, keys: list[str], table: dict, drop: tuple[str, ...] = ()) -> None:
    """The rows of `table` in key order, in runs.csv's layout (attnlab.analysis.run_table): the
    keys, seed, status, wall_time_s, git_commit, then the metrics (every other column but
    `drop`), so attnlab-compare reads it back as runs."""
    columns = [*keys, "seed", "status", "wall_time_s", "git_commit"]
    extra = sorted({k for r in table.values() for k in r if k not in columns} - set(drop))
    rows = [table[k] for k in sorted(table)]
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns + extra, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows -> {out}")


if __name__ == "__main__":
    main()
