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


def _parsed(override: str) -> Override | None:
    try:
        (parsed,) = _PARSER.parse_overrides([override])
    except Exception:  # compose refuses it, with its own error
        return None
    return parsed


def _group_choice(parsed: Override | None, is_group) -> bool:
    """Does Hydra take the override as a choice in the defaults list (model=small, +table3=A1,
    ~group), not as a value set on the composed config? As Hydra's defaults_list.Overrides
    sorts them: a config group's key whose value is not a dict."""
    return (
        parsed is not None
        and not parsed.is_sweep_override()
        and is_group(parsed.key_or_group)
        and not isinstance(parsed.value(), dict)
    )


def _plain_overrides(overrides: list[str], is_group=lambda key: False) -> dict[str, Override]:
    """The overrides Hydra would apply as one plain value each (scheduler.peak_lr=5e-3): a dotted
    key, not a config group, added, removed or hydra.* key; a single literal, not a list, dict,
    interpolation or sweep (a,b); and no other value override touching the key, its parents or
    its children (Hydra applies the value overrides in order once the defaults list is composed,
    compose_arm's copies apply these last; a config group's choice, scheduler=cosine, is part
    of the defaults list: `is_group(key)` tells, Hydra's repository.group_exists). Each with its
    parsed form."""
    parsed = [_parsed(o) for o in overrides]
    keys = [
        None if _group_choice(p, is_group) else override_key(o) or ""
        for o, p in zip(overrides, parsed, strict=True)
    ]
    values = [k for k in keys if k is not None]

    def alone(key: str) -> bool:
        return (
            sum(k == key or k.startswith(key + ".") or key.startswith(k + ".") for k in values) == 1
        )

    plain = {}
    for override, key, one in zip(overrides, keys, parsed, strict=True):
        value = override.partition("=")[2]
        if (
            key is not None
            and one is not None
            and "." in key
            and not override.startswith(("+", "~"))
            and not key.startswith("hydra.")
            and not any(c in key for c in "/@")
            and "${" not in value
            and not value.startswith(("[", "{"))
            and alone(key)
            and not one.is_sweep_override()
        ):
            plain[override] = one
    return plain


# The arms composed in this process (compose_arm's default): test_sweep_compose.py and
# test_sweep_files.py compose the same arms of the shipped sweep files.
COMPOSED: dict = {}


def compose_arm(overrides: list[str], composed: dict | None = None) -> tuple[DictConfig, dict]:
    """(config, config-group choices) of Hydra's compose of `overrides`. Hydra composes once per
    arm: its config groups, added or removed keys, the other overrides and the names of its plain
    values (_plain_overrides). The points that differ from a composed one only in plain values (a
    rate, a width, a warmup under scheduler=cosine) take theirs on a copy as Hydra's compose does
    (its override parser, then OmegaConf.update with merge, config_loader_impl.py): a value of
    the wrong type fails as in compose (ConfigCompositionException "Error merging override
    ..."), and a key name not yet composed is composed. Composing each of the 242 arms took 1.5
    of the suite's minutes. `composed`: the arms composed so far ({} of one's own, or COMPOSED,
    this process's). Call it inside Hydra's initialize_config_dir of conf/."""
    from hydra.core.global_hydra import GlobalHydra

    repository = GlobalHydra.instance().config_loader().repository
    plain = _plain_overrides(overrides, repository.group_exists)
    composed = COMPOSED if composed is None else composed
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


# The meta-device models of dry_build_sharing_models, by their TransformerConfig.
_MODELS: dict[str, object] = {}


def dry_build_sharing_models(cfg: DictConfig) -> None:
    """build_utils.dry_build of a point compose_arm composed, all of it, but for the model:
    points with an equal TransformerConfig (the rates of one arm) share the one built on the
    meta device for the first of them (Transformer's constructor, given the same config, builds
    the same model; a config it refuses raises every time). The point's paths.run_dir is set
    here, on compose_arm's copy, as build sets it on a copy of its own (dry: never written to).
    The model and that copy were half of each build's time."""
    from unittest import mock

    import attnlab.model
    import attnlab.training.module  # noqa: F401 (its isinstance checks see the real class)
    from attnlab.config.plain import plain_config
    from build_utils import dry_build

    real = attnlab.model.Transformer

    class Shared(real):
        def __new__(cls, config):
            key = repr(config)
            if key not in _MODELS:
                _MODELS[key] = real(config)
            return _MODELS[key]  # not a Shared: its __init__ is not run again

    cfg.paths.run_dir = "<run_dir>"  # build's own, for a composed config in a dry build
    with mock.patch.object(attnlab.model, "Transformer", Shared):
        dry_build(plain_config(cfg))
