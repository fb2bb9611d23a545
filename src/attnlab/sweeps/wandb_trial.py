"""One trial of a study on W&B: the program `wandb agent` runs for each run of a stage's sweep.

A stage's sweep (attnlab.sweeps.wandb_stage) is a W&B grid over one parameter, `trial`, whose
values name the batch's trials; for each, the agent runs

    python -m attnlab.sweeps.wandb_trial <plan.json> trial=<name>

which looks the trial up in the plan (its command, folder and environment, as attnlab-sweep would
run it here), runs it with its output appended to <run_dir>/trial.log, and records the trial's
process group and then its exit code in <plan folder>/trials/<name>.json, where attnlab-sweep
reads them (the agent keeps neither). A SIGINT or SIGTERM this program gets (the agent's SIGTERM
when a run is stopped on W&B's page or the agent shuts down) is passed on to the trial, which
ends as an interrupted run does; if this program is killed, the trial gets a SIGTERM (Linux).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

PROGRAM = "attnlab.sweeps.wandb_trial"


def record_path(folder: Path, name: str) -> Path:
    """Where a trial's record (its process group, then its exit code) is kept."""
    return folder / "trials" / f"{name}.json"


def write_record(folder: Path, name: str, record: dict) -> None:
    """Replace the trial's record at once (a reader never sees half a file)."""
    path = record_path(folder, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def read_record(folder: Path, name: str) -> dict | None:
    try:
        return json.loads(record_path(folder, name).read_text())
    except (OSError, ValueError):
        return None


def _error(message: str) -> int:
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    return 2


def _die_with_parent(parent: int):
    """In the trial's process, before it runs: on Linux, a SIGTERM when this wrapper dies (the
    agent SIGKILLs it when the sweep is cancelled on W&B or a stopped run outlives its grace);
    attnlab-train ends on it as on a Ctrl-C. Elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the wrapper died before the prctl
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def main(argv: list[str] | None = None) -> int:
    """0 once the trial has ended and its exit code is recorded (the agent counts a non-zero
    exit as a failed run and stops after a few: a diverged stage-1 trial is not one); 2 for a
    call that names no trial of its plan; 127 when the trial cannot start (recorded too)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 2 or not args[1].startswith("trial="):
        return _error(f"expected PLAN trial=NAME, got {shlex.join(args) or 'nothing'}")
    plan_path, name = Path(args[0]), args[1].partition("=")[2]
    try:
        trials = json.loads(plan_path.read_text())["trials"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return _error(f"{plan_path}: not a stage's plan ({err})")
    if name not in trials:
        return _error(f"{plan_path}: no trial {name!r}; its trials: {', '.join(trials)}")
    # a signal from here on reaches the trial: held until it exists, then passed on
    held: list[int] = []
    child: list[subprocess.Popen] = []

    def pass_on(signum, frame):
        if not child:
            held.append(signum)
            return
        try:
            os.killpg(child[0].pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, pass_on)
    return _run(trials[name], plan_path.parent, name, child, held, pass_on)


def _run(entry: dict, folder: Path, name: str, child: list, held: list, pass_on) -> int:
    command, run_dir = list(entry["command"]), Path(entry["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    run = os.environ.get("WANDB_RUN_ID", "?")
    with open(run_dir / "trial.log", "a") as log:
        log.write(f"$ {shlex.join(command)}\n# W&B run {run} of sweep "
                  f"{os.environ.get('WANDB_SWEEP_ID', '?')}\n")  # fmt: skip
        log.flush()
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **entry.get("env", {})}, start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),
            )  # fmt: skip
        except OSError as err:
            log.write(f"could not start {command[0]!r}: {err.strerror or err}\n")
            write_record(folder, name, {"pid": None, "exit_code": 127, "wandb_run": run})
            return 127
        write_record(folder, name, {"pid": proc.pid, "wandb_run": run})
        child.append(proc)
        for signum in held:
            pass_on(signum, None)
        code = proc.wait()
    wall = round(time.monotonic() - t0, 3)
    write_record(folder, name, {"pid": proc.pid, "exit_code": code, "wall_time_s": wall,
                                "wandb_run": run})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
