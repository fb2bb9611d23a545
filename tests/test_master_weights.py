"""Float32 master weights under trainer.precision=bf16-true (attnlab.training.master_weights):
updates below bf16's resolution accumulate instead of vanishing, the state dict restores the
float32 copies, and a bf16-true run resumed from a checkpoint equals the uninterrupted run."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from attnlab.pipeline.train import train
from attnlab.training.master_weights import MasterWeights

ADAM = {"_target_": "torch.optim.Adam", "betas": [0.9, 0.98], "eps": 1e-9}


def _adam(groups):
    from attnlab.training.optimizer import optimizer_from_config

    return optimizer_from_config(groups, ADAM)


def _steps(optimizer, param: nn.Parameter, n: int, lr: float = 1e-4) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
    for _ in range(n):
        optimizer.zero_grad()
        param.grad = torch.ones_like(param)  # Adam's update is then lr a step
        optimizer.step()


def test_small_updates_accumulate_in_the_float32_copy_and_vanish_in_bf16():
    """50 Adam steps of 1e-4 on a bf16 weight of 1.0 (bf16's spacing there: 2^-8 below,
    2^-7 above): plain bf16 Adam rounds every update away; with master weights the float32
    copy moves by 50 x 1e-4 and the bf16 weight is its rounding."""
    plain = nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    _steps(_adam([{"params": [plain]}]), plain, 50)
    assert torch.equal(plain.detach(), torch.ones(4, dtype=torch.bfloat16))

    kept = nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    optimizer = MasterWeights([{"params": [kept]}], _adam)
    _steps(optimizer, kept, 50)
    (master,) = optimizer.masters
    assert master.dtype == torch.float32
    torch.testing.assert_close(master.detach(), torch.full((4,), 1 - 50e-4), rtol=0, atol=1e-6)
    assert torch.equal(kept.detach(), master.detach().to(torch.bfloat16))
    assert float(kept.detach()[0]) == pytest.approx(0.99609375)  # 1 - 2^-8: moved


def test_the_state_dict_restores_the_float32_copies_and_the_moments():
    first = nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    optimizer = MasterWeights([{"params": [first]}], _adam)
    _steps(optimizer, first, 7)
    saved = optimizer.state_dict()

    second = nn.Parameter(first.detach().clone())  # what a checkpoint's bf16 weights give
    restored = MasterWeights([{"params": [second]}], _adam)
    restored.load_state_dict(saved)
    assert torch.equal(restored.masters[0], optimizer.masters[0])  # not the bf16 rounding
    _steps(optimizer, first, 3)
    _steps(restored, second, 3)
    assert torch.equal(restored.masters[0], optimizer.masters[0])
    assert torch.equal(second.detach(), first.detach())


def test_a_found_inf_reaches_the_inner_fused_step():
    """The deferred divergence check (training/gradients.py) sets found_inf on the optimizer
    Lightning holds: through MasterWeights the update is skipped too."""
    param = nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    optimizer = MasterWeights([{"params": [param]}], _adam)
    optimizer.found_inf = torch.tensor(1.0)
    _steps(optimizer, param, 3, lr=0.1)
    assert torch.equal(optimizer.masters[0].detach(), torch.ones(3))
    optimizer.found_inf = torch.tensor(0.0)
    _steps(optimizer, param, 1, lr=0.1)
    assert float(optimizer.masters[0].detach()[0]) == pytest.approx(0.9)


def test_a_plain_optimizer_state_loads_with_the_copies_from_the_weights():
    """A checkpoint saved without master weights (another precision, or before them)."""
    plain = nn.Parameter(torch.ones(3))
    adam = _adam([{"params": [plain]}])
    _steps(adam, plain, 2)
    param = nn.Parameter(plain.detach().to(torch.bfloat16))
    optimizer = MasterWeights([{"params": [param]}], _adam)
    optimizer.load_state_dict(adam.state_dict())
    assert float(optimizer.state[optimizer.masters[0]]["step"]) == 2
    assert torch.equal(optimizer.masters[0].detach(), param.detach().float())


def _run(compose, run_dir, *overrides: str) -> dict:
    """debug=tiny in bf16-true, a checkpoint every 4 steps, and a schedule that still moves at
    step 4 (warmup to step 6, cosine to 0 at 8) whatever trainer.max_steps is."""
    ovs = ["debug=tiny", "logger=none", f"paths.run_dir={run_dir}", "trainer.precision=bf16-true",
           "checkpoint.every_n_steps=4", "trainer.val_check_interval=8", "scheduler=cosine",
           "scheduler.warmup_steps=6", "scheduler.max_steps=8", *overrides]  # fmt: skip
    return train(compose(ovs), ovs)


@pytest.mark.slow
def test_a_bf16_true_run_keeps_float32_masters_and_resumes_exactly(compose, tmp_path):
    whole = _run(compose, tmp_path / "whole", "trainer.max_steps=8")
    assert whole["status"] == "completed"
    ckpt = torch.load(tmp_path / "whole/checkpoints/step=4.ckpt", weights_only=True)
    (state,) = ckpt["optimizer_states"]
    assert {t.dtype for t in state["masters"]} == {torch.float32}
    assert {t.dtype for t in ckpt["state_dict"].values() if t.is_floating_point()} == {
        torch.bfloat16
    }
    half = _run(compose, tmp_path / "half", "trainer.max_steps=4")
    assert half["status"] == "completed"
    resumed = _run(
        compose, tmp_path / "half", "trainer.max_steps=8",
        f"resume={tmp_path / 'half/checkpoints/last.ckpt'}",
    )  # fmt: skip
    for key in ("train/loss", "train/lr", "val/loss", "test/loss", "test/token_acc"):
        assert resumed["metrics"][key] == whole["metrics"][key], key
    assert json.loads((tmp_path / "half/results.json").read_text())["steps"] == 8
