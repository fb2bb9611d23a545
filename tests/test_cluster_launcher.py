"""attnlab-sweep --launcher: each trial (and a study's evaluation) a cluster job through submitit.
SLURM itself is not here: `--launcher submitit_local` runs the same path (the job pickled, run by
submitit's job process, the trial a child of it) as local processes. Checked: a study ends with
the choice and metrics it has run locally, a job's cancel reaches its trial as the signal, the
requeue hook stops the trial and resubmits the same command, and bad arguments are one line,
exit 2, nothing written."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from attnlab.cli import sweep
from attnlab.sweeps import cluster
from test_study import SMALL, _outcome, _study

pytest.importorskip("submitit", reason="--launcher needs submitit (the [slurm] extra)")


def _comparable(outcome: dict) -> dict:
    """A study's choice and per-trial statuses and metrics (not the attempt counts)."""
    trials = {k: (status, metrics) for k, (status, metrics, _) in outcome["trials"].items()}
    return {"choice": outcome["choice"], "trials": trials}


@pytest.mark.slow
def test_a_study_as_submitit_jobs_ends_as_the_same_study_run_locally(tmp_path, capsys):
    here, jobs = tmp_path / "here", tmp_path / "jobs"
    path = _study(tmp_path)
    assert sweep.main([str(path), "--out", str(here)]) == 0
    launcher = ["--launcher", "submitit_local", "--launcher-opt", "timeout_min=5"]
    assert sweep.main([str(path), "--out", str(jobs), "--parallel", "2", *launcher]) == 0
    assert _comparable(_outcome(jobs)) == _comparable(_outcome(here))
    log = (jobs / "seeds" / "arm_b-seed_2" / "trial.log").read_text()
    assert log.startswith("$ ") and "# submitit_local job " in log  # the command, then its job
    assert (jobs / ".submitit").is_dir()  # submitit's job files, in the sweep's folder
    record = json.loads((jobs / "seeds" / "arm_b-seed_2" / "results.json").read_text())
    assert record["job_type"] == "seeds"  # the runner's environment reached the trial


def _wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


SLEEPER = """
import signal, sys, time, pathlib
out = pathlib.Path(sys.argv[1])
def stop(signum, frame):
    out.with_suffix(".signal").write_text(signal.Signals(signum).name)
    sys.exit(4)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
out.write_text("started")
time.sleep(120)
"""


@pytest.mark.slow
def test_a_cancelled_job_passes_the_signal_to_its_trial(tmp_path):
    """The runner stops a job (Ctrl-C, a SIGTERM to attnlab-sweep) by cancelling it; the job
    passes the signal on to the trial, which ends as an interrupted run (exit 4) would."""
    launcher = cluster.ClusterLauncher("submitit_local", tmp_path)
    mark = tmp_path / "trial.started"
    job = launcher.launch([sys.executable, "-c", SLEEPER, str(mark)], {}, tmp_path / "trial.log")
    _wait_for(mark)
    assert job.poll() is None
    job.signal_group(signal.SIGINT)
    assert job.wait() == 4
    assert mark.with_suffix(".signal").read_text() == "SIGINT"
    assert "# submitit_local job" in (tmp_path / "trial.log").read_text()


RESUMER = """
import signal, sys, time, pathlib
out = pathlib.Path(sys.argv[1])
attempt = len(out.read_text().split()) + 1 if out.exists() else 1
out.write_text(out.read_text() + " started" if out.exists() else "started")
if attempt > 1:
    sys.exit(0)  # the requeued run: resumed, it ends
def stop(signum, frame):
    out.with_suffix(".signal").write_text(signal.Signals(signum).name)
    sys.exit(4)
signal.signal(signal.SIGTERM, stop)
time.sleep(120)
"""


@pytest.mark.slow
def test_a_job_near_its_time_limit_stops_its_trial_and_requeues_the_same_command(tmp_path):
    """submitit's time-limit signal (here 55 s before a 1-minute limit, so after 5 s) reaches
    the job while it waits for its trial: the trial gets SIGTERM (it would save a checkpoint),
    the job is requeued with the same command, and the rerun ends the trial."""
    launcher = cluster.ClusterLauncher("submitit_local", tmp_path, options={"timeout_min": 1})
    launcher.executor._executor.parameters["signal_delay_s"] = 55  # (AutoExecutor does not pass it)
    mark = tmp_path / "trial.started"
    job = launcher.launch([sys.executable, "-c", RESUMER, str(mark)], {}, tmp_path / "trial.log")
    assert job.wait() == 0
    assert mark.read_text().split() == ["started", "started"]  # two attempts: requeued once
    assert mark.with_suffix(".signal").read_text() == "SIGTERM"


def test_a_job_passes_each_stop_signal_on_once(tmp_path, monkeypatch):
    """Locally a Ctrl-C reaches the job twice (the terminal's, then the cancel's): the trial
    gets it once (a second SIGINT would stop Lightning at once, without its checkpoint)."""
    sent = []
    monkeypatch.setattr(cluster, "signal_group", lambda pid, sig: sent.append(sig))
    job = cluster.TrialCommand(["x"], {}, str(tmp_path / "log"))
    job._passed, job._proc = set(), type("P", (), {"pid": 1, "poll": lambda self: None})()
    for sig in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
        job._pass_on(sig, None)
    assert sent == [signal.SIGINT, signal.SIGTERM]


def test_a_refused_submission_is_a_failed_trial_not_a_crash(tmp_path, monkeypatch):
    """sbatch's refusal (a QOS limit, a timeout) reaches the runner as OSError: the trial is
    recorded failed with the cluster's answer and the sweep goes on."""
    launcher = cluster.ClusterLauncher("submitit_local", tmp_path)

    def refuse(*args, **kwargs):
        raise RuntimeError("sbatch: error: QOSMaxSubmitJobPerUserLimit")

    monkeypatch.setattr(launcher.executor, "submit", refuse)
    with pytest.raises(OSError, match="submitit_local refused the job: sbatch: error: QOSMax"):
        launcher.launch(["true"], {}, tmp_path / "trial.log")


def test_the_requeue_hook_stops_the_trial_and_resubmits_its_command(tmp_path):
    """submitit's checkpoint hook (near the time limit): SIGTERM to the trial (Lightning saves
    and records `interrupted`), then the same command resubmitted, which resumes the trial."""
    import subprocess

    mark = tmp_path / "trial.started"
    command = [sys.executable, "-c", SLEEPER, str(mark)]
    job = cluster.TrialCommand(command, {"X": "1"}, str(tmp_path / "trial.log"))
    job._proc = subprocess.Popen(command, start_new_session=True)
    _wait_for(mark)
    again = job.checkpoint()
    assert job._proc.returncode == 4 and mark.with_suffix(".signal").read_text() == "SIGTERM"
    assert again.function.command == command and again.function.env == {"X": "1"}
    assert again.function._proc is None


def test_a_jobs_environment_is_the_nodes_with_the_runners_additions(tmp_path, monkeypatch):
    """Only what the runner adds goes with a job; SLURM's task layout is hidden from the trial
    (Lightning would otherwise expect one SLURM task per GPU)."""
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("ATTNLAB_TEST_NODE", "node")
    out = tmp_path / "env.json"
    dump = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    code = cluster.TrialCommand([sys.executable, "-c", dump], {"EXTRA": "1"}, str(tmp_path / "l"))()
    seen = json.loads(out.read_text())
    assert code == 0 and seen["EXTRA"] == "1" and seen["ATTNLAB_TEST_NODE"] == "node"
    assert "SLURM_NTASKS" not in seen


@pytest.mark.parametrize(
    "args, message",
    [
        (["--launcher", "submitit_local", "--gpus", "0"], "--launcher submitit_local with --gpus"),
        (["--launcher-opt", "timeout_min=5"], "--launcher-opt needs --launcher slurm or"),
        (["--launcher", "submitit_local", "--launcher-opt", "timeout"], "--launcher-opt timeout: "
         "expected KEY=VALUE"),
        (["--launcher", "submitit_local", "--launcher-opt", "tiemout_min=5"], "--launcher-opt "
         "tiemout_min: not a submitit parameter (did you mean timeout_min?)"),
        (["--launcher", "slurm"], "--launcher slurm: no SLURM here (srun not found)"),
        (["--launcher", "submitit_local", "--launcher-opt", "nodes=2"], "--launcher-opt nodes=2: "
         "a trial is one task on one node"),
    ],
    ids=["gpus", "opt-alone", "opt-form", "opt-name", "no-slurm", "nodes"],
)  # fmt: skip
def test_bad_launcher_arguments_are_one_line_exit_2_and_write_nothing(
    tmp_path, capsys, monkeypatch, args, message
):
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun on it, here or on a SLURM machine
    out = tmp_path / "out"
    assert sweep.main([str(_study(tmp_path)), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_a_search_refuses_the_cluster_launcher_in_one_line(tmp_path, capsys):
    spec = {**SMALL, "method": "bayes", "parameters": {"lr": {"min": 1e-4, "max": 1e-1}},
            "run_cap": 2}  # fmt: skip
    for key in ("tune", "seeds", "primary"):
        spec.pop(key)
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out), "--launcher", "submitit_local"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a search runs its trials locally" in err[0], err
    assert not out.exists()
