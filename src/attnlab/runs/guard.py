"""The guard around a run: whatever ends it early, its record says so and its loggers close."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from attnlab.runs.record import RunRecord
from attnlab.runs.status import Status
from attnlab.runs.wandb import finish_wandb


@dataclass
class RunState:
    """What the guard needs to write a failure record: filled in as the run is built."""

    record: RunRecord
    is_rank_zero: bool = True
    prior_wall_time: float = 0.0  # seconds spent by earlier attempts of a resumed run
    loggers: list = field(default_factory=list)
    trainer: Any = None
    started: float = field(default_factory=time.perf_counter)

    def wall_time(self) -> float:
        return round(self.prior_wall_time + time.perf_counter() - self.started, 2)

    def steps(self) -> int:
        return int(self.trainer.global_step) if self.trainer is not None else 0


@contextmanager
def run_guard(state: RunState):
    """On any exception: results.json says "failed" ("interrupted" for Ctrl-C / SystemExit),
    with the error, the steps done and the wall time; W&B is closed with the status's exit code;
    the exception propagates."""
    try:
        yield state
    except BaseException as err:
        status = (
            Status.INTERRUPTED if isinstance(err, KeyboardInterrupt | SystemExit) else Status.FAILED
        )
        if state.is_rank_zero:
            results = state.record.write(
                status,
                error=f"{type(err).__name__}: {err}",
                steps=state.steps(),
                wall_time_s=state.wall_time(),
            )
            finish_wandb(state.loggers, results)
        raise


@contextmanager
def deferred_interrupts():
    """Inside the block, SIGINT and SIGTERM are remembered, not acted on: the final record is
    written whole. Yields the list of signals that arrived (empty when none), so the caller
    records the run as interrupted. Outside the main thread, signals are left alone."""
    import signal

    caught: list[int] = []
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[signum] = signal.signal(signum, lambda s, _frame: caught.append(s))
        except ValueError:  # not the main thread
            break
    try:
        yield caught
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
