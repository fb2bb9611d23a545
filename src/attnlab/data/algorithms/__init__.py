"""The synthetic algorithms (attnlab.data.synthetic): what the answer to a random sequence is.

(An "algorithm" here: copy, reverse, sort, shift. A "task" is a batch format, attnlab.tasks; a
"problem" is a one-line error message, attnlab.problems.)

Each algorithm is one module of this package, named as users pick it (`data=sort` is sort.py),
with a function `target(x, lengths, n_symbols) -> y`. A new algorithm is a new module here, a
conf/data/<name>.yaml that names it, and its test: the choices (NAMES) are the modules found in
this folder, read without importing them (so the data schema stays free of torch);
`target_of(name)` imports the one a run uses. Either architecture learns any algorithm: the
model's arch decides the batch format (attnlab.tasks), not the algorithm.
"""

from __future__ import annotations

import importlib

from attnlab.components import module_names

# The algorithms the report uses first, then any added later, by name.
NAMES: tuple[str, ...] = module_names(__file__, ("copy", "reverse", "sort"))


def target_of(name: str):
    """The `target` function of algorithm `name` (one of NAMES); ValueError otherwise."""
    if name not in NAMES:
        raise ValueError(f"data.name={name!r} is not valid; expected one of: {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}").target
