"""Run a sweep file on the W&B server: create the sweep, then one `wandb agent` per GPU group.

The server chooses the parameters (so `bayes` works here too); each agent runs the file's
`command` for every run it is given, with CUDA_VISIBLE_DEVICES set to its own GPUs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from attnlab.runs.status import EXIT_CODES, Status
from attnlab.sweeps.runner import stop, trial_env
from attnlab.sweeps.spec import DEFAULT_COMMAND, hydra_quote, override_key, sweep_name


def server_config(
    config: dict, extra_overrides: Sequence[str] = (), run_root: Path | None = None
) -> dict:
    """The sweep config sent to W&B: the file's, with `group=<name>` (unless set) and the extra
    overrides appended to its command, as attnlab-sweep does for local trials. With `run_root`,
    every run writes to <run_root>/<W&B run id> (the agent sets WANDB_RUN_ID for each run), so
    runs that several agents start in the same second never share a directory."""
    config = dict(config)
    config.pop("baseline", None)  # attnlab-compare's default baseline: not a W&B sweep key
    config.pop("arms", None)  # attnlab's per-arm studies: W&B's server searches the arms jointly
    command = [str(t) for t in config.get("command", DEFAULT_COMMAND)]
    keys = {override_key(t) for t in [*command, *extra_overrides]} | set(config["parameters"])
    if "group" not in keys:
        command.append(f"group={sweep_name(config)}")
    command += list(extra_overrides)
    if run_root is not None:
        command = [t for t in command if override_key(t) != "hydra.run.dir"]
        command.append(f"hydra.run.dir={hydra_quote(f'{run_root}/${{oc.env:WANDB_RUN_ID}}')}")
    config["command"] = command
    return config


def agent_command(
    sweep_id: str, count: int | None = None, project: str | None = None, entity: str | None = None
) -> list[str]:
    """`wandb agent [--count N] [--project P] [--entity E] SWEEP_ID`, this environment's wandb."""
    argv = [sys.executable, "-m", "wandb", "agent"]
    if count is not None:
        argv += ["--count", str(count)]
    if project:
        argv += ["--project", project]
    if entity:
        argv += ["--entity", entity]
    return argv + [sweep_id]


def run_agents(
    config: dict,
    groups: Sequence[str],
    n_agents: int,
    out_dir: Path,
    count: int | None = None,
    project: str | None = None,
    entity: str | None = None,
    extra_overrides: Sequence[str] = (),
    memory_share: float | None = None,
) -> int:
    """Create the sweep on the server and run the agents until they exit; 0 if all exit 0.

    With GPU groups there is one agent per group (n_agents is ignored; a group listed K times by
    gpu_slots gets K agents, each run limited to `memory_share` of the GPU's memory); without,
    n_agents agents share the visible devices. Each agent's output goes to
    <out_dir>/agent-<i>.log and each run to <out_dir>/<W&B run id>.
    """
    sweep_config = server_config(config, extra_overrides, run_root=out_dir)
    _, procs = start_agents(
        sweep_config, groups, n_agents, out_dir, count, project, entity, memory_share
    )
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        print("interrupted: stopping the agents (the sweep stays on the server)")
        stop(procs)
        return EXIT_CODES[Status.INTERRUPTED]  # 4, as attnlab-train and a local sweep
    for i, code in enumerate(codes):
        if code != 0:
            print(f"agent {i} exited with code {code}; see {out_dir / f'agent-{i}.log'}")
    return 0 if all(code == 0 for code in codes) else 1


def start_agents(
    sweep_config: dict,
    groups: Sequence[str],
    n_agents: int,
    out_dir: Path,
    count: int | None = None,
    project: str | None = None,
    entity: str | None = None,
    memory_share: float | None = None,
    env: dict[str, str] | None = None,
    sweep_id: str | None = None,
) -> tuple[str, list[subprocess.Popen]]:
    """Create the sweep on the server (unless `sweep_id` names one made) and start its agents
    (one per GPU group, else n_agents), `env` added to theirs; (the sweep id, the agents'
    processes). An agent that cannot start stops those already started (OSError raised)."""
    import wandb

    if sweep_id is None:
        sweep_id = wandb.sweep(sweep_config, project=project, entity=entity)
    agent_gpus: list[str | None] = list(groups) if groups else [None] * n_agents
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = agent_command(sweep_id, count=count, project=project, entity=entity)
    print(f"sweep {sweep_id}: starting {len(agent_gpus)} agent(s): {' '.join(argv)}")
    procs: list[subprocess.Popen] = []
    try:
        for i, gpus in enumerate(agent_gpus):
            procs.append(_start_agent(i, gpus, argv, out_dir, memory_share, env))
    except OSError:
        stop(procs)
        raise
    return sweep_id, procs


def _start_agent(
    i: int, gpus: str | None, argv: list[str], out_dir: Path, memory_share: float | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen:  # fmt: skip
    """`wandb agent` number i in its own session, on `gpus`, its output in agent-<i>.log."""
    log_path = out_dir / f"agent-{i}.log"
    with open(log_path, "w") as logfile:
        proc = subprocess.Popen(
            argv,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**trial_env(gpus, memory_share), **(env or {})},
            cwd=os.getcwd(),
            start_new_session=True,
        )
    where = f" on GPUs {gpus}" if gpus is not None else ""
    print(f"agent {i}{where}: pid {proc.pid}, log {log_path}")
    return proc
