"""An interrupted-and-resumed run logs every row at the step an uninterrupted run gives it, with
the same values: its whole metrics.csv equals the uninterrupted run's (issue 25), and so does
every metric in its results.json (issue 49: a Ctrl-C in the test pass exited 1 with no
metrics, and the rerun recorded the test metrics alone). Interrupts come from
tests/fixtures/interrupts.py at exact points: Ctrl-C at any stage (the sanity check, a training
step on the logging grid and off it, a validation, the final test pass, while a checkpoint is
written, while the final record is written), SIGTERM (a validation, the test pass), a SIGKILL in
the middle of a validation, and Ctrl-C in a sweep's trial (beside a trial that diverges). Each
Ctrl-C or SIGTERM ends the run "interrupted" (exit 4), and the same command continues it.

Interrupts fire once each (a marker file), so one command line carries several: a chain of
runs of the same command is interrupted at each stage in turn, each run resuming the previous
one, and the last one completes; every command carries every interrupt of the file, the ones a
test does not arm spent, as the uninterrupted run (tests/resume_references.py) has them all."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import forked
from resume_references import ROWS_RUN, fixtures_env, interrupts, references

pytestmark = pytest.mark.slow


def _env() -> dict:
    return fixtures_env({**os.environ, "WANDB_MODE": "disabled"})


def _train(root: Path, *extra: str) -> subprocess.CompletedProcess:
    """The run's command, a process of its own (forked: tests/forked.py)."""
    cmd = [sys.executable, "-m", "attnlab.cli.train", *ROWS_RUN, *extra, f"paths.root={root}"]
    return forked.run(cmd, env=_env(), timeout=300)


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


def _results_metrics(root: Path) -> dict:
    """results.json's metrics (of the one run under `root`), but for the wall-clock throughput;
    and its status."""
    run = root if (root / "results.json").is_file() else _only_run(root)
    record = json.loads((run / "results.json").read_text())
    metrics = {k: v for k, v in record["metrics"].items() if k != "train/tokens_per_sec"}
    return {"status": record["status"], **metrics}


def _uninterrupted(tmp_path_factory) -> tuple[list[dict], dict]:
    """The uninterrupted run's metrics.csv rows and results.json metrics."""
    root = references(tmp_path_factory) / "rows"
    rows = _rows(_only_run(root))
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(steps) and 39 in steps and 40 in steps  # the last row: the test
    results = _results_metrics(root)
    assert results["status"] == "completed"
    return rows, results


# Each chain's interrupts, in the order its runs meet them (keys of INTERRUPTS).
CHAINS = {
    "sanity-saving-step20-kill-test": (
        "interrupt_sanity",  # Ctrl-C in the sanity check, before any step
        "interrupt_saving",  # Ctrl-C while step 15's checkpoint is written
        "interrupt_step20",  # Ctrl-C in step 20: a logging and validation step
        "interrupt_kill",  # SIGKILL in step 30's validation, after its checkpoint: exit -9
        "interrupt_final_val",  # Ctrl-C in the final validation (step 40's): it used to go on
        "interrupt_test",  # Ctrl-C in the final test pass
    ),
    "val-sigterm-step23-sigterm_test-record": (
        "interrupt_val",  # Ctrl-C in the validation after step 10
        "interrupt_term_val",  # SIGTERM in the validation after step 20; last.ckpt truncated
        "interrupt_step23",  # Ctrl-C in step 23, off the logging grid
        "interrupt_term_test",  # SIGTERM in the final test pass
        "interrupt_record",  # Ctrl-C while the final record (results.json) is written
    ),
}


# The interrupts that come while training runs (Preemption's handler): each is answered by a
# line at once. The sanity check, the test pass and the final record stop at once instead.
ANSWERED_AT_ONCE = {"interrupt_saving", "interrupt_step20", "interrupt_final_val",
                    "interrupt_val", "interrupt_term_val", "interrupt_step23"}  # fmt: skip


@pytest.mark.parametrize("chain", CHAINS.values(), ids=CHAINS.keys())
def test_a_run_interrupted_at_each_stage_in_turn_ends_with_the_uninterrupted_runs_rows(
    tmp_path, tmp_path_factory, chain
):
    """The same command, run again after each interrupt of the chain, one run per interrupt
    and one that completes. First chain: Ctrl-C in the sanity check, while step 15's checkpoint
    is written, in step 20 (a logging and validation step), SIGKILL in step 30's validation,
    Ctrl-C in the test pass. Second chain: Ctrl-C in step 10's validation, SIGTERM in step 20's
    (then last.ckpt truncated), Ctrl-C in step 23 (off the logging grid), SIGTERM in the test
    pass, Ctrl-C while the final record is written.

    Each run fires its interrupt and no later one; each interrupted run exits 4 (-9 for the
    SIGKILL) and says that the same command resumes it, its results.json says "interrupted"
    ("running" after the SIGKILL: nothing could record anything), and each rerun after a
    checkpoint resumes from the newest one. After SIGTERM in a validation the run ends at the
    next step with last.ckpt written; that is truncated, and the rerun says it is unusable and
    falls back to the previous checkpoint. The run that completes has the uninterrupted run's
    metrics.csv, row for row, and its results.json metrics."""
    root, markers = tmp_path / "r", tmp_path / "markers"
    command = interrupts(markers, armed=chain)
    checkpointed = False  # has an earlier run of the chain written a checkpoint?
    truncated = None
    for at, key in enumerate(chain):
        run = _train(root, *command)
        output = (run.stdout + run.stderr)[-3000:]
        assert (markers / key).exists(), f"{key} never fired: {output}"
        assert not [k for k in chain[at + 1 :] if (markers / k).exists()], output
        if checkpointed:
            assert "resuming from" in run.stdout, output
        if truncated is not None:
            assert f"checkpoint {truncated} is unusable" in run.stdout, output
            assert "falling back to the previous one" in run.stdout, output
            truncated = None
        status = _results_metrics(root)["status"]
        if key == "interrupt_kill":
            assert run.returncode == -9, output
            assert status == "running"  # killed: nothing could record anything else
        else:
            assert run.returncode == 4, output
            assert "the same command resumes it" in run.stdout, output
            assert status == "interrupted"
        if key in ANSWERED_AT_ONCE:  # training's own line, as the signal comes
            assert "stopping after this step or validation" in run.stderr, output
        checkpointed = checkpointed or key != "interrupt_sanity"
        if key == "interrupt_term_val":
            record = json.loads((_only_run(root) / "results.json").read_text())
            assert record["steps"] == 21  # the step after that validation ends the run
            last = _only_run(root) / "checkpoints" / "last.ckpt"
            assert last.is_file()
            # Corrupt the newest checkpoint: the rerun must fall back to the previous one.
            os.utime(last)  # make sure it is the newest
            last.write_bytes(last.read_bytes()[:1000])
            truncated = last
    done = _train(root, *command)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "resuming from" in done.stdout
    rows, results = _uninterrupted(tmp_path_factory)
    assert _rows(_only_run(root)) == rows
    assert _results_metrics(root) == results


def _trials(out: Path) -> dict[float, dict]:
    """summary.json's trials by their learning rate."""
    summary = json.loads((out / "summary.json").read_text())
    trials = summary["trials"] if isinstance(summary, dict) else summary
    return {t["params"]["scheduler.peak_lr"]: t for t in trials}


def _records(out: Path) -> dict[str, dict]:
    """Each trial's results.json by its status (and its run folder, as "dir")."""
    found = [(p, json.loads(p.read_text())) for p in out.rglob("results.json")]
    by_status = {record["status"]: {**record, "dir": p.parent} for p, record in found}
    assert len(by_status) == len(found), [record["status"] for _, record in found]
    return by_status


def test_a_sweep_resumes_its_interrupted_trial_and_goes_on_past_a_diverging_one(
    tmp_path, tmp_path_factory
):
    """A sweep of two trials side by side (--parallel 2): one with the default learning rate
    (3e-3, the uninterrupted run's), Ctrl-C in its step 27; one with a huge learning rate
    (1000), a real divergence (at step 4 here). The sweep goes on past the divergence: the
    diverging trial stops within a step of its first non-finite loss or gradient with status
    "diverged", the other is interrupted, the sweep exits 4 and its summary says how to resume
    (`--out`). The same sweep command resumes the interrupted trial, which completes with the
    uninterrupted run's metrics.csv rows and results.json metrics; the diverging trial diverges
    again, and the sweep exits 3 (diverged)."""
    sweep = tmp_path / "two.yaml"
    sweep.write_text(
        "name: two\nmethod: grid\nmetric: {name: val/loss, goal: minimize}\n"
        "program: attnlab-train\n"
        "command: ['${env}', '${interpreter}', '-m', 'attnlab.cli.train', '${args_no_hyphens}']\n"
        "parameters:\n  scheduler.peak_lr: {values: [0.003, 1000.0]}\n"
    )
    out, markers = tmp_path / "s", tmp_path / "markers"
    args = [*ROWS_RUN, *interrupts(markers, armed=("interrupt_sweep",))]
    cmd = [sys.executable, "-m", "attnlab.cli.sweep", str(sweep), "--out", str(out)]
    cmd += ["--parallel", "2"]
    first = forked.run([*cmd, *args], env=_env(), timeout=300)  # its trials: fresh processes
    assert first.returncode == 4, first.stdout[-2000:] + first.stderr[-2000:]  # interrupted
    assert (markers / "interrupt_sweep").exists()
    assert f"--out {out}" in first.stdout  # the summary says how to resume
    trials = _trials(out)
    assert trials[0.003]["status"] == "interrupted" and trials[1000.0]["status"] == "diverged"
    diverged = _records(out)["diverged"]
    # stopped within a step of the first non-finite loss or gradient
    assert diverged["steps"] <= diverged["diverged_step"] + 1

    again = forked.run([*cmd, *args], env=_env(), timeout=300)
    assert again.returncode == 3, again.stdout[-2000:] + again.stderr[-2000:]  # diverged
    trials = _trials(out)
    assert trials[0.003]["status"] == "completed" and trials[1000.0]["status"] == "diverged"
    records = _records(out)
    assert records["diverged"]["steps"] <= records["diverged"]["diverged_step"] + 1
    rows, results = _uninterrupted(tmp_path_factory)
    assert _rows(records["completed"]["dir"]) == rows
    assert _results_metrics(records["completed"]["dir"]) == results


def test_a_finished_run_keeps_one_file_per_step(tmp_path_factory):
    """The final step's best, periodic and last checkpoints are one file (links to it)."""
    ckpts = _only_run(references(tmp_path_factory) / "rows") / "checkpoints"
    files = sorted(p.name for p in ckpts.iterdir() if not p.is_symlink())
    links = {p.name: os.readlink(p) for p in ckpts.iterdir() if p.is_symlink()}
    best = [f for f in files if f.startswith("best-step=")]
    assert len(best) == 1 and "last.ckpt" in links and not any("-v" in f for f in files)
    final = (ckpts / "last.ckpt").resolve().name
    assert final in files and final.endswith("=40.ckpt")
    assert all((ckpts / target).is_file() for target in links.values())
    step40 = [f for f in [*files, *links] if f.endswith("step=40.ckpt")]
    assert sum(name in files for name in step40) == 1  # one file of step 40, the rest links
