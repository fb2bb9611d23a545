"""attnlab-compare's statistics: intervals, Welch and paired tests, Holm, the minimum detectable
difference, the verdict's wording, the sweep planner, and runs.csv as a recomputable input."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from attnlab.analysis import report, stats
from attnlab.cli import compare

REPO = Path(__file__).resolve().parents[1]

# The first run of docs/REPRODUCTION.md section 3 (2026-11-20): test BLEU per seed, h = 1 and 8.
H1 = [27.13, 27.6, 28.77]
H8 = [27.75, 27.96, 28.41]


def test_interval_of_a_mean_is_students_t():
    s = stats.summarize([1.0, 2.0, 4.0])
    half = sps.t.ppf(0.975, 2) * np.std([1, 2, 4], ddof=1) / math.sqrt(3)
    assert s.n == 3 and s.mean == pytest.approx(7 / 3)
    assert s.ci == pytest.approx((7 / 3 - half, 7 / 3 + half))
    assert stats.summarize([5.0]).ci is None and stats.summarize([]).n == 0


def test_welch_difference_interval_and_p_on_the_heads_table():
    """The reviewer's figures for h = 1 against h = 8: -0.21 BLEU, p about 0.7."""
    d = stats.welch(H1, H8)
    assert d.diff == pytest.approx(-0.2067, abs=1e-4)
    assert d.p == pytest.approx(sps.ttest_ind(H1, H8, equal_var=False).pvalue)
    assert 0.7 < d.p < 0.75 and d.ci[0] < d.diff < d.ci[1] and d.ci[0] < 0 < d.ci[1]
    # Welch-Satterthwaite interval, written out
    va, vb = np.var(H1, ddof=1) / 3, np.var(H8, ddof=1) / 3
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    half = sps.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert d.ci == pytest.approx((d.diff - half, d.diff + half))


def test_minimum_detectable_difference_has_80_percent_power_by_simulation():
    """Draw many experiments whose true difference is the MDD: about 80% are detected."""
    rng = np.random.default_rng(0)
    sd, n = 1.0, 4
    pilot_a, pilot_b = rng.normal(0, sd, n), rng.normal(0, sd, n)
    d = stats.welch(list(pilot_a), list(pilot_b))
    se = math.sqrt(np.var(pilot_a, ddof=1) / n + np.var(pilot_b, ddof=1) / n)
    # simulate with the pilot's own spreads, so that the standard error is the one assumed
    sa, sb = np.std(pilot_a, ddof=1), np.std(pilot_b, ddof=1)
    trials = 20_000
    a = rng.normal(d.mdd, sa, (trials, n))
    b = rng.normal(0.0, sb, (trials, n))
    detected = sps.ttest_ind(a, b, axis=1, equal_var=False).pvalue < 0.05
    assert se > 0 and detected.mean() == pytest.approx(0.8, abs=0.03)


def test_a_familys_detectable_difference_is_at_the_alpha_its_verdict_uses():
    """Across m tested arms the MDD is at alpha 0.05 / m (Holm's strictest step): a direct
    noncentral-t power at it is 80%, it is larger than one comparison's, and it is the figure
    the planner inverts for the same design (n seeds per arm, the same spread)."""
    a, b, c = [1.0, 1.4, 0.7, 1.2], [0.0, 0.5, -0.3, 0.2], [0.3, 0.1, 0.6, -0.2]
    alone = stats.welch(a, b)
    family = stats.with_holm([alone, stats.welch(c, b), None])
    d = family[0]
    assert d.alpha == pytest.approx(0.025) and family[2] is None
    crit = sps.t.ppf(1 - 0.025 / 2, d.df)  # two-sided at 0.025, Welch's df
    nc = d.mdd / d.se
    assert sps.nct.sf(crit, d.df, nc) + sps.nct.cdf(-crit, d.df, nc) == pytest.approx(0.8)
    assert d.mdd > alone.mdd and d.p_holm == pytest.approx(stats.holm([d.p, family[1].p])[0])
    # the planner at the same design: equal spreads, n per arm, 2 comparisons, alpha 0.025
    same = [0.0, 1.0, 2.0, 3.0]
    fam = stats.with_holm([stats.welch([x + 5 for x in same], same)] * 2)[0]
    plan = stats.seeds_needed([same, same], fam.mdd, comparisons=2)
    assert plan.seeds_per_arm == 4 and plan.power == pytest.approx(0.8, abs=1e-4)


def test_equivalence_is_two_one_sided_tests_and_refused_where_the_interval_crosses_the_margin():
    """TOST within +-margin on Welch's test: p is the larger of scipy's two one-sided Welch
    tests on the shifted arm; the 90% interval inside the margin is the same decision; a
    margin the interval crosses is refused ('not shown equivalent'), whatever the p of the
    ordinary test (here p = 0.7: no difference detected is not equivalence)."""
    a, b = [31.82, 31.95, 32.02, 31.88], [31.90, 31.79, 32.01, 31.93]
    for margin in (0.3, 0.05):
        e = stats.tost(stats.welch(a, b), margin)
        shifted = [x + margin for x in a], [x - margin for x in a]
        above = sps.ttest_ind(shifted[0], b, equal_var=False, alternative="greater").pvalue
        below = sps.ttest_ind(shifted[1], b, equal_var=False, alternative="less").pvalue
        assert e.p == pytest.approx(max(above, below))
        assert (e.p < 0.05) == (-margin < e.ci90[0] and e.ci90[1] < margin)
    assert stats.tost(stats.welch(a, b), 0.3).verdict().startswith("equivalent within +-0.3 (p=")
    wide = stats.tost(stats.welch(a, b), 0.05)
    assert stats.welch(a, b).p > 0.5 and wide.verdict().startswith(
        "not shown equivalent within +-0.05: the 90% interval ["
    )
    paired = stats.tost(stats.paired(dict(enumerate(a)), dict(enumerate(b))), 0.3)
    d = [x - y for x, y in zip(a, b, strict=True)]
    assert paired.p == pytest.approx(max(
        sps.ttest_1samp(d, -0.3, alternative="greater").pvalue,
        sps.ttest_1samp(d, 0.3, alternative="less").pvalue))  # fmt: skip
    assert stats.tost(stats.welch([1.0, 1.0], [2.0, 2.0]), 0.3) is None  # no spread: no test
    holm = stats.tost_with_holm([wide, None, stats.tost(stats.welch(a, b), 0.3)])
    assert holm[1] is None and holm[0].p_holm == pytest.approx(min(1, wide.p))
    with pytest.raises(ValueError, match="margin must be > 0"):
        stats.tost(stats.welch(a, b), 0.0)


def test_paired_test_uses_per_seed_differences_and_needs_the_same_seeds():
    arm, base = {1: 1.0, 2: 2.0, 3: 3.5}, {1: 0.5, 2: 1.2, 3: 3.0}
    d = stats.paired(arm, base)
    assert d.p == pytest.approx(sps.ttest_rel([1.0, 2.0, 3.5], [0.5, 1.2, 3.0]).pvalue)
    assert d.p < stats.welch(list(arm.values()), list(base.values())).p  # seeds shared
    with pytest.raises(ValueError, match="same seeds"):
        stats.paired({1: 1.0, 2: 2.0}, {1: 1.0, 3: 2.0})


def test_holm_step_down():
    assert stats.holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert stats.holm([0.9, 0.8]) == [1.0, 1.0]


def test_the_verdict_is_worded_by_the_tool():
    up = stats.Difference(1.0, (0.5, 1.5), 0.012, 0.4, "welch")
    down = stats.Difference(-1.0, (-1.5, -0.5), 0.2, 0.4, "welch", p_holm=0.03)
    null = stats.Difference(0.1, (-2.0, 2.2), 0.7, 1.94, "welch")
    assert up.verdict() == "higher (p=0.012)"
    assert down.verdict() == "lower (p=0.03)"  # Holm's p decides when there is one
    assert null.verdict() == "no difference detected; this n would miss differences under 1.94"


def test_groups_without_spread_get_no_invented_p_and_are_left_out_of_holm():
    """0.999 in every seed against 1.0 in every seed: no t-test exists (zero variance), so no p
    (it used to be 0, worded 'lower (p<0.001)'); the verdict says what the seeds show."""
    d = stats.welch([0.999] * 3, [1.0] * 3)
    assert math.isnan(d.p) and d.mdd is None and stats.fmt_p(d.p) == ""
    assert d.verdict() == "lower in every seed (no spread between seeds: no test)"
    assert stats.welch([1.0] * 3, [1.0] * 3).verdict() == (
        "no difference detected (no spread between seeds)"
    )
    tested = stats.welch(H1, H8)
    flat, adjusted = stats.with_holm([d, tested])
    assert math.isnan(flat.p_holm or math.nan) and adjusted.p_holm == pytest.approx(tested.p)


def test_planner_asks_for_the_seeds_the_reviewer_computed():
    """h = 1 vs h = 8 spreads: about 10 seeds per arm to see the paper's 0.9 BLEU."""
    plan = stats.seeds_needed([H1, H8], 0.9)
    assert plan.seeds_per_arm == 10 and plan.power >= 0.8
    n, s = plan.seeds_per_arm - 1, plan.pooled_std
    assert stats._power(0.9, s * math.sqrt(2 / n), 2 * n - 2) < 0.8  # one fewer is not enough
    with pytest.raises(ValueError, match="--plan"):
        stats.seeds_needed([H1, H8], 0.0)


def _write_runs(root: Path, values: dict, metric="test/bleu", wall=60.0) -> None:
    for (h, seed), value in values.items():
        run = root / f"h{h}-s{seed}"
        run.mkdir(parents=True)
        record = {
            "status": "completed",
            "metrics": {metric: value, "val/nll_best": 2.0 + value / 100},
            "config": {"model": {"n_heads": h}, "seed": seed, "run_name": f"h{h}-s{seed}"},
            "seed": seed,
            "wall_time_s": wall,
            "git_commit": "abc1234",
            "extrapolation": {"16": {"greedy_exact_match": value / 100}},
        }
        (run / "results.json").write_text(json.dumps(record))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    values = {(1, s): v for s, v in zip((1, 2, 3), H1, strict=True)}
    values |= {(8, s): v for s, v in zip((1, 2, 3), H8, strict=True)}
    values |= {(16, s): v for s, v in zip((1, 2, 3), (20.1, 20.4, 19.8), strict=True)}
    _write_runs(root, values)
    return root


@pytest.mark.slow
def test_compare_prints_and_writes_interval_p_and_detectable_difference(sweep, tmp_path, capsys):
    out = tmp_path / "report"
    argv = [str(sweep), "--metric", "test/bleu", "--baseline", "model.n_heads=8", "--out", str(out)]
    assert compare.main(argv) == 0
    printed = capsys.readouterr().out
    assert "against n_heads=8" in printed and "Holm's correction across 2 arms" in printed
    assert "not detected, MDD 3." in printed  # the console's short verdict, at alpha 0.05/2
    assert "lower (p<0.001)" in printed  # h = 16 is 8 BLEU below
    assert max(len(line) for line in printed.splitlines() if "[" in line) <= 120
    with open(out / "comparison.csv", newline="") as f:
        rows = {r["model.n_heads"]: r for r in csv.DictReader(f)}
    assert rows["8"]["test/bleu_p"] == "" and rows["8"]["test/bleu_verdict"] == ""
    assert float(rows["1"]["test/bleu_p"]) == pytest.approx(stats.welch(H1, H8).p)
    assert rows["16"]["test/bleu_verdict"] == "lower (p<0.001)"
    # no `primary:` in the sweep file: every comparison is exploratory, and says so
    assert {r["test/bleu_role"] for r in rows.values()} == {report.EXPLORATORY}
    assert f"test/bleu ({report.EXPLORATORY})" in printed.replace("\n", " ")
    md = (out / "comparison.md").read_text()
    assert "## Statistics" in md and "MDD (80% power, alpha 0.025)" in md
    assert compare.main([*argv, "--equivalence", "1.5"]) == 0  # TOST beside the Welch table
    printed = capsys.readouterr().out
    assert "test/bleu (exploratory: not named in the sweep file before the runs): equivalence " \
           "to n_heads=8 within +-1.5" in printed.replace("\n  ", " ")  # fmt: skip
    assert "not shown equivalent within +-1.5" in printed  # h = 16, 8 BLEU below
    md = (out / "comparison.md").read_text()
    assert "| model.n_heads | n | diff vs n_heads=8 | 90% CI of diff | p (TOST, +-1.5) |" in md
    assert float(rows["1"]["test/bleu_mdd"]) == pytest.approx(stats.with_holm(
        [stats.welch(H1, H8), stats.welch((20.1, 20.4, 19.8), H8)])[0].mdd)  # fmt: skip


@pytest.mark.slow
def test_runs_csv_regenerates_the_same_statistics(sweep, tmp_path, capsys):
    """runs.csv is the recomputable form: compare on it prints the same tables as on the runs."""
    argv = ["--metric", "test/bleu", "--baseline", "n_heads=8", "--columns", "length/16/*", "--all"]
    assert compare.main([str(sweep), *argv, "--out", str(tmp_path / "a")]) == 0
    from_runs = capsys.readouterr().out
    table = tmp_path / "a" / "runs.csv"
    header = table.read_text().splitlines()[0].split(",")
    assert header[:5] == ["model.n_heads", "seed", "status", "wall_time_s", "git_commit"]
    assert "length/16/greedy_exact_match" in header and "test/bleu" in header
    assert compare.main([str(table), *argv, "--out", str(tmp_path / "b")]) == 0
    from_csv = capsys.readouterr().out

    def tables(text):  # all but the files written (the last lines) and the plot's fallback
        return [line for line in text.split("\nwrote ")[0].splitlines()
                if not line.startswith("no val")]  # fmt: skip

    assert tables(from_runs) == tables(from_csv)
    assert "length/16/greedy_exact_match" in from_csv
    from attnlab.analysis.run_table import read_runs_csv

    assert {r.git_commit for r in read_runs_csv(table)} == {"abc1234"}  # provenance kept


def test_planner_prints_seeds_runs_and_compute(sweep, capsys):
    assert compare.main([str(sweep), "--metric", "test/bleu", "--plan", "0.9"]) == 0
    out = capsys.readouterr().out
    plan = stats.seeds_needed([H1, H8, [20.1, 20.4, 19.8]], 0.9, comparisons=2)
    assert "in each of 2 comparisons against a baseline, Holm-corrected" in out
    assert f"at the pilot's spread: {plan.seeds_per_arm} seeds per arm" in out
    runs = 3 * plan.seeds_per_arm
    assert f"{runs} runs ({runs - 9} more than the pilot) x 1.0 min per run" in out
    assert f"{runs * 60 / 3600:.2f} h of run time" in out
    assert f"{plan.seeds_per_arm_upper} seeds per arm" in out
    assert not (sweep / "comparison.md").exists()  # the planner writes nothing


def test_planner_counts_the_comparisons_holm_will_correct_for():
    """docs/REPRODUCTION.md section 3's pilot (h = 1, 4, 8, 16; 3 seeds each): 9 seeds per arm
    for 0.9 BLEU at alpha 0.05, but its three arms are tested against h = 8 under Holm, whose
    smallest p must beat 0.05 / 3: 12 seeds, and 19 at the upper 80% bound of the spread (a
    3-seed pilot's std is itself uncertain). The planner used to answer 9."""
    from attnlab.analysis.run_table import read_runs_csv

    runs = read_runs_csv(Path(__file__).resolve().parents[1] / "docs/results/heads.csv")
    by_h: dict = {}
    for run in runs:
        by_h.setdefault(run.config["model.n_heads"], []).append(run.metrics["test/bleu"])
    one = stats.seeds_needed(list(by_h.values()), 0.9)
    holm = stats.seeds_needed(list(by_h.values()), 0.9, comparisons=3)
    assert (one.seeds_per_arm, holm.seeds_per_arm) == (9, 12)
    assert (one.seeds_per_arm_upper, holm.seeds_per_arm_upper) == (14, 19)
    assert holm.alpha == pytest.approx(0.05 / 3) and holm.pooled_df == 8
    chi2_bound = holm.pooled_std * math.sqrt(8 / 4.59357)  # chi2.ppf(0.2, 8) = 4.59357
    assert holm.std_upper == pytest.approx(chi2_bound, rel=1e-4)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baseline", "model.n_heads=3"], "matches no group; the groups: n_heads=1; n_heads=8"),
        (["--baseline", "model.d_model=3"], "expected KEY=VALUE with KEY one of: model.n_heads"),
        (["--paired", "--baseline", "n_heads=8"], "a paired test needs the same seeds"),
        (["--plan", "-1"], "--plan -1.0 is not valid; expected a difference > 0"),
        (["--equivalence", "0"], "--equivalence 0 is not valid; expected a margin > 0"),
    ],
)
def test_bad_statistics_arguments_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    root = tmp_path / "sweep"
    _write_runs(root, {(1, 1): 1.0, (1, 2): 2.0, (8, 3): 1.5, (8, 4): 2.5})
    assert compare.main([str(root), "--metric", "test/bleu", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_a_file_that_is_not_a_runs_table_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert compare.main([str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"attnlab-compare: error: {bad}: not a runs table; expected the columns "
        "seed, status, wall_time_s"
    )


def test_a_console_table_wider_than_120_merges_its_arm_columns_and_says_which():
    """The LR width study's statistics table (four arm keys) as compare printed it: 144 columns,
    merged to one 'arm' column it fits."""
    from attnlab.analysis.tables import CONSOLE_WIDTH, fit_console, text_table

    keys = ["d_model", "norm_position", "warmup_steps", "qk_norm"]
    rows = [[*keys, "n", "mean [95% CI]", "diff [95% CI]", "p (Holm)", "verdict"]]
    rows += [["32", "post", "300", "false", "2", "0.00164 [-0.00648, 0.00976]",
              "-1.37 [-1.9, -0.838]", "0.15", "not detected, MDD 0.683 (†)"],
             ["128", "pre", "0", "true", "2", "0.0191 [0.00761, 0.0305]",
              "-1.35 [-1.88, -0.821]", "0.15", "not detected, MDD 0.683 (†)"]]  # fmt: skip
    assert max(map(len, text_table(rows).splitlines())) > CONSOLE_WIDTH
    narrow, note = fit_console(rows, 4)
    assert narrow[0][:2] == ["arm", "n"] and [r[0] for r in narrow[1:]] == [
        "32/post/300/false", "128/pre/0/true"]  # fmt: skip
    assert note == "arm: d_model/norm_position/warmup_steps/qk_norm"
    assert max(map(len, text_table(narrow).splitlines())) <= CONSOLE_WIDTH
    fits = [r[:2] + r[4:] for r in rows]
    assert fit_console(fits, 2) == (fits, None)  # one that fits is left as it is
    wide = [["pos_encoding", "n", "mean [95% CI]", "diff [95% CI]", "verdict"],
            ["learned", "3", "2.07e-05 [2.45e-06, 3.89e-05]", "7.32e-06 [-1.03e-05, 2.5e-05]",
             "not detected, MDD 2.33e-05 (†)" + " " * 40]]  # fmt: skip
    fitted, note = fit_console(wide, 1)  # one key: nothing to merge, so 2 significant digits
    assert fitted[1][:4] == [
        "learned",
        "3",
        "2.1e-05 [2.4e-06, 3.9e-05]",
        "7.3e-06 [-1e-05, 2.5e-05]",
    ]
    assert note == "figures to 2 significant digits (comparison.md has them all)"
