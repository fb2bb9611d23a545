"""Skipping padding (attnlab.model.packing): logits asked for at the real targets only
(`logits_at`) run the position-wise work on the real tokens, and change nothing but float
rounding: the same logits and gradients as the full forward at those positions."""

import pytest
import torch

from attnlab.model import Transformer
from attnlab.model.packing import Packing
from model_utils import PAD, tiny, tokens

ARCHS = ["encoder_decoder", "decoder_only"]


def padded_batch():
    """Source and target rows of different lengths, right-padded (one target row unpadded)."""
    src, tgt = tokens(4, 9), tokens(4, 7, seed=1)
    for row, (s, t) in enumerate([(9, 7), (3, 2), (5, 7), (1, 4)]):
        src[row, s:] = PAD
        tgt[row, t:] = PAD
    return src, tgt


def inputs(model, src, tgt):
    return (src, tgt) if model.encoder is not None else (tgt,)


def rows_seen_by_ffn(model, fn) -> list[int]:
    """The number of rows every FFN of the model receives while fn() runs."""
    seen, hooks = [], []
    for module in model.modules():
        if type(module).__name__ == "PositionwiseFeedForward":
            hooks.append(module.register_forward_pre_hook(lambda m, a: seen.append(a[0].shape)))
    try:
        fn()
    finally:
        for hook in hooks:
            hook.remove()
    return [shape[0] if len(shape) == 2 else shape[0] * shape[1] for shape in seen]


CONFIGS = {
    **{f"{pe}-{norm}": dict(pos_encoding=pe, norm_position=norm)
       for pe in ("sinusoidal", "learned", "rope", "alibi", "none") for norm in ("post", "pre")},
    "checkpointed": dict(activation_checkpointing=True),  # the packing passes through checkpoint
}  # fmt: skip


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("config", CONFIGS)
def test_logits_at_real_targets_equal_the_full_forward(arch, config):
    torch.manual_seed(0)
    fields = CONFIGS[config]
    model = Transformer(tiny(arch=arch, **fields))
    twin = Transformer(tiny(arch=arch, **fields, skip_padding=False))
    twin.load_state_dict(model.state_dict())
    src, tgt = padded_batch()
    real = tgt != PAD
    packed = model(*inputs(model, src, tgt), logits_at=real)  # (N, V)
    full = twin(*inputs(twin, src, tgt))  # (B, T, V)
    assert packed.shape == (int(real.sum()), full.size(-1))
    torch.testing.assert_close(packed, full[real], rtol=1e-5, atol=1e-5)
    packed.square().sum().backward()
    full[real].square().sum().backward()
    for (name, a), b in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_layers_see_only_the_real_tokens(arch):
    model = Transformer(tiny(arch=arch))
    src, tgt = padded_batch()
    real = tgt != PAD
    seen = rows_seen_by_ffn(model, lambda: model(*inputs(model, src, tgt), logits_at=real))
    n_src, n_tgt = int((src != PAD).sum()), int(real.sum())
    expected = ([n_src] * 2 if arch == "encoder_decoder" else []) + [n_tgt] * 2
    assert seen == expected  # 2 encoder layers, then 2 decoder layers
    full = rows_seen_by_ffn(model, lambda: model(*inputs(model, src, tgt)))
    assert full == ([src.numel()] * 2 if arch == "encoder_decoder" else []) + [tgt.numel()] * 2


def test_switched_off_the_layers_see_every_position():
    model = Transformer(tiny(skip_padding=False))
    src, tgt = padded_batch()
    seen = rows_seen_by_ffn(model, lambda: model(src, tgt, logits_at=tgt != PAD))
    assert seen == [src.numel()] * 2 + [tgt.numel()] * 2


def test_visible_source_pads_are_not_skipped():
    """mask_source_padding=False lets real tokens attend to source pads, so the encoder must
    compute them; the decoder's pads stay hidden by the causal mask and are skipped."""
    torch.manual_seed(0)
    model = Transformer(tiny(mask_source_padding=False))
    src, tgt = padded_batch()
    real = tgt != PAD
    seen = rows_seen_by_ffn(model, lambda: model(src, tgt, logits_at=real))
    assert seen == [src.numel()] * 2 + [int(real.sum())] * 2
    torch.testing.assert_close(model(src, tgt, logits_at=real), model(src, tgt)[real])


def test_a_position_asked_for_at_a_pad_is_computed():
    """logits_at may name a pad input position (not our data's batches, but a caller's): that
    row is computed as the full forward computes it, never left as zeros."""
    torch.manual_seed(0)
    model = Transformer(tiny(arch="decoder_only"))
    _, tgt = padded_batch()
    at = tgt != PAD
    at[1, 2] = True  # the first pad of row 1
    torch.testing.assert_close(model(tgt, logits_at=at), model(tgt)[at], rtol=1e-5, atol=1e-5)


def test_packing_round_trip_and_nothing_to_skip():
    real = torch.tensor([[True, True, False], [True, False, False]])
    packing = Packing.of(real)
    x = torch.arange(6.0).view(2, 3, 1)
    packed = packing.pack(x)
    assert packed.flatten().tolist() == [0.0, 1.0, 3.0]
    assert packing.unpack(packed).flatten().tolist() == [0.0, 1.0, 0.0, 3.0, 0.0, 0.0]
    assert Packing.of(torch.ones(2, 3, dtype=torch.bool)) is None  # no pad: nothing to skip
