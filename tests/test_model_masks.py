"""Masks that must be exact: no NaN for a query with nothing to see, exact zeros on hidden keys,
and the two controls for classic mistakes (attn_scale, mask_source_padding)."""

import pytest
import torch

from attnlab.model import POS_ENCODINGS, AttentionContext, MultiHeadAttention, Transformer
from attnlab.model.attention import scaled_dot_product_attention
from model_utils import PAD, tiny, tokens


def test_a_fully_masked_row_gets_zero_weights_and_output_not_nan():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    q.requires_grad_(True)
    allowed = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    allowed[1, :, 1] = False  # query 1 of row 1 may see nothing
    out, w = scaled_dot_product_attention(q, k, v, allowed)
    assert w[1, :, 1].eq(0).all() and out[1, :, 1].eq(0).all()
    assert torch.allclose(w[0].sum(-1), torch.ones(2, 3))
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_both_paths_agree_on_an_all_pad_key_row():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4).eval()
    q, kv = torch.randn(2, 3, 32), torch.randn(2, 5, 32)
    pads = torch.zeros(2, 5, dtype=torch.bool)
    pads[1] = True  # an empty source sentence
    fast, _ = mha(q, kv, AttentionContext(key_padding_mask=pads))
    ref, w = mha(q, kv, AttentionContext(key_padding_mask=pads, need_weights=True))
    assert torch.isfinite(ref).all() and torch.isfinite(fast).all()
    assert w[1].eq(0).all()
    assert (fast - ref).abs().max() <= 1e-6
    assert torch.allclose(ref[1], mha.w_o.bias.expand(3, 32))  # zero attention, then W^O


def test_an_all_pad_source_sentence_gives_finite_logits_on_both_paths():
    torch.manual_seed(0)
    model = Transformer(tiny()).eval()
    src, tgt = tokens(2, 6), tokens(2, 5, seed=1)
    src[1] = PAD
    fast = model(src, tgt)
    with model.record_attention():
        ref = model(src, tgt)
    assert torch.isfinite(fast).all() and torch.isfinite(ref).all()
    assert (fast - ref).abs().max() <= 1e-5


@pytest.mark.parametrize("pe", POS_ENCODINGS)
@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_causal_maps_are_exactly_zero_above_the_diagonal(arch, pe):
    torch.manual_seed(0)
    model = Transformer(tiny(arch=arch, pos_encoding=pe)).eval()
    src, tgt = tokens(2, 6), tokens(2, 7, seed=1)
    with model.record_attention():
        model(src, tgt) if arch == "encoder_decoder" else model(tgt)
        maps = model.attention_weights()
    for i in range(2):
        w = maps[f"decoder.layers.{i}.self_attn"]  # (B, H, T, T)
        future = torch.ones(7, 7, dtype=torch.bool).triu(diagonal=1)
        assert w[..., future].eq(0).all()
        assert w[..., ~future].gt(0).all()


@pytest.mark.parametrize("pe", POS_ENCODINGS)
def test_padding_keys_receive_exactly_zero_weight(pe):
    torch.manual_seed(0)
    model = Transformer(tiny(pos_encoding=pe)).eval()
    src, tgt = tokens(2, 7), tokens(2, 5, seed=1)
    src[0, 4:] = PAD
    with model.record_attention():
        model(src, tgt)
        maps = model.attention_weights()
    for name in ("encoder.layers.0.self_attn", "decoder.layers.1.cross_attn"):
        w = maps[name]
        assert w[0, :, :, 4:].eq(0).all(), name
        assert w[0, :, :, :4].gt(0).all() and w[1].gt(0).all(), name


def test_attn_scale_none_is_q_k_without_the_square_root():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, attn_scale="none").eval()
    x = torch.randn(2, 5, 32)
    q, k, v = (lin(x).view(2, 5, 4, 8).transpose(1, 2) for lin in (mha.w_q, mha.w_k, mha.w_v))
    by_hand = torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v  # no / sqrt(d_k)
    by_hand = mha.w_o(by_hand.transpose(1, 2).reshape(2, 5, 32))
    for need_weights in (False, True):
        out, _ = mha(x, ctx=AttentionContext(need_weights=need_weights))
        assert (out - by_hand).abs().max() <= 1e-5
    scaled = MultiHeadAttention(32, 4).eval()
    scaled.load_state_dict(mha.state_dict())
    assert (scaled(x)[0] - by_hand).abs().max() > 1e-3


def test_attn_scale_none_changes_the_logits():
    src, tgt = tokens(2, 6), tokens(2, 5, seed=1)
    torch.manual_seed(0)
    paper = Transformer(tiny()).eval()
    torch.manual_seed(0)
    unscaled = Transformer(tiny(attn_scale="none")).eval()
    assert (paper(src, tgt) - unscaled(src, tgt)).abs().max() > 1e-3
    with unscaled.record_attention():  # the reference path leaves out the scale as well
        ref = unscaled(src, tgt)
    assert (ref - unscaled(src, tgt)).abs().max() <= 1e-5


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "reference"])
def test_unmasked_source_pads_leak_into_the_target_logits(need_weights):
    torch.manual_seed(0)
    model = Transformer(tiny(mask_source_padding=False)).eval()
    src, tgt = tokens(2, 6), tokens(2, 5, seed=1)
    padded = torch.cat([src, torch.full((2, 3), PAD)], dim=1)
    if need_weights:
        with model.record_attention():
            a, b = model(src, tgt), model(padded, tgt)
            w = model.attention_weights()["decoder.layers.0.cross_attn"]
        assert w[:, :, :, 6:].gt(0).all()  # queries attend to the pads
    else:
        a, b = model(src, tgt), model(padded, tgt)
    assert (a - b).abs().max() > 1e-4  # the leak the default prevents


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
@pytest.mark.parametrize("mask_future", [True, False])
def test_without_the_causal_mask_a_later_target_token_changes_earlier_logits(arch, mask_future):
    """model.mask_future=False (the bug control): position 1's logits depend on the token at
    position 4, which the paper's decoder hides. With the mask they are exactly unchanged."""
    torch.manual_seed(0)
    model = Transformer(tiny(arch=arch, mask_future=mask_future)).eval()
    src, tgt = tokens(2, 6), tokens(2, 6, seed=1)
    later = tgt.clone()
    later[:, 4] = (later[:, 4] + 1 - 4) % (40 - 4) + 4  # another real token at position 4
    run = (lambda t: model(src, t)) if arch == "encoder_decoder" else model
    change = (run(tgt)[:, :4] - run(later)[:, :4]).abs().max()
    if mask_future:
        assert change == 0
    else:
        assert change > 1e-4


def test_without_the_causal_mask_target_pads_stay_masked():
    """The control leaks the future only: appending pads to a target changes no logit of its
    real positions, on either attention path."""
    torch.manual_seed(0)
    model = Transformer(tiny(mask_future=False)).eval()
    src, tgt = tokens(2, 6), tokens(2, 5, seed=1)
    padded = torch.cat([tgt, torch.full((2, 3), PAD)], dim=1)
    assert (model(src, tgt) - model(src, padded)[:, :5]).abs().max() <= 1e-5
    with model.record_attention():
        w = (model(src, padded), model.attention_weights()["decoder.layers.0.self_attn"])[1]
    assert w[:, :, :5, 5:].eq(0).all() and w[:, :, :5, 4].gt(0).all()
