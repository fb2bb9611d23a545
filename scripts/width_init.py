#!/usr/bin/env python
"""Section 2's width confounds, measured at initialization (no training): for each arm of
sweeps/lr_width.yaml (Post-LN and Pre-LN, with and without qk-layernorm) at d_model 32, 64 and
128 (d_ff = 4 d_model, 4 heads, 6+6 layers), and for seeds 1-5, the first training batch's
loss (the runs' `nll_init`: the same config, seed, data order and batch as the sweep's step 0)
and, per layer, the gradient norm of the feed-forward network's output matrix W_2 (Xiong et
al.'s (2020) measure, beside the whole-layer norms of section 2's grad_norms_init).

Writes a CSV (one row per arm, width and seed) and prints, per arm and width, the median loss
and the decoder's last-to-first W_2 gradient ratio over the seeds:

    python scripts/width_init.py --out docs/results/width_init.csv

The runs' own nll_init of seeds 1 and 2 (docs/results/lr_width.csv) are the check that this
is the sweep's initialization: the script prints the largest difference from them.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# the arms of sweeps/lr_width.yaml (Post-LN without warmup initializes as Post-LN): name ->
# (model.norm_position, model.qk_norm) as the sweep's CSV writes them
ARM_VALUES = {
    "post": ("post", "false"),
    "post_qk": ("post", "true"),
    "pre": ("pre", "false"),
    "pre_qk": ("pre", "true"),
}
ARMS = {
    arm: [f"model.norm_position={norm}", f"model.qk_norm={qk}"]
    for arm, (norm, qk) in ARM_VALUES.items()
}
WIDTHS = (32, 64, 128)


def sweep_command() -> list[str]:
    """sweeps/lr_width.yaml's fixed overrides (its command's key=value items)."""
    spec = yaml.safe_load((REPO / "sweeps" / "lr_width.yaml").read_text())
    keep = [c for c in spec["command"] if "=" in c and not c.startswith("${")]
    return [c for c in keep if c.split("=")[0] not in ("group", "tags", "hydra.run.dir")]


def measure(overrides: list[str]) -> dict:
    """The first training batch's nll and each layer's W_2 gradient norm at initialization."""
    import torch

    from attnlab.config.compose import compose_config
    from attnlab.config.location import conf_dir
    from attnlab.pipeline.build import build

    cfg = compose_config(
        conf_dir(), [*overrides, "logger=none", "callbacks=none", "paths.run_dir=/tmp/width_init"]
    )
    built = build(cfg, run_dir=Path("/tmp/width_init"))
    built.datamodule.setup("fit")
    batch = next(iter(built.datamodule.train_dataloader()))
    module = built.module
    loss, nll, *_ = module._objective(batch)
    loss.backward()
    out = {"nll_init": float(nll)}
    for name, p in module.model.named_parameters():
        if name.endswith("ffn.w_2.weight"):
            out[f"grad_w2/{name.removesuffix('.ffn.w_2.weight')}"] = float(p.grad.norm())
    torch.set_num_threads(1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("width_init.csv"))
    parser.add_argument("--seeds", default="1,2,3,4,5")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    base = sweep_command()
    rows = []
    for arm, arm_overrides in ARMS.items():
        for width in WIDTHS:
            for seed in seeds:
                over = [*base, *arm_overrides, f"model.d_model={width}", f"seed={seed}"]
                rows.append({"arm": arm, "d_model": width, "seed": seed, **measure(over)})
                dec = rows[-1]
                dec["grad_w2_ratio"] = (
                    dec["grad_w2/decoder.layers.5"] / dec["grad_w2/decoder.layers.0"]
                )
                print(f"{arm} d_model={width} seed={seed}: nll_init {rows[-1]['nll_init']:.4f}",
                      file=sys.stderr, flush=True)  # fmt: skip
    write_runs_table(args.out, rows)
    print("| arm | d_model | median nll_init | decoder W_2 gradient, last / first layer |")
    print("| --- | --- | --- | --- |")
    for arm in ARMS:
        for width in WIDTHS:
            mine = [r for r in rows if r["arm"] == arm and r["d_model"] == width]
            ratio = [r["grad_w2/decoder.layers.5"] / r["grad_w2/decoder.layers.0"] for r in mine]
            median = statistics.median(r["nll_init"] for r in mine)
            spread = f"{statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})"
            print(f"| {arm} | {width} | {median:.3f} | {spread} |")
    check(rows)
    return 0


def write_runs_table(path: Path, rows: list[dict]) -> None:
    """A runs table attnlab-compare reads (the arm's keys, seed, status, wall time, commit, then
    the measures), so that the report embeds its tables from it."""
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    measures = [k for k in rows[0] if k not in ("arm", "d_model", "seed")]
    header = ["model.norm_position", "model.qk_norm", "model.d_model", "seed", "status"]
    header += ["wall_time_s", "git_commit", *measures]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for r in rows:
            norm, qk = ARM_VALUES[r["arm"]]
            writer.writerow([norm, qk, r["d_model"], r["seed"], "completed", "", commit,
                             *(r[m] for m in measures)])  # fmt: skip


def check(rows: list[dict]) -> None:
    """The largest difference from the sweep's own nll_init (docs/results/lr_width.csv)."""
    sweep = REPO / "docs" / "results" / "lr_width.csv"
    worst = 0.0
    with open(sweep, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("scheduler.warmup_steps") != "300" or not r.get("nll_init"):
                continue
            for mine in rows:
                norm, qk = ARM_VALUES[mine["arm"]]
                here = (r["model.norm_position"], r["model.qk_norm"], r["model.d_model"], r["seed"])
                if here == (norm, qk, str(mine["d_model"]), str(mine["seed"])):
                    worst = max(worst, abs(float(r["nll_init"]) - mine["nll_init"]))
    print(f"largest difference from the sweep's own nll_init (seeds 1-2): {worst:.2g}")


if __name__ == "__main__":
    sys.exit(main())
