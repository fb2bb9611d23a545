"""The optimizer (Sec. 5.3): any torch optimizer named by the `optim` config group's `_target_`
(conf/optim: torch.optim.Adam with the paper's betas and eps, torch.optim.AdamW), over two
parameter groups, on fused kernels where torch has them.

The config is a partial; `optimizer_from_config` completes it with the parameter groups and
lr=1.0 (a LambdaLR's factor is the learning rate: scheduler.peak_lr is its one home).

Weight decay applies to the weight matrices (every nn.Linear weight) and the token embeddings
only, never to biases, norm gains or learned positional tables (as nanoGPT, GPT-2 and most
Transformer recipes): decaying a LayerNorm gain towards 0 or a bias towards 0 is not a
regularizer of the model's capacity, only a pull away from the identity.

`fused` / `foreach` pick torch's implementation of the same update: "fused" (one kernel over all
parameters; on this repository's 2-core CPU 3-4x faster than the others for Adam), "foreach"
(batched tensor lists) or the per-parameter loop. They change results only by float rounding
(tests/test_optimizer.py). Both null (or absent): fused where the optimizer has a `fused`
argument and torch runs it fused for every parameter's device and dtype (CPU, CUDA, ...),
otherwise torch's default.
"""

from __future__ import annotations

import inspect

import torch
from hydra.utils import instantiate
from torch import nn

from attnlab.model.layers import Embeddings
from attnlab.problems import number_problem, raise_first

# Checkpoints saved before the optimizer was a torch `_target_` named it by `name` (with
# `_target_` attnlab.training.optimizer.build_optimizer, or none); optimizer_from_config reads
# them through this table.


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


def _spec(optim: dict) -> dict:
    """cfg.optim (today's form: attnlab.training.compat) as a partial of its `_target_`."""
    spec = dict(optim)
    if "_target_" not in spec:
        raise ValueError("optim._target_ is missing; expected an optimizer class such as "
                         "torch.optim.Adam (conf/optim/*.yaml)")  # fmt: skip
    return {**spec, "_partial_": True}


def _fused_by_default(factory, grad_scaler: bool) -> bool:
    """Try fused kernels: the config leaves fused and foreach null, the optimizer has a `fused`
    argument, and no 16-mixed GradScaler is used (a fused optimizer unscales inside its step,
    after the gradient norm is logged and clipped, which Lightning refuses)."""
    given = [factory.keywords.get(k) for k in ("fused", "foreach")]
    takes_fused = "fused" in inspect.signature(factory.func).parameters
    return takes_fused and not grad_scaler and all(v is None for v in given)


def _fuses(factory, groups: list[dict]) -> bool:
    """Whether torch runs this optimizer fused for these parameters: one fused step on a
    one-element stand-in per (device, dtype) of them, so that torch's own check (made at the
    first step, not when the optimizer is built) decides, through public calls only."""
    for device, dtype in {(p.device, p.dtype) for g in groups for p in g["params"]}:
        probe = nn.Parameter(torch.zeros(1, device=device, dtype=dtype))
        probe.grad = torch.zeros_like(probe)
        try:
            factory([probe], lr=1.0, fused=True).step()
        except RuntimeError:  # "`fused=True` requires all the params to be floating point ..."
            return False
    return True


def optimizer_from_config(
    model: nn.Module | list[dict], optim: dict, grad_scaler: bool = False
) -> torch.optim.Optimizer:
    """cfg.optim (a plain dict) instantiated: its `_target_` called with decay_groups(model)
    (or the given parameter groups), lr=1.0 and its keys; fused where torch can
    (_fused_by_default, _fuses), else torch's default."""
    factory = instantiate(_spec(optim), _convert_="all")
    weight_decay = factory.keywords.get("weight_decay", 0.0)
    groups = model if isinstance(model, list) else decay_groups(model, weight_decay)
    if _fused_by_default(factory, grad_scaler) and _fuses(factory, groups):
        return factory(groups, lr=1.0, fused=True)
    return factory(groups, lr=1.0)


def check_optimizer(optim: dict) -> None:
    """The optimizer's own arguments, one line naming the key: the ranges the Adam family's
    share (eps, weight_decay >= 0, two betas in [0, 1)), then torch's own checks, by building
    the optimizer over one parameter."""
    if "lr" in optim:  # `+optim.lr=...`: the optimizer is built with lr=1.0, so it would be lost
        raise ValueError(
            "optim.lr is not an argument here; the peak learning rate has one home, which every "
            "schedule reads: use scheduler.peak_lr"
        )
    if optim.get("fused") and optim.get("foreach"):  # two implementations: at most one
        raise ValueError(
            "optim.fused=true and optim.foreach=true cannot both be set; expected at most one "
            "of them true (both null: the fastest one torch supports)"
        )
    betas = optim.get("betas")
    problems = [
        number_problem("optim.eps", optim["eps"], 0.0) if "eps" in optim else None,
        number_problem("optim.weight_decay", optim["weight_decay"], 0.0)
        if "weight_decay" in optim else None,
    ]  # fmt: skip
    if betas is not None:
        betas = list(betas)
        problems += [number_problem(f"optim.betas[{i}]", b, 0.0, 1.0) for i, b in enumerate(betas)]
        problems.append(
            None if len(betas) == 2 else f"optim.betas={betas!r} is not valid; expected 2 numbers"
        )
    raise_first(problems)
    probe = [{"params": [nn.Parameter(torch.zeros(1))]}]
    try:
        optimizer_from_config(probe, optim)
    except (TypeError, ValueError) as err:
        raise ValueError(f"optim ({optim.get('_target_')}) is not valid: {err}") from None
