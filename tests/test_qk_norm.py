"""model.qk_norm, a switch added by one field of TransformerConfig and the attention code that
uses it (issue 22): from the command line to the layer, and what it does there."""

import subprocess
import sys

import pytest
import torch

from attnlab.model import AttentionContext, MultiHeadAttention, Transformer
from conftest import model_config

D, H = 32, 4


def test_the_override_reaches_every_attention_layer(compose):
    cfg = compose(["model=small", "model.qk_norm=true"])
    model = Transformer(model_config(cfg.model, vocab_size=30, pad_id=0))
    layers = [m for _, m in model.attention_modules()]
    assert len(layers) == 6  # 2 encoder self, 2 decoder self, 2 cross
    assert all(isinstance(m.q_norm, torch.nn.LayerNorm) for m in layers)
    assert all(isinstance(m.k_norm, torch.nn.LayerNorm) for m in layers)


@pytest.mark.slow
def test_off_by_default_and_parameter_free_then(compose):
    model = Transformer(model_config(compose(["model=small"]).model, 30, 0))
    assert not any("q_norm" in name or "k_norm" in name for name in model.state_dict())


@pytest.mark.parametrize("memory", [False, True], ids=["self", "cross"])
def test_normalized_queries_and_keys_ignore_the_scale_of_their_projections(memory):
    torch.manual_seed(0)
    x, mem = torch.randn(2, 5, D), (torch.randn(2, 7, D) if memory else None)
    for qk_norm in (True, False):
        mha = MultiHeadAttention(D, H, qk_norm=qk_norm).eval()
        before, _ = mha(x, mem, AttentionContext())
        with torch.no_grad():
            for lin in (mha.w_q, mha.w_k):
                lin.weight.mul_(100.0)
                lin.bias.mul_(100.0)
        after, _ = mha(x, mem, AttentionContext())
        moved = (after - before).abs().max().item()
        assert (moved < 1e-4) if qk_norm else (moved > 1e-2), (qk_norm, moved)


@pytest.mark.slow
def test_a_bad_value_is_one_line_naming_the_key(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "attnlab.cli.train", "model.qk_norm=maybe"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("attnlab-train: error: model.qk_norm") and "'maybe'" in line, line
    assert not (tmp_path / "outputs").exists()
