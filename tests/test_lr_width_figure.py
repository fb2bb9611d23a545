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


def test_the_heads_contrast_matches_a_hand_computation(script, table, tmp_path):
    """--heads8's named contrast: the widest width's gap with the main table's heads minus the
    gap in a second table (8 heads), each cell's per-seed sensitivities as in the main one."""
    from attnlab.analysis.run_table import read_runs_csv

    path8 = tmp_path / "h8.csv"
    rows = table.read_text().splitlines()
    shift = {"post": 0.2, "pre": 0.0}  # the 8-head table: Post-LN's 0.1 point 0.2 higher
    with open(path8, "w") as f:
        f.write(rows[0] + "\n")
        for line in rows[1:]:
            cells = line.split(",")
            if cells[0] == "64":
                if cells[4] == "0.01":
                    cells[9] = str(float(cells[9]) + shift[cells[1]])
                f.write(",".join(cells) + "\n")
    found = script.readings(read_runs_csv(table), upto=0.1, tol=0.1, low=1e-3)
    found8 = script.readings(read_runs_csv(path8), upto=0.1, tol=0.1, low=1e-3)
    post, pre = ("norm_position=post, warmup_steps=300, qk_norm=false",
                 "norm_position=pre, warmup_steps=300, qk_norm=true")  # fmt: skip
    named, other = script.heads_contrasts(found, found8, post, pre)

    def sens8(norm, seed):
        values = [v + 0.01 * seed * (2 if norm == "post" else 1) for v in SHAPE[64, norm]]
        values[1] += shift[norm]
        return statistics.fmean(v - min(values) for v in values)

    groups = [[_sensitivity(64, "post", s) for s in (1, 2, 3)],
              [_sensitivity(64, "pre", s) for s in (1, 2, 3)],
              [sens8("post", s) for s in (1, 2, 3)],
              [sens8("pre", s) for s in (1, 2, 3)]]  # fmt: skip
    hand = (statistics.fmean(groups[0]) - statistics.fmean(groups[1])
            - statistics.fmean(groups[2]) + statistics.fmean(groups[3]))  # fmt: skip
    assert abs(hand) > 0.1  # the shifted point moved Post-LN's best: the contrast is not 0
    assert named[1][0].endswith("4 heads minus 8 heads") and named[1][2].startswith(f"{hand:.3g} [")
    assert other[1][0].startswith("exploratory") and other[1][1] == "3/3/3/3"
    del found8[post, 64]  # a cell without a reading: one line saying so, the other table kept
    named, other = script.heads_contrasts(found, found8, post, pre)
    assert named == [["(arm - reference) at 64: 4 heads minus 8 heads: a cell has no reading on "
                      "the range"]] and len(other) == 1  # fmt: skip


def test_a_table_without_widths_is_one_line_and_exit_2(script, tmp_path, capsys, monkeypatch):
    path = tmp_path / "one.csv"
    path.write_text("model.norm_position,seed,status,wall_time_s,val/nll\npre,1,completed,1,0.5\n")
    monkeypatch.setattr("sys.argv", ["lr_width_figure.py", str(path)])
    assert script.main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no model.d_model column" in err[0]
