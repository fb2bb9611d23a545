"""Runs as attnlab-compare reads them: every results.json below some paths, and the trials of
an attnlab-sweep summary.json that left none."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.analysis.budget import LATE_GAIN, run_late_gain
from attnlab.runs.dotted import flatten
from attnlab.runs.record import machine_label
from attnlab.runs.status import Status, status_counts

# Numbers of results.json besides "metrics" that are read as metrics of the run.
RECORD_NUMBERS = ("nll_init", "peak_lr")


@dataclass
class Run:
    path: Path  # the results.json
    status: str
    metrics: dict[str, float]
    config: dict[str, Any]  # dotted keys
    seed: Any = None
    error: str | None = None
    partial: bool = False  # config holds only the sweep parameters (a trial without results.json)
    # results.json's "extrapolation": {"<length>": {metric: value or None, ...}}
    extrapolation: dict[str, dict] = field(default_factory=dict)
    wall_time_s: float | None = None  # launch to end, all attempts (the planner's compute)
    git_commit: str | None = None  # the code the run came from (results.json's git_commit)
    machine: str = "not recorded"  # results.json's machine, as one line (attnlab.runs.record)

    @property
    def run_dir(self) -> Path:
        return self.path.parent


@dataclass
class Group:
    values: dict[str, Any]  # differing key -> value
    runs: list[Run] = field(default_factory=list)

    def completed(self) -> list[Run]:
        return [r for r in self.runs if r.status == Status.COMPLETED]

    def status(self) -> str:
        return status_counts([r.status for r in self.runs])


def find_results(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Every results.json at or below each path (deduplicated, sorted)."""
    found: dict[Path, None] = {}
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"no such file or directory: {p}")
        candidates = [p] if p.is_file() else sorted(p.rglob("results.json"))
        for c in candidates:
            found.setdefault(c.resolve(), None)
    return sorted(found)


def load_run(path: Path) -> Run:
    """Parse one results.json; ValueError with the reason when it is not a run record."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read: {err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    config = data.get("config") or {}
    metrics = data.get("metrics") or {}
    if not isinstance(config, dict) or not isinstance(metrics, dict):
        raise ValueError("'config' and 'metrics' must be objects")
    numbers = {}
    for name, value in metrics.items():
        try:
            numbers[name] = float(value)
        except (TypeError, ValueError):
            continue
    config = flatten(config)
    extrapolation = _extrapolation(data.get("extrapolation"))
    wall = data.get("wall_time_s")
    for key in RECORD_NUMBERS:  # e.g. nll_init: the loss at initialization (LR sensitivity's cap)
        if isinstance(data.get(key), int | float) and not isinstance(data.get(key), bool):
            numbers[key] = float(data[key])
    gain = run_late_gain(path.parent)
    if gain is not None:
        numbers[LATE_GAIN] = gain
    return Run(
        path=path,
        status=str(data.get("status") or Status.UNKNOWN),
        metrics={**numbers, **eval_metrics(path.parent), **length_metrics(extrapolation)},
        config=config,
        seed=data.get("seed", config.get("seed")),
        error=data.get("error"),
        extrapolation=extrapolation,
        wall_time_s=float(wall) if isinstance(wall, int | float) else None,
        git_commit=data.get("git_commit") if isinstance(data.get("git_commit"), str) else None,
        machine=machine_label(data.get("machine")),
    )


def fill_from_configs(runs: list[Run]) -> None:
    """A run's results.json records only its overrides and the ablation keys. Where another run
    records a key this one does not (runs of two sweeps, one overriding a key the other left
    at its preset's value), this run's value is in its config.yaml: read it from there, so the
    runs group by what they ran, not by what their commands said."""
    keys = {k for r in runs for k in r.config}
    for run in runs:
        missing = [k for k in keys if k not in run.config]
        composed = _composed_config(run.run_dir) if missing and not run.partial else {}
        run.config.update({k: composed[k] for k in missing if k in composed})


def _composed_config(run_dir: Path) -> dict[str, Any]:
    """The run's whole config (config.yaml, dotted keys), or {} where it has none."""
    return flatten(stored_config(run_dir))


def stored_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.yaml as a nested dict, or {} where it is missing or not a mapping."""
    import yaml

    try:
        tree = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return tree if isinstance(tree, dict) else {}


def length_metrics(extrapolation: dict[str, dict]) -> dict[str, float]:
    """Per-length values as metrics named length/<L>/<metric>, e.g. length/16/greedy_exact_match,
    so that --metric and --columns can test them like any other (nulls are left out)."""
    return {
        f"length/{length}/{name}": float(value)
        for length, entry in extrapolation.items()
        for name, value in entry.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


EVAL_SCORES = ("bleu", "chrf", "chrf++", "nll", "perplexity")


def eval_metrics(run_dir: Path) -> dict[str, float]:
    """The scores of every attnlab-eval result saved in the run (<run_dir>/eval/<name>.json) as
    eval/<name>/<score>, e.g. eval/greedy/bleu (unreadable files are skipped)."""
    metrics = {}
    for path in sorted((run_dir / "eval").glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            for score in EVAL_SCORES:
                if isinstance(data.get(score), int | float):
                    metrics[f"eval/{path.stem}/{score}"] = float(data[score])
    return metrics


def _extrapolation(value: Any) -> dict[str, dict]:
    """The per-length records whose keys are lengths (anything else is dropped)."""
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if str(k).isdigit() and isinstance(v, dict)}


def trials_without_results(paths: Iterable[str | os.PathLike], found: set[Path]) -> list[Run]:
    """Trials recorded in an attnlab-sweep summary.json that left no results.json (for example a
    bad config, exit code 2), as runs with the trial's status and its sweep parameters."""
    runs = []
    for p in map(Path, paths):
        for summary in sorted(p.rglob("summary.json")) if p.is_dir() else []:
            try:
                trials = json.loads(summary.read_text()).get("trials")
            except (OSError, ValueError, AttributeError):
                continue
            for t in trials if isinstance(trials, list) else []:
                if not isinstance(t, dict) or not isinstance(t.get("params"), dict):
                    continue
                path = (summary.parent / str(t.get("name")) / "results.json").resolve()
                if path in found:
                    continue
                found.add(path)
                runs.append(
                    Run(
                        path=path,
                        status=str(t.get("status") or Status.UNKNOWN),
                        metrics={},
                        config=flatten(t["params"]),
                        seed=t["params"].get("seed"),
                        error=t.get("error"),
                        partial=True,
                    )
                )
    return runs
