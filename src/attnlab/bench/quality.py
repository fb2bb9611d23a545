"""Time to quality: a run's validation BLEU, chrF and nll against the wall time it had trained,
from its own metrics.csv (`time/elapsed_s`, logged at every validation by the WallClock callback
of callbacks=translation). A change to a recipe is judged on this curve, not on one end point.

    attnlab-bench --quality outputs/multi30k_cpu/<old> outputs/multi30k_cpu/<new> --json q.json

prints one table per run and writes quality.png (BLEU against minutes, one line per run) into
the first run's folder, or beside --json.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

TIME = "time/elapsed_s"
COLUMNS = ("val/bleu", "val/chrf", "val/nll")


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def quality_rows(run_dir: Path) -> list[dict]:
    """Per validation (by step): elapsed seconds and the validation metrics it has; ValueError
    naming the file when the run logged no wall time."""
    path = Path(run_dir) / "metrics.csv"
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise ValueError(f"{path}: {err.strerror or err}") from None
    by_step: dict[int, dict] = {}
    for row in rows:
        step = _number(row.get("step"))
        if step is None:
            continue
        merged = by_step.setdefault(int(step), {"step": int(step)})
        for key in (TIME, *COLUMNS):
            value = _number(row.get(key))
            if value is not None:
                merged[key] = value
    found = [r for r in sorted(by_step.values(), key=lambda r: r["step"]) if TIME in r]
    if not found:
        raise ValueError(
            f"{path}: no {TIME} column; the run needs the WallClock callback "
            "(callbacks=translation has it)"
        )
    return found


def quality_text(name: str, rows: list[dict]) -> str:
    """One run's curve as a table: minutes, step and each validation metric."""
    lines = [f"{name}:", f"  {'minutes':>8}  {'step':>6}  " + "  ".join(f"{c:>9}" for c in COLUMNS)]
    for r in rows:
        cells = "  ".join(f"{r[c]:9.4g}" if c in r else f"{'':>9}" for c in COLUMNS)
        lines.append(f"  {r[TIME] / 60:8.2f}  {r['step']:6d}  {cells}")
    return "\n".join(lines)


def quality_plot(curves: dict[str, list[dict]], path: Path, metric: str = "val/bleu") -> Path:
    """`metric` against minutes, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, rows in curves.items():
        points = [(r[TIME] / 60, r[metric]) for r in rows if metric in r]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", markersize=3, label=name)
    ax.set_xlabel("wall time of training, validation included (minutes)")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
