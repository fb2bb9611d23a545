"""Incremental decoding state: projected keys and values kept between decoding steps.

Layout: every cached tensor is (B, H, S, d_k): batch row, head, key position, head width (the
layout attention computes in, so a cached tensor is used as is). Self-attention caches grow by
the new positions at every step. Cross-attention caches hold the projected encoder memory,
computed at the first step and never changed: beam search shares one memory row among the
beams of a sentence (see MultiHeadAttention), so reordering beams never touches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class AttentionCache:
    """Keys and values of one attention layer, each (B, H, S, d_k); None before the first
    step."""

    k: Tensor | None = None
    v: Tensor | None = None

    @property
    def length(self) -> int:
        """Cached key positions S (0 when empty)."""
        return 0 if self.k is None else self.k.size(2)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new positions k, v (B, H, T, d_k); return all keys and values (B, H, S+T,
        d_k)."""
        if self.k is not None:
            k = torch.cat([self.k, k], dim=2)
            v = torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        return k, v

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (N,), in that order."""
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


@dataclass
class LayerCache:
    """One decoder layer: masked self-attention (grows) and cross-attention (fixed)."""

    self_attn: AttentionCache = field(default_factory=AttentionCache)
    cross_attn: AttentionCache = field(default_factory=AttentionCache)


class KVCache:
    """Keys and values of earlier decoding steps for every decoder layer, so incremental
    decoding computes each position once. `reorder` follows beam search's choice of
    hypotheses."""

    def __init__(self, n_layers: int):
        self.layers = [LayerCache() for _ in range(n_layers)]
        self.length = 0  # target positions already processed

    def reorder(self, index: Tensor) -> None:
        """Keep self-attention rows `index` (the new beam order). Cross-attention keys and
        values are left alone: beam search reorders beams only within a sentence, and every
        beam of a sentence attends to the same memory."""
        for layer in self.layers:
            layer.self_attn.reorder(index)
