"""One trial of a study on W&B: the program `wandb agent` runs for each run of a stage's sweep.

A stage's sweep (attnlab.sweeps.wandb_stage) is a W&B grid over one parameter, `trial`, whose
values name the batch's trials; for each, the agent runs

    python -m attnlab.sweeps.wandb_trial <plan.json> trial=<name>

which looks the trial up in the plan (its command, folder and environment, as attnlab-sweep would
run it here), runs it with its output appended to <run_dir>/trial.log, and records the trial's
process group and then its exit code in <plan folder>/trials/<name>.json, where attnlab-sweep
reads them (the agent keeps neither). A SIGINT or SIGTERM this program gets (the agent's
`--forward-signals`) is passed on to the trial, which ends as an interrupted run does.
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


def main(argv: list[str] | None = None) -> int:
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
    entry, folder = trials[name], plan_path.parent
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
            )  # fmt: skip
        except OSError as err:
            log.write(f"could not start {command[0]!r}: {err.strerror or err}\n")
            write_record(folder, name, {"pid": None, "exit_code": 127, "wandb_run": run})
            return 127
        write_record(folder, name, {"pid": proc.pid, "wandb_run": run})

        def pass_on(signum, frame):
            try:
                os.killpg(proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, pass_on)
        code = proc.wait()
    wall = round(time.monotonic() - t0, 3)
    write_record(folder, name, {"pid": proc.pid, "exit_code": code, "wall_time_s": wall,
                                "wandb_run": run})  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main())
