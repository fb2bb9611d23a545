"""The optimizer (Sec. 5.3): Adam, or AdamW, over two parameter groups, on fused kernels where
torch has them.

Weight decay applies to the weight matrices (every nn.Linear weight) and the token embeddings
only, never to biases, norm gains or learned positional tables (as nanoGPT, GPT-2 and most
Transformer recipes): decaying a LayerNorm gain towards 0 or a bias towards 0 is not a
regularizer of the model's capacity, only a pull away from the identity.

`fused` / `foreach` pick torch's implementation of the same update: "fused" (one kernel over all
parameters; on this repository's 2-core CPU 3-4x faster than the others for Adam), "foreach"
(batched tensor lists) or the per-parameter loop. They change results only by float rounding
(tests/test_optimizer.py). None for both: fused where torch supports it for every parameter
(CPU, CUDA, ...), otherwise torch's own default.
"""

from __future__ import annotations

import torch
from hydra.utils import instantiate
from torch import nn

from attnlab.model.layers import Embeddings
from attnlab.training.options import OPTIMIZERS
from attnlab.validation import choice_problem, raise_first

DEFAULT_OPTIMIZER = "attnlab.training.optimizer.build_optimizer"  # for configs saved without one


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two parameter groups of `model`: {"params": matrices, "weight_decay": weight_decay} for
    the nn.Linear weights and the token embedding tables (a weight tied to both counts once),
    and {"params": the rest, "weight_decay": 0.0}: biases, norm gains, positional tables."""
    decayed: dict[int, nn.Parameter] = {}
    for module in model.modules():
        if isinstance(module, nn.Linear):
            decayed[id(module.weight)] = module.weight
        elif isinstance(module, Embeddings):
            decayed[id(module.weight)] = module.weight
    rest = [p for p in model.parameters() if id(p) not in decayed]
    groups = [
        {"params": list(decayed.values()), "weight_decay": weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def implementation(
    params: list[nn.Parameter],
    fused: bool | None,
    foreach: bool | None,
    grad_scaler: bool = False,
) -> dict[str, bool]:
    """The `fused` / `foreach` keyword arguments for torch's Adam(W): as given, or (both None)
    fused=True where every parameter is a floating-point tensor on a device torch has fused
    Adam kernels for, else nothing (torch's default). Not fused under 16-mixed's GradScaler
    (`grad_scaler`): a fused optimizer unscales inside its step, after the gradient norm is
    logged and clipped, which Lightning refuses."""
    if fused is not None or foreach is not None:
        return {k: v for k, v in (("fused", fused), ("foreach", foreach)) if v is not None}
    if grad_scaler:
        return {}
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    devices = set(_get_fused_kernels_supported_devices())
    if params and all(p.is_floating_point() and p.device.type in devices for p in params):
        return {"fused": True}
    return {}


def build_optimizer(
    model: nn.Module,
    name: str = "adam",
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    weight_decay: float = 0.0,
    fused: bool | None = None,
    foreach: bool | None = None,
    grad_scaler: bool = False,
) -> torch.optim.Optimizer:
    """Adam or AdamW (`name`) with lr=1.0 (a LambdaLR's factor sets the learning rate),
    betas, eps, weight decay on decay_groups(), and the fused / foreach choice (implementation;
    `grad_scaler`: training under 16-mixed's GradScaler). The `optim` config group is a partial
    of this function (`_target_`), completed with the model by optimizer_from_config."""
    raise_first([choice_problem("optim.name", name, OPTIMIZERS)])
    optimizer_cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    groups = decay_groups(model, weight_decay)
    params = [p for g in groups for p in g["params"]]
    return optimizer_cls(
        groups,
        lr=1.0,
        betas=tuple(betas),
        eps=eps,
        **implementation(params, fused, foreach, grad_scaler),
    )


def optimizer_from_config(
    model: nn.Module, optim: dict, grad_scaler: bool = False
) -> torch.optim.Optimizer:
    """cfg.optim (a plain dict) instantiated for `model`: its `_target_` (build_optimizer
    unless the config names another builder) called with the model and its keys. The learning
    rate is the schedule's (scheduler.peak_lr); an `lr` in a checkpoint made before that was
    its home is dropped here (schedules.schedule_from_config reads it)."""
    spec = {"_target_": DEFAULT_OPTIMIZER, **optim, "_partial_": True}
    spec.pop("lr", None)
    return instantiate(spec, _convert_="all")(model, grad_scaler=grad_scaler)
