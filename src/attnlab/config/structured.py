"""Hydra structured configs made from the dataclasses that declare the options: one declaration.

The model's options are declared once, in attnlab.model.config.TransformerConfig, in pure Python:
a choice field's type is a `Literal` of its choices. OmegaConf types a structured config's fields
by int, float, bool, str, Enum, list, dict, Optional and nested dataclasses, but not `Literal`.
`structured(cls)` is the one place that bridges the two: it makes an OmegaConf-typed copy of the
dataclass in which each Literal is a `str`, with the same defaults, so composing checks types
and keys (`model.n_heads=two`, `model.n_head=2`) and the choice is checked once, by the class
that declares it, when the run is built (the preflight builds it dry). Nothing is declared a
second time.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any, Literal, Optional, Union, get_args, get_origin, get_type_hints


def _publish(made: type) -> type:
    """Make a class made at run time an attribute of this module, under a unique name, so that
    pickle (which looks classes up by module and qualified name) can find it: a composed config
    pickles as one built from hand-written dataclasses does."""
    module = sys.modules[__name__]
    name, n = made.__name__, 1
    while getattr(module, name, made) is not made:
        n += 1
        name = f"{made.__name__}_{n}"
    made.__qualname__ = name
    setattr(module, name, made)
    return made


def omegaconf_type(tp: Any, field_name: str) -> Any:
    """`tp` as OmegaConf types it: Literal[...] -> str (its owner checks the choice), `X | None`
    -> Optional[X'] (X converted), anything else unchanged."""
    origin = get_origin(tp)
    if origin is Literal:
        return str
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return Optional[omegaconf_type(rest[0], field_name)]  # noqa: UP045 (a runtime type)
    return tp


def structured(
    cls: type,
    name: str,
    drop: tuple[str, ...] = (),
    head: tuple[tuple[str, Any, Any], ...] = (),
    tail: tuple[tuple[str, Any, Any], ...] = (),
    defaults: dict[str, Any] | None = None,
    doc: str | None = None,
) -> type:
    """An OmegaConf structured config with the fields of dataclass `cls` (minus `drop`),
    Literal choices as str; `head` and `tail`: (name, type, default) fields added before and
    after them (the harness's own switches); `defaults`: field -> a default that replaces the
    declared one (an interpolation such as "${seed}")."""
    hints = get_type_hints(cls)
    fields: list[tuple[str, Any, Any]] = list(head)
    for f in dataclasses.fields(cls):
        if f.name in drop:
            continue
        tp = omegaconf_type(hints[f.name], f.name)
        if defaults and f.name in defaults:
            fields.append((f.name, tp, dataclasses.field(default=defaults[f.name])))
        elif f.default_factory is not dataclasses.MISSING:
            fields.append((f.name, tp, dataclasses.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, tp, dataclasses.field(default=f.default)))
    fields += tail
    made = dataclasses.make_dataclass(name, fields)
    made.__doc__ = doc or f"{cls.__module__}.{cls.__qualname__}, typed for OmegaConf."
    made.__module__ = __name__
    return _publish(made)
