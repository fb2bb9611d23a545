"""Components found by file: a package whose modules are its choices (positional encodings,
synthetic algorithms, tasks) lists them with `module_names`, without importing them, so the config
schema and `attnlab-train --help` stay free of torch. No torch, no harness imports."""

from __future__ import annotations

from pathlib import Path


def module_names(package_file: str, first: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The modules beside `package_file` (a package's __init__.py), but __init__ and base:
    those named in `first` in that order, then the others by name."""
    found = {p.stem for p in Path(package_file).parent.glob("*.py")} - {"__init__", "base"}
    known = [name for name in first if name in found]
    return (*known, *sorted(found - set(known)))
