"""A run shorter than trainer.val_check_interval is validated at its end (ValidateAtEnd), so it
has val/* metrics, a best checkpoint chosen on val/nll, and attnlab-compare draws its curve."""

from __future__ import annotations

import csv

import pytest

from attnlab.cli import compare
from attnlab.pipeline.train import train


@pytest.mark.slow
def test_a_run_shorter_than_the_validation_interval_is_validated_once_at_its_end(
    compose, tiny_run, tmp_path, capsys
):
    root = tmp_path / "sweep"
    for seed in (1, 2):
        run_dir = root / f"s{seed}"
        ovs = [*tiny_run, "logger=none", f"paths.run_dir={run_dir}", f"seed={seed}"]
        ovs += ["trainer.max_steps=3", "trainer.val_check_interval=250"]
        results = train(compose(ovs), ovs)
        metrics = results["metrics"]
        assert results["status"] == "completed" and results["steps"] == 3
        assert metrics["val/nll_best"] == metrics["val/nll"] > 0
        with open(run_dir / "metrics.csv") as f:
            val_rows = [r for r in csv.DictReader(f) if r.get("val/nll")]
        assert [int(r["step"]) for r in val_rows] == [2]  # once, at the end (step index 2)
        assert list((run_dir / "checkpoints").glob("best-step=3.ckpt"))
    assert compare.main([str(root)]) == 0
    assert "val/nll_best mean" in capsys.readouterr().out
    assert (root / "val_nll_curves.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_run_ending_on_a_validation_step_is_not_validated_twice(compose, tiny_run, tmp_path):
    run_dir = tmp_path / "run"
    ovs = [*tiny_run, "logger=none", f"paths.run_dir={run_dir}", "trainer.max_steps=4"]
    train(compose(ovs), ovs)  # debug=tiny validates every 2 steps: at steps 2 and 4
    with open(run_dir / "metrics.csv") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f) if r.get("val/nll")]
    assert steps == [1, 3]


@pytest.mark.slow
def test_checkpoints_and_early_stopping_select_on_the_unsmoothed_nll(compose):
    """Ranking on the label-smoothed val/loss biases a label-smoothing ablation."""
    for callbacks in ("default", "translation", "early_stopping"):
        cfg = compose([f"callbacks={callbacks}"])
        assert cfg.callbacks.model_checkpoint.monitor == "val/nll"
        if callbacks == "early_stopping":
            assert cfg.callbacks.early_stopping.monitor == "val/nll"
