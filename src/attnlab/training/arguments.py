"""TransformerModule's own arguments checked when it is built: one line naming the config key
and the valid choices (attnlab.problems), raised as a ValueError."""

from __future__ import annotations

import functools

from attnlab.problems import choice_problem, number_problem, raise_first
from attnlab.training.gradients import divergence_check_problem
from attnlab.training.optimizer import check_optimizer
from attnlab.training.options import COMPILE_MODES, LOSS_NORMALIZATIONS
from attnlab.training.specs import as_spec


def check_arguments(
    optim,
    label_smoothing,
    z_loss,
    loss_normalize,
    fused_output,
    divergence_check="every_step",
    compile=False,
) -> None:
    """TransformerModule's own arguments, one line naming the key (a checkpoint's optimizer, a
    dict, was checked when its run was built)."""
    fused_z = (
        f"loss.fused_output=true and loss.z_loss={z_loss} cannot both be set (the fused loss "
        "never forms the logits the z-loss needs); expected loss.z_loss=0 or "
        "loss.fused_output=false"
    )
    raise_first(
        [
            number_problem("loss.label_smoothing", label_smoothing, 0.0, 1.0),
            number_problem("loss.z_loss", z_loss, 0.0),
            choice_problem("loss.normalize", loss_normalize, LOSS_NORMALIZATIONS),
            fused_z if fused_output and z_loss else None,
            choice_problem("model.compile_mode", compile, COMPILE_MODES)
            if isinstance(compile, str)
            else None,
            divergence_check_problem(
                divergence_check, optim if isinstance(optim, functools.partial) else None
            ),
        ]
    )
    if isinstance(optim, functools.partial):  # a new run's
        check_optimizer(as_spec(optim, "optim"))
