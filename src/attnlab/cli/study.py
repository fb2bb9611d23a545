"""attnlab-sweep on a study file (a sweep file with tune / seeds / primary blocks): stage 1 tunes
`tune.key` per arm on validation (extending at an edge, refining around the best), the choice is
written, then stage 2 runs `seeds` at each arm's choice. The rules: attnlab.sweeps.tuning; the
trials and folders: attnlab.sweeps.staged; docs/sweeps.md "Studies"."""

from __future__ import annotations

import argparse
import math
import signal
import sys
from pathlib import Path
from types import ModuleType

from attnlab.runs.status import Status, exit_code
from attnlab.sweeps import cluster, staged, tuning
from attnlab.sweeps.choice import read_choice, write_choice
from attnlab.sweeps.evaluate import evaluate_trials
from attnlab.sweeps.spec import SweepError
from attnlab.sweeps.summary import write_summary
from attnlab.sweeps.tuning import Study
from attnlab.sweeps.wandb_stage import WandbStages, batch_config, wandb_target


def run_study(
    args: argparse.Namespace, config: dict, study: Study, groups, argv, cli: ModuleType
) -> int:
    """The study's plan, its checks, then both stages; attnlab-train's exit codes (stage 2's
    worst; 4 when interrupted in either stage). `cli`: attnlab.cli.sweep, whose helpers a
    sweep and a study share (passed in, not imported: that module starts this one)."""
    tuning.check_arms(config, args.sweep)
    if args.count is not None:
        raise SweepError("--count does not apply to a study: its stages set their trials")
    out = Path(args.out) if args.out else cli.default_out_dir(config["name"])
    cli.refuse_foreign_out(out, config)
    staged.refuse_edited_study(out, config, args.overrides)
    run = staged.StudyRun(config, study, out, args.overrides)
    parallel = args.parallel or (len(groups) if groups else 1)
    if groups and parallel > len(groups):
        parallel = len(groups)
    share = 1 / args.trials_per_gpu if args.trials_per_gpu > 1 else None
    grid = run.grid_trials()
    first = (study.tune.values[0], study.seeds[0])  # each arm's stage-2 config, checked up front
    firsts = [run.seed_trial(arm, *first, i) for i, arm in enumerate(run.arms)]
    print(plan(run, args.sweep, parallel, len(grid)))
    if args.pilot or args.sd is not None:
        print(power_line(run, args.pilot, args.sd))
    if args.dry_run:
        cli._list_trials(grid)
    edges = run.edge_trials()
    if not _metrics_reported(run, grid[0], args.sweep):
        return 2
    if args.wandb:  # the runs' W&B project and entity; a study that cannot reach W&B refused
        target = wandb_target(grid[0].command, args.project or config.get("project"), args.entity)
    if not cli._trials_start([*grid, *edges, *firsts]):
        return 2
    if args.wandb:
        print(wandb_plan(run, target, grid, groups, parallel))
    if args.dry_run:
        print(f"checked: the config of every grid trial ({len(grid)}), of each point extension "
              f"can add ({len(edges)}: {tuning.extension_points(study.tune)} per arm), and each "
              f"arm's stage-2 config ({len(firsts)}, at {study.tune.values[0]}; the chosen value "
              "differs only in the tuned key); refine's midpoints lie between checked points"
        )  # fmt: skip
        return 0
    staged.write_study_spec(out, config, args.overrides)
    resume = f"resume: {cli.resume_command(argv if argv is not None else sys.argv[1:], out)}"
    previous = signal.signal(signal.SIGTERM, cli._raise_interrupt)
    try:
        launcher = (
            WandbStages(config["name"], out, parallel, groups, share, *target)
            if args.wandb
            else cluster.from_arguments(args, out)
        )
        return _stages(run, args.sweep, parallel, groups, share, resume, launcher)
    finally:
        signal.signal(signal.SIGTERM, previous)


def wandb_plan(run: staged.StudyRun, target, grid, groups, parallel: int) -> str:
    """What --wandb sends: each batch a W&B grid over `trial`; stage 1's first sweep shown."""
    import yaml

    project, entity = target
    plan = run.out / "wandb" / "stage1-1" / "plan.json"  # a fresh study's first batch
    first = batch_config(run.config["name"], 1, 1, plan, [t.run_dir.name for t in grid], project)
    agents = f"up to {min(parallel, len(groups)) if groups else parallel}" + (
        " (one per GPU slot)" if groups else "")  # fmt: skip
    return (
        f"  on W&B: each batch of trials (stage 1's grid, each extension or refinement, stage "
        f"2's seeds) its own sweep, a grid over `trial`, in project {project}"
        f"{f' of {entity}' if entity else ''}; agents: {agents}; evaluations here\n"
        f"  stage 1's first sweep:\n" + yaml.safe_dump(first, sort_keys=False).rstrip()
    )


def power_line(run: staged.StudyRun, pilot: str | None, sd: float | None) -> str:
    """The smallest difference in the primary metric stage 2's seeds detect with 80% power
    (the primary's test, equal seeds per arm) at Holm's strictest step over the family (alpha
    0.05 / the arms compared against the baseline): the planner's rule (attnlab.analysis.stats)
    and the MDD column of compare's table. A paired test takes its per-seed differences' std
    as sqrt(2) x the seeds' std (seeds uncorrelated across arms; a correlation makes it less)."""
    from attnlab.analysis import stats

    primary = run.study.primary
    where = f"--sd {sd}"
    if pilot:
        sd, where = _pilot_sd(pilot, primary.metric)
    if sd is None or not sd > 0:
        raise SweepError(f"--sd {sd}: expected a standard deviation > 0")
    n, comparisons = len(run.study.seeds), max(len(run.arms) - 1, 1)
    alpha = stats.ALPHA / comparisons
    paired = primary.test == "paired"  # se of the mean difference: sqrt(2) sd / sqrt(n) both
    df = n - 1 if paired else 2 * n - 2
    mdd = stats.detectable_difference(sd * math.sqrt(2 / n), df, stats.POWER, alpha)
    shown = "-" if mdd is None else f"{mdd:.4g}"
    how = ", differences' std sqrt(2) x std: seeds uncorrelated" if paired else ""
    return (
        f"  power: {n} seeds per arm detect a difference of {shown} in {primary.metric} with 80% "
        f"power ({primary.test} test{how}) at alpha {stats.ALPHA:g}/{comparisons} = {alpha:.3g} "
        f"(std {sd:.4g} from {where})"
    )


def _pilot_sd(pilot: str, metric: str) -> tuple[float, str]:
    """The pooled std over seeds of `metric` in a pilot's groups (as the planner pools it)."""
    import statistics

    from attnlab.analysis.groups import differing_keys, group_runs
    from attnlab.cli.compare import CompareError, read_runs

    try:
        runs, _ = read_runs([pilot])
    except CompareError as err:
        raise SweepError(f"--pilot {pilot}: {err}") from None
    groups = group_runs(runs, differing_keys(runs))
    samples = [[r.metrics[metric] for r in g.completed() if metric in r.metrics] for g in groups]
    samples = [s for s in samples if len(s) >= 2]
    if not samples:
        raise SweepError(f"--pilot {pilot}: no group with 2 or more runs reporting {metric}")
    pooled = math.sqrt(math.fsum(statistics.variance(s) for s in samples) / len(samples))
    return pooled, f"the pilot {pilot}: {len(samples)} groups"


def _metrics_reported(run: staged.StudyRun, trial, source: str) -> bool:
    """tune.metric and primary.metric are metrics the runs report (or the evaluate block
    writes); each that is not, one line. False: nothing runs (exit 2)."""
    from attnlab.config.location import conf_dir
    from attnlab.sweeps.check import metric_problems

    study = run.study
    named = [("tune.metric", study.tune.metric), ("primary.metric", study.primary.metric)]
    extra = study.evaluate.metrics() if study.evaluate else []
    problems = metric_problems(trial, named, conf_dir(), extra)
    for line in problems:
        print(f"attnlab-sweep: error: {source}: {line}", file=sys.stderr)
    return not problems


def plan(run: staged.StudyRun, source: str, parallel: int, grid: int) -> str:
    """The plan printed before anything runs (and by --dry-run)."""
    study, tune, primary = run.study, run.study.tune, run.study.primary
    against = ", ".join(f"{k}={v}" for k, v in primary.baseline.items())
    margin = f", equivalence margin {primary.margin}" if primary.margin is not None else ""
    stall = (
        f"; a trial above its initial loss at validation {tune.stop_stalled} stops there"
        if tune.stop_stalled
        else ""
    )
    return (
        f"study {run.config['name']} ({source}): {len(run.arms)} arms, {parallel} trial(s) at a "
        f"time, out {run.out}\n"
        f"  stage 1: {tune.key} over {list(tune.values)} x tuning seeds {list(tune.seeds)} per "
        f"arm, chosen on {tune.metric} ({tune.goal}): {grid} trials, at most "
        f"{run.upper_bound()} with extend={tune.extend} and refine={str(tune.refine).lower()}"
        f"{stall}\n"
        f"  stage 2: seeds {list(study.seeds)} at each arm's choice: "
        f"{len(run.arms) * len(study.seeds)} trials\n"
        f"  primary (named before the runs): {primary.metric}, {primary.test} test against "
        f"{against}{margin}"
    )


def _stage_one(run: staged.StudyRun, source: str, parallel, groups, share, launcher=None):
    """Stage 1: (the choices, None), or ([], the status that stops the study: interrupted, or
    failed when an arm has nothing to choose; no choice.json is written then, so a rerun
    decides again). A choice.json an earlier run of this study made is read instead (stage 1
    is not entered again: the same choice, nothing rerun)."""
    tune, out, name = run.study.tune, run.out, run.config["name"]
    held = read_choice(out, run.arms)
    if held is not None:
        print(f"stage 1 was decided by an earlier run of this study: {out / 'choice.json'}")
        return held, None
    choices, tuned, interrupted = run.stage_one(
        lambda trials: staged.run_stage(
            trials,
            parallel,
            groups,
            tune.metric,
            share,
            staged.STAGE_ONE_KEPT,
            staged.stage_one_env(tune),
            launcher,
        )
    )
    print()
    print(write_summary(tuned, out / "tune", f"{name} stage 1", source, tune.metric, interrupted))
    if interrupted:
        return [], Status.INTERRUPTED
    bad = staged.unchosen(choices)
    if bad:
        arms = "; ".join(", ".join(f"{k}={v}" for k, v in c.arm.items()) for c in bad)
        print(f"attnlab-sweep: error: no stage-1 point of {arms} completed with {tune.metric}: "
              f"nothing to choose, no choice written (see {out / 'tune' / 'summary.md'}); once "
              f"the cause is fixed, delete its trials' folders in {out / 'tune'} (or edit tune) "
              "and rerun", file=sys.stderr)  # fmt: skip
        return [], Status.FAILED
    path = write_choice(out, tune, choices, staged.stopped_early(tuned))
    print(f"stage 1's choice: {path} (and choice.md)")
    return choices, None


def _stages(run: staged.StudyRun, source: str, parallel, groups, share, resume: str,
            launcher=None) -> int:  # fmt: skip
    """Both stages, each trial a local process or, with a `launcher`, a cluster job."""
    tune, primary, out, name = run.study.tune, run.study.primary, run.out, run.config["name"]
    choices, stopped = _stage_one(run, source, parallel, groups, share, launcher)
    if stopped is not None:
        if stopped == Status.INTERRUPTED:
            print(resume)
        return exit_code([stopped])
    for c in choices:
        arm = ", ".join(f"{k}={v}" for k, v in c.arm.items())
        edge = f"  AT THE EDGE after {c.extended} extension(s)" if c.at_edge else ""
        print(f"  {arm}: {tune.key}={c.chosen}{edge}")
    adopted = run.adopt(choices)
    if adopted:
        print(f"stage 2 reuses {len(adopted)} stage-1 run(s), the same config and seed at the "
              f"chosen value (each with a reused.json): {', '.join(adopted)}")  # fmt: skip
    run.write_seeds_spec(adopted)
    trials = run.seed_trials(choices)
    results = staged.run_stage(trials, parallel, groups, primary.metric, share, launcher=launcher)
    interrupted = any(r.status in (Status.INTERRUPTED, Status.NOT_STARTED) for r in results)
    interrupted = interrupted or (isinstance(launcher, WandbStages) and launcher.stop_requested)
    if run.study.evaluate is not None and not interrupted:
        how = " ".join(run.study.evaluate.argv(out / "seeds" / "<trial>"))
        print(f"evaluating stage 2's trials: attnlab-eval {how}")
        local = launcher is None or isinstance(launcher, WandbStages)  # evaluations here
        call = None if local else launcher.call
        try:
            for line in evaluate_trials(run.study.evaluate, results, primary.metric, parallel,
                                        call=call, groups=groups, share=share):  # fmt: skip
                print(f"attnlab-sweep: error: {line}", file=sys.stderr)
        except KeyboardInterrupt:  # local evaluations got the Ctrl-C too; cluster jobs did not
            if not local:
                launcher.cancel_evaluations()
            raise
    print()
    print(write_summary(results, out / "seeds", f"{name} stage 2", source, primary.metric,
                        interrupted))  # fmt: skip
    print(f"compare: attnlab-compare {out}")  # the study view (out/seeds alone: a plain sweep)
    if interrupted:
        print(resume)
    statuses = [Status.INTERRUPTED if r.status == Status.NOT_STARTED else r.status for r in results]
    return exit_code(statuses + [Status.INTERRUPTED] * interrupted)
