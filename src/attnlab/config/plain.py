"""Composed configs as plain Python: what results.json, W&B and comparisons store."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf


def to_plain(node) -> Any:
    """A composed config node as plain Python (dicts, lists), resolved."""
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)


def plain_config(cfg) -> dict:
    """The resolved config without Hydra's own node (present when composed for a run)."""
    tree = to_plain(cfg)
    tree.pop("hydra", None)
    return tree
