"""The one door from a run into config/ (attnlab.pipeline.train): the checks, unless the
preflight already ran them on this config in this process, and the plain tree the run is built
from.

A job that runs where the preflight did not (a SLURM launcher, another sweeper, a test calling
attnlab.pipeline.train.train) is checked here on its own machine: every rule between groups
(validate.py) and what Lightning would refuse there (trainer_check.py).
"""

from __future__ import annotations

from omegaconf import DictConfig

from attnlab.config.plain import plain_config


class ConfigRefused(ValueError):
    """A config a run cannot start with; nothing was written. One line (or one per problem)."""


def run_config(cfg: DictConfig, checked: bool = False) -> dict:
    """`cfg` as plain Python (Hydra's own node dropped): what the run builds and logs from.
    Unless `checked`, checked first, before anything is written: ConfigRefused with the first
    problem (what Lightning would refuse on this machine, then validate.py's rules)."""
    if not checked:
        from attnlab.config.plain import to_plain
        from attnlab.config.trainer_check import trainer_problem
        from attnlab.config.validate import validate_config

        problem = trainer_problem(to_plain(cfg.trainer))
        if problem:
            raise ConfigRefused(problem)
        try:
            validate_config(cfg)
        except ValueError as err:  # DataConfigError too: its problems, one per line
            raise ConfigRefused(str(err)) from err
    return plain_config(cfg)
