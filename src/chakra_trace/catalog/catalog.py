"""`Catalog`: a fleet of jobs in one embedded DuckDB file, the library behind `chakra catalog`.

Open (or create) a catalog, add jobs (paths or in-memory workloads; re-adding is a no-op),
query it in SQL, render the fleet report and export Parquet. DuckDB, pyarrow and pandas are
imported only when used (`pip install chakra-trace[db]`).

A catalog may come from someone else, so it is opened as data: a regular DuckDB file (a SQLite
or any other file is refused before DuckDB sees it, so no extension is fetched), on a locked
connection (`io.database`: no file access, no extensions, settings frozen) that even the
user's own SQL runs on, and holding base tables only: the chakra tables exactly as
`schema.ddl` makes them, no view, macro, generated column, default or check anywhere in it
(any of them would run someone else's SQL on every read).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import ChakraError
from ..io.database import connect, first_line
from ..io.documents import open_regular, short
from . import export as _export
from . import queries, report
from .ingest import AddResult, ingest
from .schema import TABLES, ddl

_DUCKDB_MAGIC = b"DUCK"  # at byte 8 of every DuckDB database file
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_file(path: str, read_only: bool) -> None:
    """Refuse, before DuckDB opens it, a path that is not a DuckDB database file (a new catalog
    may be created where nothing is)."""
    if not os.path.lexists(path):
        if read_only:
            raise ChakraError(f"{path}: no such catalog (expected a DuckDB file made by `chakra catalog add`)")
        return
    with open_regular(path, "catalog") as f:
        head = f.read(16)
    if head.startswith(_SQLITE_MAGIC):
        raise ChakraError(f"{path}: a SQLite database, not a DuckDB catalog (only DuckDB files are opened)")
    if head[8:12] != _DUCKDB_MAGIC:
        raise ChakraError(f"{path}: not a DuckDB database file (a catalog is made by `chakra catalog add`)")


def _connect(path: str, read_only: bool):
    if path != ":memory:":
        _check_file(path, read_only)
    return connect(path, read_only=read_only, what="catalog")


def _plain(name: str) -> str:
    """A name from the file as a message shows it: as it is when short and printable."""
    return name if len(name) <= 80 and name.isprintable() else short(name)


def _rows(con, sql: str, order: str = "") -> list[tuple]:
    """Rows of a catalog-function query (``sql`` ends in a WHERE condition) on this file's database."""
    return con.execute(f"{sql} AND database_name = current_database() {order}").fetchall()


def check_code(con, path: str) -> None:
    """Refuse views, macros, computed columns and CHECK / FOREIGN KEY constraints."""
    views = _rows(con, "SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal")
    if views:
        raise ChakraError(f"{path}: {_plain('.'.join(views[0]))} is a view; a catalog holds base tables only")
    macros = _rows(
        con,
        "SELECT schema_name, function_name FROM duckdb_functions() "
        "WHERE NOT internal AND function_type IN ('macro', 'table_macro')",
    )
    if macros:
        raise ChakraError(f"{path}: {_plain('.'.join(macros[0]))} is a macro; a catalog holds base tables only")
    code = _rows(
        con, "SELECT table_name, column_name FROM duckdb_columns() WHERE NOT internal AND column_default IS NOT NULL"
    )
    if code:
        raise ChakraError(
            f"{path}: table {_plain(code[0][0])}: column {_plain(code[0][1])} is computed (a default or generated "
            "column); a catalog holds plain columns only"
        )
    checks = _rows(
        con,
        "SELECT table_name FROM duckdb_constraints() WHERE constraint_type NOT IN ('PRIMARY KEY', 'NOT NULL', 'UNIQUE')",
    )
    if checks:
        raise ChakraError(
            f"{path}: table {_plain(checks[0][0])} has a CHECK or FOREIGN KEY constraint; a catalog holds data only"
        )


def check_tables(con, path: str) -> None:
    """Refuse chakra tables missing, or with other columns or types than `schema.ddl` makes."""
    have: dict[str, list[tuple[str, str]]] = {}
    for table, column, typ in _rows(
        con,
        "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' "
        "AND table_name IN (SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main')",
        "ORDER BY table_name, column_index",
    ):
        have.setdefault(table, []).append((column, typ))
    for table, cols in TABLES.items():
        got = have.get(table)
        if got is None:
            raise ChakraError(f"{path}: not a chakra catalog (no table {table})")
        for (c, t), (gc, gt) in zip(cols, got):
            if (c, t) != (gc, gt):
                raise ChakraError(
                    f"{path}: table {table}: column {_plain(gc)} {_plain(gt)} where a chakra catalog has {c} {t}"
                )
        if len(got) != len(cols):
            raise ChakraError(f"{path}: table {table}: {len(got)} columns where a chakra catalog has {len(cols)}")


class Catalog:
    """A fleet database. `path` is a DuckDB file (created with the tables when new) or
    ":memory:"."""

    def __init__(self, path: str | os.PathLike = ":memory:", *, read_only: bool = False):
        import duckdb

        self.path = str(path)
        self.con = _connect(self.path, read_only)
        try:
            check_code(self.con, self.path)
            if not read_only:
                for stmt in ddl():
                    self.con.execute(stmt)
            check_tables(self.con, self.path)
        except duckdb.Error as e:
            self.con.close()
            raise ChakraError(f"{self.path}: cannot read as a chakra catalog ({first_line(e)})") from None
        except ChakraError:
            self.con.close()
            raise

    def add(
        self,
        sources: Iterable[Any],
        *,
        jobs: int = 1,
        tags: dict[str, str] | None = None,
        date=None,
        batch: int = 500,
        progress: Callable[[int], None] | None = None,
    ) -> AddResult:
        """Add jobs: paths `Workload.open` accepts, (name, Workload) or (name, Workload, tags)
        pairs, or `FleetJob`s. A job whose content hash is already here is skipped. `jobs`:
        worker processes extracting features; `tags` ({key: value}) and `date` (YYYY-MM-DD)
        apply to every job added; `progress(n)` is called as jobs finish."""
        import duckdb

        if isinstance(sources, (str, os.PathLike)):
            sources = [sources]
        try:
            return ingest(self.con, sources, jobs=jobs, tags=tags, date=date, batch=batch, progress=progress)
        except duckdb.Error as e:
            raise ChakraError(f"{self.path}: cannot add the jobs ({first_line(e)})") from None

    def query(self, sql: str, params: list | None = None):
        """The result of a SQL statement as a pandas DataFrame (`queries.NAMED` holds the usual ones)."""
        import duckdb

        try:
            return self.con.execute(sql, params or []).df()
        except duckdb.Error as e:
            raise ChakraError(f"{self.path}: query failed: {first_line(e)}") from None

    def rows(self, sql: str, params: list | None = None) -> tuple[list[str], list[tuple]]:
        """(column names, rows) of a SQL statement, without pandas."""
        import duckdb

        try:
            cur = self.con.execute(sql, params or [])
            return [d[0] for d in cur.description or []], cur.fetchall()
        except duckdb.Error as e:
            raise ChakraError(f"{self.path}: query failed: {first_line(e)}") from None

    def imbalance(self, limit: int | None = None):
        """The fleet-wide imbalance query (`queries.IMBALANCE`) as a DataFrame."""
        return self.query(queries.limited(queries.IMBALANCE, limit))

    def report(self, path: str | os.PathLike, *, title: str = "Fleet report", limit: int = 50) -> Path:
        """Write the fleet report (self-contained HTML)."""
        import duckdb

        try:
            return report.write_report(self.con, path, title, limit)
        except duckdb.Error as e:
            raise ChakraError(f"{self.path}: cannot make the report ({first_line(e)})") from None

    def export(self, directory: str | os.PathLike) -> list[Path]:
        """Every table as Parquet under `directory/<table>/`."""
        import duckdb

        try:
            return _export.export(self.con, directory)
        except duckdb.Error as e:
            raise ChakraError(f"{self.path}: cannot export ({first_line(e)})") from None

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
