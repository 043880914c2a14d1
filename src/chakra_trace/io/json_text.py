"""Large JSON read as text in chunks: a buffer that decodes UTF-8 incrementally and hands out one
JSON value at a time with Python's C scanner, reading more only when a value runs past the buffer,
and naming the character offset of anything malformed (the Kineto reader's streaming base)."""

from __future__ import annotations

import codecs
import json
import json.scanner
import re
from typing import Any

from ..errors import TraceFormatError, reader_limit

_WS = re.compile(r"[ \t\n\r]*")
CHUNK = 4 << 20
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")  # a cut one cannot parse yet
_MAX_EVENT = 256 << 20  # one JSON value (an event or a metadata member) may not exceed this


class Text:
    """A chunked, incrementally decoded text buffer over a binary stream."""

    def __init__(self, f, path: str, chunk: int = CHUNK):
        self.f = f
        self.path = path
        self.chunk = chunk
        self.dec = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.base = 0  # character offset of buf[0] in the whole text
        self.eof = False

    def more(self, pos: int, want: int | None = None) -> int:
        """Drop buf[:pos], append at least one more chunk; returns the new position of pos."""
        if self.eof:
            return pos
        data = self.f.read(want or self.chunk)
        try:
            text = self.dec.decode(data, final=not data)
        except UnicodeDecodeError as e:
            raise TraceFormatError(
                self.path, f"not UTF-8 text ({e.reason})", offset=self.base + len(self.buf), offset_kind="character"
            ) from None
        if not data:
            self.eof = True
        if pos:
            self.base += pos
            self.buf = self.buf[pos:] + text
        else:
            self.buf += text
        return 0

    def skip_ws(self, pos: int) -> int:
        while True:
            pos = _WS.match(self.buf, pos).end()  # type: ignore[union-attr]  # (matches the empty string)
            if pos < len(self.buf) or self.eof:
                return pos
            pos = self.more(pos)

    def fail(self, pos: int, reason: str) -> TraceFormatError:
        return TraceFormatError(self.path, reason, offset=self.base + pos, offset_kind="character")

    def expect(self, pos: int, ch: str, what: str) -> int:
        pos = self.skip_ws(pos)
        if pos >= len(self.buf):
            raise self.fail(pos, f"file ends where {what} was expected (truncated file)")
        if self.buf[pos] != ch:
            raise self.fail(pos, f"expected {what}, found {self.buf[pos : pos + 20]!r}")
        return pos + 1

    def value(self, pos: int, scan, what: str) -> tuple[Any, int]:
        """Decode one JSON value at buf[pos] (after whitespace), reading more text as needed."""
        want = self.chunk
        while True:
            pos = self.skip_ws(pos)
            try:
                val, end = scan(self.buf, pos)
                if end < len(self.buf) or self.eof:
                    return val, end
                err_pos, msg, cut = end, "", True  # a number may go on in the next chunk
            except StopIteration as e:  # no value at e.value (json's C scanner: also a nested one)
                rest = self.buf[e.value : e.value + 9]
                err_pos, msg = e.value, "expected a JSON value"
                cut = e.value + len(rest) >= len(self.buf) and any(w.startswith(rest) for w in _LITERALS)
            except json.JSONDecodeError as e:
                err_pos, msg = e.pos, e.msg
                cut = msg.startswith("Unterminated string") or e.pos >= len(self.buf) - 6
            except (ValueError, RecursionError) as e:
                limit = reader_limit(e, self.buf, pos)
                if limit is None:
                    raise
                raise self.fail(limit[1], f"{what}: {limit[0]}") from None
            if not cut or self.eof:
                tail = " (truncated file)" if self.eof and cut else ""
                raise self.fail(err_pos, f"bad JSON in {what}: {msg}{tail}")
            if len(self.buf) - pos > _MAX_EVENT:
                raise self.fail(pos, f"{what} is larger than {_MAX_EVENT} characters")
            pos = self.more(pos, want)
            want = min(want * 2, _MAX_EVENT)


def scanner(parse_float=None):
    dec = json.JSONDecoder(parse_float=parse_float) if parse_float else json.JSONDecoder()
    return json.scanner.make_scanner(dec)  # type: ignore[arg-type]  # (typeshed's stub names a class)
