"""Errors that name the file, the place in it and what was expected."""

from __future__ import annotations


class ChakraError(Exception):
    """Base class: every error the library raises on bad input or bad use."""


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
