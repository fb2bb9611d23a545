"""scripts/provenance.py: two runs' metrics compared as the report's status column needs them
(identical, or the largest relative difference with its metric; throughput and time ignored);
every section names a sweep file that exists in this checkout; an unknown section is one line,
exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from script_utils import load_script

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    return load_script("provenance")


def test_identical_runs_and_the_largest_difference(script):
    old = {"metrics": {"val/nll": 2.5, "test/nll": 2.4, "train/tokens_per_sec": 900.0,
                       "diag/log_z": 1.0, "only/old": 1.0}}  # fmt: skip
    same = {"metrics": {**old["metrics"], "train/tokens_per_sec": 1200.0, "diag/log_z": 9.0}}
    assert script.compare(old, same) == ("identical", 2, "val 1, test 1")  # no throughput, diag/
    moved = {"metrics": {**old["metrics"], "val/nll": 2.5 * (1 + 1e-3), "test/nll": 2.4001}}
    verdict, n, _ = script.compare(old, moved)
    assert n == 2 and verdict.startswith("differs, largest 0.001 (val/nll: 2.5 vs 2.5025)")


def test_per_length_and_evaluation_metrics_are_compared_and_a_change_is_caught(script):
    """Sections 1a-1e rest on length/* (results.json's "extrapolation"), 3-4 on attnlab-eval's
    scores: both families are compared, and a changed length metric is caught by name."""
    old = {"metrics": {"val/nll": 1.0},
           "extrapolation": {"16": {"greedy_exact_match": 0.5, "reason": "n/a"},
                             "24": {"greedy_exact_match": 0.1}},
           "eval": {"bleu": 3.2, "chrf": 20.1}}  # fmt: skip
    assert script.compare(old, old) == ("identical", 5, "val 1, length 2, eval 2")
    moved = json.loads(json.dumps(old))
    moved["extrapolation"]["24"]["greedy_exact_match"] = 0.2
    verdict, n, _ = script.compare(old, moved)
    assert n == 5 and "length/24/greedy_exact_match: 0.1 vs 0.2" in verdict


def test_every_commit_a_sections_csvs_name_is_checked(script):
    """3c's CSV names c2cecea (four h = 1 rows) beside a62cc91 and cd3b242: all are checked."""
    assert set(script.commits_named("3c")) == {"a62cc91", "cd3b242", "c2cecea"}
    assert set(script.CSVS) == set(script.SECTIONS)
    for names in script.CSVS.values():
        for name in names:
            assert (REPO / "docs" / "results" / f"{name}.csv").is_file(), name


def test_every_section_names_a_sweep_file(script):
    for commit, sweep, indices in script.SECTIONS.values():
        assert indices
        assert (REPO / "sweeps" / f"{sweep}.yaml").is_file(), sweep
        assert len(commit) >= 7


def test_an_unknown_section_is_one_line_and_exit_2(script, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["provenance.py", "--sections", "9z"])
    assert script.main() == 2
    err = capsys.readouterr().err.strip()
    expected = "provenance.py: unknown section '9z'; expected one of: 1a, 1b, 1d, 1e, 1f, 2, 2g,"
    assert err.startswith(expected)
    assert len(err.splitlines()) == 1
