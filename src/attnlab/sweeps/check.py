"""Every trial of a sweep checked before any starts: attnlab-train's own preflight
(attnlab.pipeline.preflight.check: compose, build dry, what Lightning would refuse here) on each
trial's overrides, the grid and the command line's extra overrides together. A typo in a swept
key, a bad value in one arm or a bad extra override is then one line per problem, before the
valid arms train; without it the sweep would fail trial by trial.

Trials whose command does not run attnlab-train (a program of one's own) are not checked.
Trials that differ only in their seed are composed once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnlab import programs
from attnlab.sweeps.spec import Trial, override_key


def runs_attnlab_train(command: Sequence[str]) -> bool:
    """Does the argv run attnlab-train (its console script, or python -m attnlab.cli.train)?"""
    for i, token in enumerate(command):
        if Path(token).name == programs.TRAIN:
            return True
        if token == "-m" and i + 1 < len(command) and command[i + 1] == "attnlab.cli.train":
            return True
    return False


def trial_overrides(trial: Trial) -> list[str]:
    """The overrides attnlab-train would compose for the trial (Hydra's own hydra.* left out:
    they place the run, and the compose API does not take them)."""
    return [o for o in trial.overrides if not (override_key(o) or "").startswith("hydra")]


def check_trials(trials: Sequence[Trial], config_dir: Path | str) -> list[tuple[list[Trial], str]]:
    """The problems of the trials, each once with the trials that have it: [(trials, one-line
    message)], in trial order; [] when every trial would start."""
    from attnlab.config.compose import ConfigError
    from attnlab.pipeline.preflight import check

    verdicts: dict[tuple, str | None] = {}
    problems: dict[str, list[Trial]] = {}
    for trial in trials:
        if not runs_attnlab_train(trial.command):
            continue
        overrides = trial_overrides(trial)
        key = tuple(o for o in overrides if override_key(o) != "seed")
        if key not in verdicts:
            try:
                check(config_dir, overrides)
                verdicts[key] = None
            except ConfigError as err:
                verdicts[key] = str(err).splitlines()[0]
        if verdicts[key] is not None:
            problems.setdefault(verdicts[key], []).append(trial)
    return [(bad, message) for message, bad in problems.items()]


def problem_lines(
    problems: list[tuple[list[Trial], str]], total: int, search: bool = False
) -> list[str]:
    """One line per problem: the trial (or the trials, by number) and the message; for a
    search's check trials, the values that draw it (the first two, and how many more)."""
    lines = []
    for bad, message in problems:
        if search:
            more = f" and {len(bad) - 2} more" if len(bad) > 2 else ""
            where = f"the search can draw {'; '.join(t.label for t in bad[:2])}{more}"
        elif len(bad) == 1:
            where = f"trial {bad[0].label}"
        else:
            where = f"{len(bad)} of {total} trials ({_numbers([t.index for t in bad])})"
        lines.append(f"{where}: {message}")
    return lines


def _numbers(indices: list[int]) -> str:
    """[0, 1, 2, 5] -> '000-002, 005'."""
    runs, start = [], None
    for i, n in enumerate(indices):
        if start is None:
            start = n
        if i + 1 == len(indices) or indices[i + 1] != n + 1:
            runs.append(f"{start:03d}" if start == n else f"{start:03d}-{n:03d}")
            start = None
    return ", ".join(runs)


def metric_problems(
    trial: Trial,
    named: Sequence[tuple[str, str]],
    config_dir: Path | str,
    extra: Sequence[str] = (),
) -> list[str]:
    """For each (where, metric) of `named` (e.g. ("tune.metric", "val/nll_best")) that a run of
    the trial's config would not report (attnlab.pipeline.metric_names; `extra`: metrics made
    after the run, such as a study's attnlab-eval scores), one line. [] for a trial that does
    not run attnlab-train, or whose config does not compose (its preflight says why)."""
    from attnlab.config.compose import ConfigError, compose_config
    from attnlab.config.plain import plain_config
    from attnlab.pipeline.metric_names import metric_problem, reported_metrics

    if not runs_attnlab_train(trial.command):
        return []
    try:
        cfg = compose_config(config_dir, trial_overrides(trial))
        cfg.paths.run_dir = "<run_dir>"  # composed without a Hydra run, as the preflight does
        plain = plain_config(cfg)
    except (ConfigError, Exception):  # noqa: BLE001  the preflight reports a config that fails
        return []
    reported = reported_metrics(plain)
    if reported is None:  # a component of one's own may log what it likes: not refused
        return []
    names = [*reported, *extra]
    found = [metric_problem(metric, names, where) for where, metric in named]
    return [p for p in found if p]
