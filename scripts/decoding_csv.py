#!/usr/bin/env python3
"""docs/results/decoding.csv and averaging.csv from the label-smoothing sweep's attnlab-eval files.

Each run of sweeps/label_smoothing.yaml is scored by attnlab-eval several ways (scripts/
reproduce.sh): its best-val/nll checkpoint with greedy search and with beam 4 at length penalty
0, 0.6 and 1.0 (decoding.csv, key `decode`), and its last checkpoint and the average of its last
5 (beam 4, 0.6; averaging.csv, key `checkpoint`). Each file has one row per (way, run) in
attnlab-compare's runs.csv form, the run (label smoothing and seed, e.g. `ls0.1-s2`) as the
seed, so that

    attnlab-compare docs/results/decoding.csv --metric bleu --baseline decode=greedy --paired

tests each way against another on the same 6 runs (a paired test: the same model scored twice).

    python scripts/decoding_csv.py outputs/repro/label_smoothing docs/results
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

TABLES = {  # file -> (its key, the attnlab-eval outputs it holds)
    "decoding.csv": ("decode", ("greedy", "beam4_lp0.0", "beam4_lp0.6", "beam4_lp1.0")),
    "averaging.csv": ("checkpoint", ("last", "avg5")),
}
SCORES = ("bleu", "chrf", "nll")


def main(sweep: str, out_dir: str) -> None:
    for name, (key, ways) in TABLES.items():
        write(sweep, Path(out_dir) / name, key, ways)


def write(sweep: str, out: Path, key: str, ways: tuple[str, ...]) -> None:
    rows = []
    for results in sorted(Path(sweep).glob("*/results.json")):
        record = json.loads(results.read_text())
        config = record["config"]
        run = f"ls{config['loss.label_smoothing']}-s{config['seed']}"
        for way in ways:
            path = results.parent / "eval" / f"{way}.json"
            if path.is_file():
                scores = json.loads(path.read_text())
                commit = record.get("git_commit", "")  # the commit the run was trained at
                rows.append(
                    [way, run, "completed", scores["wall_time_s"], commit]
                    + [scores[s] for s in SCORES]
                )
    rows.sort(key=lambda r: (ways.index(r[0]), r[1]))
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([key, "seed", "status", "wall_time_s", "git_commit", *SCORES])
        writer.writerows(rows)
    print(f"{out}: {len(rows)} rows")


if __name__ == "__main__":
    if len(sys.argv) != 3 or not Path(sys.argv[1]).is_dir():
        sys.exit("usage: scripts/decoding_csv.py SWEEP_DIR OUT_DIR (a label_smoothing sweep)")
    main(*sys.argv[1:3])
