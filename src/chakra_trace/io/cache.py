"""Converted traces kept beside their sources: opening a `chakra collect` folder a second time
reads `.et` files instead of converting every rank's JSON again.

A cached file is named by a key of its sources' names, sizes and modification times and of the
converter's own stamp, so a changed source or converter converts afresh. A folder that cannot be
written just is not cached; `CHAKRA_TRACE_CACHE=0` turns caching off.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import ChakraError
from ..schema.trace import Trace
from .et import read_trace, write_trace

#: The folder, next to the sources, that holds the converted copies.
CACHE_DIR = ".chakra-cache"


def enabled() -> bool:
    return os.environ.get("CHAKRA_TRACE_CACHE", "1") not in ("0", "", "false", "no")


def cache_key(sources: Sequence[Path], stamp: str = "") -> str:
    """What a converted copy depends on: each source's name, size and mtime, and the converter's stamp."""
    h = hashlib.sha256(stamp.encode())
    for p in sources:
        st = p.stat()
        h.update(f"\0{p.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def cached_trace(sources: Sequence[Path], name: str, make: Callable[[], Trace], *, stamp: str = "") -> Trace:
    """The trace `make()` builds from `sources` (files in one folder), read from `<folder>/.chakra-cache/
    <name>.<key>.et` when an earlier call kept it there; kept there otherwise."""
    if not enabled():
        return make()
    folder = sources[0].parent / CACHE_DIR
    path = folder / f"{name}.{cache_key(sources, stamp)}.et"
    if path.is_file():
        try:
            return read_trace(path)
        except ChakraError:
            pass  # damaged (a disk filled up mid-write elsewhere): convert again
    trace = make()
    try:
        folder.mkdir(exist_ok=True)
        for old in folder.glob(f"{name}.*.et"):  # copies of older sources or converters
            old.unlink()
        write_trace(trace, path)
    except OSError:
        pass  # a read-only folder: the conversion is simply not kept
    return trace
