"""The reader of PyTorch host execution-trace JSON: bytes in, templates and numbers out.

It exists to read the ``nodes`` array of any schema (1.0.1 flat through 1.1.1 nested and later
ones with a recognizable layout: detected from each node's structure, never from the version
string) without ``json.load``-ing the document. The array is streamed in blocks (gzip is
decompressed on a thread). Nodes are cut at the separator the file uses between its first two
nodes (PyTorch writes every node in the same multi-line layout), by the optional C kernel
``chakra_trace.io._host`` when it is built, and a piece is only ever accepted as a node
once it is known to be exactly one valid JSON object. Files in another layout (minified,
re-indented) fall back to exact scanning with the C JSON scanner, node by node. Each node is
matched to its template (``templates.py``) and its numbers are read for a whole block at once
with numpy; ``columns.py`` then turns them into a `HostTrace`. Bad input raises a
`TraceFormatError` naming the file, the byte offset and the node.
"""

from __future__ import annotations

import gc
import json
import operator
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from json.scanner import make_scanner
from typing import Any, NoReturn

import numpy as np

from ..._native import load as load_native
from ...errors import TraceFormatError, reader_limit
from ...schema.wire import ranges
from ..stream import Limits, Prefetch, open_binary
from .columns import assemble
from .model import HostTrace
from .templates import NodeError, Tables

_native = load_native("chakra_trace.io._host")  # optional C kernels; None: the numpy/Python path

BLOCK = 4 << 20
_MASK = bytes.maketrans(b"0123456789", b"0000000000")
_MASKED: Callable[[bytes], bytes] = operator.methodcaller("translate", _MASK)
_WS = re.compile(rb"[ \t\n\r]*")
_INCOMPLETE_SLACK = 1 << 16
_SCAN = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # (typeshed's stub names a class)


class TruncatedTraceWarning(UserWarning):
    """``read_host_trace(..., salvage=True)`` kept only the nodes before a truncation or error."""


@dataclass(eq=False)
class _Pieces:
    """The nodes cut from the buffer at the separator: where each starts (after its '{'), its
    length and its template. Only the first `cut` are nodes; the one at `cut` is not exactly one
    JSON object, or compiling it raised `error`."""

    starts: np.ndarray
    lens: np.ndarray
    tids: np.ndarray | list
    cut: int
    error: TraceFormatError | None


class _Blocks:
    """Decompressed data of a file in pieces. Data read before an error is handed out before the error.

    Plain files are read into one reused buffer (no fresh memory per block). gzip is
    decompressed ahead on a thread (stream.Prefetch).
    """

    def __init__(self, path: str, block: int, limits: Limits | None):
        f, gz = open_binary(path, limits)
        self.gz = gz
        self._f = f
        self._prefetch = Prefetch(f.raw, owner=f) if gz else None  # type: ignore[attr-defined]  # (a buffered reader: its raw stream)
        if not gz:
            self._tmp = bytearray(block)
            self._view = memoryview(self._tmp)

    def next(self):
        """Next piece of data (bytes-like, valid until the next call); empty at the end.

        Raises the reader's error (a TraceFormatError) once the data before it was handed out.
        """
        if self._prefetch is None:
            n = self._f.readinto(self._tmp)  # type: ignore[attr-defined]  # (a plain file: a BufferedReader)
            return self._view[:n]
        return self._prefetch.next()

    def close(self) -> None:
        if self._prefetch is not None:
            self._prefetch.close()
        else:
            self._f.close()


class _Stop(Exception):
    """Salvage: stop reading nodes here."""

    def __init__(self, error: TraceFormatError):
        super().__init__(str(error))
        self.error = error


class _Reader:
    def __init__(self, path: str, salvage: bool, block: int, limits: Limits | None):
        self.path = path
        self.salvage = salvage
        self.block = block
        self.src = _Blocks(path, block, limits)
        self.kind = "decompressed byte" if self.src.gz else "byte"
        self.raw = bytearray()  # the text not consumed yet (reused: no fresh memory per block)
        self.base = 0  # file offset of raw[0]
        self.eof = False
        self.gz_error: TraceFormatError | None = None
        self._text: str | None = None
        self.tb = Tables()
        self.count = 0  # nodes stored
        self.out_tm: list[np.ndarray] = []
        self.out_ints: list[np.ndarray] = []
        self.objs: list[bytes] = []
        self.pend_s: list[int] = []  # exact-mode pieces waiting for extraction (start, end)
        self.pend_e: list[int] = []
        self.metadata: dict[str, Any] = {}

    # -------------------------------------------------------------- buffer
    def more(self) -> bool:
        """Append about one block of data; False at the end of the file."""
        if self.eof:
            return False
        got = 0
        while got < self.block:
            try:
                blk = self.src.next()
            except TraceFormatError as e:
                if self.salvage or "ends early" in e.reason:
                    self.gz_error = e  # a truncated gzip stream: read the JSON up to there
                    blk = b""
                else:
                    raise
            if not len(blk):
                if not got:
                    self.eof = True
                    return False
                break
            self.raw += blk
            got += len(blk)
        self._text = None
        return True

    def drop(self, n: int) -> None:
        if n:
            del self.raw[:n]
            self.base += n
            self._text = None

    def text(self) -> str:
        if self._text is None:
            self._text = self.raw.decode("latin-1")  # one char per byte: offsets stay byte offsets
        return self._text

    def error(self, msg: str, rel: int | None = None, node_id=None) -> TraceFormatError:
        off = None if rel is None else self.base + rel
        if self.gz_error is not None and "ends early" in self.gz_error.reason:
            msg += " (the gzip stream is truncated too)"
        return TraceFormatError(self.path, msg, offset=off, offset_kind=self.kind, node_id=node_id)

    def skip_ws(self, pos: int) -> int:
        """Position of the next non-space byte (reading more as needed); len(raw) at the end of the file."""
        while True:
            p = _WS.match(self.raw, pos).end()  # type: ignore[union-attr]  # (matches the empty string)
            if p < len(self.raw) or not self.more():
                return p

    def scan(self, pos: int, what: str):
        """Exactly decode one JSON value at pos (reading more as needed): (value, end)."""
        while True:
            try:
                return _SCAN(self.text(), pos)
            except StopIteration as e:
                epos, reason = e.value, f"expected {what}"
            except json.JSONDecodeError as e:
                epos, reason = e.pos, e.msg
            except (ValueError, RecursionError) as e:
                limit = reader_limit(e, self.text(), pos)
                if limit is None:
                    raise
                raise self.error(f"{what}: {limit[0]}", limit[1]) from None
            n = len(self.raw)
            if not self.eof and (epos >= n - _INCOMPLETE_SLACK or reason.startswith("Unterminated string")):
                if self.more():
                    continue
            if self.eof and epos >= n - 1:
                reason = f"{reason}: the file ends inside {what} (truncated)"
            raise self.error(f"invalid JSON: {reason}", epos)

    def try_scan(self, pos: int) -> int | None:
        """End of the JSON value at pos; None if it may just be cut off by the end of the buffer."""
        try:
            return _SCAN(self.text(), pos)[1]
        except StopIteration as e:
            epos, reason = e.value, ""
        except json.JSONDecodeError as e:
            epos, reason = e.pos, e.msg
        except (ValueError, RecursionError):
            return self.scan(pos, "a node object")[1]  # raises the error naming the place
        if not self.eof and (epos >= len(self.raw) - _INCOMPLETE_SLACK or reason.startswith("Unterminated string")):
            return None
        return self.scan(pos, "a node object")[1]  # raises the error

    def expect(self, pos: int, chars: bytes, what: str) -> tuple[int, int]:
        """Skip spaces, check the next byte is one of chars: (byte, position after it)."""
        pos = self.skip_ws(pos)
        if pos >= len(self.raw):
            raise self.error(f"invalid JSON: the file ends where {what} was expected (truncated)", pos)
        c = self.raw[pos]
        if c not in chars:
            raise self.error(f"invalid JSON: expected {what}, found {chr(c)!r}", pos)
        return c, pos + 1

    # -------------------------------------------------------------- document
    def read(self) -> HostTrace:
        try:
            return self._read()
        finally:
            self.src.close()

    def _read(self) -> HostTrace:
        self.more()
        pos = self.skip_ws(0)
        if pos >= len(self.raw):
            raise self.error("the file is empty", 0)
        if self.raw[pos] != 0x7B:
            raise self.error("not an execution trace: expected a JSON object", pos)
        pos, found = self.members(pos + 1, first=True)
        stop: _Stop | None = None
        if found:
            try:
                pos = self.nodes(pos)
                pos, again = self.members(pos, first=False)
                if again:
                    raise self.error("a second 'nodes' array", pos)
                pos = self.skip_ws(pos)
                if pos < len(self.raw):
                    raise self.error("invalid JSON: extra data after the document", pos)
            except _Stop as s:
                stop = s
            except TraceFormatError as e:
                if not self.salvage:
                    raise
                stop = _Stop(e)
        elif not self.salvage:
            raise self.error("no 'nodes' array in the document")
        if stop is not None:
            try:  # complete nodes scanned before the break
                self.flush()
            except (_Stop, TraceFormatError):
                pass
        if self.gz_error is not None and stop is None:
            if not self.salvage:
                raise self.gz_error
            stop = _Stop(self.gz_error)
        host = self.finish(salvaged=stop is not None)
        if stop is not None:
            warnings.warn(
                f"{self.path}: {stop.error.reason} at {stop.error.offset_kind} offset {stop.error.offset}; "
                f"kept the {len(host)} complete nodes before it",
                TruncatedTraceWarning,
                stacklevel=3,
            )
        return host

    def members(self, pos: int, first: bool) -> tuple[int, bool]:
        """Parse top-level members into metadata until the 'nodes' array opens or the object closes.

        Returns (position after '[' of nodes, True) or (position after the closing '}', False).
        """
        if first:
            p = self.skip_ws(pos)
            if p < len(self.raw) and self.raw[p] == 0x7D:
                return p + 1, False
        else:
            c, pos = self.expect(pos, b",}", "',' or '}' after the nodes array")
            if c == 0x7D:
                return pos, False
        while True:
            _, p = self.expect(pos, b'"', "a key string")
            key, p = self.scan(p - 1, "a key string")
            _, p = self.expect(p, b":", "':'")
            if key == "nodes":
                _, p = self.expect(p, b"[", "'[' opening the nodes array")
                return p, True
            p = self.skip_ws(p)
            val, p = self.scan(p, f"the value of '{key}'")
            self.metadata[key] = val
            c, pos = self.expect(p, b",}", "',' or '}'")
            if c == 0x7D:
                return pos, False

    # -------------------------------------------------------------- nodes
    def nodes(self, pos: int) -> int:
        """Read the nodes array from just after '['. Returns the position after ']'."""
        pos = self.skip_ws(pos)
        if pos < len(self.raw) and self.raw[pos] == 0x5D:
            return pos + 1
        # the first node exactly; the separator between nodes 1 and 2 drives the fast path
        status, pos, sep_start = self.exact(pos, one=True)
        if status == "end":
            return pos
        sep = None
        if sep_start is not None:
            s = bytes(self.raw[sep_start - 1 : pos + 1])  # "}" + spaces "," spaces + "{"
            if s.startswith(b"}") and s.endswith(b"{") and s.strip(b"} \t\r\n{") == b",":
                sep = s
        while True:
            if sep is not None:
                status, pos = self.split(pos, sep)
            else:
                status, pos, _ = self.exact(pos)
            if status == "end":
                return pos
            # everything before pos is done
            self.flush()
            self.drop(pos)
            pos = 0
            if status == "resume":  # back to the fast path after a few exact nodes
                continue
            if not self.more():
                # end of file: the rest (last node, "]", tail) exactly
                status, pos, _ = self.exact(pos, final=True)
                return pos

    def split(self, pos: int, sep: bytes) -> tuple[str, int]:
        """Fast path over the buffer from the '{' at pos. Returns ("more", pos) or ("end", pos)."""
        pos = _WS.match(self.raw, pos).end()  # type: ignore[union-attr]  # (matches the empty string)
        if pos >= len(self.raw):
            return "more", pos
        if self.raw[pos] != 0x7B:  # "]" or something unexpected
            status, p, _ = self.exact(pos)
            return status, p
        pieces = self._split_native(pos, sep) if _native is not None else self._split_python(pos, sep)
        if pieces is None:
            return "more", pos
        starts, lens, cut = pieces.starts, pieces.lens, pieces.cut
        k = starts.size
        if cut:
            self.extract(starts[:cut], lens[:cut], np.asarray(pieces.tids[:cut], np.int64))
        if pieces.error is not None:
            self.fail(pieces.error)
        if cut < k:  # not one JSON object: rescan exactly from there
            # pieces before it were fine: an odd separator, go back to splitting soon; else stay exact
            status, p, _ = self.exact(int(starts[cut]) - 1, limit=8 if cut else None)
            return status, p
        return "more", int(starts[k - 1] + lens[k - 1] + len(sep)) - 1

    def _split_native(self, pos: int, sep: bytes) -> _Pieces | None:
        """The nodes in the buffer, cut and keyed in C: Python sees each distinct key once. None: no whole node."""
        tb = self.tb
        cut = err = None
        starts, lens, codes, first = (
            np.frombuffer(x, t)
            for x, t in zip(_native.split_pieces(self.raw, pos + 1, sep), (np.int64, np.int64, np.int32, np.int64))
        )
        k = starts.size
        if k <= 0:
            return None
        keys = [
            bytes(self.raw[a : a + n]).translate(_MASK) for a, n in zip(starts[first].tolist(), lens[first].tolist())
        ]
        tids_u = [tb.tmap.get(key) for key in keys]
        for u, j in enumerate(first.tolist()):  # new keys, in order of first appearance
            if tids_u[u] is None:
                try:
                    tids_u[u] = self.compile(int(starts[j]), int(starts[j] + lens[j]), keys[u], self.count + j)
                except TraceFormatError as e:
                    err = e
                if tids_u[u] is None:
                    cut = j
                    break
        tids = np.array([-1 if t is None else t for t in tids_u], np.int64)[codes[:cut]]
        return _Pieces(starts, lens, tids, k if cut is None else cut, err)

    def _split_python(self, pos: int, sep: bytes) -> _Pieces | None:
        """`_split_native` without the C kernel."""
        if pos == 0:  # split the whole buffer (no copy), then drop the first "{"
            parts = self.raw.split(sep)
            parts[0] = parts[0][1:]
        else:
            parts = self.raw[pos + 1 :].split(sep)
        k = len(parts) - 1
        if k <= 0:
            return None
        del parts[-1]
        tb = self.tb
        lens = np.fromiter(map(len, parts), np.int64, k)
        keys: list[bytes] = list(map(_MASKED, map(bytes, parts)))  # the template keys
        starts = np.empty(k, np.int64)
        starts[0] = pos + 1
        np.cumsum(lens[:-1] + len(sep), out=starts[1:])
        starts[1:] += pos + 1
        tids = list(map(tb.tmap.get, keys))
        cut = k
        err = None
        if None in tids:
            j = tids.index(None)
            while True:
                t = tb.tmap.get(keys[j])
                if t is None:
                    s = int(starts[j])
                    try:
                        t = self.compile(s, s + len(keys[j]), keys[j], self.count + j)
                    except TraceFormatError as e:
                        err = e
                        t = None
                    if t is None:
                        cut = j
                        break
                tids[j] = t
                try:
                    j = tids.index(None, j + 1)
                except ValueError:
                    break
        return _Pieces(starts, lens, tids, cut, err)

    def exact(
        self, pos: int, one: bool = False, final: bool = False, limit: int | None = None
    ) -> tuple[str, int, int | None]:
        """Nodes one by one with the JSON scanner, from the '{' (or spaces) at pos.

        Stops at "]" ("end"), when the next node is not complete in the buffer ("more"; unless
        `final`), after one node if `one` (then also returns where the separator begins), or
        after `limit` nodes ("resume").
        """
        done = 0
        while True:
            if limit is not None and done >= limit:
                return "resume", _WS.match(self.raw, pos).end(), None  # type: ignore[union-attr]  # (matches the empty string)
            pos = self.skip_ws(pos) if final or one else _WS.match(self.raw, pos).end()  # type: ignore[union-attr]  # (matches the empty string)
            if pos >= len(self.raw):
                if final or self.eof:
                    raise self.error("the file ends inside the nodes array (truncated)", pos)
                return "more", pos, None
            c = self.raw[pos]
            if c != 0x7B:
                if c == 0x5D and not one:
                    self.flush()
                    return "end", pos + 1, None
                raise self.error(f"invalid JSON: expected a node object, found {chr(c)!r}", pos)
            if not (final or one):
                end = self.try_scan(pos)
                if end is None:  # not complete in the buffer
                    return "more", pos, None
            else:
                try:
                    _, end = self.scan(pos, "a node object")
                except TraceFormatError as e:
                    self.fail(e)
            self.pend_s.append(pos + 1)
            self.pend_e.append(end - 1)
            if final:
                self.flush()
            c, p = self.expect(end, b",]", "',' or ']' after a node")
            if c == 0x5D:
                self.flush()
                return "end", p, None
            if one:
                self.flush()
                q = self.skip_ws(p)
                return "next", q, end
            pos = p
            done += 1

    def flush(self) -> None:
        if not self.pend_s:
            return
        starts = np.array(self.pend_s, np.int64)
        ends = np.array(self.pend_e, np.int64)
        self.pend_s, self.pend_e = [], []
        tb = self.tb
        tids = np.empty(starts.size, np.int64)
        for j in range(starts.size):
            s, e = int(starts[j]), int(ends[j])
            key = bytes(self.raw[s:e]).translate(_MASK)
            t = tb.tmap.get(key)
            if t is None:
                try:
                    t = self.compile(s, e, key, self.count + j)
                except TraceFormatError as err:
                    if j:
                        self.extract(starts[:j], ends[:j] - starts[:j], tids[:j])
                    self.fail(err)
                if t is None:  # cannot happen: the scanner accepted it
                    if j:
                        self.extract(starts[:j], ends[:j] - starts[:j], tids[:j])
                    self.fail(self.error("invalid JSON in a node", s - 1))
            tids[j] = t
        self.extract(starts, ends - starts, tids)

    def fail(self, err: TraceFormatError) -> NoReturn:
        if self.salvage:
            raise _Stop(err)
        raise err

    def compile(self, s: int, e: int, key: bytes, index: int, register: bool = True) -> int | None:
        piece = bytes(self.raw[s:e])
        try:
            if register:
                return self.tb.lookup_miss(piece, key)
            return self.tb.compile(piece, key, register=False)
        except UnicodeDecodeError as u:
            raise self.error(f"node #{index}: invalid UTF-8 ({u.reason})", s + u.start) from None
        except NodeError as ne:
            raise self.error(f"node #{index}: {ne.message}", s - 1, node_id=ne.node_id) from None

    def extract(self, starts: np.ndarray, lens: np.ndarray, tids: np.ndarray) -> None:
        """Read the numbers of complete nodes (pieces at starts, templates tids) vectorized; store them."""
        tb = self.tb
        k = starts.size
        a = np.frombuffer(self.raw, np.uint8)
        cnt = tb.i_cnt.v[tids]
        idx = ranges(tb.i_ptr.v[tids], cnt)
        pos = np.repeat(starts, cnt) + tb.i_start.v[idx]
        ln = tb.i_len.v[idx]
        vals = a[pos].astype(np.int64)
        vals -= 48
        multi = np.flatnonzero(ln > 1)
        if multi.size:
            bad = multi[vals[multi] == 0]
            if bad.size:  # "01" is no JSON number
                j = int(np.searchsorted(np.cumsum(cnt), bad[0], side="right"))
                if j:
                    self.extract(starts[:j], lens[:j], tids[:j])
                self.fail(self.error(f"node #{self.count}: invalid JSON number (leading zero)", int(pos[bad[0]])))
            sel = multi
            d = 1
            while sel.size:
                vals[sel] = vals[sel] * 10 + a[pos[sel] + d] - 48
                d += 1
                sel = sel[ln[sel] > d]
        neg = tb.i_neg.v[idx]
        if neg.any():
            np.negative(vals, out=vals, where=neg)
        # digits inside strings must be the template's
        vcnt = tb.v_cnt.v[tids]
        if vcnt.any():
            vidx = ranges(tb.v_ptr.v[tids], vcnt)
            vpos = np.repeat(starts, vcnt) + tb.v_pos.v[vidx]
            got = a[vpos]
            bad = got != tb.v_byte.v[vidx]
            if bad.any():
                vend = np.cumsum(vcnt)
                nodes = np.unique(np.searchsorted(vend, np.flatnonzero(bad), side="right"))
                for j in nodes.tolist():
                    j0 = int(vend[j] - vcnt[j])
                    base = int(tids[j])
                    vk = (base, got[j0 : int(vend[j])].tobytes())
                    v = tb.vmap.get(vk)
                    if v is None:
                        s = int(starts[j])
                        fail: TraceFormatError | None
                        try:
                            v = self.compile(s, s + int(lens[j]), tb.keys[base], self.count + j, register=False)
                        except TraceFormatError as err:
                            v, fail = None, err
                        else:
                            fail = (
                                None
                                if v is not None
                                else self.error(f"node #{self.count + j}: invalid JSON in a node", s - 1)
                            )
                        if fail is not None:
                            if j:
                                self.extract(starts[:j], lens[:j], tids[:j])
                            self.fail(fail)
                        assert v is not None  # (no error: compiled)
                        tb.vmap[vk] = v
                    tids[j] = v
        # numbers kept as text
        ocnt = tb.o_cnt.v[tids]
        if ocnt.any():
            raw = self.raw
            for j in np.flatnonzero(ocnt).tolist():
                t = int(tids[j])
                p, c = int(tb.o_ptr.v[t]), int(tb.o_cnt.v[t])
                s0 = int(starts[j])
                for s, e in zip(tb.o_start.v[p : p + c].tolist(), tb.o_end.v[p : p + c].tolist()):
                    self.objs.append(bytes(raw[s0 + s : s0 + e]))
        self.out_tm.append(tids.astype(np.int32))
        self.out_ints.append(vals)
        self.count += k

    # -------------------------------------------------------------- columns
    def finish(self, salvaged: bool) -> HostTrace:
        """The columns of the nodes read (this empties the number store)."""
        return assemble(self.path, self.metadata, self.tb, self.out_tm, self.out_ints, self.objs, salvaged)


def read_host_trace(
    path: str | os.PathLike, *, salvage: bool = False, limits: Limits | None = None, block_size: int = BLOCK
) -> HostTrace:
    """Read a PyTorch host execution trace (ET JSON, plain or gzip) into a `HostTrace`.

    Any schema from 1.0.1 (flat) to 1.1.1 (nested) and later ones with either layout; the
    version string is recorded, never checked. Bad input raises a one-line `TraceFormatError`
    naming the file, the byte offset (of the decompressed data for gzip) and the node. With
    ``salvage=True`` a truncated or broken file gives the complete nodes before the break and a
    `TruncatedTraceWarning` saying how many were kept.
    """
    path = os.fspath(path)
    enabled = gc.isenabled()
    gc.disable()  # nothing read here forms cycles; collections would only rescan the tables
    try:
        return _Reader(path, salvage, max(int(block_size), 64), limits).read()
    finally:
        if enabled:
            gc.enable()
