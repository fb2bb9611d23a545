"""A multirun exits with its worst job's code on every launcher (the jobs record their statuses
from their own processes: attnlab.runs.multirun), and says which jobs did not succeed."""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import pytest

import forked
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


# Runs attnlab-train's entry point once per argv (JSON) in one fresh interpreter, as the console
# script does: after every command line but the last, MARK, its exit code and a newline on stdout;
# the last one's SystemExit is the interpreter's exit code, as the console script's would be.
MARK = "\x1eEXIT "
DRIVER = f"""
import json, sys
from attnlab.cli.train import main

*first, last = json.loads(sys.argv[1])
for argv in first:
    sys.argv = ["attnlab-train", *argv]
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    print({MARK!r} + json.dumps(code), flush=True)
sys.argv = ["attnlab-train", *last]
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "launchers",
    # basic and submitit_local multiruns in one interpreter, one after the other (one start of
    # torch and Lightning, not two; submitit's jobs are processes of their own all the same);
    # joblib is long (its worker pool starts slowly); basic and submitit_local collect the same
    [("basic", "submitit_local"), pytest.param(("joblib",), marks=pytest.mark.long)],
    ids=["basic+submitit_local", "joblib"],
)
def test_a_diverged_job_makes_the_multirun_fail_on_every_launcher(tmp_path, launchers):
    argvs = [["-m", f"hydra/launcher={launcher}", *TINY, *DIVERGING,
              f"paths.multirun_root={tmp_path / launcher}"] for launcher in launchers]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    # the interpreter: a process of its own, forked (tests/forked.py)
    proc = forked.run([sys.executable, "-c", DRIVER, json.dumps(argvs)], cwd=tmp_path, env=env,
                      timeout=600)  # fmt: skip
    tail = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 3, tail  # diverged: the last multirun's, the interpreter's exit
    first, *rest = proc.stdout.split(MARK)  # the next command's output after each code's line
    assert [json.loads(part.partition("\n")[0]) for part in rest] == [3] * (len(launchers) - 1)
    outputs = [first, *(part.partition("\n")[2] for part in rest)]
    for launcher, stdout in zip(launchers, outputs, strict=True):
        assert "attnlab-train: multirun: 2 jobs: 1 completed, 1 diverged" in stdout, launcher
        (job_line,) = [ln for ln in stdout.splitlines() if "  job " in ln]
        assert "job 1 diverged: " in job_line and "scheduler.peak_lr=1000" in job_line
        assert f"paths.multirun_root={tmp_path / launcher} " in job_line  # its own multirun's


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
