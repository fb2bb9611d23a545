"""The Transformer (Vaswani et al., 2017, Fig. 1): encoder-decoder, or decoder-only.

Sequences are right-padded with `pad_id`. The encoder masks pad keys; the decoder's causal mask
already hides the pads that follow the real tokens of a right-padded target, and cross-attention
masks the source pads (both source masks off with mask_source_padding=False). The stacks that
own the loops are in attnlab.model.stacks, the KV cache in attnlab.model.cache.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from attnlab.model.attention import MultiHeadAttention
from attnlab.model.cache import KVCache
from attnlab.model.config import TransformerConfig
from attnlab.model.layers import Embeddings
from attnlab.model.stacks import Decoder, Encoder


class Transformer(nn.Module):
    """forward(src, tgt_in) -> logits (B, T, V) for arch="encoder_decoder";
    forward(tokens) -> logits (B, T, V) for arch="decoder_only".
    With `logits_at` (B, T) bool, only those positions' logits, (N, V) in row-major order:
    a loss needs them at the real targets only, and the output layer (d_model x V per
    position) is the widest matrix product of the model. The stacks then also skip the pads
    (config.skip_padding, attnlab.model.packing): no output at a pad is asked for."""

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
            self.encoder = Encoder(cfg, src_embeddings)
        self.decoder = Decoder(cfg, tgt_embeddings, cross_attention=cfg.arch == "encoder_decoder")
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
    def encode(self, src: Tensor, skip_padding: bool = False) -> tuple[Tensor, Tensor]:
        """src (B, S) -> memory (B, S, d_model), src padding mask (B, S) bool (True at pads).
        skip_padding: the memory at the pads is not needed (zeros then; see Encoder)."""
        if self.encoder is None:
            raise RuntimeError("encode() needs arch='encoder_decoder'")
        return self.encoder(src, skip_padding)

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        logits_at: Tensor | None = None,
    ) -> Tensor:
        """tgt_in (B, T) -> logits (B, T, V), or (N, V) at the N True positions of logits_at
        (B, T) bool. With a cache, tgt_in holds only the new positions. See Decoder.forward
        for memory shared by beams."""
        skip = logits_at if logits_at is not None else False
        hidden = self.decoder(tgt_in, memory, memory_padding_mask, cache, skip)  # (B, T, d_model)
        if logits_at is not None:
            hidden = hidden[logits_at]  # (N, d_model)
        return self.generator(hidden)

    def new_cache(self) -> KVCache:
        return KVCache(len(self.decoder.layers))

    def forward(
        self, src: Tensor, tgt_in: Tensor | None = None, logits_at: Tensor | None = None
    ) -> Tensor:
        if self.encoder is None:
            if tgt_in is not None:
                raise ValueError("a decoder_only Transformer takes forward(tokens)")
            return self.decode(src, logits_at=logits_at)
        if tgt_in is None:
            raise ValueError("an encoder_decoder Transformer takes forward(src, tgt_in)")
        memory, padding_mask = self.encode(src, skip_padding=logits_at is not None)
        return self.decode(tgt_in, memory, padding_mask, logits_at=logits_at)

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
