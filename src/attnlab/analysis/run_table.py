"""runs.csv: one row per run, the compact and recomputable form of a comparison.

Columns: the config keys the runs were grouped by, then `seed`, `status`, `wall_time_s`,
`git_commit` (the commit each run came from; absent from tables written before it was kept),
`machine` (its CPU, cores, GPUs and torch: attnlab.runs.record.machine_label; "not recorded" for
runs made before results.json held it; absent from older tables), then every metric (test/*,
val/*, eval/<name>/<score>, length/<L>/<metric>). attnlab-compare writes it beside
comparison.csv and reads a PATH ending in .csv back as runs, so a report's tables can be
regenerated from a file in the repository (docs/results/) without the run directories.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import yaml

from attnlab.analysis.groups import sort_key
from attnlab.analysis.runs import Group, Run
from attnlab.analysis.tables import fmt_value
from attnlab.runs.status import Status

FIXED = ("seed", "status", "wall_time_s")
COMMIT = "git_commit"  # after FIXED; optional when read
MACHINE = "machine"  # after COMMIT; optional when read


def table_metrics(runs: Sequence[Run]) -> list[str]:
    """Every metric of the runs except the per-step train/* ones, sorted."""
    return sorted({m for r in runs for m in r.metrics if not m.startswith("train/")})


def write_runs_csv(path: Path, groups: Sequence[Group], keys: Sequence[str]) -> None:
    """One row per run, in group order then seed order; metric values at full precision."""
    runs = [r for g in groups for r in g.runs]
    metrics = table_metrics(runs)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*keys, *FIXED, COMMIT, MACHINE, *metrics])
        for g in groups:
            for r in sorted(g.runs, key=lambda r: sort_key(r.seed)):
                row = [fmt_value(g.values[k]) for k in keys]
                row += [fmt_value(r.seed), r.status, _number(r.wall_time_s), r.git_commit or ""]
                row += [r.machine]
                row += [_number(r.metrics.get(m)) for m in metrics]
                writer.writerow(row)


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _parse(cell: str):
    """A config cell back to its value: null, true, 4, 0.1, [1,2], or the text itself."""
    try:
        return yaml.safe_load(cell) if cell != "" else None
    except yaml.YAMLError:
        return cell


def read_runs_csv(path: Path) -> list[Run]:
    """The runs of a runs.csv; ValueError naming the file when it is not one."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read: {err}") from None
    if not rows or not all(c in rows[0] for c in FIXED):
        raise ValueError(f"{path}: not a runs table; expected the columns {', '.join(FIXED)}")
    header = rows[0]
    first_metric = header.index(FIXED[-1]) + 1 + (COMMIT in header) + (MACHINE in header)
    keys, metrics = header[: header.index("seed")], header[first_metric:]
    runs = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ValueError(f"{path}:{line}: {len(row)} cells where the header has {len(header)}")
        cell = dict(zip(header, row, strict=True))
        values = {}
        for m in metrics:
            if cell[m] != "":
                try:
                    values[m] = float(cell[m])
                except ValueError:
                    raise ValueError(f"{path}:{line}: {m}={cell[m]!r} is not a number") from None
        runs.append(
            Run(
                path=path,
                status=cell["status"] or Status.UNKNOWN,
                metrics=values,
                config={k: _parse(cell[k]) for k in keys} | {"seed": _parse(cell["seed"])},
                seed=_parse(cell["seed"]),
                extrapolation=_lengths(values),
                wall_time_s=float(cell["wall_time_s"]) if cell["wall_time_s"] else None,
                git_commit=cell.get(COMMIT) or None,
                machine=cell.get(MACHINE) or "not recorded",
            )
        )
    return runs


def _lengths(metrics: dict[str, float]) -> dict[str, dict]:
    """length/<L>/<metric> columns back to results.json's "extrapolation" shape."""
    out: dict[str, dict] = {}
    for name, value in metrics.items():
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == "length" and parts[1].isdigit():
            out.setdefault(parts[1], {})[parts[2]] = value
    return out
