"""Resumable training data: a killed run continues at the batch where it stopped.

Lightning saves the `state_dict()` of a training dataloader that has one (its `_Stateful`
protocol) in every checkpoint and hands it back through `load_state_dict()` on resume. Our
batch samplers are deterministic functions of (seed, epoch), so the only state is how many
batches of the current epoch were already trained on; on resume the loader skips that many.
The count comes from the trainer's own progress counter, not from what the loader has yielded,
because Lightning fetches one batch ahead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader


class ResumableLoader:
    """Wraps a training DataLoader (or any sized iterable of batches)."""

    def __init__(self, loader: Iterable, trainer_fn: Callable[[], Any]):
        self.loader = loader
        self._trainer_fn = trainer_fn
        self._skip = 0

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:  # batch_size, dataset, sampler... for Lightning
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator:
        return self._batches()

    def _batches(self) -> Iterator:
        iterator = iter(self.loader)
        skip, self._skip = self._skip, 0
        for _ in range(skip):
            next(iterator, None)
        yield from iterator

    def state_dict(self) -> dict:
        trainer = self._trainer_fn()
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        return {"epoch": trainer.current_epoch, "batches_done": int(progress.processed)}

    def load_state_dict(self, state: dict) -> None:
        trainer = self._trainer_fn()
        same_epoch = trainer is None or state.get("epoch") == trainer.current_epoch
        self._skip = int(state.get("batches_done", 0)) if same_epoch else 0


def _own_generator(loader):
    """Creating a DataLoader iterator draws a seed from the global torch RNG unless the loader
    has a generator of its own; give it one, so that evaluation and epoch boundaries leave the
    global RNG (dropout's) exactly where training left it, with or without a resume."""
    if isinstance(loader, DataLoader) and loader.generator is None:
        loader.generator = torch.Generator().manual_seed(0)
    return loader


def make_resumable(datamodule) -> None:
    """Make `datamodule.train_dataloader()` return a ResumableLoader (works for any
    LightningDataModule whose training batches are a deterministic function of seed and epoch),
    and keep every loader of the datamodule off the global RNG."""
    build_train = datamodule.train_dataloader

    def train_dataloader():
        return ResumableLoader(_own_generator(build_train()), lambda: datamodule.trainer)

    datamodule.train_dataloader = train_dataloader
    for hook in ("val_dataloader", "test_dataloader"):
        build = getattr(datamodule, hook)
        setattr(datamodule, hook, lambda build=build: _own_generator(build()))
