"""The Transformer (Vaswani et al., 2017, Fig. 1): encoder-decoder, or decoder-only.

Sequences are right-padded with `pad_id`. The encoder masks pad keys; the decoder's causal mask
already hides the pads that follow the real tokens of a right-padded target, and cross-attention
masks the source pads.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from attnlab.model.attention import MultiHeadAttention
from attnlab.model.config import TransformerConfig
from attnlab.model.layers import DecoderLayer, Embeddings, EncoderLayer, make_norm
from attnlab.model.positional import (
    ALiBi,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)


class KVCache:
    """Keys and values of earlier decoding steps, one dict per decoder layer, so incremental
    decoding computes each position once. `reorder` follows beam search's choice of hypotheses."""

    def __init__(self, n_layers: int):
        self.layers: list[dict] = [{} for _ in range(n_layers)]
        self.length = 0  # target positions already processed

    def reorder(self, index: Tensor) -> None:
        """Keep rows `index` (new batch order) of every cached tensor."""
        for layer in self.layers:
            for part in layer.values():
                for name in ("k", "v"):
                    if name in part:
                        part[name] = part[name].index_select(0, index)


def _absolute_positions(cfg: TransformerConfig) -> nn.Module | None:
    if cfg.pos_encoding == "sinusoidal":
        return SinusoidalPositionalEncoding(cfg.d_model, cfg.max_len)
    if cfg.pos_encoding == "learned":
        return LearnedPositionalEmbedding(cfg.d_model, cfg.max_len)
    return None


class Stack(nn.Module):
    """Embedding + positions + dropout (Sec. 5.4) + N layers (+ final norm for Pre-LN)."""

    def __init__(
        self,
        cfg: TransformerConfig,
        embeddings: Embeddings,
        n_layers: int,
        decoder: bool,
        cross_attention: bool = True,
    ):
        super().__init__()
        self.embeddings = embeddings
        self.positions = _absolute_positions(cfg)
        rotary = RotaryEmbedding(cfg.head_dim) if cfg.pos_encoding == "rope" else None
        alibi = ALiBi(cfg.n_heads) if cfg.pos_encoding == "alibi" else None
        self.dropout = nn.Dropout(cfg.dropout)
        if decoder:
            self.layers = nn.ModuleList(
                DecoderLayer(cfg, rotary, alibi, cross_attention) for _ in range(n_layers)
            )
        else:
            self.layers = nn.ModuleList(EncoderLayer(cfg, rotary, alibi) for _ in range(n_layers))
        self.final_norm = make_norm(cfg) if cfg.norm_position == "pre" else None

    def embed(self, tokens: Tensor, offset: int = 0) -> Tensor:
        x = self.embeddings(tokens)  # (B, T, d_model), already * sqrt(d_model)
        if self.positions is not None:
            x = x + self.positions(tokens.size(1), offset)
        return self.dropout(x)

    def finish(self, x: Tensor) -> Tensor:
        return self.final_norm(x) if self.final_norm is not None else x


class Transformer(nn.Module):
    """forward(src, tgt_in) -> logits (B, T, V) for arch="encoder_decoder";
    forward(tokens) -> logits (B, T, V) for arch="decoder_only"."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        config.validate()
        self.config = cfg = config
        tgt_embeddings = Embeddings(cfg.vocab_size, cfg.d_model, cfg.pad_id)
        self.encoder = None
        if cfg.arch == "encoder_decoder":
            src_embeddings = (
                tgt_embeddings
                if cfg.share_embeddings
                else Embeddings(cfg.vocab_size, cfg.d_model, cfg.pad_id)
            )
            self.encoder = Stack(cfg, src_embeddings, cfg.n_encoder_layers, decoder=False)
        self.decoder = Stack(
            cfg,
            tgt_embeddings,
            cfg.n_decoder_layers,
            decoder=True,
            cross_attention=cfg.arch == "encoder_decoder",
        )
        # Pre-softmax linear transformation (Sec. 3.4), tied to the embeddings when shared.
        self.generator = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.reset_parameters()
        if cfg.share_embeddings:
            self.generator.weight = tgt_embeddings.table.weight

    # --- initialization -------------------------------------------------------------------
    def reset_parameters(self) -> None:
        """Initialization.
        "xavier": Xavier-uniform linear weights (as tensor2tensor), zero biases, embeddings
        N(0, d_model^-0.5) so that sqrt(d_model)-scaled embeddings have unit variance.
        "depth_scaled": N(0, 0.02) everywhere, with the residual output projections (W^O, W_2)
        scaled by 1/sqrt(2 * n_layers), as GPT-2 does."""
        cfg = self.config
        n_layers = cfg.n_decoder_layers + (cfg.n_encoder_layers if self.encoder else 0)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                if cfg.init == "xavier":
                    nn.init.xavier_uniform_(module.weight)
                else:
                    std = 0.02
                    if name.endswith(("w_o", "w_2")):
                        std /= math.sqrt(2 * n_layers)
                    nn.init.normal_(module.weight, 0.0, std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                std = cfg.d_model**-0.5 if cfg.init == "xavier" else 0.02
                nn.init.normal_(module.weight, 0.0, std)
                if module.padding_idx is not None:
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()

    # --- the two halves -------------------------------------------------------------------
    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S) -> memory (B, S, d_model), src padding mask (B, S) bool (True at pads)."""
        if self.encoder is None:
            raise RuntimeError("encode() needs arch='encoder_decoder'")
        padding_mask = src.eq(self.config.pad_id)
        x = self.encoder.embed(src)
        for layer in self.encoder.layers:
            x = layer(x, padding_mask)
        return self.encoder.finish(x), padding_mask

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """tgt_in (B, T) -> logits (B, T, V). With a cache, tgt_in holds only the new positions."""
        offset = cache.length if cache is not None else 0
        x = self.decoder.embed(tgt_in, offset)
        for i, layer in enumerate(self.decoder.layers):
            layer_cache = cache.layers[i] if cache is not None else None
            x = layer(x, memory=memory, memory_padding_mask=memory_padding_mask, cache=layer_cache)
        if cache is not None:
            cache.length += tgt_in.size(1)
        return self.generator(self.decoder.finish(x))

    def new_cache(self) -> KVCache:
        return KVCache(len(self.decoder.layers))

    def forward(self, src: Tensor, tgt_in: Tensor | None = None) -> Tensor:
        if self.encoder is None:
            if tgt_in is not None:
                raise ValueError("a decoder_only Transformer takes forward(tokens)")
            return self.decode(src)
        if tgt_in is None:
            raise ValueError("an encoder_decoder Transformer takes forward(src, tgt_in)")
        memory, padding_mask = self.encode(src)
        return self.decode(tgt_in, memory, padding_mask)

    # --- introspection --------------------------------------------------------------------
    def num_parameters(self, trainable_only: bool = False) -> int:
        """Parameters counted once (the shared embedding matrix once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def attention_modules(self) -> Iterator[tuple[str, MultiHeadAttention]]:
        for name, module in self.named_modules():
            if isinstance(module, MultiHeadAttention):
                yield name, module

    @contextlib.contextmanager
    def record_attention(self):
        """Inside the block every attention layer keeps its last weights (B, H, T, S), read with
        attention_weights(). Recording forces the reference (weight-returning) path."""
        modules = [m for _, m in self.attention_modules()]
        for m in modules:
            m.record_weights = True
        try:
            yield self
        finally:
            for m in modules:
                m.record_weights = False
                m.last_weights = None

    def attention_weights(self) -> dict[str, Tensor]:
        """{"encoder.layers.0.self_attn": (B, H, T, S), ...} from the last forward pass."""
        return {
            name: m.last_weights
            for name, m in self.attention_modules()
            if m.last_weights is not None
        }
