"""Converted copies kept in the user's cache: opening a `chakra collect` folder a second time
reads `.et` files instead of converting every rank's JSON again.

The cache is the user's own folder, never one beside the sources: a shared folder is data, and
a cache planted in it (or a link named like one) must neither be read nor written through. It
is `$CHAKRA_TRACE_CACHE_DIR`, else `$XDG_CACHE_HOME/chakra-trace`, else `~/.cache/chakra-trace`,
made 0700; one that is a link, not a folder, someone else's, or writable by others is not used.
An entry is named by a hash of its sources' bytes (not their names, sizes or times, which a
tarball carries along with a forged copy) and of what made it, so only a conversion of these
very bytes is ever read back. Entries are opened without following links. The folder is kept
under `$CHAKRA_TRACE_CACHE_MAX_BYTES` (default 2 GiB), least recently used first out.
`CHAKRA_TRACE_CACHE=0` turns caching off.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..errors import ChakraError
from ..schema.trace import Trace
from .documents import open_regular
from .et import atomic_output, read_trace, write_trace
from .memory import env_int

DIR_ENV = "CHAKRA_TRACE_CACHE_DIR"
MAX_BYTES_ENV = "CHAKRA_TRACE_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 << 30
_CHUNK = 1 << 20


def enabled() -> bool:
    return os.environ.get("CHAKRA_TRACE_CACHE", "1") not in ("0", "", "false", "no")


def cache_dir() -> Path:
    """Where converted copies are kept: $CHAKRA_TRACE_CACHE_DIR, else $XDG_CACHE_HOME/chakra-trace,
    else ~/.cache/chakra-trace."""
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "chakra-trace"


def cache_key(sources: Sequence[Path], stamp: str = "") -> str:
    """What a cached copy depends on: each source's bytes, in order, and the maker's `stamp`
    (blake2b, read in 1 MiB pieces; a source that is not a regular file is a ChakraError)."""
    h = hashlib.blake2b(stamp.encode(), digest_size=20)
    for p in sources:
        with open_regular(p, "trace") as f:
            h.update(b"\0%d\0" % os.fstat(f.fileno()).st_size)
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    return h.hexdigest()


@contextmanager
def _folder() -> Iterator[Path | None]:
    """The cache folder when it is safe to use (made 0700 if absent; see the module docstring),
    held open so that it is not swapped for a link meanwhile; None when it is not."""
    path = cache_dir()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:  # a link (O_NOFOLLOW), a file in its place, no permission: no cache
        yield None
        return
    try:
        st = os.fstat(fd)
        mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
        yield path if stat.S_ISDIR(st.st_mode) and mine and not st.st_mode & 0o022 else None
    finally:
        os.close(fd)


def _entry(folder: Path, name: str) -> int | None:
    """An open descriptor of the regular file `name` in the cache (never through a link), or None."""
    try:
        fd = os.open(folder / name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    try:
        os.utime(fd if os.utime in os.supports_fd else folder / name)  # recently used: trimmed last
    except OSError:
        pass
    return fd


def load(name: str) -> bytes | None:
    """The bytes kept under `name` (see `store`), or None."""
    if not enabled():
        return None
    with _folder() as folder:
        fd = None if folder is None else _entry(folder, name)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read()


def store(name: str, data: bytes) -> None:
    """Keep `data` under `name` (a key from `cache_key` in it), if there is a usable cache."""
    if not enabled():
        return
    with _folder() as folder:
        if folder is None:
            return
        try:
            with atomic_output(folder / name, compress=False) as f:
                f.write(data)
        except OSError:
            return  # a full disk, a read-only home: not kept
        _trim(folder)


def cached_trace(sources: Sequence[Path], name: str, make: Callable[[], Trace], *, stamp: str = "") -> Trace:
    """The trace `make()` builds from `sources`, read from the cache when an earlier call kept a
    conversion of the same bytes by the same maker (`stamp`) there; kept there otherwise. `name`
    says what it is (`rank0`), for whoever looks in the folder."""
    if not enabled():
        return make()
    entry = f"{name}.{cache_key(sources, name + chr(0) + stamp)}.et"
    with _folder() as folder:
        fd = None if folder is None else _entry(folder, entry)
        if fd is not None:
            try:
                return read_trace(_fd_path(fd))
            except (ChakraError, OSError):
                pass  # damaged (a disk filled up mid-write): convert again
            finally:
                os.close(fd)
    trace = make()
    with _folder() as folder:
        if folder is not None:
            try:
                write_trace(trace, folder / entry)
            except OSError:
                return trace  # a full disk, a read-only home: not kept
            _trim(folder)
    return trace


def _fd_path(fd: int) -> str:
    """A path that opens the file `fd` is open on (itself, not whatever its name now is)."""
    for base in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(base):
            return f"{base}/{fd}"
    raise OSError(f"no /proc/self/fd here to read descriptor {fd} by")


def max_bytes() -> int:
    """How much the cache folder may hold: $CHAKRA_TRACE_CACHE_MAX_BYTES, else 2 GiB."""
    return env_int(MAX_BYTES_ENV, "a number of bytes") or DEFAULT_MAX_BYTES


def _trim(folder: Path) -> None:
    """Remove the least recently used entries until the folder holds at most `max_bytes()`."""
    entries = []
    try:
        with os.scandir(folder) as it:
            for e in it:
                if e.name.startswith("."):  # a write in progress (`atomic_output`)
                    continue
                st = e.stat(follow_symlinks=False)
                entries.append((st.st_mtime_ns, st.st_size, e.name))
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    limit = max_bytes()
    for _, size, name in sorted(entries):
        if total <= limit:
            break
        try:
            os.unlink(folder / name)
        except OSError:
            continue
        total -= size
