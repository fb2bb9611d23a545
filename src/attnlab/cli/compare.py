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
against a baseline group (--baseline KEY=VALUE; default the sweep file's baseline or first
values, else the first group) the difference with its
95% interval, Welch's t-test p (--paired: the paired t-test over seeds, for arms that share seeds
and data order), Holm's correction across the arms of one table, the minimum detectable
difference at 80% power at 0.05 / (arms tested), and a verdict whose wording the tool decides:
"higher (p=0.01)", "lower (p=0.03)" or "no difference detected; this n would miss
differences under 1.9".

    attnlab-compare outputs/repro/heads --metric test/bleu --baseline model.n_heads=8
    attnlab-compare outputs/repro/heads --metric test/bleu --plan 0.9     # the sweep planner
    attnlab-compare docs/results/heads.csv --metric test/bleu             # from a runs table

--plan DELTA prints the seeds per arm a sweep needs to detect DELTA on --metric with 80% power
against a baseline, Holm-corrected over the arms, from the pilot's pooled spread and from its
upper 80% bound, and the compute that costs (the pilot's mean run time times the runs). An arm
whose val/nll still fell by more than its seeds' spread over the last 10% of its steps is flagged
in the verdict (attnlab.analysis.budget). Per-length values are metrics too: length/<L>/<metric>,
e.g. --metric length/16/greedy_exact_match. runs.csv (one row per run: the grouping keys, seed,
status, wall time, every metric) is written beside comparison.csv, and a PATH ending in .csv is
read back as such a table, so a report's tables can be regenerated without the run folders.

A learning-rate sweep (scheduler.peak_lr swept, or any numeric swept key given with --x) is read
as Wortsman et al. (2023) read one (attnlab.analysis.lr_sweep): per arm (the other swept keys)
the metric against the rate, the best rate, the LR sensitivity per seed with a t interval on the
grid and its stable range (--lr-range), the basin (--tol), the arms' sensitivities tested against
the baseline's, and the arms compared at their own best rate (--select-seeds: chosen on some
seeds, compared on the others); lr_<metric>.png and lr_sweep.csv. The console shows the
headline's tables; --all prints every metric's (the files always hold them all). The report
goes to --out, else the folder the PATHs share (never a trial's own folder).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from attnlab import programs
from attnlab.analysis import budget, lr_sensitivity, lr_sweep, report, sweep_file
from attnlab.analysis.groups import (
    DEFAULT_IGNORE,
    choose_metrics,
    differing_keys,
    group_label,
    group_runs,
    short_names,
)
from attnlab.analysis.lr_report import LRStudy
from attnlab.analysis.planner import plan_text
from attnlab.analysis.report_files import equivalence_title, statistics_title, write_report
from attnlab.analysis.run_table import read_runs_csv
from attnlab.analysis.runs import (
    Run,
    fill_from_configs,
    find_results,
    load_run,
    trials_without_results,
)
from attnlab.analysis.tables import console_lines, fit_console, markdown_table, text_table
from attnlab.cli.compare_args import build_parser
from attnlab.sweeps.search_report import search_views

PROG = programs.COMPARE


class CompareError(Exception):
    """One line for the user, with the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from attnlab.cli import compare_study
    from attnlab.sweeps.search_compare import is_search

    if any(compare_study.is_study(p) for p in args.paths):  # a study is read as a study
        return compare_study.main(args, _out_dir, sys.modules[__name__])

    if any(is_search(p) for p in args.paths):  # a search is read as a search
        from attnlab.cli import compare_search

        return compare_search.main(args, _out_dir)
    try:
        c = compare(args)
        if args.plan is not None:
            try:
                print(plan_text(c.plan_groups, c.headline, args.plan))
            except ValueError as err:
                raise CompareError(str(err)) from None
            return 0
        if args.markdown:
            for key, table in markdown_tables(c).items():
                print(f"<!-- table: {key} -->\n{table}\n")
            return 0
        view = _wandb_view(args, c) if args.wandb_view else None  # checked before any file
        out = _out_dir(args)
    except CompareError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return err.code
    table = report.comparison_table(c.groups, c.keys, c.headline, c.tests)
    print_console(c, table, args)
    written = write_report(out, table, c, args)
    written += search_views(args.paths, out)  # a searched sweep's best trial, importance...
    inside = [p.name for p in written if p.parent == out]
    elsewhere = [str(p) for p in written if p.parent != out]
    print(console_lines(f"wrote to {out}: " + ", ".join(inside + elsewhere)))
    return 0 if view is None else _save_view(view)


def print_console(c: Comparison, table: list[list[str]], args: argparse.Namespace) -> None:
    """The comparison on the console, each table and line under 120 columns where it can be
    (comparison.md keeps the whole tables)."""
    mixed = sources(c.runs)
    if len(mixed) > 1:
        print(f"note: these runs come from {len(mixed)} multiruns or sweeps:")  # one a line
        for source in mixed:
            print(f"  {source}")
    print(console_lines(c.title))
    shown = table if args.all else report.comparison_table(c.groups, c.keys, c.headline, [])
    if c.lr is None or args.all:
        print(text_table(shown))
    if c.lr is not None:
        print()
        print(c.lr.text())
    for metric, rows in c.statistics.items():
        if c.lr is not None and not args.all:
            break  # the arms at their best rate (above) replace the per-group tables
        if metric != c.headline and not args.all:
            continue
        print()
        print(console_lines(statistics_title(metric, c, args.paired)))
        narrow, note = report.console_statistics(rows)
        narrow, arms = fit_console(narrow, narrow[0].index("n"))
        print(text_table(narrow))
        for line in (arms, note):
            if line:
                print(console_lines(line))
        if metric in c.equivalence:
            print()
            print(console_lines(equivalence_title(metric, c, args.paired)))
            print(
                text_table(
                    fit_console(c.equivalence[metric], c.equivalence[metric][0].index("n"))[0]
                )
            )
    for line in c.budget_notes():
        print(console_lines(line))
    hidden = [m for m in c.statistics if m != c.headline]
    if hidden and not args.all:
        print(f"\n({len(hidden)} more metrics' tables in comparison.md; --all prints them)")
    for path, err in c.unreadable:
        print(f"could not read {path}: {err}")


def _wandb_view(args: argparse.Namespace, c: Comparison):
    """The sweep's W&B workspace, built (not saved); CompareError when it cannot be made."""
    from attnlab.sweeps.wandb_view import prepare_view

    try:
        return prepare_view(args.paths, c.runs, args.entity, args.project)
    except ValueError as err:
        raise CompareError(str(err)) from None


def _save_view(view) -> int:
    from attnlab.sweeps.wandb_view import save_view

    try:
        print(f"W&B workspace: {save_view(view)}")
    except Exception as err:  # the server's answer: one line, exit 2
        print(f"{PROG}: error: --wandb-view: W&B did not save the view: {err}", file=sys.stderr)
        return 2
    return 0


@dataclass
class Comparison:
    """Runs grouped, metrics chosen, the baseline found and each metric's statistics table;
    for a learning-rate sweep, the LR study (its arms, and their groups at the best rate)."""

    runs: list[Run]
    unreadable: list[tuple[Path, str]]
    keys: list[str]
    groups: list
    headline: str | None
    tests: list[str]
    baseline: object
    statistics: dict[str, list[list[str]]]
    still_improving: list = field(default_factory=list)
    lr: LRStudy | None = None
    primary: str | None = None  # the sweep file's `primary:` metric (confirmatory)
    equivalence: dict[str, list[list[str]]] = field(default_factory=dict)  # --equivalence
    margin: float | None = None

    @property
    def title(self) -> str:
        keys, n = self.keys, len(self.groups)
        return (
            f"{len(self.runs)} runs in {n} groups"
            + (f" by {', '.join(keys)}" if keys else " (no config key differs)")
            + "; seeds aggregated over completed runs"
        )

    @property
    def plan_groups(self) -> list:
        """The arms the planner sizes: the groups, or a sweep's arms at their best rate."""
        return self.lr.best_groups if self.lr and not self.lr.descriptive else self.groups

    def budget_notes(self) -> list[str]:
        names = short_names(self.lr.arm_keys if self.lr else self.keys)
        lines = []
        for g in self.still_improving:
            gain, spread = budget.still_improving(g.completed())
            lines.append(
                f"budget: {group_label(g, names)}: {budget.MONITORED} still fell by "
                f"{gain:.3g} in the last 10% of the steps (seeds' spread {spread:.3g})"
            )
        return lines


def compare(args: argparse.Namespace) -> Comparison:
    """Read, group and test; CompareError (one line) on bad input."""
    runs, unreadable = read_runs(args.paths)
    spec = sweep_file.find_spec(args.paths)
    requested = args.metric
    if requested is None and sweep_file.spec_metric(spec) in {m for r in runs for m in r.metrics}:
        requested = sweep_file.spec_metric(spec)
    headline, tests = _choose_metrics(runs, requested)
    if args.columns:
        available = sorted({m for r in runs for m in r.metrics} - {headline})
        tests = [m for m in available if any(fnmatch.fnmatchcase(m, p) for p in args.columns)]
    differing = differing_keys(runs, [*DEFAULT_IGNORE, *args.ignore])
    keys = args.group_by or differing
    hidden = [k for k in differing if k not in keys]
    if args.group_by and hidden:
        print(f"warning: --group-by averages runs that differ in {', '.join(hidden)}, not only "
              "in the seed: the groups' spread is not a seed spread")  # fmt: skip
    groups = group_runs(runs, keys)
    try:
        x_key = lr_sweep.choose_x_key(runs, keys, args.x)
        arm_keys = [k for k in keys if k != x_key] if x_key else keys
        from_file = sweep_file.spec_baseline(spec, arm_keys)
        lr = _lr_study(args, groups, keys, x_key, headline, from_file) if x_key else None
        # an LR study's tables compare the arms at their best rates, never every rate's cell
        ranked = lr is not None and not lr.descriptive
        table_groups, table_keys = (lr.best_groups, lr.arm_keys) if ranked else (groups, keys)
        if ranked:
            baseline = lr.baseline
        else:  # a diagnostic's per-rate groups are tested against the first one
            baseline = (
                groups[0] if lr and groups else _baseline(groups, keys, args.baseline, from_file)
            )
        late = [g for g in table_groups if _late(g)]
        statistics = {
            m: report.statistics_table(table_groups, table_keys, m, baseline, args.paired, late)
            for m in [headline, *tests]
            if m
        }
        margin = args.equivalence
        if margin is not None and not margin > 0:
            raise ValueError(f"--equivalence {margin:g} is not valid; expected a margin > 0")
        equivalent = {
            m: report.equivalence_rows(table_groups, table_keys, m, baseline, margin, args.paired)
            for m in (statistics if margin is not None else ())
        }
    except ValueError as err:
        raise CompareError(str(err)) from None
    primary = sweep_file.spec_primary(spec)
    return Comparison(
        runs, unreadable, keys, groups, headline, tests, baseline, statistics, late, lr, primary,
        equivalent, margin,
    )  # fmt: skip


def _late(group) -> bool:
    return budget.still_improving(group.completed()) is not None


def _baseline(groups, keys, given: list[str], from_file: list[str]):
    """The group of --baseline (`given`: its errors are the user's), else the sweep file's
    (its first values, or its `baseline:`), else the first group; a sweep file's baseline that
    matches no single group (the runs are a subset of the sweep) falls back to the first."""
    if given:
        return report.find_baseline(groups, keys, given)
    try:
        return report.find_baseline(groups, keys, from_file)
    except ValueError:
        return report.find_baseline(groups, keys, [])


def _lr_study(args, groups, keys, x_key, metric, from_file) -> LRStudy:
    if metric is None:
        raise ValueError("a learning-rate sweep needs a metric (--metric); none in these runs")
    seeds = _seed_list(args.select_seeds)
    arms = lr_sweep.arms(groups, keys, x_key, metric, args.cap)
    arm_keys = [k for k in keys if k != x_key]
    if lr_sweep.is_diagnostic(metric):  # its curve against the rate, nothing that ranks
        return LRStudy(x_key, arm_keys, metric, arms, [], None, [], seeds, None, descriptive=True)
    best = lr_sweep.best_rate_groups(arms, lr_sweep.higher_is_better(metric), seeds)
    baseline = _baseline(best, arm_keys, args.baseline, from_file)
    late = [g for g in best if _late(g)]
    table = report.statistics_table(best, arm_keys, metric, baseline, args.paired, late)
    lr_range = lr_sensitivity.parse_range(args.lr_range) if args.lr_range else None
    if not args.tol >= 0:
        raise ValueError(f"--tol {args.tol:g}: expected a tolerance >= 0")
    return LRStudy(
        x_key, arm_keys, metric, arms, best, baseline, table, seeds, args.cap, args.tol, lr_range
    )


def _seed_list(text: str | None) -> list | None:
    if text is None:
        return None
    import yaml

    try:
        seeds = [yaml.safe_load(s) for s in text.split(",") if s.strip()]
    except yaml.YAMLError:
        seeds = []
    if not seeds:
        raise ValueError(f"--select-seeds {text!r} is not valid; expected seeds such as 1,2,3")
    return seeds


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
    tables |= {f"equivalence {m}": markdown_table(rows) for m, rows in c.equivalence.items()}
    if c.lr is not None:
        tables |= {f"{k} {c.lr.metric}": markdown_table(t) for k, t in c.lr.tables().items()}
    names = short_names(c.keys)
    for metric in length_metrics(c.runs):
        tables[f"lengths {metric}"] = markdown_table(extrapolation_table(c.groups, names, metric))
    return tables


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
    fill_from_configs(runs)  # keys one sweep overrode and another left at the preset's value
    runs += trials_without_results(paths, set(found))
    if not runs:
        for path, err in unreadable:
            print(f"could not read {path}: {err}")
        raise CompareError(
            f"no readable results.json under {' '.join(paths)}: expected a run, sweep or study "
            "folder (or a runs.csv)"
        )
    return runs, unreadable


def _choose_metrics(runs: list[Run], requested: str | None) -> tuple[str | None, list[str]]:
    try:
        return choose_metrics(runs, requested)
    except ValueError as err:
        raise CompareError(str(err)) from None


def _out_dir(args: argparse.Namespace) -> Path:
    """--out, else the folder the PATHs share, raised above any trial's folder (one holding a
    results.json), so a comparison of a subset of a sweep's trials never writes into a trial;
    the current folder for runs tables (.csv)."""
    if args.out:
        out = Path(args.out)
    else:
        folders = [Path(p).resolve() for p in args.paths if Path(p).is_dir()]
        out = Path(os.path.commonpath(folders)) if folders else Path.cwd()
        while (out / "results.json").exists() and out.parent != out:
            out = out.parent
    out.mkdir(parents=True, exist_ok=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
