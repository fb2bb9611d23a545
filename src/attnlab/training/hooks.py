"""Training-step hooks dispatched only where a class implements them.

At every training step Lightning calls each per-step hook (on_train_batch_start,
on_before_backward, ...) of every callback and of the module, whether the class implements it
or leaves Lightning's empty default: each call sets the module's current hook name, opens a
profiler context and builds its label (a ModelCheckpoint builds its state key for it), about
4 us on a 2-core CPU. With ten callbacks that was about 60 calls a step, 50 of them empty.
Lightning skips a hook that is not callable (`lightning.pytorch.trainer.call`, for callbacks and
for the module alike), so `SkipEmptyHooks` sets to None each per-step hook a class inherits as
Lightning's empty default. A class that implements a hook is called exactly as before; only
calls that did nothing go. tests/test_hooks.py counts what Lightning dispatches in a run.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.core.hooks import ModelHooks

PER_STEP_HOOKS = (
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
)  # not the evaluation loops' batch hooks: Lightning reads the module's signatures of those

# Lightning's empty defaults of those hooks, for callbacks and for modules
_EMPTY = {id(vars(base)[name]) for base in (L.Callback, ModelHooks) for name in PER_STEP_HOOKS}


class SkipEmptyHooks:
    """Mixin (before the Lightning base: `class C(SkipEmptyHooks, L.Callback)`): a subclass's
    per-step hooks that are Lightning's empty defaults become None, which Lightning does not
    call. A subclass that calls `super().<hook>()` must define the hook in a class between it
    and Lightning's base (an empty default it inherits is None)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name in PER_STEP_HOOKS:
            if id(getattr(cls, name, None)) in _EMPTY:
                setattr(cls, name, None)
