#!/usr/bin/env python
"""ALiBi's (and no positional encoding's) length horizon against the model's shape.

Reads the runs of sweeps/alibi_shape.yaml as attnlab-compare exports them (a CSV with
model.pos_encoding, model.n_decoder_layers, model.d_model, seed and length/<L>/greedy_exact_match
columns) and prints, per encoding and shape, over the seeds:
    horizon   the longest evaluated length up to which greedy exact match stays >= 0.5 at every
              evaluated length (per seed; the training lengths are 1-12)
    EM@L      greedy exact match at length L (mean, 95% t-interval) for L in 12, 16, 24, 32, 48
and draws one figure: the horizon and exact match at 24 against d_model, a line per depth, a
panel per encoding, every seed a point.

    python scripts/alibi_horizon.py docs/results/alibi_shape.csv \
        --out docs/img/reproduction/alibi_horizon.png
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import defaultdict
from pathlib import Path

THRESHOLD = 0.5
SHOWN = (12, 16, 24, 32, 48)
KEYS = ("model.pos_encoding", "model.n_decoder_layers", "model.d_model")


def horizon(curve: dict[int, float], threshold: float = THRESHOLD) -> int:
    """The longest length L of `curve` (length -> exact match) such that every evaluated length
    up to L has exact match >= threshold; 0 if the shortest already falls below."""
    reached = 0
    for length in sorted(curve):
        if curve[length] < threshold:
            break
        reached = length
    return reached


def read_runs(path: Path) -> dict[tuple, list[dict[int, float]]]:
    """(pos_encoding, depth, d_model) -> one curve (length -> greedy exact match) per completed
    seed."""
    arms: dict[tuple, list[dict[int, float]]] = defaultdict(list)
    with path.open() as f:
        for row in csv.DictReader(f):
            if row.get("status", "completed") != "completed":
                continue
            curve = {
                int(k.split("/")[1]): float(v)
                for k, v in row.items()
                if k.startswith("length/") and k.endswith("/greedy_exact_match") and v != ""
            }
            key = (row[KEYS[0]], int(row[KEYS[1]]), int(row[KEYS[2]]))
            arms[key].append(curve)
    return dict(arms)


def mean_interval(values: list[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% t-interval (0 for one value or no spread)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)


def table(arms: dict[tuple, list[dict[int, float]]]) -> list[str]:
    head = "| encoding | depth | d_model | seeds | horizon (per seed) | " + " | ".join(
        f"EM@{n}" for n in SHOWN
    )
    lines = [head + " |", "|" + " --- |" * (5 + len(SHOWN))]
    for (pe, depth, width), curves in sorted(arms.items()):
        cells = []
        for n in SHOWN:
            values = [c[n] for c in curves if n in c]
            if not values:
                cells.append("-")
                continue
            mean, half = mean_interval(values)
            cells.append(f"{mean:.2f}" + ("" if math.isnan(half) else f" +- {half:.2f}"))
        horizons = ", ".join(str(horizon(c)) for c in curves)
        lines.append(
            f"| {pe} | {depth} | {width} | {len(curves)} | {horizons} | " + " | ".join(cells) + " |"
        )
    return lines


def figure(arms: dict[tuple, list[dict[int, float]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    encodings = sorted({k[0] for k in arms})
    fig, axes = plt.subplots(
        2, len(encodings), figsize=(4.2 * len(encodings), 6.4), sharex=True, sharey="row"
    )
    axes = [[axes[r]] if len(encodings) == 1 else list(axes[r]) for r in range(2)]
    for col, pe in enumerate(encodings):
        for depth, style in ((2, "o-"), (4, "s--")):
            widths = sorted({k[2] for k in arms if k[0] == pe and k[1] == depth})
            for row, (measure, name) in enumerate(
                ((horizon, "horizon (longest length, EM >= 0.5)"),
                 (lambda c: c.get(24, float("nan")), "greedy exact match at length 24"))
            ):  # fmt: skip
                ax = axes[row][col]
                means = []
                for w in widths:
                    values = [measure(c) for c in arms[(pe, depth, w)]]
                    ax.scatter([w] * len(values), values, s=14, alpha=0.5,
                               color="C0" if depth == 2 else "C1")  # fmt: skip
                    means.append(sum(values) / len(values))
                ax.plot(widths, means, style, color="C0" if depth == 2 else "C1",
                        label=f"{depth} layers")  # fmt: skip
                ax.set_ylabel(name)
                ax.set_xticks(widths)
                ax.grid(alpha=0.3)
        axes[0][col].set_title(f"pos_encoding={pe}")
        axes[0][col].axhline(12, color="grey", lw=0.8, ls=":")  # the longest training input
        axes[1][col].set_xlabel("d_model (n_heads 4, d_ff 256)")
        axes[0][col].legend(fontsize=8)
    fig.suptitle("Decoder-only copy, trained on lengths 1-12 (3000 steps, 3 seeds)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path, help="attnlab-compare's CSV of the alibi_shape runs")
    parser.add_argument("--out", type=Path, help="the figure (PNG) to write")
    args = parser.parse_args(argv)
    if not args.csv.is_file():
        print(f"alibi_horizon: error: {args.csv} is not a file", file=sys.stderr)
        return 2
    arms = read_runs(args.csv)
    if not arms:
        print(f"alibi_horizon: error: {args.csv} has no completed run", file=sys.stderr)
        return 2
    print("\n".join(table(arms)))
    if args.out:
        figure(arms, args.out)
        print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
