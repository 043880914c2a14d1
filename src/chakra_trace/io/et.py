"""Reading and writing `.et` files: streaming, bulk columnar load, atomic writes."""

from __future__ import annotations

import ctypes
import gzip
import io
import os
import re
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceFormatError
from ..schema import proto as pb
from ..schema.codec import node_payloads
from ..schema.trace import Trace
from ..schema.wire import WireError, encode_varint_int, frame
from .memory import check_nodes
from .nested import bad_rows, locate
from .stream import Limits, iter_frame_blocks

Progress = Callable[[int], None]  # called with the number of bytes consumed so far


def _metadata(path: str, block, kind: str):
    s, e = int(block.starts[0]), int(block.ends[0])
    try:
        return pb.GlobalMetadata.FromString(block.buf[s:e].tobytes())
    except Exception as exc:  # protobuf raises DecodeError (a different class per runtime)
        raise TraceFormatError(
            path,
            f"global metadata is not a valid message ({exc})",
            offset=block.base + s,
            offset_kind=kind,
            message_index=0,
        ) from None


def _kind(path: str) -> str:
    """What offsets count in an empty file's error (a pipe is not opened twice: "byte")."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "byte"
        with open(path, "rb") as f:
            return "decompressed byte" if f.read(2) == b"\x1f\x8b" else "byte"
    except OSError:
        return "byte"


def _empty(path: str) -> str:
    """What an input without a byte is: an empty file, or a named pipe that nothing wrote to."""
    try:
        fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        fifo = False
    return "a named pipe that gave no bytes (no writer, or an empty one)" if fifo else "empty file"


def iter_chunks(
    path: str | os.PathLike, *, limits: Limits | None = None, progress: Progress | None = None, empty: bool = False
) -> Iterator[Trace]:
    """Stream a `.et` file as columnar chunks (one per I/O block), in bounded memory. With
    ``empty``, a file without nodes yields one empty chunk that carries its metadata (a pipe
    cannot be read again for it).

    Chunks share string tables, so codes are comparable across chunks. Each chunk's node
    count is checked against `Limits.max_build_ratio` before it is decoded (io.memory).
    """
    return _chunks(path, limits, progress, whole=False, empty=empty)


def _chunks(
    path: str | os.PathLike, limits: Limits | None, progress: Progress | None, *, whole: bool, empty: bool = False
) -> Iterator[Trace]:
    """`iter_chunks`; `whole`: every chunk is kept, so the running node count is bounded too."""
    path = os.fspath(path)
    limits = limits or Limits()
    st = os.stat(path)
    file_bytes = st.st_size if stat.S_ISREG(st.st_mode) else None  # a pipe: bytes read so far instead
    total = 0  # nodes built so far
    metadata = None
    yielded = False
    names: tuple[list[str], dict] = ([""], {b"": 0})
    groups: tuple[list[str], dict] = ([], {})
    for block in iter_frame_blocks(path, limits):
        starts, ends = block.starts, block.ends
        index0 = block.index0
        kind = block.kind
        if metadata is None:
            metadata = _metadata(path, block, kind)
            starts, ends, index0 = starts[1:], ends[1:], 1
        if progress is not None:
            progress(block.base + int(block.ends[-1]))
        if starts.size == 0:
            continue
        total = total + int(starts.size) if whole else int(starts.size)
        seen = file_bytes if file_bytes is not None else block.base + int(block.ends[-1])
        check_nodes(path, total, seen, limits.max_nodes if whole else 1 << 62, limits.max_build_ratio)
        try:
            chunk = Trace.decode(block.buf, starts, ends, metadata=metadata, names=names, groups=groups)
        except WireError as e:
            i = int(np.searchsorted(starts, e.offset, side="right")) - 1
            node_id = _peek_id(block.buf, starts[i], ends[i])
            raise TraceFormatError(
                path,
                e.message,
                offset=block.base + e.offset,
                offset_kind=kind,
                message_index=index0 + i,
                node_id=node_id,
            ) from None
        bad = bad_rows(chunk)
        if bad:
            i, exc = bad[0]
            payload = block.buf[starts[i] : ends[i]].tobytes()
            off, field = locate(payload)
            raise TraceFormatError(
                path,
                f"node field {field or '?'} does not parse ({exc})",
                offset=block.base + int(starts[i]) + off,
                offset_kind=kind,
                message_index=index0 + i,
                node_id=int(chunk.ids[i]),
            )
        yielded = True
        yield chunk
    if metadata is None:
        raise TraceFormatError(
            path, f"{_empty(path)}: expected a GlobalMetadata message first", offset=0, offset_kind=_kind(path)
        )
    if empty and not yielded:
        yield Trace(0, metadata=metadata)


def _peek_id(buf: np.ndarray, start: int, end: int) -> int | None:
    """The node id of a malformed message, if its first field is a readable id."""
    if end > start and buf[start] == 0x08:
        v, s = 0, 0
        for p in range(start + 1, min(end, start + 11)):
            v |= int(buf[p] & 0x7F) << s
            s += 7
            if buf[p] < 0x80:
                return v
    return None


def read_trace(path: str | os.PathLike, *, limits: Limits | None = None, progress: Progress | None = None) -> Trace:
    """Load a whole `.et` file (plain or gzip) into a columnar Trace.

    Refused before decoding (TraceFormatError) past `Limits.max_nodes` (default: what half the
    available memory holds, or $CHAKRA_TRACE_MAX_NODES) or `Limits.max_build_ratio`.
    """
    chunks = list(_chunks(path, limits, progress, whole=True, empty=True))
    if len(chunks) == 1:
        return chunks[0]
    trace = Trace.concat(chunks, consume=True)
    del chunks
    release_free_memory()
    return trace


def release_free_memory() -> None:
    """Hand heap pages freed by a bulk load's temporaries back to the OS (glibc keeps them)."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None  # libc's malloc_trim, False where there is none, None until looked up


def iter_nodes(path: str | os.PathLike, *, limits: Limits | None = None) -> Iterator:
    """Stream protobuf Node messages one at a time, in constant memory."""
    path = os.fspath(path)
    first = True
    for block in iter_frame_blocks(path, limits):
        raw = block.buf
        kind = block.kind
        for i, (s, e) in enumerate(zip(block.starts.tolist(), block.ends.tolist())):
            if first:
                first = False
                continue
            try:
                yield pb.Node.FromString(raw[s:e].tobytes())
            except Exception as exc:
                raise TraceFormatError(
                    path,
                    f"node message does not parse ({exc})",
                    offset=block.base + s,
                    offset_kind=kind,
                    message_index=block.index0 + i,
                ) from None
    if first:
        raise TraceFormatError(
            path, f"{_empty(path)}: expected a GlobalMetadata message first", offset=0, offset_kind=_kind(path)
        )


def read_metadata(path: str | os.PathLike, *, limits: Limits | None = None):
    path = os.fspath(path)
    for block in iter_frame_blocks(path, limits):
        return _metadata(path, block, block.kind)
    raise TraceFormatError(path, f"{_empty(path)}: expected a GlobalMetadata message first", offset=0)


# --------------------------------------------------------------------------- writing


GZIP_LEVEL = 1  # 4x faster than level 6 for ~13% larger files; readers don't care


_HELD = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT") if hasattr(signal, n))


def _hold_signals():
    """Block SIGTERM and SIGINT for this thread (POSIX); the mask to restore, None where unsupported."""
    block = getattr(signal, "pthread_sigmask", None)
    return block(signal.SIG_BLOCK, _HELD) if block is not None else None


def _release_signals(mask) -> None:
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def output_folder(path: str | os.PathLike) -> Path:
    """Make the folder an output `path` goes into (and its parents), as every writer does: the one
    place outputs get their folder (`atomic_output`, `io.outputs.file_set`, output folders)."""
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # (a file where a folder is to be, no permission: named, one line)
        raise type(e)(e.errno, f"cannot make the folder for {Path(path).name} ({e.strerror})", str(folder)) from None
    return folder


@contextmanager
def atomic_output(
    path: str | os.PathLike,
    *,
    compress: bool | None = None,
    compresslevel: int = GZIP_LEVEL,
    leftovers: bool = True,
) -> Iterator[io.BufferedIOBase]:
    """A file handle whose content replaces `path` only if the block finishes without error.

    `compress=None` gzips when the name ends in `.gz`. The content goes to `.<name>.<pid>.<random>.tmp`
    beside `path` first; with `leftovers`, such files that a killed run (SIGKILL, power loss) left
    for the same name are removed first (`remove_leftovers`; a fresh temporary folder needs no look).
    The folder is made if missing (`output_folder`).
    """
    path = Path(path)
    if compress is None:
        compress = path.suffix == ".gz"
    output_folder(path)
    if leftovers:
        remove_leftovers(path)
    # SIGTERM / Ctrl-C held off until the file is one the cleanup below removes: a signal that
    # lands between its creation and the `try` would leave it behind (the handlers raise)
    mask = _hold_signals()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent or ".")
    except OSError as e:  # name the file asked for, not the temporary one beside it
        _release_signals(mask)
        raise type(e)(e.errno, f"cannot write here ({e.strerror})", str(path)) from None
    except BaseException:
        _release_signals(mask)
        raise
    ACTIVE.add(os.path.abspath(tmp))
    try:
        _release_signals(mask)  # (a signal that came meanwhile is raised here, inside the `try`)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file normal permissions
        with os.fdopen(fd, "wb") as raw:
            if compress:
                with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=compresslevel, mtime=0) as gz:
                    yield gz
            else:
                yield raw
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    finally:
        ACTIVE.discard(os.path.abspath(tmp))


#: Temporaries this process is writing now (absolute paths): the others named with its own
#: process id were left by an earlier write that failed part-way (`io.outputs`' commit marker).
ACTIVE: set[str] = set()


def _temporary(name: str) -> re.Pattern:
    """What `atomic_output` (and `io.outputs`) name the temporaries of an output `name`: a dot, the
    name, the writer's process id, mkstemp's or mkdtemp's random part, then what it is."""
    return re.compile(rf"^\.{re.escape(name)}\.(?P<pid>[0-9]{{1,10}})\.[A-Za-z0-9_]{{8}}(?:\.set|\.commit)?\.tmp$")


def alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def leftover_names(path: str | os.PathLike) -> list[str]:
    """Temporaries of `path` (see `_temporary`) in its folder whose writer is no longer running
    (or is this process, which no longer writes them)."""
    path = Path(path)
    folder = path.parent or Path(".")
    pattern = _temporary(path.name)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    me = os.getpid()

    def left(n: str, pid: int) -> bool:
        return os.path.abspath(folder / n) not in ACTIVE if pid == me else not alive(pid)

    return [n for n in names if (m := pattern.match(n)) and left(n, int(m.group("pid")))]


def remove_leftovers(path: str | os.PathLike) -> None:
    """Remove what a killed writer of `path` left beside it: its temporary files, and the temporary
    folders of a set of files (`io.outputs`). Only names of our own pattern for this output and of
    no running process are touched; links are removed, never followed."""
    path = Path(path)
    folder = path.parent or Path(".")
    for name in leftover_names(path):
        q = folder / name
        try:
            if stat.S_ISDIR(os.lstat(q).st_mode):
                shutil.rmtree(q, ignore_errors=True)
            else:
                os.unlink(q)
        except OSError:
            pass  # gone already, or not ours to remove: the new output is written all the same


def encode_trace(trace: Trace, chunk: int = 1 << 18) -> Iterator[bytes]:
    """The `.et` bytes of a trace, in pieces (metadata frame, then framed nodes)."""
    meta = trace.metadata.SerializeToString()
    yield encode_varint_int(len(meta)) + meta
    for s in range(0, len(trace), chunk):
        part = trace if (s == 0 and len(trace) <= chunk) else trace.slice(s, s + chunk)
        yield frame(node_payloads(part)).data.tobytes()


def write_trace(
    trace: Trace,
    path: str | os.PathLike,
    *,
    compress: bool | None = None,
    compresslevel: int = GZIP_LEVEL,
    leftovers: bool = True,
) -> None:
    """Write a trace as `.et` (gzip if `compress`, or if the name ends in `.gz`), atomically
    (`atomic_output`, which `leftovers` goes to)."""
    with atomic_output(path, compress=compress, compresslevel=compresslevel, leftovers=leftovers) as f:
        for piece in encode_trace(trace):
            f.write(piece)
