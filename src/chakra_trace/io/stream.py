"""Byte streams of `.et` files: gzip sniffing, a decompression-bomb guard, varint framing.

A `.et` file is a GlobalMetadata message followed by Node messages, each prefixed by its
length as a varint. Nothing here trusts a length prefix: a frame is only materialized after
its bytes are really there, and no buffer grows past `max_message_bytes`.
"""

from __future__ import annotations

import io
import os
import queue
import select
import stat
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from ..errors import TraceFormatError
from ..schema.wire import _native, decode_varint_at
from .memory import env_int

GZIP_MAGIC = b"\x1f\x8b"
BLOCK = 8 << 20
DEFAULT_MAX_MESSAGE = 256 << 20  # protobuf's own hard limit is 2 GiB
DEFAULT_MAX_RATIO = 500  # real traces compress 5-50x; a zero-filled bomb ~1000x
RATIO_GRACE = 1 << 20  # ratio is only checked past this many decompressed bytes
STREAM_LIMIT_ENV = "CHAKRA_MAX_STREAM_BYTES"
DEFAULT_MAX_STREAM = 1 << 30  # a pipe or device (/dev/zero never ends); regular files have their size


def default_max_stream() -> int:
    """The byte limit on input that is not a regular file: CHAKRA_MAX_STREAM_BYTES, else 1 GiB."""
    return env_int(STREAM_LIMIT_ENV, "a number of bytes") or DEFAULT_MAX_STREAM


@dataclass
class Limits:
    """Bounds that keep hostile input from taking unbounded memory or time."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE
    max_ratio: float = DEFAULT_MAX_RATIO
    max_bytes: int | None = None  # hard cap on decompressed bytes
    #: bytes read from a pipe or character device (a regular file is read to its end); None: no limit
    max_stream_bytes: int | None = field(default_factory=default_max_stream)
    # nodes a load may build; None: $CHAKRA_TRACE_MAX_NODES, else half the memory available (io.memory)
    max_nodes: int | None = None
    max_build_ratio: float = 64.0  # in-memory bytes per file byte past 64 MiB (an empty node: ~160)


class _GuardedGzip(io.RawIOBase):
    """A gzip reader that fails cleanly on corrupt data and on decompression bombs.

    It reads the compressed file in small pieces and decompresses at most 1 MiB per call,
    so the ratio of output to input consumed so far is known exactly and a bomb is stopped
    after about RATIO_GRACE bytes, however large the read it was asked for.
    """

    RAW_CHUNK = 64 << 10
    OUT_CHUNK = 1 << 20

    def __init__(self, raw: BinaryIO, path: str, limits: Limits):
        self._raw = raw
        self._path = path
        self._limits = limits
        self._d = zlib.decompressobj(31)
        self._buf = b""
        self.read_raw = 0  # compressed bytes read from the file
        self.produced = 0  # decompressed bytes handed out

    def readable(self) -> bool:
        return True

    @property
    def consumed(self) -> int:
        return self.read_raw - len(self._buf)

    def _fail(self, reason: str) -> None:
        raise TraceFormatError(
            self._path,
            f"gzip data {reason} (after {self.produced} decompressed bytes)",
            offset=self.consumed,
            offset_kind="compressed byte",
        )

    def _more(self) -> bytes:
        data = self._raw.read(self.RAW_CHUNK)
        self.read_raw += len(data)
        return data

    def readinto(self, b) -> int:
        want = min(len(b), self.OUT_CHUNK)
        while True:
            if self._d.eof:  # end of a gzip member: another may follow
                rest = self._d.unused_data or self._more()
                if not rest:
                    return 0
                if not rest.startswith(GZIP_MAGIC[: len(rest)]):
                    self._buf = rest
                    self._fail("is followed by bytes that are not gzip")
                self._d = zlib.decompressobj(31)
                self._buf = rest
            if not self._buf:
                self._buf = self._more()
                if not self._buf:
                    self._fail("ends early (truncated gzip stream)")
            try:
                out = self._d.decompress(self._buf, want)
            except zlib.error as e:
                self._fail(f"is corrupt ({e})")
            self._buf = self._d.unconsumed_tail or (b"" if not self._d.eof else b"")
            if out:
                break
        n = len(out)
        b[:n] = out
        self.produced += n
        self._check()
        return n

    def _check(self) -> None:
        lim = self._limits
        if lim.max_bytes is not None and self.produced > lim.max_bytes:
            raise TraceFormatError(
                self._path,
                f"decompressed size exceeds the limit of {lim.max_bytes} bytes",
                offset=self.produced,
                offset_kind="decompressed byte",
            )
        if self.produced > RATIO_GRACE and self.produced > lim.max_ratio * max(self.consumed, 1):
            raise TraceFormatError(
                self._path,
                f"decompression ratio above {lim.max_ratio:g}:1 ({self.produced} bytes from {self.consumed}); "
                "this looks like a gzip bomb (raise Limits.max_ratio to read it anyway)",
                offset=self.produced,
                offset_kind="decompressed byte",
            )

    def close(self) -> None:
        self._raw.close()
        super().close()


class Prefetch(io.RawIOBase):
    """Decompress ahead on a thread (zlib releases the GIL) while the caller decodes.

    Pieces of at most `piece` bytes come out in order; an error on the thread (corrupt data,
    truncation, a bomb) is raised only after the data read before it was handed out, so a
    salvaging reader keeps everything up to the break. At most `depth` pieces wait in the
    queue, so read-ahead memory stays bounded.
    """

    def __init__(self, raw: Any, piece: int = 1 << 20, depth: int = 8, owner: Any = None):

        self._raw = raw
        self._owner = owner if owner is not None else raw  # what to close (keeps a wrapper alive)
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._pending = b""
        self._done = False
        self._thread = threading.Thread(target=self._run, args=(piece,), daemon=True)
        self._thread.start()

    def _run(self, piece: int) -> None:
        try:
            while not self._stop.is_set():
                data = self._raw.read(piece)
                self._put(data)
                if not data:
                    return
        except BaseException as e:  # handed to the reader after the data before it
            self._put(e)

    def _put(self, item) -> None:

        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def readable(self) -> bool:
        return True

    def next(self) -> bytes:
        """The next piece; b"" at the end (and ever after); raises the thread's error in its place."""
        if self._done:
            return b""
        item = self._q.get()
        if isinstance(item, BaseException):
            self._done = True
            raise item
        if not item:
            self._done = True
        return item

    def read(self, n: int = -1) -> bytes:
        parts = [self._pending] if self._pending else []
        have = len(self._pending)
        while n < 0 or have < n:
            item = self.next()
            if not item:
                break
            parts.append(item)
            have += len(item)
        data = b"".join(parts)
        if n < 0 or len(data) <= n:
            self._pending = b""
            return data
        self._pending = data[n:]
        return data[:n]

    def close(self) -> None:

        self._stop.set()
        try:
            while True:
                self._q.get_nowait()
        except queue.Empty:
            pass
        self._thread.join()
        self._owner.close()
        super().close()


class _Capped(io.RawIOBase):
    """A pipe or device read to at most `limit` bytes: such input has no size, and /dev/zero no end."""

    def __init__(self, raw: BinaryIO, path: str, limit: int):
        self._raw = raw
        self._path = path
        self._limit = limit
        self.read_raw = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._raw.readinto(b)  # type: ignore[attr-defined]
        self.read_raw += n or 0
        if self.read_raw > self._limit:
            raise TraceFormatError(
                self._path,
                f"more than {self._limit} bytes from a pipe or device (the limit on input that is not a regular "
                f"file; set {STREAM_LIMIT_ENV} or Limits.max_stream_bytes to read more)",
                offset=self._limit,
            )
        return n or 0

    def close(self) -> None:
        self._raw.close()
        super().close()


#: How long a named pipe that no process writes to yet is waited for before it reads as empty.
PIPE_WRITER_WAIT_S = 2.0


def open_binary(path: str | os.PathLike, limits: Limits | None = None) -> tuple[BinaryIO, bool]:
    """Open a file for reading, transparently gunzipping it if it starts with the gzip magic. A
    pipe or character device is read to at most `Limits.max_stream_bytes`; a folder is refused.

    The open never blocks: a named pipe that no process has opened for writing would block it for
    ever. Such a pipe is given `PIPE_WRITER_WAIT_S` for a writer to start, then reads as empty
    (the readers' "empty file" error); once a writer is there it is read as any pipe."""
    path = os.fspath(path)
    limits = limits or Limits()
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise TraceFormatError(path, "a folder, not a trace file (expected a .et or .et.gz file)") from None
    except OSError as e:
        raise TraceFormatError(path, e.strerror or str(e)) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise TraceFormatError(path, "a folder, not a trace file (expected a .et or .et.gz file)")
        if stat.S_ISFIFO(mode):
            _wait_for_writer(fd)
        os.set_blocking(fd, True)
        raw = open(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    src: Any = raw
    if not stat.S_ISREG(mode) and limits.max_stream_bytes is not None:
        src = _Capped(raw, path, limits.max_stream_bytes)
    f = io.BufferedReader(src, BLOCK)
    if f.peek(2)[:2] == GZIP_MAGIC:
        return io.BufferedReader(_GuardedGzip(f, path, limits), BLOCK), True
    return f, False


def _wait_for_writer(fd: int) -> None:
    """Wait up to `PIPE_WRITER_WAIT_S` for data or an end on a pipe opened without blocking (a pipe
    whose writer has not opened it yet shows neither; one that no writer ever opens reads as empty)."""
    if not hasattr(select, "poll"):  # (no poll() here: read at once)
        return
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        poller.poll(int(PIPE_WRITER_WAIT_S * 1000))
    except OSError:
        pass


@dataclass
class FrameBlock:
    """A run of complete frames: payload i is buf[starts[i]:ends[i]]."""

    buf: np.ndarray  # uint8 view of the block
    starts: np.ndarray
    ends: np.ndarray
    base: int  # stream offset of buf[0]
    index0: int  # message index of the first frame (0 = GlobalMetadata)
    kind: str = "byte"  # what offsets count: "byte", or "decompressed byte" in a gzip file


class _FrameError(Exception):
    def __init__(self, pos: int, message: str):
        super().__init__(message)
        self.pos, self.message = pos, message


def split_frames(data: bytes, end: int, limit: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Find complete frames in data[:end].

    Returns (starts, ends, position of the first incomplete frame, bytes still needed to
    complete it, or 1 if even its length prefix is incomplete).
    """
    if _native is not None:
        try:
            s, e, stop, need = _native.split_frames(data, end, limit)
        except ValueError as exc:
            raise _FrameError(*exc.args) from None
        return np.frombuffer(s, np.int64), np.frombuffer(e, np.int64), stop, need
    s, e, stop, need = _split_frames_py(data, end, limit)
    return np.asarray(s, np.int64), np.asarray(e, np.int64), stop, need


def _split_frames_py(data: bytes, end: int, limit: int) -> tuple[list[int], list[int], int, int]:
    starts: list[int] = []
    ends: list[int] = []
    append_s, append_e = starts.append, ends.append
    pos = 0
    while pos < end:
        n = data[pos]
        p = pos + 1
        if n >= 0x80:
            try:
                n, p = decode_varint_at(data, pos, end)
            except ValueError:
                raise _FrameError(pos, "length prefix is not a valid varint (longer than 10 bytes)") from None
            if p < 0:
                return starts, ends, pos, 1
        if n > limit:
            raise _FrameError(pos, f"length prefix says {n} bytes, more than the {limit}-byte message limit")
        q = p + n
        if q > end:
            return starts, ends, pos, q - end
        append_s(p)
        append_e(q)
        pos = q
    return starts, ends, pos, 0


def iter_frame_blocks(
    path: str | os.PathLike, limits: Limits | None = None, block: int = BLOCK
) -> Iterator[FrameBlock]:
    """Stream a `.et` file as blocks of complete frames, in bounded memory."""
    path = os.fspath(path)
    limits = limits or Limits()
    f: BinaryIO | Prefetch
    f, gz = open_binary(path, limits)
    if gz:
        assert isinstance(f, io.BufferedReader)
        f = Prefetch(f.raw, owner=f)  # the guarded gzip stream itself: no data is lost in a buffer on errors
    kind = "decompressed byte" if gz else "byte"
    base = 0  # stream offset of pending[0]
    index = 0  # message index of the first frame in pending
    pending = b""
    need = 0
    with f:
        while True:
            chunk = f.read(max(block, need))
            data = pending + chunk if pending else chunk
            try:
                starts, ends, stop, need = split_frames(data, len(data), limits.max_message_bytes)
            except _FrameError as e:
                raise TraceFormatError(
                    path,
                    e.message,
                    offset=base + e.pos,
                    offset_kind=kind,
                    message_index=index + _count_before(data, e.pos),
                ) from None
            if starts.size:
                yield FrameBlock(np.frombuffer(data, np.uint8), starts, ends, base, index, kind)
                index += len(starts)
            if not chunk:
                if stop < len(data):
                    n, p = decode_varint_at(data, stop, len(data))
                    if p < 0:
                        msg = "file ends inside a length prefix (truncated file)"
                    else:
                        msg = (
                            f"truncated message: length prefix says {n} bytes, only {len(data) - p} remain in the file"
                        )
                    raise TraceFormatError(path, msg, offset=base + stop, offset_kind=kind, message_index=index)
                return
            pending = data[stop:]
            base += stop


def _count_before(data: bytes, pos: int) -> int:
    starts, _, _, _ = split_frames(data, pos, 1 << 62)
    return len(starts)
