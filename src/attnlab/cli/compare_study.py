"""attnlab-compare on a study folder (attnlab-sweep STUDY --out DIR): stage 1's choice per arm
with its tuning curve (tuning.png), then stage 2 compared as the study file named it before the
runs: its primary metric, its test (welch or paired), its baseline, Holm over the family, the
smallest detectable difference at the family's alpha; every other metric labelled exploratory.
Writes study.md and study.csv beside attnlab-compare's own files (comparison.md, runs.csv with
each run's commit and machine, the plots)."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import yaml

from attnlab import programs
from attnlab.analysis import report, study_report
from attnlab.analysis.groups import group_label, short_names
from attnlab.analysis.report_files import write_report
from attnlab.analysis.tables import console_lines, markdown_table, text_table
from attnlab.sweeps.choice import read_choice
from attnlab.sweeps.spec import SweepError
from attnlab.sweeps.tuning import arm_grid, load_study


def is_study(path: str) -> bool:
    """A folder attnlab-sweep ran a study into: its sweep.yaml has a `tune` block."""
    spec = Path(path) / "sweep.yaml"
    try:
        return spec.is_file() and "tune" in (yaml.safe_load(spec.read_text()) or {})
    except yaml.YAMLError:
        return False


def main(args: argparse.Namespace, out_dir, compare_module) -> int:
    """The study view; compare_module: attnlab.cli.compare (passed in: it imports this one)."""
    prog = programs.COMPARE
    try:
        return _main(args, out_dir, compare_module)
    except (SweepError, ValueError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except compare_module.CompareError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return err.code


def _main(args: argparse.Namespace, out_dir, cm) -> int:
    if len(args.paths) != 1:
        raise ValueError("a study folder is compared alone (its stages are one study)")
    folder = Path(args.paths[0])
    spec = yaml.safe_load((folder / "sweep.yaml").read_text())
    study = load_study(spec, str(folder / "sweep.yaml"))
    primary, tune = study.primary, study.tune
    if args.metric and args.metric != primary.metric:
        raise ValueError(
            f"--metric {args.metric}: a study is compared on its primary metric, "
            f"{primary.metric}, named before the runs (the others are in its exploratory tables)"
        )
    if getattr(args, "equivalence", None) is not None:
        raise ValueError(
            "--equivalence: a study's equivalence margin is its `primary: {margin: ...}`, named "
            "before the runs"
        )
    choices = read_choice(folder, arm_grid(spec))
    if choices is None:
        print(
            f"{folder}: stage 1 has not chosen yet (no choice.json); its trials: {folder / 'tune'}"
        )
        return 0
    stage2 = argparse.Namespace(**{**vars(args), "paths": [str(folder / "seeds")]})
    stage2.metric, stage2.paired = primary.metric, primary.test == "paired"
    stage2.baseline = [f"{k}={v}" for k, v in primary.baseline.items()]
    stage2.equivalence = primary.margin  # the file's margin: the TOST is confirmatory too
    c = cm.compare(stage2)
    view = _wandb_view(args, folder, c) if args.wandb_view else None  # before any file
    out = out_dir(args)
    names = short_names(c.keys)
    tuned_values = {
        group_label(g, names): [r.metrics.get(tune.metric) for r in g.completed()] for g in c.groups
    }
    lines = _stage_one(choices, tune, tuned_values, c, names)
    log_x = tune.geometric
    if study_report.plot_tuning(choices, tune.key, tune.metric, log_x, out / "tuning.png"):
        lines += ["![stage 1: each arm's tuning curve](tuning.png)", ""]
    table = report.comparison_table(c.groups, c.keys, c.headline, c.tests)
    write_report(out, table, c, stage2)
    md, rows = _stage_two(c, study, spec, folder, names)
    (out / "study.md").write_text("\n".join([_header(spec, study, folder), "", *lines, *md]) + "\n")
    with open(out / "study.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    _print(c, study, choices, tuned_values, names)
    print(
        console_lines(f"wrote to {out}: study.md, study.csv, tuning.png, comparison.md, runs.csv")
    )
    return 0 if view is None else cm._save_view(view)


def _wandb_view(args: argparse.Namespace, folder: Path, c):
    """The study's W&B workspace (attnlab.sweeps.wandb_view: each stage its own groups, by
    the runs' job type), built, not saved; ValueError with one line when it cannot be made."""
    from attnlab.sweeps.wandb_view import prepare_view

    return prepare_view([str(folder)], c.runs, args.entity, args.project)


def _header(spec: dict, study, folder: Path) -> str:
    p = study.primary
    against = ", ".join(f"{k}={v}" for k, v in p.baseline.items())
    return (
        f"# Study {spec['name']} ({folder})\n\nArms: {', '.join(spec['parameters'])}; "
        f"{study.tune.key} tuned per arm on {study.tune.metric} ({study.tune.goal}) over "
        f"tuning seeds {list(study.tune.seeds)}; stage 2: seeds {list(study.seeds)} at each "
        f"arm's choice.\n\nPrimary comparison, {study_report.CONFIRMATORY}: {p.metric}, "
        f"{p.test} test against {against}; Holm over the family of its arms' comparisons; the "
        f"smallest detectable difference of the {p.test} test at 80% power at the family's alpha "
        "(0.05 / the arms tested against the baseline), as in the table's MDD column."
    )


def _stage_one(choices, tune, tuned_values, c, names) -> list[str]:
    lines = ["## Stage 1: each arm's choice", ""]
    lines.append(markdown_table(study_report.tuning_rows(choices, tune.key, tune.metric)))
    lines.append("")
    for ch in choices:
        label = study_report.arm_text(ch.arm)
        seeds = next((v for k, v in tuned_values.items() if _same_arm(k, ch.arm)), [])
        found = study_report.flags(ch, study_report.spread(ch, seeds))
        lines.append(
            f"- {label}: {tune.key}={ch.chosen}" + (f"; {'; '.join(found)}" if found else "")
        )
    return [*lines, ""]


def _same_arm(label: str, arm: dict) -> bool:
    """Whether a group label ('n_heads=8, peak_lr=0.008') is this arm's: each of the arm's
    keys, by its short name, with its value, is one of the label's parts."""
    parts = set(label.split(", "))
    return label == study_report.arm_text(arm) or all(
        f"{k.rsplit('.', 1)[-1]}={v}" in parts or f"{k}={v}" in parts for k, v in arm.items()
    )


def _stage_two(c, study, spec, folder: Path, names):
    primary = study.primary
    md = ["## Stage 2: the primary comparison", ""]
    md.append(f"{primary.metric}, {study_report.CONFIRMATORY}:")
    md += ["", markdown_table(c.statistics[primary.metric]), ""]
    values = {
        group_label(g, names): [
            (r.seed, r.metrics[m]) for r in g.completed() if (m := primary.metric) in r.metrics
        ]
        for g in c.groups
    }
    base = group_label(c.baseline, names)
    mdd, tested = study_report.family_mdd(values, base, primary.test)
    for arm, d in mdd.items():
        md.append(f"- {arm}: smallest detectable difference ({primary.test} test, 80% power) "
                  f"at alpha 0.05/{tested}: {'-' if d is None else f'{d:.3g}'}")  # fmt: skip
    reused = spec_reused(folder)
    if reused:
        md.append(
            f"- stage 2 reuses stage 1's runs of the same config and seed: {', '.join(reused)}"
        )
    md.append("")
    rows = [["role", "metric", *c.statistics[primary.metric][0]]]
    rows += [["confirmatory", primary.metric, *r] for r in c.statistics[primary.metric][1:]]
    if primary.metric in c.equivalence:  # primary: {margin: M}
        table = c.equivalence[primary.metric]
        md.append(
            f"Equivalence within +-{primary.margin:g} (two one-sided tests on the same t-test, "
            f"90% interval, Holm across the arms), {study_report.CONFIRMATORY}:"
        )
        md += ["", markdown_table(table), ""]
        rows += [["role", "metric", *table[0]]]
        rows += [["confirmatory", primary.metric, *r] for r in table[1:]]
    for metric, table in c.statistics.items():
        if metric == primary.metric:
            continue
        md += [f"### {metric}, {study_report.EXPLORATORY}", "", markdown_table(table), ""]
        rows += [["exploratory", metric, *r] for r in table[1:]]
    md += ["## Runs", "", markdown_table(_runs(c, names)), ""]
    return md, rows


def spec_reused(folder: Path) -> list[str]:
    try:
        return list(yaml.safe_load((folder / "seeds" / "sweep.yaml").read_text())
                    .get("reused_from_stage_1") or [])  # fmt: skip
    except (OSError, yaml.YAMLError, AttributeError):
        return []


def _runs(c, names) -> list[list[str]]:
    rows = [["arm", "seed", "status", c.headline, "commit", "machine"]]
    for g in c.groups:
        for r in g.runs:
            value = r.metrics.get(c.headline)
            rows.append([group_label(g, names), str(r.seed), r.status,
                         "" if value is None else f"{value:.4g}", (r.git_commit or "")[:7],
                         r.machine])  # fmt: skip
    return rows


def _print(c, study, choices, tuned_values, names) -> None:
    tune, primary = study.tune, study.primary
    print(f"stage 1: {tune.key} chosen per arm on {tune.metric}")
    for ch in choices:
        seeds = next((v for k, v in tuned_values.items() if _same_arm(k, ch.arm)), [])
        found = study_report.flags(ch, study_report.spread(ch, seeds))
        extra = f"  [{'; '.join(found)}]" if found else ""
        print(console_lines(f"  {study_report.arm_text(ch.arm)}: {ch.chosen}{extra}"))
    print()
    print(console_lines(f"{primary.metric} ({primary.test}), {study_report.CONFIRMATORY}:"))
    narrow, note = report.console_statistics(c.statistics[primary.metric])
    print(text_table(narrow))
    if note:
        print(console_lines(note))
    if primary.metric in c.equivalence:
        print(console_lines(f"equivalence within +-{primary.margin:g} (TOST), "
                            f"{study_report.CONFIRMATORY}:"))  # fmt: skip
        print(text_table(c.equivalence[primary.metric]))
    others = [m for m in c.statistics if m != primary.metric]
    if others:
        print(f"({len(others)} exploratory metrics' tables in study.md)")
