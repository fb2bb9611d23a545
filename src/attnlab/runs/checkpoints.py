"""Checkpoints that survive: discovery for resume=auto, safe loading, fallback past bad files.

Lightning writes checkpoints atomically (into a temporary file that is moved into place), so a
crash while writing leaves the previous file intact; what can still happen is a file truncated
or corrupted later (a full disk, a copy cut short). Every candidate is therefore loaded with
`torch.load(weights_only=True)` (no pickled code runs) before it is trusted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path


def safe_load(path: Path) -> tuple[dict | None, str | None]:
    """(the checkpoint dictionary, None), loaded with `torch.load(weights_only=True)` (no pickled
    code runs), or (None, why not) in one line. The reason never repeats torch's advice to load
    with weights_only=False: a checkpoint attnlab wrote loads without it, and a file that needs
    it runs code when loaded."""
    import pickle

    import torch

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        return None, (
            "cannot be read safely: it holds objects other than tensors and plain values (not a "
            "checkpoint written by attnlab-train)"
        )
    except Exception as err:  # not a zip or pickle at all, truncated, I/O errors ...
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return None, f"cannot be read ({type(err).__name__}{': ' * bool(reason)}{reason})"
    if not isinstance(ckpt, dict):
        return None, "is not a checkpoint dictionary"
    return ckpt, None


def checkpoint_problem(path: Path) -> str | None:
    """None if `path` loads safely and looks like a training checkpoint, else why not."""
    ckpt, problem = safe_load(path)
    if problem is None and ("state_dict" not in ckpt or "global_step" not in ckpt):
        problem = "is not a Lightning training checkpoint (no state_dict / global_step)"
    return problem


def load_attnlab_checkpoint(path: Path) -> tuple[dict | None, str | None]:
    """(the checkpoint, None), or (None, why it is not an attnlab training checkpoint: unsafe or
    unreadable (safe_load), not Lightning's, no model hyper-parameters)."""
    problem = checkpoint_problem(path)
    if problem:
        return None, problem
    ckpt, _ = safe_load(path)
    if not isinstance((ckpt.get("hyper_parameters") or {}).get("model"), dict):
        return None, "is not an attnlab checkpoint (no model hyper-parameters)"
    return ckpt, None


# The model options that fix the shapes of the parameters: a checkpoint resumes only into a
# model that agrees on them (max_len only matters for learned positions).
ARCHITECTURE_KEYS = (
    "arch", "d_model", "n_heads", "d_k", "d_ff", "n_encoder_layers", "n_decoder_layers",
    "norm_position", "norm_type", "pos_encoding", "share_embeddings", "qk_norm", "vocab_size",
)  # fmt: skip


def resume_problem(path: Path, model: dict, shown: int = 3) -> str | None:
    """Why `path` cannot resume a run whose model options are `model` (TransformerConfig
    fields; vocab_size where known), or None: load_attnlab_checkpoint's reasons, or of another
    architecture (the differing keys, at most `shown` of them). One line."""
    ckpt, problem = load_attnlab_checkpoint(path)
    if problem:
        return problem
    saved = ckpt["hyper_parameters"]["model"]
    keys = [k for k in ARCHITECTURE_KEYS if k in model and k in saved]
    if "max_len" in model and _has_position_limit(saved):  # a learned table's size
        keys.append("max_len")
    differ = [k for k in keys if saved[k] != model[k]]
    if not differ:
        return None
    more = f" and {len(differ) - shown} more" if len(differ) > shown else ""
    pairs = "; ".join(f"model.{k}={saved[k]!r} there, {model[k]!r} here" for k in differ[:shown])
    return f"is a checkpoint of another architecture: {pairs}{more}"


def _has_position_limit(saved: dict) -> bool:
    """Does the saved model's positional encoding have a table sized by max_len (learned)?"""
    from types import SimpleNamespace

    from attnlab.model.positions import NAMES, encoding_class

    name = saved.get("pos_encoding")
    return name in NAMES and encoding_class(name).limit(SimpleNamespace(**saved)) is not None


def candidates(run_dir: Path) -> list[Path]:
    """A run's checkpoints, newest first: <run_dir>/checkpoints/*.ckpt and the hpc_ckpt_*.ckpt
    that Lightning writes into the run directory when SLURM preempts a job."""
    found = [*run_dir.glob("checkpoints/*.ckpt"), *run_dir.glob("hpc_ckpt_*.ckpt")]
    found = [p for p in found if p.exists()]  # a link whose file is gone is no candidate
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def find_resume_checkpoint(run_dir: Path, say: Callable[[str], None] = print) -> Path | None:
    """The newest checkpoint of the run that loads; each skipped one is reported."""
    for path in candidates(run_dir):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        say(f"checkpoint {path} is unusable ({problem}); falling back to the previous one")
    return None


# --- one file per step ---------------------------------------------------------------------------

_STEP = re.compile(r"(?:^|-)step=(\d+)\.ckpt$")
# Of several files of one step, the one kept as a file (the others become links to it).
_PREFERRED = ("best-step=", "step=", "timed-step=")


def step_of(path: Path) -> int | None:
    """The optimizer step in a checkpoint's name (best-step=N, step=N, timed-step=N), else None."""
    match = _STEP.search(path.name)
    return int(match.group(1)) if match else None


def has_step(ckpt_dir: Path, step: int) -> bool:
    """Whether a checkpoint file of `step` exists in `ckpt_dir`."""
    return any(step_of(p) == step for p in ckpt_dir.glob("*.ckpt") if p.exists())


def link_same_steps(ckpt_dir: Path) -> Path | None:
    """At the end of a run, one file per step: checkpoints of the same step (the best, the
    periodic and the timed one of the final step, typically) become relative symbolic links to
    one of them, and last.ckpt a link to the newest step's file (replacing an interrupted
    attempt's last.ckpt). A file system without links keeps the copies. Returns the newest."""
    by_step: dict[int, list[Path]] = {}
    for path in ckpt_dir.glob("*.ckpt"):
        if not path.is_symlink() and (step := step_of(path)) is not None:
            by_step.setdefault(step, []).append(path)
    if not by_step:
        return None
    for paths in by_step.values():
        paths.sort(key=_preference)
        for duplicate in paths[1:]:
            _link(duplicate, paths[0])
    newest = by_step[max(by_step)][0]
    _link(ckpt_dir / "last.ckpt", newest)
    return newest


def _preference(path: Path) -> tuple[int, str]:
    ranks = [i for i, prefix in enumerate(_PREFERRED) if path.name.startswith(prefix)]
    return (ranks[0] if ranks else len(_PREFERRED), path.name)


def _link(path: Path, target: Path) -> None:
    """Replace `path` by a relative link to `target` (same folder), atomically."""
    tmp = path.with_name(f".{path.name}.link")
    try:
        tmp.unlink(missing_ok=True)
        os.symlink(target.name, tmp)
        os.replace(tmp, path)
    except OSError:  # no symbolic links here: keep the copy
        tmp.unlink(missing_ok=True)
