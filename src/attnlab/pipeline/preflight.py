"""Preflight for attnlab-train (and attnlab-sweep, attnlab-bench): every job of a command line
composed (attnlab.config.compose) and built dry (attnlab.pipeline.build) before Hydra runs it; a
bad value ends in one line on stderr and exit code 2, with nothing written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from attnlab import programs
from attnlab.config.compose import ConfigError, compose_config, describe, sweep_points

# Launchers that run the jobs on other machines: their devices are not this machine's.
REMOTE_LAUNCHERS = ("slurm", "submitit_slurm")
# Flags after which Hydra prints something instead of running: nothing to check.
_INFO_FLAGS = (
    "help",
    "hydra_help",
    "version",
    "cfg",
    "info",
    "shell_completion",
    "resolve",
    "experimental_rerun",
)


def check(
    config_dir: Path | str, overrides: list[str], multirun: bool = False, config_name: str = "train"
) -> int:
    """Compose every job the command would run and build it dry (attnlab.pipeline.build: the
    run's own constructors, the model on the meta device, every data file read, the Trainer's
    arguments as Lightning takes them here unless a remote launcher runs the jobs); ConfigError
    if one is refused. The number of jobs."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from attnlab.pipeline.build import build

    local = not any(o.split("=")[-1] in REMOTE_LAUNCHERS for o in overrides if "launcher=" in o)
    try:
        points = sweep_points(overrides) if multirun else [overrides]
        for point in points:
            cfg = compose_config(config_dir, point, config_name)
            refuse_unknown_additions(cfg, point, config_dir)
            build(cfg, dry=True, local=local)
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        raise ConfigError(describe(err)) from None
    return len(points)


def preflight(argv: list[str], config_dir: Path | str, prog: str = programs.TRAIN) -> int | None:
    """Check the command line `argv` before Hydra runs it; exit 2 with one line if bad. The
    number of jobs it runs, where the preflight expanded them (None otherwise).

    Commands that only print (--help, --cfg, --info, ...) or use their own config location
    (--config-path) are left to Hydra; --config-dir (a folder of your own presets) is searched
    after the shipped configs, as Hydra does.
    """
    from hydra._internal.utils import get_args_parser

    try:
        args = get_args_parser().parse_args(argv)
    except SystemExit:  # bad flags: Hydra's own parser will say so
        return None
    if any(getattr(args, flag, None) for flag in _INFO_FLAGS):
        return None
    if args.config_path:
        return None
    overrides = list(args.overrides)
    if args.config_dir:  # your own presets beside the shipped ones, as Hydra searches them
        extra = Path(args.config_dir).resolve()
        if not extra.is_dir():
            print(f"{prog}: error: --config-dir {extra} is not a folder", file=sys.stderr)
            raise SystemExit(2)
        overrides.append(f"hydra.searchpath=[file://{extra}]")
    if args.multirun and any(o.startswith("hydra/sweeper=") for o in args.overrides):
        return None  # another sweeper's syntax (e.g. interval(0,1)) is not the basic sweeper's
    try:
        return check(
            config_dir,
            overrides,
            multirun=args.multirun,
            config_name=args.config_name or "train",
        )
    except ConfigError as err:
        for line in str(err).splitlines():
            print(f"{prog}: error: {line}", file=sys.stderr)
        raise SystemExit(2) from None


def refuse_unknown_additions(cfg, overrides: list[str], config_dir: Path | str) -> None:
    """ConfigError for `+key=value` where `key` is not a key of its schema (the top level, the
    trainer, model and data groups are dataclasses: attnlab.config.schema): Hydra's `+` adds
    any key, so `+foo=1` used to run to the end in a folder named after it. `+group=option`
    (a config group), `+key` under a free mapping (scheduler, optim, callbacks) and `++key`
    (Hydra's add-or-override, on purpose) are left alone."""
    import dataclasses
    import difflib

    from omegaconf import OmegaConf

    for override in overrides:
        if not override.startswith("+") or override.startswith("++") or "=" not in override:
            continue
        key = override[1:].split("=", 1)[0]
        if "/" in key or (Path(config_dir) / key.replace(".", "/")).is_dir():
            continue  # a config group appended to the defaults
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        schema = OmegaConf.get_type(node) if OmegaConf.is_config(node) else None
        if schema is None or not dataclasses.is_dataclass(schema):
            continue
        known = [f.name for f in dataclasses.fields(schema)]
        close = difflib.get_close_matches(leaf, known, n=1)
        hint = f" (did you mean {f'{parent}.' if parent else ''}{close[0]}?)" if close else ""
        where = f"{parent} ({schema.__name__})" if parent else f"the config ({schema.__name__})"
        raise ConfigError(
            f"{override}: {leaf} is not a key of {where}{hint}; its keys: {', '.join(known)} "
            f"(++{key}=... adds a key of your own on purpose)"
        )
