"""What the model tests share: a tiny TransformerConfig and random token batches."""

from __future__ import annotations

import torch

from attnlab.model import TransformerConfig

V, PAD = 40, 0  # vocabulary size and the pad id of the tiny models


def tiny(**overrides) -> TransformerConfig:
    """A 2+2-layer, d_model 32 model without dropout; keyword arguments override any field."""
    base = dict(
        vocab_size=V,
        d_model=32,
        n_heads=4,
        d_ff=64,
        n_encoder_layers=2,
        n_decoder_layers=2,
        dropout=0.0,
        max_len=64,
    )
    return TransformerConfig(**(base | overrides))


def tokens(b: int, t: int, seed: int = 0) -> torch.Tensor:
    """(b, t) random ids above the specials (no pads)."""
    return torch.randint(4, V, (b, t), generator=torch.Generator().manual_seed(seed))
