"""Eq. 1 and multi-head attention (Sec. 3.2.2) written in NumPy, float64, as a reader would from the
paper, against our MultiHeadAttention in float64 on both of its paths (the written-out reference
that returns the weights, and the fused one). Padding and causal masks included: a mask forgotten
or applied on the wrong side changes the output far beyond the tolerance.

torch.nn.MultiheadAttention parity lives in test_attention.py; this one needs no torch code on
the reference side at all.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.model import AttentionContext, MultiHeadAttention

B, T, S, D, H = 2, 5, 6, 24, 3
TOL = 1e-12  # float64 on both sides: only summation order differs


def np_attention(q, k, v, allowed=None, scale=None):
    """Eq. 1: softmax(Q K^T / sqrt(d_k)) V. q (T, d_k), k (S, d_k), v (S, d_v),
    allowed (T, S) bool (True = may attend). Returns output (T, d_v) and weights (T, S)."""
    d_k = q.shape[-1]
    scores = q @ k.T * (1.0 / np.sqrt(d_k) if scale is None else scale)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(scores)
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ v, weights


def np_multi_head(x_q, x_kv, params, n_heads, allowed=None):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K,
    V W_i^V), for one sequence: x_q (T, d_model), x_kv (S, d_model). nn.Linear's convention:
    y = x W^T + b. Returns output (T, d_model) and weights (h, T, S)."""
    w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o = params
    d_k = w_q.shape[0] // n_heads
    q, k, v = x_q @ w_q.T + b_q, x_kv @ w_k.T + b_k, x_kv @ w_v.T + b_v
    heads, weights = [], []
    for i in range(n_heads):
        cols = slice(i * d_k, (i + 1) * d_k)
        out, w = np_attention(q[:, cols], k[:, cols], v[:, cols], allowed)
        heads.append(out)
        weights.append(w)
    return np.concatenate(heads, axis=-1) @ w_o.T + b_o, np.stack(weights)


@pytest.fixture
def mha():
    torch.manual_seed(0)
    module = MultiHeadAttention(D, H, dropout=0.0, bias=True).double().eval()
    params = [
        t.detach().numpy()
        for lin in (module.w_q, module.w_k, module.w_v, module.w_o)
        for t in (lin.weight, lin.bias)
    ]
    return module, params


def test_eq1_single_head_matches_numpy():
    from attnlab.model.attention import scaled_dot_product_attention

    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(T, 8)), rng.normal(size=(S, 8)), rng.normal(size=(S, 4))
    expected, expected_w = np_attention(q, k, v)
    out, w = scaled_dot_product_attention(*(torch.from_numpy(a)[None, None] for a in (q, k, v)))
    assert np.abs(out[0, 0].numpy() - expected).max() < TOL
    assert np.abs(w[0, 0].numpy() - expected_w).max() < TOL


@pytest.mark.parametrize("need_weights", [True, False], ids=["reference", "fused"])
def test_cross_attention_with_source_padding_matches_numpy(mha, need_weights):
    module, params = mha
    rng = np.random.default_rng(1)
    x_q, x_kv = rng.normal(size=(B, T, D)), rng.normal(size=(B, S, D))
    lengths = [S, 3]
    pads = np.arange(S)[None, :] >= np.array(lengths)[:, None]  # True at pads
    x_kv[1, 3:] = 1e3 * rng.normal(size=(S - 3, D))  # huge pads: any leak shows
    out, w = module(
        torch.from_numpy(x_q),
        torch.from_numpy(x_kv),
        AttentionContext(key_padding_mask=torch.from_numpy(pads), need_weights=need_weights),
    )
    for b in range(B):
        allowed = np.broadcast_to(~pads[b], (T, S))
        expected, expected_w = np_multi_head(x_q[b], x_kv[b], params, H, allowed)
        assert np.abs(out[b].detach().numpy() - expected).max() < 1e-9
        if need_weights:
            assert np.abs(w[b].detach().numpy() - expected_w).max() < TOL
    # and without the mask the padded sentence's output is far off: the check can fail
    unmasked, _ = np_multi_head(x_q[1], x_kv[1], params, H)
    assert np.abs(out[1].detach().numpy() - unmasked).max() > 1.0


@pytest.mark.parametrize("need_weights", [True, False], ids=["reference", "fused"])
def test_causal_self_attention_with_padding_matches_numpy(mha, need_weights):
    module, params = mha
    rng = np.random.default_rng(2)
    x = rng.normal(size=(B, T, D))
    lengths = [T, 3]
    pads = np.arange(T)[None, :] >= np.array(lengths)[:, None]
    causal = np.tril(np.ones((T, T), dtype=bool))  # query t sees keys 0..t
    xt = torch.from_numpy(x)
    mask = torch.from_numpy(pads)
    out, w = module(
        xt, ctx=AttentionContext(key_padding_mask=mask, causal=True, need_weights=need_weights)
    )
    for b in range(B):
        allowed = causal & ~pads[b][None, :]
        expected, expected_w = np_multi_head(x[b], x[b], params, H, allowed)
        real = lengths[b]  # queries at pads attend to real keys only; compare the real ones
        assert np.abs(out[b, :real].detach().numpy() - expected[:real]).max() < 1e-9
        if need_weights:
            assert np.abs(w[b, :, :real].detach().numpy() - expected_w[:, :real]).max() < TOL
    # without the causal mask the first position would see the future: far off
    future, _ = np_multi_head(x[0], x[0], params, H)
    assert np.abs(out[0, 0].detach().numpy() - future[0]).max() > 1e-3
