"""attnlab-sweep's searches (bayes / random with Optuna): the sweep file's distributions and
Hyperband, bad keys, a study in a real SQLite or journal file shared by two worker processes,
resumption after a killed worker, per-arm studies, and the pruned status of a real run."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

optuna = pytest.importorskip("optuna", reason="the search needs the [optuna] extra")

from attnlab.cli import sweep  # noqa: E402
from attnlab.runs.optuna_link import TrialLink, open_storage  # noqa: E402
from attnlab.sweeps import search_space  # noqa: E402
from attnlab.sweeps.search import default_storage  # noqa: E402
from attnlab.sweeps.spec import SweepError, load_sweep  # noqa: E402
from attnlab.sweeps.study import ATTR_RETRY_OF, counted, open_studies  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "fixtures" / "fake_search_trial.py"
SWEEP = [sys.executable, "-m", "attnlab.cli.sweep"]


def search_file(tmp_path: Path, knobs=(), **changes) -> Path:
    """A bayes sweep file whose trials run tests/fixtures/fake_search_trial.py."""
    config = {
        "name": "fake_search",
        "program": str(FAKE),
        "method": "bayes",
        "metric": {"name": "val/nll", "goal": "minimize"},
        "run_cap": 4,
        "parameters": {"lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1}},
        "command": ["${env}", "${interpreter}", "${program}", "${args_no_hyphens}", *knobs],
        **changes,
    }
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def trials_of(storage: str, name: str = "fake_search") -> list:
    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    return study.get_trials(deepcopy=False)


# --- the sweep file -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"values": ["pre", "post"]},
         optuna.distributions.CategoricalDistribution(["pre", "post"])),
        ({"min": 1, "max": 8}, optuna.distributions.IntDistribution(1, 8)),
        ({"distribution": "uniform", "min": 0.1, "max": 0.5},
         optuna.distributions.FloatDistribution(0.1, 0.5)),
        ({"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2},
         optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)),
        ({"distribution": "log_uniform", "min": -4, "max": 0},
         optuna.distributions.FloatDistribution(math.exp(-4), 1.0, log=True)),
        ({"distribution": "inv_log_uniform", "min": 1, "max": 3},
         optuna.distributions.FloatDistribution(math.exp(-3), math.exp(-1), log=True)),
        ({"distribution": "inv_log_uniform_values", "min": 0.01, "max": 0.1},
         optuna.distributions.FloatDistribution(0.01, 0.1, log=True)),
        ({"distribution": "q_uniform", "min": 0, "max": 300, "q": 50},
         optuna.distributions.FloatDistribution(0, 300)),
    ],
)  # fmt: skip
def test_each_wandb_form_becomes_the_optuna_distribution_of_the_same_law(spec, expected):
    config = {"method": "bayes", "parameters": {"x": spec, "seed": {"value": 3}}}
    searched, fixed = search_space.distributions(config)
    assert searched == {"x": expected} and fixed == {"seed": 3}


def test_q_forms_pass_values_rounded_as_wandb_rounds():
    config = {"parameters": {"w": {"distribution": "q_uniform", "min": 0, "max": 300, "q": 50},
                             "b": {"distribution": "q_log_uniform_values", "min": 1, "max": 64,
                                   "q": 0.5}}}  # fmt: skip
    values = search_space.run_values(config, {"w": 124.9, "b": 3.3}, {})
    assert values == {"w": 100, "b": 3.5} and isinstance(values["w"], int)


def test_log_uniform_values_draws_are_log_uniform():
    """Seeded draws through Optuna: inside the bounds, half below the geometric mean."""
    config = {"parameters": {"lr": {"distribution": "log_uniform_values", "min": 1e-4,
                                    "max": 1e-2}}}  # fmt: skip
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    draws = [study.ask(search_space.distributions(config)[0]).params["lr"] for _ in range(400)]
    assert min(draws) >= 1e-4 and max(draws) <= 1e-2
    below = sum(d < 1e-3 for d in draws) / len(draws)
    assert 0.43 < below < 0.57  # uniform in the values would put 9% below 1e-3


def test_hyperband_bands_as_wandb_documents_them():
    min_iter = search_space.pruning({"early_terminate": {"type": "hyperband", "min_iter": 3}})
    assert min_iter.bands == (3, 9, 27, 81) and min_iter.last_step is None
    assert (min_iter.min_resource, min_iter.reduction_factor) == (3, 3)
    max_iter = search_space.pruning(
        {"early_terminate": {"type": "hyperband", "max_iter": 27, "s": 2, "eta": 3}}
    )
    assert max_iter.bands == (3, 9) and max_iter.last_step == 9


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"early_terminate": {"type": "envelope"}}, "early_terminate.type must be 'hyperband'"),
        ({"early_terminate": {"type": "hyperband", "min_iter": 3, "eta": 2.5}},
         "early_terminate.eta=2.5"),
        ({"early_terminate": {"type": "hyperband", "min_iter": 3, "mni_iter": 1}},
         "early_terminate.mni_iter is not a hyperband key"),
        ({"early_terminate": {"type": "hyperband", "max_iter": 27}}, "early_terminate.s=0"),
        ({"early_terminate": {"type": "hyperband"}}, "needs min_iter, or max_iter and s"),
        ({"metric": {"name": "val/nll", "goal": "lowest"}}, "metric.goal='lowest'"),
        ({"metric": {"nmae": "val/nll"}}, "needs metric: {name"),
        ({"run_cap": 0}, "run_cap=0"),
        ({"runcap": 4}, "key 'runcap' is not a sweep key"),
        ({"arms": ["lr"]}, "arms names 'lr'"),
        ({"parameters": {"lr": {"distribution": "normal", "mu": 0, "sigma": 1}}},
         "parameters.lr.distribution='normal' is unbounded"),
        ({"parameters": {"lr": {"distribution": "log_uniform_values", "min": 0, "max": 1}}},
         "parameters.lr: distribution 'log_uniform_values' needs min > 0"),
        ({"parameters": {"lr": {"values": [1, 2], "probabilities": [0.5, 0.5]}}},
         "parameters.lr.probabilities"),
        ({"parameters": {"lr": {"values": [[1, 2], [3]]}}}, "parameters.lr.values: a search"),
        ({"method": "bayesian"}, "method='bayesian'"),
        ({"parameters": {"lr": {"distribution": "log_uniform_values", "min": "1e-4", "max": 1}}},
         "parameters.lr.min='1e-4' is not a number"),
        ({"metric": {"name": "val/nll", "target": "low"}}, "metric.target='low' is not a number"),
        ({"run_cap": None}, "needs run_cap in the file or --count"),
    ],
)  # fmt: skip
def test_a_bad_search_key_is_one_line_exit_2_before_anything_runs(change, message, tmp_path,
                                                                   capsys):  # fmt: skip
    path = search_file(tmp_path, **change)
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--count", "0"], "--count 0 is not valid"),
        (["--storage", "notaurl"], "--storage: cannot open the study there"),
        (["--storage", "postgresql+nodriver://u@h/db"], "--storage: cannot open the study there"),
        (
            ["--storage", "postgresql+pg8000://u@h/db"],
            "its driver pg8000 (or use postgresql+psycopg",
        ),
    ],
)
def test_a_bad_count_or_storage_is_one_line_exit_2_and_nothing_written(args, message, tmp_path,
                                                                        capsys):  # fmt: skip
    out = tmp_path / "out"
    assert sweep.main([str(search_file(tmp_path)), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()  # a refused storage leaves no empty folder behind


def test_an_out_folder_of_another_sweep_is_refused_before_anything_runs(tmp_path, capsys):
    """--out holding another sweep (its sweep.yaml) is one line and exit 2, for a search and
    for a grid, --dry-run included; nothing in the folder changes. The same file resumes it."""
    out = tmp_path / "out"
    out.mkdir()
    held = "name: my_norm_search\nmethod: grid\nparameters: {seed: {values: [1]}}\n"
    (out / "sweep.yaml").write_text(held)
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "name: my_grid\nmethod: grid\nprogram: attnlab-train\n"
        "parameters: {seed: {values: [1, 2]}}\n"
    )
    for args in ([str(search_file(tmp_path))], [str(grid)], [str(grid), "--dry-run"]):
        assert sweep.main([*args, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--out {out} holds another sweep ('my_norm_search'" in err[0]
    assert sorted(p.name for p in out.iterdir()) == ["sweep.yaml"]
    assert (out / "sweep.yaml").read_text() == held
    from attnlab.cli.sweep import refuse_foreign_out
    from attnlab.sweeps.spec import load_sweep

    config = load_sweep(grid)
    own = tmp_path / "own"
    own.mkdir()
    (own / "sweep.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    refuse_foreign_out(own, config)  # its own folder: resumable, no error


def test_settle_tells_what_the_run_said_and_a_taken_trial_is_not_an_error():
    from attnlab.sweeps.study import renew, settle

    study = optuna.create_study()
    completed_late = study.ask()  # completed just as Ctrl-C came: kept, not run again
    assert settle(study, completed_late, "completed", 0.5, interrupted=True) == "COMPLETE"
    no_metric = study.ask()  # a typo in metric.name: failed, and said
    assert settle(study, no_metric, "completed", None, interrupted=False) == "NO_METRIC"
    diverged = study.ask()
    assert settle(study, diverged, "diverged", None, interrupted=False) == "PRUNED"
    stopped = study.ask()
    assert settle(study, stopped, "interrupted", None, interrupted=True) == "FAIL"
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL", "PRUNED", "FAIL", "WAITING"]
    assert study.trials[4].user_attrs[ATTR_RETRY_OF] == 3
    assert not renew(stopped)  # ended: its worker stops the run
    assert settle(study, stopped, "completed", 0.1, interrupted=False) == "TAKEN"


def test_the_dry_run_checks_every_value_a_search_can_draw():
    """Every categorical choice and integer, a float range's bounds, in every combination; past
    CHECKED_COMBINATIONS each value in turn beside the others' first."""
    dist = optuna.distributions
    searched = {
        "h": dist.IntDistribution(1, 4),
        "norm": dist.CategoricalDistribution(["pre", "post"]),
        "lr": dist.FloatDistribution(1e-4, 1e-2, log=True),
    }
    points = search_space.check_points(searched)
    assert len(points) == 4 * 2 * 2
    assert {p["h"] for p in points} == {1, 2, 3, 4} and {p["lr"] for p in points} == {1e-4, 1e-2}
    assert {"h": 3, "norm": "post", "lr": 1e-4} in points  # a value beside another's
    assert search_space.checked_values(dist.IntDistribution(0, 400, step=50)) == list(
        range(0, 401, 50)
    )
    assert search_space.checked_values(dist.IntDistribution(1, 1000)) == [1, 1000]
    wide = {k: dist.IntDistribution(1, 8) for k in "abc"}  # 512 combinations
    points = search_space.check_points(wide)
    assert len(points) == 1 + 3 * 7 and {"a": 1, "b": 5, "c": 1} in points


@pytest.mark.slow
def test_a_search_that_can_draw_an_invalid_config_is_refused_by_its_dry_run(tmp_path, capsys):
    """model.n_heads searched over 1-8 with d_model 32: the dry run names the values that
    cannot build (3, 5, 6, 7), one line each, exit 2, nothing written."""
    config = {
        "name": "heads_search",
        "method": "bayes",
        "metric": {"name": "val/nll", "goal": "minimize"},
        "run_cap": 6,
        "command": ["attnlab-train", "debug=tiny", "logger=none", "${args_no_hyphens}"],
        "parameters": {
            "model.n_heads": {"distribution": "int_uniform", "min": 1, "max": 8},
            "scheduler.peak_lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2},
        },
    }
    path = tmp_path / "heads_search.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 5, err
    for line, h in zip(err, (3, 5, 6, 7), strict=False):
        assert line.startswith(
            f"attnlab-sweep: error: the search can draw model.n_heads={h}, scheduler.peak_lr="
        ), line
        assert f"model.d_model=32 is not divisible by model.n_heads={h}" in line, line
    assert "no trial started" in err[-1]
    assert not out.exists()


def test_dry_run_creates_no_study_and_the_wandb_dry_run_is_the_file(tmp_path, capsys):
    path = search_file(tmp_path, early_terminate={"type": "hyperband", "min_iter": 1})
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "bayes search by Optuna (TPE)" in printed and "validations 1, 3, 9" in printed
    assert not out.exists()
    assert sweep.main([str(path), "--wandb", "--dry-run"]) == 0
    shown = capsys.readouterr().out.split("sweep config for W&B:\n", 1)[1].split("\nagent 0:")[0]
    sent = yaml.safe_load(shown)
    original = load_sweep(path)
    assert sent["command"][: len(original["command"])] == original["command"]
    assert {k: v for k, v in sent.items() if k != "command"} == {
        k: v for k, v in original.items() if k != "command"
    }


# --- running a search -----------------------------------------------------------------------


ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


def _run(args, timeout=240):
    return subprocess.run(
        [*SWEEP, *args], capture_output=True, text=True, timeout=timeout, env=ENV, cwd=REPO
    )


def _start(args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([*SWEEP, *args], cwd=REPO, env=ENV, text=True, **kwargs)


def _first_attempt(out: Path) -> Path:
    """attempts.log of the first trial that started (waits for it)."""
    deadline = time.monotonic() + 60
    while not list(out.glob("*/attempts.log")) and time.monotonic() < deadline:
        time.sleep(0.1)
    [attempts] = list(out.glob("*/attempts.log"))
    return attempts


@pytest.mark.slow
def test_two_worker_processes_share_one_journal_study_and_run_each_trial_once(tmp_path):
    path = search_file(tmp_path, knobs=["fake.sleep=0.5"], run_cap=6)
    storage = f"journal:{tmp_path / 'study.log'}"
    out = tmp_path / "out"
    args = [str(path), "--out", str(out), "--storage", storage]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    procs = [_start(args, **pipes) for _ in range(2)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    trials = counted(trials_of(storage))
    assert len(trials) == 6 and all(t.state.name == "COMPLETE" for t in trials)
    run_dirs = [out / t.user_attrs["attnlab:run_dir"] for t in trials]
    assert len(set(run_dirs)) == 6
    for run_dir in run_dirs:  # each run once, with its own trial's link
        assert len((run_dir / "attempts.log").read_text().split()) == 1
        link = json.loads((run_dir / "results.json").read_text())["link"]
        assert link["ATTNLAB_OPTUNA_STORAGE"] == storage
    owners = {t.user_attrs["attnlab:owner"] for t in trials}
    assert len(owners) == 2, "both processes ran trials"
    assert len({t.params["lr"] for t in trials}) == 6


@pytest.mark.slow
def test_killed_worker_rerun_continues_the_study_and_retries_its_trial(tmp_path):
    hang = tmp_path / "hang"
    hang.touch()
    path = search_file(tmp_path, knobs=[f"fake.hang={hang}"], run_cap=3)
    out = tmp_path / "out"
    proc = _start([str(path), "--out", str(out)], stdout=subprocess.DEVNULL)
    attempts = _first_attempt(out)
    orphan = int(attempts.read_text().split()[0])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    storage = default_storage(out)
    assert [t.state.name for t in trials_of(storage)] == ["RUNNING"]
    hang.unlink()
    done = _run([str(path), "--out", str(out)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "its worker (pid" in done.stdout and "resumes its run" in done.stdout
    trials = trials_of(storage)
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE", "COMPLETE"]
    assert trials[1].user_attrs[ATTR_RETRY_OF] == 0 and trials[1].params == trials[0].params
    assert trials[1].user_attrs["attnlab:run_dir"] == attempts.parent.name
    assert len(attempts.read_text().split()) == 2  # the same run directory, run again
    with pytest.raises(ProcessLookupError):
        os.kill(orphan, 0)  # the killed worker's run was stopped by the rerun
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"completed": 3}
    assert "best trial" in done.stdout and (out / "search.md").exists()


@pytest.mark.slow
def test_ctrl_c_enqueues_the_running_trial_and_prints_the_resume_command(tmp_path):
    hang = tmp_path / "hang"
    hang.touch()
    path = search_file(tmp_path, knobs=[f"fake.hang={hang}"], run_cap=2)
    out = tmp_path / "out"
    proc = _start([str(path), "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _first_attempt(out)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 4, output
    assert "resume: attnlab-sweep" in output and f"--out {out}" in output
    states = [t.state.name for t in trials_of(default_storage(out))]
    assert states == ["FAIL", "WAITING"]
    assert json.loads((out / "summary.json").read_text())["counts"] == {"interrupted": 1}
    assert "Trials: 1 (1 interrupted)." in (out / "search.md").read_text()


@pytest.mark.slow
def test_a_changed_search_space_is_refused_on_resume(tmp_path):
    config = load_sweep(search_file(tmp_path))
    config["name"] = "fake_search"
    storage = default_storage(tmp_path)
    open_studies(config, storage, ["fake_search"], seed=0)
    config["parameters"]["lr"]["max"] = 1.0
    with pytest.raises(SweepError, match="created from another search space"):
        open_studies(config, storage, ["fake_search"], seed=0)


# --- pruning inside a real run ----------------------------------------------------------------


def _better_study(storage: str, min_resource: int, tell: bool = True):
    """A study with a trial far better than any run at every step (0.0), recorded at each rung
    (completed, unless tell=False)."""
    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=min_resource, reduction_factor=3)
    study = optuna.create_study(storage=storage, study_name="s", pruner=pruner)
    better = study.ask()
    for step in range(6):
        better.report(0.0, step)
        assert not better.should_prune()  # (should_prune records it at each rung)
    if tell:
        study.tell(better, 0.0)
    return study


def _linked_run(compose, tiny_run, tmp_path, monkeypatch, storage, min_resource) -> dict:
    """A real 8-step run validating every 2 steps, reporting to trial 1 of study `s`."""
    from attnlab.pipeline.train import train

    trial = optuna.load_study(study_name="s", storage=storage).ask()
    pruner = {"min_resource": min_resource, "reduction_factor": 3, "last_step": None}
    for key, value in (
        TrialLink(storage, "s", trial.number, "val/nll", pruner).environment().items()
    ):
        monkeypatch.setenv(key, value)
    ovs = [*tiny_run, "logger=none", f"paths.run_dir={tmp_path / 'run'}", "trainer.max_steps=8",
           "trainer.val_check_interval=2"]  # fmt: skip
    return train(compose(ovs), ovs)


@pytest.mark.slow
def test_a_run_pruned_only_before_its_last_validation(compose, tiny_run, tmp_path, monkeypatch):
    """A rung at the run's last validation (the 4th: index 3) does not prune it: it completes."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    _better_study(storage, min_resource=3)
    results = _linked_run(compose, tiny_run, tmp_path, monkeypatch, storage, min_resource=3)
    assert results["status"] == "completed" and "pruned_at_validation" not in results["search"]
    assert "test/nll" in results["metrics"]


@pytest.mark.slow
def test_a_real_run_below_the_rung_ends_pruned_with_its_checkpoint(compose, tiny_run, tmp_path,
                                                                   monkeypatch):  # fmt: skip
    """An earlier trial far better at every step: successive halving (min_resource 1) prunes
    the run at its second validation; results.json says so, exit code 0, no test pass."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    _better_study(storage, min_resource=1)
    results = _linked_run(compose, tiny_run, tmp_path, monkeypatch, storage, min_resource=1)
    run_dir = tmp_path / "run"
    assert results["status"] == "pruned"
    assert results["search"] == {"study": "s", "trial": 1, "validations": 2,
                                 "pruned_at_validation": 1}  # fmt: skip
    assert results["steps"] == 4 and "test/nll" not in results["metrics"]
    reported = optuna.load_study(study_name="s", storage=storage).trials[1].intermediate_values
    assert sorted(reported) == [0, 1]  # the validation index, the sanity check not counted
    assert (run_dir / "checkpoints" / "last.ckpt").resolve().name.endswith("step=4.ckpt")
    from attnlab.runs.status import exit_code

    assert exit_code([results["status"]]) == 0


@pytest.mark.slow
def test_no_trial_is_pruned_before_one_of_its_study_has_completed(compose, tiny_run, tmp_path,
                                                                   monkeypatch):  # fmt: skip
    """The same far better trial, but still running (not told): nothing in the study has
    completed, so the run is never pruned and completes (every search has one trial run to its
    end); told, it prunes the run (the test above)."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = _better_study(storage, min_resource=1, tell=False)
    assert not study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    results = _linked_run(compose, tiny_run, tmp_path, monkeypatch, storage, min_resource=1)
    assert results["status"] == "completed" and "pruned_at_validation" not in results["search"]


@pytest.mark.slow
def test_each_arm_is_a_study_and_compare_reads_the_moved_search_folder(tmp_path, capsys):
    """A random search with two arms (norm) of 3 trials, 2 at a time: each arm is a study with
    its own cap, its value in every trial's command and its study in every trial's link. Then
    attnlab-compare on the search folder, moved: no arm statistics; each arm's trials ranked by
    the metric with their drawn values, every trial in search_trials.csv and against each
    searched parameter; importance not computed from 3 trials; --rerun-best 1 --seeds 3 writes
    per arm a grid over 3 seeds at its best trial's values, with the commands."""
    from attnlab.cli import compare

    params = {"norm": {"values": ["pre", "post"]},
              "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1}}  # fmt: skip
    path = search_file(tmp_path, arms=["norm"], run_cap=3, parameters=params, method="random",
                       knobs=["steps=10"])  # fmt: skip
    out = tmp_path / "out"
    # the search's own command-line overrides (the tiny recipe): a rerun must keep them
    done = _run([str(path), "--out", str(out), "--parallel", "2", "max_steps=120", "logger=none"])
    assert done.returncode == 0, done.stdout + done.stderr
    storage = default_storage(out)
    for arm in ("pre", "post"):
        trials = trials_of(storage, f"fake_search/norm_{arm}")
        assert len(trials) == 3 and all(t.state.name == "COMPLETE" for t in trials)
        for t in trials:
            results = json.loads(
                (out / t.user_attrs["attnlab:run_dir"] / "results.json").read_text()
            )
            assert f"norm={arm}" in results["overrides"]
            assert results["link"]["ATTNLAB_OPTUNA_STUDY"] == f"fake_search/norm_{arm}"
    moved = tmp_path / "moved"
    out.rename(moved)  # the default SQLite file is found beside search.json, wherever it is
    report = tmp_path / "report"
    assert compare.main([str(moved), "--out", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "fake_search/norm_pre: 3 trials (3 completed); best trial" in printed
    assert "no arm statistics for a search" in printed and "Welch" not in printed
    text = (report / "search.md").read_text()
    assert "Parameter importance (Optuna): not computed: 3 completed trials (it needs 10)" in text
    assert (report / "search_fake_search__norm_pre_history.png").exists()
    assert (report / "search_val_nll.png").exists()
    with open(report / "search_trials.csv") as f:
        trials = list(csv.DictReader(f))
    assert len(trials) == 6 and {t["arm"] for t in trials} == {"norm_pre", "norm_post"}
    for arm in ("norm_pre", "norm_post"):  # ranked: the fake's nll is least at lr = 10^-2.5
        mine = sorted((t for t in trials if t["arm"] == arm), key=lambda t: float(t["val/nll"]))
        shown = [ln.split() for ln in printed.splitlines() if ln.startswith(arm + " ")]
        assert [row[2] for row in shown] == [t["trial"] for t in mine]
    assert (
        compare.main([str(moved), "--out", str(report), "--rerun-best", "1", "--seeds", "3"]) == 0
    )
    files = sorted((report / "rerun_best").glob("*.yaml"))
    assert [f.name for f in files] == ["fake_search_rerun_norm_post_1.yaml",
                                       "fake_search_rerun_norm_pre_1.yaml"]  # fmt: skip
    rerun = yaml.safe_load(files[0].read_text())
    best = min((t for t in trials if t["arm"] == "norm_post"), key=lambda t: float(t["val/nll"]))
    assert rerun["method"] == "grid" and rerun["parameters"]["seed"] == {"values": [1, 2, 3]}
    assert rerun["parameters"]["lr"] == {"value": pytest.approx(float(best["lr"]))}
    assert rerun["parameters"]["norm"] == {"value": "post"}
    printed = capsys.readouterr().out
    assert f"attnlab-sweep {files[0]}" in printed
    # every rerun trial is the best trial's config but for the seed: the file's command and
    # the search's command-line overrides (they used to be dropped: a 1000-step "best")
    from attnlab.sweeps import expand_sweep

    best_run = json.loads((moved / best["run_dir"] / "results.json").read_text())
    without_seed = lambda overrides: sorted(  # noqa: E731
        o for o in overrides if not o.startswith(("seed=", "group=", "hydra."))
    )
    reruns = expand_sweep(files[0])
    assert [t.params["seed"] for t in reruns] == [1, 2, 3]
    for t in reruns:
        assert without_seed(t.overrides) == without_seed(best_run["overrides"])
    assert "max_steps=120" in without_seed(reruns[0].overrides)
    assert "runs: " in printed and "max_steps=120 logger=none" in printed
    assert compare.main([str(moved), "--plan", "0.5"]) == 2  # a search has no arms to size
    assert "--plan compares arms, and a search has none" in capsys.readouterr().err
    assert compare.main([str(moved), "--top", "0"]) == 2
    assert "--top 0: expected the number of trials shown per arm" in capsys.readouterr().err


def test_a_trial_claimed_on_another_host_without_its_lease_yet_is_not_stale():
    """A worker writes a trial's lease before its owner; a reader that finds an owner without a
    lease (claimed a moment ago) leaves the trial alone instead of running it a second time,
    and a lease that ran out is still stale."""
    import time
    from datetime import datetime
    from types import SimpleNamespace

    from attnlab.sweeps.study import ATTR_LEASE, ATTR_OWNER, stale_reason

    now = time.time()
    other = {ATTR_OWNER: "another-host:4242"}
    trial = SimpleNamespace(user_attrs=other, datetime_start=datetime.now())
    assert stale_reason(trial, now) is None
    trial.user_attrs = {**other, ATTR_LEASE: now + 60}
    assert stale_reason(trial, now) is None
    trial.user_attrs = {**other, ATTR_LEASE: now - 1}
    assert "has not renewed its lease" in stale_reason(trial, now)


def test_a_retried_trial_keeps_the_rungs_its_first_attempt_passed():
    """Successive halving (min_resource 1, eta 3: rungs at validations 1, 3, 9): a trial that
    passed rung 0, crashed and was taken back keeps its history and rung 0, so at its next
    validation the pruner judges rung 1 only. Without the carry (the control) the retry is
    judged at rung 0 again, with its later value, against the rung's competitors."""
    from optuna.pruners import _successive_halving as halving

    from attnlab.sweeps import study as studies_

    def make():
        pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
        study = optuna.create_study(pruner=pruner, sampler=optuna.samplers.RandomSampler(0))
        for value in (1.0, 2.0):  # two finished competitors through rung 0
            t = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1)})
            t.report(value + 1, 0)
            t.report(value, 1)
            t.should_prune()
            study.tell(t, value)
        first = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1)})
        first.report(1.5, 0)
        first.report(0.5, 1)  # the best at rung 0: passes it
        assert not first.should_prune()
        studies_.retry(study, first)
        return study, first

    study, first = make()
    searched = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1)}
    _, _, again = studies_.next_trial([study], [{}], 10, {}, lambda arm: searched)
    frozen = study.get_trials(deepcopy=False)[again.number]
    assert again.user_attrs[studies_.ATTR_RETRY_OF] == first.number
    assert frozen.intermediate_values == {0: 1.5, 1: 0.5}
    assert halving._get_current_rung(frozen) == 1
    assert halving._completed_rung_key(0).startswith(studies_.RUNG_PREFIX)
    again.report(0.45, 2)  # the next validation (below rung 1's step, 3): not judged
    assert not again.should_prune()

    control, _ = make()
    plain = control.ask(searched)  # the retry, asked without the carry
    plain.report(0.45, 2)
    frozen = control.get_trials(deepcopy=False)[plain.number]
    assert halving._get_current_rung(frozen) == 0
    plain.should_prune()  # judged at rung 0 again, with the later value
    frozen = control.get_trials(deepcopy=False)[plain.number]
    assert frozen.system_attrs[halving._completed_rung_key(0)] == 0.45


def _search_outcome(path: Path, out: Path, crash_at: list[int]) -> tuple[list, list[str]]:
    """Run the search to its end, rerunning the launcher each time the fake trial killed it;
    (each counted trial's (lr, state, value, last validation), the launchers' exit codes). A
    search without kills (crash_at []) runs in this process (attnlab-sweep's main), its trials
    given no crash plan (nothing there kills its parent), its study in a journal file (its
    trials open it in a third of SQLite's time)."""
    if not crash_at:
        storage = f"journal:{out.parent / f'{out.name}-study.log'}"
        code = sweep.main([str(path), "--out", str(out), "--storage", storage])
        return _outcome(storage), [code]
    plan = out.parent / f"{out.name}-crash.json"
    plan.write_text(json.dumps({"reports": 0, "at": crash_at}))
    codes = []
    for _ in range(len(crash_at) + 1):
        done = _run([str(path), "--out", str(out)])
        codes.append(done.returncode)
        if done.returncode == 0:
            break
    return _outcome(default_storage(out)), codes


def _outcome(storage: str) -> list:
    trials = counted(trials_of(storage))
    return [
        (t.params["lr"], t.state.name, t.value, max(t.intermediate_values, default=None))
        for t in trials
    ]


@pytest.mark.slow
def test_a_search_killed_twice_ends_as_the_uncrashed_search(tmp_path):
    """Hyperband over 6 trials of 6 validations (rungs at 1, 2, 4), one worker: the launcher
    (an attnlab-sweep process) is SIGKILLed in the middle of the first trial (before any has
    completed) and again in a later one (the 4th, just after the pruner stopped it at its second
    validation), and rerun each time (its study in the default SQLite file). The counted
    trials draw the same rates, end in the same states with the same values, and the best trial
    is the same as without kills (that search's study in a journal file): a taken-back trial
    keeps its rungs, its failed attempt competes nowhere, and draws are seeded by their index in
    the study."""
    path = tmp_path / "search.yaml"
    knobs = ["fake.sleep=0", "fake.steps=6"]
    outcomes = {}
    for name, crash_at in (("calm", []), ("crashed", [3, 20])):
        crash = [f"fake.crash={tmp_path / name}-crash.json"] if crash_at else []
        config = yaml.safe_load(
            search_file(tmp_path, knobs=[*knobs, *crash], run_cap=6,
                        early_terminate={"type": "hyperband", "min_iter": 1, "eta": 2})
            .read_text()
        )  # fmt: skip
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        outcomes[name] = _search_outcome(path, tmp_path / name, crash_at)
    (calm, calm_codes), (crashed, crashed_codes) = outcomes["calm"], outcomes["crashed"]
    assert calm_codes == [0] and crashed_codes == [-signal.SIGKILL, -signal.SIGKILL, 0]
    states = [state for _, state, _, _ in calm]
    assert "PRUNED" in states and states.count("COMPLETE") >= 2, calm  # the test tests pruning
    assert crashed == calm
    trials = trials_of(default_storage(tmp_path / "crashed"))
    assert [t.state.name for t in trials].count("FAIL") == 2  # both kills took a trial back

    def best(outcome):
        return min((v, lr) for lr, s, v, _ in outcome if s == "COMPLETE")

    assert best(crashed) == best(calm)


@pytest.mark.parametrize("blind", [True, False])
def test_a_retried_attempt_is_no_competitor_of_the_pruner(blind):
    """Successive halving (min_resource 1, eta 2; rung 0 at validation 1) over two finished
    trials (1.0, 2.0) and a retry carrying its failed attempt's rung 0 (0.5). A new trial at 0.8
    is second of four, so it goes on; were the failed attempt counted too (the control, Optuna's
    own pruner), it would be third of five and pruned."""
    from attnlab.runs.optuna_link import make_pruner
    from attnlab.sweeps import study as studies_

    spec = {"min_resource": 1, "reduction_factor": 2}
    pruner = make_pruner(spec) if blind else make_pruner(spec).pruner
    study = optuna.create_study(pruner=pruner, sampler=optuna.samplers.RandomSampler(0))
    searched = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1)}

    def validate(trial, value):
        trial.report(value + 1, 0)
        trial.report(value, 1)
        return trial.should_prune()

    for value in (1.0, 2.0):
        finished = study.ask(searched)
        validate(finished, value)
        study.tell(finished, value)
    attempt = study.ask(searched)
    assert not validate(attempt, 0.5)
    studies_.retry(study, attempt)
    _, _, again = studies_.next_trial([study], [{}], 10, {}, lambda arm: searched)
    assert again.user_attrs[studies_.ATTR_RETRY_OF] == attempt.number
    assert validate(study.ask(searched), 0.8) is not blind


def test_a_draw_index_is_unique_whatever_order_trials_are_taken_back_in():
    """Worker B creates trial 1 while worker A's retry of trial 0 (trial 2) is enqueued before B
    draws: B's index is 1, not 0 (trial 0's). Retries and trials over the cap never draw; a
    crash shifts no later index (trial 3 draws as the uncrashed search's trial 2 would)."""
    from types import SimpleNamespace

    from attnlab.sweeps.study import ATTR_OVER_CAP, draw_index

    def t(number, state, **attrs):
        return SimpleNamespace(number=number, state=SimpleNamespace(name=state), user_attrs=attrs)

    trials = [t(0, "FAIL"), t(1, "RUNNING"), t(2, "WAITING", **{ATTR_RETRY_OF: 0})]
    assert [draw_index(trials, n) for n in (0, 1)] == [0, 1]
    trials += [t(3, "RUNNING"), t(4, "FAIL", **{ATTR_OVER_CAP: True}), t(5, "RUNNING")]
    assert [draw_index(trials, n) for n in (3, 5)] == [2, 3]


@pytest.mark.slow
def test_the_last_validation_is_reported_never_judged_and_leaves_no_decision(tmp_path):
    """A run's last validation completes it: TrialReporter reports it, asks no pruner and writes
    no pruning decision, even where the pruner would stop it (here, far behind a finished trial);
    the same value one validation earlier is pruned, and the decision is written."""
    from attnlab.runs.optuna_link import ATTR_PRUNED_AT, TrialReporter, make_pruner

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    spec = {"min_resource": 1, "reduction_factor": 2, "last_step": None}
    study = optuna.create_study(study_name="s", storage=storage, pruner=make_pruner(spec))
    searched = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1)}
    for value in (0.1, 0.2):
        done = study.ask(searched)
        done.report(value, 0)
        done.report(value, 1)
        done.should_prune()
        study.tell(done, value)
    outcomes = {}
    for final in (True, False):
        trial = study.ask(searched)
        reporter = TrialReporter(TrialLink(storage, "s", trial.number, "val/nll", spec))
        outcomes[final] = (reporter.report(9.0, 0, final=False), reporter.report(9.0, 1, final))
        frozen = study.get_trials(deepcopy=False)[trial.number]
        outcomes[final] += (frozen.user_attrs.get(ATTR_PRUNED_AT),)
    assert outcomes[True] == (False, False, None)
    assert outcomes[False] == (False, True, 1)


def test_a_search_metric_no_trial_reports_is_refused_before_anything_runs(tmp_path, capsys):
    """sweeps/lr_search.yaml with `metric.name: val/nlll`: one line naming the key and the
    closest metric, exit 2, no folder (every trial used to train and end no_metric, exit 0)."""
    from attnlab.cli import sweep

    shipped = (REPO / "sweeps" / "lr_search.yaml").read_text()
    path = tmp_path / "search.yaml"
    path.write_text(shipped.replace("name: val/nll\n", "name: val/nlll\n"))
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out), "logger=none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "metric.name=val/nlll: no trial reports this metric (did you mean val/nll?)" in err
    assert not out.exists()


@pytest.mark.slow
def test_a_search_that_ends_with_no_trial_value_exits_non_zero(tmp_path):
    """Every trial completes without the search's metric (a program of one's own, so the metric
    cannot be checked up front): the search says so and exits 1, not 0."""
    path = search_file(tmp_path, run_cap=2, metric={"name": "val/other", "goal": "minimize"})
    done = _run([str(path), "--out", str(tmp_path / "out")])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no trial completed with val/other: the search has no value" in done.stderr
