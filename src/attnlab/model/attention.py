"""Section 3.2: scaled dot-product attention (Eq. 1) and multi-head attention (Sec. 3.2.2).

Mask convention (as torch.nn.MultiheadAttention): `key_padding_mask` is a bool (B, S) tensor where
True marks padding. Internally we build an `allowed` bool mask (True = may attend), which is what
torch.nn.functional.scaled_dot_product_attention takes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.model.positional import ALiBi, RotaryEmbedding


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Eq. (1), written out: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    q: (B, H, T, d_k), k: (B, H, S, d_k), v: (B, H, S, d_v).
    allowed: bool, broadcastable to (B, H, T, S); False entries get -inf before the softmax.
    bias: float, broadcastable to (B, H, T, S), added to the scores (ALiBi).
    Returns the output (B, H, T, d_v) and the attention weights (B, H, T, S).
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, H, T, S)
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights


def causal_allowed(t: int, s: int, device: torch.device | None = None) -> Tensor:
    """(T, S) bool mask: query i (the last T of S positions) may attend keys j <= i + (S - T)."""
    offset = s - t
    q_pos = torch.arange(t, device=device).unsqueeze(1) + offset
    k_pos = torch.arange(s, device=device).unsqueeze(0)
    return k_pos <= q_pos


def build_allowed(
    key_padding_mask: Tensor | None, causal: bool, t: int, s: int, device: torch.device
) -> Tensor | None:
    """Combine padding and causal masks into one bool mask broadcastable to (B, H, T, S)."""
    allowed = None
    if key_padding_mask is not None:
        allowed = ~key_padding_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    if causal and t > 1:  # a single new query (incremental decoding) may see every key
        c = causal_allowed(t, s, device)[None, None]  # (1, 1, T, S)
        allowed = c if allowed is None else allowed & c
    return allowed


class MultiHeadAttention(nn.Module):
    """Section 3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), with W_i^Q, W_i^K in R^{d_model x d_k}.

    d_k = d_v = d_model / n_heads unless `d_k` is given (Table 3 rows (A), (B)).
    `rotary` (RoPE) rotates queries and keys after projection; `alibi` adds per-head linear
    biases to the scores. Both act only where the layer attaches them (self-attention).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_k: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        rotary: RotaryEmbedding | None = None,
        alibi: ALiBi | None = None,
    ):
        super().__init__()
        if d_k is None:
            if d_model % n_heads != 0:
                raise ValueError(
                    f"d_model={d_model} is not divisible by n_heads={n_heads}; set d_k explicitly"
                )
            d_k = d_model // n_heads
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_k
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_k = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_o = nn.Linear(n_heads * d_k, d_model, bias=bias)
        self.rotary = rotary
        self.alibi = alibi
        self.record_weights = False  # set by Transformer.record_attention()
        self.last_weights: Tensor | None = None

    def _split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_k).transpose(1, 2)  # (B, H, T, d_k)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        cache: dict | None = None,
        static_kv: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """query (B, T, d_model), key/value (B, S, d_model) -> output (B, T, d_model), weights.

        weights are per head, (B, H, T, S), when `need_weights` (the reference path), else None
        (the fast path through F.scaled_dot_product_attention).
        `cache` (a dict owned by the caller) enables incremental decoding: for self-attention
        new keys/values are appended to the cached ones; with `static_kv` (cross-attention) the
        projected memory is computed once and reused.
        """
        b, t, _ = query.shape
        q = self._split_heads(self.w_q(query))  # (B, H, T, d_k)
        past = 0
        if cache is not None and static_kv and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            k = self._split_heads(self.w_k(key))  # (B, H, S_new, d_k)
            v = self._split_heads(self.w_v(value))
            if cache is not None and not static_kv and "k" in cache:
                past = cache["k"].size(2)
            if self.rotary is not None:
                k = self.rotary(k, offset=past)
            if cache is not None:
                if not static_kv and "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        if self.rotary is not None:
            q = self.rotary(q, offset=past)
        s = k.size(2)

        allowed = build_allowed(key_padding_mask, causal, t, s, query.device)
        bias = self.alibi(t, s, query.device, q.dtype) if self.alibi is not None else None
        dropout_p = self.dropout if self.training else 0.0

        if need_weights or self.record_weights:
            out, weights = scaled_dot_product_attention(q, k, v, allowed, bias, dropout_p)
            if self.record_weights:
                self.last_weights = weights.detach()
        else:
            weights = None
            if bias is not None:
                mask = bias.expand(b, -1, t, s)
                if allowed is not None:
                    mask = mask.masked_fill(~allowed, float("-inf"))
            else:
                mask = allowed
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_k)  # (B, T, H*d_k)
        return self.w_o(out), (weights if need_weights else None)
