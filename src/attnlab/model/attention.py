"""Section 3.2: scaled dot-product attention (Eq. 1) and multi-head attention (Sec. 3.2.2).

Mask convention (as torch.nn.MultiheadAttention): `key_padding_mask` is a bool (B, S) tensor where
True marks padding, or None when nothing is to be masked. Internally we build an `allowed` bool
mask (True = may attend), which is what torch.nn.functional.scaled_dot_product_attention takes.

Two paths compute the same attention:
- the reference path, scaled_dot_product_attention below (Eq. 1 written out), returns the weights;
  it runs when they are asked for (`need_weights`, Transformer.record_attention());
- the fused path calls F.scaled_dot_product_attention with as little mask as it needs, so torch
  may pick a fused kernel: no mask when nothing is masked, `is_causal=True` for a causal mask over
  T == S, nothing for a single new query (incremental decoding); an explicit mask only for
  padding, ALiBi, or several new queries against cached keys (causal with T < S).
A query with no key to attend to (an all-pad source sentence) gets zero weights and a zero output
on both paths, never NaN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.model.cache import AttentionCache
from attnlab.model.config import ATTN_SCALES
from attnlab.model.packing import Packing
from attnlab.model.positional import apply_rope
from attnlab.validation import choice_problem, raise_first


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
    RoPE and ALiBi arrive as tables computed once per forward pass by the stack (`rope`, `alibi`
    in forward); the layer passes them only to self-attention.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_k: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        attn_scale: str = "sqrt_dk",
    ):
        super().__init__()
        if d_k is None:
            if d_model % n_heads != 0:
                raise ValueError(
                    f"d_model={d_model} is not divisible by n_heads={n_heads}; set d_k explicitly"
                )
            d_k = d_model // n_heads
        raise_first([choice_problem("attn_scale", attn_scale, ATTN_SCALES)])
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_k
        self.dropout = dropout
        self.scale = d_k**-0.5 if attn_scale == "sqrt_dk" else 1.0
        self.w_q = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_k = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_o = nn.Linear(n_heads * d_k, d_model, bias=bias)
        self.record_weights = False  # set by Transformer.record_attention()
        self.last_weights: Tensor | None = None

    def _project(
        self, x: Tensor, *linears: nn.Linear, packing: Packing | None = None
    ) -> tuple[Tensor, ...]:
        """x (B, T, d_model) through each of `linears` (W^Q, W^K, W^V), split into heads:
        a tuple of (B, H, T, d_k). Several projections of the same x are one matrix product
        with the weights side by side (as torch.nn.MultiheadAttention's in_proj), which is
        faster than one product each; the parameters stay W^Q, W^K, W^V. With a `packing`,
        x is (N, d_model), its real positions only; the heads get zeros at the pads."""
        if len(linears) == 1:
            y = linears[0](x)
        else:
            weight = torch.cat([lin.weight for lin in linears])
            bias = torch.cat([lin.bias for lin in linears]) if linears[0].bias is not None else None
            y = F.linear(x, weight, bias)  # (B, T, n * H * d_k), or (N, ...) packed
        if packing is not None:
            y = packing.unpack(y)
        b, t, _ = y.shape
        heads = y.view(b, t, len(linears), self.n_heads, self.d_k).permute(2, 0, 3, 1, 4)
        return tuple(heads.unbind(0))  # each (B, H, T, d_k)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        cache: AttentionCache | None = None,
        static_kv: bool = False,
        rope: tuple[Tensor, Tensor] | None = None,
        alibi: Tensor | None = None,
        packing: Packing | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """query (B, T, d_model), key/value (B', S, d_model) -> output (B, T, d_model), weights.

        key_padding_mask: (B', S) bool, True at pads, or None. causal: the T queries are the last
        T of S positions and see no later key. weights are per head, (B, H, T, S), when
        `need_weights` (the reference path), else None (the fused path).
        `cache` enables incremental decoding: self-attention appends the new keys/values to the
        cached ones; with `static_kv` (cross-attention) the projected memory is stored at the
        first call and reused. `rope`: (cos, sin), each (T, d_k/2), for the new positions;
        `alibi`: bias (1, H, T, S).
        Shared memory (beam search): when B' < B, each key row serves B / B' consecutive query
        rows (the beams of one sentence); keys and values are neither copied nor re-indexed.
        `packing` (attnlab.model.packing): the query holds the N real positions of a (B, T)
        batch, (N, d_model), and so does the output; the attention core runs on (B, T).
        Self-attention keys and values are then the query's; cross-attention's stay (B', S).
        """
        if query is key and key is value and not static_kv:  # self-attention: one GEMM for Q, K, V
            q, k, v = self._project(query, self.w_q, self.w_k, self.w_v, packing=packing)
            if rope is not None:
                q, k = apply_rope(q, *rope), apply_rope(k, *rope)
            if cache is not None:
                k, v = cache.append(k, v)
        else:
            (q,) = self._project(query, self.w_q, packing=packing)  # (B, H, T, d_k)
            if rope is not None:
                q = apply_rope(q, *rope)
            k, v = self._keys_values(key, value, cache, static_kv, rope)  # (B', H, S, d_k)
        b, _, t, _ = q.shape
        groups = self._groups(b, k.size(0), causal or alibi is not None)
        if groups > 1:
            q = fold_groups(q, groups)  # (B', H, g * T, d_k)
        out, weights = self._attend(q, k, v, key_padding_mask, causal, alibi, need_weights)
        if groups > 1:
            out = unfold_groups(out, groups)
            weights = unfold_groups(weights, groups) if weights is not None else None
        if self.record_weights:
            self.last_weights = weights.detach()
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_k)  # (B, T, H * d_k)
        if packing is not None:
            out = packing.pack(out)  # (N, H * d_k)
        return self.w_o(out), (weights if need_weights else None)

    def _keys_values(
        self,
        key: Tensor,
        value: Tensor,
        cache: AttentionCache | None,
        static_kv: bool,
        rope: tuple[Tensor, Tensor] | None,
    ) -> tuple[Tensor, Tensor]:
        """Projected keys and values (B', H, S, d_k): new ones, with the cached ones before."""
        if static_kv and cache is not None and cache.k is not None:
            return cache.k, cache.v  # the memory, projected at the first step
        if key is value:
            k, v = self._project(key, self.w_k, self.w_v)  # (B', H, S_new, d_k) each
        else:
            (k,), (v,) = self._project(key, self.w_k), self._project(value, self.w_v)
        if rope is not None:
            k = apply_rope(k, *rope)
        if cache is not None:
            k, v = cache.append(k, v)  # static_kv: the first call stores the memory
        return k, v

    @staticmethod
    def _groups(b: int, b_keys: int, positional: bool) -> int:
        """How many query rows share one key row (1 unless the memory is shared by beams)."""
        if b == b_keys:
            return 1
        if b % b_keys or positional:
            raise ValueError(
                f"a query batch of {b} rows cannot share keys of {b_keys} rows"
                + (" in causal or ALiBi attention" if positional else "")
            )
        return b // b_keys

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        causal: bool,
        alibi: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """Eq. 1 on q (B, H, T, d_k), k, v (B, H, S, d_k): the reference path when weights are
        wanted (or recorded), else the fused path. Returns (B, H, T, d_k) and the weights."""
        dropout_p = self.dropout if self.training else 0.0
        alibi = alibi.to(q.dtype) if alibi is not None else None
        if need_weights or self.record_weights:
            allowed = build_allowed(key_padding_mask, causal, q.size(2), k.size(2), q.device)
            return scaled_dot_product_attention(q, k, v, allowed, alibi, dropout_p, self.scale)
        return self._fused(q, k, v, key_padding_mask, causal, alibi, dropout_p), None

    def _fused(self, q, k, v, key_padding_mask, causal, alibi, dropout_p) -> Tensor:
        """F.scaled_dot_product_attention with the least mask it needs (see the module
        docstring): nothing, is_causal, or an explicit bool mask / float bias."""
        t, s = q.size(2), k.size(2)
        if causal and t > 1 and t == s and key_padding_mask is None and alibi is None:
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout_p, is_causal=True, scale=self.scale
            )
        allowed = build_allowed(key_padding_mask, causal, t, s, q.device)
        mask = allowed
        if alibi is not None:
            mask = alibi if allowed is None else torch.where(allowed, alibi, float("-inf"))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=self.scale
        )
        if allowed is not None:  # a query with no key: zero, as the reference path, on any kernel
            out = out.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
        return out
