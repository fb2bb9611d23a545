"""The trials of a shipped sweep file as the tests compose them: a grid's every point, a
search's preflight points (per arm, the combinations of each searched key's checked values:
attnlab.sweeps.search.Search.check_trials)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hydra import compose
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

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


_PARSER = OverridesParser.create()


def _plain_overrides(overrides: list[str]) -> dict[str, Override]:
    """The overrides Hydra would apply as one plain value each (scheduler.peak_lr=5e-3): a dotted
    key, not a config group, added, removed or hydra.* key; a single literal, not a list, dict,
    interpolation or sweep (a,b); and no other override touching the key, its parents or its
    children (Hydra applies overrides in order, compose_arm's copies apply these last). Each
    with its parsed form."""
    keys = [override_key(o) or "" for o in overrides]

    def alone(key: str) -> bool:
        return (
            sum(k == key or k.startswith(key + ".") or key.startswith(k + ".") for k in keys) == 1
        )

    plain = {}
    for override, key in zip(overrides, keys, strict=True):
        value = override.partition("=")[2]
        if (
            "." in key
            and not override.startswith(("+", "~"))
            and not key.startswith("hydra.")
            and not any(c in key for c in "/@")
            and "${" not in value
            and not value.startswith(("[", "{"))
            and alone(key)
        ):
            (parsed,) = _PARSER.parse_overrides([override])
            if not parsed.is_sweep_override():
                plain[override] = parsed
    return plain


def compose_arm(overrides: list[str], composed: dict) -> tuple[DictConfig, dict]:
    """(config, config-group choices) of Hydra's compose of `overrides`. Hydra composes once per
    arm: its config groups, added or removed keys, the other overrides and the names of its plain
    values (_plain_overrides). The points that differ from a composed one only in plain values (a
    rate, a width) take theirs on a copy as Hydra's compose does (its override parser, then
    OmegaConf.update with merge, config_loader_impl.py): a value of the wrong type fails as in
    compose (ConfigCompositionException "Error merging override ..."), and a key name not yet
    composed is composed. Composing each of the 242 arms took 1.5 of the suite's minutes. Call
    it inside Hydra's initialize_config_dir of conf/."""
    plain = _plain_overrides(overrides)
    rest = tuple(o for o in overrides if o not in plain)
    arm = (rest, tuple(override_key(o) for o in plain))
    if arm not in composed:
        cfg = compose("train", overrides, return_hydra_config=True)
        choices = dict(cfg.hydra.runtime.choices)
        del cfg.hydra
        composed[arm] = (cfg, choices)
    cfg, choices = composed[arm]
    cfg = copy.deepcopy(cfg)
    for override in plain.values():
        try:
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
        except OmegaConfBaseException as err:
            raise ConfigCompositionException(
                f"Error merging override {override.input_line}"
            ) from err
    return cfg, dict(choices)
