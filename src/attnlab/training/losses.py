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
    model,
    inputs: tuple[Tensor, ...],
    targets: Tensor,
    pad_id: int,
    every_position: bool = False,
    project: bool = True,
) -> tuple[Tensor, Tensor]:
    """model(*inputs)'s logits where the loss needs them: (N, V) at the N non-PAD targets (B, T),
    with those targets (N,), through the model's `logits_at` (attnlab's Transformer then skips
    the pads). every_position: (B, T, V) and (B, T) instead, for a compiled model (selecting
    rows inside the graph would break it on the data-dependent N); the loss ignores the pads.
    project=False: the model's output before its output projection, (N, d_model) or
    (B, T, d_model), for fused_output_nll."""
    kwargs = {} if project else {"project": False}
    if every_position:
        return model(*inputs, **kwargs), targets
    real = targets != pad_id
    return model(*inputs, logits_at=real, **kwargs), targets[real]


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


class _FusedOutputNLL(torch.autograd.Function):
    """The output projection and the label-smoothed cross-entropy in one pass over row chunks:
    the (N, V) logits exist one chunk at a time and are never kept.

    Forward, for hidden states h (N, d), the projection W (V, d), targets y (N,) (rows whose
    target is PAD count for nothing), per chunk c: x_c = h_c W^T, the loss and nll of
    _SmoothedCrossEntropy's rows and argmax(x_c) == y; and already the gradients of the summed
    loss, with D_c = softmax(x_c) - (1 - eps) one_hot(y_c) - eps / V (zero at PAD rows):
        dL/dh_c = D_c W  (n_c, d);   dL/dW += D_c^T h_c  (V, d), accumulated in float32.
    Returns the sums over non-PAD rows (loss, nll, correct); backward scales the stored
    gradients by the incoming scalar. Matrix products run in the autocast dtype, if any."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, eps: float, pad_id: int):
        vocab = weight.size(0)
        grad_hidden = torch.zeros_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        sums = torch.zeros(3, dtype=torch.float32, device=hidden.device)
        for rows in _row_chunks(hidden.size(0), vocab):
            h, y = hidden[rows], targets[rows]
            logits = torch.nn.functional.linear(h, weight)  # (n_c, V), autocast's dtype
            loss, nll = _rows(logits, y, eps)
            real = (y != pad_id).float()
            correct = (logits.argmax(-1) == y).float()
            sums += torch.stack([(loss * real).sum(), (nll * real).sum(), (correct * real).sum()])
            d = torch.softmax(logits, dim=-1, dtype=torch.float32)
            d.scatter_add_(1, y.unsqueeze(1), d.new_full((d.size(0), 1), -(1.0 - eps)))
            d = (d - eps / vocab) * real.unsqueeze(1)
            d = d.to(logits.dtype)
            grad_hidden[rows] = d @ weight.to(d.dtype)
            grad_weight += (d.t() @ h.to(d.dtype)).float()
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        loss_sum, nll_sum, correct_sum = (x.clone() for x in sums.unbind())
        ctx.mark_non_differentiable(nll_sum, correct_sum)
        return loss_sum, nll_sum, correct_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor, _grad_correct: Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_loss, grad_weight * grad_loss, None, None, None


def fused_output_nll(
    hidden: Tensor, weight: Tensor, targets: Tensor, label_smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """label_smoothed_nll(hidden @ weight.T, targets) without the logits: the output
    projection W (V, d) applied chunk by chunk inside the loss (_FusedOutputNLL), for hidden
    states (..., d) and targets (...), e.g. (N, d) and (N,) or (B, T, d) and (B, T).

    Returns (loss, nll, n_tokens, correct): the first three as label_smoothed_nll's, correct
    the number of non-PAD targets that are the projection's argmax (token accuracy's count).
    The gradient reaches hidden and weight only through `loss`."""
    flat_hidden = hidden.reshape(-1, hidden.size(-1))
    flat_targets = targets.reshape(-1)
    loss_sum, nll_sum, correct = _FusedOutputNLL.apply(
        flat_hidden, weight, flat_targets, float(label_smoothing), pad_id
    )
    n_tokens = (flat_targets != pad_id).sum()
    denom = n_tokens.clamp(min=1)
    return loss_sum / denom, nll_sum / denom, n_tokens, correct


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
