"""Incremental decoding state: projected keys and values kept between decoding steps.

Layout: every cached tensor is (B, H, S, d_k): batch row, head, key position, head width (the
layout attention computes in, so a cached tensor is used as is). Self-attention caches grow by
the new positions at every step (SelfAttentionCache.extend). Cross-attention caches hold the
projected encoder memory, computed at the first step and never changed (MemoryCache.keys_values):
beam search shares one memory row among the beams of a sentence (see MultiHeadAttention), so
reordering beams never touches it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class SelfAttentionCache:
    """Keys and values of the positions decoded so far, each (B, H, S, d_k); None before the
    first step."""

    k: Tensor | None = None
    v: Tensor | None = None

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new positions k, v (B, H, T, d_k); return all keys and values
        (B, H, S + T, d_k)."""
        if self.k is not None:
            k = torch.cat([self.k, k], dim=2)
            v = torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        return k, v

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (N,), in that order (beam search's new hypotheses)."""
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


@dataclass
class MemoryCache:
    """The projected encoder memory of one cross-attention layer, each (B', H, S, d_k)."""

    k: Tensor | None = None
    v: Tensor | None = None

    def keys_values(self, project: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """The memory's keys and values: projected by `project()` at the first step, then kept."""
        if self.k is None:
            self.k, self.v = project()
        return self.k, self.v


@dataclass
class LayerCache:
    """One decoder layer: masked self-attention (grows) and cross-attention (fixed)."""

    self_attn: SelfAttentionCache = field(default_factory=SelfAttentionCache)
    cross_attn: MemoryCache = field(default_factory=MemoryCache)


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
