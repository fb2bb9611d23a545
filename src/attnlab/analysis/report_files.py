"""The files of attnlab-compare: comparison.md, comparison.csv, runs.csv, the plots, and for a
learning-rate sweep lr_<metric>.png and lr_sweep.csv. `c` is the command's Comparison."""

from __future__ import annotations

from pathlib import Path

from attnlab.analysis import lr_sweep, report
from attnlab.analysis.groups import group_label, short_names
from attnlab.analysis.run_table import write_runs_csv
from attnlab.analysis.tables import console_lines, fit_console, text_table


def statistics_title(metric: str, c, paired: bool) -> str:
    arms = len(c.plan_groups) - 1  # the groups tested: an LR study's arms at their best rate
    test = "paired t-test over seeds" if paired else "Welch's t-test"
    label = group_label(c.baseline, short_names(c.keys))
    standing = report.role(metric, getattr(c, "primary", None))
    return (
        f"{metric} ({standing}): mean, 95% CI; against {label}: difference, {test}, Holm's "
        f"correction across {arms} arm{'s' * (arms != 1)}, minimum detectable difference at 80% "
        f"power at alpha 0.05/{max(1, arms)} (Holm's strictest step)"
    )


def equivalence_title(metric: str, c, paired: bool) -> str:
    test = "the paired t-test" if paired else "Welch's t-test"
    label = group_label(c.baseline, short_names(c.keys))
    standing = report.EXPLORATORY  # a margin from the command line (a study's: compare_study)
    return (
        f"{metric} ({standing}): equivalence to {label} within +-{c.margin:g}: two one-sided "
        f"tests (TOST) on {test}, the 90% interval of the difference, Holm across the arms"
    )


def write_report(out: Path, table, c, args) -> list[Path]:
    """comparison.csv, runs.csv, the plots and comparison.md under `out`; the files written."""
    from attnlab.analysis.plots import plot_curves, plot_final

    groups, keys, headline, tests = c.groups, c.keys, c.headline, c.tests
    names = short_names(keys)
    written = [out / "comparison.md", out / "comparison.csv", out / "runs.csv"]
    report.write_csv(out / "comparison.csv", groups, keys, headline, tests, c.baseline,
                     args.paired, getattr(c, "primary", None))  # fmt: skip
    write_runs_csv(out / "runs.csv", groups, keys)
    lr_sections = _lr_files(out, c, written) if c.lr is not None else []
    curves = out / f"{args.curve_metric.replace('/', '_')}_curves.png"
    # a learning-rate sweep's curves: each arm at its best rate (every rate would be a tangle)
    ranked = c.lr is not None and not c.lr.descriptive  # a diagnostic has no best rate
    curve_groups = c.lr.best_groups if ranked else groups
    curve_names = short_names(c.lr.arm_keys) if ranked else names
    has_curve = plot_curves(curve_groups, curve_names, args.curve_metric, curves)
    if has_curve:
        written.append(curves)
    else:
        print(f"no {args.curve_metric} in any metrics.csv: plotting the test metrics instead")
    # Without a validation curve, every test metric gets its own plot (a run that was never
    # validated still has a picture).
    for metric in dict.fromkeys([headline] + ([] if has_curve else tests)):
        if metric:
            final = out / f"{metric.replace('/', '_')}_by_group.png"
            plot_final(groups, names, metric, final)
            written.append(final)
    extra_tables = _extrapolation(out, groups, names, written)
    runs = report.run_rows(groups, names, headline, out)
    images = [p for p in written if p.suffix == ".png"]
    statistics = [(statistics_title(m, c, args.paired), rows) for m, rows in c.statistics.items()]
    for m, rows in getattr(c, "equivalence", {}).items():  # --equivalence: after its metric's
        at = next(i for i, (title, _) in enumerate(statistics) if title.startswith(f"{m} ("))
        statistics.insert(at + 1, (equivalence_title(m, c, args.paired), rows))
    statistics = lr_sections + statistics
    report.write_markdown(
        out / "comparison.md", c.title, table, runs, c.unreadable, images, extra_tables,
        statistics,
    )  # fmt: skip
    return written


def _lr_files(out: Path, c, written: list[Path]) -> list[tuple[str, list]]:
    """A learning-rate sweep's plot (lr_<metric>.png) and summary table (lr_sweep.csv), appended
    to `written`; its (heading, table) sections for comparison.md."""
    import csv

    lr = c.lr
    plot = out / f"lr_{lr.metric.replace('/', '_')}.png"
    if lr_sweep.plot(lr.arms, [*lr.arm_keys, lr.x_key], lr.x_key, lr.metric, plot):
        written.append(plot)
    tables, headings = lr.tables(), lr.headings()
    with open(out / "lr_sweep.csv", "w", newline="") as f:
        csv.writer(f).writerows(tables.get("lr summary") or tables["lr curve"])
    written.append(out / "lr_sweep.csv")
    return [(headings[k], rows) for k, rows in tables.items()]


def _extrapolation(out: Path, groups, names, written: list[Path]) -> list[list[list[str]]]:
    """extrapolation_<metric>.png per length metric (appended to `written`); a table per
    length metric (exact_match or perplexity first), printed and returned for comparison.md."""
    from attnlab.analysis.extrapolation import (
        console_table,
        extrapolation_table,
        length_metrics,
        plot_extrapolation,
    )

    metrics = length_metrics([r for g in groups for r in g.runs])
    for metric in metrics:
        path = out / f"extrapolation_{metric}.png"
        if plot_extrapolation(groups, names, metric, path):
            written.append(path)
    tables = [extrapolation_table(groups, names, metric) for metric in metrics]
    for metric in metrics:  # the console's narrowed; comparison.md's whole
        rows, note = console_table(groups, names, metric)
        rows, fitted = fit_console(rows, 1)
        print()
        print(text_table(rows))
        print(console_lines(note + (f"; {fitted}" if fitted else "")))
    return tables
