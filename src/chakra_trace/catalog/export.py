"""The catalog as Parquet, one folder per table (`DIR/<table>/<table>.parquet`): the layout a
fleet keeps on object storage, where Spark, Trino or DuckDB read `DIR/<table>/*.parquet`
(more files, e.g. one per day, can sit beside it). Each file is written to a temporary name
and renamed, so a reader never sees half a file.

The rows stream out of DuckDB as Arrow batches and pyarrow writes the files: the catalog's
DuckDB connection has no file access at all (`io.database`), so DuckDB's own COPY cannot run.
"""

from __future__ import annotations

import os
from pathlib import Path

from .schema import TABLES, arrow_schema

BATCH_ROWS = 65_536


def export(con, directory: str | os.PathLike) -> list[Path]:
    """Write every table; returns the files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    for table in TABLES:
        folder = Path(directory) / table
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{table}.parquet"
        tmp = folder / f".{table}.parquet.{os.getpid()}.tmp"
        try:
            rel = con.sql(f"SELECT * FROM {table}")
            reader = getattr(rel, "to_arrow_reader", None) or rel.fetch_arrow_reader  # (DuckDB 2 / 1)
            batches = reader(BATCH_ROWS)
            schema = arrow_schema(table)
            with pq.ParquetWriter(tmp, schema, compression="zstd") as w:
                for batch in batches:
                    w.write_table(pa.Table.from_batches([batch]).cast(schema))
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        out.append(final)
    return out
