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
from attnlab.model.config import TransformerConfig
from attnlab.model.context import Context


class PositionwiseFeedForward(nn.Module):
    """Eq. (2), Sec. 3.3: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied at every position.
    x: (B, T, d_model) -> (B, T, d_model), inner width d_ff; or (N, d_model) packed.

    The positions are flattened to rows, (B * T, d_model), for the two products: the same
    arithmetic, but torch.compile's CPU backend then keeps the ReLU's output for the backward
    pass instead of a bool mask of the (B, T, d_ff) activation, whose store it makes slowly
    (4 ms of a 60 ms default-benchmark step on the 2-core machine; docs/benchmark.md)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu"):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, x.size(-1))  # (B * T, d_model): a view of a contiguous x
        return self.w_2(self.activation(self.w_1(rows))).view(x.shape)


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
        cfg.d_model,
        cfg.n_heads,
        cfg.d_k,
        cfg.attn_dropout,
        attn_scale=cfg.attn_scale,
        qk_norm=cfg.qk_norm,
    )


class EncoderLayer(nn.Module):
    """Sec. 3.1 encoder layer: self-attention, then FFN, each in a residual connection."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = _attention(cfg)
        self.ffn = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        self.attn_block = Residual(cfg)
        self.ffn_block = Residual(cfg)

    def forward(self, x: Tensor, ctx: Context) -> Tensor:
        """x: (B, S, d_model), or (N, d_model) with ctx.packing (its real positions only);
        ctx: the stack's forward pass (padding mask, relative positions)."""
        attention = ctx.self_attention(causal=False)
        x = self.attn_block(x, lambda h: self.self_attn(h, ctx=attention)[0])
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    """Sec. 3.1 decoder layer: masked self-attention, encoder-decoder attention (absent in a
    decoder-only model), then FFN.

    Self-attention takes no padding mask: targets are right-padded, and the causal mask already
    hides from every real position the pads that follow it. (Queries at pad positions see real
    tokens and pads; their outputs are ignored by the loss.) With cfg.mask_future=False (a bug
    control) there is no causal mask, and the stack masks the target's pads instead."""

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
        self.causal = cfg.mask_future

    def forward(self, x: Tensor, ctx: Context) -> Tensor:
        """x: (B, T, d_model), or (N, d_model) with ctx.packing (its real positions only);
        ctx: the stack's forward pass (the encoder's memory and its mask, this layer's cache,
        relative positions)."""
        masked = ctx.self_attention(causal=self.causal)
        x = self.self_block(x, lambda h: self.self_attn(h, ctx=masked)[0])
        if self.cross_attn is not None:
            cross = ctx.cross_attention()
            x = self.cross_block(x, lambda h: self.cross_attn(h, ctx.memory, cross)[0])
        return self.ffn_block(x, self.ffn)
