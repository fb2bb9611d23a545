"""Checkpoints that survive: discovery for resume=auto, safe loading, fallback past bad files.

Lightning writes checkpoints atomically (into a temporary file that is moved into place), so a
crash while writing leaves the previous file intact; what can still happen is a file truncated
or corrupted later (a full disk, a copy cut short). Every candidate is therefore loaded with
`torch.load(weights_only=True)` (no pickled code runs) before it is trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint


def checkpoint_problem(path: Path) -> str | None:
    """None if `path` loads safely and looks like a training checkpoint, else why not."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated zip, bad pickle, unsafe globals, I/O errors ...
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".strip()
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "global_step" not in ckpt:
        return "not a Lightning training checkpoint (no state_dict / global_step)"
    return None


def candidates(run_dir: Path) -> list[Path]:
    """A run's checkpoints, newest first: <run_dir>/checkpoints/*.ckpt and the hpc_ckpt_*.ckpt
    that Lightning writes into the run directory when SLURM preempts a job."""
    found = [*run_dir.glob("checkpoints/*.ckpt"), *run_dir.glob("hpc_ckpt_*.ckpt")]
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def find_resume_checkpoint(run_dir: Path, say: Callable[[str], None] = print) -> Path | None:
    """The newest checkpoint of the run that loads; each skipped one is reported."""
    for path in candidates(run_dir):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        say(f"checkpoint {path} is unusable ({problem}); falling back to the previous one")
    return None


def periodic_checkpoints(
    dirpath: Path, every_n_steps: int | None, every_minutes: float | None, keep_last: int
) -> list[ModelCheckpoint]:
    """ModelCheckpoints every N steps and every M minutes of training (the paper wrote one every
    10 minutes), each keeping its newest `keep_last` files, for resumption and averaging."""
    common = dict(
        dirpath=str(dirpath),
        auto_insert_metric_name=False,
        monitor="step",
        mode="max",
        save_top_k=keep_last,
    )
    callbacks = []
    if every_n_steps:
        callbacks.append(
            ModelCheckpoint(filename="step={step}", every_n_train_steps=every_n_steps, **common)
        )
    if every_minutes:
        callbacks.append(
            ModelCheckpoint(
                filename="timed-step={step}",
                train_time_interval=timedelta(minutes=every_minutes),
                **common,
            )
        )
    return callbacks
