"""The catalog as Parquet, one folder per table (`DIR/<table>/<table>.parquet`): the layout a
fleet keeps on object storage, where Spark, Trino or DuckDB read `DIR/<table>/*.parquet`
(more files, e.g. one per day, can sit beside it). Each file is written to a temporary name
and renamed, so a reader never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path

from .schema import TABLES


def export(con, directory: str | os.PathLike) -> list[Path]:
    """Write every table; returns the files."""
    out = []
    for table in TABLES:
        folder = Path(directory) / table
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{table}.parquet"
        tmp = folder / f".{table}.parquet.{os.getpid()}.tmp"
        try:
            con.execute(f"COPY (SELECT * FROM {table}) TO '{_quote(tmp)}' (FORMAT PARQUET, COMPRESSION ZSTD)")
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        out.append(final)
    return out


def _quote(p: Path) -> str:
    return str(p).replace("'", "''")
