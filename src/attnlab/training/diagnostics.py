"""Instability diagnostics, measured on a fixed probe batch outside the training step.

Wortsman et al. (2023, "Small-scale proxies for large-scale Transformer training instabilities")
and Dehghani et al. (2023) trace divergence to two quantities that grow before the loss does:
- the largest attention logit (Q K^T / sqrt(d_k), over heads and positions) of each attention
  module: "attention logit growth", which qk_norm bounds;
- the output's log-partition log Z = logsumexp_v x_v: "output logit divergence", which z-loss
  pulls towards 0.
`probe` computes both in one eval-mode forward pass over a batch the caller keeps fixed (the
first validation batch), so the values of successive validations are comparable and training
steps run exactly as without them. The gradient norm, the third diagnostic, is logged by the
training step itself (it costs nothing there: the clipping computes it), and so is its split by
layer (`layer_grad_norms`, on the logged steps only), Xiong et al.'s (2020) measure: at
initialization Post-LN's gradients are largest near the output, Pre-LN's about equal by layer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnlab.model.context import PLAIN


def probe(
    model: nn.Module, forward: Callable[[], Tensor], targets: Tensor, pad_id: int
) -> dict[str, float]:
    """{"attn_logit_max/<module>": the largest attention logit of each attention module,
    "attn_logit_max": the largest of them, "log_z": mean log Z over the non-PAD targets} of
    one call `forward()` -> logits (B, T, V) with targets (B, T), model in eval mode, no grad.

    The logits are recomputed from each attention module's own inputs (a forward hook calling
    MultiHeadAttention.scores), so the attention kernels of the forward pass are unchanged."""
    largest: dict[str, Tensor] = {}

    def keep(name: str):
        def hook(module, args, kwargs, output) -> None:
            memory = args[1] if len(args) > 1 else kwargs.get("memory")
            ctx = args[2] if len(args) > 2 else kwargs.get("ctx", PLAIN)
            logits = module.scores(args[0], memory, ctx)
            finite = logits[torch.isfinite(logits)]
            if finite.numel():
                largest[name] = finite.max()

        return hook

    hooks = [
        m.register_forward_hook(keep(n), with_kwargs=True) for n, m in model.attention_modules()
    ]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = forward()  # (B, T, V)
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    real = targets != pad_id
    log_z = torch.logsumexp(logits.float(), dim=-1)[real]
    values = {f"attn_logit_max/{name}": float(v) for name, v in largest.items()}
    if largest:
        values["attn_logit_max"] = max(values.values())
    values["log_z"] = float(log_z.mean()) if log_z.numel() else float("nan")
    return values


def layer_parameters(model: nn.Module) -> list[tuple[str, list[nn.Parameter]]]:
    """[(name, parameters)] of each layer of the model's encoder and decoder stacks, in order
    ("encoder.layers.0", ..., "decoder.layers.5")."""
    layers = []
    for stack in ("encoder", "decoder"):
        module = getattr(model, stack, None)
        for i, layer in enumerate(getattr(module, "layers", None) or []):
            layers.append((f"{stack}.layers.{i}", list(layer.parameters())))
    return layers


def layer_grad_norms(layers: list[tuple[str, list[nn.Parameter]]]) -> dict[str, Tensor]:
    """{layer name: the L2 norm of its parameters' gradients} (tensors on the device, no host
    sync), for the layers with gradients."""
    norms = {}
    for name, params in layers:
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            norms[name] = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    return norms
