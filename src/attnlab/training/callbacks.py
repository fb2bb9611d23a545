"""Callbacks that make runs survive: periodic checkpoints, preemption (SIGTERM / SIGINT) and
RNG state in checkpoints."""

from __future__ import annotations

import random
import signal
from datetime import timedelta
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint


class Preemption(L.Callback):
    """On SIGTERM or SIGINT, finish the current optimizer step, write `<dirpath>/last.ckpt`
    and stop: the run ends "interrupted" and `resume=auto` continues it. A second SIGINT
    interrupts at once. Under DDP the ranks agree on stopping at the same step."""

    def __init__(self, dirpath: str | Path):
        self.dirpath = Path(dirpath)
        self.signal: int | None = None
        self.saved: Path | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if self.signal == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signum

    def on_train_start(self, trainer, pl_module) -> None:
        # After Lightning's own handlers are in place (registered when the trainer starts).
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: leave signals to the caller
                pass

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        stop = self.signal is not None
        if trainer.world_size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop and self.saved is None:
            self.saved = self.dirpath / "last.ckpt"
            trainer.save_checkpoint(self.saved)
            trainer.should_stop = True

    def teardown(self, trainer, pl_module, stage) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def interrupted(self) -> bool:
        return self.saved is not None


class RNGState(L.Callback):
    """Saves the torch, numpy and python RNG states in each checkpoint and restores them when
    training resumes (at the first training batch, after Lightning has built its data
    iterators), so that dropout draws continue exactly as in an uninterrupted run."""

    def __init__(self):
        self._pending: dict | None = None

    def state_dict(self) -> dict:
        np_state = np.random.get_state()
        return {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
            "python": _plain_python_state(random.getstate()),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self._pending = state_dict

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._pending is None:
            return
        state, self._pending = self._pending, None
        torch.set_rng_state(state["torch"])
        if state["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
        name, keys, *rest = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))


def _plain_python_state(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def periodic_checkpoints(
    dirpath: Path, every_n_steps: int | None, every_minutes: float | None, keep_last: int
) -> list[ModelCheckpoint]:
    """ModelCheckpoints every N steps and every M minutes of training (the paper wrote one every
    10 minutes), each keeping its newest `keep_last` files, for resumption and averaging."""
    common = dict(
        dirpath=str(dirpath),
        auto_insert_metric_name=False,
        monitor="step",
        mode="max",
        save_top_k=keep_last,
    )
    callbacks = []
    if every_n_steps:
        callbacks.append(
            ModelCheckpoint(filename="step={step}", every_n_train_steps=every_n_steps, **common)
        )
    if every_minutes:
        callbacks.append(
            ModelCheckpoint(
                filename="timed-step={step}",
                train_time_interval=timedelta(minutes=every_minutes),
                **common,
            )
        )
    return callbacks
