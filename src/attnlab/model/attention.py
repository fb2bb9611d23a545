"""Section 3.2: scaled dot-product attention (Eq. 1) and multi-head attention (Sec. 3.2.2).

Mask convention (as torch.nn.MultiheadAttention): `key_padding_mask` is a bool (B, S) tensor where
True marks padding, or None when nothing is to be masked. Internally we build an `allowed` bool
mask (True = may attend), which is what torch.nn.functional.scaled_dot_product_attention takes.

Two paths compute the same attention:
- the reference path, scaled_dot_product_attention below (Eq. 1 written out), returns the weights;
  it runs when they are asked for (AttentionContext.need_weights, Transformer.record_attention());
- the fused path calls F.scaled_dot_product_attention with as little mask as it needs, so torch
  may pick a fused kernel: no mask when nothing is masked, `is_causal=True` for a causal mask over
  T == S, nothing for a single new query (incremental decoding); an explicit mask only for
  padding, ALiBi, or several new queries against cached keys (causal with T < S).
A query with no key to attend to (an all-pad source sentence) gets zero weights and a zero output
on both paths, never NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.model.config import ATTN_SCALES
from attnlab.model.context import PLAIN, AttentionContext
from attnlab.model.positions.rope import apply_rope
from attnlab.problems import choice_problem, raise_first


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Eq. (1), written out: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    q: (B, H, T, d_k), k: (B, H, S, d_k), v: (B, H, S, d_v).
    allowed: bool, broadcastable to (B, H, T, S); False entries get exactly zero weight, and a
    row with no allowed key gets zero weights (so a zero output) instead of softmax's NaN.
    bias: float, broadcastable to (B, H, T, S), added to the scores (ALiBi).
    scale: the factor on Q K^T; None means 1 / sqrt(d_k) (the paper).
    Returns the output (B, H, T, d_v) and the attention weights (B, H, T, S).
    """
    scale = q.size(-1) ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, S)
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        # The smallest finite score, not -inf: a fully masked row stays finite (uniform) here
        # and is zeroed below, so no NaN appears even in the backward pass.
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if allowed is not None:
        weights = weights.masked_fill(~allowed, 0.0)
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
    """Combine padding and causal masks into one bool mask broadcastable to (B, H, T, S), or
    None when nothing is masked."""
    allowed = None
    if key_padding_mask is not None:
        allowed = ~key_padding_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    if causal and t > 1:  # a single new query (incremental decoding) may see every key
        c = causal_allowed(t, s, device)[None, None]  # (1, 1, T, S)
        allowed = c if allowed is None else allowed & c
    return allowed


@dataclass(frozen=True)
class SharedKeys:
    """Beam search's shared memory: each key row serves `groups` consecutive query rows (the
    beams of one sentence), and the keys and values are neither copied nor re-indexed. The g
    query rows of a key row are folded into g * T queries of that one row."""

    groups: int

    @classmethod
    def of(cls, b: int, b_keys: int, positional: bool) -> SharedKeys:
        """B query rows against B' key rows; B' must divide B, and only without a causal mask
        or ALiBi (their masks are per query position, not per row)."""
        if b != b_keys and (b % b_keys or positional):
            raise ValueError(
                f"a query batch of {b} rows cannot share keys of {b_keys} rows"
                + (" in causal or ALiBi attention" if positional else "")
            )
        return cls(b // b_keys)

    def attend(self, attend, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext):
        """attend(q, k, v, ctx) with q (B, H, T, d_k) against k, v (B', H, S, d_k): the output
        (B, H, T, d_k) and the weights (B, H, T, S) or None."""
        if self.groups == 1:
            return attend(q, k, v, ctx)
        out, weights = attend(fold_groups(q, self.groups), k, v, ctx)  # (B', H, g * T, ...)
        weights = unfold_groups(weights, self.groups) if weights is not None else None
        return unfold_groups(out, self.groups), weights


def fold_groups(x: Tensor, groups: int) -> Tensor:
    """(B * g, H, T, d) -> (B, H, g * T, d): the g query rows that share one key row (the beams
    of one sentence) become g * T queries of a single row."""
    bg, h, t, d = x.shape
    return x.view(bg // groups, groups, h, t, d).transpose(1, 2).reshape(-1, h, groups * t, d)


def unfold_groups(x: Tensor, groups: int) -> Tensor:
    """The inverse of fold_groups: (B, H, g * T, d) -> (B * g, H, T, d)."""
    b, h, gt, d = x.shape
    return x.view(b, h, groups, gt // groups, d).transpose(1, 2).reshape(-1, h, gt // groups, d)


class MultiHeadAttention(nn.Module):
    """Section 3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), with W_i^Q, W_i^K in R^{d_model x d_k}.

    d_k = d_v = d_model / n_heads unless `d_k` is given (Table 3 rows (A), (B)).
    attn_scale="sqrt_dk" is Eq. 1's 1/sqrt(d_k); "none" leaves Q K^T unscaled (an ablation).
    qk_norm: a LayerNorm over d_k on each head's queries and keys before the dot product
    (Dehghani et al., 2023, "Scaling Vision Transformers to 22 Billion Parameters"), which
    bounds the attention logits; off, Q and K are the projections as in the paper.
    A typo in attn_scale or a d_model that n_heads does not divide is a ValueError here too: the
    class is used on its own (tests, the torch.nn comparison), not only from a checked config.

    forward(x) is self-attention (Q, K and V from x); forward(x, memory) is cross-attention
    (Q from x, K and V from the encoder's memory). Masks, relative positions (RoPE, ALiBi),
    packing, the cache and whether to return the weights come in one AttentionContext.
    To compare with torch.nn.MultiheadAttention(batch_first=True): ours(q, kv,
    AttentionContext(key_padding_mask=m)) is theirs(q, kv, kv, key_padding_mask=m), with
    in_proj_weight = cat(W^Q, W^K, W^V) and out_proj = W^O (tests/test_attention.py).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_k: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        attn_scale: str = "sqrt_dk",
        qk_norm: bool = False,
    ):
        super().__init__()
        if d_k is None and d_model % n_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}; set d_k explicitly"
            )
        raise_first([choice_problem("attn_scale", attn_scale, ATTN_SCALES)])
        d_k = d_model // n_heads if d_k is None else d_k
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_k
        self.dropout = dropout
        self.scale = d_k**-0.5 if attn_scale == "sqrt_dk" else 1.0
        self.w_q = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_k = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_o = nn.Linear(n_heads * d_k, d_model, bias=bias)
        self.q_norm = nn.LayerNorm(d_k, eps=1e-6) if qk_norm else nn.Identity()
        self.k_norm = nn.LayerNorm(d_k, eps=1e-6) if qk_norm else nn.Identity()

    def forward(
        self, x: Tensor, memory: Tensor | None = None, ctx: AttentionContext = PLAIN
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, d_model), or (N, d_model) with ctx.packing -> the output, shaped as x, and
        the weights (B, H, T, S) when ctx.need_weights, else None. memory: (B', S, d_model),
        B' = B or B' dividing B (SharedKeys)."""
        if memory is None:
            q, k, v = self._self_qkv(x, ctx)
        else:
            q, k, v = self._cross_qkv(x, memory, ctx)  # q (B, H, T, d_k), k, v (B', H, S, d_k)
        shared = SharedKeys.of(q.size(0), k.size(0), ctx.causal or ctx.bias is not None)
        out, weights = shared.attend(self._attend, q, k, v, ctx)  # (B, H, T, d_k)
        b, _, t, _ = q.shape
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_k)  # (B, T, H * d_k)
        if ctx.packing is not None:
            out = ctx.packing.pack(out)  # (N, H * d_k)
        return self.w_o(out), weights

    def scores(
        self, x: Tensor, memory: Tensor | None = None, ctx: AttentionContext = PLAIN
    ) -> Tensor:
        """The attention logits of the call forward(x, memory, ctx) would make: Eq. 1's
        Q K^T * scale, (B, H, T, S), before ALiBi's bias and the softmax, with -inf where the
        masks hide a key. Their largest value is the instability diagnostic of Dehghani et al.
        (2023): it grows before a run diverges, and qk_norm bounds it. No cache, no packing."""
        if ctx.cache is not None or ctx.packing is not None:
            raise ValueError("scores() takes a full forward's context: no cache, no packing")
        q, k, _ = self._self_qkv(x, ctx) if memory is None else self._cross_qkv(x, memory, ctx)
        logits = (q @ k.transpose(-2, -1)) * self.scale  # (B, H, T, S)
        allowed = build_allowed(ctx.key_padding_mask, ctx.causal, q.size(2), k.size(2), q.device)
        return logits if allowed is None else logits.masked_fill(~allowed, float("-inf"))

    def _self_qkv(self, x: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V of x, each (B, H, T, d_k); with a cache, K and V after the cached ones."""
        q, k, v = self._project(x, self.w_q, self.w_k, self.w_v, ctx=ctx)
        q, k = self.q_norm(q), self.k_norm(k)
        if ctx.rotation is not None:
            q, k = apply_rope(q, *ctx.rotation), apply_rope(k, *ctx.rotation)
        if ctx.cache is not None:
            k, v = ctx.cache.extend(k, v)
        return q, k, v

    def _cross_qkv(self, x: Tensor, memory: Tensor, ctx: AttentionContext):
        """Q of x (B, H, T, d_k); K, V of memory (B', H, S, d_k), from the cache after the
        first decoding step."""
        (q,) = self._project(x, self.w_q, ctx=ctx)
        q = self.q_norm(q)  # no relative positions between a target and a source position

        def keys_values() -> tuple[Tensor, Tensor]:
            k, v = self._project(memory, self.w_k, self.w_v)
            return self.k_norm(k), v

        return q, *(ctx.cache.keys_values(keys_values) if ctx.cache else keys_values())

    def _project(
        self, x: Tensor, *linears: nn.Linear, ctx: AttentionContext | None = None
    ) -> tuple[Tensor, ...]:
        """x (B, T, d_model) through each of `linears` (W^Q, W^K, W^V), split into heads:
        a tuple of (B, H, T, d_k). Several projections of the same x are one matrix product
        with the weights side by side (as torch.nn.MultiheadAttention's in_proj), which is
        faster than one product each; the parameters stay W^Q, W^K, W^V. With ctx.packing,
        x is (N, d_model), its real positions only; the heads get zeros at the pads."""
        if len(linears) == 1:
            y = linears[0](x)
        else:
            weight = torch.cat([lin.weight for lin in linears])
            bias = torch.cat([lin.bias for lin in linears]) if linears[0].bias is not None else None
            y = F.linear(x, weight, bias)  # (B, T, n * H * d_k), or (N, ...) packed
        if ctx is not None and ctx.packing is not None:
            y = ctx.packing.unpack(y)
        b, t, _ = y.shape
        heads = y.view(b, t, len(linears), self.n_heads, self.d_k).permute(2, 0, 3, 1, 4)
        return tuple(heads.unbind(0))  # each (B, H, T, d_k)

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext
    ) -> tuple[Tensor, Tensor | None]:
        """Eq. 1 on q (B, H, T, d_k), k, v (B, H, S, d_k): the reference path when the weights
        are wanted, else the fused path. Returns (B, H, T, d_k) and the weights or None."""
        dropout_p = self.dropout if self.training else 0.0
        bias = ctx.bias.to(q.dtype) if ctx.bias is not None else None
        key_padding_mask, causal = ctx.key_padding_mask, ctx.causal
        t, s = q.size(2), k.size(2)
        if ctx.need_weights:
            allowed = build_allowed(key_padding_mask, causal, t, s, q.device)
            return scaled_dot_product_attention(q, k, v, allowed, bias, dropout_p, self.scale)
        return self._fused(q, k, v, key_padding_mask, causal, bias, dropout_p), None

    def _fused(self, q, k, v, key_padding_mask, causal, bias, dropout_p) -> Tensor:
        """F.scaled_dot_product_attention with the least mask it needs (see the module
        docstring): nothing, is_causal, or an explicit bool mask / float bias."""
        t, s = q.size(2), k.size(2)
        if causal and t > 1 and t == s and key_padding_mask is None and bias is None:
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout_p, is_causal=True, scale=self.scale
            )
        allowed = build_allowed(key_padding_mask, causal, t, s, q.device)
        mask = allowed
        if bias is not None:
            mask = bias if allowed is None else torch.where(allowed, bias, float("-inf"))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=self.scale
        )
        if allowed is not None:  # a query with no key: zero, as the reference path, on any kernel
            out = out.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
        return out
