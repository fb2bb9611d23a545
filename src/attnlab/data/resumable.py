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

import lightning as L
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


def resumable(loader, datamodule) -> ResumableLoader:
    """A training loader of `datamodule` that a resumed run continues mid-epoch."""
    return ResumableLoader(_own_generator(loader), lambda: datamodule.trainer)


class ResumableDataModule(L.LightningDataModule):
    """A LightningDataModule whose training loader continues at the batch where a resumed run
    stopped (ResumableLoader), and whose loaders leave the global RNG alone: a property of the
    data module, whoever builds it. Subclasses define train_loader(), val_loader() and
    test_loader() (a DataLoader each; training batches a deterministic function of seed and
    epoch); Lightning calls the *_dataloader() hooks below."""

    def train_loader(self) -> DataLoader:
        raise NotImplementedError(f"{type(self).__name__} defines no train_loader()")

    def val_loader(self) -> DataLoader:
        raise NotImplementedError(f"{type(self).__name__} defines no val_loader()")

    def test_loader(self) -> DataLoader:
        raise NotImplementedError(f"{type(self).__name__} defines no test_loader()")

    def train_dataloader(self) -> ResumableLoader:
        return resumable(self.train_loader(), self)

    def val_dataloader(self) -> DataLoader:
        return _own_generator(self.val_loader())

    def test_dataloader(self) -> DataLoader:
        return _own_generator(self.test_loader())


def make_resumable(datamodule: L.LightningDataModule) -> L.LightningDataModule:
    """The same behaviour for a LightningDataModule that does not derive from
    ResumableDataModule (a researcher's own, named by data._target_): its loader methods are
    wrapped in place. Training batches must be a deterministic function of seed and epoch."""
    if isinstance(datamodule, ResumableDataModule):
        return datamodule
    build_train = datamodule.train_dataloader
    datamodule.train_dataloader = lambda: resumable(build_train(), datamodule)
    for hook in ("val_dataloader", "test_dataloader"):
        build = getattr(datamodule, hook)
        setattr(datamodule, hook, lambda build=build: _own_generator(build()))
    return datamodule
