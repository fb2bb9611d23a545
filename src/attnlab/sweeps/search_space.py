"""A W&B sweep file's search, as Optuna takes it: its distributions, its metric, its Hyperband.

Pure functions of the (loaded) sweep file; attnlab.sweeps.search runs the study. Each W&B form
(https://docs.wandb.ai/models/sweeps/sweep-config-keys; wandb/sweeps `params.py`) becomes the
Optuna distribution that draws the same law:

    values / categorical         CategoricalDistribution
    int_uniform                  IntDistribution(min, max)
    uniform                      FloatDistribution(min, max)
    log_uniform_values           FloatDistribution(min, max, log=True)
    log_uniform                  FloatDistribution(e^min, e^max, log=True)   (min, max: exponents)
    inv_log_uniform_values       FloatDistribution(min, max, log=True)       (X itself log-uniform)
    inv_log_uniform              FloatDistribution(e^-max, e^-min, log=True)
    q_uniform, q_log_uniform(_values)   the unquantized form, and the value passed to the run
                                 rounded as W&B does, round(x / q) * q (Optuna has no log + step)

W&B's Hyperband (wandb/sweeps `hyperband_stopping.py`) counts a run's logged values of the metric:
a band b judges the run's (b+1)-th value, and a run below the top 1/eta of those that reached the
band stops. attnlab logs the metric once per validation, so a trial reports its i-th validation
(from 0) as step i, and Optuna's successive halving with `min_resource = bands[0]` and
`reduction_factor = eta` prunes at steps bands[0] * eta^k, where W&B's bands are (min_iter form)
exactly those, or (max_iter form) int(max_iter / eta^i), close to them. It keeps the top
max(1, n // eta) of a rung (W&B: those ranked <= int(n / eta)); with `max_iter`, nothing is pruned
after the last band, as in W&B.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnlab.sweeps.spec import SweepError, _distribution

# Top-level keys a searched sweep file may have: W&B's, and attnlab's own `baseline` and `arms`.
SEARCH_KEYS = (
    "program",
    "command",
    "method",
    "metric",
    "parameters",
    "name",
    "description",
    "project",
    "entity",
    "early_terminate",
    "run_cap",
    "baseline",
    "arms",
)
HYPERBAND_KEYS = ("type", "min_iter", "max_iter", "s", "eta", "strict")
METRIC_KEYS = ("name", "goal", "target")
GOALS = {"minimize": "minimize", "maximize": "maximize"}


@dataclass(frozen=True)
class Pruning:
    """Successive halving as W&B's hyperband asks for it: rungs at step min_resource * eta^k;
    `last_step`: no pruning after it (None: to the end)."""

    min_resource: int
    reduction_factor: int
    last_step: int | None
    bands: tuple[int, ...]


def check_search(config: Mapping, source: str) -> None:
    """A searched sweep file's own keys (the parameters are checked by spec.load_sweep); a
    SweepError naming the first bad one."""
    for key in config:
        if key not in SEARCH_KEYS:
            raise SweepError(
                f"{source}: key {key!r} is not a sweep key; "
                f"expected one of: {', '.join(SEARCH_KEYS)}"
            )
    metric = config.get("metric")
    if not isinstance(metric, Mapping) or not metric.get("name"):
        raise SweepError(
            f"{source}: method {config['method']!r} needs metric: {{name: ..., goal: ...}}"
        )
    for key in metric:
        if key not in METRIC_KEYS:
            raise SweepError(
                f"{source}: metric.{key} is not a metric key; expected one of: "
                f"{', '.join(METRIC_KEYS)}"
            )
    target = metric.get("target")
    if target is not None and (not isinstance(target, (int, float)) or isinstance(target, bool)):
        raise SweepError(f"{source}: metric.target={target!r} is not a number")
    if metric.get("goal", "minimize") not in GOALS:
        raise SweepError(f"{source}: metric.goal={metric['goal']!r}; expected minimize or maximize")
    cap = config.get("run_cap")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise SweepError(f"{source}: run_cap={cap!r} must be an integer >= 1")
    pruning(config, source)
    arm_keys(config, source)


def direction(config: Mapping) -> str:
    return GOALS[(config.get("metric") or {}).get("goal", "minimize")]


def _int(value: Any, where: str, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise SweepError(f"{where}={value!r} must be an integer >= {least}")
    return value


def pruning(config: Mapping, source: str = "<sweep>") -> Pruning | None:
    """The file's `early_terminate` as successive halving (None without one)."""
    spec = config.get("early_terminate")
    if spec is None:
        return None
    where = f"{source}: early_terminate"
    if not isinstance(spec, Mapping) or spec.get("type") != "hyperband":
        raise SweepError(f"{where}.type must be 'hyperband' (W&B's only early_terminate type)")
    for key in spec:
        if key not in HYPERBAND_KEYS:
            raise SweepError(
                f"{where}.{key} is not a hyperband key; expected one of: "
                f"{', '.join(HYPERBAND_KEYS)}"
            )
    eta = _int(spec.get("eta", 3), f"{where}.eta", 2)
    if "max_iter" in spec:
        max_iter = _int(spec["max_iter"], f"{where}.max_iter", 1)
        s = _int(spec.get("s", 0), f"{where}.s", 1)
        bands, band = [], float(max_iter)
        for _ in range(s):
            band /= eta
            if band < 1:
                break
            bands.append(int(band))
        if not bands:
            raise SweepError(f"{where}: max_iter={max_iter} / eta={eta} leaves no band >= 1")
        bands.sort()
        return Pruning(bands[0], eta, bands[-1], tuple(bands))
    if "min_iter" in spec:
        min_iter = _int(spec["min_iter"], f"{where}.min_iter", 1)
        return Pruning(min_iter, eta, None, tuple(min_iter * eta**k for k in range(4)))
    raise SweepError(f"{where} needs min_iter, or max_iter and s")


def arm_keys(config: Mapping, source: str = "<sweep>") -> list[str]:
    """`arms: [key, ...]`: parameters with `values` whose every combination is its own study
    (tuning inside each arm of an ablation); [] without."""
    keys = config.get("arms") or []
    if not isinstance(keys, list):
        raise SweepError(f"{source}: arms must be a list of parameter names")
    params = config["parameters"]
    for key in keys:
        if key not in params or "values" not in params[key]:
            choices = [k for k, v in params.items() if "values" in v]
            raise SweepError(
                f"{source}: arms names {key!r}, which is not a parameter with "
                f"values; expected one of: {', '.join(choices) or '(none)'}"
            )
    return list(keys)


def arms(config: Mapping) -> list[dict]:
    """Each arm's values ([{}]: one study), in grid order."""
    keys = arm_keys(config)
    axes = [config["parameters"][k]["values"] for k in keys]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes)]


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def distributions(config: Mapping, arm: Mapping = ()) -> tuple[dict, dict]:
    """(the searched parameters as Optuna distributions, the fixed ones as values); the arm's
    keys are fixed to its values."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    searched, fixed = {}, {}
    for key, spec in config["parameters"].items():
        if key in arm:
            fixed[key] = arm[key]
            continue
        form = _distribution(spec)
        if form == "constant":
            fixed[key] = spec["value"]
        elif form == "categorical" and len(spec["values"]) == 1:
            fixed[key] = spec["values"][0]
        elif form == "categorical" and "probabilities" in spec:
            raise SweepError(
                f"parameters.{key}.probabilities: a search draws values without weights "
                "(Optuna's categorical); list a value twice to weight it, or use method: random "
                "without run_cap, early_terminate or --storage (its draws are made up front)"
            )
        elif form == "categorical":
            if not all(_plain(v) for v in spec["values"]):
                raise SweepError(
                    f"parameters.{key}.values: a search takes numbers, strings and "
                    "booleans (Optuna's categorical choices), not lists or mappings"
                )
            searched[key] = CategoricalDistribution(spec["values"])
        elif form == "int_uniform":
            searched[key] = IntDistribution(int(spec["min"]), int(spec["max"]))
        else:
            lo, hi = _float_bounds(form, spec["min"], spec["max"])
            searched[key] = FloatDistribution(lo, hi, log="log" in form)
    return searched, fixed


CHECKED_INTEGERS = 32  # an integer range this long or shorter is checked value by value
CHECKED_COMBINATIONS = 64  # more combinations than this: each value checked in turn


def checked_values(distribution) -> list:
    """The values of one searched parameter the dry run checks: every categorical choice, every
    integer of a range up to CHECKED_INTEGERS long (else its bounds), a float range's bounds."""
    choices = getattr(distribution, "choices", None)
    if choices is not None:
        return list(choices)
    low, high = distribution.low, distribution.high
    if isinstance(low, int) and isinstance(high, int):
        step = getattr(distribution, "step", 1) or 1
        values = list(range(low, high + 1, step))
        return values if len(values) <= CHECKED_INTEGERS else [low, high]
    return [low, high]


def check_points(searched: Mapping) -> list[dict]:
    """The searched values the dry run builds a run for: every combination of checked_values
    (so a value that is only invalid beside another is found), or, when there are more than
    CHECKED_COMBINATIONS, the first of each and then every other value in turn."""
    keys = list(searched)
    values = [checked_values(searched[k]) for k in keys]
    if math.prod(len(v) for v in values) <= CHECKED_COMBINATIONS:
        return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]
    base = {k: v[0] for k, v in zip(keys, values, strict=True)}
    return [base] + [{**base, k: x} for k, v in zip(keys, values, strict=True) for x in v[1:]]


def _float_bounds(form: str, lo: float, hi: float) -> tuple[float, float]:
    if form in ("log_uniform", "q_log_uniform"):
        return math.exp(lo), math.exp(hi)
    if form == "inv_log_uniform":
        return math.exp(-hi), math.exp(-lo)
    return float(lo), float(hi)


def run_values(config: Mapping, params: Mapping[str, Any], fixed: Mapping[str, Any]) -> dict:
    """The values a trial passes to its run, in the file's parameter order: Optuna's draw,
    rounded for the q_ forms as W&B rounds (an int when q is one)."""
    values = {}
    for key, spec in config["parameters"].items():
        value = fixed[key] if key in fixed else params[key]
        form = _distribution(spec)
        if form.startswith("q_") and key not in fixed:
            q = spec.get("q", 1)
            value = round(value / q) * q
            value = int(value) if isinstance(q, int) else value
        values[key] = value
    return values


def space_fingerprint(config: Mapping) -> str:
    """What a study was created from (parameters, metric, early_terminate, arms): a resumed study
    must have the same."""
    keys = ("method", "parameters", "metric", "early_terminate", "arms")
    return json.dumps({k: config.get(k) for k in keys}, sort_keys=True, default=str)
