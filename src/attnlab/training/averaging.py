"""Checkpoint averaging (Sec. 6.1: "averaging the last 5 checkpoints, written at 10-minute
intervals"): the element-wise mean of the model weights of several checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch


def load_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The model weights of a Lightning checkpoint (its "state_dict"), loaded safely
    (attnlab.runs.checkpoints.safe_load: no pickled code runs)."""
    from attnlab.runs.checkpoints import safe_load

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    ckpt, problem = safe_load(path)
    if problem:
        raise ValueError(f"checkpoint {path} {problem}")
    return ckpt.get("state_dict", ckpt)


def average_state_dicts(state_dicts: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Mean of each floating-point tensor over the checkpoints (accumulated in float64, cast
    back); integer tensors (counters, indices) are taken from the last checkpoint."""
    if not state_dicts:
        raise ValueError("no checkpoints to average")
    keys = list(state_dicts[0])
    for i, sd in enumerate(state_dicts[1:], start=1):
        if list(sd) != keys:
            missing = set(keys) ^ set(sd)
            raise ValueError(f"checkpoint {i} has different parameters: {sorted(missing)[:5]}")
    averaged = {}
    for key in keys:
        tensors = [sd[key] for sd in state_dicts]
        if tensors[0].is_floating_point():
            total = torch.stack([t.double() for t in tensors]).mean(dim=0)
            averaged[key] = total.to(tensors[0].dtype)
        else:
            averaged[key] = tensors[-1].clone()
    return averaged


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, torch.Tensor]:
    return average_state_dicts([load_state_dict(p) for p in paths])
