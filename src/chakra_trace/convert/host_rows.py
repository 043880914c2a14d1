"""What the graph builder reads of a host trace's rows: which touch an accelerator, a name
predicate per row, the op forest's depth levels (a looping parent chain is an error naming the
loop), times in µs, and the byte signature of each row that the cost model caches by."""

from __future__ import annotations

from typing import overload

import numpy as np

from ..schema.wire import ranges


def rows_on_device(h) -> np.ndarray:
    """Host rows with a tensor on an accelerator (cuda:*, xpu:*, ...; not cpu, meta or none)."""
    t = h.tensors
    n = len(h)
    if not len(t):
        return np.zeros(n, bool)
    dev = np.fromiter((d.split(":")[0] not in ("", "cpu", "meta") for d in t.devices), bool, len(t.devices))
    per_tensor = dev[t.device] if dev.size else np.zeros(len(t), bool)
    return np.bincount(t.row[per_tensor], minlength=n)[:n] > 0


def name_mask(names: list[str], codes: np.ndarray, pred) -> np.ndarray:
    """pred(name) of each row, evaluated once per distinct name."""
    table = np.fromiter((bool(pred(s)) for s in names), bool, len(names))
    return table[codes] if table.size else np.zeros(codes.size, bool)


class _Cycle(Exception):
    """Parent links that loop (a hostile or broken host trace): the rows on the loop."""

    def __init__(self, rows: list[int]):
        super().__init__(rows)
        self.rows = rows


def _cycle_from(parent: np.ndarray, row: int) -> list[int]:
    """The loop that the parent chain from `row` ends in (it never reaches a root)."""
    for _ in range(parent.size):  # after n steps the walk is on the loop
        row = int(parent[row])
    loop = [row]
    while (row := int(parent[row])) != loop[0]:
        loop.append(row)
    return loop


def _levels(parent: np.ndarray, rows: np.ndarray) -> list[np.ndarray]:
    """`rows` grouped by depth in the forest `parent` (-1 at roots), shallowest first, so
    that a level only reads what the levels above it wrote."""
    depth = np.zeros(parent.size, np.int64)
    live = np.flatnonzero(parent >= 0)
    anc = parent[live]
    steps = 0
    while live.size:
        steps += 1
        if steps > parent.size:
            raise _Cycle(_cycle_from(parent, int(live[0])))
        depth[live] += 1
        anc = parent[anc]
        keep = anc >= 0
        live, anc = live[keep], anc[keep]
    d = depth[rows]
    order = np.argsort(d, kind="stable")
    return np.split(rows[order], np.flatnonzero(np.diff(d[order])) + 1)


@overload
def ns_to_us(ns: int) -> np.int64: ...
@overload
def ns_to_us(ns: np.ndarray) -> np.ndarray: ...
def ns_to_us(ns: np.ndarray | int) -> np.ndarray | np.int64:
    """ns -> µs, rounded half to even (as Python's round), in integers: a float of ns since the
    epoch (1.7e18) is off by up to 128 ns, which moved a quarter of the µs of such traces."""
    q, r = np.divmod(np.asarray(ns, np.int64), 1000)
    return q + ((r > 500) | ((r == 500) & (q % 2 == 1)))


_SIG_CHUNK = 1 << 16  # rows per batch when hashing tensor signatures (bounds temporary memory)


def _signatures(name: np.ndarray, t, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Everything the cost model reads of each row (its name code, and per tensor: itemsize,
    output, arg, elem, undefined, shape), as one byte string per row: (buffer, start, length)."""
    counts = t.indptr[rows + 1] - t.indptr[rows]
    ks = ranges(t.indptr[rows], counts)
    has = t.has_shape[ks]
    nd = np.where(has, t.shape_indptr[ks + 1] - t.shape_indptr[ks], 1)
    null = np.fromiter(("nullptr" in x for x in t.types), bool, len(t.types))
    size = 7 + nd  # int64 words per tensor
    row_words = np.zeros(rows.size, np.int64)
    np.add.at(row_words, np.repeat(np.arange(rows.size), counts), size)
    row_words += 1  # the name code first
    row_base = np.cumsum(row_words) - row_words
    first_k = np.cumsum(counts) - counts
    csize = np.cumsum(size) - size
    # a row without tensors may start one past the last tensor; it is repeated 0 times, so pad with 0
    off = np.repeat(row_base + 1 - np.append(csize, 0)[first_k], counts) + csize
    flat = np.empty(int(row_words.sum()), np.int64)
    flat[row_base] = name[rows]
    for j, col in enumerate(
        (
            t.itemsize[ks],
            t.output[ks],
            t.arg[ks],
            t.elem[ks],
            null[t.type[ks]] if null.size else np.zeros(ks.size, bool),
            has,
            nd,
        )
    ):
        flat[off + j] = col
    flat[ranges(off[has] + 7, nd[has])] = t.shape_dims[ranges(t.shape_indptr[ks[has]], nd[has])]
    flat[off[~has] + 7] = t.numel[ks[~has]]
    return flat.view(np.uint8), row_base * 8, row_words * 8
