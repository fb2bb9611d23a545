"""Nested dicts as dotted keys, the form W&B configs, results.json and comparisons use."""

from __future__ import annotations

from typing import Any


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """{"model": {"n_heads": 8}} -> {"model.n_heads": 8}; lists are kept as values, dotted keys
    stay as they are."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat
