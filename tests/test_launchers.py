"""A multirun exits with its worst job's code on every launcher (the jobs record their statuses
from their own processes: attnlab.runs.multirun), and says which jobs did not succeed."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from attnlab.runs import multirun
from conftest import TINY

# Post-LN, no warmup, learning rate 1000: the second job diverges within a step.
DIVERGING = [
    "scheduler.peak_lr=0.001,1000",
    "model.norm_position=post",
    "scheduler=constant",
    "scheduler.warmup_steps=0",
    "trainer.max_steps=10",
    "logger=csv",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "launcher",
    # joblib is long (its worker pool starts slowly); basic and submitit_local collect the same
    ["basic", "submitit_local", pytest.param("joblib", marks=pytest.mark.long)],
)
def test_a_diverged_job_makes_the_multirun_fail_on_every_launcher(tmp_path, launcher):
    cmd = [sys.executable, "-m", "attnlab.cli.train", "-m", f"hydra/launcher={launcher}",
           *TINY, *DIVERGING, f"paths.multirun_root={tmp_path / 'multirun'}"]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]  # diverged
    assert "attnlab-train: multirun: 2 jobs: 1 completed, 1 diverged" in proc.stdout
    (job_line,) = [ln for ln in proc.stdout.splitlines() if "  job " in ln]
    assert "job 1 diverged: " in job_line and "scheduler.peak_lr=1000" in job_line


@pytest.mark.parametrize("digits", ["123456789012", "1234e5678901", "0123456789ab"])
def test_the_multirun_id_reaches_the_jobs_as_the_same_string(monkeypatch, digits):
    """Hydra parses override values: a hex id of digits (or digits around one e) would become
    an int (or inf), and no job's status would be found (a CI flake before the fix)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    monkeypatch.setattr(multirun.uuid, "uuid4", lambda: SimpleNamespace(hex=digits + "ffff"))
    override = multirun.new_id_override()
    sent = override.rpartition("=")[2]  # what attnlab-train hands to collect()
    assert OverridesParser.create().parse_override(override).value() == sent


def test_a_job_that_never_reported_counts_as_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(multirun, "_sweep_dir", [tmp_path])
    folder = tmp_path / ".jobs" / "abc"
    folder.mkdir(parents=True)
    (folder / "0.json").write_text(
        '{"job": 0, "status": "completed", "overrides": ["seed=1"], "run_dir": "r0"}'
    )
    records = multirun.collect("abc", expected=2)
    assert [r["status"] for r in records] == ["completed", "failed"]
    assert multirun.multirun_exit_code(records) == 1
    lines = multirun.summary(records)
    assert lines[0] == "multirun: 2 jobs: 1 completed, 1 failed"
    assert lines[1] == "  job 1 failed: no status reported"
    assert lines[2] == f"multirun: runs in {tmp_path}; compare them: attnlab-compare {tmp_path}"
