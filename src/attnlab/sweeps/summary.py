"""The end-of-sweep record: a console table, <out>/summary.json and <out>/summary.md."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from attnlab.analysis.tables import fmt_number, markdown_table, text_table
from attnlab.runs.status import Status, status_counts
from attnlab.sweeps.runner import TrialResult


def rows(results: Sequence[TrialResult], out_dir: Path, metric_name: str) -> list[list[str]]:
    header = ["trial", "status", metric_name, "wall time", "results (or log)"]
    body = []
    for r in results:
        wall = "" if r.wall_time_s is None else f"{r.wall_time_s:.1f} s"
        path = r.results_path or (r.log_path if r.status != Status.NOT_STARTED else None)
        body.append(
            [
                r.trial.label,
                r.status,
                fmt_number(r.metric),
                wall,
                os.path.relpath(path, out_dir) if path else "",
            ]
        )
    return [header, *body]


def write_summary(
    results: Sequence[TrialResult],
    out_dir: Path,
    sweep: str,
    source: str,
    metric_name: str,
    interrupted: bool = False,
    sharing: str | None = None,
) -> str:
    """Write summary.json and summary.md under out_dir; return the console text. `sharing`:
    how trials shared each GPU (attnlab-sweep --trials-per-gpu), said in all three."""
    record = summary_record(results, out_dir, sweep, source, metric_name, interrupted)
    if sharing:
        record["gpu_sharing"] = sharing
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    title = f"Sweep {sweep} ({source}): {len(results)} trials, "
    title += status_counts([r.status for r in results]) + (" (interrupted)" if interrupted else "")
    table = rows(results, out_dir, metric_name)
    failures = [r for r in results if r.status not in (Status.COMPLETED, Status.NOT_STARTED)]
    notes = [f"- {r.trial.label}: {r.status}: {r.error}" for r in failures if r.error]
    md = [f"# {title}", "", *([sharing, ""] if sharing else []), markdown_table(table)]
    if notes:
        md += ["", "## Not completed", "", *notes]
    (out_dir / "summary.md").write_text("\n".join(md) + "\n")
    console = [title, *([sharing] if sharing else []), "", text_table(table)]
    if notes:
        console += ["", *notes]
    console += ["", f"summary: {out_dir / 'summary.md'} and summary.json"]
    return "\n".join(console)


def summary_record(
    results: Sequence[TrialResult],
    out_dir: Path,
    sweep: str,
    source: str,
    metric_name: str,
    interrupted: bool,
) -> dict:
    """summary.json's content: the sweep, the status counts and one entry per trial."""
    statuses = list(dict.fromkeys(r.status for r in results))
    return {
        "sweep": sweep,
        "file": source,
        "out_dir": str(out_dir),
        "metric": metric_name,
        "interrupted": interrupted,
        "counts": {s: sum(r.status == s for r in results) for s in statuses},
        "trials": [_trial_record(r) for r in results],
    }


def _trial_record(r: TrialResult) -> dict:
    return {
        "index": r.trial.index,
        "name": r.trial.label,
        "status": r.status,
        "exit_code": r.exit_code,
        "metric": r.metric if r.metric is not None and math.isfinite(r.metric) else None,
        "wall_time_s": r.wall_time_s,
        "gpus": r.gpus,
        "params": r.trial.params,
        "overrides": r.trial.overrides,
        "command": r.trial.command,
        "run_dir": str(r.trial.run_dir),
        "results": str(r.results_path) if r.results_path else None,
        "log": str(r.log_path),
        "error": r.error,
    }
