"""The Transformer of "Attention Is All You Need", in plain PyTorch.

Where to find each section of the paper:
    3.2.1 scaled dot-product attention  attention.scaled_dot_product_attention
    3.2.2 multi-head attention          attention.MultiHeadAttention
    3.3   position-wise FFN             layers.PositionwiseFeedForward
    3.4   embeddings (x sqrt(d_model))  layers.Embeddings
    3.5   positional encoding           positional.sinusoidal_encoding (+ learned, RoPE, ALiBi)
    3.1   encoder / decoder layers      layers.EncoderLayer, layers.DecoderLayer
    3.1   encoder / decoder stacks      stacks.Encoder, stacks.Decoder
    Fig.1 the model                     transformer.Transformer
    incremental decoding state          cache.KVCache (cache.LayerCache, cache.AttentionCache)
    beam search (Sec. 6.1)              decoding.beam_search
The learning-rate schedule (Sec. 5.3) lives with the training code: attnlab.training.schedules.
"""

from attnlab.model.attention import MultiHeadAttention, scaled_dot_product_attention
from attnlab.model.cache import AttentionCache, KVCache, LayerCache
from attnlab.model.config import (
    ACTIVATIONS,
    ARCHS,
    ATTN_SCALES,
    INITS,
    NORM_POSITIONS,
    NORM_TYPES,
    POS_ENCODINGS,
    TransformerConfig,
)
from attnlab.model.positional import (
    ALiBi,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    apply_rope,
    sinusoidal_encoding,
)
from attnlab.model.stacks import Decoder, Encoder
from attnlab.model.transformer import Transformer

__all__ = [
    "ACTIVATIONS",
    "ARCHS",
    "ATTN_SCALES",
    "INITS",
    "NORM_POSITIONS",
    "NORM_TYPES",
    "POS_ENCODINGS",
    "ALiBi",
    "AttentionCache",
    "Decoder",
    "Encoder",
    "KVCache",
    "LayerCache",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "Transformer",
    "TransformerConfig",
    "alibi_slopes",
    "apply_rope",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]
