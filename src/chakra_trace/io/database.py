"""DuckDB connections that treat what they read as data, never as a capability.

A catalog someone shared, a sweep's rows, a spec's ``where``: DuckDB would let any of them read
and write local files (``read_text``, ``COPY``, ``ATTACH``), list folders (``glob``) and fetch
or load extensions. Every connection the project opens goes through `connect`, which switches
all of that off and locks the configuration so no statement can switch it back on. What such a
connection still reads: its own database file (a catalog) and tables registered from Python
(Arrow tables the project read itself, e.g. a sweep's Parquet parts).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import ChakraError
from .et import output_folder

#: The settings of every connection (DuckDB's names). External access off also turns off Python
#: replacement scans (a query naming a Python variable) and persistent secrets.
LOCKED = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_persistent_secrets": False,
    "python_enable_replacements": False,
    "lock_configuration": True,
}


def connect(path: str = ":memory:", *, read_only: bool = False, what: str = "database", **settings: Any):
    """A locked DuckDB connection on ``path`` (a DuckDB file or ":memory:"); ``settings``: more
    DuckDB settings fixed at start (``memory_limit``, ``threads``), since none can change after."""
    try:
        import duckdb
    except ImportError:
        raise ChakraError("DuckDB is needed here: pip install 'chakra-trace[db]'") from None
    if not read_only and path != ":memory:":  # a new database file: its folder made, as every writer does
        output_folder(path)
    try:
        return duckdb.connect(path, read_only=read_only, config={**settings, **LOCKED})
    except duckdb.Error as e:
        raise ChakraError(f"{path}: cannot open as a DuckDB {what} ({first_line(e)})") from None


def first_line(e: BaseException) -> str:
    """An exception's message on one line (DuckDB's run over several)."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


@contextmanager
def time_limit(con, seconds: float) -> Iterator[None]:
    """Statements run on ``con`` inside the block are interrupted after ``seconds`` (DuckDB then
    raises its InterruptException, see `is_interrupt`): for statements whose cost someone
    else's text decides. Fetch the rows inside the block too."""
    timer = threading.Timer(seconds, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def is_interrupt(e: BaseException) -> bool:
    import duckdb

    return isinstance(e, duckdb.InterruptException)
