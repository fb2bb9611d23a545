"""W&B sweep files, read without a W&B server: validation, grid / random expansion, commands.

A sweep file is what `wandb sweep FILE` takes (https://docs.wandb.ai/models/sweeps/): `method`,
`metric`, `parameters`, and a `command` list whose macros W&B's agent fills in. This module does
what the W&B controller and agent do, locally: it turns the file into one `Trial` per run, and each
trial's argv, built the way `wandb agent` builds it (wandb/wandb_agent.py, `Agent._command_run`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from attnlab.runs.overrides import override_key

METHODS = ("grid", "random", "bayes")
# W&B's bounded distributions (https://docs.wandb.ai/models/sweeps/sweep-config-keys); its
# unbounded ones (normal, log_normal, beta and their q_ forms) are refused, see UNBOUNDED.
DISTRIBUTIONS = (
    "constant",
    "categorical",
    "int_uniform",
    "uniform",
    "q_uniform",
    "log_uniform",
    "q_log_uniform",
    "log_uniform_values",
    "q_log_uniform_values",
    "inv_log_uniform",
    "inv_log_uniform_values",
)
UNBOUNDED = ("normal", "q_normal", "log_normal", "q_log_normal", "beta", "q_beta")
# min and max are the values themselves (else exponents: log_uniform, q_log_uniform, inv_...)
_POSITIVE = ("log_uniform_values", "q_log_uniform_values", "inv_log_uniform_values")
# W&B's keys (https://docs.wandb.ai/models/sweeps/sweep-config-keys), then attnlab's: `baseline`
# (attnlab-compare's), `arms` (a search's studies), `tune`, `seeds`, `primary` (a study's:
# attnlab.sweeps.tuning).
TOP_LEVEL_KEYS = ("program", "entity", "project", "description", "name", "method", "metric",
                  "parameters", "early_terminate", "command", "run_cap", "job",
                  "baseline", "arms", "tune", "seeds", "primary", "evaluate")  # fmt: skip
DEFAULT_COMMAND = ["${env}", "${interpreter}", "${program}", "${args}"]
_ENVVAR_MACRO = re.compile(r"\$\{envvar:([A-Z0-9_]*)\}")
_SAFE_VALUE = re.compile(r"^[\w./+:-]+$")


@dataclass
class Trial:
    """One run of a sweep.

    params: parameter name -> value, as W&B's agent passes them (`command["args"]`).
    overrides: the Hydra overrides the trial passes to the program, in argv order: the command's
        fixed `key=value` tokens, the parameters, `group=<sweep name>` (unless set), extra overrides
        and, when the sweep has an output directory, `hydra.run.dir=<run_dir>`.
    command: the full argv, every macro expanded.
    name: a file-system-safe slug of the swept parameters, e.g. `n_heads_8-seed_1`.
    run_dir: `<out>/<NNN>-<name>`, or None when expanded without an output directory.
    """

    index: int
    params: dict[str, Any]
    overrides: list[str]
    command: list[str]
    name: str
    run_dir: Path | None = None
    folder: str | None = None  # the run directory's name, when not <NNN>-<name> (a search's)

    @property
    def label(self) -> str:
        return self.folder or f"{self.index:03d}-{self.name}"


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's several-line message as one line: what it expected, and where."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    brace = "'{'" in problem  # a ${macro} in a flow list: [${program}, ...]
    hint = "; a ${macro} inside [...] needs quotes, or one item per line" if brace else ""
    return f"{problem}{where}{hint}"


class SweepError(ValueError):
    """A sweep file that cannot be run; the message names the offending key."""


def load_sweep(path_or_dict: str | os.PathLike | Mapping) -> dict:
    """Read a sweep file (YAML) or take a dict; validate it and return a plain dict."""
    if isinstance(path_or_dict, Mapping):
        config = dict(path_or_dict)
        source = "<dict>"
    else:
        source = str(path_or_dict)
        try:
            config = yaml.safe_load(Path(path_or_dict).read_text())
        except FileNotFoundError:
            raise SweepError(f"sweep file not found: {source}") from None
        except yaml.YAMLError as err:
            raise SweepError(f"{source}: not valid YAML: {_yaml_problem(err)}") from None
    if not isinstance(config, dict):
        raise SweepError(f"{source}: a sweep file must be a mapping with 'method' and 'parameters'")
    method = config.get("method")
    if method not in METHODS:
        raise SweepError(f"{source}: method={method!r}; expected one of: {', '.join(METHODS)}")
    params = config.get("parameters")
    if "parameters" not in config:
        import difflib

        close = difflib.get_close_matches("parameters", [str(k) for k in config], n=1)
        hint = f"; did you mean 'parameters' for the key {close[0]!r}?" if close else ""
        raise SweepError(f"{source}: 'parameters' is missing{hint}")
    if not isinstance(params, dict) or not params:
        raise SweepError(f"{source}: 'parameters' must be a non-empty mapping")
    unknown = [str(k) for k in config if k not in TOP_LEVEL_KEYS]
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], TOP_LEVEL_KEYS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SweepError(
            f"{source}: key {unknown[0]!r} is not a sweep key{hint}; "
            f"expected one of: {', '.join(TOP_LEVEL_KEYS)}"
        )
    for key, spec in params.items():
        _check_parameter(source, key, spec, method)
    command = config.get("command", DEFAULT_COMMAND)
    if not isinstance(command, list) or not command:
        raise SweepError(f"{source}: 'command' must be a non-empty list of strings")
    if "${program}" in command and not config.get("program"):
        raise SweepError(f"{source}: 'command' uses ${{program}} but 'program' is not set")
    return config


def sweep_name(config: Mapping, path: str | os.PathLike | None = None) -> str:
    """The sweep's `name`, else the file's stem, else 'sweep'."""
    return str(config.get("name") or (Path(path).stem if path else "sweep"))


def _check_parameter(source: str, key: str, spec: Any, method: str) -> None:
    where = f"{source}: parameters.{key}"
    if not isinstance(spec, dict):
        raise SweepError(f"{where} must be a mapping such as {{values: [...]}} or {{value: x}}")
    if "parameters" in spec:
        raise SweepError(f"{where}: nested parameters are not supported; use a dotted key")
    if "values" in spec:
        values = spec["values"]
        if not isinstance(values, list) or not values:
            raise SweepError(f"{where}.values must be a non-empty list")
        for v in values:
            _check_value(where, v)
        return
    if "value" in spec:
        _check_value(where, spec["value"])
        return
    if method == "grid":
        raise SweepError(f"{where}: method 'grid' needs 'values' or 'value'")
    distribution = _distribution(spec)
    if distribution in UNBOUNDED:
        raise SweepError(
            f"{where}.distribution={distribution!r} is unbounded (mu/sigma); a search here takes "
            f"a bounded one: {', '.join(DISTRIBUTIONS[2:])}"
        )
    if distribution not in DISTRIBUTIONS:
        raise SweepError(
            f"{where}.distribution={distribution!r} is not supported; "
            f"expected one of: {', '.join(DISTRIBUTIONS)}"
        )
    if "min" not in spec or "max" not in spec:
        raise SweepError(f"{where}: distribution {distribution!r} needs 'min' and 'max'")
    for key in ("min", "max", "q"):
        value = spec.get(key, 1)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise SweepError(  # YAML reads 1e-4 (no dot) as a string; 1.0e-4 is a number
                f"{where}.{key}={value!r} is not a number (write 1.0e-4, not 1e-4, in YAML)"
            )
    if not spec["min"] <= spec["max"]:
        raise SweepError(f"{where}: min={spec['min']} is larger than max={spec['max']}")
    if distribution.startswith("q_") and not spec.get("q", 1) > 0:
        raise SweepError(f"{where}.q={spec.get('q')!r} must be > 0")
    if distribution in _POSITIVE and spec["min"] <= 0:
        raise SweepError(f"{where}: distribution {distribution!r} needs min > 0")


def _check_value(where: str, value: Any) -> None:
    # W&B formats arguments with f"{key}={value}": None would reach Hydra as the string "None".
    if value is None:
        raise SweepError(
            f"{where}: null is passed by W&B as the string 'None'; write \"null\" (quoted) "
            "for a Hydra null, or leave the key out of the sweep"
        )


def _distribution(spec: Mapping) -> str:
    """W&B's inference when `distribution` is absent: ints -> int_uniform, else uniform."""
    if "distribution" in spec:
        return spec["distribution"]
    if "values" in spec:
        return "categorical"
    if "value" in spec:
        return "constant"
    lo, hi = spec.get("min"), spec.get("max")
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi))
    return "int_uniform" if ints else "uniform"


def sample(spec: Mapping, rng: random.Random) -> Any:
    """Draw one value of a parameter, as W&B's random search does."""
    distribution = _distribution(spec)
    if distribution == "constant":
        return spec["value"]
    if distribution == "categorical":
        weights = spec.get("probabilities")
        return rng.choices(spec["values"], weights=weights)[0]
    lo, hi, q = spec["min"], spec["max"], spec.get("q", 1)
    if distribution == "int_uniform":
        return rng.randint(int(lo), int(hi))
    if distribution == "uniform":
        return rng.uniform(lo, hi)
    if distribution == "q_uniform":
        return _quantize(rng.uniform(lo, hi), q)
    if distribution == "log_uniform":  # min and max are exponents: exp(U(min, max))
        return math.exp(rng.uniform(lo, hi))
    if distribution == "q_log_uniform":
        return _quantize(math.exp(rng.uniform(lo, hi)), q)
    if distribution in ("log_uniform_values", "inv_log_uniform_values"):  # the values themselves
        return math.exp(rng.uniform(math.log(lo), math.log(hi)))
    if distribution == "q_log_uniform_values":
        return _quantize(math.exp(rng.uniform(math.log(lo), math.log(hi))), q)
    if distribution == "inv_log_uniform":  # log(1/X) ~ U(min, max)
        return math.exp(-rng.uniform(lo, hi))
    raise SweepError(f"distribution {distribution!r} is not supported")


def _quantize(x: float, q: float) -> float | int:
    """W&B's q_ forms: round(x / q) * q, an int when q is one."""
    value = round(x / q) * q
    return int(value) if isinstance(q, int) else value


def expand_params(config: Mapping, count: int | None = None, seed: int = 0) -> list[dict]:
    """The parameter sets of a sweep: the cartesian product for `grid` (first parameter slowest;
    `count` takes whole rounds of seeds, see grid_count), `count` draws for `random`."""
    params = config["parameters"]
    if config["method"] == "grid":
        return grid_count(config, count)[0]
    if config["method"] != "random":
        raise SweepError(f"method {config['method']!r} is searched (attnlab.sweeps.search)")
    if count is None or count < 1:
        raise SweepError("method 'random' needs --count N (the number of trials, N >= 1)")
    rng = random.Random(seed)
    return [{key: sample(spec, rng) for key, spec in params.items()} for _ in range(count)]


def grid_count(config: Mapping, count: int | None) -> tuple[list[dict], str | None]:
    """A grid's trials for --count N, and the line that says what it took (None: all).

    The first N trials in grid order would be the first arm's seeds, one arm alone. With a swept
    `seed`, N takes whole rounds of seeds instead: seeds 1..k of every arm, k = N // arms, so
    that the arms stay comparable (fewer than one round: the first N arms' first seed)."""
    params = config["parameters"]
    axes = [spec["values"] if "values" in spec else [spec["value"]] for spec in params.values()]
    grid = [dict(zip(params, combo, strict=True)) for combo in itertools.product(*axes)]
    if count is None or count >= len(grid):
        return grid, None
    if count < 1:
        raise SweepError(f"--count {count} is not valid; expected a number of trials >= 1")
    seeds = list(params["seed"].get("values", [])) if "seed" in params else []
    if len(seeds) < 2:
        return grid[:count], f"--count {count}: the first {count} of {len(grid)} trials"
    arms = len(grid) // len(seeds)
    rounds = count // arms
    if rounds == 0:
        chosen = [t for t in grid if t["seed"] == seeds[0]][:count]
        return chosen, (
            f"--count {count}: seed {seeds[0]} of the first {count} of {arms} arms "
            f"({count} of {len(grid)} trials)"
        )
    kept = seeds[:rounds]
    chosen = [t for t in grid if t["seed"] in kept]
    return chosen, (
        f"--count {count}: seed{'s' * (rounds > 1)} {', '.join(map(str, kept))} of each of the "
        f"{arms} arms ({len(chosen)} of {len(grid)} trials; whole rounds of seeds keep the arms "
        "comparable)"
    )


def swept_keys(config: Mapping) -> list[str]:
    """Parameters that take more than one value (these name the trials)."""
    return [
        key
        for key, spec in config["parameters"].items()
        if "value" not in spec and not ("values" in spec and len(spec["values"]) == 1)
    ]


def trial_name(params: Mapping, keys: Sequence[str]) -> str:
    """`model.n_heads=8, seed=1` -> `n_heads_8-seed_1` (no `=`: Hydra's override grammar
    rejects it inside `hydra.run.dir=...`)."""
    parts = [f"{key.rsplit('.', 1)[-1]}_{_format_value(params[key])}" for key in keys]
    slug = re.sub(r"[^A-Za-z0-9_.+-]+", "_", "-".join(parts)) or "trial"
    return slug[:80]


def _format_value(value: Any) -> str:
    return f"{value}"  # exactly W&B's formatting of arguments


def command_vars(params: Mapping, program: str | None, args_json_file: str) -> dict[str, list]:
    """The macro table of W&B's agent (wandb.sdk.launch.sweeps.utils.create_sweep_command_args),
    with `${interpreter}` bound to this Python (W&B uses "python") so a trial runs in the same
    environment as attnlab-sweep."""
    flags = [f"{key}={_format_value(value)}" for key, value in params.items()]
    return {
        "env": ["/usr/bin/env"] if sys.platform != "win32" else [],
        "interpreter": [sys.executable],
        "program": [program] if program else [],
        "args": ["--" + f for f in flags],
        "args_no_hyphens": flags,
        "args_no_equals": [x for k, v in params.items() for x in (f"--{k}", _format_value(v))],
        "args_no_boolean_flags": [
            f"--{k}" if isinstance(v, bool) else f"--{k}={_format_value(v)}"
            for k, v in params.items()
            if not (isinstance(v, bool) and not v)
        ],
        "args_json": [json.dumps(dict(params))],
        "args_json_file": [args_json_file],
        "args_append_hydra": ["+" + f for f in flags],
        "args_override_hydra": ["++" + f for f in flags],
    }


def expand_command(command: Sequence, variables: Mapping[str, list]) -> list[str]:
    """Replace `${envvar:NAME}` inside tokens and whole-token `${macro}`s, as `wandb agent` does
    (an unknown macro expands to nothing)."""
    argv: list[str] = []
    for token in command:
        token = _ENVVAR_MACRO.sub(lambda m: os.environ.get(m.group(1), m.group(1)), str(token))
        if token.startswith("${") and token.endswith("}"):
            argv += [str(x) for x in variables.get(token[2:-1], [])]
        else:
            argv.append(token)
    return argv


def hydra_quote(value: str) -> str:
    """Quote a string for Hydra's override grammar when it holds characters it would parse."""
    if _SAFE_VALUE.match(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def expand_sweep(
    path_or_dict: str | os.PathLike | Mapping,
    extra_overrides: Sequence[str] = (),
    out_dir: str | os.PathLike | None = None,
    count: int | None = None,
    seed: int = 0,
) -> list[Trial]:
    """Every trial of a sweep file, with the argv `attnlab-sweep` (or `wandb agent`) would run.

    Each trial gets `group=<sweep name>` unless the file sets `group`, then `extra_overrides`,
    then, with `out_dir`, `hydra.run.dir=<out_dir>/<NNN>-<name>` in place of any run dir the
    file or the extra overrides set.
    """
    config = load_sweep(path_or_dict)
    path = None if isinstance(path_or_dict, Mapping) else path_or_dict
    name = sweep_name(config, path)
    keys = swept_keys(config) or list(config["parameters"])
    params_list = expand_params(config, count=count, seed=seed)
    return [
        make_trial(config, params, index, name, keys, extra_overrides, out_dir)
        for index, params in enumerate(params_list)
    ]


def make_trial(
    config: Mapping,
    params: Mapping[str, Any],
    index: int,
    sweep: str,
    keys: Sequence[str],
    extra_overrides: Sequence[str] = (),
    out_dir: str | os.PathLike | None = None,
    label: str | None = None,
) -> Trial:
    """One trial of a (loaded) sweep: its argv as `wandb agent` builds it from `params`, with
    `group=<sweep>` unless set, the extra overrides and, with `out_dir`, its run directory
    `<out_dir>/<label>` (default label `<NNN>-<name>`), the name the sweep's summary gives it."""
    trial = Trial(index=index, params=dict(params), overrides=[], command=[], name="")
    trial.name = trial_name(params, keys)
    trial.folder = label
    if out_dir is not None:
        trial.run_dir = Path(out_dir) / trial.label
    args_json_file = str(trial.run_dir / "args.json") if trial.run_dir else "args.json"
    command = list(config.get("command", DEFAULT_COMMAND))
    argv = expand_command(command, command_vars(params, config.get("program"), args_json_file))
    set_keys = {override_key(t) for t in argv} | {override_key(t) for t in extra_overrides}
    if "group" not in set_keys:
        argv.append(f"group={sweep}")
    argv += list(extra_overrides)
    if trial.run_dir is not None:  # the trial's directory replaces the file's run dir
        argv = [t for t in argv if override_key(t) != "hydra.run.dir"]
        argv.append(f"hydra.run.dir={hydra_quote(str(trial.run_dir))}")
    trial.command = argv
    trial.overrides = [t for t in argv if override_key(t) is not None]
    return trial
