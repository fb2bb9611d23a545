"""TimeBudgetHorizon: the cosine schedule's horizon from the time budget (trainer.max_time)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import Timer

from attnlab.training.schedules import Constant, Cosine, lr_lambda
from attnlab.training.time_horizon import TimeBudgetHorizon
from build_utils import dry_build


class FakeTimer(Timer):
    """A Timer whose clock the test sets."""

    def __init__(self, budget_s: float):
        super().__init__(duration={"seconds": budget_s})
        self.now = 0.0

    def time_elapsed(self, stage="train") -> float:
        return self.now

    def time_remaining(self, stage="train") -> float:
        return self._duration - self.now


def _trainer(schedule, budget_s=600.0, max_steps=-1):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(schedule))
    trainer = SimpleNamespace(
        callbacks=[FakeTimer(budget_s)],
        lr_scheduler_configs=[SimpleNamespace(scheduler=scheduler)],
        max_steps=max_steps,
        should_stop=False,
        global_step=0,
    )
    logged = {}
    module = SimpleNamespace(schedule=lambda: schedule, log=lambda k, v, **_: logged.update({k: v}))
    return trainer, module, logged


def _steps(callback, trainer, module, steps, seconds_per_step):
    for _ in range(steps):
        trainer.global_step += 1
        trainer.callbacks[0].now += seconds_per_step
        callback.on_train_batch_end(trainer, module, None, None, 0)


def test_the_horizon_is_where_the_remaining_time_ends_at_the_measured_rate():
    schedule = Cosine(peak_lr=1e-3, warmup_steps=10, max_steps=1000)
    trainer, module, logged = _trainer(schedule, budget_s=100.0)
    callback = TimeBudgetHorizon(every_n_steps=10, start_step=5, margin=0.0)
    callback.on_train_start(trainer, module)
    _steps(callback, trainer, module, 25, 0.25)  # 4 steps a second; the rate starts at step 5
    # at step 20 (the first estimate): 100 - 5 s left at 4 steps/s -> 20 + 380 = 400
    assert callback.horizon == 20 + math.floor(4.0 * (100.0 - 5.0)) == 400
    assert logged["time/horizon_steps"] == callback.horizon
    lam = trainer.lr_scheduler_configs[0].scheduler.lr_lambdas[0]
    assert lam(callback.horizon - 1) == pytest.approx(0.0, abs=1e-12)  # the floor, at H
    assert lam(callback.horizon // 2) > 1e-5  # not yet decayed (the config's 1000 would be)
    # the machine slows down to half speed: the horizon comes in
    first = callback.horizon
    _steps(callback, trainer, module, 100, 0.5)
    assert callback.horizon < first
    assert not trainer.should_stop


def test_the_run_stops_at_the_horizon_by_asking_the_trainer():
    """should_stop, not a lower max_steps: Lightning validates once more when a callback asks
    it to stop, so the last model is validated (a lowered max_steps ends without it)."""
    schedule = Cosine(peak_lr=1e-3, warmup_steps=10, max_steps=1000)
    trainer, module, _ = _trainer(schedule, budget_s=100.0, max_steps=5000)
    callback = TimeBudgetHorizon(every_n_steps=10, start_step=1000)  # no estimate in this test
    callback.load_state_dict({"horizon": 30})
    callback.on_train_start(trainer, module)
    _steps(callback, trainer, module, 29, 0.1)
    assert not trainer.should_stop
    _steps(callback, trainer, module, 1, 0.1)
    assert trainer.global_step == 30 and trainer.should_stop and trainer.max_steps == 5000


def test_the_margin_and_the_step_cap_hold_and_a_resume_keeps_the_horizon():
    schedule = Cosine(peak_lr=1e-3, warmup_steps=10, max_steps=1000)
    trainer, module, _ = _trainer(schedule, budget_s=100.0)
    callback = TimeBudgetHorizon(every_n_steps=10, start_step=5, margin=0.25)
    callback.on_train_start(trainer, module)
    _steps(callback, trainer, module, 20, 0.25)
    assert callback.horizon == 20 + math.floor(4.0 * 95.0 * 0.75) == 305
    capped, cmodule, _ = _trainer(schedule, budget_s=100.0, max_steps=300)
    cap = TimeBudgetHorizon(every_n_steps=10, start_step=5, margin=0.0)
    cap.on_train_start(capped, cmodule)
    _steps(cap, capped, cmodule, 20, 0.25)
    assert cap.horizon == 300
    resumed, rmodule, _ = _trainer(schedule, budget_s=100.0)
    again = TimeBudgetHorizon(every_n_steps=10, start_step=5, margin=0.25)
    again.load_state_dict(callback.state_dict())
    again.on_train_start(resumed, rmodule)
    lam = resumed.lr_scheduler_configs[0].scheduler.lr_lambdas[0]
    assert lam(callback.horizon - 1) == pytest.approx(0.0, abs=1e-12)


def test_no_time_budget_or_no_horizon_is_a_one_line_error():
    cosine = Cosine(peak_lr=1e-3, warmup_steps=10, max_steps=1000)
    trainer, module, _ = _trainer(cosine)
    trainer.callbacks = []
    with pytest.raises(ValueError, match=r"callbacks.time_horizon needs trainer.max_time"):
        TimeBudgetHorizon().on_train_start(trainer, module)
    trainer, module, _ = _trainer(Constant(peak_lr=1e-3))
    with pytest.raises(ValueError, match=r"needs a schedule with a horizon.*Constant"):
        TimeBudgetHorizon().on_train_start(trainer, module)
    with pytest.raises(ValueError, match=r"callbacks.time_horizon.margin=0.9 is not valid"):
        TimeBudgetHorizon(margin=0.9)


HORIZON = "+callbacks.time_horizon._target_=attnlab.training.time_horizon.TimeBudgetHorizon"


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            [HORIZON],
            r"^callbacks.time_horizon needs trainer.max_time .* it is null \(a run without a "
            r"time budget drops the callback: ~callbacks.time_horizon\)$",
        ),
        (
            [HORIZON, "trainer.max_time=00:00:01:00", "scheduler=constant"],
            r"^callbacks.time_horizon needs a schedule with a horizon \(scheduler=cosine\); "
            r"scheduler._target_ is attnlab.training.schedules.Constant$",
        ),
        (
            [HORIZON, "trainer.max_time=00:00:01:00", "+callbacks.time_horizon.margin=0.9"],
            r"^callbacks.time_horizon.margin=0.9 is not valid",
        ),
    ],
)
def test_the_preflight_refuses_a_horizon_it_cannot_set(compose, overrides, message):

    with pytest.raises(ValueError, match=message):
        dry_build(compose(overrides))


@pytest.mark.slow
def test_the_preflight_accepts_a_horizon_it_can_set(compose):
    dry_build(compose([HORIZON, "trainer.max_time=00:00:01:00"]))  # a time budget and cosine
