"""attnlab-sweep checks every trial before any starts (attnlab.sweeps.check): a typo in a swept
key, a bad value in one arm or a bad extra override is one line per problem naming the trials
and the key, exit 2, and nothing started or written, with --dry-run and without."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from attnlab.sweeps.check import problem_lines, runs_attnlab_train

SWEEP = """\
name: check
program: attnlab-train
method: grid
metric: {{name: val/nll, goal: minimize}}
parameters:
  {key}: {{values: {values}}}
  seed: {{values: [1, 2]}}
command:
  - ${{program}}
  - debug=tiny
  - ${{args_no_hyphens}}
"""


def _sweep(tmp_path: Path, key: str, values: str, *extra: str, dry_run: bool = True,
           process: bool = False):  # fmt: skip
    """(exit code, stdout, stderr) of attnlab-sweep on the file, run in tmp_path: its console
    script's own process (`process`), or its main here (the checks need no process of their
    own, and this one has torch loaded already); and the --out folder."""
    path = tmp_path / "check.yaml"
    path.write_text(SWEEP.format(key=key, values=values))
    out = tmp_path / "out"
    argv = [str(path), "--out", str(out), *(["--dry-run"] if dry_run else []), *extra]
    if process:
        proc = subprocess.run(
            [sys.executable, "-m", "attnlab.cli.sweep", *argv],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
        return (proc.returncode, proc.stdout, proc.stderr), out
    from attnlab.cli import sweep

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with redirect_stdout(io.StringIO()) as stdout, redirect_stderr(io.StringIO()) as stderr:
            code = sweep.main(argv)
    finally:
        os.chdir(cwd)
    return (code, stdout.getvalue(), stderr.getvalue()), out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "values", "extra", "dry_run", "expected"),
    [
        (
            "model.norm_positon", "[pre, post]", [], True,
            "4 of 4 trials (000-003): model.norm_positon is not a key of model; "
            "did you mean model.norm_position?",
        ),
        (
            "model.norm_position", "[pre, middle]", [], False,
            "2 of 4 trials (002-003): model.norm_position='middle' is not valid; "
            "expected one of: pre, post",
        ),
        (
            "model.norm_position", "[pre, post]", ["model.n_head=3"], True,
            "4 of 4 trials (000-003): model.n_head is not a key of model; "
            "did you mean model.n_heads?",
        ),
    ],
    ids=["typo_in_swept_key", "bad_value_in_one_arm", "bad_extra_override"],
)  # fmt: skip
def test_a_bad_trial_stops_the_sweep_before_any_starts(
    tmp_path, key, values, extra, dry_run, expected
):
    """The typo through the console script's own process (its exit code and stderr as a shell
    sees them; no trial's config builds, so no torch); the others through its main."""
    process = key == "model.norm_positon"
    (code, _, stderr), out = _sweep(tmp_path, key, values, *extra, dry_run=dry_run,
                                    process=process)  # fmt: skip
    assert code == 2, stderr
    errors = [ln for ln in stderr.splitlines() if ln]
    assert errors[0] == f"attnlab-sweep: error: {expected}"
    assert errors[1].startswith("attnlab-sweep: no trial started (exit 2)") and len(errors) == 2
    assert "Traceback" not in stderr
    assert not out.exists() and not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_a_sweep_whose_trials_are_fine_says_so_in_its_dry_run(tmp_path):
    (code, stdout, stderr), out = _sweep(tmp_path, "model.norm_position", "[pre, post]")
    assert code == 0, stderr
    assert "every trial's config checked: 4 would start" in stdout
    assert not out.exists()


def test_only_trials_that_run_attnlab_train_are_checked_and_problems_are_grouped():
    assert runs_attnlab_train(["/venv/bin/attnlab-train", "a=1"])
    assert runs_attnlab_train(["/usr/bin/env", "python", "-m", "attnlab.cli.train"])
    assert not runs_attnlab_train(["python", "my_script.py", "lr=1"])

    class T:
        def __init__(self, i):
            self.index, self.label = i, f"{i:03d}-x"

    lines = problem_lines([([T(0), T(1), T(2), T(5)], "bad"), ([T(7)], "worse")], 8)
    assert lines == ["4 of 8 trials (000-002, 005): bad", "trial 007-x: worse"]


def test_the_sweep_files_baseline_stays_out_of_the_w_and_b_config():
    from attnlab.sweeps.wandb_agents import server_config

    spec = {"name": "h", "method": "grid", "program": "attnlab-train", "baseline": {"a": 1}}
    spec |= {"parameters": {"a": {"values": [1, 2]}}, "command": ["${program}", "${args}"]}
    assert "baseline" not in server_config(spec) and spec["baseline"] == {"a": 1}
