"""loss.fused_output: the output projection applied inside the loss, chunk by chunk
(losses.fused_output_nll), computes the loss, nll, token count, correct count and gradients of
the plain path (the logits formed whole, then label_smoothed_nll) within float32 rounding, and
a run trained with it follows the same curve."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.pipeline.train import train
from attnlab.training import losses
from attnlab.training.metrics import token_accuracy
from build_utils import dry_build


@pytest.mark.parametrize("chunk_rows", [None, 7])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_fused_output_equals_the_loss_of_the_projected_logits(
    monkeypatch, label_smoothing, chunk_rows
):
    """(B, T, d) hidden states with pads, one chunk or chunks of 7 rows: values, the correct
    count and the gradients of hidden and the projection equal the plain path's (the incoming
    gradient scaled, as a loss weight or DDP's token normalisation scales it)."""
    if chunk_rows:
        monkeypatch.setattr(losses, "CHUNK_ELEMENTS", chunk_rows * 50)
    torch.manual_seed(0)
    hidden = torch.randn(4, 9, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    targets = torch.randint(1, 50, (4, 9))
    targets[0, 5:] = 0
    targets[2, 1] = 0
    logits = hidden @ weight.t()
    loss, nll, n = losses.label_smoothed_nll(logits, targets, label_smoothing, 0)
    correct, total = token_accuracy(logits, targets, 0)
    ref_grads = torch.autograd.grad(3.0 * loss, (hidden, weight))
    f_loss, f_nll, f_n, f_correct = losses.fused_output_nll(
        hidden, weight, targets, label_smoothing, 0
    )
    assert f_n == n == total == 31 and f_correct == correct
    torch.testing.assert_close(f_loss, loss)
    torch.testing.assert_close(f_nll, nll)
    assert not f_nll.requires_grad and not f_correct.requires_grad
    grads = torch.autograd.grad(3.0 * f_loss, (hidden, weight))
    for grad, ref in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref, rtol=1e-5, atol=1e-6)
    assert grads[0][0, 5:].abs().max() == 0  # nothing flows to a PAD row


def test_fused_output_under_bf16_autocast_is_within_bf16_rounding():
    torch.manual_seed(0)
    hidden = torch.randn(64, 32, requires_grad=True)
    weight = torch.randn(100, 32, requires_grad=True)
    targets = torch.randint(1, 100, (64,))
    loss, *_ = losses.label_smoothed_nll(hidden @ weight.t(), targets, 0.1, 0)
    ref = torch.autograd.grad(loss, (hidden, weight))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        f_loss, *_ = losses.fused_output_nll(hidden, weight, targets, 0.1, 0)
    grads = torch.autograd.grad(f_loss, (hidden, weight))
    assert f_loss.dtype == torch.float32 and grads[1].dtype == torch.float32
    assert f_loss.item() == pytest.approx(loss.item(), rel=2e-2)
    for grad, r in zip(grads, ref, strict=True):
        assert (grad - r).norm() / r.norm() < 2e-2


@pytest.mark.slow
def test_a_run_with_the_fused_output_trains_like_the_plain_one(compose, tmp_path, monkeypatch):
    """debug=tiny, the same seed, 30 steps (validated every 10th): the same training curve
    within float rounding (and the fused run's steps went through the fused loss)."""
    from attnlab.training import module

    calls = []
    monkeypatch.setattr(
        module, "fused_output_nll", lambda *a: calls.append(1) or losses.fused_output_nll(*a)
    )
    results = {}
    for fused in ("false", "true"):
        run_dir = tmp_path / fused
        ovs = ["debug=tiny", "logger=none", f"paths.run_dir={run_dir}", "trainer.max_steps=30",
               "trainer.val_check_interval=10", f"loss.fused_output={fused}"]  # fmt: skip
        assert train(compose(ovs), ovs)["status"] == "completed"
        results[fused] = json.loads((run_dir / "results.json").read_text())["metrics"]
    assert len(calls) == 30
    plain, fused = results["false"], results["true"]
    for key in ("train/loss", "train/nll", "train/token_acc", "val/nll_best", "test/loss"):
        assert fused[key] == pytest.approx(plain[key], rel=1e-3, abs=1e-4), key


@pytest.mark.slow
def test_the_fused_output_with_a_z_loss_is_one_line(compose):
    cfg = compose(["debug=tiny", "loss.fused_output=true", "loss.z_loss=1e-4"])
    with pytest.raises(ValueError, match=r"^loss.fused_output=true and loss.z_loss=0.0001 "):
        dry_build(cfg)
