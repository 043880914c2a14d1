"""Adding jobs to a catalog: features extracted in worker processes, one writer inserting
columnar batches.

Workers (a `spawn` pool, so no worker inherits the writer's DuckDB threads, and each ends with
the parent even when that is killed outright: `io.workers`) open and summarize jobs; the
parent keeps a bounded window of chunks in flight (a generator of a million jobs is never
drained into memory), drops jobs whose content hash the catalog already holds, and inserts
every table as one Arrow batch per few hundred jobs, in one transaction per batch.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..io.workers import pool_options
from ..io.workload import Workload
from ..table import Table, Tabular
from .features import JobFeatures, extract
from .schema import TABLES, arrow_schema

#: (name, path or None, workload or None, tags, date)
Item = tuple[str, str | None, Workload | None, dict[str, str], dt.date | None]


@dataclass
class AddResult(Tabular):
    """What one `Catalog.add` did: jobs inserted, jobs already present (same content hash),
    inputs that could not be read (source, message), and how long it took."""

    added: list[str] = field(default_factory=list)  # job ids, in input order
    skipped: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def jobs_per_s(self) -> float:
        done = len(self.added) + self.skipped
        return done / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "added": len(self.added),
            "skipped": self.skipped,
            "errors": [{"source": s, "error": e} for s, e in self.errors],
            "seconds": self.seconds,
            "jobs_per_s": self.jobs_per_s,
            "job_ids": self.added,
        }

    def to_table(self) -> Table:
        """The job ids inserted, one row each."""
        return Table({"job_id": self.added}, title="jobs added")


def parse_date(value: str | dt.date | None) -> dt.date | None:
    if value is None or isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ChakraError(f"date {value!r}: expected YYYY-MM-DD") from None


def items(sources: Iterable[Any], tags: dict[str, str], date: dt.date | None) -> Iterator[Item]:
    """Normalize what `Catalog.add` accepts: a path; (name, Workload); (name, Workload, tags);
    or an object with `.name` and `.workload` (a synthetic `FleetJob`: its family becomes a tag)."""
    for s in sources:
        if isinstance(s, (str, os.PathLike)):
            p = Path(s)
            yield p.name or str(p), os.path.abspath(p), None, dict(tags), date
        elif isinstance(s, tuple) and len(s) in (2, 3) and isinstance(s[1], Workload):
            extra = {str(k): str(v) for k, v in (s[2] if len(s) == 3 else {}).items()}
            d = parse_date(extra.pop("date", None)) or date
            yield str(s[0]), None, s[1], {**tags, **extra}, d
        elif isinstance(getattr(s, "workload", None), Workload) and hasattr(s, "name"):
            family = getattr(s, "family", None)
            yield str(s.name), None, s.workload, {**tags, **({"family": str(family)} if family else {})}, date
        elif isinstance(s, Workload):
            raise ChakraError("an in-memory Workload needs a name: pass (name, workload)")
        else:
            raise ChakraError(f"cannot add {type(s).__name__}: expected a path, (name, Workload) or a FleetJob")


def _extract_one(item: Item) -> tuple[JobFeatures | None, str | None]:
    """Features of one item, or (None, message) where its path cannot be read as a job."""
    name, path, w, _, _ = item
    if w is None:
        assert path is not None
        try:
            w = Workload.open(path)
        except Exception as e:  # noqa: BLE001 (one unreadable job must not stop a fleet's ingestion)
            msg = str(e) if path in str(e) else f"{path}: {e}"
            return None, f"{msg} (expected a workload Workload.open accepts: .et files, a prefix or a folder)"
    try:
        return extract(name, w, path or ""), None
    except ChakraError as e:  # (a job the catalog's columns cannot hold: the others go on)
        return None, f"{path or name}: {e}"


def extract_chunk(chunk: list[Item]) -> list[tuple[JobFeatures | None, str | None]]:
    """A worker's task: features of a few items (one round trip for many small jobs)."""
    return [_extract_one(x) for x in chunk]


def _chunks(it: Iterator[Item], size: int) -> Iterator[list[Item]]:
    chunk: list[Item] = []
    for x in it:
        chunk.append(x)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _results(it: Iterator[Item], jobs: int, chunk: int) -> Iterator[tuple[Item, JobFeatures | None, str | None]]:
    """(item, features, error) in input order; in `jobs` worker processes when jobs > 1."""
    if jobs <= 1:
        for x in it:
            yield (x, *_extract_one(x))
        return
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), **pool_options()) as pool:
        window: deque = deque()
        for c in _chunks(it, chunk):
            # (tags and dates stay here: workers need only the job)
            window.append((c, pool.submit(extract_chunk, [(n, p, w, {}, None) for n, p, w, _, _ in c])))
            while len(window) >= 4 * jobs:
                yield from _ready(window.popleft())
        while window:
            yield from _ready(window.popleft())


def _ready(entry) -> Iterator[tuple[Item, JobFeatures | None, str | None]]:
    chunk, fut = entry
    for x, (f, err) in zip(chunk, fut.result()):
        yield x, f, err


class _Batch:
    """Jobs waiting to be inserted, as lists of column arrays per table."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Item, JobFeatures]] = []

    def __len__(self) -> int:
        return len(self.jobs)

    def tables(self, added_at: dt.datetime):
        import pyarrow as pa

        feats = [f for _, f in self.jobs]
        ids = np.array([f.job_id for f in feats], dtype=object)
        job_cols: dict[str, Any] = {
            "job_id": ids,
            "name": [f.name for f in feats],
            "source": [f.source for f in feats],
            "date": [it[4] for it, _ in self.jobs],
            "added_at": [added_at] * len(feats),
        }
        for c, _ in TABLES["jobs"][5:]:
            job_cols[c] = [f.job[c] for f in feats]
        yield "jobs", pa.table(job_cols, schema=arrow_schema("jobs"))
        tag_rows = [(f.job_id, k, v) for it, f in self.jobs for k, v in sorted(it[3].items())]
        yield (
            "tags",
            pa.table(
                {c: [r[i] for r in tag_rows] for i, c in enumerate(("job_id", "key", "value"))},
                schema=arrow_schema("tags"),
            ),
        )
        for table in ("ranks", "ops", "collectives", "imbalance", "breakdowns"):
            present = [f for f in feats if f.rows(table)]
            if not present:
                continue
            schema = arrow_schema(table)
            cols: dict[str, Any] = {"job_id": np.repeat([f.job_id for f in present], [f.rows(table) for f in present])}
            for c, t in TABLES[table][1:]:
                parts = [f.tables[table][c] for f in present]
                if t.endswith("[]"):
                    cols[c] = _list_column(parts, schema.field(c).type)
                else:
                    cols[c] = pa.array(np.concatenate(parts), type=schema.field(c).type, from_pandas=True)
            yield table, pa.table(cols, schema=schema)


def _list_column(parts: list[tuple[np.ndarray, np.ndarray]], type_):
    import pyarrow as pa

    sizes = np.concatenate([np.diff(o) for o, _ in parts])
    offsets = np.r_[0, np.cumsum(sizes)].astype(np.int32)
    values = pa.array(np.concatenate([v for _, v in parts]), type=type_.value_type)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=type_)


def ingest(
    con, sources: Iterable[Any], *, jobs: int = 1, tags=None, date=None, batch: int = 500, chunk: int = 8, progress=None
) -> AddResult:
    """Add every source to the catalog behind DuckDB connection `con` (see `Catalog.add`)."""
    t0 = time.perf_counter()
    result = AddResult()
    known = {r[0] for r in con.execute("SELECT job_id FROM jobs").fetchall()}
    pending = _Batch()

    def flush() -> None:
        if not pending:
            return
        con.execute("BEGIN TRANSACTION")
        try:
            for table, arrow in pending.tables(dt.datetime.now()):
                con.register("_catalog_batch", arrow)
                con.execute(f"INSERT INTO {table} SELECT * FROM _catalog_batch")
                con.unregister("_catalog_batch")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        result.added.extend(f.job_id for _, f in pending.jobs)
        pending.jobs.clear()

    it = items(sources, {str(k): str(v) for k, v in (tags or {}).items()}, parse_date(date))
    for item, feats, err in _results(it, jobs, chunk):
        if feats is None:
            result.errors.append((item[1] or item[0], err or "unreadable"))
        elif feats.job_id in known:
            result.skipped += 1
        else:
            known.add(feats.job_id)
            pending.jobs.append((item, feats))
            if len(pending) >= batch:
                flush()
        if progress is not None:
            progress(1)
    flush()
    result.seconds = time.perf_counter() - t0
    return result
