"""Sec. 3.1: the encoder and decoder stacks, each owning its loop.

A stack is token embeddings (Sec. 3.4) + positions (Sec. 3.5; the encoding a component of
attnlab.model.positions) + dropout (Sec. 5.4), then N layers, then (Pre-LN only) a final norm.
What every layer of one forward pass shares is computed here once and handed to the layers: the
encoding's relative positions for this pass (RoPE's rotation, ALiBi's bias), whether source
padding needs a mask at all, and, when the caller lets the stack skip the pads
(`skip_padding=True` in forward, with the config's skip_padding on), which positions are real: the
position-wise work of the layers then runs on the real tokens only (attnlab.model.packing), and
the stack hands back the usual (B, T, d_model), zeros at the pads.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from attnlab.model.cache import KVCache
from attnlab.model.config import TransformerConfig
from attnlab.model.context import Context
from attnlab.model.layers import DecoderLayer, Embeddings, EncoderLayer, make_norm
from attnlab.model.packing import Packing
from attnlab.model.positions import encoding_class
from attnlab.model.positions.base import RelativePositions


def source_key_mask(padding_mask: Tensor | None, mask_padding: bool) -> Tensor | None:
    """The key padding mask (B, S) that attention over the source needs, or None: when pads may
    be attended to (mask_source_padding=False) or the batch has none. None lets attention take
    its fused kernels; deciding here costs one host sync per forward, not one per layer. Under
    torch.compile the mask is always passed (a host sync would break the graph in two)."""
    if padding_mask is None or not mask_padding:
        return None
    if not torch.compiler.is_compiling() and not bool(padding_mask.any()):
        return None
    return padding_mask


class _Stack(nn.Module):
    """What both stacks share: the bottom (embeddings, positions, dropout), the per-forward
    relative-position tables, running a layer (checkpointed if asked) and the final norm."""

    def __init__(
        self,
        cfg: TransformerConfig,
        embeddings: Embeddings,
        layers: nn.ModuleList,
        causal: bool = False,
    ):
        super().__init__()
        self.embeddings = embeddings
        # model.positions; `causal`: this stack's self-attention is (the decoder's)
        self.positions = encoding_class(cfg.pos_encoding).from_config(cfg, causal)
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = layers
        self.final_norm = make_norm(cfg) if cfg.norm_position == "pre" else None
        self.activation_checkpointing = cfg.activation_checkpointing
        self.skip_padding = cfg.skip_padding
        self.pad_id = cfg.pad_id

    def packing(
        self, tokens: Tensor, skip: bool | Tensor, pads_hidden: bool, known_padded: bool = False
    ) -> Packing | None:
        """The real positions of tokens (B, T) when the layers may skip the pads: the caller
        asks (`skip`: True, or the (B, T) bool positions whose output it needs, which are kept
        even at a pad), the config's skip_padding is on, and no real position can see a pad
        (`pads_hidden`); else None. `known_padded`: the tokens are known to hold a pad (no
        host sync to look again)."""
        if skip is False or not (self.skip_padding and pads_hidden):
            return None
        real = tokens.ne(self.pad_id)
        if skip is True:
            return Packing.of(real, known_padded)
        return Packing.of(real | skip)

    def embed(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """(B, T) tokens at positions offset .. offset + T - 1 -> (B, T, d_model)."""
        x = self.embeddings(tokens)  # (B, T, d_model), already * sqrt(d_model)
        absolute = self.positions.absolute(tokens.size(1), offset)  # (1, T, d_model) or None
        if absolute is not None:
            x = x + absolute
        return self.dropout(x)

    def relative_positions(self, t: int, s: int, like: Tensor) -> RelativePositions:
        """What the encoding gives self-attention for T queries that are the last T of S
        positions: a rotation of queries and keys (RoPE), a bias on the scores (ALiBi), or
        neither."""
        return self.positions.relative(t, s, like)

    def call_layer(self, layer: nn.Module, x: Tensor, ctx: Context) -> Tensor:
        """layer(x, ctx); under activation checkpointing (training, with autograd) its
        activations are recomputed in the backward pass instead of stored."""
        if self.activation_checkpointing and self.training and torch.is_grad_enabled():
            return checkpoint(layer, x, ctx, use_reentrant=False)
        return layer(x, ctx)

    def finish(self, x: Tensor, packing: Packing | None) -> Tensor:
        """The final norm (Pre-LN); packed rows back to (B, T, d_model), zeros at the pads."""
        x = self.final_norm(x) if self.final_norm is not None else x
        return packing.unpack(x) if packing is not None else x


class Encoder(_Stack):
    """The encoder stack: N x (self-attention, FFN) over the source."""

    def __init__(self, cfg: TransformerConfig, embeddings: Embeddings):
        layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        super().__init__(cfg, embeddings, layers)
        self.mask_source_padding = cfg.mask_source_padding

    def forward(
        self, src: Tensor, skip_padding: bool = False, need_weights: bool = False
    ) -> tuple[Tensor, Tensor]:
        """src (B, S) -> memory (B, S, d_model), padding mask (B, S) bool (True at pads).
        skip_padding: the caller needs no output at the pads (they are zeros then).
        need_weights: every attention layer returns its weights (Transformer.record_attention)."""
        padding_mask = src.eq(self.pad_id)
        key_mask = source_key_mask(padding_mask, self.mask_source_padding)
        masked = key_mask is not None  # outside torch.compile: the source has pads, masked
        packing = self.packing(src, skip_padding, pads_hidden=masked, known_padded=masked)
        x = self.embed(src)
        relative = self.relative_positions(src.size(1), src.size(1), x)
        ctx = Context(key_mask, relative=relative, packing=packing, need_weights=need_weights)
        if packing is not None:
            x = packing.pack(x)  # (N, d_model)
        for layer in self.layers:
            x = self.call_layer(layer, x, ctx)
        return self.finish(x, packing), padding_mask


class Decoder(_Stack):
    """The decoder stack: N x (masked self-attention, cross-attention, FFN) over the target;
    without cross-attention, a decoder-only language model."""

    def __init__(self, cfg: TransformerConfig, embeddings: Embeddings, cross_attention: bool):
        layers = nn.ModuleList(
            DecoderLayer(cfg, cross_attention) for _ in range(cfg.n_decoder_layers)
        )
        super().__init__(cfg, embeddings, layers, causal=cfg.mask_future)
        self.mask_source_padding = cfg.mask_source_padding
        self.mask_future = cfg.mask_future

    def forward(
        self,
        tgt_in: Tensor,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        skip_padding: bool | Tensor = False,
        need_weights: bool = False,
    ) -> Tensor:
        """tgt_in (B, T) -> hidden states (B, T, d_model).

        memory (B', S, d_model) and memory_padding_mask (B', S) come from Encoder.forward;
        B' = B, or B' divides B and each memory row serves B / B' consecutive target rows (the
        beams of one sentence in beam search). With a cache, tgt_in holds only the new
        positions, which follow the cache.length processed before; the cache then advances.
        skip_padding: the caller needs no output at the pads (they are zeros then), or a (B, T)
        bool of the positions it needs; targets are right-padded, so the causal mask hides a
        target's pads from its real tokens and, without a cache, the layers may skip them.
        need_weights: every attention layer returns its weights (Transformer.record_attention).
        Without the causal mask (mask_future=False, a bug control) the target's own pads are
        masked as keys instead, so that the future is the only thing that leaks."""
        t = tgt_in.size(1)
        offset = cache.length if cache is not None else 0
        key_mask = source_key_mask(memory_padding_mask, self.mask_source_padding)
        target_mask = None
        if not self.mask_future and cache is None:
            target_mask = source_key_mask(tgt_in.eq(self.pad_id), True)
        packing = self.packing(tgt_in, skip_padding, pads_hidden=cache is None)
        x = self.embed(tgt_in, offset)
        relative = self.relative_positions(t, offset + t, x)
        ctx = Context(
            padding_mask=target_mask,
            memory=memory,
            memory_padding_mask=key_mask,
            relative=relative,
            packing=packing,
            need_weights=need_weights,
        )
        if packing is not None:
            x = packing.pack(x)  # (N, d_model)
        for i, layer in enumerate(self.layers):
            if cache is None:
                x = self.call_layer(layer, x, ctx)
            else:  # not checkpointed: a recomputed step would extend the cache twice
                x = layer(x, replace(ctx, cache=cache.layers[i]))
        if cache is not None:
            cache.length += t
        return self.finish(x, packing)
