"""Validate once more at the end of training, when the last step was not a validation step.

A run shorter than trainer.val_check_interval (or one whose length is not a multiple of it)
would otherwise end without its final validation: no val/* metrics at all for a short run, and
a best checkpoint chosen before the last steps. Lightning validates when a callback asks the
trainer to stop (`trainer.should_stop`, as EarlyStopping does); at the last optimizer step this
callback asks, and Lightning's own rule runs the validation loop once (never twice).
"""

from __future__ import annotations

import lightning as L

from attnlab.training.hooks import SkipEmptyHooks


class ValidateAtEnd(SkipEmptyHooks, L.Callback):
    """At the last optimizer step (trainer.max_steps as configured), make sure a validation
    follows. The limit is read when training starts: an interrupt ends a run early by lowering
    it (training/callbacks.Preemption), and that step must validate only if it would have."""

    def __init__(self) -> None:
        self.max_steps = -1

    def on_train_start(self, trainer, pl_module) -> None:
        self.max_steps = trainer.max_steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if 0 < self.max_steps <= trainer.global_step:
            trainer.should_stop = True
