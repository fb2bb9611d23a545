"""Learning-rate schedules: each returns the learning rate at optimizer step `step` (from 1).

`lr_lambda` turns a schedule into the factor function of torch's LambdaLR: the optimizer is built
with lr=1.0, so the factor *is* the learning rate. LambdaLR calls the factor with 0 before the
first optimizer step, hence the `+ 1`.

The peak learning rate has one home, `scheduler.peak_lr`, which every schedule reads: inverse_sqrt,
cosine and constant rise (after any warmup) to it; noam is rescaled to peak there. Only noam may
leave it null, and then its own formula sets the peak, (d_model * warmup_steps)^-0.5 * scale, so
its warmup also moves its peak; a warmup ablation wants arms that differ in the warmup only, so it
sets peak_lr. `peak_of` is the peak a schedule really reaches (what results.json and W&B record).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

from hydra.utils import instantiate

SCHEDULERS = ("noam", "inverse_sqrt", "cosine", "constant")
DEFAULT_SCHEDULE = "attnlab.training.schedules.build_schedule"  # for configs saved without one


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


def noam_problem(name: str, warmup_steps: int, peak_lr: float | None, d_model: int) -> str | None:
    """noam with warmup_steps=0 and no peak_lr is not "no warmup": its first step takes
    lr = d_model^-0.5, many times the peak of the warmed-up schedule."""
    if name != "noam" or warmup_steps != 0 or peak_lr is not None:
        return None
    spike = d_model**-0.5 / noam(4000, d_model, 4000)
    return (
        f"scheduler.warmup_steps=0 with scheduler.name=noam is not valid: noam's peak is "
        f"(d_model * warmup_steps)^-0.5, so without warmup its first step takes "
        f"lr = d_model^-0.5 = {d_model**-0.5:.3g} ({spike:.0f}x its peak with warmup 4000); "
        "set scheduler.peak_lr to hold the peak, or use scheduler.warmup_steps >= 1"
    )


def peak_problem(name: str, peak_lr) -> str | None:
    """Every schedule but noam needs a peak learning rate; a given one must be > 0."""
    if peak_lr is None:
        if name == "noam":
            return None
        return (
            f"scheduler.peak_lr=null is not valid with scheduler.name={name}; expected a number "
            "> 0 (only noam may leave it null: its formula then sets the peak)"
        )
    if isinstance(peak_lr, bool) or not isinstance(peak_lr, int | float) or not peak_lr > 0:
        return f"scheduler.peak_lr={peak_lr!r} is not valid; expected a number > 0"
    return None


def build_schedule(
    name: str,
    *,
    peak_lr: float | None,
    d_model: int,
    warmup_steps: int,
    max_steps: int | None = None,
    min_lr: float = 0.0,
    scale: float = 1.0,
) -> Callable[[int], float]:
    """The schedule `name` (one of SCHEDULERS) as a function step -> lr, step counted from 1,
    peaking at `peak_lr` (noam with peak_lr=None: at its formula's peak, times `scale`)."""
    if name not in SCHEDULERS:
        raise ValueError(
            f"scheduler.name={name!r} is not valid; expected one of: {', '.join(SCHEDULERS)}"
        )
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(
            f"scheduler.warmup_steps={warmup_steps!r} is not valid; expected an integer >= 0"
        )
    problem = peak_problem(name, peak_lr)
    if problem:
        raise ValueError(problem)
    if name == "noam":
        if peak_lr is not None:
            scale = noam_scale_for_peak(peak_lr, d_model, warmup_steps)
        return partial(noam, d_model=d_model, warmup_steps=warmup_steps, scale=scale)
    if name == "inverse_sqrt":
        return partial(inverse_sqrt, peak_lr=peak_lr, warmup_steps=warmup_steps)
    if name == "cosine":
        if max_steps is None or max_steps <= 0:
            raise ValueError(
                f"scheduler.name='cosine' needs a positive scheduler.max_steps (or "
                f"trainer.max_steps), got {max_steps!r}"
            )
        return partial(
            cosine, peak_lr=peak_lr, warmup_steps=warmup_steps, max_steps=max_steps, min_lr=min_lr
        )
    return partial(constant, peak_lr=peak_lr, warmup_steps=warmup_steps)


def schedule_from_config(
    scheduler: dict, d_model: int, max_steps: int | None, optim: dict | None = None
) -> Callable[[int], float]:
    """The schedule of a run's config: cfg.scheduler (a plain dict) instantiated, a partial of
    its `_target_` (build_schedule unless the config names another), completed with d_model and
    trainer.max_steps (the cosine horizon unless scheduler.max_steps is set).

    `optim`: a checkpoint's optim hyper-parameters. Checkpoints made before scheduler.peak_lr
    became the one home kept the peak in optim.lr (with peak_lr null); it is read from there."""
    spec = {"_target_": DEFAULT_SCHEDULE, **scheduler, "_partial_": True}
    spec["max_steps"] = spec.get("max_steps") or max_steps
    legacy = (optim or {}).get("lr")
    if spec.get("peak_lr") is None and spec.get("name") != "noam" and legacy is not None:
        spec["peak_lr"] = legacy
    spec.setdefault("peak_lr", None)
    return instantiate(spec, _convert_="all")(d_model=d_model)


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
