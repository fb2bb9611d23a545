"""Learning-rate schedules: each returns the learning rate at optimizer step `step` (from 1).

`lr_lambda` turns a schedule into the factor function of torch's LambdaLR: the optimizer is built
with lr=1.0, so the factor *is* the learning rate. LambdaLR calls the factor with 0 before the
first optimizer step, hence the `+ 1`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

SCHEDULERS = ("noam", "inverse_sqrt", "cosine", "constant")


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


def build_schedule(
    name: str,
    *,
    lr: float,
    d_model: int,
    warmup_steps: int,
    max_steps: int | None = None,
    min_lr: float = 0.0,
    scale: float = 1.0,
) -> Callable[[int], float]:
    """The schedule `name` (one of SCHEDULERS) as a function step -> lr, step counted from 1.

    `lr` is the peak learning rate of inverse_sqrt, cosine and constant; noam ignores it (its
    peak follows from d_model, warmup_steps and `scale`).
    """
    if name not in SCHEDULERS:
        raise ValueError(
            f"scheduler.name={name!r} is not valid; expected one of: {', '.join(SCHEDULERS)}"
        )
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(
            f"scheduler.warmup_steps={warmup_steps!r} is not valid; expected an integer >= 0"
        )
    if name == "noam":
        return partial(noam, d_model=d_model, warmup_steps=warmup_steps, scale=scale)
    if name == "inverse_sqrt":
        return partial(inverse_sqrt, peak_lr=lr, warmup_steps=warmup_steps)
    if name == "cosine":
        if max_steps is None or max_steps <= 0:
            raise ValueError(
                f"scheduler.name='cosine' needs a positive scheduler.max_steps (or "
                f"trainer.max_steps), got {max_steps!r}"
            )
        return partial(
            cosine, peak_lr=lr, warmup_steps=warmup_steps, max_steps=max_steps, min_lr=min_lr
        )
    return partial(constant, peak_lr=lr, warmup_steps=warmup_steps)


def lr_lambda(schedule: Callable[[int], float]) -> Callable[[int], float]:
    """LambdaLR factor for an optimizer built with lr=1.0: factor(i) = schedule(i + 1).

    A plain function on purpose: LambdaLR keeps functions out of its state_dict, so checkpoints
    hold no pickled schedule; it is rebuilt from the config on resume.
    """
    return lambda i: schedule(i + 1)
