"""The command line composed, and its errors in one line naming the key: Hydra reports a
composition error over several lines (and a failed run with a traceback), so the preflight
(attnlab.pipeline.preflight) composes each job with Hydra's compose API and turns any error into
e.g.

    attnlab-train: error: model.pos_encoding='foo' is not valid; expected one of: sinusoidal, ...
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import MissingConfigException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

import attnlab.config.schema  # noqa: F401 (registers the schemas in Hydra's ConfigStore)
from attnlab.config import file_cache
from attnlab.config.trainer_schema import ATTNLAB_SETS

file_cache.install()  # each config file parsed once per process, not once per compose

# Keys that have moved, and where to: an override of one is told, not just refused.
MOVED_KEYS = {
    "optim.lr": "the peak learning rate has one home, which every schedule reads: use "
    "scheduler.peak_lr (null with scheduler=noam: the paper's formula)",
    # the schedule and the optimizer are classes chosen by their group (their `_target_`)
    "scheduler.name": "the schedule is chosen by its group: scheduler=<option>",
    "optim.name": "the optimizer is chosen by its group: optim=<option>",
}


# Mappings whose keys a component declares itself (a positional encoding's options: its OPTIONS),
# not the schema: `model.pos.num_buckets=16` sets one as Hydra's `++` would (add or override),
# and the component refuses a key it does not declare, naming it and its options.
OPEN_MAPPINGS = ("model.pos.",)


def open_mapping_overrides(overrides: list[str]) -> list[str]:
    """`model.pos.<option>=<value>` as `++model.pos.<option>=<value>`; the others unchanged."""
    return ["++" + o if o.startswith(OPEN_MAPPINGS) and "=" in o else o for o in overrides]


class ConfigError(Exception):
    """A bad config value; the message is one line naming the key."""


def compose_config(config_dir: Path | str, overrides: list[str], config_name: str = "train"):
    """Compose `config_name` from `config_dir` with `overrides` (no Hydra run, no run dir)."""
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return compose(config_name=config_name, overrides=open_mapping_overrides(list(overrides)))


def sweep_points(overrides: list[str]) -> list[list[str]]:
    """The override lists of every job of a `-m` sweep (Hydra's basic sweeper expansion)."""
    parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [point for batch in batches for point in batch]


def describe(err: BaseException) -> str:
    """One line for a Hydra / OmegaConf / validation error, naming the key (and choices); for
    problems with the data files, one line per problem."""
    if getattr(err, "problems", None):  # the build's ConfigRefused: one line per problem
        return "\n".join(_one_line(p) for p in err.problems)
    if isinstance(err, MissingConfigException) and err.missing_cfg_file:
        group, _, choice = err.missing_cfg_file.rpartition("/")
        if group and err.options:
            return f"{group}={choice!r} is not valid; expected one of: {', '.join(err.options)}"
    missing = re.match(r"Could not override '([\w/]+)'\. No match in the defaults list", str(err))
    if missing:
        group = missing.group(1)
        return (
            f"{group} is not in the default config, so {group}=<option> has nothing to replace; "
            f"add it with a +: +{group}=<option> (e.g. +table3=A1)"
        )
    if isinstance(err, OverrideParseException):
        key, _, value = str(err.override).partition("=")
        hint = ""
        if "=" in value:  # e.g. resume=.../best-step=600.ckpt
            hint = f"; quote a value that holds '=': {key}='{value}'"
        return f"could not parse override {err.override!r}: {_first_line(err.message)}{hint}"
    cause = err
    while cause.__cause__ is not None and not isinstance(cause, OmegaConfBaseException):
        cause = cause.__cause__
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        return _describe_omegaconf(cause, err)
    return _one_line(str(err))


def _describe_omegaconf(err: OmegaConfBaseException, outer: BaseException) -> str:
    key, value, msg = err.full_key, err.value, _first_line(err.msg or str(err))
    converted = re.match(r"Value .* could not be converted to (\w+)$", msg)
    if converted:
        kind = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false"}
        expected = kind.get(converted.group(1), converted.group(1))
        return f"{key}={value!r} is not valid; expected {expected}"
    if re.match(r"Key '.*' (not in '.*'|is not in struct)$", msg):
        return _unknown_key(key, getattr(err, "parent_node", None), outer)
    return f"{key}: {msg}"


def _unknown_key(key: str, parent, outer: BaseException) -> str:
    """'trainer.fast_dev_rn is not a key of trainer; did you mean trainer.fast_dev_run? ...'"""
    where, _, name = key.rpartition(".")
    if where == "trainer" and name in ATTNLAB_SETS:
        return f"{key} is set by attnlab-train; use {ATTNLAB_SETS[name]}"
    if key in MOVED_KEYS:
        return f"{key} is not a key; {MOVED_KEYS[key]}" + _options_of(MOVED_KEYS[key])
    keys = [str(k) for k in parent.keys()] if OmegaConf.is_dict(parent) else []
    known = [k for k in keys if k != "hydra" and not (k.startswith("_") and k.endswith("_"))]
    line = f"{key} is not a key of {where or 'the config'}"
    close = _closest(name, known, parent, re.search(r"use \+(\S+)", str(outer)))
    if close:
        return f"{line}; did you mean {where + '.' if where else ''}{close[0]}?"
    if known:
        line += f"; expected one of: {', '.join(known)}"
    append = re.search(r"use (\+\S+)", str(outer))
    return line + (f" (to add a new key use {append.group(1)})" if append else "")


def _options_of(hint: str) -> str:
    """'; expected one of: a, b' for a hint that names a group choice (group=<option>): the
    group's options as conf/ has them."""
    choice = re.search(r"(\w+)=<option>", hint)
    if not choice:
        return ""
    from attnlab.config.location import conf_dir

    options = sorted(p.stem for p in (conf_dir() / choice.group(1)).glob("*.yaml"))
    return f"; expected one of: {', '.join(options)}" if options else ""


def _closest(name: str, known: list[str], parent, override) -> list[str]:
    """The known key a mistyped `name` most likely meant, by what the override goes on to say:
    `modle=small` means the group with an option `small` (model, not module), and
    `modul._target_=x` a node that has a `_target_` (module, not model); else difflib's."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if override is None or len(close) < 2:
        return close[:1]
    key, _, value = override.group(1).partition("=")
    rest = key.split(".")[key.split(".").index(name) + 1 :] if name in key.split(".") else []
    if rest:
        fits = [k for k in close if OmegaConf.is_dict(parent.get(k)) and rest[0] in parent[k]]
    else:
        from attnlab.config.location import conf_dir

        fits = [k for k in close if (conf_dir() / k / f"{value}.yaml").is_file()]
    return (fits or close)[:1]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("Config search path", "provider="))]
    return "; ".join(lines)
