"""Hydra structured configs made from the dataclasses that declare the options: one declaration.

The model's options are declared once, in attnlab.model.config.TransformerConfig, in pure Python:
a choice field's type is a `Literal` of its choices. OmegaConf types a structured config's fields
by int, float, bool, str, Enum, list, dict, Optional and nested dataclasses, but not `Literal`.
`structured(cls)` is the one place that bridges the two: it makes an OmegaConf-typed copy of the
dataclass in which each Literal becomes a str Enum of the same choices (so composing rejects
`model.pos_encoding=foo`, listing the valid ones), with the same defaults. Nothing is declared a
second time; attnlab.config.plain.to_plain turns the Enums back into strings.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from enum import Enum
from typing import Any, Literal, Optional, Union, get_args, get_origin, get_type_hints

_ENUMS: dict[tuple[str, tuple], type[Enum]] = {}


def choices_enum(name: str, choices: tuple) -> type[Enum]:
    """A str Enum named `name` whose members are `choices` (one class per name and choices)."""
    key = (name, tuple(choices))
    if key not in _ENUMS:
        _ENUMS[key] = _publish(Enum(name, {str(c): c for c in choices}, type=str, module=__name__))
    return _ENUMS[key]


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
    """`tp` as OmegaConf types it: Literal[...] -> a str Enum named after the field (pos_encoding:
    PosEncoding), `X | None` -> Optional[X'] (X converted), anything else unchanged."""
    origin = get_origin(tp)
    if origin is Literal:
        return choices_enum(_camel(field_name), get_args(tp))
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
    Literal choices as Enums; `head` and `tail`: (name, type, default) fields added before and
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
            fields.append((f.name, tp, dataclasses.field(default=_default(tp, f.default))))
    fields += tail
    made = dataclasses.make_dataclass(name, fields)
    made.__doc__ = doc or f"{cls.__module__}.{cls.__qualname__}, typed for OmegaConf."
    made.__module__ = __name__
    return _publish(made)


def _default(tp: Any, value: Any) -> Any:
    enums = [a for a in (tp, *get_args(tp)) if isinstance(a, type) and issubclass(a, Enum)]
    enum = enums[0] if enums else None
    return enum(value) if enum is not None and value is not None else value


def _camel(field_name: str) -> str:
    return "".join(part.capitalize() for part in field_name.split("_"))
