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
from attnlab.sweeps.runner import (
    POLL_S,
    STOP_GRACE_S,
    TrialResult,
    finish,
    kept_as_ended,
    stop,
)
from attnlab.sweeps.spec import SweepError, override_key
from attnlab.sweeps.wandb_trial import PROGRAM, read_record


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


def logger_problem(command: Sequence[str]) -> str | None:
    """Why a trial of this command would not log to W&B (its last `logger=` override names no
    wandb), else None: its W&B run would never start, and the sweep would show nothing."""
    chosen = [t.partition("=")[2] for t in command if override_key(t) == "logger"]
    if chosen and "wandb" not in chosen[-1]:
        return (f"--wandb: the study's trials run with logger={chosen[-1]}, so none would reach "
                "W&B; add the override logger=wandb (or logger=[wandb,tensorboard])")  # fmt: skip
    return None


@dataclass
class WandbStages:
    """Runs each batch of a study's trials as a W&B sweep (`agents` agents, or one per GPU slot
    in `groups`); its folders are <out>/wandb/stage<S>-<k>/ (plan.json, agent-<i>.log, trials/)."""

    name: str
    out: Path
    agents: int
    groups: Sequence[str] = ()
    memory_share: float | None = None
    project: str | None = None
    entity: str | None = None

    def run_stage(self, trials, metric: str, kept, env: dict[str, str]) -> list[TrialResult]:
        """The trials' results, as runner.run_trials gives them: a trial ended earlier with a
        status of `kept` is kept; the rest run as one W&B sweep. Ctrl-C stops the agents and the
        running trials (interrupted; the rest not_started): a rerun sends only those again."""
        results = [TrialResult(t) for t in trials]
        todo = [r for r in results if not kept_as_ended(r, kept, metric)]
        for r in results:
            if r not in todo:
                print(f"kept      {r.trial.label} ({r.status} earlier)")
        if not todo:
            return results
        stage = stage_of(env)
        folder, batch = self._next_folder(stage)
        plan = folder / "plan.json"
        names = [r.trial.run_dir.name for r in todo]
        plan.write_text(json.dumps({"trials": {
            r.trial.run_dir.name: {"command": list(r.trial.command),
                                   "run_dir": str(r.trial.run_dir.resolve()), "env": env}
            for r in todo}}, indent=1))  # fmt: skip
        config = batch_config(self.name, stage, batch, plan, names, self.project)
        procs = self._start(config, folder, len(todo))
        interrupted = False
        try:
            for proc in procs:
                proc.wait()
        except KeyboardInterrupt:
            interrupted = True
            print(f"interrupted: stopping the agents and the running trials ({folder})")
            stop_batch(procs, folder, names)
        for r in todo:
            self._finish(r, folder, metric, interrupted)
            shown = "" if r.metric is None else f" {metric}={r.metric:.4g}"
            print(f"{r.status:<9} {r.trial.label}{shown}")
        return results

    def _start(self, config: dict, folder: Path, n_trials: int):
        from attnlab.sweeps.wandb_agents import start_agents

        n = len(self.groups) if self.groups else min(self.agents, n_trials)
        try:
            _, procs = start_agents(config, self.groups, n, folder, project=self.project,
                                    entity=self.entity, memory_share=self.memory_share)  # fmt: skip
        except Exception as err:  # wandb's own errors (no key, offline, refused): one line
            raise SweepError(
                f"--wandb: W&B did not create the sweep {config['name']!r} ({err}); none of "
                f"its trials ran: rerun the same command with --out {self.out} to resume"
            ) from None
        return procs

    def _next_folder(self, stage: int) -> tuple[Path, int]:
        batch = 1
        while (self.out / "wandb" / f"stage{stage}-{batch}").exists():
            batch += 1
        folder = self.out / "wandb" / f"stage{stage}-{batch}"
        folder.mkdir(parents=True)
        return folder, batch

    @staticmethod
    def _finish(result: TrialResult, folder: Path, metric: str, interrupted: bool) -> None:
        record = read_record(folder, result.trial.run_dir.name)
        if record is None:  # the agents never ran it (ended, stopped or failed first)
            result.status = Status.NOT_STARTED
            result.error = f"not run by the agents (their logs: {folder})"
            return
        code = record.get("exit_code")
        finish(result, -signal.SIGKILL if code is None else code, interrupted, metric)
        result.wall_time_s = record.get("wall_time_s")


def stop_batch(agents, folder: Path, names: Sequence[str], grace_s: float = STOP_GRACE_S):
    """Stop a batch: the agents first told to start nothing more (SIGINT), then each running
    trial's process group SIGINTed (Lightning ends cleanly; a trial records `interrupted`) and
    SIGKILLed after `grace_s`, then the agents stopped."""
    for proc in agents:
        _killpg(proc.pid, signal.SIGINT)

    def running() -> list[int]:
        records = [read_record(folder, n) for n in names]
        return [r["pid"] for r in records if r and "exit_code" not in r and r.get("pid")]

    for pid in running():
        _killpg(pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while running() and time.monotonic() < deadline:
        time.sleep(POLL_S)
    stop(agents, grace_s=grace_s)
    for pid in running():  # still running, or started in the moment before the agents stopped
        _killpg(pid, signal.SIGKILL)


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
