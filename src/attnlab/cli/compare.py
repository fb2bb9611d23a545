"""attnlab-compare: compare runs across the config keys that differ between them, seeds aggregated.

    attnlab-compare outputs/sweeps/pos_encoding/2026-01-01_12-00-00
    attnlab-compare outputs/sweeps/heads/* --metric test/exact_match --out reports/heads

Every results.json below each PATH is one run (see docs/architecture.md). Runs are grouped by the
config keys whose values differ between them (`seed`, run names, paths and logger settings
excluded: DEFAULT_IGNORE, extend with --ignore); per group, the headline metric and
every test/* metric (and eval/<name>/<score> from attnlab-eval results saved in a run's eval/
folder) are aggregated over the completed runs (mean, sample std, n). Diverged, failed
and interrupted runs are counted in the group's status, never silently dropped. Writes
comparison.md, comparison.csv, <curve>_curves.png (validation NLL per group, mean over seeds with
a +-1 std band, runs that did not complete dotted; without any validation curve, a plot per test
metric instead) and <metric>_by_group.png (mean +- std). Runs whose results.json has
"extrapolation" (data.eval_lengths) also get extrapolation_<metric>.png, each metric against
length with one line per group (mean +- std over seeds, the training lengths shaded), and a table
of the first of exact_match / perplexity per length.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from attnlab.analysis import report
from attnlab.analysis.groups import (
    DEFAULT_IGNORE,
    choose_metrics,
    differing_keys,
    group_runs,
    short_names,
)
from attnlab.analysis.runs import Run, find_results, load_run, trials_without_results
from attnlab.analysis.tables import text_table

PROG = "attnlab-compare"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Compare runs (every results.json below each PATH), seeds aggregated.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="run, sweep or multirun directories")
    p.add_argument(
        "--metric",
        help="headline metric (default: val/nll_best, else val/nll, val/loss_best, val/loss, "
        "then test metrics)",
    )
    p.add_argument("--curve-metric", default="val/nll", help="metric of the curve plot")
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
    p.add_argument(
        "--columns",
        action="append",
        metavar="PATTERN",
        help="only the test/* and eval/* metrics matching this glob (repeatable), "
        "e.g. 'eval/*/bleu'",
    )
    p.add_argument("--out", help="output directory (default: the first PATH, if a directory)")
    return p


class CompareError(Exception):
    """One line for the user, with the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        runs, unreadable = read_runs(args.paths)
        headline, tests = _choose_metrics(runs, args.metric)
        if args.columns:
            tests = [m for m in tests if any(fnmatch.fnmatchcase(m, p) for p in args.columns)]
    except CompareError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return err.code
    keys = args.group_by or differing_keys(runs, [*DEFAULT_IGNORE, *args.ignore])
    groups = group_runs(runs, keys)
    out = _out_dir(args)
    title = (
        f"{len(runs)} runs in {len(groups)} groups"
        + (f" by {', '.join(keys)}" if keys else " (no config key differs)")
        + "; seeds aggregated over completed runs"
    )
    table = report.comparison_table(groups, keys, headline, tests)
    print(title)
    print(text_table(table))
    for path, err in unreadable:
        print(f"could not read {path}: {err}")
    written = write_report(out, title, table, groups, keys, headline, tests, unreadable, args)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def read_runs(paths: list[str]) -> tuple[list[Run], list[tuple[Path, str]]]:
    """Every readable run below `paths` (sweep trials without results.json included), and the
    results.json files that could not be read, with the reason."""
    try:
        found = find_results(paths)
    except FileNotFoundError as err:
        raise CompareError(str(err)) from None
    runs, unreadable = [], []
    for path in found:
        try:
            runs.append(load_run(path))
        except ValueError as err:
            unreadable.append((path, str(err)))
    runs += trials_without_results(paths, set(found))
    if not runs:
        for path, err in unreadable:
            print(f"could not read {path}: {err}")
        raise CompareError(f"no readable results.json under {' '.join(paths)}", code=1)
    return runs, unreadable


def _choose_metrics(runs: list[Run], requested: str | None) -> tuple[str | None, list[str]]:
    try:
        return choose_metrics(runs, requested)
    except ValueError as err:
        raise CompareError(str(err)) from None


def _out_dir(args: argparse.Namespace) -> Path:
    first = Path(args.paths[0])
    out = Path(args.out) if args.out else (first if first.is_dir() else Path.cwd())
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_report(out, title, table, groups, keys, headline, tests, unreadable, args) -> list[Path]:
    """comparison.csv, the plots and comparison.md under `out`; the files written."""
    from attnlab.analysis.plots import plot_curves, plot_final

    names = short_names(keys)
    written = [out / "comparison.md", out / "comparison.csv"]
    report.write_csv(out / "comparison.csv", groups, keys, headline, tests)
    curves = out / f"{args.curve_metric.replace('/', '_')}_curves.png"
    has_curve = plot_curves(groups, names, args.curve_metric, curves)
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
    report.write_markdown(
        out / "comparison.md", title, table, runs, unreadable, images, extra_tables
    )
    return written


def _extrapolation(out: Path, groups, names, written: list[Path]) -> list[list[list[str]]]:
    """extrapolation_<metric>.png per length metric (appended to `written`); a table per
    length metric (exact_match or perplexity first), printed and returned for comparison.md."""
    from attnlab.analysis.extrapolation import (
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
    for table in tables:
        print()
        print(text_table(table))
    return tables


if __name__ == "__main__":
    sys.exit(main())
