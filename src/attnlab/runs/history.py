"""The logged history of a run across its attempts (a killed run rerun with resume=auto).

metrics.csv, flushed at every logging step, is the durable record: when a resumed attempt logs
its first row at step R, the rows of earlier attempts before R stay and those from R on (which
the resumed attempt logs again) go. W&B and TensorBoard lose what their writers had buffered
when a process is killed (W&B's offline file holds only whole 32 KiB blocks); a resumed attempt
replays from metrics.csv the rows that they do not hold. No Lightning or W&B imports here.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

METRICS_FILE = "metrics.csv"
STEP = "step"  # metrics.csv's step column: Lightning's logging step (trainer/global_step in W&B)


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of a CSV file; ([], []) when it is absent."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            return list(reader.fieldnames or []), list(reader)
    except FileNotFoundError:
        return [], []


def logged_rows(run_dir: Path) -> list[dict[str, float]]:
    """The rows of <run_dir>/metrics.csv as numbers, empty cells left out, in logging order."""
    _, rows = read_csv(Path(run_dir) / METRICS_FILE)
    out = []
    for row in rows:
        values = {k: float(v) for k, v in row.items() if k and v not in ("", None)}
        if STEP in values:
            values[STEP] = int(values[STEP])
            out.append(values)
    return out


def rows_to_replay(
    rows: Iterable[dict[str, float]], before_step: int, held: Counter
) -> list[dict[str, float]]:
    """The rows logged before `before_step` that a logger does not hold yet: `held` counts the
    rows it holds per step (consumed here, in logging order)."""
    replay = []
    for row in rows:
        if row[STEP] >= before_step:
            continue
        if held[row[STEP]] > 0:
            held[row[STEP]] -= 1
        else:
            replay.append(row)
    return replay


def wandb_segments(run_dir: Path, run_id: str) -> list[Path]:
    """The offline W&B directories of a run, oldest first (one per attempt)."""
    return sorted((Path(run_dir) / "wandb").glob(f"offline-run-*-{run_id}"))


def wandb_history(segment: Path) -> list[dict]:
    """The history rows a W&B run directory's .wandb file holds, read by W&B's own reader
    (`wandb leet inspect --json`); [] where it cannot be read."""
    files = sorted(segment.glob("*.wandb"))
    if not files:
        return []
    command = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(files[0])]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("type") == "history":
            rows.append(record["history"]["item"])
    return rows
