"""Deterministic run identity: the same command finds the same run directory and W&B run.

A run is defined by its experiment name, the command-line overrides that change what is trained
(not where it is written or how it is logged) and its seed. Their hash names the run directory
`<paths.root>/<name>/<run_name>-<hash>`, whose path gives the W&B run id, so re-running a killed job
resumes it, and re-running a finished one is recognised.
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

from attnlab.run_record import run_name

# Overrides that do not change what a run computes: where it writes, how it logs and resumes.
NON_DEFINING = (
    "resume",
    "paths.",
    "logger",
    "hydra.",
    "group",
    "tags",
    "run_name",
    "checkpoint.",
    "trainer.enable_progress_bar",
)


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def defining_overrides(overrides: list[str]) -> list[str]:
    """The overrides that define the run, sorted so that their order does not matter."""
    kept = [
        o.strip()
        for o in overrides
        if not any(_key(o) == p.rstrip(".") or _key(o).startswith(p) for p in NON_DEFINING)
    ]
    return sorted(kept)


def run_hash(name: str, overrides: list[str], seed: int, length: int = 8) -> str:
    text = "\n".join([f"name={name}", f"seed={seed}", *defining_overrides(overrides)])
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def slug(text: str, max_len: int = 60) -> str:
    """A file-system-safe form of a run name (no '=', which Hydra's overrides reject in paths)."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")
    return text[:max_len]


def run_dir_name(name: str, overrides: list[str], seed: int, fresh: bool = False) -> str:
    """`<readable>-<hash>`; with fresh=True (resume=never) a timestamp makes it new."""
    readable = run_name(defining_overrides(overrides), default="default")
    base = f"{slug(readable)}-{run_hash(name, overrides, seed)}"
    if fresh:
        base += time.strftime("-%Y%m%d-%H%M%S")
    return base


def wandb_run_id(run_dir: str | Path) -> str:
    """The W&B run id of a run directory: re-running the same run continues the same W&B run."""
    return hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
