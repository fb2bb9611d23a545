#!/usr/bin/env python
"""Section 3c's rate grids drawn one panel per head count (docs/REPRODUCTION.md, issue 51): the
best validation nll (teacher-forced; the criterion the rate was chosen on) against the peak rate,
the chosen rate ringed, and the averaged checkpoints' test BLEU (reference only, never used to
choose) on a second axis. One seed per point.

    python scripts/heads_rate_figure.py docs/results/heads_rate.csv \
        --plot docs/img/reproduction/heads_rate/per_h.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from attnlab.analysis.run_table import read_runs_csv  # noqa: E402

RATE, HEADS, CRITERION = "scheduler.peak_lr", "model.n_heads", "val/nll_best"
BLEU = "eval/test-avg5-step1700-1800-beam4_lp0.6/bleu"


def grids(path: Path) -> dict[int, list[tuple[float, float, float | None]]]:
    """{h: [(rate, validation nll, test BLEU or None), ...] in rate order}, from a runs.csv
    (attnlab's reader: a file that is not one is refused with its name)."""
    found: dict[int, list] = {}
    for run in read_runs_csv(path):
        if run.status != "completed" or CRITERION not in run.metrics:
            continue
        point = (float(run.config[RATE]), run.metrics[CRITERION], run.metrics.get(BLEU))
        found.setdefault(int(run.config[HEADS]), []).append(point)
    return {h: sorted(points) for h, points in sorted(found.items())}


def draw(found: dict, out: Path, cap: float) -> None:
    """One panel per h, a shared nll axis clipped at `cap` (points above it drawn at the edge
    with their value written beside them)."""
    fig, axes = plt.subplots(1, len(found), figsize=(3.4 * len(found), 3.6), sharey=True)
    ticks = sorted({rate for points in found.values() for rate, _, _ in points})
    for ax, (h, points) in zip(axes, found.items(), strict=True):
        rates, nll, bleu = zip(*points, strict=True)
        best = min(range(len(points)), key=lambda i: nll[i])
        ax.plot(rates, [min(v, cap) for v in nll], "o-", color="C0", label="validation nll")
        ax.plot(rates[best], nll[best], "o", ms=13, mfc="none", mec="C3", mew=2)
        for rate, value in zip(rates, nll, strict=True):
            if value > cap:
                ax.annotate(f"{value:.2f}", (rate, cap), textcoords="offset points",
                            xytext=(-8, -14), fontsize=8)  # fmt: skip
        ax.set_xscale("log")
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks], rotation=45,
                      fontsize=8)  # fmt: skip
        ax.minorticks_off()
        ax.set_xlim(ticks[0] / 1.4, ticks[-1] * 1.4)
        ax.set_title(f"h = {h} (d_k {96 // h}): best {rates[best]:g}, nll {nll[best]:.3f}",
                     fontsize=9)  # fmt: skip
        ax.set_xlabel("peak rate")
        ax.grid(alpha=0.3)
        twin = ax.twinx()
        shown = [(r, b) for r, b in zip(rates, bleu, strict=True) if b is not None]
        if shown:
            twin.plot(*zip(*shown, strict=True), "s--", color="0.6", ms=4, label="test BLEU")
        twin.set_ylim(20, 34)
        twin.tick_params(labelsize=8, colors="0.4")
        if h == max(found):
            twin.set_ylabel("test BLEU, averaged checkpoints (reference)", color="0.4")
    axes[0].set_ylabel("best validation nll (teacher-forced)")
    axes[0].legend(loc="upper center", fontsize=8)
    axes[0].set_ylim(2.1, cap + 0.02)
    fig.suptitle("Rate grids of section 3c, one seed per point; ringed: the rate chosen on "
                 "validation nll; grey squares: test BLEU (reference)", fontsize=10)  # fmt: skip
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path, help="docs/results/heads_rate.csv")
    parser.add_argument("--plot", type=Path, required=True)
    parser.add_argument("--cap", type=float, default=2.5, help="the nll axis's top")
    args = parser.parse_args()
    try:
        found = grids(args.csv)
    except ValueError as err:  # not a runs table
        print(f"heads_rate_figure.py: error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyError as err:
        print(f"heads_rate_figure.py: error: {args.csv}: no column {err} (need {HEADS} and "
              f"{RATE})", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    for h, points in found.items():
        cells = ", ".join(f"{r:g}: {v:.3f}" for r, v, _ in points)
        print(f"h = {h}: {cells}")
    draw(found, args.plot, args.cap)


if __name__ == "__main__":
    main()
