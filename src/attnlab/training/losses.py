"""Label-smoothed cross-entropy (Sec. 5.4, "Label Smoothing", eps_ls = 0.1), padding ignored."""

from __future__ import annotations

import torch
from torch import Tensor


def label_smoothed_nll(
    logits: Tensor, targets: Tensor, label_smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Token-level losses of logits (B, T, V) against targets (B, T), PAD positions ignored.

    Returns (loss, nll, n_tokens): `loss` is the smoothed objective, the cross-entropy against
    (1 - eps) * one_hot(y) + eps / V, i.e. per token (1 - eps) * (-log p_y) + eps * mean_v
    (-log p_v), averaged over non-PAD tokens (F.cross_entropy's label_smoothing); `nll` the plain
    negative log-likelihood (exp(nll) is the perplexity), from the same log-softmax (one pass
    over the vocabulary, not two); n_tokens the number of non-PAD targets.
    """
    logp = torch.log_softmax(logits.reshape(-1, logits.size(-1)).float(), dim=-1)  # (N, V)
    flat_targets = targets.reshape(-1)
    real = flat_targets != pad_id
    n_tokens = real.sum()
    denom = n_tokens.clamp(min=1)
    token_nll = -logp.gather(1, flat_targets.unsqueeze(1)).squeeze(1)  # (N,)
    per_token = token_nll
    if label_smoothing:
        per_token = (1.0 - label_smoothing) * token_nll - label_smoothing * logp.mean(dim=-1)
    loss = torch.where(real, per_token, 0.0).sum() / denom
    nll = torch.where(real, token_nll.detach(), 0.0).sum() / denom
    return loss, nll, n_tokens
