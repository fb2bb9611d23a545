"""The statuses of a multirun's jobs, wherever the launcher runs them (in-process, joblib
workers, submitit processes or SLURM nodes), for attnlab-train's exit code and summary.

Each job writes `<sweep dir>/.jobs/<multirun id>/<job number>.json` from a Hydra callback that
runs in the job's own process (JobStatuses.on_job_end); the launching process reads them when
the launcher returns. The multirun id reaches the jobs as an override of the job's config
(hydra.job.env_set.ATTNLAB_MULTIRUN_ID), so it travels with any launcher. A job that never wrote
its status (killed, out of memory, lost node) counts as failed.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from attnlab.runs.status import EXIT_CODES, Status, exit_code, status_counts

ID_KEY = "ATTNLAB_MULTIRUN_ID"
_sweep_dir: list[Path] = []  # set in the launching process by on_multirun_start


def new_id_override() -> str:
    """The override that gives this multirun's jobs their id. The id starts with a letter:
    Hydra parses an override's value, so a bare hex id such as 123456789012 would reach the jobs
    as an int and 1234e5678901 as inf (about 1 multirun in 140), and their statuses would be
    written where the launching process does not look."""
    return f"+hydra.job.env_set.{ID_KEY}=m{uuid.uuid4().hex[:12]}"


def _status_dir(sweep_dir: Path | str, multirun_id: str) -> Path:
    return Path(sweep_dir) / ".jobs" / multirun_id


class JobStatuses(Callback):
    """Hydra callback (conf/train.yaml, hydra.callbacks): each job records its status."""

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        _sweep_dir[:] = [Path(config.hydra.sweep.dir)]

    def on_job_end(self, config, job_return, **kwargs: Any) -> None:
        multirun_id = config.hydra.job.env_set.get(ID_KEY)
        if not multirun_id:
            return  # a single run: attnlab-train knows its status in-process
        record = _job_record(config, job_return)
        folder = _status_dir(config.hydra.sweep.dir, multirun_id)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{config.hydra.job.num}.json.tmp"
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, folder / f"{config.hydra.job.num}.json")


def _job_record(config, job_return) -> dict:
    from hydra.core.utils import JobStatus

    record = {
        "job": int(config.hydra.job.num),
        "overrides": list(config.hydra.overrides.task),
        "run_dir": str(config.hydra.runtime.output_dir),
    }
    if job_return.status == JobStatus.COMPLETED:
        value = job_return.return_value
        status = value.get("status", Status.FAILED) if isinstance(value, dict) else Status.FAILED
        return {**record, "status": status, "error": (value or {}).get("error")}
    error = job_return._return_value  # the exception the job raised
    interrupted = isinstance(error, KeyboardInterrupt)
    return {
        **record,
        "status": Status.INTERRUPTED if interrupted else Status.FAILED,
        "error": repr(error),
    }


def collect(multirun_id: str, expected: int | None) -> list[dict]:
    """The job records of this multirun, by job number; jobs with no record are "failed"."""
    if not _sweep_dir:
        return []
    folder = _status_dir(_sweep_dir[0], multirun_id)
    records = {}
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        records[int(record["job"])] = record
    for job in range(expected or 0):
        records.setdefault(job, {"job": job, "status": Status.FAILED, "error": "no status reported",
                                 "overrides": [], "run_dir": None})  # fmt: skip
    return [records[job] for job in sorted(records)]


def summary(records: list[dict]) -> list[str]:
    """'multirun: 3 jobs: 2 completed, 1 diverged', one line per job that did not succeed, and
    the multirun's folder with the attnlab-compare command for it."""
    lines = [f"multirun: {len(records)} jobs: {status_counts([r['status'] for r in records])}"]
    for r in records:
        if EXIT_CODES.get(r["status"], 1) == 0:
            continue
        line = f"  job {r['job']} {r['status']}"
        if r.get("overrides"):
            line += ": " + " ".join(r["overrides"])
        if r.get("run_dir"):
            line += f" ({r['run_dir']})"
        lines.append(line + (f": {r['error']}" if r.get("error") else ""))
    if _sweep_dir:  # where the runs are, and the command that compares them
        folder = _sweep_dir[0]
        lines.append(f"multirun: runs in {folder}; compare them: attnlab-compare {folder}")
    return lines


def multirun_exit_code(records: list[dict]) -> int:
    return exit_code([r["status"] for r in records])
