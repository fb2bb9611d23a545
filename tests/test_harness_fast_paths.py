"""The harness's fast paths change results only within numerical tolerance: model.compile
(torch.compile inside the LightningModule; checkpoints, resume and averaging unchanged),
bf16 autocast, skipping padding (model.skip_padding), and fp16 refused on a CPU in one line."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.pipeline.train import train
from build_utils import dry_build


def _run(compose, run_dir, *overrides: str) -> dict:
    ovs = ["debug=tiny", "logger=none", f"paths.run_dir={run_dir}", *overrides]
    return train(compose(ovs), ovs)


@pytest.fixture
def eager_backend(monkeypatch):
    """torch.compile with the "eager" backend: dynamo captures the graphs, no code generation
    (seconds, not a minute, on a CPU); the real backend is tested by the slow test below."""
    original = torch.nn.Module.compile

    def compile_eagerly(self, *args, **kwargs):
        return original(self, *args, **{**kwargs, "backend": "eager"})

    monkeypatch.setattr(torch.nn.Module, "compile", compile_eagerly)


@pytest.mark.slow
def test_compiled_model_checkpoints_resume_and_average_like_an_eager_one(
    compose, tmp_path, eager_backend
):
    from attnlab.evaluation.checkpoints import load_model

    run_dir = tmp_path / "run"
    every = ["checkpoint.every_n_steps=2", "checkpoint.keep_last=3"]
    first = _run(compose, run_dir, "model.compile=true", *every)
    assert first["status"] == "completed" and first["steps"] == 4
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    keys = list(ckpt["state_dict"])
    assert keys and not [k for k in keys if "_orig_mod" in k]
    assert "compile" not in ckpt["hyper_parameters"]["model"]  # a TransformerConfig only

    last = run_dir / "checkpoints" / "last.ckpt"
    more = ["trainer.max_steps=6", f"resume={last}"]
    resumed = _run(compose, run_dir, "model.compile=true", *every, *more)
    assert resumed["status"] == "completed" and resumed["steps"] == 6

    periodic = sorted(str(p) for p in (run_dir / "checkpoints").glob("step=*.ckpt"))
    assert len(periodic) == 3
    model, hparams, found = load_model(periodic)  # what attnlab-eval does: averaged
    assert found == run_dir and not hasattr(model, "_orig_mod")
    newest = torch.load(periodic[-1], weights_only=True)["state_dict"]
    assert not torch.equal(model.generator.weight, newest["model.generator.weight"])


@pytest.mark.slow
def test_the_compile_mode_reaches_torch_compile(compose, tmp_path, monkeypatch):
    """model.compile_mode is torch.compile's `mode` (reduce-overhead: CUDA graphs on a GPU);
    unset, torch's default; without model.compile nothing is compiled. The module compiles its
    model when built, as attnlab-train builds it (a compiled run trains, resumes and averages:
    test_compiled_model_checkpoints_resume_and_average_like_an_eager_one)."""
    from attnlab.config.plain import plain_config
    from attnlab.pipeline.build import build

    original, modes = torch.nn.Module.compile, []

    def record(self, *args, **kwargs):
        modes.append(kwargs.get("mode"))
        return original(self, backend="eager")  # dynamo only: seconds, not a minute

    monkeypatch.setattr(torch.nn.Module, "compile", record)
    for name, overrides in (
        ("a", ["model.compile=true", "model.compile_mode=reduce-overhead"]),
        ("b", ["model.compile=true"]),
        ("c", ["model.compile_mode=max-autotune"]),  # not compiled: ignored
    ):
        ovs = ["debug=tiny", "logger=none", f"paths.run_dir={tmp_path / name}", *overrides]
        module = build(plain_config(compose(ovs)), tmp_path / name).module
        assert (module.model._compiled_call_impl is not None) == (name != "c")
    assert modes == ["reduce-overhead", None]


@pytest.mark.slow
@pytest.mark.long
def test_compiled_training_matches_eager_within_tolerance(compose, tmp_path):
    """torch.compile's generated kernels (inductor) against eager: the same losses after 4
    steps up to float reordering. (Long: two compiles; the compiled run of
    test_compiled_model_checkpoints_resume_and_average_like_an_eager_one stays in the suite.)"""
    eager = _run(compose, tmp_path / "eager")
    compiled = _run(compose, tmp_path / "compiled", "model.compile=true")
    for key in ("train/loss", "val/loss", "test/loss"):
        assert compiled["metrics"][key] == pytest.approx(eager["metrics"][key], rel=1e-4), key


@pytest.mark.slow
def test_skipping_padding_trains_like_computing_every_position(compose, tmp_path):
    """The losses of training and evaluation take logits at the real targets only, and the
    layers skip the pads (debug=tiny's reversal batches are about half padding); without
    dropout (whose masks are drawn for other shapes) the run is that of model.skip_padding=false
    up to float rounding."""
    no_dropout = ["model.dropout=0.0"]
    skipped = _run(compose, tmp_path / "skip", *no_dropout)
    full = _run(compose, tmp_path / "full", *no_dropout, "model.skip_padding=false")
    for key in ("train/loss", "train/token_acc", "val/loss", "val/nll", "test/loss"):
        assert skipped["metrics"][key] == pytest.approx(full["metrics"][key], rel=1e-4), key


def test_the_loss_gets_logits_at_real_targets_unless_compiled(compose, tmp_path):
    from attnlab.config.plain import plain_config
    from attnlab.pipeline.build import build

    cfg = plain_config(compose(["debug=tiny", "logger=none", f"paths.run_dir={tmp_path}"]))
    built = build(cfg, tmp_path)
    datamodule, module = built.datamodule, built.module
    datamodule.setup("fit")
    batch = next(iter(datamodule.train_dataloader()))
    real = batch["tgt_out"] != module.pad_id
    assert not bool(real.all())  # the batch has pads to skip
    logits, targets = module.loss_logits_and_targets(batch)
    assert logits.shape == (int(real.sum()), module.model.config.vocab_size)
    assert torch.equal(targets, batch["tgt_out"][real])
    module.hparams.compile = True  # a compiled graph computes every position
    logits, targets = module.loss_logits_and_targets(batch)
    assert logits.shape[:2] == real.shape and targets is batch["tgt_out"]


def test_bf16_autocast_changes_loss_and_gradients_only_within_tolerance():
    """trainer.precision=bf16-mixed is autocast around the forward pass: the same model, batch
    and loss as 32-true up to bf16 rounding."""
    from attnlab.model import Transformer, TransformerConfig
    from attnlab.training.losses import label_smoothed_nll

    torch.manual_seed(0)
    cfg = dict(vocab_size=50, d_model=64, n_heads=4, d_ff=128, n_encoder_layers=2)
    model = Transformer(TransformerConfig(**cfg, n_decoder_layers=2, dropout=0.0))
    src, tgt = torch.randint(4, 50, (8, 12)), torch.randint(4, 50, (8, 11))
    results = {}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
            logits = model(src, tgt[:, :-1])
        loss = label_smoothed_nll(logits, tgt[:, 1:], 0.1, 0)[0]
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        results[name] = (loss.detach(), grads)
    (loss32, g32), (loss16, g16) = results["fp32"], results["bf16"]
    assert loss16.dtype == torch.float32  # the loss is computed in float32
    assert loss16 == pytest.approx(loss32.item(), rel=1e-3) and loss16 != loss32
    assert torch.nn.functional.cosine_similarity(g16, g32, dim=0) > 0.998


@pytest.mark.slow
@pytest.mark.parametrize("accelerator", ["cpu", "auto"])
def test_fp16_mixed_on_a_cpu_is_a_one_line_error(tmp_path, capsys, accelerator, monkeypatch):
    from attnlab.config.location import conf_dir
    from attnlab.pipeline.preflight import preflight

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = ["trainer.precision=16-mixed", f"trainer.accelerator={accelerator}"]
    with pytest.raises(SystemExit) as exit_info:
        preflight([*argv, f"paths.root={tmp_path}"], conf_dir())
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "attnlab-train: error: trainer.precision=16-mixed is not supported on a CPU"
    )
    assert not list(tmp_path.iterdir())  # nothing written


def test_fused_optimizer_with_fp16_is_a_config_error(compose):

    cfg = compose(["trainer=gpu", "trainer.precision=16-mixed", "optim.fused=true"])
    with pytest.raises(ValueError, match=r"^optim.fused=true does not work with trainer.precisio"):
        dry_build(cfg)
    json.dumps(str(cfg.optim))  # the config itself composed fine


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_on_a_gpu_trains_like_32_true(compose, tmp_path, precision):
    """On a GPU both mixed precisions train (16-mixed with its GradScaler and the non-fused
    optimizer) to the loss of 32-true within mixed-precision tolerance."""
    gpu = ["trainer=gpu", "trainer.max_steps=20", "trainer.val_check_interval=10"]
    full = _run(compose, tmp_path / "fp32", *gpu)
    mixed = _run(compose, tmp_path / precision, *gpu, f"trainer.precision={precision}")
    assert mixed["status"] == "completed"
    for key in ("train/loss", "val/loss"):
        assert mixed["metrics"][key] == pytest.approx(full["metrics"][key], rel=0.05), key


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_padding_batches_to_a_multiple_changes_only_their_shape(arch):
    """data.pad_to_multiple=8 (fewer shapes for a compiled model): the same pairs collated to
    lengths rounded up to 8 give the same loss and gradients as to their longest row, up to float
    rounding (the extra positions are pads, masked as keys and never a target)."""
    from attnlab.data.pairs import pair_collate
    from attnlab.model import Transformer, TransformerConfig
    from attnlab.training.losses import label_smoothed_nll

    torch.manual_seed(0)
    lengths = [(5, 7), (9, 3), (2, 11)]  # (source, target): no batch length a multiple of 8
    examples = [
        {"src": [*torch.randint(4, 40, (s,)).tolist(), 2], "src_text": "", "tgt_text": "",
         "tgt": torch.randint(4, 40, (t,)).tolist()}
        for s, t in lengths
    ]  # fmt: skip
    model = Transformer(TransformerConfig(
        vocab_size=41, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2,
        dropout=0.0, arch=arch, skip_padding=False))  # fmt: skip
    results = []
    for multiple in (1, 8):
        batch = pair_collate(arch, sep_id=40, multiple=multiple)(examples)
        if arch == "encoder_decoder":
            logits, targets = model(batch["src"], batch["tgt_in"]), batch["tgt_out"]
        else:
            logits, targets = model(batch["tokens"]), batch["targets"]
        shape = targets.shape
        model.zero_grad()
        loss = label_smoothed_nll(logits, targets, 0.1, 0)[0]
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((shape, loss.detach(), grads))
    (shape1, loss1, grads1), (shape8, loss8, grads8) = results
    assert shape8[1] % 8 == 0 and shape8[1] > shape1[1]
    assert loss8 == pytest.approx(loss1.item(), rel=1e-6)
    torch.testing.assert_close(grads8, grads1, rtol=1e-5, atol=1e-7)
