"""Grouping runs by the config keys whose values differ, and aggregating each group's seeds."""

from __future__ import annotations

import fnmatch
import json
import math
import statistics
from collections.abc import Sequence
from typing import Any

from attnlab.analysis.runs import Group, Run
from attnlab.analysis.tables import fmt_value

# Keys that never define an experimental condition (per-run names, paths, logger settings).
DEFAULT_IGNORE = (
    "seed",
    "name",  # a run's or a sweep's label, group and tags (W&B's): never what it learns
    "group",
    "tags",
    "run_name",
    "*run_id",
    "hydra.*",
    "paths.*",
    "logger.*",
    "wandb.*",
    "*_dir",
    "*.dir",
)
# Headline by default: unsmoothed first (a label-smoothing ablation ranked on the smoothed
# val/loss is biased), then test metrics for runs that were never validated.
DEFAULT_METRICS = (
    "val/nll_best",
    "val/nll",
    "val/loss_best",
    "val/loss",
    "test/nll",
    "test/perplexity",
    "test/loss",
)
MISSING = "<missing>"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def ignored(key: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def differing_keys(runs: Sequence[Run], ignore: Sequence[str] = DEFAULT_IGNORE) -> list[str]:
    """Config keys whose value is not the same in every run (runs with an empty or partial config,
    such as a trial that failed before writing results.json, do not count)."""
    with_config = [r for r in runs if r.config and not r.partial] or [r for r in runs if r.config]
    keys = dict.fromkeys(k for r in with_config for k in r.config)
    differ = []
    for key in keys:
        if ignored(key, ignore):
            continue
        values = {_canonical(r.config.get(key, MISSING)) for r in with_config}
        if len(values) > 1:
            differ.append(key)
    return differ


def sort_key(value: Any) -> tuple:
    if value is None or value == MISSING:
        return (0, "")
    if isinstance(value, bool):
        return (1, int(value))
    if isinstance(value, (int, float)):
        return (2, value)
    return (3, _canonical(value))


def group_runs(runs: Sequence[Run], keys: Sequence[str]) -> list[Group]:
    """One group per combination of the keys' values, in natural order of the values."""
    groups: dict[tuple, Group] = {}
    for run in runs:
        values = {k: run.config.get(k, MISSING) for k in keys}
        ident = tuple(_canonical(v) for v in values.values())
        groups.setdefault(ident, Group(values)).runs.append(run)
    return sorted(groups.values(), key=lambda g: [sort_key(v) for v in g.values.values()])


def aggregate(values: Sequence[float]) -> tuple[float | None, float | None, int]:
    """(mean, sample std, n) of the finite values; std is None when n < 2."""
    finite = [v for v in values if math.isfinite(v)]
    n = len(finite)
    mean = statistics.fmean(finite) if n else None
    std = statistics.stdev(finite) if n >= 2 else None
    return mean, std, n


def group_metric(group: Group, metric: str) -> tuple[float | None, float | None, int]:
    return aggregate([r.metrics[metric] for r in group.completed() if metric in r.metrics])


def choose_metrics(runs: Sequence[Run], requested: str | None) -> tuple[str | None, list[str]]:
    """The headline metric (requested, else the first of DEFAULT_METRICS present, else the
    first test/* metric) and the test/* and eval/* ones (eval/<name>/<score>: attnlab-eval
    results saved in the run directory)."""
    available = sorted({m for r in runs for m in r.metrics})
    if requested is not None:
        if requested not in available:
            raise ValueError(
                f"--metric {requested!r} is in no results.json; available: "
                + (", ".join(available) or "none")
            )
        headline = requested
    else:
        tests_present = [m for m in available if m.startswith("test/")]
        headline = next((m for m in DEFAULT_METRICS if m in available), None)
        headline = headline or next(iter(tests_present), None)
    tests = [m for m in available if m.startswith(("test/", "eval/")) and m != headline]
    return headline, tests


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """model.pos_encoding -> pos_encoding, unless two keys would share a short name."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: s if last.count(s) == 1 else k for k, s in zip(keys, last, strict=True)}


def group_label(group: Group, names: dict[str, str]) -> str:
    if not group.values:
        return "all runs"
    return ", ".join(f"{names[k]}={fmt_value(v)}" for k, v in group.values.items())
