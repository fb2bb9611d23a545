"""The typed KV cache."""

import torch

from attnlab.model import AttentionCache, LayerCache, Transformer, TransformerConfig

V, BOS, EOS, PAD = 30, 2, 3, 0


def model_for(pe="sinusoidal", seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = TransformerConfig(
        vocab_size=V,
        d_model=32,
        n_heads=4,
        d_ff=64,
        n_encoder_layers=2,
        n_decoder_layers=2,
        dropout=0.0,
        pos_encoding=pe,
        max_len=128,
        **overrides,
    )
    return Transformer(cfg).eval()


def source(b=3, s=6, seed=1):
    src = torch.randint(4, V, (b, s), generator=torch.Generator().manual_seed(seed))
    src[1, 4:] = PAD
    return src


def test_the_cache_holds_named_keys_and_values_per_layer():
    model, src = model_for(), source()
    memory, mask = model.encode(src)
    cache = model.new_cache()
    model.decode(torch.full((3, 2), BOS), memory, mask, cache)
    model.decode(torch.full((3, 1), BOS), memory, mask, cache)
    assert cache.length == 3 and len(cache.layers) == 2
    layer = cache.layers[1]
    assert isinstance(layer, LayerCache) and isinstance(layer.self_attn, AttentionCache)
    assert layer.self_attn.k.shape == layer.self_attn.v.shape == (3, 4, 3, 8)  # (B, H, T, d_k)
    assert layer.cross_attn.k.shape == (3, 4, 6, 8)  # (B, H, S, d_k)
