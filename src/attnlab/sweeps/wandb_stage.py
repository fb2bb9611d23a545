"""A study on W&B (`attnlab-sweep STUDY --wandb`): each batch of trials the study runs becomes
its own W&B sweep, run by `wandb agent`s started here.

A study's trials are not one grid of W&B parameters: stage 1's later points (extension,
refinement) depend on its earlier results, and stage 2's tuned value differs per arm. So the
study's runner stays in charge (it decides, writes choice.json, resumes), and each batch it would
run locally (stage 1's grid, each extension or refinement round, stage 2's seeds) is sent to W&B
as a grid over one parameter, `trial`, whose values name the batch's trials. The agents run
`python -m attnlab.sweeps.wandb_trial <plan.json> trial=<name>` (attnlab.sweeps.wandb_trial),
which runs the trial exactly as a local one: the same command, folder and environment (its
stage as the W&B job type). Everything the study reads is therefore where a local study has it;
W&B shows each batch as a sweep named "<study> stage 1 (batch k)" or "<study> stage 2 (batch
k)", each run's config the trial's full config (attnlab's logger) plus `trial`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attnlab.runs.status import JOB_TYPE_ENV, Status
from attnlab.sweeps.cluster import alive, signal_group
from attnlab.sweeps.runner import (
    POLL_S,
    STOP_GRACE_S,
    TrialResult,
    _ctrl_c_deferred,
    finish,
    kept_as_ended,
    stop,
)
from attnlab.sweeps.spec import SweepError, override_key
from attnlab.sweeps.wandb_trial import PROGRAM, read_record

# Added to each agent's environment: its files (wandb/sweep-<id>/) in the batch's folder, and no
# "flapping" stop (wandb's agent quits after a few non-zero exits; the wrapper exits 0 anyway).
AGENT_ENV = {"WANDB_AGENT_DISABLE_FLAPPING": "true", "WANDB_AGENT_MAX_INITIAL_FAILURES": "1000000"}
AGENT_EXIT_S = 10.0  # once every trial has ended, the agents' time to leave before they are stopped


def stage_of(env: dict[str, str]) -> int:
    """1 for stage 1's trials (their W&B job type is `tune`), else 2."""
    return 1 if env.get(JOB_TYPE_ENV) == "tune" else 2


def batch_config(name: str, stage: int, batch: int, plan: Path, names: Sequence[str],
                 project: str | None = None) -> dict:  # fmt: skip
    """The W&B sweep config of one batch: a grid over `trial`, the wrapper as its command."""
    config = {
        "name": f"{name} stage {stage} (batch {batch})",
        "method": "grid",
        "parameters": {"trial": {"values": list(names)}},
        "command": [sys.executable, "-m", PROGRAM, str(plan.resolve()), "${args_no_hyphens}"],
    }
    return {**config, "project": project} if project else config


def _last(command: Sequence[str], key: str) -> str | None:
    values = [t.partition("=")[2] for t in command if override_key(t) == key]
    return values[-1].strip("'\"") if values else None


def _logger_defaults() -> dict:
    """conf/logger/wandb.yaml's project and entity (the trials' own unless overridden)."""
    import yaml

    from attnlab.config.location import conf_dir

    try:
        wandb_conf = yaml.safe_load((conf_dir() / "logger" / "wandb.yaml").read_text())["wandb"]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        wandb_conf = {}
    return {"project": wandb_conf.get("project"), "entity": wandb_conf.get("entity")}


def wandb_target(command: Sequence[str], project: str | None, entity: str | None):
    """(project, entity) of the study's W&B sweeps: --project (--entity) or the file's, else the
    trials' own logger.wandb.project (entity). W&B puts a sweep's runs in the sweep's project, so
    it must be the one the trials' logger names (their config.yaml, which attnlab-attention
    reads): a difference is refused in one line (SweepError), as is a study whose runs would not
    reach W&B."""
    own = {key: _last(command, f"logger.wandb.{key}") for key in ("project", "entity")}
    defaults = _logger_defaults()
    own = {k: v if v not in (None, "null") else defaults[k] for k, v in own.items()}
    project, entity = project or own["project"], entity or own["entity"]
    logger, mode = _last(command, "logger"), (os.environ.get("WANDB_MODE") or "").lower()
    problem = None
    if logger is not None and "wandb" not in logger:
        problem = (f"the study's trials run with logger={logger}, so none would reach W&B; add "
                   "the override logger=wandb (or logger=[wandb,tensorboard])")  # fmt: skip
    elif mode in ("offline", "disabled", "dryrun"):
        problem = f"WANDB_MODE={mode}: W&B's agents and the trials' runs need W&B online"
    elif (_last(command, "logger.wandb.offline") or "").lower() == "true":
        problem = "logger.wandb.offline=true: W&B's agents and the trials' runs need W&B online"
    else:
        for key, value in (("project", project), ("entity", entity)):
            if value != own[key]:
                problem = (f"the sweeps' {key} is {value} but the trials' logger.wandb.{key} is "
                           f"{own[key]}: W&B would put the runs in {value}; add the override "
                           f"logger.wandb.{key}={value}")  # fmt: skip
                break
    if problem:
        raise SweepError(f"--wandb: {problem}")
    return project, entity


class _Batch:
    """One batch's folder and the records its trials' wrappers leave there."""

    def __init__(self, folder: Path, names: Sequence[str]) -> None:
        self.folder, self.names = folder, list(names)
        self.config: dict = {}

    def record(self, name: str) -> dict | None:
        return read_record(self.folder, name)

    def live(self) -> dict[str, int]:
        """The trials started and not recorded as ended whose process group still exists."""
        found = {}
        for name in self.names:
            r = self.record(name)
            if r and "exit_code" not in r and r.get("pid") and alive(r["pid"], group=True):
                found[name] = r["pid"]
        return found

    def ended(self) -> bool:
        """Every trial recorded as ended, or started and gone (its wrapper killed)."""
        records = [self.record(n) for n in self.names]
        return all(r and ("exit_code" in r or not alive(r["pid"], group=True)) for r in records)


@dataclass
class WandbStages:
    """Runs each batch of a study's trials as a W&B sweep (`agents` agents, or one per GPU slot
    in `groups`, at most one per trial); its folders are <out>/wandb/stage<S>-<k>/ (plan.json,
    agent-<i>.log, the agents' wandb/ files, trials/)."""

    name: str
    out: Path
    agents: int
    groups: Sequence[str] = ()
    memory_share: float | None = None
    project: str | None = None
    entity: str | None = None

    stop_requested: bool = False  # a Ctrl-C came: no further batch is sent

    def run_stage(self, trials, metric: str, kept, env: dict[str, str]) -> list[TrialResult]:
        """The trials' results, as runner.run_trials gives them: a trial ended earlier with a
        status of `kept` is kept; the rest run as one W&B sweep. Ctrl-C stops the agents and the
        running trials (interrupted; the rest not_started), and no later batch is sent (its
        trials not_started, even when this batch's had all ended): a rerun sends the rest."""
        results, todo = [TrialResult(t) for t in trials], []
        for r in results:
            if kept_as_ended(r, kept, metric):
                print(f"kept      {r.trial.label} ({r.status} earlier)")
            else:
                todo.append(r)
        if self.stop_requested:
            for r in todo:
                r.status, r.error = Status.NOT_STARTED, "not sent: the study was interrupted"
            return results
        if not todo:
            return results
        batch = self._plan(todo, env)
        stopped: set[str] = set()  # trials running when Ctrl-C came: interrupted
        procs: list = []
        try:
            procs = self._start(batch, len(todo))
            wait_batch(procs, batch)
        except KeyboardInterrupt:
            self.stop_requested = True
            stopped = set(batch.live())
            print(f"interrupted: stopping the agents and the running trials ({batch.folder})")
            stop_batch(procs, batch)
        stop_trials(batch, batch.live())  # one whose wrapper was killed (stopped on W&B?)
        for r in todo:
            _finish(r, batch, metric, r.trial.run_dir.name in stopped)
            shown = "" if r.metric is None else f" {metric}={r.metric:.4g}"
            print(f"{r.status:<9} {r.trial.label}{shown}")
        unrun = sum(r.status == Status.NOT_STARTED for r in todo)
        if unrun and not self.stop_requested:
            print(f"{unrun} trial(s) not run: the agents ended first (their logs: {batch.folder})")
        return results

    def _plan(self, todo: Sequence[TrialResult], env: dict[str, str]) -> _Batch:
        """The batch's folder, its plan.json (each trial's command, folder and environment) and
        its sweep config (batch.config)."""
        stage = stage_of(env)
        batch = _Batch(self._next_folder(stage), [r.trial.run_dir.name for r in todo])
        plan = batch.folder / "plan.json"
        plan.write_text(json.dumps({"trials": {
            r.trial.run_dir.name: {"command": list(r.trial.command),
                                   "run_dir": str(r.trial.run_dir.resolve()), "env": env}
            for r in todo}}, indent=1))  # fmt: skip
        number = int(batch.folder.name.rpartition("-")[2])
        batch.config = batch_config(self.name, stage, number, plan, batch.names, self.project)
        return batch

    def _start(self, batch: _Batch, n_trials: int):
        """Create the batch's sweep (a Ctrl-C during W&B's call stops it), then start the agents
        with Ctrl-C and SIGTERM held until all are started and known."""
        import wandb

        from attnlab.sweeps.wandb_agents import start_agents

        groups = list(self.groups)[: min(self.agents, n_trials)] if self.groups else []
        n = min(self.agents, n_trials)
        env = {**AGENT_ENV, "WANDB_DIR": str(batch.folder.resolve())}
        try:
            sweep_id = wandb.sweep(batch.config, project=self.project, entity=self.entity)
            with _ctrl_c_deferred((signal.SIGINT, signal.SIGTERM)):
                _, procs = start_agents(batch.config, groups, n, batch.folder,
                                        project=self.project, entity=self.entity,
                                        memory_share=self.memory_share, env=env,
                                        sweep_id=sweep_id)  # fmt: skip
        except KeyboardInterrupt:
            raise
        except Exception as err:  # wandb's own errors (no key, offline, refused): one line
            raise SweepError(
                f"--wandb: the sweep {batch.config['name']!r} did not start ({err}); none of "
                f"its trials ran: rerun the same command with --out {self.out} to resume"
            ) from None
        return procs

    def _next_folder(self, stage: int) -> Path:
        batch = 1
        while (self.out / "wandb" / f"stage{stage}-{batch}").exists():
            batch += 1
        folder = self.out / "wandb" / f"stage{stage}-{batch}"
        folder.mkdir(parents=True)
        return folder


def _finish(result: TrialResult, batch: _Batch, metric: str, interrupted: bool) -> None:
    """The trial's status from its results.json and its recorded exit code, as a local trial's."""
    record = batch.record(result.trial.run_dir.name)
    if record is None:  # the agents never ran it (they ended, were stopped, or failed first)
        result.status = Status.NOT_STARTED
        result.error = f"not run by the agents (their logs: {batch.folder})"
        return
    code = record.get("exit_code")
    finish(result, -signal.SIGKILL if code is None else code, interrupted, metric)
    result.wall_time_s = record.get("wall_time_s")
    if code is None and result.status != Status.COMPLETED:
        result.error = f"its wrapper was killed (a run stopped on W&B?): {result.error}"


def wait_batch(agents, batch: _Batch) -> None:
    """Until the agents exit; once every trial has ended, they get AGENT_EXIT_S to leave by
    themselves (a W&B agent may wait on a finished sweep), then they are stopped."""
    ended_at = None
    while any(p.poll() is None for p in agents):
        if ended_at is None and batch.ended():
            ended_at = time.monotonic()
        if ended_at is not None and time.monotonic() - ended_at > AGENT_EXIT_S:
            stop(agents)
            return
        time.sleep(POLL_S)


def stop_batch(agents, batch: _Batch, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a batch: the agents told to start nothing more (SIGINT), every running trial's
    process group SIGINTed (Lightning ends cleanly; the trial records `interrupted`), one that
    starts meanwhile too, until all have ended or `grace_s` (or a second Ctrl-C) has passed; then
    SIGKILL for what is left, agents and trials."""
    for proc in agents:
        signal_group(proc.pid, signal.SIGINT)
    told: set[int] = set()
    deadline = time.monotonic() + grace_s
    try:
        while time.monotonic() < deadline:
            live = batch.live()
            for pid in set(live.values()) - told:
                signal_group(pid, signal.SIGINT)
                told.add(pid)
            if not live and all(p.poll() is not None for p in agents):
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: no more waiting
    for proc in agents:
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    stop_trials(batch, batch.live(), grace_s=0.0)


def stop_trials(batch: _Batch, live: dict[str, int], grace_s: float = STOP_GRACE_S) -> None:
    """SIGINT the trials' process groups, SIGKILL after `grace_s`; then give their wrappers a
    moment to record the exit codes."""
    if not live:
        return
    for pid in live.values():
        signal_group(pid, signal.SIGINT if grace_s else signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while batch.live() and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for pid in batch.live().values():
        signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while any("exit_code" not in (batch.record(n) or {}) for n in live) and (
        time.monotonic() < deadline
    ):
        time.sleep(POLL_S)
