"""Numbers and tables as attnlab prints them: one format for attnlab-compare and the sweep
summaries (console text and markdown)."""

from __future__ import annotations

import json
import math
import re
from typing import Any


def fmt_value(value: Any) -> str:
    """A config value in a table: null, true/false, compact JSON for lists and dicts."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def fmt_number(value: float | None) -> str:
    """A metric in a table: 4 significant digits; '' for none; nan / inf as such."""
    if value is None:
        return ""
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def fmt_mean_std(mean: float | None, std: float | None, n: int) -> str:
    """'0.512 ± 0.03 (n=3)'; '' when no run has the value."""
    if not n:
        return ""
    cell = fmt_number(mean) + (f" ± {fmt_number(std)}" if std is not None else "")
    return f"{cell} (n={n})"


def text_table(rows: list[list[str]]) -> str:
    """Rows (the first is the header) as aligned console text with a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(rows: list[list[str]]) -> str:
    """Rows (the first is the header) as a markdown table, '|' escaped."""
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("---" for _ in rows[0]) + "|")
    return "\n".join(lines)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def sig3(text: str, digits: int = 3) -> str:
    """Every number of a cell to 3 (`digits`) significant digits: 1.388 [1.226, 1.549] -> 1.39
    [1.23, 1.55]."""
    return _NUMBER.sub(lambda m: f"{float(m.group()):.{digits}g}", text)


CONSOLE_WIDTH = 120


def fit_console(rows: list[list[str]], n_keys: int) -> tuple[list[list[str]], str | None]:
    """A table whose first n_keys columns name the arm, narrowed for the console until its text
    fits CONSOLE_WIDTH: as it is when it fits; else those columns merged into one, "arm", the
    values joined by '/'; and if that is still too wide, the figures of the other cells to 2
    significant digits. The note says what was done (None when nothing was)."""

    def fits(table: list[list[str]]) -> bool:
        return max(map(len, text_table(table).splitlines())) <= CONSOLE_WIDTH

    if fits(rows):
        return rows, None
    notes = []
    if n_keys >= 2:
        notes.append("arm: " + "/".join(rows[0][:n_keys]))
        rows = [["arm", *rows[0][n_keys:]]] + [
            ["/".join(r[:n_keys]), *r[n_keys:]] for r in rows[1:]
        ]
        n_keys = 1
    if not fits(rows):
        rows = [rows[0], *([*r[:1], *(sig3(c, 2) for c in r[1:])] for r in rows[1:])]
        notes.append("figures to 2 significant digits (comparison.md has them all)")
    return rows, "; ".join(notes)


def console_lines(text: str) -> str:
    """Prose for the console wrapped at CONSOLE_WIDTH (continuation lines indented)."""
    import textwrap

    return textwrap.fill(text, CONSOLE_WIDTH, subsequent_indent="  ", break_on_hyphens=False)
