"""The scanner: the input's text read a block at a time (bytes counted for progress), JSON
values parsed from it with their line and column, and either layout walked into events. It
checks JSON syntax and the layout only (a header object holding a ``nodes`` array, or one object
per line); what the values mean, header and nodes alike, is the reader's to check."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from ...errors import TraceFormatError, reader_limit

_TEXT_BLOCK = 1 << 20  # characters read from the input at a time


class _Counting(io.RawIOBase):
    """Counts the bytes read through it (for progress)."""

    def __init__(self, raw, progress: Callable[[int], None] | None):
        self._raw, self._progress, self.n = raw, progress, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._raw.readinto(b)
        if n:
            self.n += n
            if self._progress is not None:
                self._progress(self.n)
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


_WS = re.compile(r"[ \t\n\r]*")


class _Text:
    """An incremental reader of JSON values from a text stream, tracking lines and columns."""

    def __init__(self, f, path: str):
        self.f, self.path = f, path
        self.buf, self.pos, self.eof = "", 0, False
        self.line0, self.col0 = 1, 0  # position of buf[0]
        self.dec = json.JSONDecoder()

    def fill(self, want: int | None = None) -> bool:
        """Read more text (dropping what was consumed); False at end of file."""
        if self.eof:
            return False
        if self.pos:
            done = self.buf[: self.pos]
            nl = done.count("\n")
            self.line0 += nl
            self.col0 = len(done) - done.rfind("\n") - 1 if nl else self.col0 + len(done)
            self.buf, self.pos = self.buf[self.pos :], 0
        try:
            s = self.f.read(want or _TEXT_BLOCK)
        except UnicodeDecodeError as e:
            raise TraceFormatError(self.path, f"not UTF-8 text ({e.reason} near line {self.where()[0]})") from None
        if not s:
            self.eof = True
            return False
        self.buf += s
        return True

    def where(self, pos: int | None = None) -> tuple[int, int]:
        pos = self.pos if pos is None else pos
        nl = self.buf.count("\n", 0, pos)
        if nl:
            return self.line0 + nl, pos - self.buf.rfind("\n", 0, pos)
        return self.line0, self.col0 + pos + 1

    def error(self, reason: str, pos: int | None = None) -> TraceFormatError:
        line, col = self.where(pos)
        return TraceFormatError(self.path, f"line {line} column {col}: {reason}")

    def peek(self) -> str:
        while True:
            # the pattern matches the empty string, so there is always a match
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.peek()
        if not c or c not in chars:
            got = "end of file" if not c else repr(c)
            raise self.error(f"invalid JSON: expected {what}, got {got}")
        self.pos += 1
        return c

    def value(self, context: str = "") -> Any:
        self.peek()
        while True:
            try:
                v, end = self.dec.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                incomplete = e.pos >= len(self.buf) - 64 or e.msg.startswith("Unterminated string")
                if not self.eof and incomplete:
                    self.fill(max(_TEXT_BLOCK, len(self.buf) - self.pos))  # shifts the buffer: parse again
                    continue
                raise self.error(f"invalid JSON{context}: {e.msg}", e.pos) from None
            except (ValueError, RecursionError) as e:
                limit = reader_limit(e, self.buf, self.pos)
                if limit is None:
                    raise
                raise self.error(f"invalid JSON{context}: {limit[0]}", limit[1]) from None
            if not self.eof and (end >= len(self.buf) or (type(v) in (int, float) and end > len(self.buf) - 64)):
                self.fill(max(_TEXT_BLOCK, len(self.buf) - self.pos))  # a number could go on in the next block
                continue
            self.pos = end
            return v

    def line(self) -> str | None:
        """The rest of the current line (None at end of file)."""
        while True:
            nl = self.buf.find("\n", self.pos)
            if nl >= 0:
                s = self.buf[self.pos : nl]
                self.pos = nl + 1
                return s
            if not self.fill():
                if self.pos >= len(self.buf):
                    return None
                s = self.buf[self.pos :]
                self.pos = len(self.buf)
                return s


def _events(t: _Text, path: str) -> Iterator[tuple[str, Any]]:
    """Walk either layout, yielding in file order (the consumer checks each as it comes):

    * ``("before-nodes", header)``: a document's ``nodes`` array is next; `header` holds the keys before it;
    * ``("node", (where, value))``: an element of ``nodes``, or a line of JSON Lines;
    * ``("document-header", header)``: a document's whole header, once the document has ended;
    * ``("lines-header", header)``: the header line of JSON Lines, before the lines that follow it.
    """
    if t.peek() == "":
        raise TraceFormatError(path, 'empty file: expected a JSON object with "format": "chakra-trace-json"')
    t.expect("{", "a JSON object (the chakra-trace-json header)")
    header: dict[str, Any] = {}
    seen_nodes = False
    if t.peek() == "}":
        t.pos += 1
    else:
        while True:
            key = t.value(" in the header")
            if not isinstance(key, str):
                raise t.error("invalid JSON: expected an object key")
            t.expect(":", "':'")
            if key == "nodes":
                if seen_nodes:
                    raise t.error("header: 'nodes' appears twice")
                yield "before-nodes", header
                seen_nodes = True
                if t.peek() != "[":
                    raise t.error("'nodes': expected a list of node objects")
                t.pos += 1
                i = 0
                if t.peek() == "]":
                    t.pos += 1
                else:
                    while True:
                        node = t.value(f" in nodes[{i}]")
                        yield "node", (f"nodes[{i}]", node)
                        i += 1
                        if t.expect(",]", "',' or ']' after a node") == "]":
                            break
            else:
                header[key] = t.value(f" in the header value of {key!r}")
            if t.expect(",}", "',' or '}' in the header") == "}":
                break
    if seen_nodes:
        if t.peek() != "":
            raise t.error("extra data after the JSON document")
        yield "document-header", header
        return
    # JSON Lines: the header object was the first line; one node per line follows.
    yield "lines-header", header
    line_no, _ = t.where()
    rest = t.line()
    if rest is not None and rest.strip():
        raise TraceFormatError(
            path, f"line {line_no}: expected a newline after the header object (JSON Lines holds one object per line)"
        )
    while True:
        line_no += 1
        s = t.line()
        if s is None:
            return
        if not s.strip():
            continue
        try:
            node = json.loads(s)
        except json.JSONDecodeError as e:
            raise TraceFormatError(path, f"line {line_no} column {e.colno}: invalid JSON: {e.msg}") from None
        except (ValueError, RecursionError) as e:
            limit = reader_limit(e, s)
            if limit is None:
                raise
            raise TraceFormatError(path, f"line {line_no} column {limit[1] + 1}: {limit[0]}") from None
        yield "node", (f"line {line_no}", node)
