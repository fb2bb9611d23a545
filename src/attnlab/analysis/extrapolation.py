"""Length extrapolation across runs: each group's metric against length (mean +- std over its
completed seeds), from results.json's "extrapolation", as a plot and a table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from attnlab.analysis.groups import aggregate, group_label
from attnlab.analysis.runs import Group, Run, stored_config
from attnlab.analysis.tables import fmt_mean_std

# In the order they are reported; the first present is the table's. Free-running (greedy) and
# teacher-forced metrics carry their own names; "exact_match" and "token_acc" are the names runs
# written before that distinction used (greedy and teacher-forced respectively).
LENGTH_METRICS = (
    "greedy_exact_match",
    "exact_match",
    "perplexity",
    "greedy_token_acc",
    "teacher_forced_token_acc",
    "token_acc",
    "nll",
)


def length_metrics(runs: Sequence[Run]) -> list[str]:
    """The per-length metrics some run reports, in LENGTH_METRICS order."""
    seen = {m for r in runs for entry in r.extrapolation.values() for m in entry}
    return [m for m in LENGTH_METRICS if m in seen]


def lengths_of(groups: Sequence[Group]) -> list[int]:
    return sorted({int(k) for g in groups for r in g.runs for k in r.extrapolation})


def by_length(group: Group, metric: str) -> dict[int, tuple[float | None, float | None, int]]:
    """length -> (mean, std, n) of the metric over the group's completed runs (null values,
    e.g. a length the encoding cannot represent, are not counted)."""
    values: dict[int, list[float]] = {}
    for run in group.completed():
        for length, entry in run.extrapolation.items():
            value = entry.get(metric)
            if isinstance(value, int | float):
                values.setdefault(int(length), []).append(float(value))
    return {length: aggregate(v) for length, v in sorted(values.items())}


def extrapolation_table(groups: Sequence[Group], names: dict, metric: str) -> list[list[str]]:
    """Header (group, one column per length) + one row per group: 'mean ± std (n=k)'."""
    lengths = lengths_of(groups)
    rows = [[f"{metric} by length", *map(str, lengths)]]
    for g in groups:
        stats = by_length(g, metric)
        cells = [fmt_mean_std(*stats.get(n, (None, None, 0))) or _why_none(g, n) for n in lengths]
        rows.append([group_label(g, names), *cells])
    return rows


def console_table(groups: Sequence[Group], names: dict, metric: str):
    """extrapolation_table narrowed for the console (comparison.md keeps the whole one): the
    arm's values joined by '/', each cell 'mean±std' (3 and 1 significant digits); the rows and
    the note that names the keys and the seeds."""
    lengths = lengths_of(groups)
    keys = list(groups[0].values) if groups else []
    rows = [["arm" if keys else "group", *map(str, lengths)]]
    counts = set()
    for g in groups:
        stats = by_length(g, metric)
        cells = []
        for n in lengths:
            mean, std, k = stats.get(n, (None, None, 0))
            if mean is None:
                cells.append("null" if _why_none(g, n) else "")
                continue
            counts.add(k)
            cells.append(f"{mean:.3g}" + ("" if std is None else f"±{std:.1g}"))
        label = "/".join(str(g.values[k]) for k in keys) if keys else group_label(g, names)
        rows.append([label, *cells])
    seeds = f"{counts.pop()} seeds each" if len(counts) == 1 else "seeds per cell in comparison.md"
    shown = "/".join(names.get(k, k) for k in keys)
    note = (f"arm: {shown}; " if keys else "") + f"{metric}: mean±std over {seeds}"
    return rows, note


def _why_none(group: Group, length: int) -> str:
    """'null' for a length the group's runs could not represent (results.json gives the
    reason), '' where they did not evaluate it."""
    reasons = [r.extrapolation.get(str(length), {}).get("reason") for r in group.completed()]
    return "null (not representable)" if any(reasons) else ""


def longest_trained(runs: Sequence[Run]) -> int | None:
    """The longest training length of the runs (synthetic data.train_len, LM data.block_size),
    read from their config.yaml; None when unknown or when they differ."""
    found = set()
    for run in runs:
        tree = stored_config(run.run_dir)
        if not tree:
            continue
        data = tree.get("data") or {}
        train_len = data.get("train_len")
        found.add(train_len[1] if isinstance(train_len, list) else data.get("block_size"))
    return found.pop() if len(found) == 1 and None not in found else None


def plot_extrapolation(groups: Sequence[Group], names: dict, metric: str, path: Path) -> bool:
    """The metric against length, one line per group (mean, +-1 std band), the training range
    shaded; False when no group has a value."""
    from attnlab.analysis.plots import _finish, _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    drawn = False
    for i, g in enumerate(groups):
        stats = by_length(g, metric)
        points = [(n, m, s or 0.0) for n, (m, s, k) in stats.items() if k and math.isfinite(m)]
        if not points:
            continue
        x, mean, std = (list(t) for t in zip(*points, strict=True))
        color = f"C{i % 10}"
        label = f"{group_label(g, names)} (n={len(g.completed())})"
        ax.plot(x, mean, color=color, marker="o", ms=4, label=label)
        lo = [m - s for m, s in zip(mean, std, strict=True)]
        hi = [m + s for m, s in zip(mean, std, strict=True)]
        ax.fill_between(x, lo, hi, color=color, alpha=0.2, lw=0)
        drawn = True
    if not drawn:
        plt.close(fig)
        return False
    lengths = lengths_of(groups)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    trained = longest_trained([r for g in groups for r in g.runs])
    if trained and trained >= lengths[0]:
        ax.axvspan(lengths[0], trained, color="0.85", zorder=0, label="training lengths")
    ax.set_xlabel("length")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} against length: mean over seeds, band = ±1 std")
    _finish(plt, fig, ax, path)
    return True
