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
    """`cfg` as plain Python (Hydra's own node dropped): what the run builds from, logs and
    records. Unless `checked`, validated first: validate_config's ValueError (DataConfigError)
    as it raises it, ConfigRefused for a trainer argument Lightning refuses on this machine."""
    if not checked:
        from attnlab.config.trainer_check import trainer_problem
        from attnlab.config.validate import validate_config

        validate_config(cfg)
    tree = plain_config(cfg)
    if not checked:
        problem = trainer_problem(tree["trainer"])
        if problem:
            raise ConfigRefused(problem)
    return tree
