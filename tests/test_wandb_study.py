"""attnlab-sweep STUDY --wandb: each batch of a study's trials a W&B sweep (a grid over `trial`)
run by agents, the trials written where a local study writes them. No W&B server here:
`wandb.sweep` saves the config it is given, and the agent is either a light stand-in
(tests/fixtures/fake_wandb_agent.py: the agent's command building, no failure counting) or
wandb's own agent against a stand-in server (tests/fixtures/wandb_agent_real.py). Checked: the
study ends with the choice and metrics it has run locally, diverged trials do not make wandb's
agent quit, each batch's sweep names exactly its trials, Ctrl-C stops the running trials and a
rerun sends only the rest, a sweep cancelled on W&B stops its trials (none left running), and a
study that could not reach W&B is refused in one line, exit 2, nothing written."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from attnlab.cli import sweep
from attnlab.sweeps import wandb_agents, wandb_stage
from attnlab.sweeps.wandb_trial import main as wrapper_main
from test_cluster_launcher import _comparable
from test_study import SMALL, _outcome, _study

AGENT = Path(__file__).resolve().parent / "fixtures" / "fake_wandb_agent.py"


REAL = Path(__file__).resolve().parent / "fixtures" / "wandb_agent_real.py"


def _server(tmp_path, monkeypatch, agent_script: Path) -> list[dict]:
    """wandb.sweep saves each config to <tmp>/server/<id>.json; the agents run agent_script."""
    import wandb

    server = tmp_path / "server"
    server.mkdir()
    created: list[dict] = []

    def create(config, project=None, entity=None):
        sweep_id = f"sweep{len(created) + 1}"
        created.append({**config, "_project": project, "_entity": entity})
        (server / f"{sweep_id}.json").write_text(json.dumps(config))
        return sweep_id

    def agent(sweep_id, count=None, project=None, entity=None):
        return [sys.executable, str(agent_script), str(server / f"{sweep_id}.json")]

    monkeypatch.setattr(wandb, "sweep", create)
    monkeypatch.setattr(wandb_agents, "agent_command", agent)
    monkeypatch.delenv("WANDB_MODE", raising=False)  # the study refuses W&B offline
    # the agents and the wrapper run attnlab from this checkout, as the trials do
    src = str(Path(sweep.__file__).resolve().parents[2])
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))
    )
    return created


def _ctrl_c_once(condition, after_s: float, timeout_s: float = 60) -> None:
    """A Ctrl-C to this process `after_s` after `condition()` first holds (or at the timeout),
    from a thread, while the test's main thread runs the study."""

    def interrupt():
        deadline = time.monotonic() + timeout_s
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(after_s)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()


@pytest.fixture
def fake_wandb(tmp_path, monkeypatch):
    return _server(tmp_path, monkeypatch, AGENT)


@pytest.fixture
def real_agent(tmp_path, monkeypatch):
    import wandb.apis.public.sweeps as server

    missing = [n for n in ("_sweep_with_runs", "_register_agent", "_agent_heartbeat")
               if not hasattr(server, n)]  # fmt: skip
    if missing:
        pytest.skip(f"the stand-in server replaces wandb's private {missing}, absent here")
    return _server(tmp_path, monkeypatch, REAL)


@pytest.mark.slow
def test_a_study_on_wandb_ends_as_the_same_study_run_locally(tmp_path, fake_wandb, capsys):
    here, there = tmp_path / "here", tmp_path / "there"
    path = _study(tmp_path)
    assert sweep.main([str(path), "--out", str(here)]) == 0
    assert sweep.main([str(path), "--out", str(there), "--wandb", "--parallel", "2"]) == 0
    assert _comparable(_outcome(there)) == _comparable(_outcome(here))
    # one sweep per batch: stage 1's grid (no extension or refinement in SMALL), stage 2's seeds
    names = [c["name"] for c in fake_wandb]
    assert names == ["tiny stage 1 (batch 1)", "tiny stage 2 (batch 1)"]
    tune, seeds = (c["parameters"]["trial"]["values"] for c in fake_wandb)
    assert sorted(tune) == sorted(p.name for p in (there / "tune").iterdir() if p.is_dir())
    reused = yaml.safe_load((there / "seeds" / "sweep.yaml").read_text())["reused_from_stage_1"]
    ran = {p.name for p in (there / "seeds").iterdir() if p.is_dir()} - set(reused)
    assert sorted(seeds) == sorted(ran) and reused  # a reused stage-1 run is not sent again
    for config in fake_wandb:
        assert config["method"] == "grid" and config["command"][-1] == "${args_no_hyphens}"
    log = (there / "seeds" / "arm_b-seed_2" / "trial.log").read_text()
    assert log.startswith("$ ") and "\n# W&B run run" in log  # the command, then its W&B run
    record = json.loads((there / "seeds" / "arm_b-seed_2" / "results.json").read_text())
    assert record["job_type"] == "seeds"  # the stage's environment reached the trial
    assert "on W&B: each batch of trials" in capsys.readouterr().out


@pytest.mark.slow
def test_ctrl_c_stops_the_running_trials_and_a_rerun_sends_only_the_rest(
    tmp_path, fake_wandb, monkeypatch
):
    calm, out = tmp_path / "calm", tmp_path / "out"
    path = _study(tmp_path)
    assert sweep.main([str(path), "--out", str(calm)]) == 0
    monkeypatch.setenv("FAKE_STUDY_SLEEP", "60")
    trials = out / "wandb" / "stage1-1" / "trials"

    _ctrl_c_once(lambda: len(list(trials.glob("*.json"))) >= 2, 0.5)  # both agents' trials run
    argv = [str(path), "--out", str(out), "--wandb", "--parallel", "2"]
    assert sweep.main(argv) == 4
    records = [json.loads(p.read_text()) for p in trials.glob("*.json")]
    assert len(records) == 2 and all(r["exit_code"] == 4 for r in records)  # stopped by SIGINT
    ended = [json.loads(p.read_text()) for p in (out / "tune").glob("*/results.json")]
    assert [(r["status"], r["signal"]) for r in ended] == [("interrupted", "SIGINT")] * 2
    assert not (out / "choice.json").exists()
    monkeypatch.delenv("FAKE_STUDY_SLEEP")
    assert sweep.main(argv) == 0
    assert _comparable(_outcome(out)) == _comparable(_outcome(calm))
    again = fake_wandb[1]["parameters"]["trial"]["values"]
    assert fake_wandb[1]["name"] == "tiny stage 1 (batch 2)" and len(again) == 4  # all 4 again


@pytest.mark.slow
def test_wandbs_own_agent_runs_every_trial_though_many_diverge(tmp_path, real_agent, monkeypatch):
    """wandb's agent stops after 3 failed runs in its first minute; a stage-1 grid diverges on
    purpose (here 4 of 8 trials): each still runs (the wrapper exits 0; the agents' own switch
    for that check is off here), and the study ends as it does locally."""
    monkeypatch.setattr(wandb_stage, "AGENT_ENV", {})
    spec = {**SMALL, "tune": {**SMALL["tune"], "values": [1.0e-3, 4.0e-3, 1.0, 2.0]}}
    path, here, there = _study(tmp_path, spec), tmp_path / "here", tmp_path / "there"
    assert sweep.main([str(path), "--out", str(here)]) == 0
    assert sweep.main([str(path), "--out", str(there), "--wandb", "--parallel", "1"]) == 0
    assert _comparable(_outcome(there)) == _comparable(_outcome(here))
    statuses = [
        json.loads(p.read_text())["status"] for p in (there / "tune").glob("*/results.json")
    ]
    assert sorted(statuses).count("diverged") == 4
    agent_log = (there / "wandb" / "stage1-1" / "agent-0.log").read_text()
    assert agent_log.count("Agent starting run with config") == 8  # wandb's own agent ran them


@pytest.mark.slow
def test_a_sweep_cancelled_on_wandb_stops_its_trials(tmp_path, real_agent, monkeypatch):
    """The server's `exit` (a sweep cancelled on W&B's page) makes wandb's agent SIGKILL its
    runs, the wrappers; each trial gets a SIGTERM as its wrapper dies and ends interrupted."""
    monkeypatch.setenv("FAKE_STUDY_SLEEP", "60")
    monkeypatch.setenv("CANCEL_AFTER", "1")
    out = tmp_path / "out"
    assert sweep.main([str(_study(tmp_path)), "--out", str(out), "--wandb", "--parallel", "2"]) == 4
    ended = [json.loads(p.read_text()) for p in (out / "tune").glob("*/results.json")]
    assert [(r["status"], r["signal"]) for r in ended] == [("interrupted", "SIGTERM")] * 2
    for p in (out / "wandb" / "stage1-1" / "trials").glob("*.json"):
        with pytest.raises(ProcessLookupError):  # not left running
            os.killpg(json.loads(p.read_text())["pid"], 0)
    assert not (out / "choice.json").exists()


@pytest.mark.slow
def test_a_ctrl_c_once_a_batch_has_ended_stops_the_study_before_the_next(
    tmp_path, real_agent, monkeypatch
):
    """Agents left waiting on a finished sweep (IDLE) are stopped AGENT_EXIT_S after the last
    trial; a Ctrl-C in that wait finds every trial ended: stage 1's choice is made, but no
    stage-2 sweep is sent (exit 4); the rerun runs stage 2 and ends as the calm study."""
    calm, out = tmp_path / "calm", tmp_path / "out"
    path = _study(tmp_path)
    assert sweep.main([str(path), "--out", str(calm)]) == 0
    monkeypatch.setenv("IDLE", "1")
    monkeypatch.setattr(wandb_stage, "AGENT_EXIT_S", 60.0)
    trials = out / "wandb" / "stage1-1" / "trials"

    ended = lambda: sum("exit_code" in p.read_text() for p in trials.glob("*.json")) == 4  # noqa: E731
    _ctrl_c_once(ended, 0.3)  # the 4 stage-1 trials have ended
    argv = [str(path), "--out", str(out), "--wandb", "--parallel", "2"]
    assert sweep.main(argv) == 4
    assert (out / "choice.json").exists() and not list((out / "wandb").glob("stage2-*"))
    monkeypatch.setattr(wandb_stage, "AGENT_EXIT_S", 0.5)
    assert sweep.main(argv) == 0  # the idle agents stopped after each batch
    assert _comparable(_outcome(out)) == _comparable(_outcome(calm))


@pytest.mark.parametrize(
    "extra, env, said",
    [
        (["logger=none"], {}, "logger=none"),
        ([], {"WANDB_MODE": "OFFLINE"}, "WANDB_MODE=offline"),
        (["logger.wandb.offline=true"], {}, "logger.wandb.offline=true"),
        (["logger.wandb.project=other"], {}, "logger.wandb.project is other"),
        (["--project", "mine"], {}, "override logger.wandb.project=mine"),
        (["--entity", "team"], {}, "override logger.wandb.entity=team"),
    ],
)
def test_a_study_that_could_not_reach_wandb_is_one_line_exit_2(
    tmp_path, capsys, monkeypatch, extra, env, said
):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    flags = [a for a in extra if a.startswith("--") or "=" not in a]
    spec = {**SMALL, "project": "attnlab",
            "command": [*SMALL["command"], *[a for a in extra if a not in flags]]}  # fmt: skip
    out = tmp_path / "out"
    assert sweep.main([str(_study(tmp_path, spec)), "--out", str(out), "--wandb", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "--wandb" in err[0], err
    assert not out.exists()


def test_the_wrapper_refuses_a_trial_not_in_its_plan_in_one_line(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"trials": {"a-seed_1": {"command": ["true"], "run_dir": "x"}}}))
    assert wrapper_main([str(plan), "trial=b-seed_1"]) == 2
    assert wrapper_main([str(plan)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "no trial 'b-seed_1'; its trials: a-seed_1" in err[0] and "expected PLAN" in err[1]


def test_attention_maps_go_to_the_run_id_the_run_recorded(tmp_path, monkeypatch):
    """A run started by a W&B sweep's agent has the agent's run id (wandb.init ignores attnlab's
    own inside a sweep): attnlab-attention logs into the id results.json recorded, else into
    the one that follows from the run directory."""
    import wandb

    from attnlab.cli import attention
    from attnlab.runs.identity import wandb_run_id

    seen = []

    class Run:
        def log(self, data):
            pass

        def finish(self):
            pass

    monkeypatch.setattr(wandb, "init", lambda **kw: seen.append(kw["id"]) or Run())
    (tmp_path / "config.yaml").write_text("logger:\n  wandb:\n    project: attnlab\n")
    attention._log_wandb(tmp_path, [])
    (tmp_path / "results.json").write_text(json.dumps({"wandb_run_id": "agentrun7"}))
    attention._log_wandb(tmp_path, [])
    assert seen == [wandb_run_id(tmp_path), "agentrun7"]


def test_a_dry_run_on_wandb_prints_the_first_sweep_and_writes_nothing(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "out"
    argv = [str(_study(tmp_path)), "--out", str(out), "--wandb", "--dry-run", "--project", "p"]
    argv += ["logger.wandb.project=p"]
    assert sweep.main(argv) == 0
    printed = capsys.readouterr().out
    first = yaml.safe_load(printed[printed.index("stage 1's first sweep:") :].split("\n", 1)[1]
                           .split("\nchecked:")[0])  # fmt: skip
    assert first["name"] == "tiny stage 1 (batch 1)" and first["project"] == "p"
    assert len(first["parameters"]["trial"]["values"]) == 4 and "in project p;" in printed
    assert not out.exists()
