"""The step's gradient: its norm before clipping (logged, and reused by the clipping), and the
divergence guard that stops a run whose gradients are no longer finite.

The norm is one fused (foreach) reduction over every gradient. A NaN or inf anywhere (a NaN loss
makes every gradient NaN) makes it non-finite, and the guard then keeps the update from being
applied and ends the run as "diverged". How it learns that the norm is non-finite is
`module.divergence_check`:

    every_step     (default) the norm is read back to the host every step (one host sync, which
                   on a GPU waits for the step's queued work); a non-finite norm drops the
                   gradients (Adam skips a parameter without one) and the run stops in that step.
    logging_steps  the guard reads nothing back in the step: the finiteness flag goes to the fused
                   optimizer (torch.optim's `found_inf`, the input 16-mixed's GradScaler gives
                   it), which skips the whole update on the device, moments and step count
                   included, at that step and every one after it. The first such step is kept
                   on the device and read on the steps whose metrics are logged anyway
                   (trainer.log_every_n_steps), before validation and at the end. The run stops
                   there, up to log_every_n_steps - 1 steps later, with the weights of the step
                   before the divergence and the same `diverged_step`. Needs a fused optimizer
                   (optim.fused null or true). Without a divergence, the same run as every_step.
                   A checkpoint reads the flag before it is written (so one saved in between
                   says "diverged", and a run resumed from it stops at once); with
                   trainer.log_every_n_steps=0 only validation and the end read it.

What else syncs in a step is the eager model's: skipping the pads and taking the logits at the
real targets (model.skip_padding, boolean indexing) read the batch's mask back on a GPU. With
model.compile (every position, fixed shapes) logging_steps leaves a step with no host sync.

Under 16-mixed the GradScaler skips non-finite steps itself, neither mode reads the norm, and the
training step checks the loss's finiteness (a host sync) in both.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch import Tensor, nn

from attnlab.problems import choice_problem

DIVERGENCE_CHECKS = ("every_step", "logging_steps")


def divergence_check_problem(check: str, optim: functools.partial | None) -> str | None:
    """module.divergence_check's value, and a fused optimizer where it needs one; one line or
    None."""
    problem = choice_problem("module.divergence_check", check, DIVERGENCE_CHECKS)
    if problem or check != "logging_steps" or optim is None:
        return problem
    takes_fused = "fused" in inspect.signature(optim.func).parameters
    kw = optim.keywords
    if not takes_fused or kw.get("fused") is False or kw.get("foreach"):
        name = getattr(optim.func, "__qualname__", optim.func)
        return (
            f"module.divergence_check=logging_steps needs a fused optimizer (it skips a "
            f"non-finite step on the device), and optim ({name}, fused={kw.get('fused')}, "
            f"foreach={kw.get('foreach')}) is not one; expected optim.fused=null or true, or "
            "module.divergence_check=every_step"
        )
    return None


def unfused_problem(optimizer, check: str) -> str | None:
    """logging_steps and a built optimizer whose step does not take `found_inf` (torch runs it
    unfused for these parameters: optim.fused null falls back where torch has no fused kernel
    for their device), one line; else None."""
    inner = getattr(optimizer, "inner", optimizer)  # MasterWeights: its inner optimizer's
    if check != "logging_steps" or getattr(inner, "_step_supports_amp_scaling", False):
        return None
    return (
        f"module.divergence_check=logging_steps needs a fused optimizer, and torch runs "
        f"{type(inner).__name__} unfused on these parameters; expected "
        "module.divergence_check=every_step"
    )


class GradientGuard:
    """The gradient norm of each step and the divergence guard (the module docstring).

    `norm`: this step's norm before clipping, or None (no gradients, or a non-finite norm under
    every_step). The owner calls `inspect` after the backward pass, `clip` for gradient
    clipping, and `diverged_at` where it may read a value back to the host."""

    def __init__(self, check: str = "every_step") -> None:
        self.check = check
        self.norm: Tensor | None = None
        self._first_bad: Tensor | None = None  # logging_steps: the first non-finite step, or -1

    def inspect(self, params: list[nn.Parameter], optimizer, step: int, scaled: bool) -> bool:
        """The norm of the gradients of `params`; True when the run must stop at this step
        (every_step and a non-finite norm: the gradients are dropped). Under logging_steps a
        non-finite norm sets the optimizer's `found_inf`, so its step and every later one change
        nothing."""
        self.norm = None
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return False
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
        if scaled:  # 16-mixed: the GradScaler finds and skips non-finite steps
            self.norm = norm
            return False
        if self.check == "every_step":
            if not torch.isfinite(norm):  # the step's host sync
                for p in params:
                    p.grad = None
                return True
            self.norm = norm
            return False
        if self._first_bad is None:
            self._first_bad = torch.full((), -1, dtype=torch.long, device=norm.device)
        first_now = ~torch.isfinite(norm) & (self._first_bad < 0)
        self._first_bad = torch.where(first_now, step, self._first_bad)
        # from the first non-finite step on, every update is skipped (read by torch.optim's
        # fused step), so the run ends with the weights it had before it
        torch_optimizer(optimizer).found_inf = (self._first_bad >= 0).float()
        self.norm = norm
        return False

    def diverged_at(self) -> int | None:
        """logging_steps: the first step whose norm was non-finite, or None (a host read);
        every_step: None (that guard stops the run itself)."""
        if self._first_bad is None:
            return None
        step = int(self._first_bad)
        return step if step >= 0 else None

    def clip(self, params: list[nn.Parameter], max_norm: float) -> bool:
        """Clip the gradients to `max_norm` with this step's norm (torch.nn.utils.
        clip_grad_norm_'s clipping, one norm a step instead of two); False where there is no
        norm to reuse."""
        if self.norm is None:
            return False
        grads = [p for p in params if p.grad is not None]
        torch.nn.utils.clip_grads_with_norm_(grads, max_norm, self.norm)
        return True


def torch_optimizer(optimizer):
    """The torch optimizer behind Lightning's LightningOptimizer wrapper, or `optimizer`."""
    return getattr(optimizer, "_optimizer", optimizer)
