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
        self.config = cfg = config  # frozen: checked once, when it was made
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
        self._recorded: dict[str, Tensor] | None = None  # record_attention(): the last weights
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
        return self.encoder(src, skip_padding, need_weights=self._recorded is not None)

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        logits_at: Tensor | None = None,
        project: bool = True,
    ) -> Tensor:
        """tgt_in (B, T) -> logits (B, T, V), or (N, V) at the N True positions of logits_at
        (B, T) bool. With a cache, tgt_in holds only the new positions. See Decoder.forward
        for memory shared by beams. project=False: the decoder's output there, (B, T, d_model)
        or (N, d_model), before the output projection `generator` (a loss that applies the
        projection itself, training/losses.py: fused_output_nll)."""
        skip = logits_at if logits_at is not None else False
        hidden = self.decoder(  # (B, T, d_model)
            tgt_in, memory, memory_padding_mask, cache, skip, self._recorded is not None
        )
        if logits_at is not None:
            hidden = hidden[logits_at]  # (N, d_model)
        return self.generator(hidden) if project else hidden

    def new_cache(self) -> KVCache:
        return KVCache(len(self.decoder.layers))

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor | None = None,
        logits_at: Tensor | None = None,
        project: bool = True,
    ) -> Tensor:
        if self.encoder is None:
            if tgt_in is not None:
                raise ValueError("a decoder_only Transformer takes forward(tokens)")
            return self.decode(src, logits_at=logits_at, project=project)
        if tgt_in is None:
            raise ValueError("an encoder_decoder Transformer takes forward(src, tgt_in)")
        memory, padding_mask = self.encode(src, skip_padding=logits_at is not None)
        return self.decode(tgt_in, memory, padding_mask, logits_at=logits_at, project=project)

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
        """Inside the block every attention layer returns its weights (B, H, T, S) (the
        reference path of Eq. 1), and a forward hook on each keeps the last ones, read with
        attention_weights()."""
        outer, self._recorded = self._recorded, {}

        def keep(name: str):
            def hook(module, args, output) -> None:
                if output[1] is not None:
                    self._recorded[name] = output[1].detach()

            return hook

        hooks = [m.register_forward_hook(keep(n)) for n, m in self.attention_modules()]
        try:
            yield self
        finally:
            for hook in hooks:
                hook.remove()
            self._recorded = outer  # an enclosing block goes on recording

    def attention_weights(self) -> dict[str, Tensor]:
        """{"encoder.layers.0.self_attn": (B, H, T, S), ...} from the last forward pass inside
        record_attention()."""
        return dict(self._recorded or {})
