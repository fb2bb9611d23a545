"""A study's two stages, run here (attnlab-sweep STUDY --out DIR; rules: attnlab.sweeps.tuning).

    DIR/sweep.yaml          the study file as run (an edited file is refused for DIR once
                            DIR/choice.json exists)
    DIR/tune/<arm>-<key>_<value>-seed_<s>/    stage 1's trials, summary.json / .md
    DIR/choice.json, choice.md                each arm's points, scores and chosen value
    DIR/seeds/<arm>-seed_<s>/                 stage 2's trials, summary.json / .md, and a
                                              sweep.yaml that attnlab-compare reads (the arms,
                                              the seeds, the primary metric and baseline)

Trial folders are named by their values, not by a running number, so a rerun after a kill
finds every trial where it was: completed ones are kept, interrupted ones resume, and the same
results give the same choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from attnlab.runs.status import Status
from attnlab.sweeps.runner import TrialResult, run_trials
from attnlab.sweeps.spec import SweepError, Trial, make_trial, trial_name
from attnlab.sweeps.tuning import (
    Choice,
    Study,
    _key,
    arm_grid,
    arm_keys,
    choose,
    goal_of,
    plan_points,
    score,
)

# The keys of the study file whose edit after the choice changes what the folder means.
DEFINING = (
    "name",
    "method",
    "parameters",
    "command",
    "program",
    "tune",
    "seeds",
    "primary",
    "evaluate",
)


def refuse_edited_study(out: Path, config: dict) -> None:
    """SweepError when out/choice.json exists and the study file differs from out/sweep.yaml
    in a key that made the choice or defines the seeds."""
    if not (out / "choice.json").is_file() or not (out / "sweep.yaml").is_file():
        return
    held = yaml.safe_load((out / "sweep.yaml").read_text()) or {}
    differ = [k for k in DEFINING if held.get(k) != config.get(k)]
    if differ:
        raise SweepError(
            f"--out {out}: the study file changed after its choice was made (it differs in "
            f"{', '.join(differ)}); use a new --out for the edited study"
        )


def _value_label(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class StudyRun:
    """The trials of both stages of one study in one folder."""

    def __init__(self, config: dict, study: Study, out: Path, extra: Sequence[str] = ()):
        self.config, self.study, self.out, self.extra = config, study, out, list(extra)
        self.arms = arm_grid(config)
        self.keys = arm_keys(config)

    def arm_slug(self, arm: dict) -> str:
        return trial_name(arm, self.keys)

    def tune_trial(self, arm: dict, value, seed: int, index: int) -> Trial:
        tune = self.study.tune
        params = {**arm, tune.key: value, "seed": seed}
        short = tune.key.rsplit(".", 1)[-1]
        label = f"{self.arm_slug(arm)}-{short}_{_value_label(value)}-seed_{seed}"
        return make_trial(self.config, params, index, self.config["name"], list(params),
                          self.extra, self.out / "tune", label=label)  # fmt: skip

    def seed_trial(self, arm: dict, value, seed: int, index: int) -> Trial:
        params = {**arm, self.study.tune.key: value, "seed": seed}
        label = f"{self.arm_slug(arm)}-seed_{seed}"
        return make_trial(self.config, params, index, self.config["name"], list(params),
                          self.extra, self.out / "seeds", label=label)  # fmt: skip

    def grid_trials(self) -> list[Trial]:
        """Stage 1's first round: every arm at every grid value with every tuning seed."""
        tune, trials = self.study.tune, []
        for arm in self.arms:
            for value in tune.values:
                for seed in tune.seeds:
                    trials.append(self.tune_trial(arm, value, seed, len(trials)))
        return trials

    def upper_bound(self) -> int:
        """Stage 1's most trials: the grid, `extend` beyond each edge and two midpoints."""
        tune = self.study.tune
        points = len(tune.values) + (2 * tune.extend if tune.numeric else 0)
        points += 2 if tune.refine else 0
        return points * len(tune.seeds) * len(self.arms)

    def stage_one(self, run: Callable[[list[Trial]], list[TrialResult]]):
        """Run stage 1 round by round (run: the trials -> their results); (choices, every
        stage-1 result, interrupted)."""
        tune = self.study.tune
        points: list[dict] = [{} for _ in self.arms]  # per arm: value key -> point
        results: list[TrialResult] = []
        while True:
            todo = [(a, v) for a, arm in enumerate(self.arms) for v in self._next(a, points)]
            if not todo:
                break
            trials = [
                self.tune_trial(self.arms[a], v, s, len(results) + i * len(tune.seeds) + j)
                for i, (a, v) in enumerate(todo)
                for j, s in enumerate(tune.seeds)
            ]
            ran = run(trials)
            results += ran
            if any(r.status in (Status.INTERRUPTED, Status.NOT_STARTED) for r in ran):
                return [], results, True
            for i, (a, v) in enumerate(todo):
                mine = ran[i * len(tune.seeds) : (i + 1) * len(tune.seeds)]
                values = [r.metric if r.status == Status.COMPLETED else None for r in mine]
                key = _key(v) if tune.numeric else v
                points[a][key] = {
                    "score": score(values),
                    "values": values,
                    "statuses": [r.status for r in mine],
                    "trials": [r.trial.label for r in mine],
                }
        choices = [choose(tune, arm, points[a]) for a, arm in enumerate(self.arms)]
        return choices, results, False

    def _next(self, a: int, points: list[dict]) -> list:
        scores = {k: p["score"] for k, p in points[a].items()}
        return plan_points(self.study.tune, scores)

    def seed_trials(self, choices: Sequence[Choice]) -> list[Trial]:
        trials = []
        for choice in choices:
            for seed in self.study.seeds:
                trials.append(self.seed_trial(choice.arm, choice.chosen, seed, len(trials)))
        return trials

    def write_seeds_spec(self) -> None:
        """out/seeds/sweep.yaml: what attnlab-compare reads of stage 2 (the arms and seeds as
        parameters, the primary metric, the baseline arm, the pre-registered test)."""
        primary = self.study.primary
        params = dict(self.config["parameters"])
        params["seed"] = {"values": list(self.study.seeds)}
        spec = {
            "name": f"{self.config['name']}-seeds",
            "method": "grid",
            "metric": {"name": primary.metric, "goal": goal_of(primary.metric)},
            "parameters": params,
            "baseline": dict(primary.baseline),
            "primary": {
                "metric": primary.metric,
                "baseline": dict(primary.baseline),
                "test": primary.test,
                **({"margin": primary.margin} if primary.margin is not None else {}),
            },
            "tuned": {"key": self.study.tune.key, "choice": str(self.out / "choice.json")},
        }
        (self.out / "seeds").mkdir(parents=True, exist_ok=True)
        (self.out / "seeds" / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def unchosen(choices: Sequence[Choice]) -> list[Choice]:
    """Arms whose every stage-1 point failed, diverged or logged no metric."""
    return [c for c in choices if c.chosen is None]


def run_stage(trials, parallel, groups, metric, share) -> list[TrialResult]:
    return run_trials(trials, parallel=parallel, groups=groups, metric_name=metric,
                      memory_share=share)  # fmt: skip
