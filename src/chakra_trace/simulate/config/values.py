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
from ...io.documents import short
from ...io.memory import env_int

# Ranges every config is held to (issue 13): a value past them is a typo or hostile, and would
# overflow the int64-ns clock or allocate without bound. The two counts can be raised through
# the environment for machines that really are that big.
MAX_NS = 1 << 62  # simulated times are int64 ns; 2^62 ns is 146 years, and two of them still add
MAX_LATENCY_NS = 1e12  # per hop: 1000 s
MIN_BANDWIDTH = 1e-6  # GB/s, per link: 1 kB/s
MAX_DIMS = 64
DEFAULT_MAX_NPUS = 1 << 20
ENV_MAX_NPUS = "CHAKRA_TRACE_MAX_NPUS"
DEFAULT_MAX_CHUNKS = 1 << 12  # preferred-dataset-splits and active-chunks-per-dimension
ENV_MAX_CHUNKS = "CHAKRA_TRACE_MAX_CHUNKS"


def max_npus() -> int:
    """NPUs a network may have: $CHAKRA_TRACE_MAX_NPUS, else 2^20."""
    return env_int(ENV_MAX_NPUS) or DEFAULT_MAX_NPUS


def max_chunks() -> int:
    """Chunks a collective may be cut into (and run at once): $CHAKRA_TRACE_MAX_CHUNKS, else 4096."""
    return env_int(ENV_MAX_CHUNKS) or DEFAULT_MAX_CHUNKS


def show(v: Any) -> str:
    """A value as a message quotes it, with its kind where the repr hides it."""
    if isinstance(v, bool):
        return f"{v} (a boolean)"
    if isinstance(v, str):
        return f"{short(v)} (a string)"
    if isinstance(v, (list, tuple)):
        return f"a list {short(list(v))}"
    if isinstance(v, Mapping):
        return "a mapping"
    if v is None:
        return "nothing"
    return short(v)


def _is_bool(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_))


def number(
    v: Any, what: str, *, minimum: float = 0.0, strict: bool = False, maximum: float | None = None, unit: str = ""
) -> float:
    """A finite real >= minimum (> minimum when strict) and <= maximum."""
    if _is_bool(v) or not isinstance(v, numbers.Real):
        raise ChakraError(f"{what}: expected a number, got {show(v)}")
    x = float(v)
    if not math.isfinite(x):
        raise ChakraError(f"{what}: expected a finite number, got {v!r}")
    if x < minimum or (strict and x == minimum):
        cmp = ">" if strict else ">="
        raise ChakraError(f"{what}: expected a number {cmp} {minimum:g}{unit}, got {v!r}")
    if maximum is not None and x > maximum:
        raise ChakraError(f"{what}: expected a number <= {maximum:g}{unit}, got {v!r}")
    return x


def integer(v: Any, what: str, *, minimum: int = 0, maximum: int | None = None, raise_with: str = "") -> int:
    """An integer >= minimum and <= maximum; floats with an integral value (4.0) are accepted.
    ``raise_with`` says how to raise the maximum (an environment variable)."""
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
    if maximum is not None and n > maximum:
        how = f" (set {raise_with} to allow more)" if raise_with else ""
        raise ChakraError(f"{what}: expected an integer <= {maximum:,}, got {v!r}{how}")
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


def kind(v: Any) -> str:
    """What a value is, without its content: a file that is not a config at all (a key, a
    password file) is read as one string, and an error must not carry it to a log or a report."""
    if isinstance(v, str):
        return f"text ({len(v)} characters)"
    if isinstance(v, (list, tuple)):
        return f"a list of {len(v)}"
    if v is None:
        return "nothing"
    return f"a {type(v).__name__}"


def string_keyed(d: Any, source: str, what: str) -> Mapping:
    """A file's top level: a mapping with string keys."""
    if not isinstance(d, Mapping):
        raise ChakraError(f"{source}: expected {what} (a mapping of keys to values), got {kind(d)}")
    for k in d:
        if not isinstance(k, str):
            raise ChakraError(f"{source}: keys must be strings, got {k!r}")
    return d
