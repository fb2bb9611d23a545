"""The Transformer of "Attention Is All You Need", in plain PyTorch.

Where to find each section of the paper:
    3.2.1 scaled dot-product attention  attention.scaled_dot_product_attention
    3.2.2 multi-head attention          attention.MultiHeadAttention
    3.3   position-wise FFN             layers.PositionwiseFeedForward
    3.4   embeddings (x sqrt(d_model))  layers.Embeddings
    3.5   positional encoding           positions.sinusoidal (+ learned, rope, alibi, none: one
                                        module each, picked by name, positions.encoding_class)
    3.1   encoder / decoder layers      layers.EncoderLayer, layers.DecoderLayer
    3.1   encoder / decoder stacks      stacks.Encoder, stacks.Decoder
    Fig.1 the model                     transformer.Transformer
    what one forward pass shares        context.Context, context.AttentionContext
    incremental decoding state          cache.KVCache (cache.SelfAttentionCache, cache.MemoryCache)
    skipping padding (real tokens only) packing.Packing (Transformer.forward's logits_at)
    beam search (Sec. 6.1)              decoding.beam_search
The learning-rate schedule (Sec. 5.3) lives with the training code: attnlab.training.schedules.

The names below are imported when first used (PEP 562), so `from attnlab.model.config import
TransformerConfig` (the config schema, attnlab-train --help) does not load torch.
"""

from __future__ import annotations

import importlib

_HOMES = {
    "attention": ("MultiHeadAttention", "scaled_dot_product_attention"),
    "cache": ("KVCache", "LayerCache", "MemoryCache", "SelfAttentionCache"),
    "context": ("AttentionContext", "Context"),
    "config": (
        "ACTIVATIONS",
        "ARCHS",
        "ATTN_SCALES",
        "INITS",
        "NORM_POSITIONS",
        "NORM_TYPES",
        "POS_ENCODINGS",
        "TransformerConfig",
    ),
    "positions.alibi": ("ALiBi", "alibi_slopes"),
    "positions.learned": ("LearnedPositionalEmbedding",),
    "positions.rope": ("RotaryEmbedding", "apply_rope"),
    "positions.sinusoidal": ("SinusoidalPositionalEncoding", "sinusoidal_encoding"),
    "positions.base": ("PositionalEncoding",),
    "stacks": ("Decoder", "Encoder"),
    "transformer": ("Transformer",),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
