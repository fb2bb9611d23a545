"""The progress bar, redrawn at most a few times a second.

Lightning's TQDM bar redraws after every batch and reads the progress-bar metrics each time
(a host sync per step on a GPU); with a small model on a CPU that was about 1-2 ms of a 30 ms
step. ThrottledProgressBar draws the same bar at most every `interval` seconds (and at the end
of each epoch), so a fast run updates it a few times a second and a slow run at every step.
The training loss it shows is read when it draws: a prog_bar metric would be converted to a
float by Lightning after every step, drawn or not.
"""

from __future__ import annotations

import time

from lightning.pytorch.callbacks import TQDMProgressBar

from attnlab.training.hooks import SkipEmptyHooks


class ThrottledProgressBar(SkipEmptyHooks, TQDMProgressBar):
    def __init__(self, interval: float = 0.5) -> None:
        super().__init__()
        self.interval = interval
        self._drawn = {"train": 0.0, "validation": 0.0}

    def _due(self, stage: str, batch_idx: int, total) -> bool:
        now = time.monotonic()
        if now - self._drawn[stage] >= self.interval or batch_idx + 1 == total:
            self._drawn[stage] = now
            return True
        return False

    def get_metrics(self, trainer, pl_module) -> dict:
        """Lightning's bar metrics, with train/loss first: read from the callback metrics when
        the bar draws (throttled), not converted by Lightning after every step as a prog_bar
        metric is (a host sync per step on a GPU)."""
        metrics = super().get_metrics(trainer, pl_module)
        loss = trainer.callback_metrics.get("train/loss") if trainer.training else None
        return metrics if loss is None else {"train/loss": float(loss), **metrics}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._due("train", batch_idx, self.total_train_batches):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ):
        total = self.total_val_batches_current_dataloader
        if self._due("validation", batch_idx, total):
            super().on_validation_batch_end(
                trainer, pl_module, outputs, batch, batch_idx, dataloader_idx
            )


def progress_bar(enabled: bool) -> list:
    """The callbacks list entry for trainer.enable_progress_bar (Lightning refuses a bar
    callback when the bar is disabled)."""
    return [ThrottledProgressBar()] if enabled else []
