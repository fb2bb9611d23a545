"""attnlab-compare on a learning-rate sweep: per arm the metric against the rate, the best rate,
the LR sensitivity (Wortsman et al., 2023) with its bootstrap interval, the arms compared at their
own best rate (with and without --select-seeds), and the budget check."""

from __future__ import annotations

import csv
import itertools
import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml

from attnlab.analysis import budget, lr_sweep
from attnlab.analysis.groups import group_runs
from attnlab.analysis.runs import find_results, load_run
from attnlab.cli import compare

RATES = (1e-3, 1e-2, 1e-1)
INIT = 3.0  # every run's loss at initialization (the cap)
# (norm, rate) -> final val/nll per seed 1..4; None: the run diverged
VALUES = {
    ("post", 1e-3): (0.50, 0.60, 0.55, 0.58),
    ("post", 1e-2): (0.40, 0.90, 0.45, 0.47),
    ("post", 1e-1): (None, 5.00, None, 2.50),  # two diverged; 5.0 is capped at 3.0
    ("pre", 1e-3): (0.30, 0.32, 0.31, 0.33),
    ("pre", 1e-2): (0.10, 0.12, 0.11, 0.13),
    ("pre", 1e-1): (0.20, 0.22, 0.21, 0.23),
}


def _write(root: Path, norm: str, rate: float, seed: int, value, curve_drop: float = 0.0):
    run = root / f"{norm}-lr{rate}-s{seed}"
    run.mkdir(parents=True)
    status = "completed" if value is not None else "diverged"
    metrics = {"val/nll": value} if value is not None else {}
    record = {
        "status": status,
        "metrics": metrics,
        "config": {"model": {"norm_position": norm}, "scheduler": {"peak_lr": rate}, "seed": seed},
        "seed": seed,
        "wall_time_s": 60.0,
        "nll_init": INIT,
    }
    (run / "results.json").write_text(json.dumps(record))
    if value is not None:  # val/nll at steps 50 and 100: curve_drop is the late gain
        with open(run / "metrics.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "val/nll"])
            w.writerows([[49, value + curve_drop], [99, value]])


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "lr"
    for (norm, rate), values in VALUES.items():
        for seed, value in enumerate(values, start=1):
            _write(root, norm, rate, seed, value)
    spec = {"metric": {"name": "val/nll"}, "parameters": {"model.norm_position": {"values":
            ["post", "pre"]}, "scheduler.peak_lr": {"values": list(RATES)}}}  # fmt: skip
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec))
    return root


def _arms(root: Path, seeds=(1, 2, 3, 4)):
    runs = [load_run(p) for p in find_results([root])]
    runs = [r for r in runs if r.seed in seeds]
    keys = ["model.norm_position", "scheduler.peak_lr"]
    return lr_sweep.arms(group_runs(runs, keys), keys, "scheduler.peak_lr", "val/nll", None)


def _capped(norm: str, seeds) -> np.ndarray:
    """(seeds, rates) by hand: a diverged run counts at INIT, a value above INIT is INIT."""
    return np.array([[min(VALUES[(norm, r)][s - 1] or INIT, INIT) for r in RATES] for s in seeds])


def _sensitivity(matrix: np.ndarray) -> float:
    means = matrix.mean(axis=0)
    return float(np.mean(means - means.min()))


def test_sensitivity_and_its_interval_match_a_hand_computation(sweep):
    """Three seeds: the bootstrap over seeds has 27 equally likely resamples; the 95% percentile
    interval is then the smallest and the largest of their sensitivities (each has probability
    1/27 > 2.5%)."""
    for arm in _arms(sweep, seeds=(1, 2, 3)):
        norm = arm.values["model.norm_position"]
        matrix = _capped(norm, (1, 2, 3))
        result = lr_sweep.sensitivity(arm, goal_max=False)
        assert result.value == pytest.approx(_sensitivity(matrix))
        resamples = [
            _sensitivity(matrix[list(rows)]) for rows in itertools.product(range(3), repeat=3)
        ]
        assert result.ci == pytest.approx((min(resamples), max(resamples)))
        assert result.n_seeds == 3
    post = next(
        a for a in _arms(sweep, seeds=(1, 2, 3)) if a.values["model.norm_position"] == "post"
    )
    assert post.points[-1].values == {1: INIT, 2: INIT, 3: INIT}  # diverged, capped, diverged
    assert post.points[-1].ended_badly == {1, 3}


def test_best_rate_comparison_and_select_seeds(sweep, capsys):
    """Without --select-seeds each arm's best rate is chosen and compared on all seeds (with the
    warning); with --select-seeds 1,2 it is chosen on seeds 1 and 2 and the arms are compared
    on seeds 3 and 4 only. Post's best rate differs: 1e-2 on all four seeds (mean 0.555 against
    0.5575 at 1e-3), 1e-3 on seeds 1 and 2 (0.55 against 0.65)."""
    assert compare.main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert (
        "learning-rate sweep: val/nll against scheduler.peak_lr, arms by model.norm_position" in out
    )
    assert "flatters every arm" in out
    means = {r: statistics.fmean(VALUES[("post", r)]) for r in RATES[:2]}
    best_post = min(means, key=means.get)
    assert best_post == 1e-2
    summary = list(csv.reader(open(sweep / "lr_sweep.csv")))
    rows = {r[0]: r for r in summary[1:]}
    assert float(rows["norm_position=post"][1]) == best_post
    assert float(rows["norm_position=pre"][1]) == 1e-2
    assert float(rows["norm_position=post"][4]) == pytest.approx(
        _sensitivity(_capped("post", (1, 2, 3, 4))), rel=1e-3
    )
    # the comparison at the best rates: post (baseline: the sweep file's first value) vs pre
    pre_line = next(ln for ln in out.splitlines() if ln.startswith("pre "))
    assert pre_line.split()[1] == "4"  # n: all four seeds

    assert compare.main([str(sweep), "--select-seeds", "1,2", "--out", str(sweep / "sel")]) == 0
    out = capsys.readouterr().out
    sel = {r: statistics.fmean(VALUES[("post", r)][:2]) for r in RATES[:2]}  # seeds 1,2 only
    chosen = min(sel, key=sel.get)
    assert chosen == 1e-3
    assert "chosen on seeds 1,2, the arms compared on the other seeds" in out
    rows = {r[0]: r for r in list(csv.reader(open(sweep / "sel" / "lr_sweep.csv")))[1:]}
    assert float(rows["norm_position=post"][1]) == chosen
    pre_line = next(ln for ln in out.splitlines() if ln.startswith("pre "))
    assert pre_line.split()[1] == "2"  # n: seeds 3 and 4, which did not choose the rate
    expected = statistics.fmean(VALUES[("pre", 1e-2)][2:])
    assert float(pre_line.split()[2]) == pytest.approx(expected, rel=1e-3)


def test_the_plot_marks_diverged_runs_and_the_report_leaves_the_trials_alone(sweep, capsys):
    trial = sweep / "pre-lr0.01-s1"
    assert compare.main([str(trial), str(sweep / "pre-lr0.01-s2")]) == 0
    capsys.readouterr()
    assert not (trial / "comparison.md").exists()  # written to the sweep's folder instead
    assert (sweep / "comparison.md").exists()
    assert compare.main([str(sweep)]) == 0
    png = (sweep / "lr_val_nll.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    md = (sweep / "comparison.md").read_text()
    assert "LR sensitivity" in md and "2 diverged" in md and "![lr_val_nll](lr_val_nll.png)" in md


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--x", "model.norm_position"],
            "--x 'model.norm_position' is not a numeric swept key; "
            "expected one of: scheduler.peak_lr",
        ),  # fmt: skip
        (["--select-seeds", ","], "--select-seeds ',' is not valid; expected seeds such as 1,2,3"),
        (["--baseline", "norm_position=sideways"], "matches no group"),
    ],
)
def test_bad_sweep_arguments_are_one_line_and_exit_2(sweep, capsys, argv, message):
    assert compare.main([str(sweep), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_an_ambiguous_baseline_is_one_line(sweep, capsys):
    assert compare.main([str(sweep), "--x", "model.norm_position"]) == 2  # not numeric
    capsys.readouterr()
    argv = [str(sweep), "--x", "peak_lr", "--group-by", "model.norm_position", "--group-by",
            "scheduler.peak_lr", "--group-by", "seed"]  # fmt: skip
    assert compare.main([*argv, "--baseline", "norm_position=pre"]) == 2
    err = capsys.readouterr().err
    assert "matches 4 groups" in err and "add --baseline KEY=VALUE for seed" in err


def test_budget_check_flags_an_arm_still_improving_by_more_than_its_spread(tmp_path, capsys):
    root = tmp_path / "b"
    for seed, value in enumerate((0.50, 0.52, 0.51), start=1):
        _write(root, "post", 1e-3, seed, value, curve_drop=0.2)  # fell 0.2, spread 0.01
        _write(root, "pre", 1e-3, seed, value, curve_drop=0.001)  # fell less than the spread
    assert budget.late_gain([9, 49, 89, 99], [2.0, 1.0, 0.7, 0.5]) == pytest.approx(0.2)
    assert budget.late_gain([99], [0.5]) is None
    assert compare.main([str(root), "--metric", "val/nll"]) == 0
    out = capsys.readouterr().out
    post = [ln for ln in out.splitlines() if ln.startswith("post ")][-1]  # statistics rows
    pre = [ln for ln in out.splitlines() if ln.startswith("pre ")][-1]
    assert post.endswith(budget.NOTE) and pre.endswith(budget.NOTE)  # against a late baseline
    assert "budget: norm_position=post: val/nll still fell by 0.2" in out
    assert "budget: norm_position=pre" not in out
