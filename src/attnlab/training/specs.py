"""Plain descriptions of the objects a TransformerModule is given, so checkpoints keep only plain
Python values and reload with `load_from_checkpoint` under `weights_only`.

A partial (Hydra's `_partial_: true`, or functools.partial) becomes the config that makes it
again: {"_target_": "<module>.<class>", "_partial_": True, **its keywords}. A dict is already
such a config and is kept as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping


def as_spec(obj, key: str) -> dict:
    """The plain config of `obj` (a dict, or a functools.partial of a class or function taking
    keyword arguments only); ValueError naming `key` otherwise."""
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, functools.partial) and not obj.args:
        func = obj.func
        target = f"{func.__module__}.{func.__qualname__}"
        return {"_target_": target, "_partial_": True, **obj.keywords}
    raise ValueError(
        f"{key} must be a config dict or a partial with keyword arguments only "
        f"(Hydra's _partial_: true); got {type(obj).__name__}"
    )
