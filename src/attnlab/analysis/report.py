"""The written comparison: the table of groups, comparison.csv and comparison.md."""

from __future__ import annotations

import csv
import math
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


STAT_COLUMNS = ("mean", "std", "n", "ci_low", "ci_high", "diff", "diff_ci_low", "diff_ci_high")
STAT_COLUMNS += ("p", "p_holm", "mdd", "verdict", "role")
CONFIRMATORY = "confirmatory: named in the sweep file before the runs"
EXPLORATORY = "exploratory: not named in the sweep file before the runs"


def role(metric: str, primary: str | None) -> str:
    """A comparison's standing: confirmatory for the sweep file's `primary:` metric, else
    exploratory (every comparison of a sweep that names none)."""
    return CONFIRMATORY if metric == primary else EXPLORATORY


def write_csv(
    path: Path, groups, keys, headline, tests, baseline=None, paired=False, primary=None
) -> None:
    """One row per group: key values, label, status, and per metric mean/std/n, the 95% CI, and
    against the baseline (default the first group) the difference, its CI, p, Holm's p, the
    minimum detectable difference and the verdict (empty for the baseline itself), and the
    comparison's role (confirmatory for the sweep file's primary metric, else exploratory)."""
    from attnlab.analysis import stats

    metrics = [m for m in [headline, *tests] if m]
    header = [*keys, "label", "status", "n_runs"]
    header += [f"{m}_{stat}" for m in metrics for stat in STAT_COLUMNS]
    names = short_names(keys)
    baseline = baseline if baseline is not None else (groups[0] if groups else None)
    cells = {}
    for m in metrics:
        diffs = stats.with_holm([_difference(g, baseline, m, paired) for g in groups])
        cells[m] = [(stats.summarize(_values(g, m)), d) for g, d in zip(groups, diffs, strict=True)]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for i, g in enumerate(groups):
            row = [fmt_value(g.values[k]) for k in keys]
            row += [group_label(g, names), g.status(), len(g.runs)]
            for m in metrics:
                s, d = cells[m][i]
                ci = s.ci or ("", "")
                row += [_cell(s.mean), _cell(s.std), s.n, *ci]
                if d is None:
                    row += [""] * 7
                else:
                    p, p_holm = (None, None) if math.isnan(d.p) else (d.p, d.p_holm)
                    row += [d.diff, *d.ci, _cell(p), _cell(p_holm), _cell(d.mdd), d.verdict()]
                row.append(role(m, primary))
            writer.writerow(row)


def _cell(value):
    return "" if value is None else value


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
    statistics: Sequence[tuple[str, list[list[str]]]] = (),
) -> None:
    """comparison.md: the group table, the statistics per metric (title, table), any extra
    tables (e.g. per length), the runs, unreadable files and the plots."""
    md = [f"# Comparison: {title}", "", markdown_table(table), ""]
    if statistics:
        md += ["## Statistics", ""]
    for heading, rows in statistics:
        md += [f"{heading}:", "", markdown_table(rows), ""]
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


def find_baseline(groups: Sequence[Group], keys: Sequence[str], wanted: Sequence[str]) -> Group:
    """The group matching every KEY=VALUE of `wanted` (KEY a grouping key or its short name);
    with none given, the first group. ValueError naming the choices when none matches."""
    if not wanted:
        return groups[0]
    names = short_names(keys)
    conditions = []
    for item in wanted:
        key, sep, value = item.partition("=")
        full = next((k for k in keys if key in (k, names[k])), None)
        if not sep or full is None:
            raise ValueError(
                f"--baseline {item!r} is not valid; expected KEY=VALUE with KEY one of: "
                + (", ".join(keys) or "none (the runs differ in no key)")
            )
        conditions.append((full, value))
    matches = [
        g
        for g in groups
        if all(fmt_value(g.values[k]) == v or g.values[k] == _as_value(v) for k, v in conditions)
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        labels = "; ".join(group_label(g, names) for g in groups)
        raise ValueError(f"--baseline {' '.join(wanted)} matches no group; the groups: {labels}")
    given = {k for k, _ in conditions}
    rest = [k for k in keys if k not in given]
    raise ValueError(
        f"--baseline {' '.join(wanted)} matches {len(matches)} groups "
        f"({'; '.join(group_label(g, names) for g in matches)}); add --baseline KEY=VALUE for "
        + ", ".join(rest)
    )


def _as_value(text: str):
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def statistics_table(
    groups: Sequence[Group],
    keys: Sequence[str],
    metric: str,
    baseline: Group,
    paired: bool = False,
    still_improving: Sequence[Group] = (),
) -> list[list[str]]:
    """Header + one row per group: n, mean, std, 95% CI, and against the baseline the difference
    with its 95% CI, the test's p, Holm's p across the arms of this table, the minimum detectable
    difference at 80% power at alpha 0.05 / (arms tested) and the verdict
    (attnlab.analysis.stats); the verdict of a group in `still_improving` (or against such a
    baseline) is marked (†), and the header gives attnlab.analysis.budget's note once.
    ValueError when a paired test meets groups of different seeds."""
    from attnlab.analysis import stats
    from attnlab.analysis.budget import NOTE

    test = "paired t" if paired else "Welch"
    names = short_names(keys)
    header = [*keys, "n", "mean", "std", "95% CI", f"diff vs {group_label(baseline, names)}"]
    summaries = [stats.summarize(_values(g, metric)) for g in groups]
    diffs = stats.with_holm([_difference(g, baseline, metric, paired) for g in groups])
    alpha = next((d.alpha for d in diffs if d is not None and d.p_holm is not None), stats.ALPHA)
    mdd = f"MDD (80% power, alpha {alpha:.3g})"  # the alpha of Holm's strictest step
    header += ["95% CI of diff", f"p ({test})", "p (Holm)", mdd, "verdict"]
    rows = [header if keys else ["group", *header]]
    for g, s, d in zip(groups, summaries, diffs, strict=True):
        row = [fmt_value(g.values[k]) for k in keys] or ["all runs"]
        row += [str(s.n), fmt_number(s.mean), fmt_number(s.std), _interval(s.ci)]
        late = any(x is g for x in still_improving)
        if g is baseline:
            row += ["baseline", "", "", "", "", LATE if late else ""]
        elif d is None:
            row += ["", "", "", "", "", "too few runs to test (n < 2)"]
        else:
            exact = " (exact)" if d.test.startswith("exact") else ""  # one arm has no spread
            row += [fmt_number(d.diff), _interval(d.ci), stats.fmt_p(d.p) + exact]
            row += [stats.fmt_p(d.p_holm)]
            late = late or any(x is baseline for x in still_improving)
            row += [fmt_number(d.mdd), d.verdict() + (f" {LATE}" if late else "")]
        rows.append(row)
    if any(LATE in row[-1] for row in rows[1:]):  # the note once, in the header
        rows[0][-1] = f"verdict ({LATE}: {NOTE})"
    return rows


def equivalence_rows(
    groups: Sequence[Group],
    keys: Sequence[str],
    metric: str,
    baseline: Group,
    margin: float,
    paired: bool = False,
) -> list[list[str]]:
    """Header + one row per arm but the baseline: the difference, its 90% interval, the
    equivalence test's p within +-margin (TOST on the same t-test as the statistics table),
    Holm's p across the arms, and the verdict (attnlab.analysis.stats.tost)."""
    from attnlab.analysis import stats

    names = short_names(keys)
    header = [*keys] if keys else ["group"]
    header += ["n", f"diff vs {group_label(baseline, names)}", "90% CI of diff"]
    header += [f"p (TOST, +-{margin:g})", "p (Holm)", "verdict"]
    arms = [g for g in groups if g is not baseline]
    diffs = [_difference(g, baseline, metric, paired) for g in arms]
    tests = stats.tost_with_holm([None if d is None else stats.tost(d, margin) for d in diffs])
    rows = [header]
    for g, e in zip(arms, tests, strict=True):
        row = [fmt_value(g.values[k]) for k in keys] or ["all runs"]
        row.append(str(len(_values(g, metric))))
        if e is None:
            rows.append([*row, "", "", "", "", "no t-test (fewer than 2 runs, or no spread)"])
            continue
        row += [fmt_number(e.diff), _interval(e.ci90), stats.fmt_p(e.p)]
        rows.append([*row, stats.fmt_p(e.p_holm), e.verdict()])
    return rows


LATE = "(†)"  # marks a row whose arm (or baseline) was still improving at the end
_SHORT = (
    ("no difference detected; this n would miss differences under ", "not detected, MDD "),
    ("no difference detected; one arm has no spread, and an exact test at this n cannot go "
     "below p=", "not detected (exact test; its floor: p="),
    ("no difference detected (no spread between seeds)", "no spread, no test"),
    (" in every seed (no spread between seeds: no test)", " in every seed (no test)"),
)  # fmt: skip


def console_statistics(rows: list[list[str]]) -> tuple[list[list[str]], str | None]:
    """A statistics table narrowed for the console (comparison.md keeps the whole one): mean and
    difference with their intervals in one cell each, Holm's p, a short verdict; and the budget
    note to print once below it (None when no row is marked)."""
    from attnlab.analysis.tables import sig3

    header, body = rows[0], rows[1:]
    i = header.index("n")
    keys = list(short_names(header[:i]).values()) if header[0] != "group" else header[:i]
    out = [[*keys, "n", "mean [95% CI]", "diff [95% CI]", "p (Holm)", "verdict"]]
    for row in body:
        mean = sig3(f"{row[i + 1]} {row[i + 3]}".strip())
        diff = (
            row[i + 4] if row[i + 4] == "baseline" else sig3(f"{row[i + 4]} {row[i + 5]}".strip())
        )
        verdict = row[-1]
        for long, short in _SHORT:
            verdict = verdict.replace(long, short)
        exact = " (exact)" if row[i + 6].endswith("(exact)") else ""
        out.append([*row[:i], row[i], mean, diff, (row[i + 7] + exact).strip(), verdict])
    marked = any(LATE in row[-1] for row in body)
    from attnlab.analysis.budget import NOTE

    return out, (f"{LATE} {NOTE}" if marked else None)


def _values(group: Group, metric: str) -> list[float]:
    return [r.metrics[metric] for r in group.completed() if metric in r.metrics]


def _by_seed(group: Group, metric: str) -> dict:
    return {r.seed: r.metrics[metric] for r in group.completed() if metric in r.metrics}


def _difference(group: Group, baseline: Group, metric: str, paired: bool):
    from attnlab.analysis import stats

    if group is baseline:
        return None
    if paired:
        arm, base = _by_seed(group, metric), _by_seed(baseline, metric)
        return stats.paired(arm, base) if len(arm) >= 2 and len(base) >= 2 else None
    arm, base = _values(group, metric), _values(baseline, metric)
    return stats.welch(arm, base) if len(arm) >= 2 and len(base) >= 2 else None


def _interval(ci: tuple[float, float] | None) -> str:
    return "" if ci is None else f"[{fmt_number(ci[0])}, {fmt_number(ci[1])}]"
