"""An interrupted-and-resumed run logs every row at the step an uninterrupted run gives it, with
the same values: its whole metrics.csv equals the uninterrupted run's (issue 25). Interrupts
come from tests/fixtures/interrupts.py at exact points: Ctrl-C off the logging grid and on a
validation step, a SIGKILL in the middle of a validation, and Ctrl-C in a sweep's trial.
Ctrl-C at any stage (the sanity check, a training step, a validation, the final test pass,
while a checkpoint is written, while the final record is written) or SIGTERM (a validation,
the test pass) ends the run "interrupted" (exit 4) and the same command finishes it with every
metric of an uninterrupted run in results.json (issue 49: a Ctrl-C in the test pass exited 1
with no metrics, and the rerun recorded the test metrics alone)."""

from __future__ import annotations

import csv
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
    "trainer.max_steps=40",
    "trainer.val_check_interval=10",
    "trainer.log_every_n_steps=5",
    "checkpoint.every_n_steps=5",
    "model.dropout=0.1",  # dropout draws must continue exactly after a resume
    "logger=csv",
]


def _env() -> dict:
    path = os.pathsep.join(filter(None, [str(FIXTURES), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": path}


def _interrupt(kind: str, step: int, marker: Path) -> list[str]:
    return [
        f"+callbacks.interrupt._target_=interrupts.{kind}",
        f"+callbacks.interrupt.step={step}",
        f"+callbacks.interrupt.marker={marker}",
    ]


def _train(root: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "attnlab.cli.train", *RUN, *extra, f"paths.root={root}"]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300)


def _rows(run_dir: Path) -> list[dict]:
    """metrics.csv's rows, but for the wall-clock throughput."""
    with open(run_dir / "metrics.csv") as f:
        return [
            {k: v for k, v in row.items() if v and k != "train/tokens_per_sec"}
            for row in csv.DictReader(f)
        ]


def _only_run(root: Path) -> Path:
    (run,) = [p.parent for p in root.rglob("results.json")]
    return run


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("whole")
    marker = root / "never"
    marker.touch()  # the same command as the interrupted runs, with the interrupt spent
    done = _train(root, *_interrupt("CtrlCAfterStep", 1, marker))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(_only_run(root))
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(steps) and 39 in steps and 40 in steps  # the last row: the test
    return rows


@pytest.mark.parametrize(
    "kind, step, code",
    [
        ("CtrlCAfterStep", 23, 4),  # off the logging grid (rows at 4, 9, 14, ...)
        ("CtrlCAfterStep", 20, 4),  # a logging and validation step
        ("KillDuringValidation", 30, -9),  # after step 30's checkpoint, before its val row
    ],
)
def test_an_interrupted_and_resumed_run_logs_the_uninterrupted_runs_rows(
    tmp_path, uninterrupted, kind, step, code
):
    command = _interrupt(kind, step, tmp_path / "fired")
    first = _train(tmp_path / "r", *command)
    assert first.returncode == code, first.stderr[-2000:]
    again = _train(tmp_path / "r", *command)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from" in again.stdout
    assert _rows(_only_run(tmp_path / "r")) == uninterrupted


def test_a_sweep_trial_interrupted_and_resumed_logs_the_uninterrupted_runs_rows(
    tmp_path, uninterrupted
):
    sweep = tmp_path / "one.yaml"
    sweep.write_text(
        "name: one\nmethod: grid\nprogram: attnlab-train\n"
        "command: ['${env}', '${interpreter}', '-m', 'attnlab.cli.train', '${args_no_hyphens}']\n"
        "parameters:\n  seed: {values: [1]}\n"
    )
    args = [*RUN, *_interrupt("CtrlCAfterStep", 27, tmp_path / "fired")]
    cmd = [sys.executable, "-m", "attnlab.cli.sweep", str(sweep), "--out", str(tmp_path / "s")]
    first = subprocess.run([*cmd, *args], capture_output=True, text=True, env=_env(), timeout=300)
    assert first.returncode == 4, first.stdout[-2000:] + first.stderr[-2000:]
    assert f"--out {tmp_path / 's'}" in first.stdout  # the summary says how to resume
    again = subprocess.run([*cmd, *args], capture_output=True, text=True, env=_env(), timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert _rows(_only_run(tmp_path / "s")) == uninterrupted


def test_a_finished_run_keeps_one_file_per_step(tmp_path):
    """The final step's best, periodic and last checkpoints are one file (links to it)."""
    done = _train(tmp_path, "checkpoint.every_n_steps=20")
    assert done.returncode == 0, done.stderr[-2000:]
    ckpts = _only_run(tmp_path) / "checkpoints"
    files = sorted(p.name for p in ckpts.iterdir() if not p.is_symlink())
    links = {p.name: os.readlink(p) for p in ckpts.iterdir() if p.is_symlink()}
    best = [f for f in files if f.startswith("best-step=")]
    assert len(best) == 1 and "last.ckpt" in links and not any("-v" in f for f in files)
    final = (ckpts / "last.ckpt").resolve().name
    assert final in files and final.endswith("=40.ckpt")
    assert all((ckpts / target).is_file() for target in links.values())
    step40 = [f for f in [*files, *links] if f.endswith("step=40.ckpt")]
    assert sum(name in files for name in step40) == 1  # one file of step 40, the rest links


SANITY = "trainer.num_sanity_val_steps=2"  # debug=tiny skips the sanity check


def _results_metrics(root: Path) -> dict:
    """results.json's metrics, but for the wall-clock throughput; and its status."""
    record = json.loads((_only_run(root) / "results.json").read_text())
    metrics = {k: v for k, v in record["metrics"].items() if k != "train/tokens_per_sec"}
    return {"status": record["status"], **metrics}


@pytest.fixture(scope="module")
def uninterrupted_results(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("whole_results")
    (root / "spent").touch()  # the same command as the interrupted runs, its interrupt spent
    done = _train(root, SANITY, *_interrupt("CtrlCDuringTest", 0, root / "spent"))
    assert done.returncode == 0, done.stderr[-2000:]
    return _results_metrics(root)


@pytest.mark.parametrize(
    ("kind", "step"),
    [
        ("CtrlCDuringSanityCheck", 0),
        ("CtrlCAfterStep", 23),
        ("CtrlCDuringValidation", 20),
        ("CtrlCDuringTest", 0),
        ("SigtermDuringValidation", 20),
        ("SigtermDuringTest", 0),
        ("CtrlCWhileSavingCheckpoint", 15),
        ("CtrlCDuringFinalRecord", 0),
    ],
)
def test_ctrl_c_at_any_stage_exits_4_and_the_rerun_keeps_every_metric(
    tmp_path, uninterrupted_results, kind, step
):
    command = [SANITY, *_interrupt(kind, step, tmp_path / "fired")]
    first = _train(tmp_path / "r", *command)
    assert (tmp_path / "fired").exists(), "the interrupt never fired"
    assert first.returncode == 4, (first.stdout + first.stderr)[-2000:]
    assert "the same command resumes it" in first.stdout
    assert _results_metrics(tmp_path / "r")["status"] == "interrupted"
    again = _train(tmp_path / "r", *command)
    assert again.returncode == 0, again.stderr[-2000:]
    assert _results_metrics(tmp_path / "r") == uninterrupted_results
