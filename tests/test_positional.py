"""Positional encodings against their defining formulas."""

import math

import pytest
import torch

from attnlab.model import (
    ALiBi,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    alibi_slopes,
    apply_rope,
    sinusoidal_encoding,
)


def test_sinusoidal_matches_section_3_5():
    d_model = 16
    pe = sinusoidal_encoding(50, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_rope_scores_depend_only_on_relative_offset():
    torch.manual_seed(0)
    rope = RotaryEmbedding(head_dim=8)
    q, k = torch.randn(8), torch.randn(8)

    def score(m, n):
        # place q at position m and k at position n, then take their dot product
        qm = apply_rope(q.view(1, 1, 1, 8), *rope(1, offset=m)).flatten()
        kn = apply_rope(k.view(1, 1, 1, 8), *rope(1, offset=n)).flatten()
        return (qm @ kn).item()

    assert score(3, 1) == pytest.approx(score(10, 8), abs=1e-4)
    assert score(0, 5) == pytest.approx(score(20, 25), abs=1e-4)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)
    # rotation keeps norms
    x = torch.randn(2, 3, 6, 8)
    assert torch.allclose(apply_rope(x, *rope(6, offset=4)).norm(dim=-1), x.norm(dim=-1), atol=1e-5)


def test_rope_tables_are_the_angles_of_their_positions():
    cos, sin = RotaryEmbedding(head_dim=4, base=100.0)(t=2, offset=3)
    assert cos.shape == sin.shape == (2, 2)
    for row, m in enumerate((3, 4)):
        for i in range(2):
            angle = m * 100.0 ** (-2 * i / 4)
            assert cos[row, i].item() == pytest.approx(math.cos(angle), abs=1e-6)
            assert sin[row, i].item() == pytest.approx(math.sin(angle), abs=1e-6)


@pytest.mark.parametrize(
    "n_heads, expected",
    [
        (8, [2 ** -(i + 1) for i in range(8)]),  # the paper: 1/2, 1/4, ..., 1/256
        (4, [2 ** (-2 * (i + 1)) for i in range(4)]),
        # not a power of two: 4 slopes of n=4, then every other of n=8 (1/2, 1/8)
        (6, [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]),
    ],
)
def test_alibi_slopes_match_press_et_al(n_heads, expected):
    assert alibi_slopes(n_heads).tolist() == pytest.approx(expected)


def test_alibi_bias_is_linear_in_distance():
    bias = ALiBi(2)(t=3, s=5)  # the last 3 of 5 positions
    assert bias.shape == (1, 2, 3, 5)
    slope0 = 2**-4
    # query at position 4 (last), key at 0: distance 4
    assert bias[0, 0, 2, 0].item() == pytest.approx(-4 * slope0)
    assert bias[0, 0, 2, 4].item() == 0.0


def test_learned_positions_refuse_sequences_longer_than_max_len():
    emb = LearnedPositionalEmbedding(d_model=4, max_len=6)
    assert emb(6).shape == (1, 6, 4)
    with pytest.raises(ValueError, match="max_len=6"):
        emb(3, offset=4)


def test_a_double_model_has_float64_exact_sinusoids():
    from attnlab.model import Transformer, TransformerConfig

    cfg = TransformerConfig(vocab_size=20, d_model=16, n_heads=2, d_ff=32, max_len=8)
    model = Transformer(cfg).double()
    exact = torch.tensor(
        [
            [
                math.sin(pos / 10000 ** (i / 16))
                if i % 2 == 0
                else math.cos(pos / 10000 ** ((i - 1) / 16))
                for i in range(16)
            ]
            for pos in range(20)
        ],
        dtype=torch.float64,
    )
    for t in (5, 20):  # within the table, and grown past max_len
        pe = model.encoder.positions(t)[0]
        assert pe.dtype == torch.float64
        assert (pe - exact[:t]).abs().max() <= 1e-12


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_low_precision_model_runs_past_max_len(dtype):
    from attnlab.model import Transformer, TransformerConfig

    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=20,
        d_model=16,
        n_heads=2,
        d_ff=32,
        n_encoder_layers=1,
        n_decoder_layers=1,
        dropout=0.0,
        max_len=8,
    )
    model = Transformer(cfg).eval().to(dtype)
    src = torch.randint(4, 20, (2, 12))
    logits = model(src, src[:, :11])  # longer than the table of 8
    assert logits.dtype == dtype and torch.isfinite(logits).all()
    pe = model.encoder.positions.pe
    assert pe.dtype == dtype and torch.equal(
        pe, sinusoidal_encoding(len(pe), 16, torch.float64).to(dtype)
    )
