"""The contender: torch.nn.Transformer (or, decoder-only, a causal torch.nn.TransformerEncoder)
with the dimensions, embeddings and parameter count of attnlab's Transformer for the same
TransformerConfig: shared token embeddings x sqrt(d_model), the same sinusoidal table, the
output projection tied to the embeddings, LayerNorm eps 1e-6, a final norm only with Pre-LN
(torch.nn always adds one; attnlab's Post-LN has none), attention-weight dropout attn_dropout
and no dropout inside the FFN (attnlab has none there). Masks are what a torch.nn user passes:
key padding masks (when the batch has pads, as attnlab) and the causal mask, flagged causal."""

from __future__ import annotations

import math

from torch import Tensor, nn

from attnlab.model.config import TransformerConfig
from attnlab.model.positions.sinusoidal import sinusoidal_encoding


def unsupported(cfg: TransformerConfig) -> str | None:
    """Why torch.nn has no twin of this config, or None."""
    if cfg.pos_encoding not in ("sinusoidal", "none"):
        return f"model.pos_encoding={cfg.pos_encoding} has no torch.nn counterpart"
    if cfg.norm_type != "layernorm":
        return f"model.norm_type={cfg.norm_type} has no torch.nn.Transformer counterpart"
    if cfg.head_dim * cfg.n_heads != cfg.d_model or cfg.attn_scale != "sqrt_dk":
        return "torch.nn.MultiheadAttention needs d_k = d_model / n_heads and 1/sqrt(d_k)"
    return None


def _layer_kwargs(cfg: TransformerConfig) -> dict:
    return dict(
        d_model=cfg.d_model,
        nhead=cfg.n_heads,
        dim_feedforward=cfg.d_ff,
        dropout=cfg.dropout,
        activation=cfg.activation,
        layer_norm_eps=1e-6,
        batch_first=True,
        norm_first=cfg.norm_position == "pre",
    )


def _like_attnlab(layer: nn.Module, cfg: TransformerConfig) -> nn.Module:
    layer.dropout = nn.Identity()  # torch.nn's dropout inside the FFN; attnlab has none
    for attn in (layer.self_attn, getattr(layer, "multihead_attn", None)):
        if attn is not None:
            attn.dropout = cfg.attn_dropout
    return layer


def _final_norm(cfg: TransformerConfig) -> nn.Module | None:
    return nn.LayerNorm(cfg.d_model, eps=1e-6) if cfg.norm_position == "pre" else None


class TorchNNTransformer(nn.Module):
    """forward(src, tgt_in) -> logits (B, T, V) for encoder_decoder; forward(tokens) for
    decoder_only, as attnlab.model.Transformer."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg, kw = cfg, _layer_kwargs(cfg)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.src_embed = self.embed
        if cfg.arch == "encoder_decoder" and not cfg.share_embeddings:
            self.src_embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        with_positions = cfg.pos_encoding == "sinusoidal"
        pe = sinusoidal_encoding(cfg.max_len or 1024, cfg.d_model) if with_positions else None
        self.register_buffer("pe", pe, persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.decoder_only = cfg.arch == "decoder_only"
        if self.decoder_only:  # a causal encoder stack is a decoder without cross-attention
            layer = _like_attnlab(nn.TransformerEncoderLayer(**kw), cfg)
            self.stack = nn.TransformerEncoder(
                layer, cfg.n_decoder_layers, _final_norm(cfg), enable_nested_tensor=False
            )
        else:
            encoder = nn.TransformerEncoder(
                _like_attnlab(nn.TransformerEncoderLayer(**kw), cfg),
                cfg.n_encoder_layers,
                _final_norm(cfg),
                enable_nested_tensor=False,
            )
            decoder = nn.TransformerDecoder(
                _like_attnlab(nn.TransformerDecoderLayer(**kw), cfg),
                cfg.n_decoder_layers,
                _final_norm(cfg),
            )
            self.stack = nn.Transformer(
                cfg.d_model,
                cfg.n_heads,
                custom_encoder=encoder,
                custom_decoder=decoder,
                batch_first=True,
            )
        self.generator = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.share_embeddings:
            self.generator.weight = self.embed.weight

    def _embed(self, table: nn.Embedding, tokens: Tensor) -> Tensor:
        x = table(tokens) * math.sqrt(self.cfg.d_model)
        if self.pe is not None:
            x = x + self.pe[: tokens.size(1)]
        return self.dropout(x)

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor | None = None,
        logits_at: Tensor | None = None,
        project: bool = True,
    ) -> Tensor:
        """Logits (B, T, V), or (N, V) at the True positions of logits_at (B, T) bool, as
        attnlab's Transformer: the output layer and the loss skip the pads for both contenders
        (torch.nn's layers still compute every position). project=False: the hidden states
        there instead (loss.fused_output applies the projection inside the loss, for both)."""
        if self.decoder_only:
            t = src.size(1)
            causal = nn.Transformer.generate_square_subsequent_mask(t, device=src.device)
            h = self.stack(self._embed(self.embed, src), mask=causal, is_causal=True)
            return self._output(h, logits_at, project)
        pad = src.eq(self.cfg.pad_id)
        pad = pad if bool(pad.any()) else None  # as attnlab: no mask without pads
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=src.device)
        h = self.stack(
            self._embed(self.src_embed, src),
            self._embed(self.embed, tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=pad,
            memory_key_padding_mask=pad,
            tgt_is_causal=True,
        )
        return self._output(h, logits_at, project)

    def _output(self, h: Tensor, logits_at: Tensor | None, project: bool) -> Tensor:
        h = h if logits_at is None else h[logits_at]
        return self.generator(h) if project else h

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
