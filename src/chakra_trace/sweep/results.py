"""A sweep's results folder: Parquet part files of rows, each written atomically, queryable with
DuckDB as the table ``points``.

Layout: ``part-<time>-<pid>-<n>-<random>.parquet`` (rows of finished points, appended as they come; a
part appears whole or not at all: temp file + rename) and ``sweep.json`` (the spec of the latest
run, its axes). A point is finished when its id is in a part, so a rerun skips it; an
interrupted run loses only the rows not yet flushed.

A results folder may come from someone else, so it is read as data: parts must be regular files
in the folder (not links), are read by pyarrow (not by DuckDB, whose connection here has no
file access at all: `io.database`), and together may hold at most half the memory available;
``sweep.json`` is a bounded JSON document (`io.documents`).
"""

from __future__ import annotations

import json
import os
import stat
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ChakraError
from ..io.database import connect, first_line
from ..io.documents import open_regular, read_json, short
from ..io.et import atomic_output
from ..io.memory import available_bytes

PART_GLOB = "part-*.parquet"
META = "sweep.json"

#: Types of the measured columns (inputs are inferred; a part of only failed points keeps these).
_TYPES = {
    "point_id": "string",
    "sweep": "string",
    "status": "string",
    "error": "string",
    "workload_id": "string",
    "sim_npus": "int64",
    "sim_mode": "string",
    "net_topology": "list<string>",
    "net_dims": "list<int64>",
    "net_bandwidth": "list<double>",
    "net_latency": "list<double>",
    "net_algorithms": "list<string>",
    "step_ns": "int64",
    "recording_ns": "int64",
    "steps": "int64",
    "dim_utilization": "list<double>",
    "collectives": "int64",
    "events": "int64",
    "sim_warnings": "int64",
    "chakra_version": "string",
    "python_version": "string",
    "schema": "string",
    "energy_device": "string",
}
_FLOATS = (
    "step_s compute_s comm_s exposed_comm_s overlap_s idle_s max_dim_utilization max_link_utilization "
    "coll_all_reduce_s coll_all_gather_s coll_reduce_scatter_s coll_all_to_all_s coll_other_s npu_s "
    "price_npu_hour cost_usd cost sim_wall_s wall_s energy_j energy_compute_j energy_comm_j energy_idle_j "
    "avg_power_w perf_per_w flop_per_j"
).split()


def _arrow_type(name: str):
    import pyarrow as pa

    t = _TYPES.get(name, "double" if name in _FLOATS else None)
    if t is None:
        return None
    if t.startswith("list<"):
        inner = t[5:-1]
        return pa.list_(pa.string() if inner == "string" else pa.int64() if inner == "int64" else pa.float64())
    return {"string": pa.string(), "int64": pa.int64(), "double": pa.float64()}[t]


def write_part(folder: Path, rows: list[dict], seq: int) -> Path:
    """Rows as one Parquet part file, atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r))
    arrays, fields = [], []
    for n in names:
        values = [r.get(n) for r in rows]
        t = _arrow_type(n)
        arr = pa.array(values, type=t) if t is not None else pa.array(values)
        arrays.append(arr)
        fields.append(pa.field(n, arr.type))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    # (a random token too: two runs in one process and second must not replace each other's parts)
    path = folder / f"part-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{seq:05d}-{uuid.uuid4().hex[:8]}.parquet"
    with atomic_output(path, compress=False) as f:
        pq.write_table(table, f)
    return path


class PartWriter:
    """Collects rows and flushes them as a part every ``rows`` rows or ``seconds`` seconds."""

    def __init__(self, folder: Path, rows: int = 256, seconds: float = 5.0):
        self.folder, self.max_rows, self.seconds = folder, rows, seconds
        self.rows: list[dict] = []
        self.parts: list[Path] = []
        self.last = time.monotonic()

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.max_rows or time.monotonic() - self.last >= self.seconds:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.parts.append(write_part(self.folder, self.rows, len(self.parts)))
            self.rows = []
        self.last = time.monotonic()


def part_files(folder: str | os.PathLike) -> list[Path]:
    return sorted(Path(folder).glob(PART_GLOB))


def _read_part(path: Path, columns: list[str] | None, budget: list[int]):
    """One part as an Arrow table: a regular file of the folder (a link is refused), whose rows
    fit what is left of ``budget`` (bytes, decreased)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if stat.S_ISLNK(os.lstat(path).st_mode):
        raise ChakraError(f"{path}: a link; a results folder holds its own part files only")
    with open_regular(path, "Parquet part") as f:
        try:
            pf = pq.ParquetFile(f)
            meta = pf.metadata
            size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            size = max(size, meta.num_rows * meta.num_columns)
            if size > budget[0]:
                raise ChakraError(
                    f"{path}: {size:,} bytes of rows, more than the {budget[0]:,} left of half the memory available"
                )
            budget[0] -= size
            if columns is not None and not set(columns) <= set(pf.schema_arrow.names):
                raise ChakraError(f"{path}: no column {sorted(set(columns) - set(pf.schema_arrow.names))[0]}")
            return pf.read(columns=columns)
        except (pa.ArrowException, OSError, ValueError, TypeError, IndexError) as e:
            raise ChakraError(f"{path}: not a readable Parquet part ({first_line(e)})") from None


def read_parts(folder: str | os.PathLike, columns: list[str] | None = None):
    """Every part of a results folder as one Arrow table (columns matched by name; a column a
    part lacks is null there; numbers of different types become doubles)."""
    import pyarrow as pa

    parts = part_files(folder)
    if not Path(folder).is_dir():
        raise ChakraError(f"{folder}: no such results folder")
    if not parts:
        raise ChakraError(f"{folder}: no results ({PART_GLOB}) yet")
    budget = [available_bytes() // 2]
    tables = _unify([_read_part(p, columns, budget) for p in parts], folder)
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise ChakraError(f"{folder}: parts whose columns do not combine ({first_line(e)})") from None


def _unify(tables: list, folder) -> list:
    """Tables whose columns of one name have one type: numbers of several types as doubles,
    numbers and text as text; anything else that differs is an error naming the column."""
    import pyarrow as pa

    types: dict[str, set] = {}
    for t in tables:
        for f in t.schema:
            if not pa.types.is_null(f.type):
                types.setdefault(f.name, set()).add(f.type)
    target = {}
    for name, ts in types.items():
        if len(ts) < 2:
            continue
        if all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in ts):
            target[name] = pa.float64()
        elif all(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t) for t in ts):
            target[name] = pa.string()
        else:
            raise ChakraError(f"{folder}: column {short(name)} has different types in different parts")
    if not target:
        return tables
    out = []
    for t in tables:
        for name, typ in target.items():
            if name in t.column_names and t.schema.field(name).type != typ:
                t = t.set_column(t.column_names.index(name), name, t.column(name).cast(typ))
        out.append(t)
    return out


def finished_ids(folder: str | os.PathLike) -> set[str]:
    """Ids of the points a results folder already holds."""
    if not part_files(folder):
        return set()
    column = read_parts(folder, ["point_id"]).column("point_id")
    return {str(x) for x in column.to_pylist() if x is not None}


def write_meta(folder: Path, meta: dict) -> None:
    with atomic_output(folder / META, compress=False) as f:
        f.write((json.dumps(meta, indent=1, default=str) + "\n").encode())


def read_meta(folder: str | os.PathLike) -> dict:
    """``sweep.json`` of a results folder ({} when there is none): a mapping whose ``axes`` is a
    list of column names."""
    p = Path(folder) / META
    if not p.exists() and not p.is_symlink():
        return {}
    meta = read_json(p, "sweep metadata")
    if not isinstance(meta, dict):
        raise ChakraError(f"{p}: expected a mapping (the sweep's spec and axes), got {type(meta).__name__}")
    axes = meta.get("axes", [])
    if not isinstance(axes, list) or not all(isinstance(a, str) for a in axes):
        raise ChakraError(f"{p}: axes: expected a list of column names, got {short(axes)}")
    return meta


def _connect(folder: str | os.PathLike):
    """A locked DuckDB connection whose table ``points`` is every part's rows."""
    table = read_parts(folder)
    con = connect(what="results")
    con.register("points", table)
    return con


def query(folder: str | os.PathLike, sql: str):
    """Run DuckDB SQL over a results folder, whose rows are the table ``points``; a DataFrame.
    The connection reads no file (`io.database`): the SQL sees the rows and nothing else."""
    import duckdb

    con = _connect(folder)
    try:
        return con.execute(sql).df()
    except duckdb.Error as e:
        raise ChakraError(f"{folder}: query failed: {first_line(e)}") from None
    finally:
        con.close()


def load_results(folder: str | os.PathLike):
    """Every row of a results folder as a pandas DataFrame (one row per point), with every
    measured column (null where no part has it); text in a numeric column is a ChakraError."""
    import duckdb

    con = _connect(folder)
    try:
        names = [r[0] for r in con.execute("DESCRIBE points").fetchall()]
        missing = [c for c in ("point_id", "status") if c not in names]
        if missing:
            raise ChakraError(f"{folder}: not a sweep's results (no column {missing[0]} in its parts)")
        df = con.execute("SELECT * FROM points ORDER BY point_id").df()
    except duckdb.Error as e:
        raise ChakraError(f"{folder}: cannot read the rows: {first_line(e)}") from None
    finally:
        con.close()
    return _typed(df, folder)


def _typed(df, folder):
    """The rows with every measured column (missing ones as nulls) and the numeric ones as
    numbers: a folder someone else wrote may lack columns or hold text where numbers belong."""
    import pandas as pd

    numeric = [c for c, t in _TYPES.items() if t == "int64"] + _FLOATS
    for c in (*_TYPES, *_FLOATS):
        if c not in df.columns:
            df[c] = float("nan") if c in numeric else None
        elif c in numeric:
            v = pd.to_numeric(df[c], errors="coerce")
            if int(v.isna().sum()) > int(df[c].isna().sum()):
                raise ChakraError(f"{folder}: column {c} holds values that are not numbers")
            df[c] = v
    return df


@dataclass
class SweepResult:
    """What `run_sweep` did: where the rows are, how many points the spec has after its filter,
    how many ran now (``ran``), were already there (``skipped``), failed (``errors``), had a
    worker die under them and were retried (``retried``) or lost on every try (``lost``), and
    how many worker processes were restarted. A lost point has no row: the next run retries it."""

    folder: Path
    points: int
    ran: int = 0
    skipped: int = 0
    errors: int = 0
    retried: int = 0
    lost: int = 0
    restarts: int = 0
    executor: str = "pool"
    workers: int = 1
    wall_s: float = 0.0
    parts: list[Path] = field(default_factory=list)

    @property
    def points_per_s(self) -> float:
        return self.ran / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "folder": str(self.folder),
            "points": self.points,
            "ran": self.ran,
            "skipped": self.skipped,
            "errors": self.errors,
            "retried": self.retried,
            "lost": self.lost,
            "restarts": self.restarts,
            "executor": self.executor,
            "workers": self.workers,
            "wall_s": round(self.wall_s, 3),
            "points_per_s": round(self.points_per_s, 2),
            "parts": [str(p) for p in self.parts],
        }

    def to_pandas(self):
        """The rows of the whole results folder (earlier runs' too)."""
        return load_results(self.folder)
