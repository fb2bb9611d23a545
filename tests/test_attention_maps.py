"""Attention maps: the callback (fixed validation examples every N steps and at the end, PNGs
and attention.npz in the run directory, W&B images) and attnlab-attention (one input). On the
saved arrays a causal map is exactly zero above the diagonal and padding gets zero weight."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attnlab.cli.attention import main as attention_main
from attnlab.data.vocab import PAD_ID
from attnlab.pipeline.train import train
from conftest import wandb_offline_bytes

ENC_DEC = (
    "encoder.layers.0.self_attn",
    "decoder.layers.0.self_attn",
    "decoder.layers.0.cross_attn",
)


def _train(compose, tiny_run, run_dir, *overrides):
    ovs = [*tiny_run, "data=copy", f"paths.run_dir={run_dir}", *overrides]
    return train(compose(ovs), ovs)


def _assert_causal(w: np.ndarray) -> None:
    """(..., T, T): exactly zero above the diagonal, rows summing to one."""
    assert np.all(np.triu(w, k=1) == 0.0)
    assert np.allclose(w.sum(-1), 1.0, atol=1e-5)


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """A tiny copy run (4 steps) with the callback on (every 3 steps: at step 3, and at the end,
    step 4; two examples) and W&B offline; returns its directory."""
    import os

    from attnlab.config.compose import compose_config
    from conftest import CONF_DIR, TINY

    root = tmp_path_factory.mktemp("attention")
    run_dir = root / "run"
    ovs = [*TINY, "data=copy", "logger=wandb", f"paths.run_dir={run_dir}"]
    ovs += ["callbacks.attention_maps.every_n_steps=3", "callbacks.attention_maps.n_examples=2"]
    before = {n: v for n, v in os.environ.items() if n.startswith("WANDB_")}
    os.environ.update(WANDB_MODE="offline", WANDB_DIR=str(root))
    try:
        train(compose_config(CONF_DIR, ovs), ovs)
    finally:  # W&B's variables as they were (conftest: each test starts without its service)
        for name in [n for n in os.environ if n.startswith("WANDB_")]:
            del os.environ[name]
        os.environ.update(before)
    return run_dir


@pytest.mark.slow
def test_callback_renders_fixed_examples_every_n_steps_and_pads_get_no_weight(copy_run):
    import torch

    steps = sorted(p.name for p in (copy_run / "attention").glob("step=*"))
    assert steps == ["step=3", "step=4"]  # every 3rd step, and at the end of training
    arrays = np.load(copy_run / "attention" / "step=4" / "attention.npz")
    assert set(arrays.files) == set(ENC_DEC)
    enc, cross = arrays[ENC_DEC[0]], arrays[ENC_DEC[2]]
    b, h, s, _ = enc.shape
    assert b == 2 and h == 2
    # The same two validation examples at every render: source pads are the all-zero columns.
    from hydra.utils import instantiate

    from attnlab.config.compose import compose_config
    from attnlab.config.plain import to_plain
    from conftest import CONF_DIR, TINY

    dm = instantiate(to_plain(compose_config(CONF_DIR, [*TINY, "data=copy"]).data))
    dm.setup()
    src = next(iter(dm.val_dataloader()))["src"][:2]
    pads = (src == PAD_ID).numpy()
    assert pads.any() and src.size(1) == s  # some examples are padded
    step3 = np.load(copy_run / "attention" / "step=3" / "attention.npz")[ENC_DEC[0]]
    assert np.array_equal(step3 == 0.0, enc == 0.0)  # the same examples: the same pads
    for w in (enc, cross):
        for i in range(2):  # every query of every head: zero weight on the pad keys
            assert np.all(w[i][:, :, pads[i]] == 0.0) and np.all(w[i][:, :, ~pads[i]] > 0)
    assert torch.isfinite(torch.from_numpy(enc)).all()
    _assert_causal(arrays[ENC_DEC[1]])
    for step, example, name in itertools.product((3, 4), (0, 1), ENC_DEC):
        png = copy_run / "attention" / f"step={step}" / f"example{example}" / f"{name}.png"
        assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_attention_command_saves_one_array_per_module_and_its_maps(copy_run, tmp_path, capsys):
    ckpt = copy_run / "checkpoints" / "last.ckpt"
    assert (
        attention_main([str(ckpt), "5 9 2 7", "--target", "5 9 2 7", "--out", str(tmp_path)]) == 0
    )
    arrays = np.load(tmp_path / "attention.npz")
    assert set(arrays.files) == set(ENC_DEC)
    assert arrays[ENC_DEC[0]].shape == (2, 5, 5)  # (H, S, S): the four source symbols + [EOS]
    assert arrays[ENC_DEC[2]].shape == (2, 5, 5)  # (H, T, S): [BOS] + the four target symbols
    _assert_causal(arrays[ENC_DEC[1]])
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(f"{n}.png" for n in ENC_DEC)
    # without --target: the model's own greedy output, under <run_dir>/attention/<the input>;
    # a second input gets a folder of its own
    # (the second given as ckpt=<file>: attnlab-eval's spelling is taken too)
    assert attention_main([str(ckpt), "1 2 3"]) == 0
    assert attention_main([f"ckpt={ckpt}", "4 5"]) == 0
    first, second = sorted((copy_run / "attention").glob("input-*"), key=lambda p: p.name)
    assert first.name.startswith("input-1_2_3-") and second.name.startswith("input-4_5-")
    t = np.load(first / "attention.npz")[ENC_DEC[1]].shape[1]
    assert 1 <= t <= 101
    assert np.load(second / "attention.npz")[ENC_DEC[0]].shape[1] == 3  # 4 5 [EOS]
    capsys.readouterr()
    assert attention_main([str(ckpt), "5 9 16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "attnlab-attention: error: source='5 9 16' is not valid; expected space-separated "
        'symbols 0..15 (e.g. "5 9 2 7")'
    )
    assert attention_main([str(tmp_path / "missing.ckpt"), "1 2"]) == 2
    # a bad file's example names no ckpt= it does not take
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint")
    capsys.readouterr()
    assert attention_main([str(tmp_path / "junk.ckpt"), "1 2"]) == 2
    assert "ckpt=" not in capsys.readouterr().err


@pytest.mark.slow
def test_source_pads_get_weight_only_when_their_mask_is_off(
    copy_run, compose, tiny_run, tmp_path, capsys
):
    """--pad N: the padded source of a batch; a model that masks source padding puts exactly 0
    on the pads (printed and in the arrays), one trained with mask_source_padding=false does not."""
    masked = copy_run / "checkpoints" / "last.ckpt"
    run_dir = tmp_path / "unmasked"
    _train(compose, tiny_run, run_dir, "model.mask_source_padding=false", "logger=none")
    unmasked = run_dir / "checkpoints" / "last.ckpt"
    pad_mass = {}
    for name, ckpt in (("masked", masked), ("unmasked", unmasked)):
        out = tmp_path / name
        capsys.readouterr()
        argv = [str(ckpt), "5 9 2 7", "--target", "5 9 2 7", "--pad", "3", "--out", str(out)]
        assert attention_main(argv) == 0
        printed = capsys.readouterr().out
        assert "weight on the 3 source pads" in printed
        arrays = np.load(out / "attention.npz")
        assert arrays[ENC_DEC[0]].shape == (2, 8, 8)  # 4 symbols, [EOS], 3 pads
        pad_mass[name] = [arrays[n][:, :, 5:].sum(-1) for n in (ENC_DEC[0], ENC_DEC[2])]
        if name == "masked":
            assert "decoder.layers.0.cross_attn: mean 0, max 0" in printed
    assert all(np.all(m == 0.0) for m in pad_mass["masked"])
    assert all(np.all(m > 0.01) for m in pad_mass["unmasked"])  # every query leaks onto pads
    capsys.readouterr()
    assert attention_main([str(masked), "5 9", "--pad", "-1"]) == 2
    assert "--pad -1 is not valid" in capsys.readouterr().err


@pytest.mark.slow
def test_decoder_only_maps_are_causal(compose, tiny_run, tmp_path):
    run_dir = tmp_path / "lm"
    _train(compose, tiny_run, run_dir, "model=lm_small", "model.n_decoder_layers=1", "logger=none")
    out = tmp_path / "maps"
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    assert attention_main([str(ckpt), "3 1 4", "--target", "3 1 4", "--out", str(out)]) == 0
    arrays = np.load(out / "attention.npz")
    assert arrays.files == ["decoder.layers.0.self_attn"]
    w = arrays["decoder.layers.0.self_attn"]
    assert w.shape == (2, 9, 9)  # [BOS] 3 1 4 [SEP] 3 1 4 [EOS]
    _assert_causal(w)


@pytest.mark.slow
def test_callback_logs_wandb_images(copy_run):
    """The callback's PNGs are W&B images of the run (copy_run logs to W&B offline)."""
    needle = b"attention/decoder.layers.0.cross_attn"
    assert needle in wandb_offline_bytes(copy_run, needle)


@pytest.mark.slow
def test_attention_command_logs_into_the_runs_wandb_run(copy_run, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    ckpt = copy_run / "checkpoints" / "last.ckpt"
    argv = [str(ckpt), "1 2 3", "--target", "1 2 3", "--out", str(tmp_path), "--wandb"]
    assert attention_main(argv) == 0
    needle = b"attention_input/decoder.layers.0.cross_attn"
    assert needle in wandb_offline_bytes(copy_run, needle)
