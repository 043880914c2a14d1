"""The points of a sweep: the cartesian product of its axes, filtered by ``where`` in DuckDB, each
with an id that is a hash of its canonical inputs and its workload's content.

The filter is SQL over a table with one column per parameter (never Python eval): a list value
(per-dimension bandwidths, dims) is a DuckDB list (``len(dims) = 2``, ``dims[1] = 8``). The id
changes when any input or any byte of the workload's files changes, so a rerun skips exactly the
points already simulated with these inputs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import ChakraError
from .spec import SweepSpec
from .systems import system_of

ID_VERSION = 1  # bump when what a point's id covers changes


@dataclass(frozen=True)
class Point:
    """One combination: its id, its parameters (axes and fixed) and its workload's identity."""

    id: str
    params: dict
    workload_id: str

    def to_dict(self) -> dict:
        return {"id": self.id, "params": self.params, "workload_id": self.workload_id}


def canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def _files_of(path: Path) -> list[Path]:
    """Every file a path names: itself, a folder's files (not hidden ones: `.chakra-cache` holds
    converted copies written when the job is opened), or a prefix's ``<prefix>.*`` files."""
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(
            p for p in path.rglob("*") if p.is_file() and not any(x.startswith(".") for x in p.relative_to(path).parts)
        )
    return sorted(p for p in path.parent.glob(path.name + ".*") if p.is_file())


def _file_digest(path: Path, root: Path) -> str:
    h = hashlib.sha256(str(path.relative_to(root) if path != root else path.name).encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def workload_identity(definition: dict) -> str:
    """A hash of what a workload definition simulates: its files' bytes (the recorded job, the
    master trace, the communicator groups) and its options (pattern, plan, transforms)."""
    parts = [canonical({k: v for k, v in definition.items() if k not in ("path", "master", "comm_groups")})]
    for k in ("path", "master", "comm_groups"):
        if k in definition:
            p = Path(definition[k])
            root = p if p.is_dir() else p.parent
            parts += [k] + [_file_digest(f, root) for f in _files_of(p)]
    return _digest(*parts)[:24]


def expand(spec: SweepSpec) -> list[Point]:
    """Every point of the spec that passes its ``where`` filter, in axis order; each point's
    system is built once here so a bad combination fails before anything runs."""
    keys = list(spec.axes)
    combos = [dict(zip(keys, values)) for values in itertools.product(*spec.axes.values())]
    rows = [{**spec.fixed, **c} for c in combos]
    if spec.where:
        rows = [rows[i] for i in _where(rows, spec)]
    ids = {name: workload_identity(spec.workloads[name]) for name in {r["workload"] for r in rows}}
    checked: set[str] = set()
    out = []
    for params in rows:
        sys_key = canonical({k: v for k, v in params.items() if k not in ("workload", "mode")})
        if sys_key not in checked:
            try:
                system_of(params)
            except ChakraError as e:
                raise ChakraError(f"{spec.source}: axes/fixed {canonical(_network_part(params))}: {e}") from None
            checked.add(sys_key)
        wid = ids[params["workload"]]
        pid = _digest(canonical({"v": ID_VERSION, "params": params, "workload": wid}))[:20]
        out.append(Point(pid, params, wid))
    return out


def _network_part(params: dict) -> dict:
    return {k: v for k, v in params.items() if k not in ("workload", "mode")}


def _where(rows: list[dict], spec: SweepSpec) -> list[int]:
    """Indices of the rows the spec's ``where`` keeps (DuckDB over an Arrow table of the rows)."""
    import duckdb
    import pyarrow as pa

    cols = sorted({k for r in rows for k in r})
    data: dict[str, list] = {"__i": list(range(len(rows)))}
    for c in cols:
        vals = [r.get(c) for r in rows]
        if any(isinstance(v, (list, tuple)) for v in vals):  # one type per column: scalars as 1-lists
            vals = [v if v is None or isinstance(v, (list, tuple)) else [v] for v in vals]
        data[c] = vals
    try:
        table = pa.table({c: pa.array(v) for c, v in data.items()})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ChakraError(f"{spec.source}: axes: values of mixed types cannot be filtered ({e})") from None
    con = duckdb.connect()
    try:
        con.register("points", table)
        got = con.execute(f"SELECT __i FROM points WHERE ({spec.where}) ORDER BY __i").fetchall()
    except duckdb.Error as e:
        raise ChakraError(f"{spec.source}: where: {str(e).splitlines()[0]}") from None
    finally:
        con.close()
    return [int(i) for (i,) in got]
