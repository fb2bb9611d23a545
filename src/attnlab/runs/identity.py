"""Deterministic run identity: the same command finds the same run directory and W&B run.

A run is defined by its experiment name, the command-line overrides that change what is trained
(not where it is written or how it is logged) and its seed. Their hash names the run directory
`<paths.root>/<name>/<run_name>-<hash>`, whose path gives the W&B run id, so re-running a killed job
resumes it, and re-running a finished one is recognised.

The hash covers the command line, not the contents of preset files or the code's defaults, so
before a run directory is continued (or reported as completed) its stored config.yaml is compared
with the config now composed: `config_drift` lists the defining keys that differ, and the run is
refused rather than silently mixed with, or mistaken for, a different configuration.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attnlab.runs.dotted import flatten
from attnlab.runs.overrides import NON_DEFINING, is_defining, override_key
from attnlab.runs.record import run_name

__all__ = ["NON_DEFINING", "is_defining"]  # re-exported: their home is attnlab.runs.overrides


class RunConfigChanged(ValueError):
    """A run directory was trained with a config that differs from the one now composed."""


def defining_overrides(overrides: list[str]) -> list[str]:
    """The overrides that define the run, sorted so that their order does not matter."""
    return sorted(o.strip() for o in overrides if is_defining(override_key(o) or o))


def config_drift(
    stored: Mapping, current: Mapping, added_at_default: Callable[[str, Any], bool] | None = None
) -> list[str]:
    """`key: old -> new` for each defining key whose value differs between two nested configs
    (a key present in only one of them shows as <absent>), sorted by key. A key the stored
    config lacks is no change when `added_at_default(key, value)` says its value is the
    option's default: an option added to attnlab since the run was made, left as it was."""
    old, new = flatten(dict(stored)), flatten(dict(current))
    if added_at_default is not None:
        for key in [k for k in new.keys() - old.keys() if added_at_default(k, new[k])]:
            new.pop(key)

    def show(values: dict, key: str) -> str:
        return repr(values[key]) if key in values else "<absent>"

    return [
        f"{key}: {show(old, key)} -> {show(new, key)}"
        for key in sorted(old.keys() | new.keys())
        if is_defining(key) and (key in old, old.get(key)) != (key in new, new.get(key))
    ]


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
