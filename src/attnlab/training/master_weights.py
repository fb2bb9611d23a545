"""Float32 master weights for a model whose weights are bf16 (trainer.precision=bf16-true).

Under `bf16-true` Lightning casts the model to bf16: the weights, the residual stream and every
activation, with no autocast casts in the step (bf16-mixed keeps float32 weights and casts to bf16
inside each matrix product). Adam applied to bf16 weights loses every update smaller than half a
bf16 step of the weight (bf16 keeps 8 significant bits: at a weight of 1.0 an update below about
0.002 rounds away), so late in training, or at a small learning rate, the weights stop moving.
`MasterWeights` is mixed-precision training's remedy (Micikevicius et al., 2018, "Mixed Precision
Training", Sec. 3.1): the optimizer updates a float32 copy of every parameter, and the model's
bf16 weights are that copy rounded after each step, so small updates accumulate in the copy.

It wraps the optimizer the config names (built over the float32 copies, fused where torch can), and
is a torch Optimizer to Lightning and the learning-rate schedule (its `param_groups` are the inner
optimizer's). Its state dict holds the inner optimizer's and the copies, so a resumed run goes on
from the same float32 weights.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

LOW_PRECISION = (torch.bfloat16, torch.float16)


def has_low_precision_weights(model: nn.Module) -> bool:
    """Whether any parameter of `model` is bf16 or fp16 (Lightning's `*-true` precisions)."""
    return any(p.dtype in LOW_PRECISION for p in model.parameters())


def master_weights_optimizer(model: nn.Module, optim: dict) -> MasterWeights:
    """cfg.optim (attnlab.training.optimizer) over float32 copies of `model`'s parameters, in
    the same two weight-decay groups."""
    from attnlab.training.optimizer import decay_groups, optimizer_from_config

    groups = decay_groups(model, float(optim.get("weight_decay", 0.0)))
    return MasterWeights(groups, lambda copies: optimizer_from_config(copies, optim))


class MasterWeights(torch.optim.Optimizer):
    """An optimizer over float32 copies of `groups`' parameters (the model's, bf16): `build`
    makes the inner optimizer from the copies' groups; each `step` moves the model's gradients
    to the copies (as float32), steps the inner optimizer, and writes the copies back to the
    model's weights (rounded to their dtype)."""

    def __init__(
        self, groups: list[dict], build: Callable[[list[dict]], torch.optim.Optimizer]
    ) -> None:
        self.model_params: list[nn.Parameter] = [p for g in groups for p in g["params"]]
        self.masters: list[Tensor] = [
            p.detach().clone().float().requires_grad_(True) for p in self.model_params
        ]
        copies = iter(self.masters)
        master_groups = [{**g, "params": [next(copies) for _ in g["params"]]} for g in groups]
        self.inner = build(master_groups)
        # no super().__init__: the parameters it would register are the inner optimizer's;
        # param_groups, state and defaults are the inner optimizer's (properties below)
        self._optimizer_step_pre_hooks: dict = {}
        self._optimizer_step_post_hooks: dict = {}
        self._optimizer_state_dict_pre_hooks: dict = {}
        self._optimizer_state_dict_post_hooks: dict = {}
        self._optimizer_load_state_dict_pre_hooks: dict = {}
        self._optimizer_load_state_dict_post_hooks: dict = {}

    # The inner optimizer's, read through on every access: its load_state_dict replaces its
    # groups and state, and the learning-rate schedule must write the groups the update reads.
    @property
    def param_groups(self) -> list[dict]:
        return self.inner.param_groups

    @param_groups.setter
    def param_groups(self, groups: list[dict]) -> None:
        self.inner.param_groups = groups

    @property
    def state(self):
        return self.inner.state

    @state.setter
    def state(self, state) -> None:
        self.inner.state = state

    @property
    def defaults(self) -> dict:
        return self.inner.defaults

    @defaults.setter
    def defaults(self, defaults: dict) -> None:
        self.inner.defaults = defaults

    def add_param_group(self, param_group: dict) -> None:
        raise NotImplementedError(
            "MasterWeights holds float32 copies of the parameters it was built with; build a "
            "new one to add parameters"
        )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):
        """The closure (forward, backward, clipping: Lightning's), then the update of the float32
        copies, then the model's weights set to them. A `found_inf` set on this optimizer (the
        divergence guard's, training/gradients.py) reaches the inner fused step."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for param, master in zip(self.model_params, self.masters, strict=True):
            master.grad = None if param.grad is None else param.grad.to(master.dtype)
        if getattr(self, "found_inf", None) is not None:
            self.inner.found_inf = self.found_inf
        self.inner.step()
        for param, master in zip(self.model_params, self.masters, strict=True):
            param.copy_(master)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.model_params:
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()
        self.inner.zero_grad(set_to_none)

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "masters": [m.detach() for m in self.masters]}

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict) -> None:
        """The inner optimizer's state and the float32 copies, and the model's weights set to
        them (a resumed run goes on from the same float32 weights). A plain optimizer's state
        (a checkpoint saved without master weights: another precision, or before them) goes
        to the inner optimizer, and the copies start from the model's weights."""
        if "inner" not in state_dict:
            self.inner.load_state_dict(state_dict)
            return
        self.inner.load_state_dict(state_dict["inner"])
        for master, saved, param in zip(
            self.masters, state_dict["masters"], self.model_params, strict=True
        ):
            master.copy_(saved)
            param.copy_(master)

    def __repr__(self) -> str:
        return f"MasterWeights(float32 copies of {len(self.masters)} tensors, {self.inner!r})"
