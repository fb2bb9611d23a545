"""The written comparison: the table of groups, comparison.csv and comparison.md."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path

from attnlab.analysis.groups import group_label, group_metric, short_names, sort_key
from attnlab.analysis.runs import Group, Run
from attnlab.analysis.tables import fmt_mean_std, fmt_number, fmt_value, markdown_table


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
        row += [fmt_mean_std(*group_metric(g, m)) for m in tests]
        rows.append(row)
    return rows


def write_csv(path: Path, groups, keys, headline, tests) -> None:
    """One row per group: key values, label, status, and mean/std/n of every metric."""
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


def run_rows(groups: Sequence[Group], names: dict, headline: str | None, out: Path):
    """Header + one row per run: group, seed, status, headline value, directory, error."""
    rows = [["group", "seed", "status", headline or "metric", "run", "error"]]
    for g in groups:
        for r in sorted(g.runs, key=lambda r: sort_key(r.seed)):
            value = r.metrics.get(headline) if headline else None
            rows.append(
                [
                    group_label(g, names),
                    fmt_value(r.seed),
                    r.status,
                    fmt_number(value),
                    os.path.relpath(r.run_dir, out),
                    (r.error or "").splitlines()[0][:120] if r.error else "",
                ]
            )
    return rows


def write_markdown(
    path: Path,
    title: str,
    table: list[list[str]],
    runs: list[list[str]],
    unreadable: Sequence[tuple[Path, str]],
    images: Sequence[Path],
    extra_tables: Sequence[list[list[str]]] = (),
) -> None:
    """comparison.md: the group table (and any extra tables, e.g. per length), the runs,
    unreadable files and the plots."""
    md = [f"# Comparison: {title}", "", markdown_table(table), ""]
    for extra in extra_tables:
        md += [markdown_table(extra), ""]
    md += ["## Runs", ""]
    md.append(markdown_table(runs))
    if unreadable:
        md += ["", "## Unreadable results.json", ""]
        md += [f"- {os.path.relpath(p, path.parent)}: {err}" for p, err in unreadable]
    md += ["", *[f"![{p.stem}]({p.name})" for p in images]]
    path.write_text("\n".join(md) + "\n")


__all__ = ["Run", "comparison_table", "run_rows", "write_csv", "write_markdown"]
