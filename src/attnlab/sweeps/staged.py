"""A study's two stages, run here (attnlab-sweep STUDY --out DIR; rules: attnlab.sweeps.tuning).

    DIR/sweep.yaml          the study file as run (for DIR, an edit of its arms, command,
                            seeds, primary or evaluate is refused from the first run, of
                            its tune block once DIR/choice.json exists)
    DIR/overrides.json      the command line's overrides (others are refused for DIR)
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

import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from attnlab.runs.identity import defining_overrides
from attnlab.runs.status import JOB_TYPE_ENV, STALL_ENV, Status
from attnlab.sweeps.runner import TrialResult, read_results, run_trials
from attnlab.sweeps.spec import SweepError, Trial, make_trial, trial_name
from attnlab.sweeps.tuning import (
    Choice,
    Study,
    _key,
    arm_grid,
    arm_keys,
    choose,
    extension_points,
    goal_of,
    plan_points,
    score,
    value_label,
)
from attnlab.sweeps.wandb_stage import WandbStages

REUSE_NOTE = (
    "stage 2's seed is one of stage 1's tuning seeds: at the chosen value this run is the stage-1 "
    "run of the same config and seed (chosen on its validation metric), reused, not retrained"
)
# The keys of the study file held for a folder from its first run: the arms, what a trial runs,
# and what was named before the runs (the seeds, the primary test, the evaluation). tune is held
# from the choice (an edit before it is the study's: its trials are named by their values).
HELD = ("name", "method", "parameters", "command", "program", "seeds", "primary", "evaluate")
HELD_AFTER_CHOICE = ("tune",)
OVERRIDES = "overrides.json"  # the command line's overrides, held from the first run


def refuse_edited_study(out: Path, config: dict, overrides: Sequence[str] = ()) -> None:
    """SweepError when out/ holds a run of this study and the study file differs from
    out/sweep.yaml in a held key (HELD; tune too once out/choice.json exists), or the
    command line's defining overrides differ from those the folder was first run with."""
    if not (out / "sweep.yaml").is_file():
        return
    held = yaml.safe_load((out / "sweep.yaml").read_text()) or {}
    chosen = (out / "choice.json").is_file()
    keys = HELD + (HELD_AFTER_CHOICE if chosen else ())
    differ = [k for k in keys if held.get(k) != config.get(k)]
    if differ:
        when = "after its choice was made" if chosen else "since this folder's first run"
        raise SweepError(
            f"--out {out}: the study file changed {when} (it differs in {', '.join(differ)}); "
            "use a new --out for the edited study"
        )
    first = held_overrides(out)
    if first is not None and defining_overrides(first) != defining_overrides(list(overrides)):
        raise SweepError(
            f"--out {out}: this study was run with the overrides {_shown(first)}, not "
            f"{_shown(overrides)}; use a new --out for other overrides"
        )


def held_overrides(out: Path) -> list[str] | None:
    """The overrides out/ was first run with (None: a folder from before they were held)."""
    try:
        return list(json.loads((out / OVERRIDES).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _shown(overrides: Sequence[str]) -> str:
    return " ".join(overrides) if overrides else "(none)"


def write_study_spec(out: Path, config: dict, overrides: Sequence[str] = ()) -> None:
    """<out>/sweep.yaml: the study file as run; rewritten until the choice is made (an edit
    to tune before it is the study's), kept after; and <out>/overrides.json, the command
    line's overrides, as first run (an edit of either is refused: refuse_edited_study)."""
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "choice.json").is_file():
        tmp = out / "sweep.yaml.tmp"
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        tmp.replace(out / "sweep.yaml")
    if held_overrides(out) is None:
        (out / OVERRIDES).write_text(json.dumps(list(overrides)) + "\n")


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
        label = f"{self.arm_slug(arm)}-{short}_{value_label(value)}-seed_{seed}"
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

    def edge_trials(self) -> list[Trial]:
        """The trials extension may add (each arm, the first tuning seed): checked up front."""
        seed = self.study.tune.seeds[0]
        points = extension_points(self.study.tune)
        return [self.tune_trial(arm, v, seed, i) for i, (arm, v) in
                enumerate((a, v) for a in self.arms for v in points)]  # fmt: skip

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

    def reused(self, choices: Sequence[Choice]) -> list[tuple[Trial, Trial]]:
        """(stage-1 trial, stage-2 trial) for each stage-2 seed that is also a tuning seed:
        at the chosen value the two are the same config and seed, so the same run."""
        pairs = []
        for choice in choices:
            for seed in self.study.seeds:
                if seed in self.study.tune.seeds:
                    pairs.append((self.tune_trial(choice.arm, choice.chosen, seed, 0),
                                  self.seed_trial(choice.arm, choice.chosen, seed, 0)))  # fmt: skip
        return pairs

    def adopt(self, choices: Sequence[Choice]) -> list[str]:
        """Link each stage-1 run that is also a stage-2 seed into seeds/ (hard links: no copy
        of its checkpoints), with reused.json naming where it ran, so that stage 2 keeps it as
        completed instead of training it again. The labels adopted, for the report."""
        adopted = []
        for tuned, seeded in self.reused(choices):
            src, dst = tuned.run_dir, seeded.run_dir
            if (dst / "reused.json").is_file():
                adopted.append(seeded.label)
                continue
            if dst.exists() or not (src / "results.json").is_file():
                continue  # stage 2 ran (or runs) it itself; a stage-1 run that did not complete
            tmp = dst.with_name(dst.name + ".adopting")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp, copy_function=os.link)
            note = {"reused_from": f"tune/{tuned.label}", "why": REUSE_NOTE}
            (tmp / "reused.json").write_text(json.dumps(note, indent=2) + "\n")
            tmp.replace(dst)
            adopted.append(seeded.label)
        return adopted

    def write_seeds_spec(self, reused: Sequence[str] = ()) -> None:
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
            "reused_from_stage_1": list(reused),
        }
        (self.out / "seeds").mkdir(parents=True, exist_ok=True)
        (self.out / "seeds" / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def unchosen(choices: Sequence[Choice]) -> list[Choice]:
    """Arms whose every stage-1 point failed, diverged or logged no metric."""
    return [c for c in choices if c.chosen is None]


# The stage-1 trials a rerun keeps as they ended: each runs once (a diverged point, or one the
# stall rule stopped, still cannot win; a failed one runs again once its folder is deleted).
STAGE_ONE_KEPT = (Status.COMPLETED, Status.FAILED, Status.DIVERGED, Status.PRUNED)


# W&B's job type of each stage's runs (JOB_TYPE_ENV): a W&B view groups the stages apart
JOB_TYPES = {1: "tune", 2: "seeds"}


def run_stage(trials, parallel, groups, metric, share, kept=(Status.COMPLETED,), env=None,
              launcher=None):  # fmt: skip
    """The trials run (attnlab.sweeps.runner.run_trials; with a `launcher`, as cluster jobs, or
    as a W&B sweep with a WandbStages);
    those ended earlier with a status of `kept` kept as they ended; `env` added to each trial's
    environment (stage 2's W&B job type where it has none)."""
    env = {JOB_TYPE_ENV: JOB_TYPES[2], **(env or {})}
    if isinstance(launcher, WandbStages):  # each batch a W&B sweep (attnlab.sweeps.wandb_stage)
        return launcher.run_stage(trials, metric, kept, env)
    return run_trials(trials, parallel=parallel, groups=groups, metric_name=metric,
                      memory_share=share, kept=kept, env=env, launcher=launcher)  # fmt: skip


def stage_one_env(tune) -> dict[str, str]:
    """Stage 1's trials' environment: its W&B job type, and the stall rule
    (attnlab.training.stall_stop) where the study asks for it (tune.stop_stalled); neither is
    part of a trial's config, so a stage-1 run stays the same run as the stage-2 one it may serve
    as."""
    env = {JOB_TYPE_ENV: JOB_TYPES[1]}
    return {**env, STALL_ENV: str(tune.stop_stalled)} if tune.stop_stalled else env


def stopped_early(results: Sequence[TrialResult]) -> list[dict]:
    """The stage-1 trials the stall rule stopped: trial label, step, validation, val/nll and the
    loss at initialization (their results.json's "stopped_early")."""
    found = []
    for r in results:
        record = (read_results(r.trial.run_dir) or {}).get("stopped_early")
        if isinstance(record, dict):
            found.append({"trial": r.trial.label, **record})
    return found
