#!/usr/bin/env python
"""Section 2 across width in one CSV (docs/results/lr_width.csv): the runs of sweeps/lr_width*.yaml
(attnlab-compare over the width folders writes their runs.csv) and, for a width the width sweep
has not reached yet, section 2's own runs of the same protocol (docs/results/lr_sensitivity.csv is
d_model 64; tests/test_sweep_files.py checks that lr_width at d_model 64 is section 2's run, and
scripts/provenance.py that section 2's commit and HEAD train alike). Only the five arms of the
width design are kept (Pre/Post-LN x qk-layernorm with warmup 300, Post-LN without warmup or
qk-layernorm) and the seeds asked for; every row keeps its git_commit.

    attnlab-compare outputs/sweeps/lr_width/d32 outputs/sweeps/lr_width/d32-nowarmup \
        --metric val/nll --out /tmp/lr_width32
    python scripts/lr_width_csv.py /tmp/lr_width32/runs.csv --width 32 \
        --section2 docs/results/lr_sensitivity.csv --out docs/results/lr_width.csv

Seeds 3-4 of sweeps/lr_width_seeds.yaml beside seeds 1-2 of the same two arms and widths (its
runs.csv has a model.d_model column, so --width only pairs with it):

    python scripts/lr_width_csv.py docs/results/lr_width.csv /tmp/lws/runs.csv --width 0 \
        --width 0 --seeds 1,2,3,4 --arm pre,300,false --arm pre,300,true --widths 32,128 \
        --fill model.norm_position=pre --fill scheduler.warmup_steps=300 \
        --out docs/results/lr_width_seeds.csv
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

KEYS = ["model.d_model", "model.norm_position", "scheduler.warmup_steps", "model.qk_norm",
        "scheduler.peak_lr"]  # fmt: skip
FIXED = ["seed", "status", "wall_time_s", "git_commit", "machine"]  # machine: "" where not recorded
ARMS = {("post", "300", "false"), ("post", "300", "true"), ("pre", "300", "false"),
        ("pre", "300", "true"), ("post", "0", "false")}  # fmt: skip


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _arm(row: dict) -> tuple:
    return (row["model.norm_position"], row.get("scheduler.warmup_steps") or "300",
            row["model.qk_norm"].lower())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="runs.csv of the width folders")
    parser.add_argument(
        "--width", type=int, action="append", required=True,
        help="d_model of each runs.csv without a model.d_model column, in order",
    )  # fmt: skip
    parser.add_argument("--section2", type=Path, help="section 2's CSV, kept as d_model 64")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument(
        "--max-rate", type=float,
        help="keep rates up to this one only: one grid for every width in the table",
    )  # fmt: skip
    parser.add_argument(
        "--arm", action="append", metavar="NORM,WARMUP,QK",
        help="keep only these arms (e.g. pre,300,false); default: the five of the width design",
    )  # fmt: skip
    parser.add_argument("--widths", help="keep only these d_model values, e.g. 32,128")
    parser.add_argument(
        "--fill", action="append", default=[], metavar="KEY=VALUE",
        help="a key's value where a row has none (a runs.csv leaves out a key its sweep held "
        "constant, e.g. model.norm_position=pre)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    seeds = set(args.seeds.split(","))
    table = []
    for path, width in zip(args.runs, args.width, strict=True):
        for row in _rows(path):
            row.setdefault("model.d_model", str(width))
            row["model.d_model"] = row["model.d_model"] or str(width)
            table.append(row)
    for key, _, value in (f.partition("=") for f in args.fill):
        for row in table:
            row[key] = row.get(key) or value
    if args.section2:
        for row in _rows(args.section2):
            row["model.d_model"] = "64"
            table.append(row)
    arms = {tuple(a.lower().split(",")) for a in args.arm} if args.arm else ARMS
    ended = ("completed", "diverged", "failed", "pruned")  # a running trial is not a result yet
    kept = [r for r in table if _arm(r) in arms and r["seed"] in seeds and r["status"] in ended]
    if args.widths:
        kept = [r for r in kept if r["model.d_model"] in args.widths.split(",")]
    if args.max_rate is not None:
        kept = [r for r in kept if float(r["scheduler.peak_lr"]) <= args.max_rate * (1 + 1e-9)]
    for r in kept:
        r["scheduler.warmup_steps"] = r.get("scheduler.warmup_steps") or "300"
    # d_ff follows d_model (4 d_model): a column of it would split the old rows from the new
    metrics = sorted({k for r in kept for k in r} - set(KEYS) - set(FIXED) - {"model.d_ff"})
    kept.sort(key=lambda r: (int(r["model.d_model"]), _arm(r), float(r["scheduler.peak_lr"]),
                             int(r["seed"])))  # fmt: skip
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*KEYS, *FIXED, *metrics], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(kept)
    print(f"{len(kept)} rows -> {args.out}")


if __name__ == "__main__":
    main()
