"""Studies (issue 63): a sweep file with tune / seeds / primary blocks; each arm's value of the
tuned key chosen on validation (extended at an edge, refined around the best), then the seeds at
each arm's choice. The rules as unit tests; the two stages end to end with a stand-in trial
(tests/fixtures/fake_study_trial.py: no torch), killed in each stage and rerun."""

from __future__ import annotations

import csv
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attnlab.cli import sweep
from attnlab.sweeps.tuning import Tune, _key, choose, grid_scale, plan_points, score

FAKE = Path(__file__).resolve().parent / "fixtures" / "fake_study_trial.py"


def _tune(values=(1e-3, 4e-3, 1.6e-2), refine=True, extend=2, goal="minimize", seeds=(1,)):
    scale = grid_scale(values) if all(isinstance(v, int | float) for v in values) else ""
    return Tune("lr", tuple(values), tuple(seeds), "val/nll_best", goal, refine, extend, scale)


def _scores(f, points):
    return {_key(p): f(p) for p in points}


def test_a_best_inside_the_grid_is_refined_on_both_sides():
    tune = _tune()
    grid = {_key(1e-3): 2.0, _key(4e-3): 1.0, _key(1.6e-2): 3.0}
    assert plan_points(tune, {}) == list(tune.values)  # the grid first
    mids = plan_points(tune, grid)
    assert [round(m, 12) for m in mids] == [2e-3, 8e-3]  # geometric midpoints
    done = {**grid, _key(2e-3): 1.5, _key(8e-3): 1.2}
    assert plan_points(tune, done) == []
    choice = choose(tune, {"arm": "a"}, {k: _point(v) for k, v in done.items()})
    assert choice.chosen == _key(4e-3) and not choice.at_edge and choice.refined
    assert choice.margin_below == pytest.approx(0.5) and choice.margin_above == pytest.approx(0.2)
    assert choice.extended == 0


def _point(value):
    return {"score": value, "values": [value], "statuses": ["completed"]}


@pytest.mark.parametrize("side", ["low", "high"])
def test_a_best_at_an_edge_is_extended_at_the_grids_step_then_refined(side):
    tune = _tune()
    target = 1e-4 * 4 if side == "low" else 2e-1  # where the curve's minimum lies
    f = lambda x: abs(__import__("math").log(x / target))  # noqa: E731
    points = list(tune.values)
    beyond = []
    while True:
        todo = plan_points(tune, _scores(f, points))
        if not todo:
            break
        points += todo
        beyond += [p for p in todo if not tune.values[0] <= p <= tune.values[-1]]
    step = 4.0
    first = tune.values[0] / step if side == "low" else tune.values[-1] * step
    assert beyond[0] == pytest.approx(first)  # the grid's own factor of 4
    choice = choose(tune, {}, {_key(p): _point(f(p)) for p in points})
    assert choice.extended >= 1 and choice.refined
    best = min(points, key=f)
    assert choice.chosen == _key(best)


def test_still_at_the_edge_after_every_extension_is_said():
    tune = _tune(extend=1)
    f = lambda x: -x  # noqa: E731  (better and better upward: the edge is never left)
    points = list(tune.values)
    while todo := plan_points(tune, _scores(f, points)):
        points += todo
    assert max(points) == pytest.approx(1.6e-2 * 4)  # one extension, then one midpoint below
    assert len(points) == 3 + 1 + 1
    choice = choose(tune, {}, {_key(p): _point(f(p)) for p in points})
    assert choice.at_edge and choice.extended == 1 and choice.margin_above is None


def test_ties_choose_the_lowest_value_and_a_point_that_cannot_win_is_skipped():
    tune = _tune(refine=False, extend=0)
    scores = {_key(1e-3): 1.0, _key(4e-3): 1.0, _key(1.6e-2): None}  # the last one diverged
    assert plan_points(tune, scores) == []
    choice = choose(tune, {}, {k: _point(v) for k, v in scores.items()})
    assert choice.chosen == _key(1e-3)
    maximized = _tune(refine=False, extend=0, goal="maximize")
    higher = {_key(1e-3): 1.0, _key(4e-3): 2.0, _key(1.6e-2): 2.0}
    assert choose(maximized, {}, {k: _point(v) for k, v in higher.items()}).chosen == _key(4e-3)


def test_several_tuning_seeds_decide_by_their_mean_and_any_failed_seed_sinks_the_point():
    assert score([1.0, 2.0, 3.0]) == 2.0
    assert score([1.0, None]) is None and score([1.0, float("nan")]) is None and score([]) is None


# ---- the study file's blocks: one line naming the key, exit 2, nothing written ------------------

STUDY = {
    "name": "tiny",
    "program": str(FAKE),
    "method": "grid",
    "metric": {"name": "val/nll_best", "goal": "minimize"},
    "parameters": {"arm": {"values": ["a", "b"]}},
    "tune": {
        "key": "lr",
        "values": [1.0e-3, 4.0e-3, 1.6e-2],
        "seeds": [1],
        "metric": "val/nll_best",
        "refine": True,
        "extend": 2,
    },  # fmt: skip
    "seeds": [1, 2],
    "primary": {"metric": "test/score", "baseline": {"arm": "a"}, "test": "welch", "margin": 5},
    "command": ["${interpreter}", "${program}", "${args_no_hyphens}"],
}


def _edited(base: dict | None = None, **changes) -> dict:
    study = json.loads(json.dumps(base or STUDY))
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = study
        for part in path:
            node = node[part]
        if value is None:
            node.pop(last)
        else:
            node[last] = value
    return study


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"tune__key": "arm"}, "tune.key=arm is also an arm key (parameters.arm)"),
        ({"tune__metric": "test/score"}, "tune.metric=test/score: only validation metrics"),
        ({"tune__values": []}, "tune.values must be a non-empty list"),
        ({"tune__values": ["1e-3", "4e-3"]}, "tune.refine needs numbers in tune.values"),
        ({"primary__baseline": {"arm": "c"}}, "primary.baseline.arm='c' is not an arm"),
        ({"primary__baseline": {"lr": 1}}, "primary.baseline.lr is not an arm key"),
        ({"primary__test": "ttest"}, "primary.test='ttest'; expected one of: welch, paired"),
        ({"tune__refines": True}, "tune.refines is not a key of tune"),
        ({"seeds": None}, "a study needs tune, seeds, primary; seeds is missing"),
        ({"parameters__seed": {"values": [1, 2]}}, "parameters.seed: a study's seeds are"),
        ({"tunes": {"key": "lr"}}, "key 'tunes' is not a sweep key (did you mean 'tune'?)"),
        ({"tune__values": [1.0000001e-3, 1.0000002e-3]}, "tune.values has two values with one"),
        ({"tune__scale": "log2"}, "tune.scale='log2'; expected log or linear"),
        ({"primary__metric": "eval/beam/bleu"}, "primary.metric=eval/beam/bleu is attnlab-eval's"),
        ({"evaluate": {"beam": 4}}, "evaluate.beam is not a key of evaluate; expected: last,"),
        ({"tune__stop_stalled": 0}, "tune.stop_stalled=0 must be a validation count >= 1"),
    ],
    ids=["tuned-is-arm", "test-metric", "empty-grid", "refine-categorical", "baseline-value",
         "baseline-key", "test-name", "tune-typo", "no-seeds", "seed-arm", "top-level-typo",
         "label-collision", "scale", "eval-metric-no-block", "evaluate-typo", "stall-count"],
)  # fmt: skip
def test_a_bad_study_file_is_one_line_naming_the_key_and_writes_nothing(
    tmp_path, capsys, changes, message
):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(_edited(**changes), sort_keys=False))
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


# ---- end to end --------------------------------------------------------------------------------


def _run(path: Path, out: Path, kill: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    if kill is not None:
        env["FAKE_STUDY_KILL"] = str(kill)
    cmd = [sys.executable, "-m", "attnlab.cli.sweep", str(path), "--out", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def _outcome(out: Path) -> dict:
    """What a finished study folder says: the choice, every trial's metrics and attempts."""
    choice = json.loads((out / "choice.json").read_text())
    trials = {}
    for stage in ("tune", "seeds"):
        for run in sorted(p for p in (out / stage).iterdir() if p.is_dir()):
            results = json.loads((run / "results.json").read_text())
            attempts = (run / "attempts.log").read_text().split()
            trials[f"{stage}/{run.name}"] = (results["status"], results["metrics"], len(attempts))
    return {"choice": choice["arms"], "trials": trials}


@pytest.mark.slow
def test_a_tiny_study_runs_both_stages_and_a_killed_one_ends_the_same(tmp_path):
    """Two arms x 3 rates (factor 4), one tuning seed, extend 2, refine; arm a's optimum is
    inside the grid, arm b's beyond its high edge. Then the same study killed (SIGKILL of the
    launcher) once in stage 1 and once in stage 2, each time rerun with the same command: it
    ends with the uncrashed study's choice and metrics, every trial completed once but the two
    the kills took down (each run twice)."""
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(STUDY, sort_keys=False))
    calm = tmp_path / "calm"
    done = _run(path, calm)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "stage 1's choice:" in done.stdout and f"attnlab-compare {calm}\n" in done.stdout
    outcome = _outcome(calm)
    a, b = outcome["choice"]
    assert a["arm"] == {"arm": "a"} and a["chosen"] == pytest.approx(4e-3)  # inside: refined
    assert [p["value"] for p in a["points"]] == pytest.approx([1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2])
    assert not a["at_edge"] and a["extended"] == 0 and a["refined"]
    # b: best at the high edge, extended twice (6.4e-2, 0.256), then refined around 6.4e-2
    assert b["extended"] == 2 and b["refined"] and not b["at_edge"]
    assert b["chosen"] == pytest.approx(0.128)
    assert a["margin_below"] > 0 and a["margin_above"] > 0
    seeds = {k: v for k, v in outcome["trials"].items() if k.startswith("seeds/")}
    assert sorted(seeds) == ["seeds/arm_a-seed_1", "seeds/arm_a-seed_2", "seeds/arm_b-seed_1",
                             "seeds/arm_b-seed_2"]  # fmt: skip
    ran_at = {k: json.loads((calm / k / "results.json").read_text())["overrides"] for k in seeds}
    assert "lr=0.004" in ran_at["seeds/arm_a-seed_1"]  # the chosen value, not a typed one
    assert all(attempts == 1 for _, _, attempts in outcome["trials"].values())
    assert "AT THE EDGE" not in (calm / "choice.md").read_text()
    compare_spec = yaml.safe_load((calm / "seeds" / "sweep.yaml").read_text())
    assert compare_spec["primary"] == STUDY["primary"]
    assert compare_spec["baseline"] == {"arm": "a"}
    # seed 1 is also the tuning seed: at the chosen value stage 1 ran that very config, so it
    # is reused (hard-linked, reused.json says whence), not trained again; seed 2 is new
    reused = ["arm_a-seed_1", "arm_b-seed_1"]
    assert compare_spec["reused_from_stage_1"] == reused
    assert "stage 2 reuses 2 stage-1 run(s)" in done.stdout
    note = json.loads((calm / "seeds" / "arm_a-seed_1" / "reused.json").read_text())
    assert note["reused_from"] == "tune/arm_a-lr_0.004-seed_1"
    assert os.path.samefile(calm / "seeds/arm_a-seed_1/results.json",
                            calm / "tune/arm_a-lr_0.004-seed_1/results.json")  # fmt: skip

    # attnlab-compare reads the folder as a study: stage 1's curves and choices, the primary
    # comparison as the file named it (confirmatory), every other metric exploratory
    from attnlab.cli import compare

    assert compare.main([str(calm), "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "study.md").read_text()
    assert "test/score, confirmatory (named in the study file before the runs)" in md
    assert "### test/other, exploratory" in md and "| arm=a | 0.004 |" in md
    assert "stage 2 reuses stage 1's runs of the same config and seed" in md
    assert "Equivalence within +-5 (two one-sided tests" in md  # the file's margin
    assert "| b | 0.128 | 2 | 0.994 |" in md.split("Equivalence within +-5")[1]
    roles = {r[0] + " " + r[1] for r in csv.reader(open(tmp_path / "report" / "study.csv"))}
    assert roles == {"role metric", "confirmatory test/score", "exploratory test/other"}
    assert (tmp_path / "report" / "tuning.png").stat().st_size > 0
    compared = (tmp_path / "report" / "comparison.md").read_text()
    assert "test/score (confirmatory: named in the sweep file before the runs)" in compared
    assert "test/other (exploratory: not named in the sweep file before the runs)" in compared
    assert compare.main([str(calm), "--metric", "test/other"]) == 2  # not its primary
    assert compare.main([str(calm), "--equivalence", "1"]) == 2  # its margin is the file's

    # The same study, killed in stage 1 (its 4th trial) and in stage 2 (its 2nd)
    crashed, kill = tmp_path / "crashed", tmp_path / "kill.json"
    stage_one = len([k for k in outcome["trials"] if k.startswith("tune/")])
    # the 4th start; then the rerun restarts that one and the rest of stage 1 (stage_one - 3),
    # and its 2nd stage-2 trial is start stage_one + 3
    kill.write_text(json.dumps({"started": 0, "at": [4, stage_one + 3]}))
    runs = [_run(path, crashed, kill) for _ in range(3)]
    assert [r.returncode for r in runs] == [-signal.SIGKILL, -signal.SIGKILL, 0], runs[-1].stderr
    assert "stage 1 was decided by an earlier run of this study" in runs[2].stdout  # not rerun
    again = _outcome(crashed)
    assert again["choice"] == [
        {**c, "points": [{**p, "trials": p["trials"]} for p in c["points"]]}
        for c in outcome["choice"]
    ]
    twice = [k for k, (_, _, n) in again["trials"].items() if n == 2]
    assert len(twice) == 2 and twice[0].startswith("tune/") and twice[1].startswith("seeds/")
    strip = lambda trials: {k: v[:2] for k, v in trials.items()}  # noqa: E731
    assert strip(again["trials"]) == strip(outcome["trials"])

    # The study file edited after its choice: refused for that folder, nothing changed
    before = (crashed / "choice.json").read_text()
    path.write_text(yaml.safe_dump(_edited(tune__values=[1.0e-3, 4.0e-3]), sort_keys=False))
    refused = _run(path, crashed)
    assert refused.returncode == 2 and "the study file changed after its choice" in refused.stderr
    assert (crashed / "choice.json").read_text() == before


def test_the_dry_run_prints_both_stages_and_the_primary_test(tmp_path, capsys):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(STUDY, sort_keys=False))
    assert sweep.main([str(path), "--dry-run", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "stage 1: lr over [0.001, 0.004, 0.016] x tuning seeds [1]" in out
    assert "6 trials, at most 18 with extend=2 and refine=true" in out
    assert "stage 2: seeds [1, 2] at each arm's choice: 4 trials" in out
    assert "primary (named before the runs): test/score, welch test against arm=a" in out
    assert not (tmp_path / "o").exists()


def test_a_categorical_choice_is_written_and_an_integer_grid_stays_integer(tmp_path):
    """A key tuned over names (no refine or extend) writes its choice.md; an integer grid's
    extension and midpoints are integers (warmup steps run as 400, not 400.0)."""
    from attnlab.sweeps.choice import write_choice

    names = Tune("model.norm_position", ("pre", "post"), (1,), "val/nll_best", "minimize")
    choice = choose(names, {"arm": "a"}, {"pre": _point(1.0), "post": _point(2.0)})
    assert choice.chosen == "pre"
    write_choice(tmp_path, names, [choice])
    assert "| pre **chosen** |" in (tmp_path / "choice.md").read_text()
    steps = _tune(values=(100, 200, 400), refine=True, extend=1)
    beyond = plan_points(steps, {100: 3.0, 200: 2.0, 400: 1.0})
    assert beyond == [800] and isinstance(beyond[0], int)
    mids = plan_points(steps, {100: 3.0, 200: 2.0, 400: 1.0, 800: 1.5})
    assert mids == [283, 566] and all(isinstance(m, int) for m in mids)


def test_a_grids_scale_is_what_its_steps_are_and_a_linear_one_stops_at_zero():
    """Positive values are not enough to call a grid geometric: 100, 200, 300, 400 steps
    linearly (extension 500, midpoint 250), 1e-3, 2e-3, 4e-3 by a factor; a linear grid of
    values >= 0 is not extended below 0 (warmup steps of -100 are no point)."""
    assert grid_scale([100, 200, 300, 400]) == "linear"
    assert grid_scale([1e-3, 2e-3, 4e-3]) == "log" and grid_scale([0, 0.1, 0.2]) == "linear"
    warm = _tune(values=(100, 200, 300, 400), refine=True, extend=2)
    assert warm.scale == "linear"
    assert plan_points(warm, {100: 4.0, 200: 3.0, 300: 2.0, 400: 1.0}) == [500]
    assert plan_points(warm, {100: 4.0, 200: 3.0, 300: 2.0, 400: 1.5, 500: 1.0, 600: 1.2}) == [
        450,
        550,
    ]
    low = _tune(values=(0, 100, 200), refine=False, extend=2)
    assert plan_points(low, {0: 1.0, 100: 2.0, 200: 3.0}) == []  # best at 0: nothing below it
    # new float points are run rounded (a folder and an override of 2.828e-3, not 2.8284271e-3)
    rates = _tune(values=(4e-3, 8e-3), refine=False, extend=1)
    assert plan_points(rates, {_key(4e-3): 1.0, _key(8e-3): 2.0}) == [2e-3]
    sqrt2 = _tune(values=(4e-3, 5.66e-3), refine=False, extend=1)
    assert plan_points(sqrt2, {_key(4e-3): 1.0, _key(5.66e-3): 2.0}) == [2.827e-3]


def test_a_categorical_tie_goes_to_the_files_first_value():
    names = Tune("model.norm_position", ("post", "pre"), (1,), "val/nll_best", "minimize")
    choice = choose(names, {}, {"pre": _point(1.0), "post": _point(1.0)})
    assert choice.chosen == "post"  # the file's order, not the alphabet's


def test_the_study_file_is_held_as_edited_until_the_choice_then_refused_if_edited(tmp_path):
    from attnlab.sweeps.spec import SweepError
    from attnlab.sweeps.staged import refuse_edited_study, write_study_spec

    edited = _edited(tune__values=[1.0e-3, 4.0e-3])
    write_study_spec(tmp_path, STUDY)
    refuse_edited_study(tmp_path, edited)  # no choice yet: the edit is the study's
    write_study_spec(tmp_path, edited)
    assert yaml.safe_load((tmp_path / "sweep.yaml").read_text()) == edited
    (tmp_path / "choice.json").write_text("{}")
    write_study_spec(tmp_path, STUDY)  # kept once the choice is made
    assert yaml.safe_load((tmp_path / "sweep.yaml").read_text()) == edited
    with pytest.raises(SweepError, match="differs in tune"):
        refuse_edited_study(tmp_path, STUDY)


@pytest.mark.slow
@pytest.mark.parametrize(
    "old, new, message",
    [
        ("metric: test/nll", "metric: test/nlll",
         "primary.metric=test/nlll: no trial reports this metric (did you mean test/nll?)"),
        ("metric: val/nll_best\n  refine", "metric: val/nll_bset\n  refine",
         "tune.metric=val/nll_bset: no trial reports this metric (did you mean val/nll_best?)"),
    ],
    ids=["primary", "tune"],
)  # fmt: skip
def test_a_metric_no_trial_reports_is_refused_before_anything_runs(
    tmp_path, capsys, old, new, message
):
    """The metrics a run reports are known from its config (attnlab.pipeline.metric_names):
    a misspelled primary or tuning metric is one line with the closest name, exit 2."""
    shipped = (Path(__file__).resolve().parents[1] / "sweeps" / "study_tiny.yaml").read_text()
    assert old in shipped
    path = tmp_path / "study.yaml"
    path.write_text(shipped.replace(old, new))
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_the_dry_runs_power_line_is_the_planners_and_compares_figure(tmp_path, capsys):
    """The smallest difference `--dry-run --sd S` prints for stage 2 is the difference at which
    the planner (compare --plan) asks for exactly the study's seeds, and the one compare's study
    view reports for two arms of that spread and those seeds."""
    import re

    from attnlab.analysis import stats, study_report

    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({**STUDY, "seeds": [1, 2, 3, 4]}, sort_keys=False))
    assert sweep.main([str(path), "--dry-run", "--sd", "0.5", "--out", str(tmp_path / "o")]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "power:" in ln)
    assert "4 seeds per arm" in line and "at alpha 0.05/1 = 0.05" in line
    mdd = float(re.search(r"difference of ([\d.]+)", line).group(1))
    pilot = [[9.5, 10.0, 10.5], [1.5, 2.0, 2.5]]  # both with std 0.5
    assert stats.seeds_needed(pilot, mdd * 1.001).seeds_per_arm == 4
    assert stats.seeds_needed(pilot, mdd * 0.98).seeds_per_arm == 5
    spread = statistics.stdev([-3, -1, 1, 3])
    four = [10 + 0.5 * x / spread for x in (-3, -1, 1, 3)]  # 4 seeds, std 0.5
    assert statistics.stdev(four) == pytest.approx(0.5)
    arms = {"a": list(enumerate(four)), "b": [(s, x + 1) for s, x in enumerate(four)]}
    compare_mdd = study_report.family_mdd(arms, "a")[0]["b"]
    assert compare_mdd == pytest.approx(mdd, rel=1e-3)


def test_a_component_of_ones_own_may_log_metrics_the_check_does_not_know():
    """A LightningModule of one's own or a callback from outside attnlab may log any metric: the
    metric check then refuses nothing; with attnlab's own components it knows the list."""
    from attnlab.pipeline.metric_names import reported_metrics

    plain = {"data": {"_target_": "attnlab.data.synthetic.SyntheticDataModule"},
             "callbacks": {"ckpt": {"_target_": "lightning.pytorch.callbacks.ModelCheckpoint"}},
             "module": {"_target_": None}}  # fmt: skip
    assert "val/nll_best" in reported_metrics(plain)
    assert reported_metrics({**plain, "module": {"_target_": "mine.Module"}}) is None
    mine = {**plain["callbacks"], "probe": {"_target_": "mine.Probe"}}
    assert reported_metrics({**plain, "callbacks": mine}) is None


def test_accuracy_metrics_are_maximized_wherever_the_word_sits_in_the_name():
    """A study tuned on token accuracy without goal: picks the best rate, not the worst (the
    name's last part need not start with the word: token_acc, greedy_token_acc)."""
    from attnlab.analysis.lr_sweep import higher_is_better
    from attnlab.sweeps.tuning import goal_of

    for metric in ("val/token_acc", "val/token_acc_best", "val/greedy_token_acc", "test/bleu",
                   "eval/test-avg5-beam4_lp0.6/chrf", "val/exact_match"):  # fmt: skip
        assert goal_of(metric) == "maximize" and higher_is_better(metric), metric
    for metric in ("val/nll_best", "val/loss", "test/perplexity"):
        assert goal_of(metric) == "minimize" and not higher_is_better(metric), metric


def test_a_test_primary_beside_an_evaluate_block_is_refused():
    """With an evaluate block, primary test/score would read the run's own test, not the
    evaluation the study runs: refused in one line naming the evaluation's scores."""
    from attnlab.sweeps.spec import SweepError
    from attnlab.sweeps.tuning import load_study

    spec = _edited(evaluate={"last": 5, "beam_size": 4})
    with pytest.raises(
        SweepError,
        match=r"primary.metric=test/score is the run's own test, "
        r"not the evaluate block's scores; name one of: eval/",
    ):
        load_study(spec, "s.yaml")


def test_a_group_label_is_matched_to_its_own_arm_only():
    from attnlab.cli.compare_study import _same_arm

    assert _same_arm("n_heads=1, peak_lr=0.00566", {"model.n_heads": 1})
    assert not _same_arm("n_heads=8, peak_lr=1e-04", {"model.n_heads": 1})  # "=1" inside
    assert not _same_arm("n_heads=16, peak_lr=0.008", {"model.n_heads": 1})


# ---- a small study run here (the stand-in trial, a few seconds) ----------------------------------

SMALL = {**STUDY, "tune": {**STUDY["tune"], "values": [1.0e-3, 4.0e-3], "refine": False,
                           "extend": 0}}  # fmt: skip


def _study(tmp_path: Path, spec: dict | None = None, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec or SMALL, sort_keys=False))
    return path


def test_a_finished_study_prints_the_compare_command_of_its_folder(tmp_path, capsys):
    """The study view is attnlab-compare <out> (its sweep.yaml has the tune block); <out>/seeds
    alone is read as a plain sweep, without the choice or the primary test's labels."""
    out = tmp_path / "out"
    assert sweep.main([str(_study(tmp_path)), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"compare: attnlab-compare {out}\n" in printed, printed[-2000:]
    # each stage's W&B job type (a W&B view groups the stages apart); a stage-1 run reused as a
    # stage-2 seed (hard-linked into seeds/) is one run: stage 1's
    reused = set(yaml.safe_load((out / "seeds" / "sweep.yaml").read_text())["reused_from_stage_1"])
    for stage, job in (("tune", "tune"), ("seeds", "seeds")):
        found = {p.parent.name: json.loads(p.read_text())["job_type"]
                 for p in (out / stage).glob("*/results.json")}  # fmt: skip
        assert found and all(v == ("tune" if k in reused else job) for k, v in found.items())
    assert reused and len(found) > len(reused)


def test_a_studys_wandb_view_offline_is_one_line_exit_2_and_writes_nothing(
    tmp_path, capsys, monkeypatch
):
    """attnlab-compare <study> --wandb-view builds the study's view (both stages, by job type:
    tests/test_wandb_view.py); offline it refuses in one line before any file is written."""
    from attnlab.cli import compare

    out, report = tmp_path / "out", tmp_path / "report"
    assert sweep.main([str(_study(tmp_path)), "--out", str(out)]) == 0
    capsys.readouterr()
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert compare.main([str(out), "--wandb-view", "--out", str(report)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "WANDB_MODE=offline; no view was made" in err[0], err
    assert not report.exists()


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"primary__test": "paired"}, "primary"),
        ({"primary__margin": 1}, "primary"),
        ({"seeds": [1, 2, 3]}, "seeds"),
        ({"evaluate": {"last": 0}, "primary__metric": "eval/test-last-beam4_lp0.6/bleu"},
         "primary, evaluate"),
        ({"parameters__arm": {"values": ["a", "b", "c"]}}, "parameters"),
    ],
    ids=["test", "margin", "seeds", "evaluate", "arms"],
)  # fmt: skip
def test_the_named_test_seeds_and_arms_are_held_from_a_folders_first_trial(
    tmp_path, capsys, changes, named
):
    """Pre-registration: once a folder's first stage-1 trial has run (its sweep.yaml written),
    an edit to primary, seeds, evaluate or the arms is refused for it, before the choice too:
    one line naming the key, exit 2, nothing written. (tune may change until the choice.)"""
    from attnlab.sweeps.staged import write_study_spec

    out = tmp_path / "out"
    write_study_spec(out, SMALL)  # what the first run writes before its first trial
    (out / "tune" / "arm_a-lr_0.001-seed_1").mkdir(parents=True)
    before = _files(out)
    edited = _study(tmp_path, _edited(SMALL, **changes))
    assert sweep.main([str(edited), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"differs in {named}" in err, err
    assert _files(out) == before


def test_other_command_line_overrides_on_a_studys_folder_are_refused(tmp_path, capsys):
    """The overrides after the study file are held with it: a rerun into the same --out with
    others (or none) would reuse a choice and trials made with the first ones. One line naming
    both, exit 2, nothing written; the same ones (in any order) resume."""
    out, path = tmp_path / "out", _study(tmp_path)
    assert sweep.main([str(path), "--out", str(out), "x=1", "y=2"]) == 0
    before = _files(out)
    capsys.readouterr()
    for other in (["x=2", "y=2"], []):
        assert sweep.main([str(path), "--out", str(out), *other]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "overrides x=1 y=2" in err, err
        assert _files(out) == before
    assert sweep.main([str(path), "--out", str(out), "y=2", "x=1"]) == 0


def test_an_arm_with_no_completed_point_stops_the_study_and_a_rerun_proceeds(
    tmp_path, capsys, monkeypatch
):
    """Every stage-1 trial of arm b failed: the study stops with one line naming the arm, exit
    1, and writes no choice.json (one with that arm unchosen held the folder for good); fixed
    and rerun, it chooses and runs stage 2. A choice.json from before, with an arm unchosen,
    is no choice."""
    from attnlab.sweeps.choice import read_choice

    out, path = tmp_path / "out", _study(tmp_path)
    monkeypatch.setenv("FAKE_STUDY_FAIL", "b")
    assert sweep.main([str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "arm=b" in err and "arm=a" not in err, err
    assert "no choice written" in err and not (out / "choice.json").exists()
    assert not (out / "seeds").exists()
    monkeypatch.delenv("FAKE_STUDY_FAIL")  # the cause fixed; its failed trials deleted
    for trial in (out / "tune").glob("arm_b-*"):
        __import__("shutil").rmtree(trial)
    assert sweep.main([str(path), "--out", str(out)]) == 0
    assert [c.chosen for c in read_choice(out, [{"arm": "a"}, {"arm": "b"}])] == [4e-3, 4e-3]
    record = json.loads((out / "choice.json").read_text())
    record["arms"][1]["chosen"] = None
    (out / "choice.json").write_text(json.dumps(record))
    assert read_choice(out, [{"arm": "a"}, {"arm": "b"}]) is None


def test_a_failed_or_diverged_stage_1_trial_runs_once_and_is_kept_as_it_ended(
    tmp_path, capsys, monkeypatch
):
    """Resumed before its choice, a study keeps each stage-1 trial that ended (completed,
    failed or diverged, with the same overrides) as it ended: a diverged point still cannot
    win, and nothing is run twice (a rerun that came out otherwise would change the choice)."""
    out = tmp_path / "out"
    path = _study(tmp_path, _edited(SMALL, tune__values=[1.0e-3, 4.0e-3, 2.0]))  # 2.0 diverges
    monkeypatch.setenv("FAKE_STUDY_FAIL", "b")  # b fails: no choice, so a rerun enters stage 1
    assert sweep.main([str(path), "--out", str(out)]) == 1
    capsys.readouterr()
    assert sweep.main([str(path), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "kept      arm_a-lr_2-seed_1 (diverged earlier)" in printed, printed
    assert "kept      arm_b-lr_0.001-seed_1 (failed earlier)" in printed, printed
    attempts = {p.parent.name: len(p.read_text().split()) for p in out.glob("tune/*/attempts.log")}
    assert len(attempts) == 6 and set(attempts.values()) == {1}, attempts


def test_evaluations_take_the_sweeps_gpu_slots_as_its_trials_do(tmp_path):
    """attnlab-eval after each stage-2 trial runs on one of the --gpus slots
    (CUDA_VISIBLE_DEVICES, and the memory share of --trials-per-gpu), one evaluation per slot
    at a time, as the trials ran; without --gpus the environment's devices."""
    import threading
    import time
    from types import SimpleNamespace

    from attnlab.runs.gpu_share import MEMORY_SHARE_ENV
    from attnlab.sweeps.evaluate import evaluate_trials, load_evaluate

    block = load_evaluate({"last": 0}, "study.yaml")
    results = [SimpleNamespace(trial=SimpleNamespace(run_dir=tmp_path / f"t{i}", label=f"t{i}"),
                               status="completed", metric=None) for i in range(4)]  # fmt: skip
    seen, busy, lock = [], set(), threading.Lock()

    def call(argv, log, env):
        gpus = env.get("CUDA_VISIBLE_DEVICES")
        with lock:
            assert gpus not in busy  # one evaluation per slot at a time
            busy.add(gpus)
            seen.append((gpus, env.get(MEMORY_SHARE_ENV)))
        time.sleep(0.05)
        with lock:
            busy.discard(gpus)
        return 0

    metric = "eval/test-last-beam4_lp0.6/bleu"
    assert evaluate_trials(block, results, metric, 2, call, groups=["0", "1"], share=0.5) == []
    assert sorted(seen) == [("0", "0.5"), ("0", "0.5"), ("1", "0.5"), ("1", "0.5")]
    seen.clear()
    evaluate_trials(block, results[:1], metric, 1, call)
    assert seen == [(os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get(MEMORY_SHARE_ENV))]


def test_an_integer_log_grid_extends_to_distinct_values_of_at_least_one():
    """Layers or steps on a log grid: the extension below the grid's low edge stops at 1 (1, 2,
    4 halved is 0.5, run as 0 layers), a value rounded onto one before it is not run twice, and
    refine's midpoints are integers not run before."""
    from attnlab.sweeps.tuning import extension_points

    low = lambda x: x  # noqa: E731  (better and better downward: the low edge is never left)
    layers = Tune("model.n_layers", (1, 2, 4), (1,), "val/nll_best", "minimize", True, 2, "log")
    assert extension_points(layers) == [8, 16]
    assert plan_points(layers, {v: low(v) for v in (1, 2, 4)}) == []  # nothing below 1
    wider = Tune("model.n_layers", (2, 4, 8), (1,), "val/nll_best", "minimize", False, 2, "log")
    assert plan_points(wider, {v: low(v) for v in (2, 4, 8)}) == [1]
    assert plan_points(wider, {v: low(v) for v in (1, 2, 4, 8)}) == []
    close = Tune("steps", (2, 3), (1,), "val/nll_best", "minimize", False, 3, "log")
    assert extension_points(close) == [1, 4, 7, 10]  # 3 / 1.5 and 3 / 2.25 both round to 1
    assert plan_points(close, {1: 0.0, 2: 1.0, 3: 2.0}) == []
    mids = plan_points(layers, {1: 2.0, 2: 1.0, 4: 3.0})  # sqrt(2) rounds onto 1: run already
    assert mids == [3] and isinstance(mids[0], int)
    choice = choose(layers, {}, {v: _point(low(v)) for v in (1, 2, 4)})
    assert choice.chosen == 1 and choice.at_edge and choice.extended == 0


@pytest.mark.parametrize("test", ["welch", "paired"])
def test_the_dry_run_compares_mdd_and_the_table_agree_for_the_primarys_test(tmp_path, capsys, test):
    """The smallest detectable difference is the primary test's: Welch's (df 2n - 2 at equal
    spread) or the paired one's (the per-seed differences' se, df n - 1), at the table's Holm
    alpha (0.05 / the arms tested against the baseline). The dry run's figure from --sd S (a
    paired test: the differences' std taken as sqrt(2) S, seeds uncorrelated), compare's figure
    on seeds of that spread, and the statistics table's MDD column are one number."""
    import re

    from attnlab.analysis import report, stats, study_report
    from attnlab.analysis.runs import Group, Run
    from attnlab.analysis.tables import fmt_number

    spec = {**STUDY, "seeds": [1, 2, 3, 4], "primary": {**STUDY["primary"], "test": test}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert sweep.main([str(path), "--dry-run", "--sd", "0.5", "--out", str(tmp_path / "o")]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "power:" in ln)
    assert f"({test} test" in line and "at alpha 0.05/1 = 0.05" in line, line
    dry = float(re.search(r"difference of ([\d.]+)", line).group(1))
    df = 3 if test == "paired" else 6
    assert dry == pytest.approx(stats.detectable_difference(0.5 * 0.5**0.5, df), rel=1e-3)

    x = [-3, -1, 1, 3]
    unit = [v / statistics.stdev(x) for v in x]  # std 1
    base = {s: 10 + 0.5 * u for s, u in zip(range(1, 5), unit, strict=True)}  # std 0.5
    # paired: the differences' std is sqrt(2) * 0.5, as the dry run takes it; Welch: std 0.5
    noise = [0.5 * 2**0.5 * u for u in unit[::-1]] if test == "paired" else [0.0] * 4
    arm = {s: base[s] + 1 + e for s, e in zip(base, noise, strict=True)}
    pairs = {"a": list(base.items()), "b": list(arm.items())}
    mdd, tested = study_report.family_mdd(pairs, "a", test)
    assert tested == 1 and mdd["b"] == pytest.approx(dry, rel=1e-3)
    groups = [Group({"arm": k}, [Run(Path(f"{k}{s}"), "completed", {"m": v}, {}, seed=s)
                                 for s, v in vals]) for k, vals in pairs.items()]  # fmt: skip
    table = report.statistics_table(groups, ["arm"], "m", groups[0], paired=test == "paired")
    column = next(i for i, h in enumerate(table[0]) if h.startswith("MDD"))
    assert table[2][column] == fmt_number(mdd["b"])


def test_a_stalled_stage_1_trial_stops_early_and_the_choice_file_says_which_and_when(
    tmp_path, capsys
):
    """tune.stop_stalled: N reaches stage 1's trials (ATTNLAB_STOP_STALLED=N), not stage 2's: the
    stand-in trial of arm b at 1e-3 (val/nll_best 4.2, above its 3.0 at initialization) ends
    "pruned", cannot win, and choice.json and choice.md name it with its step; the choice is
    the one without the rule (b at 4e-3), and the dry run says the rule."""
    out = tmp_path / "out"
    path = _study(tmp_path, _edited(SMALL, tune__stop_stalled=2))
    assert sweep.main([str(path), "--dry-run"]) == 0
    assert "at validation 2 stops there" in capsys.readouterr().out
    assert sweep.main([str(path), "--out", str(out)]) == 0
    record = json.loads((out / "choice.json").read_text())
    assert [a["chosen"] for a in record["arms"]] == [4e-3, 4e-3]
    (stopped,) = record["stopped_early"]
    assert stopped["trial"].startswith("arm_b-lr_0.001") and stopped["step"] == 20
    b = record["arms"][1]["points"]
    assert [p["statuses"] for p in b] == [["pruned"], ["completed"]] and b[0]["score"] is None
    md = (out / "choice.md").read_text()
    assert "## Stopped early (tune.stop_stalled: 2)" in md and "at step 20 (validation 2)" in md
    stage2 = [json.loads(p.read_text()) for p in out.glob("seeds/*/results.json")]
    assert stage2 and all(r["status"] == "completed" for r in stage2)  # the rule is stage 1's


def test_the_stall_rule_stops_a_run_above_its_initial_loss_at_its_nth_validation(
    tmp_path, monkeypatch
):
    """attnlab.training.stall_stop: at the N-th validation (not the sanity check, not the last)
    a val/nll above nll_init stops the run ("pruned" through `pruned`), below it does not; the
    count survives a checkpoint; ATTNLAB_STOP_STALLED adds the callback to the Trainer."""
    from types import SimpleNamespace

    import lightning as L
    import torch

    from attnlab.training.stall_stop import StallStop, stall_stop
    from attnlab.training.trainer import build_trainer

    def validate(cb, nll, step=10, sanity=False, max_steps=100):
        trainer = SimpleNamespace(sanity_checking=sanity, max_steps=max_steps, global_step=step,
                                  is_global_zero=True, world_size=1, should_stop=False,
                                  callback_metrics={"val/nll": torch.tensor(nll)})  # fmt: skip
        cb.on_validation_end(trainer, SimpleNamespace(nll_init=torch.tensor(3.0)))
        return trainer.should_stop

    cb = StallStop(2)
    assert not validate(cb, 5.0, sanity=True) and not validate(cb, 5.0)  # sanity, then the 1st
    assert validate(cb, 3.5, step=20) and cb.pruned
    assert cb.results_record()["stopped_early"]["step"] == 20
    below = StallStop(2)
    assert not validate(below, 5.0) and not validate(below, 2.9) and not below.pruned
    last = StallStop(1)
    assert not validate(last, 5.0, step=100) and last.results_record() == {}  # the budget's end
    resumed = StallStop(2)
    resumed.load_state_dict(StallStop(2).state_dict() | {"validations": 1})
    assert validate(resumed, 4.0)
    assert stall_stop({}) == [] and isinstance(
        stall_stop({"ATTNLAB_STOP_STALLED": "3"})[0], StallStop
    )
    monkeypatch.setenv("ATTNLAB_STOP_STALLED", "2")
    plain = {"trainer": {"max_steps": 4, "accelerator": "cpu", "enable_progress_bar": False},
             "scheduler": {}}  # fmt: skip
    trainer, _ = build_trainer(L.Trainer, plain, [], tmp_path, [])
    assert any(isinstance(c, StallStop) and c.after == 2 for c in trainer.callbacks)


def test_a_trial_the_stall_rule_stopped_is_kept_when_stage_1_is_rerun(
    tmp_path, capsys, monkeypatch
):
    """Stage 1 stopped before its choice (arm b fails) and rerun: arm a's trial at 0.5 (the
    stand-in's val/nll_best 4.4, above its 3.0 at initialization) that the stall rule ended
    "pruned" is kept as it ended, not trained again (a rerun would spend its budget and end
    "pruned" anyway)."""
    out = tmp_path / "out"
    spec = _edited(SMALL, tune__values=[1.0e-3, 0.5], tune__stop_stalled=2)
    path = _study(tmp_path, spec)
    monkeypatch.setenv("FAKE_STUDY_FAIL", "b")
    assert sweep.main([str(path), "--out", str(out)]) == 1
    capsys.readouterr()
    assert sweep.main([str(path), "--out", str(out)]) == 1
    assert "kept      arm_a-lr_0.5-seed_1 (pruned earlier)" in capsys.readouterr().out
    attempts = out / "tune" / "arm_a-lr_0.5-seed_1" / "attempts.log"
    assert len(attempts.read_text().split()) == 1
