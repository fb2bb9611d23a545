"""scripts/lr_width_figure.py: per width and arm, the LR sensitivity read by attnlab's LR report
(per seed, t interval), the gap to the reference arm and its change with width (a
Welch-Satterthwaite contrast) checked by hand; a table without d_model is one line, exit 2."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest
from scipy import stats

from script_utils import load_script

RATES = (1e-3, 1e-2, 1e-1)
# (width, norm) -> the per-seed values at the three rates: seed s adds 0.01 * s
SHAPE = {(32, "post"): (0.5, 0.1, 2.5), (32, "pre"): (0.3, 0.1, 0.2),
         (64, "post"): (0.9, 0.1, 2.7), (64, "pre"): (0.35, 0.1, 0.2)}  # fmt: skip


@pytest.fixture(scope="module")
def script():
    return load_script("lr_width_figure")


@pytest.fixture
def table(tmp_path) -> Path:
    path = tmp_path / "runs.csv"
    fields = ["model.d_model", "model.norm_position", "scheduler.warmup_steps", "model.qk_norm",
              "scheduler.peak_lr", "seed", "status", "wall_time_s", "git_commit", "val/nll",
              "nll_init"]  # fmt: skip
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for (width, norm), values in SHAPE.items():
            qk = "true" if norm == "pre" else "false"
            for rate, value in zip(RATES, values, strict=True):
                for seed in (1, 2, 3):
                    v = value + (0.01 * seed * (2 if norm == "post" else 1))
                    w.writerow([width, norm, 300, qk, rate, seed, "completed", 1, "c", v, 3.0])
    return path


def _sensitivity(width, norm, seed) -> float:
    factor = 2 if norm == "post" else 1
    row = [v + 0.01 * seed * factor for v in SHAPE[width, norm]]
    return statistics.fmean(v - min(row) for v in row)


def test_gap_and_its_change_with_width_match_a_hand_computation(script, table, capsys):
    from attnlab.analysis.run_table import read_runs_csv

    found = script.readings(read_runs_csv(table), upto=3e-2, tol=0.1)
    post32 = found["norm_position=post, warmup_steps=300, qk_norm=false", 32]
    assert list(post32[0].sensitivity.values()) == pytest.approx(
        [_sensitivity(32, "post", s) for s in (1, 2, 3)]
    )
    assert post32[2] and not found["norm_position=pre, warmup_steps=300, qk_norm=true", 64][2]
    groups = [[_sensitivity(w, n, s) for s in (1, 2, 3)]
              for w, n in ((64, "post"), (64, "pre"), (32, "post"), (32, "pre"))]  # fmt: skip
    value, ci, p = script.contrast(groups, [1, -1, -1, 1])
    hand = statistics.fmean(groups[0]) - statistics.fmean(groups[1])
    hand -= statistics.fmean(groups[2]) - statistics.fmean(groups[3])
    parts = [statistics.variance(g) / 3 for g in groups]
    df = sum(parts) ** 2 / sum(q**2 / 2 for q in parts)
    half = stats.t.ppf(0.975, df) * sum(parts) ** 0.5
    assert value == pytest.approx(hand) and ci == pytest.approx((hand - half, hand + half))
    rows = script.gaps(found, "norm_position=pre, warmup_steps=300, qk_norm=true", "up to 0.03")
    assert rows[1][-2].startswith(f"{hand:.3g} [")
    d = script.contrast_test(groups, [1, -1, -1, 1])  # the df and MDD the named contrast shows
    assert d.df == pytest.approx(df) and d.se == pytest.approx(sum(parts) ** 0.5)
    power = stats.nct.sf(stats.t.ppf(0.975, df), df, d.mdd / d.se)
    power += stats.nct.cdf(-stats.t.ppf(0.975, df), df, d.mdd / d.se)
    assert power == pytest.approx(0.8, abs=1e-4)
    whole = script.readings(read_runs_csv(table), upto=0.1, tol=0.1, low=1e-3)  # all 3 rates
    named = script.named_contrast(whole, "norm_position=post, warmup_steps=300, qk_norm=false",
                                  "norm_position=pre, warmup_steps=300, qk_norm=true")  # fmt: skip
    assert named[1][1:4] == ["3/3/3/3", f"{hand:.3g} [{ci[0]:.3g}, {ci[1]:.3g}]", f"{df:.1f}"]


def test_a_table_without_widths_is_one_line_and_exit_2(script, tmp_path, capsys, monkeypatch):
    path = tmp_path / "one.csv"
    path.write_text("model.norm_position,seed,status,wall_time_s,val/nll\npre,1,completed,1,0.5\n")
    monkeypatch.setattr("sys.argv", ["lr_width_figure.py", str(path)])
    assert script.main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no model.d_model column" in err[0]
