"""Learning-rate schedules: each is a class whose instance maps an optimizer step (from 1) to a
learning rate. The `scheduler` config group picks one by `_target_` (conf/scheduler/*.yaml); a
new schedule is a class here, or anywhere importable, and a yaml file naming it.

Each schedule checks its own arguments once, in its constructor, and says which key is wrong
(scheduler.<key>). The config is a partial: the harness completes the run's facts a schedule
declares and its config leaves null, `d_model` (noam) and `max_steps` (cosine's horizon,
trainer.max_steps), in `schedule_from_config`.

The peak learning rate has one home, `scheduler.peak_lr`, which every schedule reads: inverse_sqrt,
cosine and constant rise (after any warmup) to it; noam is rescaled to peak there. Only noam may
leave it null, and then its own formula sets the peak, (d_model * warmup_steps)^-0.5 * scale, so
its warmup also moves its peak; a warmup ablation wants arms that differ in the warmup only, so it
sets peak_lr. `peak_of` is the peak a schedule really reaches (what results.json and W&B record).

`lr_lambda` turns a schedule into the factor function of torch's LambdaLR: the optimizer is built
with lr=1.0, so the factor *is* the learning rate. LambdaLR calls the factor with 0 before the
first optimizer step, hence the `+ 1`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from hydra.utils import instantiate

from attnlab.problems import integer_problem, number_problem, raise_first


def noam(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Section 5.3: lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Linear warmup for `warmup_steps` steps, then decay with the inverse square root of the step;
    the peak, at step == warmup_steps, is scale * (d_model * warmup_steps)^-0.5 (7.0e-4 for the
    base model). warmup_steps=0 drops the warmup term: lr = scale * d_model^-0.5 * step^-0.5.
    """
    step = max(step, 1)
    if warmup_steps == 0:
        return scale * d_model**-0.5 * step**-0.5
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def inverse_sqrt(step: int, peak_lr: float, warmup_steps: int) -> float:
    """fairseq's inverse_sqrt: lr = peak_lr * step / warmup_steps while step < warmup_steps,
    then lr = peak_lr * sqrt(warmup_steps / step). warmup_steps=0: lr = peak_lr * step^-0.5.
    """
    step = max(step, 1)
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    return peak_lr * math.sqrt(max(warmup_steps, 1) / step)


def cosine(
    step: int, peak_lr: float, warmup_steps: int, max_steps: int, min_lr: float = 0.0
) -> float:
    """Linear warmup to peak_lr, then cosine decay to min_lr at max_steps (held there after):
    lr = min_lr + (peak_lr - min_lr) * (1 + cos(pi * p)) / 2,  p = (step - warmup) / (max - warmup).
    """
    step = max(step, 1)
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    decay_steps = max(max_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / decay_steps, 1.0)
    return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def constant(step: int, peak_lr: float, warmup_steps: int = 0) -> float:
    """lr = peak_lr * min(1, step / warmup_steps); warmup_steps=0: lr = peak_lr throughout."""
    step = max(step, 1)
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    return peak_lr


def noam_scale_for_peak(peak_lr: float, d_model: int, warmup_steps: int) -> float:
    """The noam `scale` whose peak is peak_lr: peak = scale * (d_model * warmup_steps)^-0.5 (at
    step warmup_steps; with no warmup, at step 1: scale * d_model^-0.5)."""
    return peak_lr * math.sqrt(d_model * max(warmup_steps, 1))


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A learning rate for every optimizer step: `schedule(step)`, step counted from 1. The
    fields are the config's keys (scheduler.<field>); the constructor checks them."""

    peak_lr: float | None  # the largest learning rate, reached at the end of the warmup
    warmup_steps: int  # steps of linear warmup from 0 to peak_lr (Sec. 5.3: 4000); 0: none

    # True for a schedule whose own formula sets the peak when peak_lr is null (noam)
    formula_peak = False

    def __post_init__(self) -> None:
        raise_first([integer_problem("scheduler.warmup_steps", self.warmup_steps, 0)])
        if self.peak_lr is None:
            if self.formula_peak:
                return
            raise ValueError(
                f"scheduler.peak_lr=null is not valid with {type(self).__name__}; expected a "
                "number > 0 (only noam may leave it null: its formula then sets the peak)"
            )
        raise_first([number_problem("scheduler.peak_lr", self.peak_lr, 0.0, low_open=True)])

    def __call__(self, step: int) -> float:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Noam(Schedule):
    """Sec. 5.3 (noam): scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5); with
    peak_lr, `scale` is set so that the peak, at step warmup_steps, is peak_lr."""

    d_model: int
    peak_lr: float | None = None
    warmup_steps: int = 4000
    scale: float = 1.0  # multiplies noam's formula (set from peak_lr when that is given)
    formula_peak = True

    def __post_init__(self) -> None:
        super().__post_init__()
        raise_first(
            [
                integer_problem("model.d_model", self.d_model, 1),
                number_problem("scheduler.scale", self.scale, 0.0, low_open=True),
            ]
        )
        if self.warmup_steps == 0 and self.peak_lr is None:
            spike = self.d_model**-0.5 / noam(4000, self.d_model, 4000)
            raise ValueError(
                "scheduler.warmup_steps=0 with scheduler=noam is not valid: noam's peak is "
                "(d_model * warmup_steps)^-0.5, so without warmup its first step takes "
                f"lr = d_model^-0.5 = {self.d_model**-0.5:.3g} ({spike:.0f}x its peak with "
                "warmup 4000); set scheduler.peak_lr to hold the peak, or use "
                "scheduler.warmup_steps >= 1"
            )

    def __call__(self, step: int) -> float:  # every optimizer step: the scale is computed once
        return noam(step, self.d_model, self.warmup_steps, self._scale)

    @cached_property
    def _scale(self) -> float:
        """`scale`, or the one that makes the peak (at step warmup_steps) peak_lr."""
        if self.peak_lr is None:
            return self.scale
        return noam_scale_for_peak(self.peak_lr, self.d_model, self.warmup_steps)


@dataclass(frozen=True, kw_only=True)
class InverseSqrt(Schedule):
    """fairseq's inverse_sqrt: linear warmup to peak_lr, then peak_lr * sqrt(warmup / step)."""

    peak_lr: float = 3e-3
    warmup_steps: int = 4000

    def __call__(self, step: int) -> float:
        return inverse_sqrt(step, self.peak_lr, self.warmup_steps)


@dataclass(frozen=True, kw_only=True)
class Cosine(Schedule):
    """Linear warmup to peak_lr, cosine decay to min_lr at max_steps (the run's
    trainer.max_steps unless given)."""

    peak_lr: float = 3e-3
    warmup_steps: int = 4000
    max_steps: int | None = None  # the step the decay ends at; null: trainer.max_steps
    min_lr: float = 0.0  # the learning rate at the end of the decay

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.max_steps, int) and self.max_steps > 0):
            raise ValueError(
                f"scheduler=cosine needs a positive scheduler.max_steps (or trainer.max_steps), "
                f"got {self.max_steps!r}"
            )
        raise_first([number_problem("scheduler.min_lr", self.min_lr, 0.0)])

    def __call__(self, step: int) -> float:
        return cosine(step, self.peak_lr, self.warmup_steps, self.max_steps, self.min_lr)


@dataclass(frozen=True, kw_only=True)
class Constant(Schedule):
    """peak_lr throughout, after an optional linear warmup."""

    peak_lr: float = 3e-3
    warmup_steps: int = 0

    def __call__(self, step: int) -> float:
        return constant(step, self.peak_lr, self.warmup_steps)


def schedule_from_config(
    scheduler: dict, d_model: int, max_steps: int | None
) -> Callable[[int], float]:
    """The schedule of a run's config: cfg.scheduler (a plain dict) instantiated as a partial
    of its `_target_`, completed with the run's facts it declares and leaves null: `d_model`,
    and `max_steps` (trainer.max_steps). An old checkpoint's is read through
    attnlab.training.compat first."""
    spec = dict(scheduler)
    if "_target_" not in spec:
        raise ValueError(
            "scheduler._target_ is missing; expected a schedule class such as "
            f"{__name__}.Cosine (conf/scheduler/*.yaml)"
        )
    factory = instantiate({**spec, "_partial_": True}, _convert_="all")
    takes = inspect.signature(factory).parameters
    facts = {"d_model": d_model, "max_steps": max_steps}
    return factory(
        **{k: v for k, v in facts.items() if k in takes and factory.keywords.get(k) is None}
    )


def peak_of(schedule: Callable[[int], float], warmup_steps: int) -> float:
    """The largest learning rate `schedule` takes: every schedule here rises (linearly, or not
    at all) until its warmup ends and never rises after, so its peak is at step max(warmup, 1)."""
    return max(schedule(1), schedule(max(warmup_steps, 1)))


def lr_lambda(schedule: Callable[[int], float]) -> Callable[[int], float]:
    """LambdaLR factor for an optimizer built with lr=1.0: factor(i) = schedule(i + 1).

    A plain function on purpose: LambdaLR keeps functions out of its state_dict, so checkpoints
    hold no pickled schedule; it is rebuilt from the config on resume.
    """
    return lambda i: schedule(i + 1)
