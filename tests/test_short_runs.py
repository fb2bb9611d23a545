"""A run shorter than its validation interval or its warmup says so, and validates enough."""

from __future__ import annotations

import csv

import pytest

from attnlab.pipeline.train import train
from attnlab.training.short_runs import validation_interval, warmup_warning


def test_an_interval_longer_than_the_run_is_scaled_to_five_points():
    assert validation_interval(250, 50) == (
        10,
        "trainer.val_check_interval=250 is longer than the run (trainer.max_steps=50): "
        "validating every 10 steps instead",
    )
    assert validation_interval(250, 1000) == (250, None)  # long enough: unchanged
    assert validation_interval(250, 250) == (250, None)
    assert validation_interval(0.5, 50) == (0.5, None)  # a fraction of an epoch: unchanged
    assert validation_interval(None, 50) == (None, None)
    assert validation_interval(250, 60, accumulate=5)[0] == 250  # 300 batches: long enough
    assert validation_interval(250, 10) == (
        2,
        "trainer.val_check_interval=250 is longer than the run (trainer.max_steps=10): "
        "validating every 2 steps instead",
    )
    # too short for five points: one validation, at the end (test_final_validation.py)
    assert validation_interval(250, 9) == (250, None)
    assert validation_interval(250, 3) == (250, None)


def test_a_warmup_the_run_never_finishes_is_one_warning_line():
    line = warmup_warning({"name": "cosine", "warmup_steps": 100}, 50)
    assert line == (
        "warning: scheduler.warmup_steps=100 >= trainer.max_steps=50: the learning rate "
        "never reaches its peak in this run"
    )
    assert warmup_warning({"name": "noam", "warmup_steps": 49}, 50) is None
    assert warmup_warning({"name": "constant", "warmup_steps": 0}, 50) is None


@pytest.mark.slow
def test_a_short_run_validates_five_times_and_says_why(compose, tiny_run, tmp_path, capsys):
    run_dir = tmp_path / "run"
    ovs = [*tiny_run, "logger=none", "trainer.max_steps=20", "trainer.val_check_interval=250"]
    ovs += ["scheduler.warmup_steps=30", f"paths.run_dir={run_dir}"]
    assert train(compose(ovs), ovs)["status"] == "completed"
    out = capsys.readouterr().out
    assert "trainer.val_check_interval=250 is longer than the run" in out
    assert "warning: scheduler.warmup_steps=30 >= trainer.max_steps=20" in out
    with open(run_dir / "metrics.csv", newline="") as f:
        steps = {int(r["step"]) for r in csv.DictReader(f) if r.get("val/nll")}
    assert len(steps) == 5  # every 4 steps, where it was once at the end
