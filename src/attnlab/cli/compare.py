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

Statistics (attnlab.analysis.stats): per group and metric the mean, std, n and 95% interval;
against a baseline group (--baseline KEY=VALUE, default the first group) the difference with its
95% interval, Welch's t-test p (--paired: the paired t-test over seeds, for arms that share seeds
and data order), Holm's correction across the arms of one table, the minimum detectable
difference at 80% power, and a verdict whose wording the tool decides: "higher (p=0.01)",
"lower (p=0.03)" or "no difference detected; this n would miss differences under 1.9".

    attnlab-compare outputs/repro/heads --metric test/bleu --baseline model.n_heads=8
    attnlab-compare outputs/repro/heads --metric test/bleu --plan 0.9     # the sweep planner
    attnlab-compare docs/results/heads.csv --metric test/bleu             # from a runs table

--plan DELTA prints the seeds per arm a sweep needs to detect DELTA on --metric with 80% power,
from the pilot's pooled spread, and the compute that costs (the pilot's mean run time times the
runs). Per-length values are metrics too: length/<L>/<metric>, e.g.
--metric length/16/greedy_exact_match. runs.csv (one row per run: the grouping keys, seed,
status, wall time, every metric) is written beside comparison.csv, and a PATH ending in .csv is
read back as such a table, so a report's tables can be regenerated without the run folders.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from dataclasses import dataclass
from pathlib import Path

from attnlab import programs
from attnlab.analysis import report
from attnlab.analysis.groups import (
    DEFAULT_IGNORE,
    choose_metrics,
    differing_keys,
    group_label,
    group_runs,
    short_names,
)
from attnlab.analysis.run_table import read_runs_csv, write_runs_csv
from attnlab.analysis.runs import Run, find_results, load_run, trials_without_results
from attnlab.analysis.tables import markdown_table, text_table

PROG = programs.COMPARE


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
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the group the others are tested against (repeatable for several keys), e.g. "
        "model.n_heads=8 or n_heads=8 (default: the first group)",
    )
    p.add_argument(
        "--paired",
        action="store_true",
        help="paired t-test over seeds (arms that share seeds and data order) instead of Welch's",
    )
    p.add_argument(
        "--plan",
        type=float,
        metavar="DELTA",
        help="print the seeds per arm needed to detect a difference DELTA in --metric with 80%% "
        "power from these runs' spread, and its compute; writes nothing",
    )
    p.add_argument(
        "--markdown",
        action="store_true",
        help="print the statistics and per-length tables as markdown, each under a "
        "'<!-- table: KEY -->' line (what docs/REPRODUCTION.md embeds); writes nothing",
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
        c = compare(args)
        if args.plan is not None:
            print(plan_text(c.groups, c.headline, args.plan))
            return 0
        if args.markdown:
            for key, table in markdown_tables(c).items():
                print(f"<!-- table: {key} -->\n{table}\n")
            return 0
    except CompareError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return err.code
    out = _out_dir(args)
    table = report.comparison_table(c.groups, c.keys, c.headline, c.tests)
    mixed = sources(c.runs)
    if len(mixed) > 1:
        print(f"note: these runs come from {len(mixed)} multiruns or sweeps: " + "; ".join(mixed))
    print(c.title)
    print(text_table(table))
    for metric, rows in c.statistics.items():
        print()
        print(statistics_title(metric, c, args.paired))
        print(text_table(rows))
    for path, err in c.unreadable:
        print(f"could not read {path}: {err}")
    written = write_report(out, table, c, args)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


@dataclass
class Comparison:
    """Runs grouped, metrics chosen, the baseline found and each metric's statistics table."""

    runs: list[Run]
    unreadable: list[tuple[Path, str]]
    keys: list[str]
    groups: list
    headline: str | None
    tests: list[str]
    baseline: object
    statistics: dict[str, list[list[str]]]

    @property
    def title(self) -> str:
        keys, n = self.keys, len(self.groups)
        return (
            f"{len(self.runs)} runs in {n} groups"
            + (f" by {', '.join(keys)}" if keys else " (no config key differs)")
            + "; seeds aggregated over completed runs"
        )


def compare(args: argparse.Namespace) -> Comparison:
    """Read, group and test; CompareError (one line) on bad input."""
    runs, unreadable = read_runs(args.paths)
    headline, tests = _choose_metrics(runs, args.metric)
    if args.columns:
        available = sorted({m for r in runs for m in r.metrics} - {headline})
        tests = [m for m in available if any(fnmatch.fnmatchcase(m, p) for p in args.columns)]
    keys = args.group_by or differing_keys(runs, [*DEFAULT_IGNORE, *args.ignore])
    groups = group_runs(runs, keys)
    try:
        baseline = report.find_baseline(groups, keys, args.baseline)
        statistics = {
            m: report.statistics_table(groups, keys, m, baseline, args.paired)
            for m in [headline, *tests]
            if m
        }
    except ValueError as err:
        raise CompareError(str(err)) from None
    return Comparison(runs, unreadable, keys, groups, headline, tests, baseline, statistics)


def sources(runs: list[Run]) -> list[str]:
    """The multirun and sweep folders (with multirun.yaml or summary.json) the runs come from."""
    found: dict[str, None] = {}
    for run in runs:
        for parent in run.run_dir.parents:
            if (parent / "multirun.yaml").is_file() or (parent / "summary.json").is_file():
                found.setdefault(str(parent), None)
                break
    return list(found)


def markdown_tables(c: Comparison) -> dict[str, str]:
    """{'statistics <metric>': markdown, 'lengths <metric>': markdown} for every tested metric
    and every per-length metric of the runs."""
    from attnlab.analysis.extrapolation import extrapolation_table, length_metrics

    tables = {f"statistics {m}": markdown_table(rows) for m, rows in c.statistics.items()}
    names = short_names(c.keys)
    for metric in length_metrics(c.runs):
        tables[f"lengths {metric}"] = markdown_table(extrapolation_table(c.groups, names, metric))
    return tables


def statistics_title(metric: str, c: Comparison, paired: bool) -> str:
    arms = len(c.groups) - 1
    test = "paired t-test over seeds" if paired else "Welch's t-test"
    label = group_label(c.baseline, short_names(c.keys))
    return (
        f"{metric}: mean, 95% CI; against {label}: difference, {test}, Holm's correction "
        f"across {arms} arm{'s' * (arms != 1)}, minimum detectable difference at 80% power"
    )


def plan_text(groups, metric: str | None, delta: float) -> str:
    """The planner's answer: seeds per arm for `delta` at 80% power, runs and compute."""
    from attnlab.analysis import stats

    if metric is None:
        raise CompareError("--plan needs --metric (no metric in these runs)")
    samples = [[r.metrics[metric] for r in g.completed() if metric in r.metrics] for g in groups]
    try:
        plan = stats.seeds_needed(samples, delta)
    except ValueError as err:
        raise CompareError(str(err)) from None
    arms, done = len(groups), sum(len(s) for s in samples)
    runs = plan.seeds_per_arm * arms
    times = [r.wall_time_s for g in groups for r in g.completed() if r.wall_time_s]
    lines = [
        f"planner: {metric} from a pilot of {arms} arms, {done} completed runs "
        f"(at least {plan.pilot_n} per arm), pooled std {plan.pooled_std:.4g}",
        f"to detect a difference of {delta:g} with 80% power (two-sided Welch, alpha 0.05): "
        f"{plan.seeds_per_arm} seeds per arm (power {plan.power:.2f})",
    ]
    if times:
        per_run = sum(times) / len(times)
        total = per_run * runs
        lines.append(
            f"compute: {runs} runs ({max(runs - done, 0)} more than the pilot) x "
            f"{per_run / 60:.1f} min per run (the pilot's mean) = {total / 3600:.2f} h of run time"
        )
    else:
        lines.append(f"compute: {runs} runs ({max(runs - done, 0)} more than the pilot); "
                     "no run time recorded in the pilot")  # fmt: skip
    if plan.seeds_per_arm <= plan.pilot_n:
        lines.append("the pilot already has enough seeds per arm")
    return "\n".join(lines)


def read_runs(paths: list[str]) -> tuple[list[Run], list[tuple[Path, str]]]:
    """Every readable run below `paths` (sweep trials without results.json included; a PATH
    ending in .csv is a runs table), and the results.json files that could not be read, with
    the reason."""
    tables = [p for p in paths if p.endswith(".csv")]
    paths = [p for p in paths if not p.endswith(".csv")]
    runs, unreadable = [], []
    for table in tables:
        try:
            runs += read_runs_csv(Path(table))
        except ValueError as err:
            raise CompareError(str(err)) from None
    try:
        found = find_results(paths)
    except FileNotFoundError as err:
        raise CompareError(str(err)) from None
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


def write_report(out: Path, table, c: Comparison, args) -> list[Path]:
    """comparison.csv, runs.csv, the plots and comparison.md under `out`; the files written."""
    from attnlab.analysis.plots import plot_curves, plot_final

    groups, keys, headline, tests = c.groups, c.keys, c.headline, c.tests
    names = short_names(keys)
    written = [out / "comparison.md", out / "comparison.csv", out / "runs.csv"]
    report.write_csv(out / "comparison.csv", groups, keys, headline, tests, c.baseline, args.paired)
    write_runs_csv(out / "runs.csv", groups, keys)
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
    statistics = [(statistics_title(m, c, args.paired), rows) for m, rows in c.statistics.items()]
    report.write_markdown(
        out / "comparison.md", c.title, table, runs, c.unreadable, images, extra_tables,
        statistics,
    )  # fmt: skip
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
