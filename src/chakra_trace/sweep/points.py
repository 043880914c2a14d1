"""The points of a sweep: the cartesian product of its axes, filtered by ``where`` in DuckDB, each
with an id that is a hash of its canonical inputs and its workload's content.

The filter is one SQL expression over a table with one column per parameter (never Python eval;
checked and run as `where` says): a list value (per-dimension bandwidths, dims) is a DuckDB list
(``len(dims) = 2``, ``dims[1] = 8``). The id changes when any input or any byte of the
workload's files changes, so a rerun skips exactly the points already simulated with these
inputs. A spec is refused before anything is enumerated when its axes make more than
`point_limit` points, and before anything runs when a pattern workload would build more nodes
on a point's NPUs than the node limit (`io.memory.node_limit`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import ChakraError
from ..io.memory import ENV_MAX_NODES, env_int, node_limit
from . import where as _where
from .spec import SweepSpec, pattern_nodes
from .systems import system_of

ID_VERSION = 1  # bump when what a point's id covers changes
#: Points a spec may make (its axes' product, before ``where``) unless told otherwise.
DEFAULT_MAX_POINTS = 100_000
ENV_MAX_POINTS = "CHAKRA_SWEEP_MAX_POINTS"


def point_limit(given: int | None = None) -> tuple[int, str]:
    """The point limit in force and what sets it: ``given``, $CHAKRA_SWEEP_MAX_POINTS, else
    `DEFAULT_MAX_POINTS`."""
    if given is not None:
        return int(given), "max_points"
    env = env_int(ENV_MAX_POINTS, "a number of points")
    return (env, ENV_MAX_POINTS) if env is not None else (DEFAULT_MAX_POINTS, "the default")


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


def files_of(path: Path) -> list[Path]:
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
            parts += [k] + [_file_digest(f, root) for f in files_of(p)]
    return _digest(*parts)[:24]


def expand(spec: SweepSpec, max_points: int | None = None) -> list[Point]:
    """Every point of the spec that passes its ``where`` filter, in axis order; each point's
    system is built once here so a bad combination fails before anything runs. More than
    ``max_points`` points (default: `point_limit`) is refused before any is made."""
    limit, source = point_limit(max_points)
    if spec.size > limit:
        sizes = " x ".join(str(len(v)) for v in spec.axes.values())
        raise ChakraError(
            f"{spec.source}: axes: {sizes} = {spec.size:,} points, more than the limit of {limit:,} "
            f"({source}; set {ENV_MAX_POINTS} or --max-points)"
        )
    keys = list(spec.axes)
    combos = [dict(zip(keys, values)) for values in itertools.product(*spec.axes.values())]
    rows = [{**spec.fixed, **c} for c in combos]
    if spec.where:
        rows = [rows[i] for i in _where.keep(rows, spec.where, spec.source)]
    ids = {name: workload_identity(spec.workloads[name]) for name in {r["workload"] for r in rows}}
    checked: dict[str, int | None] = {}
    nodes = node_limit(None)
    out = []
    for params in rows:
        sys_key = canonical({k: v for k, v in params.items() if k not in ("workload", "mode")})
        if sys_key not in checked:
            try:
                checked[sys_key] = system_of(params).npus
            except ChakraError as e:
                raise ChakraError(f"{spec.source}: axes/fixed {canonical(_network_part(params))}: {e}") from None
        _check_size(spec, params["workload"], checked[sys_key], nodes)
        wid = ids[params["workload"]]
        pid = _digest(canonical({"v": ID_VERSION, "params": params, "workload": wid}))[:20]
        out.append(Point(pid, params, wid))
    return out


def _network_part(params: dict) -> dict:
    return {k: v for k, v in params.items() if k not in ("workload", "mode")}


def _check_size(spec: SweepSpec, name: str, npus: int | None, bound: tuple[int, str]) -> None:
    """Refuse a pattern workload whose nodes on the point's NPUs pass the node limit ``bound``."""
    pattern = spec.workloads[name].get("pattern")
    if pattern is None:
        return
    nodes = pattern_nodes(str(pattern)) * max(1, npus or 1)
    limit, source = bound
    if nodes > limit:
        raise ChakraError(
            f"{spec.source}: workloads.{name}.pattern: {nodes:,} nodes on {npus or 1:,} NPUs, "
            f"more than the limit of {limit:,} ({source}; set {ENV_MAX_NODES})"
        )
