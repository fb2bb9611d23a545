"""Per-batch metric values; torchmetrics objects in the LightningModule accumulate them."""

from __future__ import annotations

import math

import torch
from torch import Tensor

# Perplexity is exp(nll) with nll capped here, so a diverged run's is a large number, not inf
# (the one rule for train/, val/, test/, per-length and attnlab-eval perplexities).
MAX_NLL = 50.0


def perplexity(nll: Tensor | float) -> Tensor | float:
    """exp(min(nll, MAX_NLL)): a tensor for a tensor (no host sync), a float for a number."""
    if isinstance(nll, Tensor):
        return torch.exp(nll.clamp(max=MAX_NLL))
    return math.exp(min(float(nll), MAX_NLL))


def token_accuracy(logits: Tensor, targets: Tensor, pad_id: int) -> tuple[Tensor, Tensor]:
    """(correct, total) over non-PAD targets: argmax of logits (..., V) == targets (...),
    e.g. (B, T, V) and (B, T), or (N, V) and (N,)."""
    mask = targets != pad_id
    correct = ((logits.argmax(-1) == targets) & mask).sum()
    return correct, mask.sum()


def truncate_after_eos(seqs: Tensor, eos_id: int, pad_id: int) -> Tensor:
    """Set everything after the first EOS of each row of seqs (B, L) to PAD (EOS kept)."""
    is_eos = (seqs == eos_id).long()
    after = (is_eos.cumsum(dim=1) - is_eos) > 0  # strictly after the first EOS
    return seqs.masked_fill(after, pad_id)


def exact_match(pred: Tensor, target: Tensor, eos_id: int, pad_id: int) -> Tensor:
    """(B,) bool: the prediction (B, L) equals the target (B, T) up to and including EOS.

    Both are cut after their first EOS and right-padded to a common width, so a prediction
    that runs past the target's EOS, or stops early, does not match.
    """
    pred = truncate_after_eos(pred, eos_id, pad_id)
    target = truncate_after_eos(target, eos_id, pad_id)
    width = max(pred.size(1), target.size(1))
    pred = torch.nn.functional.pad(pred, (0, width - pred.size(1)), value=pad_id)
    target = torch.nn.functional.pad(target, (0, width - target.size(1)), value=pad_id)
    return (pred == target).all(dim=1)


def greedy_token_accuracy(
    pred: Tensor, target: Tensor, eos_id: int, pad_id: int
) -> tuple[Tensor, Tensor]:
    """(correct, total) over the target's tokens (B, T) up to and including EOS: the free-running
    prediction (B, L) has the same token at the same position. Unlike token_accuracy, every
    position is conditioned on the model's own earlier outputs, not on the reference's, so one
    early mistake (a dropped symbol) costs every later position."""
    pred = truncate_after_eos(pred, eos_id, pad_id)
    target = truncate_after_eos(target, eos_id, pad_id)
    width = max(pred.size(1), target.size(1))
    pred = torch.nn.functional.pad(pred, (0, width - pred.size(1)), value=pad_id)
    target = torch.nn.functional.pad(target, (0, width - target.size(1)), value=pad_id)
    real = target != pad_id
    return ((pred == target) & real).sum(), real.sum()
