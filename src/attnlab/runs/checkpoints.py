"""Checkpoints that survive: discovery for resume=auto, safe loading, fallback past bad files.

Lightning writes checkpoints atomically (into a temporary file that is moved into place), so a
crash while writing leaves the previous file intact; what can still happen is a file truncated
or corrupted later (a full disk, a copy cut short). Every candidate is therefore loaded with
`torch.load(weights_only=True)` (no pickled code runs) before it is trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def checkpoint_problem(path: Path) -> str | None:
    """None if `path` loads safely and looks like a training checkpoint, else why not."""
    import torch

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
