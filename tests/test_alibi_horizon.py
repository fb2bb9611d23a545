"""scripts/alibi_horizon.py: the horizon is the longest length before exact match first falls
below 0.5, per seed; the table reads attnlab-compare's CSV; a missing file is one line, exit 2."""

from __future__ import annotations

import math

import pytest

from script_utils import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("alibi_horizon")


@pytest.mark.parametrize(
    ("curve", "expected"),
    [
        ({4: 1.0, 8: 1.0, 12: 0.99, 16: 0.6, 24: 0.49, 32: 0.7}, 16),  # not past the first fall
        ({4: 1.0, 8: 0.5, 12: 0.2}, 8),  # 0.5 itself counts
        ({4: 0.4, 8: 1.0}, 0),
        ({12: 1.0, 4: 1.0, 48: 0.9, 24: 0.8, 32: 0.6, 8: 1.0, 16: 1.0}, 48),  # order of keys
    ],
)
def test_horizon_is_the_last_length_before_the_first_fall(script, curve, expected):
    assert script.horizon(curve) == expected


def test_the_table_reads_the_runs_csv(script, tmp_path):
    rows = [
        "model.pos_encoding,model.n_decoder_layers,model.d_model,seed,status,"
        "length/12/greedy_exact_match,length/24/greedy_exact_match",
        "alibi,2,64,1,completed,1.0,0.8",
        "alibi,2,64,2,completed,1.0,0.6",
        "alibi,2,64,3,failed,,",
        "none,4,128,1,completed,0.9,0.0",
    ]
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(rows) + "\n")
    arms = script.read_runs(path)
    assert arms == {
        ("alibi", 2, 64): [{12: 1.0, 24: 0.8}, {12: 1.0, 24: 0.6}],
        ("none", 4, 128): [{12: 0.9, 24: 0.0}],
    }
    mean, half = script.mean_interval([0.8, 0.6])
    assert mean == pytest.approx(0.7) and half == pytest.approx(12.706 * 0.1, rel=1e-3)
    assert math.isnan(script.mean_interval([0.5])[1])
    line = next(r for r in script.table(arms) if r.startswith("| alibi"))
    assert "| 2 | 24, 24 |" in line  # two seeds, each a horizon of 24


def test_a_missing_csv_is_one_line_and_exit_2(script, tmp_path, capsys):
    assert script.main([str(tmp_path / "nope.csv")]) == 2
    assert (
        capsys.readouterr().err == f"alibi_horizon: error: {tmp_path / 'nope.csv'} is not a file\n"
    )
