"""Building blocks: Sec. 3.3 FFN, Sec. 3.4 embeddings, normalization, encoder/decoder layers.

Norm placement (the Pre-LN / Post-LN ablation), for a sub-layer F (attention or FFN):
    post (the paper, Sec. 3.1):  x = Norm(x + Dropout(F(x)))
    pre  (Xiong et al., 2020):   x = x + Dropout(F(Norm(x)))     (+ a final Norm on each stack)
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.model.attention import MultiHeadAttention
from attnlab.model.cache import LayerCache
from attnlab.model.config import TransformerConfig
from attnlab.model.packing import Packing


class PositionwiseFeedForward(nn.Module):
    """Eq. (2), Sec. 3.3: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied at every position.
    x: (B, T, d_model) -> (B, T, d_model), inner width d_ff."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu"):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.activation(self.w_1(x)))


class Embeddings(nn.Module):
    """Sec. 3.4: learned token embeddings multiplied by sqrt(d_model). (B, T) -> (B, T, d_model)."""

    def __init__(self, vocab_size: int, d_model: int, pad_id: int):
        super().__init__()
        self.d_model = d_model
        self.table = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)

    @property
    def weight(self) -> Tensor:
        return self.table.weight

    def forward(self, tokens: Tensor) -> Tensor:
        return self.table(tokens) * math.sqrt(self.d_model)


def make_norm(cfg: TransformerConfig) -> nn.Module:
    if cfg.norm_type == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=1e-6)
    return nn.LayerNorm(cfg.d_model, eps=1e-6)


class Residual(nn.Module):
    """One residual sub-layer connection with the configured norm placement."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.pre_norm = cfg.norm_position == "pre"
        self.norm = make_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


def _attention(cfg: TransformerConfig) -> MultiHeadAttention:
    return MultiHeadAttention(
        cfg.d_model, cfg.n_heads, cfg.d_k, cfg.attn_dropout, attn_scale=cfg.attn_scale
    )


class EncoderLayer(nn.Module):
    """Sec. 3.1 encoder layer: self-attention, then FFN, each in a residual connection."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = _attention(cfg)
        self.ffn = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        self.attn_block = Residual(cfg)
        self.ffn_block = Residual(cfg)

    def forward(
        self,
        x: Tensor,
        padding_mask: Tensor | None,
        rope: tuple[Tensor, Tensor] | None = None,
        alibi: Tensor | None = None,
        packing: Packing | None = None,
    ) -> Tensor:
        """x: (B, S, d_model), or (N, d_model) with a `packing` (its real positions only);
        padding_mask: (B, S) bool, True at pads, or None (no pads, or pads left visible);
        rope, alibi: the stack's tables for these S positions."""

        def attend(h: Tensor) -> Tensor:
            return self.self_attn(
                h, h, h, key_padding_mask=padding_mask, rope=rope, alibi=alibi, packing=packing
            )[0]

        x = self.attn_block(x, attend)
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    """Sec. 3.1 decoder layer: masked self-attention, encoder-decoder attention (absent in a
    decoder-only model), then FFN.

    Self-attention takes no padding mask: targets are right-padded, and the causal mask already
    hides from every real position the pads that follow it. (Queries at pad positions see real
    tokens and pads; their outputs are ignored by the loss.)"""

    def __init__(self, cfg: TransformerConfig, cross_attention: bool = True):
        super().__init__()
        self.self_attn = _attention(cfg)
        self.self_block = Residual(cfg)
        self.cross_attn = None
        if cross_attention:
            self.cross_attn = _attention(cfg)
            self.cross_block = Residual(cfg)
        self.ffn = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        self.ffn_block = Residual(cfg)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: LayerCache | None = None,
        rope: tuple[Tensor, Tensor] | None = None,
        alibi: Tensor | None = None,
        packing: Packing | None = None,
    ) -> Tensor:
        """x: (B, T, d_model), or (N, d_model) with a `packing` (its real positions only);
        memory: (B', S, d_model) from the encoder (B' may divide B, see MultiHeadAttention);
        memory_padding_mask: (B', S) bool or None; cache: this layer's keys and values;
        rope, alibi: the stack's tables for the T new positions."""

        def self_attend(h: Tensor) -> Tensor:
            self_cache = cache.self_attn if cache is not None else None
            return self.self_attn(
                h, h, h, causal=True, cache=self_cache, rope=rope, alibi=alibi, packing=packing
            )[0]

        def cross_attend(h: Tensor) -> Tensor:
            cross_cache = cache.cross_attn if cache is not None else None
            return self.cross_attn(
                h,
                memory,
                memory,
                key_padding_mask=memory_padding_mask,
                cache=cross_cache,
                static_kv=True,
                packing=packing,
            )[0]

        x = self.self_block(x, self_attend)
        if self.cross_attn is not None:
            x = self.cross_block(x, cross_attend)
        return self.ffn_block(x, self.ffn)
