"""Graph edits that keep what depended on what: removing nodes without cutting the paths
through them (what-if transforms, exports for tools that cannot read some node types)."""

from __future__ import annotations

import numpy as np

from .trace import Trace


def drop_nodes(t: Trace, drop: np.ndarray) -> Trace:
    """The trace without the rows where `drop` is True. A dependency on a dropped node becomes
    that node's own dependencies (through chains of dropped nodes), of the same kind, so every
    ordering the graph implied between kept nodes still holds; a cycle among dropped nodes
    stands for nothing. Each dependency list keeps its first occurrence of an id."""
    drop = np.asarray(drop, bool)
    if not drop.any():
        return t
    removed = set(t.ids[drop].tolist())
    inherit: dict[int, list[int]] = {}  # dropped id -> the kept ids it stands for

    def resolve(node_id: int) -> list[int]:
        stack, order, seen = [node_id], [], {node_id}
        while stack:  # (iterative: chains of thousands of dropped nodes)
            n = stack.pop()
            row = t.row(n)
            for dep in [*t.data_deps(row).tolist(), *t.ctrl_deps(row).tolist()]:
                if dep not in removed:
                    order.append(dep)
                elif dep in inherit:
                    order += inherit[dep]
                elif dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        inherit[node_id] = list(dict.fromkeys(order))
        return inherit[node_id]

    kept = t.take(~drop)
    gone = np.fromiter(removed, np.int64, len(removed))
    for kind in ("data", "ctrl"):
        indptr = kept.data_indptr if kind == "data" else kept.ctrl_indptr
        flat = kept.data if kind == "data" else kept.ctrl
        hit = np.isin(flat.astype(np.int64, copy=False), gone)
        if not hit.any():
            continue
        owner = np.repeat(np.arange(len(kept)), np.diff(indptr))
        counts = np.diff(indptr).copy()
        parts: dict[int, list[int]] = {}
        for r in np.unique(owner[hit]).tolist():
            deps: list[int] = []
            for d in flat[indptr[r] : indptr[r + 1]].tolist():
                deps += (inherit[d] if d in inherit else resolve(d)) if d in removed else [d]
            parts[r] = list(dict.fromkeys(deps))
            counts[r] = len(parts[r])
        new_indptr = np.zeros(len(kept) + 1, np.int64)
        np.cumsum(counts, out=new_indptr[1:])
        new_flat = np.empty(int(new_indptr[-1]), flat.dtype)
        same = ~np.isin(owner, np.fromiter(parts, np.int64, len(parts)))  # entries of untouched rows
        pos = new_indptr[owner] + (np.arange(flat.size) - indptr[owner])
        new_flat[pos[same]] = flat[same]
        for r, deps in parts.items():
            new_flat[new_indptr[r] : new_indptr[r + 1]] = deps
        if kind == "data":
            kept.data_indptr, kept.data = new_indptr, new_flat
        else:
            kept.ctrl_indptr, kept.ctrl = new_indptr, new_flat
    return kept
