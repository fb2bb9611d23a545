"""Our attention against torch.nn.MultiheadAttention, and the two paths against each other."""

import pytest
import torch

from attnlab.model import AttentionContext, MultiHeadAttention
from attnlab.model.attention import causal_allowed

B, T, S, D, H = 3, 5, 7, 32, 4


def copy_from_torch(ref: torch.nn.MultiheadAttention) -> MultiHeadAttention:
    ours = MultiHeadAttention(D, H, dropout=0.0, bias=True)
    w_q, w_k, w_v = ref.in_proj_weight.chunk(3)
    b_q, b_k, b_v = ref.in_proj_bias.chunk(3)
    with torch.no_grad():
        for lin, w, b in ((ours.w_q, w_q, b_q), (ours.w_k, w_k, b_k), (ours.w_v, w_v, b_v)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        ours.w_o.weight.copy_(ref.out_proj.weight)
        ours.w_o.bias.copy_(ref.out_proj.bias)
    return ours


@pytest.fixture
def pair():
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(D, H, batch_first=True).eval()
    return ref, copy_from_torch(ref).eval()


def padding_mask(lengths, s):
    return torch.arange(s)[None, :] >= torch.tensor(lengths)[:, None]  # True at pads


@pytest.mark.parametrize("need_weights", [True, False], ids=["reference", "fast"])
def test_parity_with_padding_mask(pair, need_weights):
    ref, ours = pair
    q, kv = torch.randn(B, T, D), torch.randn(B, S, D)
    kpm = padding_mask([7, 4, 2], S)
    expected, expected_w = ref(q, kv, kv, key_padding_mask=kpm, average_attn_weights=False)
    out, w = ours(q, kv, AttentionContext(key_padding_mask=kpm, need_weights=need_weights))
    assert (out - expected).abs().max() <= 1e-5
    if need_weights:
        assert w.shape == (B, H, T, S)
        assert (w - expected_w).abs().max() <= 1e-6
        assert w[1, :, :, 4:].abs().max() == 0  # no weight on pads
    else:
        assert w is None


@pytest.mark.parametrize("need_weights", [True, False], ids=["reference", "fast"])
def test_parity_with_causal_and_padding_mask(pair, need_weights):
    ref, ours = pair
    x = torch.randn(B, T, D)
    kpm = padding_mask([5, 3, 5], T)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # True = not allowed, as torch
    expected, expected_w = ref(
        x, x, x, key_padding_mask=kpm, attn_mask=causal, average_attn_weights=False
    )
    out, w = ours(
        x, ctx=AttentionContext(key_padding_mask=kpm, causal=True, need_weights=need_weights)
    )
    assert (out - expected).abs().max() <= 1e-5
    if need_weights:
        assert (w - expected_w).abs().max() <= 1e-6
        assert torch.triu(w[0, 0], diagonal=1).abs().max() == 0  # nothing from the future


def test_reference_and_fast_paths_agree_with_dropout_off():
    torch.manual_seed(1)
    mha = MultiHeadAttention(D, H, d_k=12).eval()  # decoupled d_k: H * d_k != d_model
    x = torch.randn(B, T, D)
    fast, _ = mha(x, ctx=AttentionContext(causal=True))
    ref, w = mha(x, ctx=AttentionContext(causal=True, need_weights=True))
    assert (fast - ref).abs().max() <= 1e-5
    assert w.shape == (B, H, T, T)
    assert torch.allclose(w.sum(-1), torch.ones(B, H, T), atol=1e-6)


def test_causal_mask_aligns_to_the_last_queries():
    # 2 new queries against 4 keys: query 0 is position 2, query 1 is position 3
    allowed = causal_allowed(2, 4)
    assert allowed.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_future_keys_do_not_change_earlier_outputs():
    torch.manual_seed(2)
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(1, T, D)
    y = x.clone()
    y[:, 3:] = torch.randn(1, T - 3, D)
    a, _ = mha(x, ctx=AttentionContext(causal=True))
    b, _ = mha(y, ctx=AttentionContext(causal=True))
    assert torch.allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert not torch.allclose(a[:, 3:], b[:, 3:])
