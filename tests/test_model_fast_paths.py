"""The fused path (F.scaled_dot_product_attention with the least mask) against the reference path
(Eq. 1 written out, used when weights are recorded), and which masks the fused path gets."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.model import Transformer
from attnlab.model import stacks as stacks_module
from model_utils import PAD, tiny, tokens

ARCHS = ["encoder_decoder", "decoder_only"]


def batch(padded: bool):
    src, tgt = tokens(3, 7), tokens(3, 6, seed=1)
    if padded:
        src[1, 4:] = PAD
        tgt[2, 3:] = PAD
    return src, tgt


def run(model, src, tgt):
    return model(src, tgt) if model.encoder is not None else model(tgt)


def both_paths(model, fn):
    fused = fn()
    with model.record_attention():
        reference = fn()
    return fused, reference


CASES = {
    "no_padding": (dict(pos_encoding="sinusoidal"), False),
    "padding": (dict(pos_encoding="sinusoidal"), True),
    "alibi": (dict(pos_encoding="alibi"), True),
    "rope": (dict(pos_encoding="rope"), True),
    "unmasked_source_pads": (dict(mask_source_padding=False), True),
    "unscaled": (dict(attn_scale="none"), True),
}


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", CASES)
def test_fused_and_reference_paths_agree(arch, case):
    overrides, padded = CASES[case]
    torch.manual_seed(0)
    model = Transformer(tiny(arch=arch, **overrides)).eval()
    src, tgt = batch(padded)
    fused, reference = both_paths(model, lambda: run(model, src, tgt))
    assert (fused - reference).abs().max() <= 1e-5


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("pe", ["sinusoidal", "rope", "alibi"])
def test_fused_and_reference_paths_agree_with_a_cache(arch, pe):
    """Causal attention with a cache: a prefix of 3 (T == S), then a chunk of 2 new positions
    (T < S), then single steps (T == 1)."""
    torch.manual_seed(0)
    model = Transformer(tiny(arch=arch, pos_encoding=pe)).eval()
    src, tgt = batch(padded=True)
    memory, mask = model.encode(src) if arch == "encoder_decoder" else (None, None)

    def incremental():
        cache = model.new_cache()
        chunks = [tgt[:, :3], tgt[:, 3:5], tgt[:, 5:6]]
        return torch.cat([model.decode(c, memory, mask, cache) for c in chunks], dim=1)

    fused, reference = both_paths(model, incremental)
    assert (fused - reference).abs().max() <= 1e-5
    assert (fused - model.decode(tgt, memory, mask)).abs().max() <= 1e-5


@pytest.fixture
def sdpa_calls(monkeypatch):
    """Every call of F.scaled_dot_product_attention: (kind of mask, is_causal)."""
    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        kind = None if attn_mask is None else ("bool" if attn_mask.dtype == torch.bool else "bias")
        calls.append((kind, is_causal))
        return real(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kwargs
        )

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


def test_no_pads_means_no_mask_and_is_causal(sdpa_calls):
    model = Transformer(tiny()).eval()
    model(*batch(padded=False))
    # encoder self (2), then per decoder layer: self (causal), cross
    assert sdpa_calls == [(None, False)] * 2 + [(None, True), (None, False)] * 2


def test_source_pads_are_masked_and_target_pads_are_left_to_the_causal_mask(sdpa_calls):
    model = Transformer(tiny()).eval()
    model(*batch(padded=True))
    assert sdpa_calls == [("bool", False)] * 2 + [(None, True), ("bool", False)] * 2


def test_unmasked_source_pads_need_no_mask(sdpa_calls):
    model = Transformer(tiny(mask_source_padding=False)).eval()
    model(*batch(padded=True))
    assert sdpa_calls == [(None, False)] * 2 + [(None, True), (None, False)] * 2


def test_incremental_decoding_masks_only_what_it_must(sdpa_calls):
    model = Transformer(tiny(arch="decoder_only")).eval()
    cache = model.new_cache()
    prompt = tokens(2, 4)
    model.decode(prompt, cache=cache)  # T == S: is_causal
    model.decode(prompt[:, :2], cache=cache)  # 2 new queries, 6 keys: an explicit mask
    model.decode(prompt[:, :1], cache=cache)  # a single query sees every key: no mask
    assert sdpa_calls == [(None, True)] * 2 + [("bool", False)] * 2 + [(None, False)] * 2


def test_alibi_passes_its_bias(sdpa_calls):
    model = Transformer(tiny(pos_encoding="alibi")).eval()
    model(*batch(padded=False))
    assert sdpa_calls == [("bias", False)] * 2 + [("bias", False), (None, False)] * 2


def test_source_padding_is_checked_once_per_stack_not_per_layer(monkeypatch):
    checks = []
    real = stacks_module.source_key_mask
    monkeypatch.setattr(stacks_module, "source_key_mask", lambda *a: checks.append(1) or real(*a))
    model = Transformer(tiny(n_encoder_layers=3, n_decoder_layers=3)).eval()
    model(*batch(padded=True))
    assert len(checks) == 2  # the encoder's forward and the decoder's
