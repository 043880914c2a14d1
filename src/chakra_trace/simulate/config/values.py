"""Checks shared by every config: each takes a value and a description of where it came from
(``file:line: 'key'``), and returns the value normalized or raises ChakraError saying what was
expected -- so a wrong value stops the run with one line instead of running on with garbage."""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from ...errors import ChakraError


def show(v: Any) -> str:
    """A value as a message quotes it, with its kind where the repr hides it."""
    if isinstance(v, bool):
        return f"{v} (a boolean)"
    if isinstance(v, str):
        return f"{v!r} (a string)"
    if isinstance(v, (list, tuple)):
        return f"a list {list(v)!r}"[:120]
    if isinstance(v, Mapping):
        return "a mapping"
    if v is None:
        return "nothing"
    return repr(v)[:80]


def _is_bool(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_))


def number(v: Any, what: str, *, minimum: float = 0.0, strict: bool = False) -> float:
    """A finite real >= minimum (> minimum when strict)."""
    if _is_bool(v) or not isinstance(v, numbers.Real):
        raise ChakraError(f"{what}: expected a number, got {show(v)}")
    x = float(v)
    if not math.isfinite(x):
        raise ChakraError(f"{what}: expected a finite number, got {v!r}")
    if x < minimum or (strict and x == minimum):
        cmp = ">" if strict else ">="
        raise ChakraError(f"{what}: expected a number {cmp} {minimum:g}, got {v!r}")
    return x


def integer(v: Any, what: str, *, minimum: int = 0) -> int:
    """An integer >= minimum; floats with an integral value (4.0) are accepted."""
    if _is_bool(v):
        raise ChakraError(f"{what}: expected an integer, got {show(v)}")
    if isinstance(v, numbers.Integral):
        n = int(v)
    elif isinstance(v, numbers.Real) and math.isfinite(float(v)) and float(v).is_integer():
        n = int(float(v))
    else:
        raise ChakraError(f"{what}: expected an integer, got {show(v)}")
    if n < minimum:
        raise ChakraError(f"{what}: expected an integer >= {minimum}, got {v!r}")
    return n


def flag(v: Any, what: str) -> bool:
    """A boolean or a number (non-zero is true, as ASTRA-sim's ``!= 0`` test)."""
    if _is_bool(v):
        return bool(v)
    if isinstance(v, numbers.Real) and math.isfinite(float(v)):
        return float(v) != 0
    raise ChakraError(f"{what}: expected 0 or 1 (or true/false), got {show(v)}")


def choice(v: Any, choices: tuple[str, ...], what: str) -> str:
    """One of ``choices``, exactly (ASTRA-sim's names are case-sensitive: a near miss gets a hint)."""
    if isinstance(v, str) and v in choices:
        return v
    hint = ""
    if isinstance(v, str):
        for c in choices:
            if c.lower() == v.lower():
                hint = f" (did you mean {c!r}? names are case-sensitive, as in ASTRA-sim)"
    raise ChakraError(f"{what}: expected one of {', '.join(choices)}, got {show(v)}{hint}")


def ignored_keys(v: Any, known: Collection[str], what: str) -> dict:
    """A config's ``ignored`` dict: string keys, none of them a key with an effect (``known``)."""
    if not isinstance(v, Mapping):
        raise ChakraError(f"{what}: expected a dict of ignored keys, got {show(v)}")
    for k in v:
        if not isinstance(k, str):
            raise ChakraError(f"{what}: keys must be strings, got {k!r}")
        if k in known:
            raise ChakraError(f"{what}: {k!r} is a key with an effect, not an ignored one")
    return dict(v)


def where(source: str, lines: Mapping[str, int] | None, key: str) -> str:
    """``file:line: 'key'``, or ``file: 'key'`` where the line is not known."""
    line = lines.get(key) if lines else None
    return f"{source}:{line}: {key!r}" if line else f"{source}: {key!r}"


def string_keyed(d: Any, source: str, what: str) -> Mapping:
    """A file's top level: a mapping with string keys."""
    if not isinstance(d, Mapping):
        raise ChakraError(f"{source}: expected {what} (a mapping of keys to values), got {show(d)}")
    for k in d:
        if not isinstance(k, str):
            raise ChakraError(f"{source}: keys must be strings, got {k!r}")
    return d
