"""Errors that name the file, the place in it and what was expected."""

from __future__ import annotations

import re
import sys


class ChakraError(Exception):
    """Base class: every error the library raises on bad input or bad use."""


class UnrelatedTracesError(ChakraError):
    """A host trace and a Kineto trace given as a pair that are clearly not of the same job."""


class TraceFormatError(ChakraError):
    """Input that is not a well-formed trace. The message is one line and says where."""

    def __init__(
        self,
        path: str | None,
        message: str,
        *,
        offset: int | None = None,
        offset_kind: str = "byte",
        node_id: int | None = None,
        message_index: int | None = None,
    ):
        self.path = path
        self.reason = message
        self.offset = offset
        self.offset_kind = offset_kind
        self.node_id = node_id
        self.message_index = message_index
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.offset is not None:
            where.append(f"{self.offset_kind} offset {self.offset}")
        if self.message_index is not None:
            where.append("global metadata" if self.message_index == 0 else f"message #{self.message_index}")
        if self.node_id is not None:
            where.append(f"node id {self.node_id}")
        loc = f" ({', '.join(where)})" if where else ""
        return f"{self.path or '<input>'}{loc}: {self.reason}"


def _long_int(min_digits: int, binary: bool) -> re.Pattern:
    pat = r"[0-9]{%d,}" % min_digits
    return re.compile(pat.encode() if binary else pat)


def reader_limit(e: BaseException, text: str | bytes | None = None, start: int = 0) -> tuple[str, int] | None:
    """Why Python's JSON or YAML reader refused well-formed text, and where: (reason, offset into
    ``text``), or None when ``e`` is not such a refusal. Two limits guard those readers against
    hostile input: integers of more than `sys.get_int_max_str_digits()` digits (CPython's
    defence against quadratic parsing) and nesting deeper than the recursion limit."""
    if isinstance(e, RecursionError):
        return "arrays or objects nested too deeply (over the reader's recursion limit)", start
    if isinstance(e, ValueError) and "integer string conversion" in str(e):
        limit = sys.get_int_max_str_digits()
        m = _long_int(limit + 1, isinstance(text, bytes)).search(text, start) if text is not None else None
        digits = f"{len(m.group())} digits" if m else "too many digits"
        return f"an integer of {digits}, more than the {limit} a number may have", m.start() if m else start
    return None
