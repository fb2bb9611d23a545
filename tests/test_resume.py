"""Runs that survive (issue 6): SIGKILL + rerun is bit-identical, SIGTERM checkpoints and stops,
a truncated checkpoint is skipped, a completed run is not retrained, divergence is recorded."""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TINY

pytestmark = pytest.mark.slow

RUN = [
    *TINY,
    "trainer.max_steps=80",
    "trainer.val_check_interval=20",
    "checkpoint.every_n_steps=5",
    "model.dropout=0.1",  # dropout draws must continue exactly after a resume
    "logger=[wandb,tensorboard]",
]


def command(root: Path, *extra: str) -> list[str]:
    """The run's command; `extra` overrides replace RUN's values for the same keys."""
    keys = {o.split("=", 1)[0] for o in extra}
    base = [o for o in RUN if o.split("=", 1)[0] not in keys]
    return [sys.executable, "-m", "attnlab.cli.train", *base, f"paths.root={root}", *extra]


def env(tmp_path: Path) -> dict:
    return {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
    }


def run(cmd: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=env(tmp_path), timeout=300)


def run_dir(root: Path) -> Path:
    (found,) = (root / "default").iterdir()
    return found


def results(root: Path) -> dict:
    return json.loads((run_dir(root) / "results.json").read_text())


def _has_row(metrics_csv: Path, step: int) -> bool:
    """Does metrics.csv hold a row logged at `step` (read as CSV: its columns are sorted, and
    the diag/ ones come before epoch and step)?"""
    import csv

    try:
        with open(metrics_csv, newline="") as f:
            return any(r.get("step") == str(step) for r in csv.DictReader(f))
    except OSError:
        return False


def start_and_wait_for_checkpoint(
    cmd, tmp_path, root: Path, step: int, logged_past: bool = False
) -> subprocess.Popen:
    """Start the run; return once it wrote the checkpoint of `step` (with logged_past, once
    metrics.csv also holds a row of the next step: the step's own validation is complete)."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env(tmp_path)
    )
    deadline = time.time() + 240
    while time.time() < deadline:
        if list(root.glob(f"default/*/checkpoints/step={step}.ckpt")) and (
            not logged_past or _has_row(run_dir(root) / "metrics.csv", step)
        ):
            return proc
        if proc.poll() is not None:
            pytest.fail(f"run ended before step {step}: {proc.stderr.read()[-2000:]}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"no checkpoint at step {step} in time")


def test_sigkill_then_rerun_equals_an_uninterrupted_run(tmp_path):
    whole = run(command(tmp_path / "whole"), tmp_path)
    assert whole.returncode == 0, whole.stderr[-2000:]
    expected = results(tmp_path / "whole")

    kill_step = random.choice(range(10, 50, 5))
    print("killing after the checkpoint of step", kill_step)
    root = tmp_path / "killed"
    # Killed after rows past the checkpoint were logged (they must not be duplicated). A kill
    # during the validation that follows a checkpoint of the same step loses that validation's
    # row: Lightning does not validate that step again on resume.
    proc = start_and_wait_for_checkpoint(command(root), tmp_path, root, kill_step, True)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first_id = results(root)["wandb_run_id"]
    assert results(root)["status"] == "running"  # killed: nothing could record anything else

    again = run(command(root), tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from" in again.stdout
    final = results(root)
    assert final["status"] == "completed" and final["steps"] == 80
    # Bit for bit (JSON floats compared exactly), but for the wall-clock throughput.
    assert _learned(final["metrics"]) == _learned(expected["metrics"])
    assert final["wandb_run_id"] == first_id
    offline_runs = sorted((run_dir(root) / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 2 and {p.name.rsplit("-", 1)[-1] for p in offline_runs} == {
        first_id
    }
    assert f"wandb sync --id {first_id} {offline_runs[0]} {offline_runs[1]}" in again.stdout
    # Every logging step once, with the uninterrupted run's values, in metrics.csv, W&B and
    # TensorBoard, each read back with its own reader.
    rows = csv_rows(run_dir(tmp_path / "whole"))
    assert [_learned(r) for r in csv_rows(run_dir(root))] == [_learned(r) for r in rows]
    history = [item for run in offline_runs for item in wandb_history(run)]
    assert [h["_step"] for h in history] == list(range(len(rows)))
    assert [h["trainer/global_step"] for h in history] == [r["step"] for r in rows]
    assert [h.get("train/loss") for h in history] == [r.get("train/loss") for r in rows]
    assert wandb_exit_code(offline_runs[1]) == 0
    losses = tensorboard_scalars(run_dir(root), "train/loss")
    assert losses == [
        (r["step"], pytest.approx(r["train/loss"])) for r in rows if "train/loss" in r
    ]

    done = run(command(root), tmp_path)  # a third time: nothing to do
    assert done.returncode == 0 and "already completed" in done.stdout
    assert _learned(results(root)["metrics"]) == _learned(expected["metrics"])


def csv_rows(run: Path) -> list[dict]:
    with open(run / "metrics.csv") as f:
        return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(f)]


def wandb_records(segment: Path) -> list[dict]:
    """The records of an offline W&B run directory, read by W&B's own reader."""
    (log,) = segment.glob("*.wandb")
    inspect = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(log)]
    out = subprocess.run(inspect, capture_output=True, text=True, check=True, timeout=120).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def wandb_history(segment: Path) -> list[dict]:
    return [r["history"]["item"] for r in wandb_records(segment) if r["type"] == "history"]


def wandb_exit_code(segment: Path) -> int | None:
    exits = [r["exit"].get("exit_code", 0) for r in wandb_records(segment) if r["type"] == "exit"]
    return exits[-1] if exits else None


def tensorboard_scalars(run: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of a scalar, read by TensorBoard's own reader (later files purge earlier
    events from their purge step on, as TensorBoard shows them)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def _learned(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k != "train/tokens_per_sec"}


def test_sigterm_checkpoints_then_a_truncated_checkpoint_is_skipped(tmp_path):
    root = tmp_path / "run"
    proc = start_and_wait_for_checkpoint(command(root), tmp_path, root, 15)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 4  # EXIT_CODES["interrupted"]
    record = results(root)
    assert record["status"] == "interrupted"
    last = run_dir(root) / "checkpoints" / "last.ckpt"
    assert last.is_file()
    interrupted_at = record["steps"]
    assert 15 <= interrupted_at < 80

    # Corrupt the newest checkpoint: the rerun must fall back to the previous one and say so.
    os.utime(last)  # make sure it is the newest
    last.write_bytes(last.read_bytes()[:1000])
    again = run(command(root), tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"checkpoint {last} is unusable" in again.stdout
    assert "falling back to the previous one" in again.stdout
    assert results(root)["status"] == "completed"
    assert results(root)["steps"] == 80


def test_resume_never_starts_fresh_in_a_new_directory(tmp_path):
    root = tmp_path / "r"
    short = ["trainer.max_steps=10", "logger=csv"]
    assert run(command(root, *short), tmp_path).returncode == 0
    fresh = run(command(root, *short, "resume=never"), tmp_path)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    dirs = sorted(p.name for p in (root / "default").iterdir())
    assert len(dirs) == 2 and dirs[1].startswith(dirs[0])  # <name>-<hash> and <name>-<hash>-<time>


def test_a_run_made_before_a_preset_was_edited_is_refused_not_reported(tmp_path):
    """The run-dir hash covers the command line, not preset files: after an edit, the same
    command must not answer "already completed" with the old config's results."""
    conf = tmp_path / "conf"
    shutil.copytree(Path(__file__).resolve().parents[1] / "conf", conf)
    root, short = tmp_path / "r", ["trainer.max_steps=10", "logger=csv"]
    edited_env = {**env(tmp_path), "ATTNLAB_CONF_DIR": str(conf)}

    def attnlab_train(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(command(root, *short, *extra), capture_output=True, text=True,
                              env=edited_env, timeout=300)  # fmt: skip

    assert attnlab_train().returncode == 0
    done = run_dir(root)
    before = {p.name: p.read_bytes() for p in done.iterdir() if p.is_file()}
    assert attnlab_train().returncode == 0  # unchanged: "already completed"
    adam = conf / "optim" / "adam.yaml"
    adam.write_text(adam.read_text().replace("weight_decay: 0.0", "weight_decay: 0.01"))
    refused = attnlab_train()
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith(f"attnlab-train: error: {done} was trained with a different")
    assert "(optim.weight_decay: 0.0 -> 0.01)" in refused.stderr
    assert "resume=never" in refused.stderr
    after = {p.name: p.read_bytes() for p in done.iterdir() if p.is_file()}
    log = "train.log"  # the "already completed" attempt appends its line; nothing is lost
    assert {k: v for k, v in after.items() if k != log} == {
        k: v for k, v in before.items() if k != log
    }
    assert after[log].startswith(before[log])
    # (that resume=never then trains afresh: test_resume_never_starts_fresh_in_a_new_directory)


def test_a_diverging_trial_is_recorded_and_the_sweep_goes_on(tmp_path):
    """Post-LN, no warmup, a huge learning rate: the classic divergence. The trial stops within
    a step with status "diverged" (exit code 3); the other trial of the sweep completes."""
    sweep = tmp_path / "diverge.yaml"
    sweep.write_text(
        "name: diverge\n"
        "method: grid\n"
        "metric: {name: val/loss, goal: minimize}\n"
        "program: attnlab-train\n"
        "command: ['${env}', '${interpreter}', '-m', 'attnlab.cli.train', '${args_no_hyphens}']\n"
        "parameters:\n"
        "  scheduler.peak_lr: {values: [0.001, 1000.0]}\n"
        "  model.norm_position: {value: post}\n"
        "  scheduler: {value: constant}\n"
        "  scheduler.warmup_steps: {value: 0}\n"
    )
    out = tmp_path / "sweep"
    extra = list(TINY)
    proc = subprocess.run(
        [sys.executable, "-m", "attnlab.cli.sweep", str(sweep), "--out", str(out),
         "--parallel", "2",
         *extra, "trainer.max_steps=20", "logger=csv", f"paths.root={tmp_path / 'runs'}"],
        capture_output=True, text=True, env=env(tmp_path), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]  # diverged
    summary = json.loads((out / "summary.json").read_text())
    trials = summary["trials"] if isinstance(summary, dict) else summary
    by_lr = {t["params"]["scheduler.peak_lr"]: t for t in trials}
    assert by_lr[1000.0]["status"] == "diverged"
    assert by_lr[0.001]["status"] == "completed"
    (diverged,) = [
        json.loads(p.read_text())
        for p in out.rglob("results.json")
        if json.loads(p.read_text())["status"] == "diverged"
    ]
    # stopped within a step of the first non-finite loss or gradient
    assert diverged["steps"] <= diverged["diverged_step"] + 1
