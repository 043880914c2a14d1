"""A sweep's results folder: Parquet part files of rows, each written atomically, queryable with
DuckDB as the view ``points``.

Layout: ``part-<time>-<pid>-<n>-<random>.parquet`` (rows of finished points, appended as they come; a
part appears whole or not at all: temp file + rename) and ``sweep.json`` (the spec of the latest
run, its axes). A point is finished when its id is in a part, so a rerun skips it; an
interrupted run loses only the rows not yet flushed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ChakraError
from ..io.et import atomic_output

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


def finished_ids(folder: str | os.PathLike) -> set[str]:
    """Ids of the points a results folder already holds."""
    import pyarrow.parquet as pq

    done: set[str] = set()
    for p in part_files(folder):
        done.update(pq.read_table(p, columns=["point_id"]).column("point_id").to_pylist())
    return done


def write_meta(folder: Path, meta: dict) -> None:
    with atomic_output(folder / META, compress=False) as f:
        f.write((json.dumps(meta, indent=1, default=str) + "\n").encode())


def read_meta(folder: str | os.PathLike) -> dict:
    p = Path(folder) / META
    return json.loads(p.read_text()) if p.is_file() else {}


def _connect(folder: str | os.PathLike):
    import duckdb

    parts = part_files(folder)
    if not Path(folder).is_dir():
        raise ChakraError(f"{folder}: no such results folder")
    if not parts:
        raise ChakraError(f"{folder}: no results ({PART_GLOB}) yet")
    con = duckdb.connect()
    files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in parts)
    con.execute(f"CREATE VIEW points AS SELECT * FROM read_parquet([{files}], union_by_name = true)")
    return con


def query(folder: str | os.PathLike, sql: str):
    """Run DuckDB SQL over a results folder, whose rows are the view ``points``; a DataFrame."""
    import duckdb

    con = _connect(folder)
    try:
        return con.execute(sql).df()
    except duckdb.Error as e:
        raise ChakraError(f"{folder}: query failed: {str(e).splitlines()[0]}") from None
    finally:
        con.close()


def load_results(folder: str | os.PathLike):
    """Every row of a results folder as a pandas DataFrame (one row per point)."""
    return query(folder, "SELECT * FROM points ORDER BY point_id")


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
