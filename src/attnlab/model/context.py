"""What one forward pass of a stack shares, handed down as one object instead of arguments.

A stack (attnlab.model.stacks) computes once per forward pass what each of its layers needs: the
relative positions of its encoding (RoPE's rotation, ALiBi's bias) for this pass's positions, the
source padding mask, the packing of the real positions, and, when decoding step by step, the
cache. It passes a `Context` to each layer (with that layer's cache); the layer asks it for the
`AttentionContext` of its self-attention or its cross-attention, which is all that
MultiHeadAttention.forward reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from attnlab.model.cache import LayerCache, MemoryCache, SelfAttentionCache
from attnlab.model.packing import Packing
from attnlab.model.positions.base import NO_RELATIVE, RelativePositions


@dataclass(frozen=True)
class AttentionContext:
    """One call of MultiHeadAttention, besides its inputs.

    key_padding_mask: (B', S) bool, True at pad keys, or None (nothing to mask).
    causal: the T queries are the last T of S positions and see no later key.
    rotation: (cos, sin), each (T, d_k/2), for the queries' (and new keys') positions, or None
        (RoPE); self-attention only (forward(x, memory) ignores it).
    bias: (1, H, T, S) added to the scores, or None (ALiBi).
    packing: the queries are the N real positions of a (B, T) batch, (N, d_model), or None.
    cache: the keys and values of earlier decoding steps (self-attention: they grow; cross-
        attention: the projected memory, kept from the first step), or None.
    need_weights: return the per-head weights (B, H, T, S) (the reference path of Eq. 1).
    """

    key_padding_mask: Tensor | None = None
    causal: bool = False
    rotation: tuple[Tensor, Tensor] | None = None
    bias: Tensor | None = None
    packing: Packing | None = None
    cache: SelfAttentionCache | MemoryCache | None = None
    need_weights: bool = False


PLAIN = AttentionContext()  # nothing masked, no positions, no cache: Eq. 1 as written


@dataclass(frozen=True)
class Context:
    """One forward pass of a stack, as one of its layers sees it.

    padding_mask: (B, S) bool for the self-attention keys (the encoder's source pads; the
        decoder's target pads only without its causal mask), or None.
    memory, memory_padding_mask: the encoder's output (B', S, d_model) and its pads (B', S) for
        cross-attention (B' divides B when the beams of a sentence share its memory).
    cache: this layer's keys and values (incremental decoding), or None.
    relative: the positional encoding's rotation and bias for self-attention
        (attnlab.model.positions.base.RelativePositions).
    packing, need_weights: as in AttentionContext.
    """

    padding_mask: Tensor | None = None
    memory: Tensor | None = None
    memory_padding_mask: Tensor | None = None
    cache: LayerCache | None = None
    relative: RelativePositions = NO_RELATIVE
    packing: Packing | None = None
    need_weights: bool = False

    def self_attention(self, causal: bool) -> AttentionContext:
        """Self-attention over this pass's positions: its relative positions, its cache."""
        return AttentionContext(
            key_padding_mask=self.padding_mask,
            causal=causal,
            rotation=self.relative.rotation,
            bias=self.relative.bias,
            packing=self.packing,
            cache=self.cache.self_attn if self.cache is not None else None,
            need_weights=self.need_weights,
        )

    def cross_attention(self) -> AttentionContext:
        """Attention from this pass's positions to the encoder's memory (no relative
        positions between a target and a source position)."""
        return AttentionContext(
            key_padding_mask=self.memory_padding_mask,
            packing=self.packing,
            cache=self.cache.cross_attn if self.cache is not None else None,
            need_weights=self.need_weights,
        )
