"""Label-smoothed cross-entropy (Sec. 5.4, "Label Smoothing", eps_ls = 0.1), padding ignored.

The vocabulary-sized work is done in one autograd Function over row chunks: the forward is one
log-softmax per chunk (cast to float32 inside the kernel) and keeps nothing for backward but
the logits and the targets (no float32 copy of the log-probabilities); the backward writes each
chunk's gradient from one softmax. On the paper's base model at ~25k tokens (a 24,960 x 37,000 bf16
logit tensor) this halves the peak memory of a training step on an H100 (17.4 -> 8.9 GiB) at the
same GPU time; on a CPU the loss runs 2-4x faster at a vocabulary of 8000
(docs/bench/h100/, README "Figures")."""

from __future__ import annotations

import torch
from torch import Tensor

# Rows per chunk: about this many logits, so the float32 intermediates of a chunk take 32 MiB
# whatever the batch and the vocabulary.
CHUNK_ELEMENTS = 1 << 23


def _row_chunks(n_rows: int, vocab: int) -> list[slice]:
    step = max(1, CHUNK_ELEMENTS // max(vocab, 1))
    return [slice(start, start + step) for start in range(0, n_rows, step)]


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-row cross-entropy against (1 - eps) * one_hot(y) + eps / V.

    Forward, for logits x (N, V) in any float dtype and targets y (N,), with
    log p_iv = log_softmax(x_i)_v:
        nll_i = -log p_iy;  loss_i = (1 - eps) * nll_i - eps * mean_v log p_iv
                                                                -> (loss (N,), nll (N,)), fp32
    Backward (d loss_i / d x_iv, times the incoming g_i):
        g_i * (softmax(x_i)_v - (1 - eps) * [v == y_i] - eps / V)   -> (N, V) in x's dtype
    Chunk by chunk in float32; saved for backward: the logits themselves and y.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, eps: float):
        parts = [_rows(logits[rows], targets[rows], eps) for rows in _row_chunks(*logits.shape)]
        loss, nll = (torch.cat(p) if len(parts) > 1 else p[0] for p in zip(*parts, strict=True))
        ctx.save_for_backward(logits, targets)
        ctx.eps = eps
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        logits, targets = ctx.saved_tensors
        eps, vocab = ctx.eps, logits.size(-1)
        grad = torch.empty_like(logits)
        for rows in _row_chunks(*logits.shape):
            g = grad_loss[rows].float().unsqueeze(1)  # (n_chunk, 1)
            p = torch.softmax(logits[rows], dim=-1, dtype=torch.float32)  # cast inside
            p.scatter_add_(1, targets[rows].unsqueeze(1), g.new_full(g.shape, -(1.0 - eps)))
            torch.addcmul(g * (-eps / vocab), p, g, out=grad[rows])  # written in x's dtype
        return grad, None, None


def _rows(x: Tensor, y: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(loss, nll) of one chunk of rows, in float32 (log_softmax casts inside its kernel)."""
    logp = torch.log_softmax(x, dim=-1, dtype=torch.float32)
    nll = -logp.gather(1, y.unsqueeze(1)).squeeze(1)
    loss = (1.0 - eps) * nll - eps * logp.mean(dim=-1) if eps else nll.clone()
    return loss, nll


def logits_for_loss(
    model, inputs: tuple[Tensor, ...], targets: Tensor, pad_id: int, every_position: bool = False
) -> tuple[Tensor, Tensor]:
    """model(*inputs)'s logits where the loss needs them: (N, V) at the N non-PAD targets (B, T),
    with those targets (N,), through the model's `logits_at` (attnlab's Transformer then skips
    the pads). every_position: (B, T, V) and (B, T) instead, for a compiled model (selecting
    rows inside the graph would break it on the data-dependent N); the loss ignores the pads."""
    if every_position:
        return model(*inputs), targets
    real = targets != pad_id
    return model(*inputs, logits_at=real), targets[real]


def label_smoothed_nll(
    logits: Tensor, targets: Tensor, label_smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Token-level losses of logits (..., V) against targets (...), e.g. (B, T, V) and (B, T)
    or (N, V) and (N,), PAD positions ignored.

    Returns (loss, nll, n_tokens): `loss` is the smoothed objective, the cross-entropy against
    (1 - eps) * one_hot(y) + eps / V, i.e. per token (1 - eps) * (-log p_y) + eps * mean_v
    (-log p_v), averaged over non-PAD tokens (F.cross_entropy's label_smoothing); `nll` the plain
    negative log-likelihood (exp(nll) is the perplexity), from the same pass over the
    vocabulary; n_tokens the number of non-PAD targets.
    """
    flat_targets = targets.reshape(-1)
    per_token, token_nll = _SmoothedCrossEntropy.apply(
        logits.reshape(-1, logits.size(-1)), flat_targets, float(label_smoothing)
    )
    real = flat_targets != pad_id
    n_tokens = real.sum()
    denom = n_tokens.clamp(min=1)
    loss = torch.where(real, per_token, 0.0).sum() / denom
    nll = torch.where(real, token_nll, 0.0).sum() / denom
    return loss, nll, n_tokens


def summed_nll(logits: Tensor, targets: Tensor, pad_id: int) -> tuple[Tensor, Tensor]:
    """(the plain negative log-likelihood summed over the non-PAD targets, their count) for
    logits (..., V) and targets (...): label_smoothed_nll's `nll` from the same kernel, summed
    so that batches add up to a corpus mean (extrapolation, attnlab-eval's perplexity). No
    gradient."""
    with torch.no_grad():
        flat_targets = targets.reshape(-1)
        _, token_nll = _SmoothedCrossEntropy.apply(
            logits.reshape(-1, logits.size(-1)), flat_targets, 0.0
        )
        real = flat_targets != pad_id
        return torch.where(real, token_nll, 0.0).sum(), real.sum()


def z_loss(logits: Tensor, targets: Tensor, pad_id: int) -> tuple[Tensor, Tensor]:
    """PaLM's auxiliary z-loss (Chowdhery et al., 2022, Sec. 5): mean over non-PAD targets of
    (log Z)^2, log Z = logsumexp_v x_v the log-partition of the output softmax, for logits
    (..., V) and targets (...). It pulls log Z towards 0, so the logits cannot drift upward
    together (a source of instability in bf16). Returns ((log Z)^2 mean, log Z mean); the caller
    multiplies the first by its coefficient (loss.z_loss)."""
    log_z = torch.logsumexp(logits.float(), dim=-1)  # (...,)
    real = targets != pad_id
    denom = real.sum().clamp(min=1)
    return torch.where(real, log_z.square(), 0.0).sum() / denom, (
        torch.where(real, log_z.detach(), 0.0).sum() / denom
    )
