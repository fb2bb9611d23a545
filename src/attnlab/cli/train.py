"""attnlab-train: train, validate and test one model from a Hydra config (conf/train.yaml).

    attnlab-train                                   # small model on `reverse`, CPU
    attnlab-train model.pos_encoding=rope model.n_heads=2 scheduler.warmup_steps=200
    attnlab-train -m model.norm_position=pre,post seed=1,2,3
    attnlab-train --help                            # config groups and options

The command line is checked first (attnlab.pipeline.preflight: every job built dry, one line,
exit 2); then Hydra runs attnlab.pipeline.train.train once per job, which builds it for real.
The exit code is that of the worst job (attnlab.runs.status.EXIT_CODES), whichever launcher ran
the jobs (attnlab.runs.multirun).
"""

from __future__ import annotations

import sys

from attnlab import programs
from attnlab.runs.status import Status

PROG = programs.TRAIN

_EXIT_STATUSES: list[str] = []  # a single run's status (it runs in this process)


def _task(cfg) -> dict:
    """One Hydra job: train, and remember its status for the exit code."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from attnlab.pipeline.build import ConfigRefused
    from attnlab.pipeline.train import train
    from attnlab.runs.identity import RunConfigChanged

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN and cfg.group is None:
        cfg.group = cfg.name  # the jobs of a sweep share a W&B group (set `group` to choose)
    try:
        results = train(cfg, overrides=list(hydra_cfg.overrides.task))
    except (ConfigRefused, RunConfigChanged) as err:  # nothing was written: one line, exit 2
        for line in str(err).splitlines():
            print(f"{PROG}: error: {line}", file=sys.stderr)
        _EXIT_STATUSES.append(Status.CONFIG_ERROR)
        return {"status": Status.CONFIG_ERROR, "error": str(err)}
    _EXIT_STATUSES.append(results.get("status", Status.FAILED))
    return results


def main() -> None:
    """Console entry point: preflight the overrides (one-line errors, exit 2), then Hydra. A
    single run starts with Python's cyclic garbage collector paused (attnlab.runs.startup)."""
    from attnlab.runs.startup import collector_paused

    with collector_paused(not _is_multirun(sys.argv[1:])):
        _main()


def _main() -> None:
    import hydra

    from attnlab.config.compose import open_mapping_overrides
    from attnlab.config.location import conf_dir
    from attnlab.config.resolvers import register as register_resolvers
    from attnlab.pipeline.preflight import preflight
    from attnlab.runs.status import exit_code

    register_resolvers()
    sys.argv[1:] = open_mapping_overrides(sys.argv[1:])  # model.pos.<option>= (a component's)
    jobs = preflight(sys.argv[1:], conf_dir(), prog=PROG)
    if not _is_multirun(sys.argv[1:]):
        run = hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="train")
        if {"--help", "-h"} & set(sys.argv[1:]):
            _help_with_meanings(run(_task))
        run(_task)()
        sys.exit(exit_code(_EXIT_STATUSES))
    sys.exit(_multirun(jobs))


def _help_with_meanings(app) -> None:
    """Hydra's --help, with each config key's one-line meaning (the schema's own comment,
    attnlab.config.key_help) beside its default; exits as Hydra's help does."""
    import contextlib
    import io

    from attnlab.config.key_help import annotate

    printed, code = io.StringIO(), 0
    with contextlib.redirect_stdout(printed):
        try:
            app()
        except SystemExit as stop:
            code = stop.code or 0
    head, marker, config = printed.getvalue().partition("== Config ==\n")
    print(head + marker + annotate(config) if marker else head, end="")
    sys.exit(code)


def _add_override(override: str) -> None:
    """Add `override` to sys.argv beside the others (argparse wants them in one run)."""
    from hydra._internal.utils import get_args_parser

    overrides = get_args_parser().parse_args(sys.argv[1:]).overrides
    at = max(i for i, a in enumerate(sys.argv) if a == overrides[-1]) + 1 if overrides else None
    sys.argv.insert(len(sys.argv) if at is None else at, override)


def _is_multirun(argv: list[str]) -> bool:
    return "-m" in argv or "--multirun" in argv


def _multirun(jobs: int | None) -> int:
    """Run the multirun; print which jobs did not succeed; the worst job's exit code."""
    import os
    from datetime import datetime

    import hydra

    from attnlab.config.location import conf_dir
    from attnlab.config.resolvers import STAMP_ENV
    from attnlab.runs import multirun

    id_override = multirun.new_id_override()
    _add_override(id_override)
    # One date and time for this multirun's folder in every process its launcher starts.
    os.environ[STAMP_ENV] = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    launcher_code = 0
    try:
        hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="train")(_task)()
    except SystemExit as err:  # Hydra reports a job that raised, then exits 1
        launcher_code = err.code if isinstance(err.code, int) else 1
    records = multirun.collect(id_override.rpartition("=")[2], jobs)
    if not records:  # --help, --cfg and the like: no jobs ran
        return launcher_code
    for line in multirun.summary(records):
        print(f"{PROG}: {line}")
    return max(multirun.multirun_exit_code(records), launcher_code)


if __name__ == "__main__":
    main()
