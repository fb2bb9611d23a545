"""attnlab-sweep: run a W&B sweep file locally (no server), or as a W&B sweep with local agents.

    attnlab-sweep sweeps/pos_encoding.yaml --dry-run
    attnlab-sweep sweeps/pos_encoding.yaml trainer.max_steps=2000 --parallel 2
    attnlab-sweep sweeps/heads.yaml --gpus 0,1,2,3,4,5,6,7 --gpus-per-trial 2
    attnlab-sweep sweeps/heads.yaml --wandb --project attnlab --gpus 0,1,2,3

Locally, `grid` and `random` sweeps are expanded here (attnlab.sweeps.spec) and every trial runs
the file's `command` as its own process with `hydra.run.dir=<out>/<NNN>-<name>`; a summary table is
printed and written to <out>/summary.json and <out>/summary.md. Exit codes are attnlab-train's (the
worst trial's): 0 every trial completed, 1 a trial failed, 2 a bad sweep file or option, 3 a trial
diverged, 4 interrupted (Ctrl-C; trials never started count as interrupted). An interrupted sweep
prints the command that resumes it: the same one with `--out <its folder>`.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from pathlib import Path

import yaml

from attnlab import programs
from attnlab.runs.status import Status, exit_code
from attnlab.sweeps import cluster
from attnlab.sweeps.runner import gpu_groups, gpu_slots, run_trials, sharing_line
from attnlab.sweeps.spec import (
    SweepError,
    Trial,
    expand_sweep,
    grid_count,
    load_sweep,
    sweep_name,
)
from attnlab.sweeps.summary import write_summary
from attnlab.sweeps.tuning import load_study

__all__ = ["Trial", "expand_sweep", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=programs.SWEEP,
        description="Run a W&B sweep file (grid, random or bayes) locally, or on W&B with --wandb.",
    )
    p.add_argument("sweep", help="sweep file (YAML), e.g. sweeps/heads.yaml")
    p.add_argument(
        "overrides", nargs="*", help="Hydra overrides appended to every trial (key=value)"
    )
    p.add_argument("--out", help="output directory (default outputs/sweeps/<name>/<timestamp>)")
    p.add_argument(
        "--parallel",
        type=int,
        help="trials run at a time (default: 1, or one per GPU group with --gpus)",
    )
    p.add_argument("--gpus", help="device ids to share out, e.g. 0,1,2,3")
    p.add_argument(
        "--gpus-per-trial", type=int, default=1, help="devices per trial (must divide --gpus)"
    )
    p.add_argument(
        "--trials-per-gpu",
        type=int,
        default=1,
        help="trials run at once on each GPU group of --gpus, each with its own process, seed "
        "and 1/K of the memory (default 1)",
    )
    p.add_argument(
        "--count",
        type=int,
        help="number of trials: required for random, caps grid; with --wandb, runs per agent",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of a random sweep's draws (default 0); a search (bayes, or random with Optuna) "
        "seeds each draw with it and the draw's index in its study: a search resumed after a "
        "crash draws what the uncrashed one would, and no two draws share a seed",
    )
    p.add_argument(
        "--storage",
        help="the search's Optuna storage, shared by workers on several machines: an SQLAlchemy "
        "URL (postgresql+psycopg://..., sqlite:///...) or a journal file (journal:PATH, *.log) "
        "on a shared filesystem (default: sqlite in the sweep's folder)",
    )
    cluster.add_arguments(p)
    p.add_argument("--dry-run", action="store_true", help="list the trials and exit")
    p.add_argument(
        "--pilot",
        help="a study's dry run: a pilot (runs.csv or run folders) whose seeds' spread of the "
        "primary metric gives the smallest difference stage 2's seeds can detect",
    )
    p.add_argument("--sd", type=float, help="the same from a standard deviation over seeds")
    p.add_argument("--wandb", action="store_true", help="create the sweep on W&B, run agents")
    p.add_argument("--project", help="W&B project (with --wandb; default: the file's 'project')")
    p.add_argument("--entity", help="W&B entity (with --wandb)")
    return p


def default_out_dir(name: str) -> Path:
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    out = Path("outputs") / "sweeps" / name / stamp
    n = 1
    while out.exists():
        n += 1
        out = Path("outputs") / "sweeps" / name / f"{stamp}_{n}"
    return out


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _sweep_and_slots(args: argparse.Namespace) -> tuple[dict, list[str]]:
    """The sweep file (its `name` set) and the GPU slots; SweepError or ValueError if bad."""
    config = load_sweep(args.sweep)
    config.setdefault("name", sweep_name(config, args.sweep))
    if args.launcher == "local":
        groups = gpu_slots(gpu_groups(args.gpus, args.gpus_per_trial), args.trials_per_gpu)
    elif args.gpus_per_trial < 0:
        raise SweepError(f"--gpus-per-trial={args.gpus_per_trial} must be >= 0 (GPUs per job)")
    else:
        groups = []  # SLURM gives each job its devices
    if args.parallel is not None and args.parallel < 1:
        raise SweepError(f"--parallel={args.parallel} must be >= 1")
    cluster.check_arguments(args, searched(config, args) and not load_study(config, args.sweep))
    return config, groups


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    try:
        config, groups = _sweep_and_slots(args)
        if (study := load_study(config, args.sweep)) is not None:  # attnlab.cli.study
            return _run_study(args, config, study, groups, argv)
        if args.wandb:  # W&B's server searches
            return _run_wandb(args, config, groups)
        if searched(config, args):  # Optuna, here
            return _run_search(args, config, groups, argv)
        out = Path(args.out) if args.out else default_out_dir(config["name"])
        refuse_foreign_out(out, config)
        trials = expand_sweep(config, args.overrides, out_dir=out, count=args.count, seed=args.seed)
        note = grid_count(config, args.count)[1] if config.get("method") == "grid" else None
    except (SweepError, ValueError) as err:
        print(f"attnlab-sweep: error: {err}", file=sys.stderr)
        return 2
    name = config["name"]
    # without `metric:`, the unsmoothed val/nll (the smoothed val/loss would favour less smoothing)
    metric = (config.get("metric") or {}).get("name", "val/nll")
    parallel = args.parallel or (len(groups) if groups else 1)
    if groups and parallel > len(groups):
        print(f"--parallel {parallel} capped at {len(groups)}: one trial per GPU slot {groups}")
        parallel = len(groups)
    share = 1 / args.trials_per_gpu if args.trials_per_gpu > 1 else None

    print(
        f"sweep {name} ({args.sweep}): {config['method']}, {len(trials)} trials, "
        f"{parallel} at a time" + (f", GPU slots {groups}" if groups else "")
        + ("" if args.launcher == "local" else f", each a {args.launcher} job") + f", out {out}"
    )  # fmt: skip
    for line in filter(None, (sharing_line(args.trials_per_gpu) if share else None, note)):
        print(line)
    if args.dry_run:
        _list_trials(trials)
    if not _trials_start(trials):
        return 2
    if args.dry_run:
        print(f"every trial's config checked: {len(trials)} would start")
        return 0

    write_spec(out, config)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        results = run_trials(
            trials, parallel=parallel, groups=groups, metric_name=metric, memory_share=share,
            launcher=cluster.from_arguments(args, out),
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGTERM, previous)
    interrupted = any(r.status in (Status.INTERRUPTED, Status.NOT_STARTED) for r in results)
    print()
    sharing = sharing_line(args.trials_per_gpu) if share is not None else None
    print(write_summary(results, out, name, args.sweep, metric, interrupted, sharing))
    if interrupted:
        print(f"resume: {resume_command(argv if argv is not None else sys.argv[1:], out)}")
    # attnlab-train's codes (attnlab.runs.status): a trial never started counts as interrupted
    return exit_code(
        [Status.INTERRUPTED if r.status == Status.NOT_STARTED else r.status for r in results]
    )


def _run_study(args, config, study, groups, argv) -> int:
    """A study file (tune / seeds / primary): attnlab.cli.study, given this module's helpers."""
    from attnlab.cli import study as studies

    return studies.run_study(args, config, study, groups, argv, sys.modules[__name__])


def searched(config: dict, args: argparse.Namespace) -> bool:
    """Searched by Optuna (attnlab.sweeps.search): bayes always; random with early_terminate,
    run_cap or --storage (else its draws are made up front, as before, with --count and --seed)."""
    if config["method"] == "bayes":
        return True
    extras = ("early_terminate", "run_cap")
    return config["method"] == "random" and (any(k in config for k in extras) or bool(args.storage))


def _run_search(args: argparse.Namespace, config: dict, groups: list[str], argv) -> int:
    """Search the sweep with Optuna: the plan, the preflight, the workers, the summary."""
    from attnlab.sweeps import search_space
    from attnlab.sweeps.search import Search, default_storage

    search_space.check_search(config, args.sweep)
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise SweepError(
            f"{args.sweep}: method {config['method']!r} is searched by Optuna, which is not "
            "installed: pip install 'attnlab[optuna]' (or run it on W&B's server with --wandb)"
        ) from None
    if args.count is not None and args.count < 1:
        raise SweepError(f"--count {args.count} is not valid; expected a number of trials >= 1")
    cap = args.count or config.get("run_cap")
    if cap is None:
        raise SweepError(f"{args.sweep}: a search needs run_cap in the file or --count N")
    out = Path(args.out) if args.out else default_out_dir(config["name"])
    refuse_foreign_out(out, config)
    share = 1 / args.trials_per_gpu if args.trials_per_gpu > 1 else None
    search = Search(
        config, out, args.storage or default_storage(out), cap, args.overrides, args.seed, share
    )
    slots = list(groups) or [None] * (args.parallel or 1)
    if groups and args.parallel:
        slots = slots[: args.parallel]
    _print_plan(search, args, len(slots))
    checks = search.check_trials()
    if checks and not _metric_reported(checks[0], search.metric, args.sweep):
        return 2
    if not _trials_start(checks, search=True):
        return 2
    if args.dry_run:
        print("no study created (--dry-run)")
        return 0
    return _search(search, slots, args, argv)


def shown_storage(url: str) -> str:
    """The storage URL as printed: a database password hidden."""
    if "://" not in url or "@" not in url:
        return url
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _print_plan(search, args, workers: int) -> None:
    from attnlab.sweeps import search_space

    sampler = "TPE" if search.config["method"] == "bayes" else "random sampling"
    print(
        f"sweep {search.name} ({args.sweep}): {search.config['method']} search by Optuna "
        f"({sampler}), {search.cap} trials per study, {workers} worker(s), out {search.out}"
    )
    print(f"studies: {', '.join(search.study_names())} in {shown_storage(search.storage)}")
    for key, dist in search_space.distributions(search.config, search.arms[0])[0].items():
        print(f"  {key}: {dist}")
    if search.pruning is not None:
        p = search.pruning
        last = f", none after validation {p.last_step}" if p.last_step is not None else ""
        print(
            f"pruning: successive halving at validations {', '.join(map(str, p.bands))}... "
            f"(from 0), keeping the top 1/{p.reduction_factor}{last}"
        )


def _search(search, slots, args, argv) -> int:
    from attnlab.sweeps.search import open_search, run_search
    from attnlab.sweeps.search_report import study_results, write_search_file, write_search_views

    open_search(search)  # SweepError (exit 2) for a storage that cannot be opened: nothing ran
    write_spec(search.out, search.config)
    write_search_file(search)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    failure = None
    try:
        ran = run_search(search, slots)
    except Exception as err:  # a worker's storage error: one line, then what the study holds
        ran, failure = [], f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        print(f"attnlab-sweep: error: a worker stopped: {failure}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
    interrupted = any(r.status in (Status.INTERRUPTED, Status.NOT_STARTED) for r in ran)
    results = study_results(search)
    print()
    print(write_summary(results, search.out, search.name, args.sweep, search.metric, interrupted))
    for line in write_search_views([search.out]):
        print(line)
    print(f"search views: {search.out / 'search.md'}")
    interrupted = interrupted or failure is not None
    if interrupted:
        print(f"resume: {resume_command(argv if argv is not None else sys.argv[1:], search.out)}")
    elif not any(r.status == Status.COMPLETED and r.metric is not None for r in results):
        print(f"attnlab-sweep: error: no trial completed with {search.metric}: the search has no "
              f"value (see {search.out / 'summary.md'})", file=sys.stderr)  # fmt: skip
        failure = "no value"
    return exit_code([r.status for r in ran] + ([Status.FAILED] if failure else []))


def _metric_reported(trial, metric: str, source: str) -> bool:
    """The search's metric is one a run of the trial's config reports; else one line (with the
    closest name), False: nothing runs."""
    from attnlab.config.location import conf_dir
    from attnlab.sweeps.check import metric_problems

    for line in metric_problems(trial, [("metric.name", metric)], conf_dir()):
        print(f"attnlab-sweep: error: {source}: {line}", file=sys.stderr)
        return False
    return True


def _list_trials(trials) -> None:
    """--dry-run: each trial's number, name and overrides, and the first one's command."""
    for t in trials:
        shown = [o for o in t.overrides if not o.startswith("hydra.run.dir=")]
        print(f"  {t.index:03d}  {t.name:<32}  {' '.join(shown)}")
    if trials:
        print(f"command of trial 000: {shlex.join(trials[0].command)}")


def _trials_start(trials, search: bool = False) -> bool:
    """attnlab-train's preflight on every trial (attnlab.sweeps.check); each problem printed in
    one line. False when any trial would be refused: then none starts (exit 2). search: the
    trials are a search's check trials (Search.check_trials), named by their values."""
    from attnlab.config.location import conf_dir
    from attnlab.sweeps.check import check_trials, problem_lines

    problems = check_trials(trials, conf_dir())
    for line in problem_lines(problems, len(trials), search):
        print(f"attnlab-sweep: error: {line}", file=sys.stderr)
    if problems:
        print("attnlab-sweep: no trial started (exit 2): fix the sweep file or the overrides",
              file=sys.stderr)  # fmt: skip
    return not problems


def refuse_foreign_out(out: Path, config: dict) -> None:
    """SweepError (exit 2, before anything runs or is written) when --out already holds another
    sweep: its sweep.yaml names another sweep or another search space. The same file resumes
    its own folder."""
    path = out / "sweep.yaml"
    if not path.is_file():
        return
    try:
        held = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        held = {}
    keys = ("name", "method", "parameters")
    differ = [k for k in keys if not isinstance(held, dict) or held.get(k) != config.get(k)]
    if differ:
        name = held.get("name") if isinstance(held, dict) else None
        raise SweepError(
            f"--out {out} holds another sweep ({name!r}, its sweep.yaml differs in "
            f"{', '.join(differ)}); expected a new folder, or that sweep's own file to resume it"
        )


def write_spec(out: Path, config: dict) -> None:
    """<out>/sweep.yaml: the sweep file as it was run (its metric, its parameters in their
    order, an optional `baseline:`), which attnlab-compare reads for its defaults; kept as
    first written when a sweep is resumed into the same folder."""
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep.yaml"
    if not path.exists():
        path.write_text(yaml.safe_dump(config, sort_keys=False))


def resume_command(argv: list[str], out: Path) -> str:
    """The command that continues this sweep: the same arguments with --out <its folder>
    (completed trials are kept, interrupted ones resume from their newest checkpoint)."""
    args = [a for i, a in enumerate(argv) if a != "--out" and (i == 0 or argv[i - 1] != "--out")]
    args = [a for a in args if not a.startswith("--out=")]
    return shlex.join([programs.SWEEP, *args, "--out", str(out)])


def _run_wandb(args: argparse.Namespace, config: dict, groups: list[str]) -> int:
    from attnlab.sweeps.wandb_agents import agent_command, run_agents, server_config

    n_agents = len(groups) if groups else (args.parallel or 1)
    out = Path(args.out) if args.out else default_out_dir(config["name"])
    if args.dry_run:
        print("sweep config for W&B:")
        shown = server_config(config, args.overrides, run_root=out)
        print(yaml.safe_dump(shown, sort_keys=False).rstrip())
        argv = agent_command("SWEEP_ID", args.count, args.project, args.entity)
        for i, gpus in enumerate(groups or [None] * n_agents):
            env = f"CUDA_VISIBLE_DEVICES={gpus} " if gpus is not None else ""
            print(f"agent {i}: {env}{shlex.join(argv)}")
        return 0
    if args.trials_per_gpu > 1:
        print(sharing_line(args.trials_per_gpu))
    return run_agents(
        config,
        groups,
        n_agents,
        out,
        memory_share=1 / args.trials_per_gpu if args.trials_per_gpu > 1 else None,
        count=args.count,
        project=args.project,
        entity=args.entity,
        extra_overrides=args.overrides,
    )


if __name__ == "__main__":
    sys.exit(main())
