"""Problems: the one-line messages for bad arguments, in one wording, `key=value is not valid;
expected ...` (the word "problem" means such a line throughout attnlab).

The model's TransformerConfig, the DataModules, the run's builder and the commands all
phrase a rejected value the same way, through these helpers. Each `*_problem` returns the
one-line message, or None when the value is fine, so callers can collect several problems;
`raise_first` turns the first into a ValueError. This module imports nothing from attnlab (and
nothing heavy), so any layer may use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def not_valid(key: str, value: Any, expected: str) -> str:
    """'key=value is not valid; expected <expected>' (value shown with repr)."""
    return f"{key}={value!r} is not valid; expected {expected}"


def is_integer(value: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def integer_problem(key: str, value: Any, minimum: int | None = None) -> str | None:
    """Unless `value` is an integer >= minimum: 'key=value is not valid; expected an integer
    >= minimum'."""
    if is_integer(value) and (minimum is None or value >= minimum):
        return None
    return not_valid(key, value, "an integer" + (f" >= {minimum}" if minimum is not None else ""))


def number_problem(
    key: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = True,
) -> str | None:
    """Unless `value` is a finite number in the interval: 'key=value is not valid; expected a
    number in [low, high)' (brackets as the bounds are closed or open; '> 0' style when only a
    lower bound is given)."""
    ok = is_number(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if ok:
        return None
    if low is not None and high is not None:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        return not_valid(key, value, f"a number in {left}{low:g}, {high:g}{right}")
    if low is not None:
        return not_valid(key, value, f"a number {'>' if low_open else '>='} {low:g}")
    if high is not None:
        return not_valid(key, value, f"a number {'<' if high_open else '<='} {high:g}")
    return not_valid(key, value, "a number")


def choice_problem(key: str, value: Any, choices: Sequence[Any]) -> str | None:
    """Unless `value` is one of `choices`: 'key=value is not valid; expected one of: a, b'."""
    if value in choices:
        return None
    return not_valid(key, value, "one of: " + ", ".join(map(str, choices)))


def present(*problems: str | None) -> list[str]:
    """The problems that are not None."""
    return [p for p in problems if p]


def raise_first(problems: Sequence[str | None]) -> None:
    """Raise ValueError with the first problem that is not None (a constructor's check)."""
    for problem in problems:
        if problem:
            raise ValueError(problem)
