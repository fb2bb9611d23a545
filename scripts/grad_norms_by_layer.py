#!/usr/bin/env python
"""Each layer's gradient norm at initialization and at step 100, Post-LN against Pre-LN
(sweeps/grad_norms_init.yaml; docs/REPRODUCTION.md section 2, Xiong et al.'s mechanism).

Reads every run of the sweep's folder (results.json for the arm, seed and commit; metrics.csv for
diag/grad_norm/<layer> at step 0, before any update, and at step 99, the 100th step) and writes
    --csv   one row per run in runs.csv's layout (attnlab-compare reads it back): the metrics
            grad_norm_init/<layer>, grad_norm_step100/<layer> and, per stack, the last layer's
            norm over the first's at initialization (<stack>_last_over_first)
    --plot  the norms by layer (encoder 0-5, then decoder 0-5), one panel per step, every seed a
            point, the mean a line, log scale

    python scripts/grad_norms_by_layer.py outputs/sweeps/grad_norms_init \
        --csv docs/results/grad_norms_init.csv --plot docs/img/reproduction/grad_norms_init.png
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

PREFIX = "diag/grad_norm/"
STEPS = {"init": 0, "step100": 99}  # metrics.csv's step: 0-based, logged after the update


def read_run(folder: Path) -> dict | None:
    """One run's row: norm_position, seed, status, wall time, commit and the norms."""
    record = json.loads((folder / "results.json").read_text())
    norms: dict[str, float] = {}
    with open(folder / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            for label, step in STEPS.items():
                if row["step"] and int(row["step"]) == step:
                    for key, value in row.items():
                        if key.startswith(PREFIX) and value:
                            norms[f"grad_norm_{label}/{key[len(PREFIX) :]}"] = float(value)
    if not norms:
        return None
    for stack in ("encoder", "decoder"):
        layers = sorted(
            (k for k in norms if k.startswith(f"grad_norm_init/{stack}.")),
            key=lambda k: int(k.rsplit(".", 1)[1]),
        )
        if layers:
            ratio = norms[layers[-1]] / norms[layers[0]]
            norms[f"grad_norm_init/{stack}_last_over_first"] = ratio
    return {
        "model.norm_position": record["config"]["model.norm_position"],  # flat keys
        "seed": record["seed"],
        "status": record["status"],
        "wall_time_s": record["wall_time_s"],
        "git_commit": record["git_commit"],
        **norms,
    }


def write_csv(rows: list[dict], out: Path) -> None:
    fixed = ["model.norm_position", "seed", "status", "wall_time_s", "git_commit"]
    metrics = sorted({k for r in rows for k in r} - set(fixed))
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fixed + metrics)
        writer.writeheader()
        writer.writerows(sorted(rows, key=lambda r: (r["model.norm_position"], r["seed"])))
    print(f"{len(rows)} rows -> {out}")


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = [f"encoder.layers.{i}" for i in range(6)] + [f"decoder.layers.{i}" for i in range(6)]
    labels = [f"enc {i}" for i in range(6)] + [f"dec {i}" for i in range(6)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, (label, step) in zip(axes, STEPS.items(), strict=True):
        for color, norm in (("C0", "post"), ("C1", "pre")):
            runs = [r for r in rows if r["model.norm_position"] == norm]
            xs = range(len(layers))
            for r in runs:
                ax.scatter(xs, [r[f"grad_norm_{label}/{n}"] for n in layers], color=color, s=10,
                           alpha=0.5)  # fmt: skip
            means = [statistics.fmean(r[f"grad_norm_{label}/{n}"] for r in runs) for n in layers]
            ax.plot(
                xs, means, "-o", color=color, markersize=4, label=f"{norm}-LN ({len(runs)} seeds)"
            )
        ax.set_yscale("log")
        ax.set_xticks(range(len(layers)), labels, rotation=60, fontsize=8)
        ax.axvline(5.5, color="grey", lw=0.8, ls=":")
        title = "at initialization (step 0)" if step == 0 else f"at step {step + 1}"
        ax.set_title(f"gradient norm of each layer, {title}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("L2 norm of the layer's gradient (training batch)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"-> {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="the folder of sweeps/grad_norms_init.yaml")
    parser.add_argument("--csv", type=Path, required=True)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    rows = [read_run(p.parent) for p in sorted(args.sweep.glob("*/results.json"))]
    rows = [r for r in rows if r is not None and r["status"] == "completed"]
    if not rows:
        raise SystemExit(f"grad_norms_by_layer.py: no completed run with {PREFIX}* in {args.sweep}")
    write_csv(rows, args.csv)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
