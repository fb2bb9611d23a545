"""The learning-rate schedule's horizon set from the time budget (trainer.max_time).

A decaying schedule (cosine) reaches its floor at scheduler.max_steps. Under a time budget the
number of steps a run gets depends on the machine: set too high, the run is stopped by the
clock before the learning rate has decayed (the last, most useful part of the schedule is
lost); too low, the run ends early and leaves time unused. `TimeBudgetHorizon` measures the
run's own rate (optimizer steps per second of training wall time, validation included, from
`start_step` on) and every `every_n_steps` steps sets the horizon to the step the remaining
time reaches at that rate, less `margin` of it:

    H = step + floor(rate * remaining_s * (1 - margin)),   capped by trainer.max_steps

The schedule then decays to its floor at H and the run stops there. Until the first estimate
the config's scheduler.max_steps holds (a first guess). The horizon is kept in checkpoints, so
a resumed run goes on with the schedule it had; its rate is measured afresh. Each estimate is
logged as `time/horizon_steps`; the last one is in results.json, and a run that should repeat
the schedule exactly on another machine sets scheduler.max_steps and trainer.max_steps to it
and drops the callback (the horizon moved during the run, so the match is close, not exact).
"""

from __future__ import annotations

import dataclasses
import math

import lightning as L
from lightning.pytorch.callbacks import Timer

from attnlab.problems import integer_problem, number_problem, raise_first
from attnlab.training.hooks import SkipEmptyHooks
from attnlab.training.schedules import lr_lambda


class TimeBudgetHorizon(SkipEmptyHooks, L.Callback):
    """Sets the schedule's max_steps (and the run's last step) from the measured step rate and
    the time trainer.max_time leaves; see the module docstring."""

    def __init__(self, every_n_steps: int = 50, start_step: int = 20, margin: float = 0.03):
        raise_first(
            [
                integer_problem("callbacks.time_horizon.every_n_steps", every_n_steps, 1),
                integer_problem("callbacks.time_horizon.start_step", start_step, 1),
                number_problem("callbacks.time_horizon.margin", margin, 0.0, 0.5),
            ]
        )
        self.every_n_steps, self.start_step, self.margin = every_n_steps, start_step, margin
        self.horizon: int | None = None
        self._origin: tuple[int, float] | None = None  # (step, elapsed s) where the rate starts
        self._cap: int | None = None
        self._first = 0  # the step this attempt started at

    def check_run(self, key: str, module, trainer: dict) -> str | None:
        """The run this callback joins (attnlab.pipeline.build asks): a time budget
        (trainer.max_time) and a schedule with a horizon (the module's)."""
        return horizon_problem(key, trainer.get("max_time"), module.schedule())

    def on_train_start(self, trainer, pl_module) -> None:
        timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
        schedule = pl_module.schedule()
        problem = horizon_problem("callbacks.time_horizon", timer, schedule)
        if problem:  # the build refuses these configs (check_run) before this
            raise ValueError(problem)
        self._timer, self._schedule = timer, schedule
        self._cap = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        self._origin, self._first = None, trainer.global_step
        if self.horizon is not None:  # resumed: the schedule the run had
            self._apply(trainer, self.horizon)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.horizon is not None and step >= self.horizon:
            # the run ends here; asking the trainer to stop (rather than lowering max_steps)
            # makes Lightning validate once more, so the last model is validated and can be
            # the best checkpoint (as training/final_validation.py does at max_steps)
            trainer.should_stop = True
            return
        if self._origin is None:
            # the rate starts start_step steps into this attempt: start-up, the first batches'
            # allocations and any compilation are not the rate the run goes on at
            if step - self._first >= self.start_step:
                self._origin = (step, self._timer.time_elapsed("train"))
            return
        s0, t0 = self._origin
        if step % self.every_n_steps or step - s0 < self.every_n_steps:
            return
        elapsed = self._timer.time_elapsed("train")
        if elapsed <= t0:
            return
        rate = (step - s0) / (elapsed - t0)
        remaining = self._timer.time_remaining("train") or 0.0
        horizon = step + math.floor(rate * remaining * (1.0 - self.margin))
        horizon = max(horizon, step + 1, self._schedule.warmup_steps + 1)
        self._apply(trainer, min(horizon, self._cap) if self._cap else horizon)
        pl_module.log("time/horizon_steps", float(self.horizon), rank_zero_only=True)

    def _apply(self, trainer, horizon: int) -> None:
        """The schedule decays to its floor at `horizon` (the run stops there: above)."""
        self.horizon = horizon
        schedule = dataclasses.replace(self._schedule, max_steps=horizon)
        for config in trainer.lr_scheduler_configs:
            config.scheduler.lr_lambdas = [lr_lambda(schedule)] * len(config.scheduler.lr_lambdas)

    def state_dict(self) -> dict:
        return {"horizon": self.horizon}

    def load_state_dict(self, state_dict: dict) -> None:
        self.horizon = state_dict.get("horizon")


def horizon_problem(key: str, budget, schedule) -> str | None:
    """Why TimeBudgetHorizon cannot run (one line naming `key`), or None: it needs a time
    budget (trainer.max_time; `budget` is it or the trainer's Timer) and a schedule with a
    horizon (a dataclass with max_steps, as Cosine)."""
    if not budget:
        return (
            f"{key} needs trainer.max_time (the time budget the horizon is set from), e.g. "
            f"trainer.max_time=00:00:10:00; it is null (a run without a time budget drops the "
            f"callback: ~{key})"
        )
    if not (dataclasses.is_dataclass(schedule) and hasattr(schedule, "max_steps")):
        name = f"{type(schedule).__module__}.{type(schedule).__name__}"
        return (
            f"{key} needs a schedule with a horizon (scheduler=cosine); scheduler._target_ "
            f"is {name}"
        )
    return None
