"""A job's identity: a hash of its decoded trace columns, so re-adding a job is a no-op whether
it comes from `.et`, gzip, JSON or memory (the same job in any encoding hashes the same).

The digest covers every column of `Trace` (lossless: attributes outside the columns live in
`extra`), metadata and which trace runs on which rank, plus the job's declared communicator
groups. Node names and group names are hashed as the strings each node holds, not as codes into
the trace's tables (whose order depends on how it was read: converted afresh or from the
converter's cache). A trace shared by many ranks is hashed once.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from ..io.workload import Workload
from ..schema.trace import Trace


def _canonical(table: list[str], codes: np.ndarray) -> tuple[list[str], np.ndarray]:
    """(the strings used, in sorted order; each row's index into them): codes free of table order."""
    if not table or not codes.size:
        return [], codes.astype(np.int64)
    uniq, inv = np.unique(np.asarray(table, dtype=str), return_inverse=True)
    used, canon = np.unique(inv[np.clip(codes, 0, len(table) - 1)], return_inverse=True)
    return uniq[used].tolist(), canon.astype(np.int64)


def trace_digest(t: Trace) -> bytes:
    """blake2b-128 of one rank's columns (dtype and length included, so no two layouts collide)."""
    h = hashlib.blake2b(digest_size=16)
    names, name_codes = _canonical(t.names, t.name_codes)
    groups, pg_codes = _canonical(t.groups, t.pg_name)
    replaced = {"name_codes": name_codes, "pg_name": pg_codes}
    arrays = [(name, replaced.get(name, getattr(t, name))) for name in Trace.ARRAYS]
    arrays += [("placed_rows", t.placed_rows), ("placed_bits", t.placed_bits), ("placed_offsets", t.placed_offsets)]
    for name, a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{name}:{a.dtype.str}:{a.size};".encode())
        h.update(a.view(np.uint8).data if a.size else b"")
    h.update(json.dumps([names, groups]).encode())
    h.update(t.metadata.SerializeToString(deterministic=True))
    return h.digest()


def workload_digest(w: Workload) -> str:
    """The job's content hash (32 hex digits)."""
    h = hashlib.blake2b(digest_size=16)
    seen: dict[int, bytes] = {}
    for r in w.ranks:
        t = w.traces[r]
        d = seen.get(id(t))
        if d is None:
            d = seen[id(t)] = trace_digest(t)
        h.update(int(r).to_bytes(8, "little", signed=True))
        h.update(d)
    h.update(json.dumps(sorted((g, sorted(m)) for g, m in w.groups.items())).encode())
    return h.hexdigest()
