"""T5's relative position bias (model.pos_encoding=t5_bias, Raffel et al. 2020), the sixth
encoding: its buckets and bias against a direct computation of T5's rule, bidirectional in the
encoder and causal in the decoder, one table per stack shared by its layers; its own options
(model.pos.num_buckets, model.pos.max_distance) checked by it in one line and kept by a
checkpoint loaded with weights_only. The generic model tests (masks, leaks, the KV cache,
decoding) run it as every encoding of attnlab.model.positions."""

from __future__ import annotations

import io
import math

import pytest
import torch

from attnlab.model import Transformer, TransformerConfig
from attnlab.model.positions.t5_bias import T5Bias, relative_position_bucket


def _bucket(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5's rule for one relative position (key - query), written out in plain Python."""
    offset = 0
    if bidirectional:
        num_buckets //= 2
        offset = num_buckets if rel > 0 else 0
        n = abs(rel)
    else:
        n = max(-rel, 0)
    exact = num_buckets // 2
    if n < exact:
        return offset + n
    large = exact + int(
        math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    )
    return offset + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 20)])
def test_buckets_are_t5s_rule(bidirectional, num_buckets, max_distance):
    rel = torch.arange(-300, 301)
    got = relative_position_bucket(rel, bidirectional, num_buckets, max_distance).tolist()
    want = [_bucket(r, bidirectional, num_buckets, max_distance) for r in rel.tolist()]
    assert got == want
    assert min(got) >= 0 and max(got) == num_buckets - 1  # every distance has a bucket


@pytest.mark.parametrize("causal", [False, True])
def test_the_bias_is_the_table_at_each_pairs_bucket(causal):
    """(1, H, T, S) for the last T of S positions (a KV cache's step): b[h, bucket(j - i)]."""
    torch.manual_seed(0)
    enc = T5Bias(n_heads=3, num_buckets=8, max_distance=16)
    enc.causal = causal
    t, s = 4, 11
    bias = enc(t, s)
    assert bias.shape == (1, 3, t, s)
    table = enc.bias.weight  # (buckets, H)
    for i in range(t):
        q = s - t + i
        for j in range(s):
            b = _bucket(j - q, not causal, 8, 16)
            assert torch.equal(bias[0, :, i, j], table[b])


def _model(**pos):
    return Transformer(
        TransformerConfig(
            vocab_size=20,
            d_model=32,
            n_heads=4,
            d_ff=64,
            n_encoder_layers=2,
            n_decoder_layers=2,
            pos_encoding="t5_bias",
            pos=pos,
        )  # fmt: skip
    )


def test_one_table_per_stack_the_encoder_bidirectional_the_decoder_causal():
    model = _model(num_buckets=8, max_distance=16)
    tables = [n for n, _ in model.named_parameters() if ".positions." in n]
    assert tables == ["encoder.positions.bias.weight", "decoder.positions.bias.weight"]
    assert not model.encoder.positions.causal and model.decoder.positions.causal
    assert model.encoder.positions.bias.weight.shape == (8, 4)


@pytest.mark.parametrize(
    "pos, message",
    [
        ({"num_buckets": 0}, "pos.num_buckets=0 is not valid; expected an integer >= 4"),
        ({"num_buckets": 8, "max_distance": 4},
         "pos.max_distance=4 is not valid; expected an integer >= 5"),
        ({"num_bucket": 8}, "pos.num_bucket is not an option of pos_encoding='t5_bias' (did you "
         "mean pos.num_buckets?); its options: num_buckets, max_distance"),
    ],
)  # fmt: skip
def test_its_options_are_checked_by_the_encoding_in_one_line(pos, message):
    with pytest.raises(ValueError) as err:
        _model(**pos)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_encoding_without_options_refuses_one():
    with pytest.raises(
        ValueError, match=r"pos.num_buckets is not an option of pos_encoding='rope'"
    ):
        Transformer(TransformerConfig(vocab_size=20, d_model=32, n_heads=4, d_ff=64,
                                      pos_encoding="rope", pos={"num_buckets": 8}))  # fmt: skip


def test_a_checkpoint_keeps_the_options_under_weights_only():
    """The config (its options a plain dict) and the weights through torch.load(weights_only):
    the same model, the same outputs."""
    torch.manual_seed(0)
    model = _model(num_buckets=16, max_distance=40).eval()
    buffer = io.BytesIO()
    torch.save({"config": model.config.to_dict(), "state_dict": model.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    again = Transformer(TransformerConfig(**saved["config"])).eval()
    again.load_state_dict(saved["state_dict"])
    assert again.config.pos == {"num_buckets": 16, "max_distance": 40}
    src, tgt = torch.randint(1, 20, (2, 7)), torch.randint(1, 20, (2, 5))
    assert torch.equal(model(src, tgt), again(src, tgt))
