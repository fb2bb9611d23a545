"""Callbacks that make runs survive: periodic checkpoints, preemption (SIGTERM / SIGINT), RNG
state and the wall clock (WallClock) in checkpoints."""

from __future__ import annotations

import random
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from attnlab import programs
from attnlab.problems import integer_problem, raise_first
from attnlab.training.hooks import SkipEmptyHooks


class Preemption(SkipEmptyHooks, L.Callback):
    """On SIGTERM or SIGINT, finish the current optimizer step, write `<dirpath>/last.ckpt`,
    let the step log and validate as it would have, and stop: the run ends "interrupted" and
    `resume=auto` continues it. A second SIGINT interrupts at once. Under DDP the ranks agree
    on stopping at the same step."""

    def __init__(self, dirpath: str | Path):
        self.dirpath = Path(dirpath)
        self.signal: int | None = None
        self.saved: Path | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if self.signal == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.signal is None:  # answered at once, whatever the run is doing
            again = "; Ctrl-C again to stop now" if signum == signal.SIGINT else ""
            print(f"\n{programs.TRAIN}: {signal.Signals(signum).name}: stopping after this step "
                  f"or validation (a checkpoint, then exit 4; the same command resumes it){again}",
                  file=sys.stderr, flush=True)  # fmt: skip
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
            # End the run after this step as if it were the last one, not by `should_stop`:
            # Lightning logs a row and validates at a `should_stop` whatever the step, which an
            # uninterrupted run does not; so this step logs and validates exactly as it would
            # have, and the resumed run's rows continue from there (tests/test_resume_rows.py).
            trainer.fit_loop.epoch_loop.max_steps = trainer.global_step

    def on_fit_end(self, trainer, pl_module) -> None:
        # A signal after the last step (in the final validation): no batch ends after it, so
        # the run stops here, its final state saved, instead of testing as if nothing came; the
        # same command then tests it from that checkpoint.
        stop = self.signal is not None
        if trainer.world_size > 1:
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop and self.saved is None:
            self.saved = self.dirpath / "last.ckpt"
            trainer.save_checkpoint(self.saved)

    def teardown(self, trainer, pl_module, stage) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def interrupted(self) -> bool:
        return self.saved is not None


class LoggingStep(SkipEmptyHooks, L.Callback):
    """Resumed runs log each row at the step an uninterrupted run gives it.

    Lightning's step axis for loggers (`_batches_that_stepped`) equals `trainer.global_step`
    before every batch (one optimizer). Restoring it, Lightning 2.6 guesses from the progress
    counters whether the checkpoint was written before the counter's increment; a checkpoint
    written at the end of a mid-run validation (the best one) looks like one written at the end
    of training and comes back one step low, so every later row was logged one step too early.
    At the first batch of an attempt the axis is set from the restored global step.

    An attempt that trains no batch (resumed after an interrupted test pass, from the final
    checkpoint, written in the last validation) sets the axis when fitting ends, and counts the
    last epoch ended as the uninterrupted run's fit did. Lightning skips that attempt's fit
    loop, so its test row came one step low and an epoch short, and metrics.csv lost the last
    step's training and validation rows (tests/test_resume_rows.py)."""

    def __init__(self):
        self._aligned = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self._aligned:
            self._aligned = True
            trainer.fit_loop.epoch_loop._batches_that_stepped = trainer.global_step

    def on_fit_end(self, trainer, pl_module) -> None:
        if self._aligned:
            return
        self.on_train_batch_start(trainer, pl_module, None, 0)
        epochs = trainer.fit_loop.epoch_progress
        if epochs.current.started > epochs.current.completed:
            epochs.increment_processed()
            epochs.increment_completed()


class WallClock(SkipEmptyHooks, L.Callback):
    """`time/elapsed_s`: the wall-clock seconds since the run's training began, summed over its
    attempts (kept in checkpoints), logged at every validation after it ran: the x axis of a
    time-to-quality curve (attnlab-bench --quality RUN_DIR). Validation time is included: it is
    part of what a recipe costs."""

    def __init__(self):
        self.elapsed_s = 0.0  # before this attempt
        self._t0: float | None = None

    def now_s(self) -> float:
        return self.elapsed_s + (time.monotonic() - self._t0 if self._t0 is not None else 0.0)

    def on_train_start(self, trainer, pl_module) -> None:
        self._t0 = time.monotonic()

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking and self._t0 is not None:
            pl_module.log("time/elapsed_s", self.now_s(), rank_zero_only=True)

    def state_dict(self) -> dict:
        return {"elapsed_s": self.now_s()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.elapsed_s = float(state_dict.get("elapsed_s", 0.0))


class RNGState(SkipEmptyHooks, L.Callback):
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


class StepCheckpoint(SkipEmptyHooks, ModelCheckpoint):
    """A periodic ModelCheckpoint whose file, at a step that is then validated, is written after
    the validation rather than before it. Lightning does not validate a step again when it
    resumes from a checkpoint written before that step's validation, so a run killed during the
    validation lost its row; now it resumes from the previous file and validates the step again."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._after_validation = False
        self._state_key: str | None = None

    @property
    def state_key(self) -> str:
        """ModelCheckpoint's key, built once (from arguments fixed at construction): Lightning
        reads it for a profiler label at every hook it calls, 3 us each time it is built."""
        if self._state_key is None:
            self._state_key = super().state_key
        return self._state_key

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        n = self._every_n_train_steps
        if n >= 1 and self._train_time_interval is None and trainer.global_step % n:
            return  # not a saving step: ModelCheckpoint would return here too, after more work
        epoch_loop = trainer.fit_loop.epoch_loop
        if epoch_loop._should_check_val_fx(trainer.fit_loop._data_fetcher):  # Lightning's own test
            self._after_validation = True
            return
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        if self._after_validation and not trainer.sanity_checking:
            self._after_validation = False
            super().on_train_batch_end(trainer, pl_module, None, None, 0)


def periodic_checkpoints(
    dirpath: Path, every_n_steps: int | None, every_minutes: float | None, keep_last: int
) -> list[ModelCheckpoint]:
    """ModelCheckpoints every N steps and every M minutes of training (the paper wrote one every
    10 minutes), each keeping its newest `keep_last` files, for resumption and averaging."""
    for key, value in (("every_n_steps", every_n_steps), ("every_minutes", every_minutes)):
        if value is not None and not value > 0:
            raise ValueError(
                f"checkpoint.{key}={value} is not valid; expected a positive number or null"
            )
    raise_first([integer_problem("checkpoint.keep_last", keep_last, 1)])
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
            StepCheckpoint(filename="step={step}", every_n_train_steps=every_n_steps, **common)
        )
    if every_minutes:
        callbacks.append(
            StepCheckpoint(
                filename="timed-step={step}",
                train_time_interval=timedelta(minutes=every_minutes),
                **common,
            )
        )
    return callbacks
