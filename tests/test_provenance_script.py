"""scripts/provenance.py: two runs' metrics compared as the report's status column needs them
(identical, or the largest relative difference with its metric; throughput and time ignored);
every section names a sweep file that exists in this checkout; an unknown section is one line,
exit 2."""

from __future__ import annotations

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
    assert script.compare(old, same) == ("identical", 2)  # throughput and diag/ not compared
    moved = {"metrics": {**old["metrics"], "val/nll": 2.5 * (1 + 1e-3), "test/nll": 2.4001}}
    verdict, n = script.compare(old, moved)
    assert n == 2 and verdict.startswith("differs, largest 0.001 (val/nll: 2.5 vs 2.5025)")


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
