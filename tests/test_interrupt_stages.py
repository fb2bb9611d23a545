"""Ctrl-C at any stage of a run ends it "interrupted" (exit 4, the resume line), and the same
command then finishes it with every metric an uninterrupted run records (issue 49): during the
sanity check, a training step, a validation and the final test pass. Before, a Ctrl-C in the
test pass exited 1 with no metrics, and the rerun recorded the test metrics alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TINY

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUN = [
    *TINY,
    "trainer.num_sanity_val_steps=2",
    "trainer.max_steps=40",
    "trainer.val_check_interval=10",
    "trainer.log_every_n_steps=5",
    "checkpoint.every_n_steps=5",
    "logger=csv",
]


def _train(root: Path, kind: str, step: int, marker: Path) -> subprocess.CompletedProcess:
    interrupt = [
        f"+callbacks.interrupt._target_=interrupts.{kind}",
        f"+callbacks.interrupt.step={step}",
        f"+callbacks.interrupt.marker={marker}",
    ]
    path = os.pathsep.join(filter(None, [str(FIXTURES), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "attnlab.cli.train", *RUN, *interrupt, f"paths.root={root}"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def _record(root: Path) -> dict:
    (path,) = root.rglob("results.json")
    return json.loads(path.read_text())


def _metrics(record: dict) -> dict:
    return {k: v for k, v in record["metrics"].items() if k != "train/tokens_per_sec"}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("whole")
    (root / "spent").touch()  # the same command, its interrupt already spent
    done = _train(root, "CtrlCDuringTest", 0, root / "spent")
    assert done.returncode == 0, done.stderr[-2000:]
    return _metrics(_record(root))


@pytest.mark.parametrize(
    ("kind", "step"),
    [
        ("CtrlCDuringSanityCheck", 0),
        ("CtrlCAfterStep", 23),
        ("CtrlCDuringValidation", 20),
        ("CtrlCDuringTest", 0),
    ],
)
def test_ctrl_c_at_any_stage_exits_4_and_the_rerun_keeps_every_metric(
    tmp_path, uninterrupted, kind, step
):
    first = _train(tmp_path / "r", kind, step, tmp_path / "fired")
    assert (tmp_path / "fired").exists(), "the interrupt never fired"
    assert first.returncode == 4, (first.stdout + first.stderr)[-2000:]
    assert "the same command resumes it" in first.stdout
    assert _record(tmp_path / "r")["status"] == "interrupted"
    again = _train(tmp_path / "r", kind, step, tmp_path / "fired")
    assert again.returncode == 0, again.stderr[-2000:]
    record = _record(tmp_path / "r")
    assert record["status"] == "completed"
    assert _metrics(record) == uninterrupted
