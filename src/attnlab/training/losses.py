"""Label-smoothed cross-entropy (Sec. 5.4, "Label Smoothing", eps_ls = 0.1), padding ignored."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothed_nll(
    logits: Tensor, targets: Tensor, label_smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Token-level losses of logits (B, T, V) against targets (B, T), PAD positions ignored.

    Returns (loss, nll, n_tokens): `loss` is the smoothed objective, the cross-entropy against
    (1 - eps) * one_hot(y) + eps / V, averaged over non-PAD tokens; `nll` the plain negative
    log-likelihood (exp(nll) is the perplexity); n_tokens the number of non-PAD targets.
    """
    flat_logits = logits.reshape(-1, logits.size(-1)).float()
    flat_targets = targets.reshape(-1)
    n_tokens = (flat_targets != pad_id).sum()
    denom = n_tokens.clamp(min=1)
    loss = (
        F.cross_entropy(
            flat_logits,
            flat_targets,
            ignore_index=pad_id,
            label_smoothing=label_smoothing,
            reduction="sum",
        )
        / denom
    )
    with torch.no_grad():
        nll = F.cross_entropy(flat_logits, flat_targets, ignore_index=pad_id, reduction="sum")
    return loss, nll / denom, n_tokens
