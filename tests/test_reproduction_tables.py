"""Every embedded table of docs/REPRODUCTION.md and docs/real_text.md regenerates from its CSV
under docs/results/: each sits under the attnlab-compare command that prints it
(attnlab.cli.embedded), and this test runs that command on the committed CSV and finds the same
table, figure for figure."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from attnlab.cli import embedded

REPO = Path(__file__).resolve().parents[1]
REPORT = REPO / "docs" / "REPRODUCTION.md"
REPORTS = (REPORT, REPO / "docs" / "real_text.md")
BLOCKS = [block for report in REPORTS for block in embedded.blocks(report.read_text())]


def test_the_report_embeds_its_tables_and_every_csv_is_used():
    assert len(BLOCKS) >= 8
    used = {Path(p) for b in BLOCKS for p in shlex.split(b["args"]) if p.endswith(".csv")}
    committed = {p.relative_to(REPO) for p in (REPO / "docs" / "results").glob("*.csv")}
    assert used == committed, "every CSV backs a table, and every table names its CSV"


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b['args']} [{b['key']}]")
def test_each_table_regenerates_from_its_csv(block, monkeypatch):
    monkeypatch.chdir(REPO)
    assert embedded.table_for(block["args"], block["key"]) == block["table"].rstrip("\n")


def test_a_changed_figure_is_found(monkeypatch):
    """The check can fail: one digit changed in an embedded table is a mismatch."""
    monkeypatch.chdir(REPO)
    block = BLOCKS[0]
    table = block["table"].rstrip("\n")
    digit = next(i for i, ch in enumerate(table) if ch.isdigit() and i > table.index("\n|---"))
    changed = table[:digit] + str((int(table[digit]) + 1) % 10) + table[digit + 1 :]
    assert embedded.table_for(block["args"], block["key"]) != changed


def test_a_missing_report_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        embedded.main([str(tmp_path / "nope.md")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.md" in err and "Traceback" not in err
