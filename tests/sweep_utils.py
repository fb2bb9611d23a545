"""The trials of a shipped sweep file as the tests compose them: a grid's every point, a
search's preflight points (per arm, the combinations of each searched key's checked values:
attnlab.sweeps.search.Search.check_trials)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hydra import compose
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from attnlab.sweeps import expand_sweep
from attnlab.sweeps.spec import Trial, load_sweep, override_key


def is_search(path: Path) -> bool:
    return load_sweep(path)["method"] != "grid"


def sweep_trials(path: Path) -> list[Trial]:
    if not is_search(path):
        return expand_sweep(path)
    pytest.importorskip("optuna", reason="a searched sweep file needs the [optuna] extra")
    from attnlab.sweeps.search import Search

    config = {"name": path.stem, **load_sweep(path)}
    return Search(config, Path("out"), "sqlite://", cap=1).check_trials()


def _plain(override: str) -> bool:
    """A dotted key set to a literal (scheduler.peak_lr=5e-3): no config group, no added or
    removed key, no interpolation."""
    key, _, value = override.partition("=")
    return (
        "." in key
        and not key.startswith(("+", "~"))
        and not any(c in key for c in "/@")
        and "${" not in value
    )


def compose_arm(overrides: list[str], composed: dict) -> tuple:
    """(config, config-group choices) of Hydra's compose of `overrides`. Hydra composes once per
    set of config groups, added or removed keys and names of plain keys (a file's arm); the
    arms that differ from it only in plain values (a rate, a width) take theirs on a copy,
    parsed by Hydra's override parser and set in struct mode: a value of the wrong type fails
    as in compose (ValidationError), and a key name not yet composed is composed. Composing
    each of the 242 arms took 1.5 of the suite's minutes. Call it inside Hydra's
    initialize_config_dir of conf/."""
    plain = [o for o in overrides if _plain(o)]
    arm = (tuple(o for o in overrides if not _plain(o)), tuple(override_key(o) for o in plain))
    if arm not in composed:
        cfg = compose("train", overrides, return_hydra_config=True)
        choices = dict(cfg.hydra.runtime.choices)
        del cfg.hydra
        composed[arm] = (cfg, choices)
    cfg, choices = composed[arm]
    cfg = copy.deepcopy(cfg)
    for override in OverridesParser.create().parse_overrides(plain):
        OmegaConf.update(cfg, override.key_or_group, override.value(), merge=False)
    return cfg, choices
