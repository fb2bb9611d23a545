"""Studies: a fair ablation as one sweep file (issue 63).

A study is a grid sweep file with three more blocks. `parameters` are the arms (the scientific
hyperparameters); `tune` names one nuisance hyperparameter, tuned for each arm on validation
before the arms are compared (the Deep Learning Tuning Playbook's rule); `seeds` are the seeds
run at each arm's chosen value; `primary` is the confirmatory comparison, named before any run:

    parameters:
      model.n_heads: {values: [1, 8]}
    tune:
      key: scheduler.peak_lr
      values: [4.0e-3, 8.0e-3, 1.6e-2]
      seeds: [1]              # the tuning seeds: the mean over them decides
      metric: val/nll_best    # a validation metric; its direction from `goal` or the name
      refine: true            # then the midpoints beside the best
      scale: log              # log (geometric steps) or linear; default: what the grid is
      extend: 2               # a best at the grid's edge: up to 2 more points beyond it
      stop_stalled: 2         # optional: a trial above its initial loss at validation 2 stops
    seeds: [1, 2, 3, 4, 5]
    primary: {metric: test/bleu, baseline: {model.n_heads: 8}, test: welch}

Stage 1 runs every arm at every value with each tuning seed; while an arm's best is at an edge
of its points, the next point beyond that edge (the grid's own step, up to `extend` on each side)
is added; then, with `refine`, the midpoints between the best and its neighbours. The choice per
arm is written to <out>/choice.json (and choice.md) before stage 2 runs the seeds at it. The
rules are pure functions here (plan_points, choose); attnlab.cli.sweep runs the stages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attnlab.sweeps.choice import Choice
from attnlab.sweeps.evaluate import Evaluate, check_primary, load_evaluate
from attnlab.sweeps.spec import SweepError, swept_keys

TESTS = ("welch", "paired")
# Metrics where larger is better (the rest: smaller), by the last part of their name.
_LARGER = ("bleu", "chrf", "accuracy", "exact_match", "acc")
STUDY_KEYS = ("tune", "seeds", "primary")


@dataclass(frozen=True)
class Tune:
    key: str
    values: tuple
    seeds: tuple[int, ...] = (1,)
    metric: str = "val/nll_best"
    goal: str = "minimize"
    refine: bool = False
    extend: int = 0
    scale: str = ""  # "log" or "linear"; "" for a categorical key
    stop_stalled: int | None = None  # stop a trial still above its initial loss at validation N

    @property
    def numeric(self) -> bool:
        return all(_is_number(v) for v in self.values)

    @property
    def geometric(self) -> bool:
        return self.scale == "log"


def grid_scale(values: Sequence[float]) -> str:
    """A numeric grid's scale when the file does not say: log when every value is positive and
    its successive ratios are more even than its successive differences (1e-3, 2e-3, 4e-3),
    else linear (100, 200, 300, 400; or any grid holding 0 or a negative value)."""
    v = sorted(values)
    if len(v) < 2 or v[0] <= 0:
        return "linear"
    if len(v) == 2:
        return "log"

    def spread(xs: list[float]) -> float:
        return (max(xs) - min(xs)) / max(xs)

    ratios = [b / a for a, b in zip(v, v[1:], strict=False)]
    diffs = [b - a for a, b in zip(v, v[1:], strict=False)]
    return "log" if spread(ratios) <= spread(diffs) else "linear"


@dataclass(frozen=True)
class Primary:
    metric: str
    baseline: dict
    test: str = "welch"
    margin: float | None = None


@dataclass(frozen=True)
class Study:
    tune: Tune
    seeds: tuple[int, ...]
    primary: Primary
    evaluate: Evaluate | None = None  # attnlab-eval after each stage-2 trial


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def goal_of(metric: str, goal: str | None = None) -> str:
    """`goal` if given (minimize or maximize), else from the metric's name: BLEU, chrF,
    accuracy and exact match are maximized, losses, perplexities and NLLs minimized."""
    if goal is not None:
        return goal
    last = metric.rsplit("/", 1)[-1].lower()  # token_acc, greedy_token_acc, bleu, ...
    return "maximize" if any(w in last for w in _LARGER) else "minimize"


def load_study(config: Mapping, source: str) -> Study | None:
    """The study of a (loaded) sweep file, None when it has no `tune` block; SweepError (one
    line naming the key) for a bad block."""
    present = [k for k in STUDY_KEYS if k in config]
    if not present:
        if "evaluate" in config:
            raise SweepError(f"{source}: evaluate is a study's block; a study also needs "
                             f"{', '.join(STUDY_KEYS)}")  # fmt: skip
        return None
    missing = [k for k in STUDY_KEYS if k not in config]
    if missing:
        raise SweepError(
            f"{source}: a study needs {', '.join(STUDY_KEYS)}; "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
        )
    if config.get("method") != "grid":
        raise SweepError(f"{source}: a study's arms are a grid: method must be 'grid'")
    tune = _tune(config["tune"], config, source)
    seeds = _seeds(config["seeds"], f"{source}: seeds")
    primary = _primary(config["primary"], config, source)
    evaluate = load_evaluate(config.get("evaluate"), source)
    check_primary(primary.metric, evaluate, source)
    return Study(tune=tune, seeds=seeds, primary=primary, evaluate=evaluate)


def _tune(block: Any, config: Mapping, source: str) -> Tune:
    where = f"{source}: tune"
    if not isinstance(block, dict):
        raise SweepError(f"{where} must be a mapping with key, values, seeds, metric")
    known = (
        "key",
        "values",
        "seeds",
        "metric",
        "goal",
        "refine",
        "extend",
        "scale",
        "stop_stalled",
    )
    for k in block:
        if k not in known:
            raise SweepError(f"{where}.{k} is not a key of tune; expected: {', '.join(known)}")
    key = block.get("key")
    if not isinstance(key, str) or not key:
        raise SweepError(f"{where}.key must name the tuned key, e.g. scheduler.peak_lr")
    if key in config["parameters"]:
        raise SweepError(
            f"{where}.key={key} is also an arm key (parameters.{key}): the tuned key is tuned "
            "within each arm, not swept across arms"
        )
    if key == "seed":
        raise SweepError(f"{where}.key=seed: seeds are `tune.seeds` and `seeds`, not tuned")
    values = block.get("values")
    if not isinstance(values, list) or not values:
        raise SweepError(f"{where}.values must be a non-empty list")
    if len(set(map(repr, values))) != len(values):
        raise SweepError(f"{where}.values has a value twice: {values}")
    numeric = all(_is_number(v) for v in values)
    refine, extend = block.get("refine", False), block.get("extend", 0)
    if not isinstance(refine, bool):
        raise SweepError(f"{where}.refine={refine!r} must be true or false")
    _count(extend, 0, f"{where}.extend", "a whole number >= 0")
    if not numeric and (refine or extend):
        bad = "refine" if refine else "extend"
        raise SweepError(
            f"{where}.{bad} needs numbers in tune.values (got {values}): a categorical key is "
            "tuned over its values only (YAML reads 1e-3 as a string; write 1.0e-3)"
        )
    if (refine or extend) and len(values) < 2:
        raise SweepError(f"{where}.values needs 2 values or more to refine or extend")
    metric = _tune_metric(block.get("metric", "val/nll_best"), where)
    goal = block.get("goal")
    if goal is not None and goal not in ("minimize", "maximize"):
        raise SweepError(f"{where}.goal={goal!r}; expected minimize or maximize")
    seeds = _seeds(block.get("seeds", [1]), f"{where}.seeds")
    ordered = tuple(sorted(values)) if numeric else tuple(values)
    scale = _scale(block, values, numeric, where)
    stall = block.get("stop_stalled")
    if stall is not None:
        _count(stall, 1, f"{where}.stop_stalled", "a validation count >= 1 (or null: off)")
    return Tune(key, ordered, seeds, metric, goal_of(metric, goal), refine, extend, scale, stall)


def _tune_metric(metric: Any, where: str) -> str:
    """tune.metric, a validation metric (a test metric must not choose: it would select on the
    test set)."""
    if not isinstance(metric, str) or not metric:
        raise SweepError(f"{where}.metric must be a metric name such as val/nll_best")
    if not metric.startswith("val/"):
        raise SweepError(
            f"{where}.metric={metric}: only validation metrics (val/...) choose a tuned value; "
            "a test metric must not (it would select on the test set)"
        )
    return metric


def _count(value: Any, least: int, where: str, expected: str) -> None:
    """SweepError unless `value` is a whole number >= `least`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise SweepError(f"{where}={value!r} must be {expected}")


def _scale(block: Mapping, values: list, numeric: bool, where: str) -> str:
    """tune.scale, checked (default: the grid's own, grid_scale); and the values' folder names
    distinct."""
    scale = block.get("scale", grid_scale(values) if numeric else "")
    if numeric and scale not in ("log", "linear"):
        raise SweepError(f"{where}.scale={scale!r}; expected log or linear")
    if not numeric and "scale" in block:
        raise SweepError(f"{where}.scale needs numbers in tune.values (got {values})")
    if scale == "log" and min(values) <= 0:
        raise SweepError(f"{where}.scale=log needs positive values (got {values})")
    labels = [value_label(v) for v in values]
    if len(set(labels)) != len(labels):
        raise SweepError(f"{where}.values has two values with one folder name: {labels}")
    return scale


def value_label(value: Any) -> str:
    """A tuned value as it names a trial's folder (6 significant digits; text made safe)."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return re.sub(r"[^\w.+-]", "_", str(value))


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    ok = (
        isinstance(value, list)
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) for s in value)
    )
    if not ok or len(set(value)) != len(value):
        raise SweepError(f"{where} must be a non-empty list of distinct integers, e.g. [1, 2, 3]")
    return tuple(value)


def _primary(block: Any, config: Mapping, source: str) -> Primary:
    where = f"{source}: primary"
    if not isinstance(block, dict):
        raise SweepError(f"{where} must be a mapping with metric, baseline, test")
    known = ("metric", "baseline", "test", "margin")
    for k in block:
        if k not in known:
            raise SweepError(f"{where}.{k} is not a key of primary; expected: {', '.join(known)}")
    metric = block.get("metric")
    if not isinstance(metric, str) or "/" not in metric:
        raise SweepError(f"{where}.metric must be a metric name such as test/bleu")
    test = block.get("test", "welch")
    if test not in TESTS:
        raise SweepError(f"{where}.test={test!r}; expected one of: {', '.join(TESTS)}")
    params = config["parameters"]
    baseline = block.get("baseline")
    if not isinstance(baseline, dict) or not baseline:
        raise SweepError(f"{where}.baseline must name an arm, e.g. {{model.n_heads: 8}}")
    for key, value in baseline.items():
        if key not in params:
            raise SweepError(
                f"{where}.baseline.{key} is not an arm key; the arm keys: {', '.join(params)}"
            )
        spec = params[key]
        values = spec.get("values", [spec.get("value")])
        if value not in values:
            raise SweepError(
                f"{where}.baseline.{key}={value!r} is not an arm; parameters.{key} has {values}"
            )
    margin = block.get("margin")
    if margin is not None and not (_is_number(margin) and margin > 0):
        raise SweepError(f"{where}.margin={margin!r} must be a number > 0 (the equivalence margin)")
    return Primary(metric, dict(baseline), test, margin)


def check_arms(config: Mapping, source: str) -> None:
    """A study's parameters hold the arms only: its seeds are `seeds` and `tune.seeds`."""
    if "seed" in config["parameters"]:
        raise SweepError(
            f"{source}: parameters.seed: a study's seeds are `tune.seeds` (stage 1) and `seeds` "
            "(stage 2), not an arm key"
        )


# ---- the rules: which points stage 1 adds, and which one it chooses ----------------------------


def _beyond(tune: Tune, side: str, k: int) -> float:
    """The k-th point beyond the grid's low or high edge, at the grid's own step there."""
    v = tune.values
    if tune.geometric:
        step = v[1] / v[0] if side == "low" else v[-1] / v[-2]
        return _whole(tune, v[0] / step**k if side == "low" else v[-1] * step**k)
    step = v[1] - v[0] if side == "low" else v[-1] - v[-2]
    return _whole(tune, v[0] - k * step if side == "low" else v[-1] + k * step)


def _between(tune: Tune, a: float, b: float) -> float:
    mid = math.sqrt(a * b) if tune.geometric else (a + b) / 2
    return _whole(tune, mid)


def _integer(tune: Tune) -> bool:
    return all(isinstance(v, int) for v in tune.values)


def _whole(tune: Tune, x: float):
    """A new point as it is run: an integer grid's (warmup steps, a batch size) rounded to an
    integer, a float's to 4 significant digits (a rate of 2.828e-3, not 2.8284271247e-3)."""
    return round(x) if _integer(tune) else float(f"{x:.4g}")


def _allowed(tune: Tune, x: float) -> bool:
    """A point beyond the grid keeps its sign: a log grid's stays positive (an integer one's
    >= 1: layers 1, 2, 4 halved are 0.5, run as 0); a linear grid of values >= 0 (warmup steps,
    dropout) is not extended below 0."""
    if tune.geometric:
        return x >= 1 if _integer(tune) else x > 0
    return min(tune.values) < 0 or x >= 0


def _side(tune: Tune, side: str) -> list:
    """The points `extend` may add beyond the grid's low or high edge, in the order they run;
    they stop where one would leave the grid's sign (_allowed) or, rounded, repeat the point
    before it (an integer grid: 3 / 1.5 and 3 / 2.25 are both run as 1)."""
    points = [tune.values[0] if side == "low" else tune.values[-1]]
    for k in range(1, tune.extend + 1):
        x = _beyond(tune, side, k)
        if not _allowed(tune, x) or _key(x) == _key(points[-1]):
            break
        points.append(x)
    return points[1:]


def _key(x: float) -> float:
    """A value as points are compared (12 significant digits: 8e-3 * 2 and 1.6e-2 are one)."""
    return x if isinstance(x, int) else float(f"{x:.12g}")


def _best(points: Sequence, scores: Mapping, goal: str):
    """The best point by its score (None: no score, it cannot win); ties: the first of
    `points` (the lowest value of a numeric grid, the file's first of a categorical one)."""
    scored = [p for p in points if scores.get(_key(p) if _is_number(p) else p) is not None]
    if not scored:
        return None
    sign = 1 if goal == "minimize" else -1
    order = {repr(p): i for i, p in enumerate(points)}
    return min(
        scored, key=lambda p: (sign * scores[_key(p) if _is_number(p) else p], order[repr(p)])
    )


def plan_points(tune: Tune, scores: Mapping) -> list:
    """The points stage 1 should run next for one arm, given the scores of the points it ran
    (value -> the mean of the tuning metric over the tuning seeds; None for a point that cannot
    win: diverged, failed or no metric). [] when the arm's search is done.

    The grid first; then, while the best of the points so far is at an edge and fewer than
    `extend` points lie beyond that edge, the next one beyond it; then, with `refine`, the
    midpoints between the best and each of its neighbours among those points."""
    grid = list(tune.values)
    todo = [v for v in grid if (_key(v) if tune.numeric else v) not in scores]
    if todo:
        return todo
    if not tune.numeric:
        return []
    coarse = sorted(grid + _extensions(tune, scores))
    best = _best(coarse, scores, tune.goal)
    if best is None:
        return []
    for side, edge in (("low", coarse[0]), ("high", coarse[-1])):
        beyond = _side(tune, side)
        used = sum(_key(p) in scores for p in beyond)
        if best == edge and used < len(beyond):
            return [beyond[used]]
    if not tune.refine:
        return []
    i = coarse.index(best)
    mids = [_between(tune, best, coarse[j]) for j in (i - 1, i + 1) if 0 <= j < len(coarse)]
    return list(dict.fromkeys(m for m in mids if _key(m) not in scores))  # rounded onto a run one


def extension_points(tune: Tune) -> list:
    """Every point `extend` can add beyond either edge (the dry run checks their configs)."""
    return [p for side in ("low", "high") for p in _side(tune, side)] if tune.numeric else []


def _extensions(tune: Tune, scores: Mapping) -> list[float]:
    return [p for p in extension_points(tune) if _key(p) in scores]


def choose(tune: Tune, arm: Mapping, points: Mapping) -> Choice:
    """The arm's choice from its stage-1 points: value -> {"score", "values", "statuses"}."""
    keyed = {k: p["score"] for k, p in points.items()}
    values = sorted(points) if tune.numeric else [v for v in tune.values if v in points]
    choice = Choice(dict(arm), tune.key, tune.metric, tune.goal)
    choice.points = [{"value": v, **points[v]} for v in values]
    best = _best(values, keyed, tune.goal)
    choice.chosen = best
    if tune.numeric:
        grid = {_key(v) for v in tune.values}
        coarse = {_key(v) for v in [*tune.values, *_extensions(tune, keyed)]}
        choice.extended = len(coarse - grid)
        choice.refined = any(_key(v) not in coarse for v in values)
    if best is None:
        return choice
    i = values.index(best)
    sign = 1 if tune.goal == "minimize" else -1
    for j, name in ((i - 1, "margin_below"), (i + 1, "margin_above")):
        if 0 <= j < len(values) and keyed.get(values[j]) is not None:
            setattr(choice, name, sign * (keyed[values[j]] - keyed[best]))
    choice.at_edge = tune.numeric and best in (values[0], values[-1])
    return choice


def score(values: Sequence[float | None]) -> float | None:
    """A point's score: the mean over its tuning seeds; None when any seed has no value (it
    diverged, failed or logged no such metric: the point cannot win)."""
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return None
    return sum(values) / len(values)


def arm_grid(config: Mapping) -> list[dict]:
    """The arms: the grid of `parameters` (first key slowest)."""
    import itertools

    params = config["parameters"]
    axes = [spec["values"] if "values" in spec else [spec["value"]] for spec in params.values()]
    return [dict(zip(params, combo, strict=True)) for combo in itertools.product(*axes)]


def arm_keys(config: Mapping) -> list[str]:
    return swept_keys(config) or list(config["parameters"])
