"""`_target_` strings resolved to what they name: the one home of the rule, for every check that
reads a config's `_target_` before the run builds it (the run builds with Hydra's `instantiate`,
which finds the same objects)."""

from __future__ import annotations

import importlib


def locate(target) -> object:
    """The class or function that `target` ("package.module.Name", attributes allowed after the
    module) names; ValueError with one line saying why not: the longest importable module
    prefix is imported, then the attributes are read."""
    parts = str(target).split(".") if isinstance(target, str) else []
    for i in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:i])
        try:
            obj = importlib.import_module(prefix)
        except ModuleNotFoundError as err:
            if err.name and (prefix + ".").startswith(err.name + "."):
                continue  # no such module: try a shorter prefix
            raise ValueError(f"cannot be imported ({type(err).__name__}: {err})") from None
        except Exception as err:  # the module exists and fails to import
            raise ValueError(f"cannot be imported ({type(err).__name__}: {err})") from None
        for name in parts[i:]:
            obj = getattr(obj, name, None)
            if obj is None:
                raise ValueError(f"cannot be found (module {prefix!r} has no {name!r})")
        if not callable(obj):
            raise ValueError("is not a class or function")
        return obj
    raise ValueError("cannot be imported")


def target_problem(target) -> str | None:
    """Why `target` cannot be built (locate's line), or None."""
    try:
        locate(target)
    except ValueError as err:
        return str(err)
    return None


def located_class(target) -> type | None:
    """The class `target` names, or None (not a string, not found, or not a class)."""
    try:
        obj = locate(target)
    except ValueError:
        return None
    return obj if isinstance(obj, type) else None
