"""Tables embedded in a markdown report, each under the attnlab-compare command that prints it:

    <!-- attnlab-compare docs/results/heads.csv --metric test/bleu --baseline n_heads=8 -->
    <!-- table: statistics test/bleu -->
    | ... |

`python -m attnlab.cli.embedded docs/REPRODUCTION.md docs/real_text.md` rewrites every such table
from its command (run from the repository root, where the command's paths point); the suite checks
that each embedded table equals what its command prints (tests/test_reproduction_tables.py), so
no number of the report exists only in someone's run folder.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from attnlab.cli import compare

BLOCK = re.compile(
    r"^<!-- attnlab-compare (?P<args>.+?) -->\n<!-- table: (?P<key>.+?) -->\n"
    r"(?P<table>(?:\|.*\n)+)",
    re.MULTILINE,
)


def blocks(text: str) -> list[re.Match]:
    """The embedded tables of a report, in order."""
    return list(BLOCK.finditer(text))


def table_for(args: str, key: str) -> str:
    """The markdown table `key` that `attnlab-compare <args> --markdown` prints."""
    parsed = compare.build_parser().parse_args(shlex.split(args))
    tables = compare.markdown_tables(compare.compare(parsed))
    if key not in tables:
        raise KeyError(f"attnlab-compare {args} prints no table {key!r}; it has {sorted(tables)}")
    return tables[key]


def fill(text: str) -> str:
    """The report with every embedded table regenerated from its command."""

    def one(match: re.Match) -> str:
        head = match.group(0)[: match.start("table") - match.start()]
        return head + table_for(match["args"], match["key"]) + "\n"

    return BLOCK.sub(one, text)


def main(argv: list[str] | None = None) -> None:
    """Regenerate each named report's tables; a missing file or a command that prints no such
    table is one line, exit 2, and that report is left as it was."""
    names = argv if argv is not None else sys.argv[1:]
    if not names:
        sys.exit("usage: python -m attnlab.cli.embedded REPORT.md [...]")
    for name in names:
        path = Path(name)
        try:
            text = fill(path.read_text())
        except (OSError, KeyError, ValueError, SystemExit) as err:
            print(f"attnlab.cli.embedded: error: {path}: {err}", file=sys.stderr)
            sys.exit(2)
        path.write_text(text)
        print(f"{path}: {len(blocks(text))} tables regenerated")


if __name__ == "__main__":
    main()
