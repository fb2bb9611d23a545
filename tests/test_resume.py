"""Runs that survive (issue 6): SIGKILL + rerun is bit-identical, a completed run is not
retrained. (SIGTERM checkpoints and stops, and a truncated checkpoint is skipped: the chains of
interrupts in tests/test_resume_rows.py; a diverging sweep trial is recorded and the sweep goes
on: test_a_sweep_resumes_its_interrupted_trial_and_goes_on_past_a_diverging_one there.)"""

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

import forked
from resume_references import KILL_RUN, references

pytestmark = pytest.mark.slow

RUN = KILL_RUN  # 40 steps, a row every step, validations every 20, W&B and TensorBoard


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


def run(cmd: list[str], tmp_path: Path, **kw) -> subprocess.CompletedProcess:
    """The command, a process of its own (forked: tests/forked.py)."""
    return forked.run(cmd, env={**env(tmp_path), **kw.pop("env", {})}, timeout=300)


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
    proc = forked.popen(cmd, env=env(tmp_path))
    deadline = time.time() + 240
    while time.time() < deadline:
        if list(root.glob(f"default/*/checkpoints/step={step}.ckpt")) and (
            not logged_past or _has_row(run_dir(root) / "metrics.csv", step)
        ):
            return proc
        if proc.poll() is not None:
            pytest.fail(f"run ended before step {step}: {proc.output('stderr')[-2000:]}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"no checkpoint at step {step} in time")


def test_sigkill_then_rerun_equals_an_uninterrupted_run(tmp_path, tmp_path_factory):
    """Killed at a random checkpoint, the same command resumes it; compared with the same
    command's uninterrupted run (tests/resume_references.py). (That the same command then
    answers "already completed" and trains nothing:
    test_a_run_made_before_a_preset_was_edited_is_refused_not_reported.)"""
    kill_step = random.choice(range(10, 35, 5))
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
    assert final["status"] == "completed" and final["steps"] == 40
    whole = references(tmp_path_factory) / "whole"
    expected = results(whole)
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
    rows = csv_rows(run_dir(whole))
    assert [_learned(r) for r in csv_rows(run_dir(root))] == [_learned(r) for r in rows]
    records = [wandb_records(segment) for segment in offline_runs]
    history = [item for segment in records for item in wandb_history(segment)]
    assert [h["_step"] for h in history] == list(range(len(rows)))
    assert [h["trainer/global_step"] for h in history] == [r["step"] for r in rows]
    assert [h.get("train/loss") for h in history] == [r.get("train/loss") for r in rows]
    assert wandb_exit_code(records[1]) == 0
    losses = tensorboard_scalars(run_dir(root), "train/loss")
    assert losses == [
        (r["step"], pytest.approx(r["train/loss"])) for r in rows if "train/loss" in r
    ]


def csv_rows(run: Path) -> list[dict]:
    with open(run / "metrics.csv") as f:
        return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(f)]


def wandb_records(segment: Path) -> list[dict]:
    """The records of an offline W&B run directory, read by W&B's own reader."""
    (log,) = segment.glob("*.wandb")
    inspect = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(log)]
    out = subprocess.run(inspect, capture_output=True, text=True, check=True, timeout=120).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def wandb_history(records: list[dict]) -> list[dict]:
    """The history rows among an offline W&B run directory's records (wandb_records)."""
    return [r["history"]["item"] for r in records if r["type"] == "history"]


def wandb_exit_code(records: list[dict]) -> int | None:
    """The exit code among an offline W&B run directory's records (wandb_records)."""
    exits = [r["exit"].get("exit_code", 0) for r in records if r["type"] == "exit"]
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


def test_a_run_made_before_a_preset_was_edited_is_refused_not_reported(tmp_path):
    """The run-dir hash covers the command line, not preset files: after an edit, the same
    command must not answer "already completed" with the old config's results.

    Before the edit, the same command answers "already completed" and trains nothing (a
    completed run is not retrained), and with resume=never it trains afresh in a new directory
    (the run's folder name and a time). Each command is a process of its own."""
    conf = tmp_path / "conf"
    shutil.copytree(Path(__file__).resolve().parents[1] / "conf", conf)
    root, short = tmp_path / "r", ["trainer.max_steps=10", "logger=csv"]
    edited_env = {**env(tmp_path), "ATTNLAB_CONF_DIR": str(conf)}
    argv = command(root, *short)

    copied = tmp_path / "first"  # the folder as the first run left it
    first = run(argv, tmp_path, env=edited_env)
    shutil.copytree(root, copied, symlinks=True)
    again = run(argv, tmp_path, env=edited_env)
    fresh = run([*argv, "resume=never"], tmp_path, env=edited_env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert again.returncode == 0 and "already completed" in again.stdout
    assert fresh.returncode == 0, fresh.stdout[-2000:] + fresh.stderr[-2000:]
    assert "already completed" not in fresh.stdout and "resuming from" not in fresh.stdout
    dirs = sorted(p.name for p in (root / "default").iterdir())
    assert len(dirs) == 2 and dirs[1].startswith(dirs[0])  # <name>-<hash> and <name>-<hash>-<time>
    assert json.loads((root / "default" / dirs[1] / "results.json").read_text())["steps"] == 10
    done = root / "default" / dirs[0]
    before = {
        p.name: p.read_bytes() for p in (copied / "default" / dirs[0]).iterdir() if p.is_file()
    }
    adam = conf / "optim" / "adam.yaml"
    adam.write_text(adam.read_text().replace("weight_decay: 0.0", "weight_decay: 0.01"))
    refused = run(argv, tmp_path, env=edited_env)
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


@pytest.mark.slow
def test_a_forked_command_has_a_real_main_module_and_its_own_std_streams(tmp_path):
    """tests/forked.py runs `python -c CODE` as Python does: CODE in a __main__ module of
    sys.modules (pickling a function defined there finds it), sys.__stdout__ the redirected
    stream; and a wait on a command whose forking interpreter died raises instead of hanging."""
    code = (
        "import pickle, sys\n"
        "def f(): return 1\n"
        "assert pickle.loads(pickle.dumps(f))() == 1\n"
        "print(sys.modules['__main__'].__name__, sys.__stdout__ is sys.stdout)\n"
    )
    done = forked.run([sys.executable, "-c", code], timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "__main__ True"
    dead = forked.Forked(1, ["x"], {"status": tmp_path / "never"}, server_alive=lambda: False)
    with pytest.raises(RuntimeError, match="the forking interpreter died"):
        dead.wait(timeout=5)
