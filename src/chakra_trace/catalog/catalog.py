"""`Catalog`: a fleet of jobs in one embedded DuckDB file, the library behind `chakra catalog`.

Open (or create) a catalog, add jobs (paths or in-memory workloads; re-adding is a no-op),
query it in SQL, render the fleet report and export Parquet. DuckDB, pyarrow and pandas are
imported only when used (`pip install chakra-trace[db]`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import ChakraError
from . import export as _export
from . import queries, report
from .ingest import AddResult, ingest
from .schema import ddl


def _connect(path: str, read_only: bool):
    try:
        import duckdb
    except ImportError:
        raise ChakraError("the catalog needs DuckDB: pip install 'chakra-trace[db]'") from None
    if read_only and path != ":memory:" and not os.path.exists(path):
        raise ChakraError(f"{path}: no such catalog (expected a DuckDB file made by `chakra catalog add`)")
    try:
        return duckdb.connect(path, read_only=read_only)
    except duckdb.Error as e:
        raise ChakraError(f"{path}: cannot open as a DuckDB catalog ({e})") from None


class Catalog:
    """A fleet database. `path` is a DuckDB file (created with the tables when new) or
    ":memory:"."""

    def __init__(self, path: str | os.PathLike = ":memory:", *, read_only: bool = False):
        self.path = str(path)
        self.con = _connect(self.path, read_only)
        if not read_only:
            for stmt in ddl():
                self.con.execute(stmt)
        missing = {"jobs", "collectives"} - {r[0] for r in self.con.execute("SHOW TABLES").fetchall()}
        if missing:
            raise ChakraError(f"{self.path}: not a chakra catalog (no table {sorted(missing)[0]})")

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
        if isinstance(sources, (str, os.PathLike)):
            sources = [sources]
        return ingest(self.con, sources, jobs=jobs, tags=tags, date=date, batch=batch, progress=progress)

    def query(self, sql: str, params: list | None = None):
        """The result of a SQL statement as a pandas DataFrame (`queries.NAMED` holds the usual ones)."""
        import duckdb

        try:
            return self.con.execute(sql, params or []).df()
        except duckdb.Error as e:
            raise ChakraError(f"query failed: {e}") from None

    def rows(self, sql: str, params: list | None = None) -> tuple[list[str], list[tuple]]:
        """(column names, rows) of a SQL statement, without pandas."""
        import duckdb

        try:
            cur = self.con.execute(sql, params or [])
            return [d[0] for d in cur.description], cur.fetchall()
        except duckdb.Error as e:
            raise ChakraError(f"query failed: {e}") from None

    def imbalance(self, limit: int | None = None):
        """The fleet-wide imbalance query (`queries.IMBALANCE`) as a DataFrame."""
        return self.query(queries.limited(queries.IMBALANCE, limit))

    def report(self, path: str | os.PathLike, *, title: str = "Fleet report", limit: int = 50) -> Path:
        """Write the fleet report (self-contained HTML)."""
        return report.write_report(self.con, path, title, limit)

    def export(self, directory: str | os.PathLike) -> list[Path]:
        """Every table as Parquet under `directory/<table>/`."""
        return _export.export(self.con, directory)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
