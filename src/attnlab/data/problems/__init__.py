"""The synthetic problems (attnlab.data.synthetic): what the answer to a random sequence is.

Each problem is one module of this package, named as users pick it (`data=sort` is sort.py),
with a function `target(x, lengths, n_symbols) -> y`. A new problem is a new module here, a
conf/data/<name>.yaml that names it, and its test: the choices (NAMES) are the modules found in
this folder, read without importing them (so the data schema stays free of torch);
`target_of(name)` imports the one a run uses. Either architecture learns any problem: the
model's arch decides the batch format (attnlab.tasks), not the problem.
"""

from __future__ import annotations

import importlib
from pathlib import Path

# The problems the report uses first, then any added later, by name.
_ORDER = ("copy", "reverse", "sort")


def _discover() -> tuple[str, ...]:
    found = {p.stem for p in Path(__file__).parent.glob("*.py")} - {"__init__"}
    known = [name for name in _ORDER if name in found]
    return (*known, *sorted(found - set(known)))


NAMES: tuple[str, ...] = _discover()


def target_of(name: str):
    """The `target` function of problem `name` (one of NAMES); ValueError otherwise."""
    if name not in NAMES:
        raise ValueError(f"data.name={name!r} is not valid; expected one of: {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}").target
