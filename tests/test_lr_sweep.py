"""attnlab-compare on a learning-rate sweep: per arm the metric against the rate, the best rate,
the LR sensitivity (Wortsman et al., 2023) per seed with its t interval on the grid and on its
stable range, the basin, the flags and the exact test, the arms compared at their own best rate
(with and without --select-seeds), and the budget check."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from attnlab.analysis import budget, lr_sweep
from attnlab.analysis import lr_sensitivity as ls
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


def _t_interval(x: np.ndarray) -> tuple[float, float]:
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return (x.mean() - half, x.mean() + half)


def _per_seed(matrix: np.ndarray) -> np.ndarray:
    """Each seed's sensitivity: its mean excess over its own best."""
    return (matrix - matrix.min(axis=1, keepdims=True)).mean(axis=1)


def test_sensitivity_per_seed_with_t_interval_basin_and_flags_match_a_hand_computation(sweep):
    """Four seeds: each seed's sensitivity is its mean excess over its own best, the arm's the
    mean with a t interval (3 df); the stable range stops below 1e-1, where post stalls (its mean
    2.875 is above the stall level 0.75 x 3.0); the basin (tol 0.12) and the flag by hand."""
    arms = {a.values["model.norm_position"]: a for a in _arms(sweep)}
    assert lr_sweep.stall_level([r for a in arms.values() for p in a.points for r in p.runs],
                                "val/nll", None) == pytest.approx(0.75 * INIT)  # fmt: skip
    assert arms["post"].points[-1].stalled and not any(p.stalled for p in arms["pre"].points)
    assert arms["post"].points[-1].did_not_train == {2, 4}  # 5.0 and 2.5 completed; 1, 3 diverged
    where = ls.stable_range(list(arms.values()))
    assert (where.lo, where.hi) == (1e-3, 1e-2)
    best_all = ls.best_of_all(list(arms.values()), goal_max=False)
    assert best_all == pytest.approx(statistics.fmean(VALUES[("pre", 1e-2)]))
    for norm, arm in arms.items():
        matrix = _capped(norm, (1, 2, 3, 4))
        grid = ls.read(arm, False, 0.12, best_all)
        assert list(grid.sensitivity.values()) == pytest.approx(_per_seed(matrix).tolist())
        summary = grid.sensitivity_summary
        assert summary.ci == pytest.approx(_t_interval(_per_seed(matrix)))
        part = ls.read(arm, False, 0.12, best_all, where)
        assert list(part.sensitivity.values()) == pytest.approx(_per_seed(matrix[:, :2]).tolist())
        means = matrix.mean(axis=0)
        assert grid.mean_basin == int(np.sum(means - means.min() <= 0.12)) == 2
        assert grid.mean_basin_decades == pytest.approx(1.0)
        assert (
            list(grid.basin.values())
            == np.sum(matrix - matrix.min(axis=1, keepdims=True) <= 0.12, axis=1).tolist()
        )
        assert grid.basin_of_all == int(np.sum(means - best_all <= 0.12))
    assert ls.reaches_divergence(arms["post"]) and not ls.reaches_divergence(arms["pre"])
    d = ls.difference(ls.read(arms["pre"], False, 0.12, best_all).sensitivity,
                      ls.read(arms["post"], False, 0.12, best_all).sensitivity)  # fmt: skip
    welch = stats.ttest_ind(_per_seed(_capped("pre", (1, 2, 3, 4))),
                            _per_seed(_capped("post", (1, 2, 3, 4))), equal_var=False)  # fmt: skip
    assert d.p == pytest.approx(welch.pvalue) and d.test == "welch"


def test_an_arm_without_spread_gets_an_exact_test_with_its_smallest_p():
    """Three equal values against three that vary: the exact permutation test (20 relabellings,
    the observed one the most extreme of each sign: p = 2/20), not a one-sample t-test."""
    from attnlab.analysis import stats as ours

    d = ours.welch([1.0, 1.0, 1.0], [0.2, 0.5, 0.4])
    assert d.p == pytest.approx(0.1) and d.test.startswith("exact")
    assert ours.smallest_p(3, 3) == pytest.approx(0.1) and ours.smallest_p(5, 5) < 0.01
    assert "cannot go below p=0.1" in d.verdict()
    constant = ls.difference({1: 2, 2: 2, 3: 2}, {1: 1, 2: 1, 3: 1})
    assert constant.p == pytest.approx(0.1) and constant.diff == 1
    assert ls.difference({1: 2, 2: 2}, {1: 2, 2: 2}).test == "welch"  # equal constants: no test


def test_lr_range_is_parsed_or_refused_in_one_line():
    assert ls.parse_range("1e-4:3e-2") == ls.Range(1e-4, 3e-2, "--lr-range")
    assert ls.parse_range(":0.01").lo == 0 and ls.parse_range("0.01:").hi == float("inf")
    for bad in ("0.1", "a:b", "0.1:0.01"):
        with pytest.raises(ValueError, match="--lr-range"):
            ls.parse_range(bad)


@pytest.mark.slow
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
    assert "flatters every arm" in out.replace("\n", " ")
    means = {r: statistics.fmean(VALUES[("post", r)]) for r in RATES[:2]}
    best_post = min(means, key=means.get)
    assert best_post == 1e-2
    summary = list(csv.reader(open(sweep / "lr_sweep.csv")))
    rows = {r[0]: r for r in summary[1:]}
    assert float(rows["norm_position=post"][1]) == best_post
    assert float(rows["norm_position=pre"][1]) == 1e-2
    # three rates: no basin to read or test (a basin of "1 (0)" and "no spread: no test" were
    # printed before)
    basin = summary[0].index("basin: rates (decades)")
    assert rows["norm_position=post"][basin] == "needs 5 rates (3 here)"
    md = (sweep / "comparison.md").read_text()
    assert "basin rates, grid" not in md and "sensitivity, grid: diff" in md
    sensitivity = float(rows["norm_position=post"][3].split(" [")[0])
    assert sensitivity == pytest.approx(_per_seed(_capped("post", (1, 2, 3, 4))).mean(), rel=1e-3)
    # the comparison at the best rates: post (baseline: the sweep file's first value) vs pre
    pre_line = [ln for ln in out.splitlines() if ln.startswith("pre ")][-1]  # the last table's
    assert pre_line.split()[1] == "4"  # n: all four seeds

    assert compare.main([str(sweep), "--select-seeds", "1,2", "--out", str(sweep / "sel")]) == 0
    out = capsys.readouterr().out
    sel = {r: statistics.fmean(VALUES[("post", r)][:2]) for r in RATES[:2]}  # seeds 1,2 only
    chosen = min(sel, key=sel.get)
    assert chosen == 1e-3
    assert "chosen on seeds 1,2, the arms compared on the other seeds" in out.replace("\n", " ")
    rows = {r[0]: r for r in list(csv.reader(open(sweep / "sel" / "lr_sweep.csv")))[1:]}
    assert float(rows["norm_position=post"][1]) == chosen
    pre_line = [ln for ln in out.splitlines() if ln.startswith("pre ")][-1]
    assert pre_line.split()[1] == "2"  # n: seeds 3 and 4, which did not choose the rate
    expected = statistics.fmean(VALUES[("pre", 1e-2)][2:])
    assert float(pre_line.split()[2]) == pytest.approx(expected, rel=5e-3)  # 3 digits shown


@pytest.mark.slow
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
        (["--lr-range", "0.1"], "--lr-range '0.1' is not LO:HI, e.g. 1e-4:3e-2"),
        (["--tol", "-1"], "--tol -1: expected a tolerance >= 0"),
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


@pytest.mark.slow
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
    assert post.endswith("(†)") and pre.endswith("(†)")  # pre: against a late baseline
    assert out.count(budget.NOTE) == 1 and f"(†) {budget.NOTE}" in out  # once, below the table
    assert "budget: norm_position=post: val/nll still fell by 0.2" in out
    assert "budget: norm_position=pre" not in out


@pytest.mark.slow
def test_a_diagnostic_gets_its_curve_against_the_rate_without_loss_semantics(sweep, capsys):
    """--metric diag/...: the curve table and plot, no best rate, sensitivity, cap or
    comparison at a best rate (a logit is not a loss: its smallest value is no 'best')."""
    for results in sweep.glob("*/results.json"):
        record = json.loads(results.read_text())
        record["metrics"]["diag/attn_logit_max"] = 10.0 * record["config"]["scheduler"]["peak_lr"]
        results.write_text(json.dumps(record))
    assert compare.main([str(sweep), "--metric", "diag/attn_logit_max"]) == 0
    out = capsys.readouterr().out.replace("\n", " ")  # headings are wrapped at 100 columns
    assert "a diagnostic, not a loss, so no best rate, LR sensitivity, cap" in out
    for absent in ("LR sensitivity (Wortsman", "best peak_lr", "at their own best"):
        assert absent not in out
    assert "| 0.01 (n=4) |" in (sweep / "comparison.md").read_text().replace(" ± 0", "")
    assert (sweep / "lr_diag_attn_logit_max.png").is_file()


def _fake_arms(**values_of) -> list:
    """Arms over every combination of the given keys' values, each with one point."""
    import itertools

    keys = list(values_of)
    point = lr_sweep.RatePoint(1e-2, {1: 0.5})
    return [lr_sweep.Arm(dict(zip(keys, combo, strict=True)), [point])
            for combo in itertools.product(*values_of.values())]  # fmt: skip


@pytest.mark.slow
def test_many_arms_are_drawn_on_panels_split_by_the_key_that_keeps_each_readable(tmp_path):
    """At most MAX_ARMS_PER_AXES curves an axes: 5 arms on one; 10 (2 x 5) split by the first key
    (5 each); 20 (2 x 10) by the second (2 each), since the first leaves 10 on an axes; 8 of one
    key in chunks of 6 and 2. The panels' figure is drawn, wider than one axes."""
    assert lr_sweep.MAX_ARMS_PER_AXES == 6
    key, shares = lr_sweep.panels(_fake_arms(a=[1, 2, 3, 4, 5]), ["a"])
    assert key is None and [len(s) for _, s in shares] == [5]
    key, shares = lr_sweep.panels(_fake_arms(n=["pre", "post"], h=[1, 2, 4, 8, 16]), ["n", "h"])
    assert key == "n" and [(t, len(s)) for t, s in shares] == [("n=pre", 5), ("n=post", 5)]
    key, shares = lr_sweep.panels(_fake_arms(n=["pre", "post"], h=list(range(10))), ["n", "h"])
    assert key == "h" and [len(s) for _, s in shares] == [2] * 10
    key, shares = lr_sweep.panels(_fake_arms(h=list(range(8))), ["h"])
    assert key is None and [len(s) for _, s in shares] == [6, 2]
    from PIL import Image

    arms = _fake_arms(n=["pre", "post"], h=[1, 2, 4, 8, 16])
    path = tmp_path / "lr.png"
    assert lr_sweep.plot(arms, ["n", "h", "lr"], "lr", "val/nll", path)
    one = tmp_path / "one.png"
    assert lr_sweep.plot(arms[:5], ["n", "h", "lr"], "lr", "val/nll", one)
    assert Image.open(path).size[0] > Image.open(one).size[0]
