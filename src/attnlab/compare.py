"""attnlab-compare: compare runs across the config keys that differ between them, seeds aggregated.

    attnlab-compare outputs/sweeps/pos_encoding/2026-01-01_12-00-00
    attnlab-compare outputs/sweeps/heads/* --metric test/exact_match --out reports/heads

Every results.json below each PATH is one run (see docs/architecture.md). Runs are grouped by the
config keys whose values differ between them (`seed`, run names, paths and logger settings
excluded: DEFAULT_IGNORE, extend with --ignore); per group, the headline metric and
every test/* metric are aggregated over the completed runs (mean, sample std, n). Diverged, failed
and interrupted runs are counted in the group's status, never silently dropped. Writes
comparison.md, comparison.csv, <curve>_curves.png (validation loss per group, mean over seeds with
a +-1 std band, runs that did not complete dotted) and <metric>_by_group.png (mean +- std).
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import math
import os
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.dotted import flatten

# Keys that never define an experimental condition (per-run names, paths, logger settings).
DEFAULT_IGNORE = (
    "seed",
    "run_name",
    "*run_id",
    "hydra.*",
    "paths.*",
    "logger.*",
    "wandb.*",
    "*_dir",
    "*.dir",
)
DEFAULT_METRICS = ("val/loss_best", "val/loss")
MISSING = "<missing>"
STATUS_ORDER = ("completed", "diverged", "failed", "interrupted", "running", "unknown")


@dataclass
class Run:
    path: Path  # the results.json
    status: str
    metrics: dict[str, float]
    config: dict[str, Any]  # dotted keys
    seed: Any = None
    error: str | None = None
    partial: bool = False  # config holds only the sweep parameters (a trial without results.json)

    @property
    def run_dir(self) -> Path:
        return self.path.parent


@dataclass
class Group:
    values: dict[str, Any]  # differing key -> value
    runs: list[Run] = field(default_factory=list)

    def completed(self) -> list[Run]:
        return [r for r in self.runs if r.status == "completed"]

    def status(self) -> str:
        statuses = [r.status for r in self.runs]
        names = sorted(set(statuses), key=lambda s: (STATUS_ORDER + (s,)).index(s))
        return ", ".join(f"{statuses.count(s)} {s}" for s in names)


# --- reading runs -----------------------------------------------------------------------------


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
    return Run(
        path=path,
        status=str(data.get("status") or "unknown"),
        metrics=numbers,
        config=config,
        seed=data.get("seed", config.get("seed")),
        error=data.get("error"),
    )


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
                        status=str(t.get("status") or "unknown"),
                        metrics={},
                        config=flatten(t["params"]),
                        seed=t["params"].get("seed"),
                        error=t.get("error"),
                        partial=True,
                    )
                )
    return runs


# --- grouping and aggregation -----------------------------------------------------------------


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


def _sort_key(value: Any) -> tuple:
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
    return sorted(groups.values(), key=lambda g: [_sort_key(v) for v in g.values.values()])


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
    """The headline metric (requested, else val/loss_best, else val/loss) and the test/* ones."""
    available = sorted({m for r in runs for m in r.metrics})
    if requested is not None:
        if requested not in available:
            raise ValueError(
                f"--metric {requested!r} is in no results.json; available: "
                + (", ".join(available) or "none")
            )
        headline = requested
    else:
        headline = next((m for m in DEFAULT_METRICS if m in available), None)
    tests = [m for m in available if m.startswith("test/") and m != headline]
    return headline, tests


# --- formatting -------------------------------------------------------------------------------


def fmt_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def fmt_number(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """model.pos_encoding -> pos_encoding, unless two keys would share a short name."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: s if last.count(s) == 1 else k for k, s in zip(keys, last, strict=True)}


def group_label(group: Group, names: dict[str, str]) -> str:
    if not group.values:
        return "all runs"
    return ", ".join(f"{names[k]}={fmt_value(v)}" for k, v in group.values.items())


def comparison_table(
    groups: Sequence[Group], keys: Sequence[str], headline: str | None, tests: Sequence[str]
) -> list[list[str]]:
    """Header + one row per group: key values, run statuses, headline mean/std/n, test metrics."""
    header = [*keys, "runs"]
    if headline:
        header += [f"{headline} mean", "std", "n"]
    header += [f"{m} (mean ± std, n)" for m in tests]
    rows = [header]
    for g in groups:
        row = [fmt_value(g.values[k]) for k in keys] + [g.status()]
        if headline:
            mean, std, n = group_metric(g, headline)
            row += [fmt_number(mean), fmt_number(std), str(n)]
        for m in tests:
            mean, std, n = group_metric(g, m)
            cell = fmt_number(mean) + (f" ± {fmt_number(std)}" if std is not None else "")
            row.append(f"{cell} (n={n})" if n else "")
        rows.append(row)
    return rows


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("---" for _ in rows[0]) + "|")
    return "\n".join(lines)


def write_csv(path: Path, groups, keys, headline, tests) -> None:
    metrics = [m for m in [headline, *tests] if m]
    header = [*keys, "label", "status", "n_runs"]
    header += [f"{m}_{stat}" for m in metrics for stat in ("mean", "std", "n")]
    names = short_names(keys)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for g in groups:
            row = [fmt_value(g.values[k]) for k in keys]
            row += [group_label(g, names), g.status(), len(g.runs)]
            for m in metrics:
                mean, std, n = group_metric(g, m)
                row += ["" if mean is None else mean, "" if std is None else std, n]
            writer.writerow(row)


# --- plots ------------------------------------------------------------------------------------


def read_curve(metrics_csv: Path, metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric from a Lightning CSVLogger file (sparse rows skipped)."""
    points: dict[int, float] = {}
    try:
        with open(metrics_csv, newline="") as f:
            for row in csv.DictReader(f):
                step, value = row.get("step"), row.get(metric)
                if step not in (None, "") and value not in (None, ""):
                    try:
                        points[int(float(step))] = float(value)
                    except ValueError:
                        continue
    except OSError:
        return [], []
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def plot_curves(groups: Sequence[Group], names: dict, metric: str, path: Path) -> bool:
    """Mean over completed seeds with a +-1 std band per group; other runs dotted. False when no
    run has the metric in its metrics.csv."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 5))
    drawn, y_seen, y_other = False, [], []
    for i, g in enumerate(groups):
        color = f"C{i % 10}"
        label = group_label(g, names)
        by_step: dict[int, list[float]] = {}
        for run in g.completed():
            for s, v in zip(*read_curve(run.run_dir / "metrics.csv", metric), strict=True):
                if math.isfinite(v):
                    by_step.setdefault(s, []).append(v)
        if by_step:
            steps = np.array(sorted(by_step))
            mean = np.array([np.mean(by_step[s]) for s in steps])
            std = np.array(
                [np.std(by_step[s], ddof=1) if len(by_step[s]) > 1 else 0.0 for s in steps]
            )
            n = len(g.completed())
            ax.plot(steps, mean, color=color, label=f"{label} (n={n})")
            ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2, lw=0)
            y_seen += [*(mean - std), *(mean + std)]
            drawn = True
        for run in g.runs:
            if run.status == "completed":
                continue
            steps, values = read_curve(run.run_dir / "metrics.csv", metric)
            finite = [(s, v) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
            if finite:
                values = [v if math.isfinite(v) else float("nan") for v in values]
                ax.plot(steps, values, color=color, ls=":", lw=1.5)
                ax.plot(*finite[-1], color=color, marker="x", ms=8)  # the last finite value
                ax.plot(
                    [],
                    [],
                    color=color,
                    ls=":",
                    marker="x",
                    label=f"{label}: {run.status} (seed {fmt_value(run.seed)})",
                )
                y_other += [v for _, v in finite]
                drawn = True
    if not drawn:
        plt.close(fig)
        return False
    if y_seen:  # fit the completed runs; runs that blew up show until twice that range
        lo, hi = min(y_seen), max(y_seen)
        span = hi - lo or abs(hi) or 1.0
        lo, hi = min([lo, *y_other]), min(max([hi, *y_other]), hi + span)
        ax.set_ylim(lo - 0.05 * span, hi + 0.05 * span)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric}: mean over seeds, band = ±1 std")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_final(groups: Sequence[Group], names: dict, metric: str, path: Path) -> None:
    """Mean +- std of the metric per group (error bars), each completed seed a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(groups) + 2), 4.5))
    ticks = []
    for i, g in enumerate(groups):
        mean, std, n = group_metric(g, metric)
        values = [r.metrics[metric] for r in g.completed() if metric in r.metrics]
        values = [v for v in values if math.isfinite(v)]
        if n:
            ax.errorbar([i], [mean], yerr=[std or 0.0], fmt="o", color=f"C{i % 10}", capsize=6)
            ax.scatter([i + 0.08] * len(values), values, s=12, color="k", alpha=0.5, zorder=3)
        label = group_label(g, names).replace(", ", "\n")
        if len(g.completed()) != len(g.runs):
            label += f"\n({g.status()})"
        ticks.append(label)
    ax.set_xticks(range(len(groups)), ticks, fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric}: mean ± std over completed seeds\n(dots: one per seed)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --- command line -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attnlab-compare",
        description="Compare runs (every results.json below each PATH), seeds aggregated.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="run, sweep or multirun directories")
    p.add_argument("--metric", help="headline metric (default: val/loss_best, else val/loss)")
    p.add_argument("--curve-metric", default="val/loss", help="metric of the curve plot")
    p.add_argument(
        "--group-by", action="append", metavar="KEY", help="group by this config key (repeatable)"
    )
    p.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATTERN",
        help="also ignore config keys matching this glob (repeatable), e.g. 'data.*'",
    )
    p.add_argument("--out", help="output directory (default: the first PATH, if a directory)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        paths = find_results(args.paths)
    except FileNotFoundError as err:
        print(f"attnlab-compare: error: {err}", file=sys.stderr)
        return 2
    runs, unreadable = [], []
    for path in paths:
        try:
            runs.append(load_run(path))
        except ValueError as err:
            unreadable.append((path, str(err)))
    runs += trials_without_results(args.paths, set(paths))
    for path, err in unreadable if not runs else []:
        print(f"could not read {path}: {err}")
    if not runs:
        print(f"attnlab-compare: error: no readable results.json under {' '.join(args.paths)}")
        return 1
    try:
        headline, tests = choose_metrics(runs, args.metric)
    except ValueError as err:
        print(f"attnlab-compare: error: {err}", file=sys.stderr)
        return 2

    ignore = [*DEFAULT_IGNORE, *args.ignore]
    keys = args.group_by or differing_keys(runs, ignore)
    groups = group_runs(runs, keys)
    names = short_names(keys)
    first = Path(args.paths[0])
    out = Path(args.out) if args.out else (first if first.is_dir() else Path.cwd())
    out.mkdir(parents=True, exist_ok=True)

    table = comparison_table(groups, keys, headline, tests)
    title = (
        f"{len(runs)} runs in {len(groups)} groups"
        + (f" by {', '.join(keys)}" if keys else " (no config key differs)")
        + "; seeds aggregated over completed runs"
    )
    print(title)
    print(text_table(table))
    for path, err in unreadable:
        print(f"could not read {path}: {err}")

    written = [out / "comparison.md", out / "comparison.csv"]
    write_csv(out / "comparison.csv", groups, keys, headline, tests)
    curves = out / f"{args.curve_metric.replace('/', '_')}_curves.png"
    if plot_curves(groups, names, args.curve_metric, curves):
        written.append(curves)
    else:
        print(f"no {args.curve_metric} in any metrics.csv: curve plot skipped")
    if headline:
        final = out / f"{headline.replace('/', '_')}_by_group.png"
        plot_final(groups, names, headline, final)
        written.append(final)

    md = [f"# Comparison: {title}", "", markdown_table(table), "", "## Runs", ""]
    run_rows = [["group", "seed", "status", headline or "metric", "run", "error"]]
    for g in groups:
        for r in sorted(g.runs, key=lambda r: _sort_key(r.seed)):
            value = r.metrics.get(headline) if headline else None
            run_rows.append(
                [
                    group_label(g, names),
                    fmt_value(r.seed),
                    r.status,
                    fmt_number(value),
                    os.path.relpath(r.run_dir, out),
                    (r.error or "").splitlines()[0][:120] if r.error else "",
                ]
            )
    md.append(markdown_table(run_rows))
    if unreadable:
        md += ["", "## Unreadable results.json", ""]
        md += [f"- {os.path.relpath(p, out)}: {err}" for p, err in unreadable]
    md += ["", *[f"![{p.stem}]({p.name})" for p in written if p.suffix == ".png"]]
    (out / "comparison.md").write_text("\n".join(md) + "\n")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
