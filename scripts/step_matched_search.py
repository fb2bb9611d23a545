#!/usr/bin/env python3
"""A step-matched search for experiment=multi30k_cpu's recipe, its training on a GPU.

A recipe's 10 minutes on the 2-core CPU give it a number of optimizer steps that depends on its
shape (a narrower FFN: more steps; a larger vocabulary: fewer). This script measures each
candidate's CPU step time here, turns it into the steps 10 minutes give, and trains every
candidate for exactly those steps on a GPU (the cosine decays to 0 at that step, as
callbacks.time_horizon makes it on the CPU), several runs at once, then tests with beam 4: six
CPU hours of runs in 12 GPU minutes. Validation BLEU is on the whole validation set
(1014 sentences) so that a recipe is chosen on validation, not on test_2016. The winners are
then checked the real way: `attnlab-train experiment=multi30k_cpu ...` on the CPU, 10 minutes.

    # here, on the 2-core CPU, nothing else running (about a minute a candidate):
    python scripts/step_matched_search.py steptime --json steptime.json [NAME ...]
    python scripts/step_matched_search.py jobs steptime.json --base-steps 1835 --seeds 1 2 3 \\
        --out .battery/jobs.json
    # there, on the GPU (data and wheels carried in .battery/ and .whl/, see gpu_battery.sh):
    python scripts/step_matched_search.py run .battery/jobs.json --deadline 490 --workers 12
    # then: docs/results/multi30k_cpu_step_matched.csv from the runs' rows.jsonl
    python scripts/step_matched_search.py csv rows.jsonl > multi30k_cpu_step_matched.csv

Measured 2026-11-26 (docs/real_text.md, "Round three"): 36 runs on one H100 in two calls, their
steps from an earlier, one-after-another timing of 40 steps of one batch per candidate, which
gave the leaders too many steps (d_ff 256: 2,376, where real CPU runs reached 1,913). Round four
(same date, a 2-core machine twice as fast): 18 runs on one H100 from a hand-written job list
(docs/results/multi30k_cpu_round4_jobs.json: dropout at two or three step counts around its
unknown CPU cost), 12 then 6 runs at once, about 6 and 4 minutes.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# name -> overrides on experiment=multi30k_cpu (the shape and data candidates change the step time);
# "base" is the preset as it is: rounds three and four ran it with dropout 0 (before 0.1 was taken)
CANDIDATES = {
    "base": [],
    "drop0": ["model.dropout=0.0"],
    "e4d2": ["model.n_encoder_layers=4", "model.n_decoder_layers=2"],
    "e5d1": ["model.n_encoder_layers=5", "model.n_decoder_layers=1"],
    "e6d2": ["model.n_encoder_layers=6", "model.n_decoder_layers=2"],
    "e4d3": ["model.n_encoder_layers=4", "model.n_decoder_layers=3"],
    "d160": ["model.d_model=160", "model.d_ff=640"],
    "d192": ["model.d_model=192", "model.d_ff=768"],
    "d256l2": [
        "model.d_model=256",
        "model.d_ff=1024",
        "model.n_encoder_layers=2",
        "model.n_decoder_layers=2",
    ],
    "e4d2_d160": [
        "model.n_encoder_layers=4",
        "model.n_decoder_layers=2",
        "model.d_model=160",
        "model.d_ff=640",
    ],
    "ff1024": ["model.d_ff=1024"],
    "ff256": ["model.d_ff=256"],
    "v3000": ["data.vocab_size=3000"],
    "v6000": ["data.vocab_size=6000"],
    "v8000": ["data.vocab_size=8000"],
    "tok2000": ["data.max_tokens=2000"],
    "tok4500": ["data.max_tokens=4500"],
    # pairs, second wave (their steps: the product of the two step-time ratios, by hand)
    "ff256v3000": ["model.d_ff=256", "data.vocab_size=3000"],
    "ff256lr3.5": ["model.d_ff=256", "scheduler.peak_lr=3.5e-3"],
    # the same step time as base: its steps
    "lr3.5e-3": ["scheduler.peak_lr=3.5e-3"],
    "lr7e-3": ["scheduler.peak_lr=7e-3"],
    "wu100": ["scheduler.warmup_steps=100"],
    "ls0.2": ["loss.label_smoothing=0.2"],
    # round four (a machine with twice the step rate: ~3,960 steps in 10 minutes, overfitting at
    # the end without dropout); its jobs (docs/results/multi30k_cpu_round4_jobs.json, base there
    # with model.dropout=0.0, as the preset was) bracket dropout's unknown CPU cost with two or
    # three step counts instead of a timing
    "drop0.05": ["model.dropout=0.05"],
    "drop0.1": ["model.dropout=0.1"],
    "drop0.2": ["model.dropout=0.2"],
    "drop0.1_lr7e-3": ["model.dropout=0.1", "scheduler.peak_lr=7e-3"],
    "drop0.1_v6000": ["model.dropout=0.1", "data.vocab_size=6000"],
    "drop0.1_v8000": ["model.dropout=0.1", "data.vocab_size=8000"],
    "drop0.05_v6000": ["model.dropout=0.05", "data.vocab_size=6000"],
    "drop0.1_ff1024": ["model.dropout=0.1", "model.d_ff=1024"],
    "drop0.1_d192": ["model.dropout=0.1", "model.d_model=192", "model.d_ff=768"],
    "drop0.1_e4d4": ["model.dropout=0.1", "model.n_encoder_layers=4", "model.n_decoder_layers=4"],
}
SAME_STEPS_AS_BASE = ("lr3.5e-3", "lr7e-3", "wu100", "ls0.2")
PRESET = ["experiment=multi30k_cpu", "data.root=../shared/data/multi30k", "logger=none"]


def steptime(args) -> None:
    """CPU seconds per training step of each candidate, with the preset's 2 threads: attnlab-bench's
    training step (attnlab.bench.training_step.Stepper) on each candidate's first 24 training
    batches, the candidates taking turns (attnlab.bench.timing.interleave: 5 repeats of 24 steps,
    the median), because this machine's speed drifts by 10-20% within minutes: timed one after
    another, the first search's candidates were off by up to 17% (docs/real_text.md). This is
    the model's step alone: attnlab-train's loop can disagree (d_ff 256: 0.85x here, 4% more
    steps than d_ff 512 in real 10-minute runs), so check a finalist's steps with a real run."""
    import torch

    from attnlab.bench.context import build_context
    from attnlab.bench.timing import interleave
    from attnlab.bench.training_step import Stepper

    torch.set_num_threads(2)
    blocks = {}
    for name in args.names or list(CANDIDATES):
        ctx = build_context([*PRESET, *CANDIDATES[name]], device="cpu", steps=24, n_batches=24)
        stepper = Stepper(ctx, ctx.new_model())
        stepper.warm_up()
        blocks[name] = stepper.block(24)
    medians = {name: s["median_s"] for name, s in interleave(blocks, args.repeats).items()}
    for name, seconds in medians.items():
        print(f"{name:12s} {seconds * 1000:.1f} ms/step", flush=True)
    Path(args.json).write_text(json.dumps(medians, indent=1))


def jobs(args) -> None:
    """The job list: each candidate's steps = base steps x base step time / its step time (a
    multiple of 4, so that its fourth validation falls on its last step), or the steps a real CPU
    run reached (--steps NAME=N, the better figure: see steptime); seeds in the outer
    loop, so that a deadline cuts whole seeds, not whole candidates."""
    times = json.loads(Path(args.steptime).read_text())
    measured = {k: int(v) for k, v in (item.split("=") for item in args.steps)}
    out = []
    for seed in args.seeds:
        for name in args.names or list(CANDIDATES):
            timed = name not in SAME_STEPS_AS_BASE
            steps = args.base_steps * (times["base"] / times[name] if timed else 1)
            steps = measured.get(name, steps)
            out.append({"name": f"{name}_s{seed}", "seed": seed, "steps": round(steps / 4) * 4,
                        "overrides": CANDIDATES[name]})  # fmt: skip
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"{len(out)} jobs in {args.out}")


def _command(job: dict, runs: Path) -> list[str]:
    n = job["steps"]
    return [sys.executable, "-m", "attnlab.cli.train", "experiment=multi30k_cpu",
            f"data.root={os.environ.get('DATA', '.battery/multi30k')}", "logger=csv",
            f"paths.root={runs}", f"name={job['name']}", f"seed={job['seed']}",
            f"trainer.accelerator={os.environ.get('ACCEL', 'gpu')}", "torch_threads=1",
            "~callbacks.time_horizon", "trainer.max_time=null", f"trainer.max_steps={n}",
            f"scheduler.max_steps={n}", f"trainer.val_check_interval={n // 4}",
            "checkpoint.every_n_steps=1000000", "checkpoint.keep_last=1",
            "callbacks.translation_quality.val_subset=2000", *job["overrides"],
            *os.environ.get("EXTRA", "").split()]  # fmt: skip


def run(args) -> None:
    """Train and test each job (a thread per worker, a process per job) until the deadline;
    each finished job's results.json becomes a line of $OUT/rows.jsonl."""
    out, runs = Path(os.environ.get("OUT", "step-matched-out")), Path(args.runs)
    out.mkdir(parents=True, exist_ok=True)
    todo = json.loads(Path(args.jobs).read_text())
    t0 = time.time()
    deadline = t0 + args.deadline

    def one(job: dict) -> None:
        left = deadline - time.time()
        if left < 60:
            return
        start = time.time()
        try:
            p = subprocess.run(_command(job, runs), capture_output=True, text=True, timeout=left)
            rc, tail = p.returncode, (p.stdout + p.stderr)[-1500:]
        except subprocess.TimeoutExpired:
            rc, tail = "timeout", ""
        row = {"job": job, "rc": rc, "wall": round(time.time() - start, 1)}
        found = sorted(runs.glob(f"{job['name']}/*/results.json"))
        if found:
            row["results"] = json.loads(found[-1].read_text())
            shutil.copy(found[-1], out / f"{job['name']}.results.json")
        else:
            row["tail"] = tail
        bleu = row.get("results", {}).get("metrics", {}).get("test/bleu")
        print(f"{time.time() - t0:6.0f}s {job['name']:20s} rc={rc} bleu={bleu}", flush=True)
        with open(out / "rows.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")

    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(one, todo))


def to_csv(args) -> None:
    """rows.jsonl (one or more) as attnlab-compare's runs.csv: recipe, steps, seed, metrics. A job
    named NAME-STEPS_sSEED (a recipe run at several step counts) is recipe NAME at STEPS."""
    keys = ("test/bleu", "test/chrf", "test/nll", "val/bleu", "val/chrf", "val/nll")
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["recipe", "steps", "seed", "status", "wall_time_s", "git_commit", *keys])
    for path in args.rows:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            if "results" not in row:
                continue
            job, metrics = row["job"], row["results"]["metrics"]
            recipe = job["name"].rsplit("_s", 1)[0].removesuffix(f"-{job['steps']}")
            writer.writerow([recipe, job["steps"], job["seed"],
                             row["results"]["status"], row["wall"],
                             row["results"].get("git_commit", ""),
                             *(round(metrics[k], 4) for k in keys)])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("steptime")
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("--json", default="steptime.json")
    p.add_argument("--repeats", type=int, default=5)
    p.set_defaults(func=steptime)
    p = sub.add_parser("jobs")
    p.add_argument("steptime")
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("--base-steps", type=int, required=True, help="base's steps in 10 CPU minutes")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument(
        "--steps", nargs="*", default=[], metavar="NAME=N",
        help="steps a real 10-minute CPU run of NAME reached (its results.json), over the timing",
    )  # fmt: skip
    p.add_argument("--out", default="jobs.json")
    p.set_defaults(func=jobs)
    p = sub.add_parser("run")
    p.add_argument("jobs")
    p.add_argument("--deadline", type=float, default=490, help="seconds; no job starts after -60")
    p.add_argument("--workers", type=int, default=12)
    p.add_argument("--runs", default="/tmp/step-matched-runs")
    p.set_defaults(func=run)
    p = sub.add_parser("csv")
    p.add_argument("rows", nargs="+")
    p.set_defaults(func=to_csv)
    args = parser.parse_args()
    named = [*getattr(args, "names", []), *(i.split("=")[0] for i in getattr(args, "steps", []))]
    unknown = [n for n in named if n not in CANDIDATES]
    if unknown:
        parser.error(f"unknown candidate {unknown[0]!r}; choose from {', '.join(CANDIDATES)}")
    bad = [i for i in getattr(args, "steps", []) if not re.fullmatch(r"[^=]+=[1-9][0-9]*", i)]
    if bad:
        parser.error(f"--steps {bad[0]!r}: expected NAME=N, N a positive number of steps")
    args.func(args)


if __name__ == "__main__":
    main()
