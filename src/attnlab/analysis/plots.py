"""The plots of attnlab-compare: a metric's curve per group over training steps (mean over
seeds, +-1 std band; runs that did not complete dotted) and a final metric per group."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from attnlab.analysis.curves import read_curve
from attnlab.analysis.groups import group_label, group_metric
from attnlab.analysis.runs import Group, Run
from attnlab.analysis.tables import fmt_value
from attnlab.runs.status import Status


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(groups: Sequence[Group], names: dict, metric: str, path: Path) -> bool:
    """Mean over completed seeds with a +-1 std band per group; other runs dotted. False when no
    run has the metric in its metrics.csv."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    y_seen, y_other = [], []
    for i, g in enumerate(groups):
        color, label = f"C{i % 10}", group_label(g, names)
        y_seen += _draw_mean_curve(ax, g, metric, color, label)
        for run in g.runs:
            if run.status != Status.COMPLETED:
                y_other += _draw_unfinished_run(ax, run, metric, color, label)
    if not (y_seen or y_other):
        plt.close(fig)
        return False
    if y_scale(y_seen + y_other) == "log":
        ax.set_yscale("log")  # e.g. an attention logit of 3 with qk_norm against 30000 without
    else:
        _fit_y_limits(ax, y_seen, y_other)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric}: mean over seeds, band = ±1 std")
    _finish(plt, fig, ax, path)
    return True


def _draw_mean_curve(ax, group: Group, metric: str, color: str, label: str) -> list[float]:
    """The group's completed runs: mean and +-1 std band per step. The y values drawn."""
    import numpy as np

    by_step: dict[int, list[float]] = {}
    for run in group.completed():
        for s, v in zip(*read_curve(run.run_dir / "metrics.csv", metric), strict=True):
            if math.isfinite(v):
                by_step.setdefault(s, []).append(v)
    if not by_step:
        return []
    steps = np.array(sorted(by_step))
    mean = np.array([np.mean(by_step[s]) for s in steps])
    std = np.array([np.std(by_step[s], ddof=1) if len(by_step[s]) > 1 else 0.0 for s in steps])
    marker = "o" if len(steps) < 3 else None  # a curve of one or two points is still seen
    ax.plot(steps, mean, color=color, marker=marker, label=f"{label} (n={len(group.completed())})")
    ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2, lw=0)
    return [*(mean - std), *(mean + std)]


def _draw_unfinished_run(ax, run: Run, metric: str, color: str, label: str) -> list[float]:
    """A diverged / failed / interrupted run, dotted, its last finite value marked x."""
    steps, values = read_curve(run.run_dir / "metrics.csv", metric)
    finite = [(s, v) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
    if not finite:
        return []
    shown = [v if math.isfinite(v) else float("nan") for v in values]
    ax.plot(steps, shown, color=color, ls=":", lw=1.5)
    ax.plot(*finite[-1], color=color, marker="x", ms=8)
    ax.plot([], [], color=color, ls=":", marker="x",
            label=f"{label}: {run.status} (seed {fmt_value(run.seed)})")  # fmt: skip
    return [v for _, v in finite]


def y_scale(values: Sequence[float]) -> str:
    """The y axis for these values: log when every value is positive and they span at least two
    orders of magnitude (a linear axis would flatten all but the largest curve), else linear."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite or min(finite) <= 0:
        return "linear"
    return "log" if max(finite) / min(finite) >= 100 else "linear"


def _fit_y_limits(ax, y_seen: list[float], y_other: list[float]) -> None:
    """Fit the completed runs; runs that blew up show until twice that range."""
    if not y_seen:
        return
    lo, hi = min(y_seen), max(y_seen)
    span = hi - lo or abs(hi) or 1.0
    lo, hi = min([lo, *y_other]), min(max([hi, *y_other]), hi + span)
    ax.set_ylim(lo - 0.05 * span, hi + 0.05 * span)


def _finish(plt, fig, ax, path: Path, legend: bool = True) -> None:
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


MANY = 12  # more groups than this are drawn as rows (a column each would be an unreadable strip)


def _group_points(groups: Sequence[Group], metric: str):
    """Per group: its index, mean, std and n (attnlab.analysis.groups.group_metric) and its
    completed seeds' finite values."""
    for i, g in enumerate(groups):
        mean, std, n = group_metric(g, metric)
        values = [r.metrics[metric] for r in g.completed() if metric in r.metrics]
        yield i, g, mean, std, n, [v for v in values if math.isfinite(v)]


def plot_final(groups: Sequence[Group], names: dict, metric: str, path: Path) -> None:
    """Mean +- std of the metric per group (error bars), each completed seed a dot; one column
    per group, or one row per group when there are more than MANY."""
    rows = len(groups) > MANY
    plt = _pyplot()
    size = (8.0, 0.32 * len(groups) + 1.4) if rows else (max(5.0, 1.3 * len(groups) + 2), 4.5)
    fig, ax = plt.subplots(figsize=size)
    labels = []
    for i, g, mean, std, n, values in _group_points(groups, metric):
        color, err = f"C{i % 10}", std or 0.0
        if n and rows:
            ax.errorbar([mean], [i], xerr=[err], fmt="o", color=color, capsize=3)
            ax.scatter(values, [i + 0.15] * len(values), s=8, color="k", alpha=0.5, zorder=3)
        elif n:
            ax.errorbar([i], [mean], yerr=[err], fmt="o", color=color, capsize=6)
            ax.scatter([i + 0.08] * len(values), values, s=12, color="k", alpha=0.5, zorder=3)
        partial = len(g.completed()) != len(g.runs)
        if rows:
            labels.append(group_label(g, names) + (f" ({g.status()})" if partial else ""))
        else:
            labels.append(
                group_label(g, names).replace(", ", "\n") + (f"\n({g.status()})" if partial else "")
            )
    if rows:
        ax.set_yticks(range(len(groups)), labels, fontsize=7)
        ax.set_ylim(len(groups) - 0.5, -0.5)  # the first group on top
        ax.set_xlabel(metric)
        ax.set_title(f"{metric}: mean ± std over seeds (dots: seeds)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    else:
        ax.set_xticks(range(len(groups)), labels, fontsize=8)
        ax.set_xlim(-0.6, len(groups) - 0.4)
        ax.set_ylabel(metric)
        ax.set_title(
            f"{metric}: mean ± std over completed seeds\n(dots: one per seed)", fontsize=10
        )
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
