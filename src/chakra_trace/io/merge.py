"""A whole job in one `.et` file (`merge`) and back to one file per rank (`split`), losslessly.

Simulators and graph tools want one graph of the job; recorders write one file per rank. A merged
file is an ordinary Chakra trace, so every reader opens it, and `Workload.open` gives back the
per-rank job (`merged_file` registers the form), so every command accepts it where it takes a prefix.

The merged file (format 1):

- Nodes: rank after rank (ascending), each rank's nodes in their own order, every field and
  unknown field as the rank wrote it.
- Ids: ``rank * stride + id`` (``stride``, the metadata's ``merged_id_stride``: the smallest power
  of ten above every id a rank uses or depends on), so ids never collide, ``id // stride`` is the
  rank and ``id % stride`` the original id. Dependencies are remapped alike; one on a node its rank
  lacks stays unresolved. When ids are too large for that (``rank * stride`` past 2**64), each
  rank's distinct ids are numbered instead and the numbering kept (``merged_id_table``, one per
  rank): the original id is ``table[id % stride]``.
- Two attributes after each node's own: ``rank`` (int64) on every node, and ``coll_instance``
  (int64) on every typed collective: the members of one collective instance (the k-th collective
  each member issues on a group, ordered by ``comm_seq`` where recorded, as the simulator and the
  analyses pair them) share one value, numbered group by group in the order of the groups' names.
- Global metadata: ``chakra_merged`` (the format, first: what marks the file), ``merged_ranks`` and
  ``merged_nodes`` (the ranks and their node counts), ``merged_id_stride`` (and the tables),
  ``merged_metadata`` (each rank's GlobalMetadata as it was serialized) and, when the job has
  communicator groups, ``merged_comm_groups`` (JSON ``{name: [rank, ...]}``, ``Workload.groups``).
  No ``version`` of its own: each rank's is in its metadata.

`split` removes exactly the bytes `merge` added, checking each, so ``split(merge(w))`` writes files
byte-identical to ``w``'s; anything that does not check out is a TraceFormatError naming the node.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable

import numpy as np

from ..errors import ChakraError, TraceFormatError
from ..schema import proto as pb
from ..schema.codec import attribute_rows
from ..schema.enums import Attr
from ..schema.groups import named_groups, rows_by_group
from ..schema.trace import Trace
from ..schema.wire import I64, U64, Rows, ranges
from .workload import Workload, select_ranks

FORMAT = 1
MARKER = "chakra_merged"
RANK = "rank"
INSTANCE = "coll_instance"
_U64_LIMIT = 1 << 64


def _marker_bytes() -> bytes:
    meta = pb.GlobalMetadata()
    meta.attr.add(name=MARKER).int64_val = FORMAT
    return meta.SerializeToString()


HEAD = _marker_bytes()  # how every merged file's global metadata begins (what `merged_file` sniffs)


# --------------------------------------------------------------------------- merge


def merge(workload: Workload | Trace) -> Trace:
    """Every rank of a job as one trace (the format in the module docstring). A lone trace is a
    one-rank job."""
    w = Workload.of(workload)
    ranks = w.ranks
    if not ranks:
        raise ChakraError("merge: the workload has no ranks")
    if any(r < 0 for r in ranks):
        raise ChakraError(f"cannot merge negative ranks: {[r for r in ranks if r < 0][:5]}")
    traces = [w.traces[r] for r in ranks]
    counts = np.array([len(t) for t in traces], I64)
    merged = Trace.concat(traces)
    stride, tables = _id_scheme(traces, ranks[-1])
    bounds = _bounds(counts)

    def remap(values: np.ndarray, cuts: np.ndarray) -> np.ndarray:
        """Ids of rank after rank (rank i's at values[cuts[i]:cuts[i + 1]]) as merged ids."""
        if tables is not None:
            local = np.empty(values.size, U64)
            for i, table in enumerate(tables):
                seg = slice(cuts[i], cuts[i + 1])
                local[seg] = np.searchsorted(table, values[seg]).astype(U64)
            values = local
        return values + np.repeat(np.array(ranks, U64) * U64(stride), np.diff(cuts))

    merged.ids = remap(merged.ids, bounds)
    for ip, flat in (("ctrl_indptr", "ctrl"), ("data_indptr", "data")):
        setattr(merged, flat, remap(getattr(merged, flat), getattr(merged, ip)[bounds]))
    inst = _instances(merged, ranks, bounds)
    tail = _tail(ranks, counts, inst)
    extra = Rows.concat([Rows(merged.extra, np.diff(merged.extra_indptr)), tail])
    merged.extra = extra.data
    merged.extra_indptr = _indptr(extra.lens)

    meta = pb.GlobalMetadata()
    meta.MergeFromString(HEAD)
    meta.attr.add(name="merged_ranks").int64_list.values.extend(ranks)
    meta.attr.add(name="merged_nodes").int64_list.values.extend(counts.tolist())
    meta.attr.add(name="merged_id_stride").uint64_val = stride
    for table in tables or []:
        meta.attr.add(name="merged_id_table").uint64_list.values.extend(table.tolist())
    meta.attr.add(name="merged_metadata").bytes_list.values.extend(t.metadata.SerializeToString() for t in traces)
    if w.groups:
        groups = {g: [int(x) for x in members] for g, members in w.groups.items()}
        meta.attr.add(name="merged_comm_groups").string_val = json.dumps(groups)
    merged.metadata = meta
    return merged


def _bounds(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.size + 1, I64)
    np.cumsum(counts, out=out[1:])
    return out


def _indptr(lens: np.ndarray) -> np.ndarray:
    return _bounds(np.asarray(lens, I64))


def _id_scheme(traces: list[Trace], top_rank: int) -> tuple[int, list[np.ndarray] | None]:
    """(stride, None) when every rank's ids fit under a power-of-ten stride; else (stride, the
    sorted distinct ids of each rank, which the merged ids then number)."""
    span = 1
    for t in traces:
        for a in (t.ids, t.ctrl, t.data):
            if a.size:
                span = max(span, int(a.max()) + 1)
    stride = 10 ** len(str(span - 1)) if span > 1 else 1
    if (top_rank + 1) * stride <= _U64_LIMIT:
        return stride, None
    tables = [np.unique(np.concatenate([t.ids, t.ctrl, t.data])) for t in traces]
    size = max(max((x.size for x in tables), default=1), 1)
    stride = 10 ** len(str(size - 1)) if size > 1 else 1
    if (top_rank + 1) * stride > _U64_LIMIT:
        raise ChakraError(f"cannot merge: rank {top_rank} times {stride} ids per rank passes 2**64 ids")
    return stride, tables


def _instances(merged: Trace, ranks: list[int], bounds: np.ndarray) -> np.ndarray:
    """The collective instance of each row (-1: not a typed collective), computed on the merged
    rows (one string table for every rank, so the same rows pair whichever way the job was held)."""
    views = [merged.slice(int(bounds[i]), int(bounds[i + 1])) for i in range(len(ranks))]
    groups = [named_groups(v) for v in views]
    rows = [{g: r for g, r in rows_by_group(v).items() if g in gs} for v, gs in zip(views, groups)]  # (one pass)
    count: dict[str, int] = {}
    for per in rows:
        for g, r in per.items():
            count[g] = max(count.get(g, 0), r.size)
    base, acc = {}, 0
    for g in sorted(count):
        base[g] = acc
        acc += count[g]
    inst = np.full(len(merged), -1, I64)
    for i, per in enumerate(rows):
        for g, r in per.items():
            inst[bounds[i] + r] = base[g] + np.arange(r.size)
    return inst


def _tail(ranks: list[int], counts: np.ndarray, inst: np.ndarray) -> Rows:
    """The attributes merge appends to each row: `rank`, then `coll_instance` on collectives."""
    one = attribute_rows(RANK, "int64_val", np.array(ranks, I64), np.ones(len(ranks), bool))
    cuts = _bounds(one.lens)
    data = [np.tile(one.data[cuts[i] : cuts[i + 1]], int(c)) for i, c in enumerate(counts.tolist())]
    rank = Rows(np.concatenate(data) if data else np.zeros(0, np.uint8), np.repeat(one.lens, counts))
    return Rows.concat([rank, attribute_rows(INSTANCE, "int64_val", inst, inst >= 0)])


# --------------------------------------------------------------------------- split


def is_merged(trace: Trace) -> bool:
    """Whether a trace is a merged job (its global metadata begins with the marker)."""
    attrs = trace.metadata.attr
    return bool(attrs) and attrs[0].name == MARKER


def split(trace: Trace, *, ranks: Iterable[int] | None = None, path: str | os.PathLike | None = None) -> Workload:
    """The per-rank job a merged trace holds (only `ranks` when given). `path` names the file in
    errors. Ranks with identical traces share one Trace, as `Workload.open` shares identical files."""
    where = os.fspath(path) if path is not None else None
    layout = _layout(trace, where)
    all_ranks, counts, stride, tables, metas, groups = layout
    bounds = _bounds(counts)

    inst = _instances(trace, all_ranks, bounds)
    tail = _tail(all_ranks, counts, inst)
    lens = np.diff(trace.extra_indptr)
    bad = np.flatnonzero(lens - trace.extra_split.astype(I64) < tail.lens)
    at = ranges(trace.extra_indptr[1:] - tail.lens, tail.lens)
    if bad.size == 0:
        wrong = np.flatnonzero(trace.extra[at] != tail.data)
        if wrong.size:
            bad = np.searchsorted(np.cumsum(tail.lens), wrong[:1], side="right")
    if bad.size:
        i = int(bad[0])
        rank = all_ranks[int(np.searchsorted(bounds, i, side="right")) - 1]
        what = f"`{RANK}` {rank}" + (f" and `{INSTANCE}` {inst[i]}" if inst[i] >= 0 else "")
        raise TraceFormatError(
            where,
            f"a merged job's node (row {i}) does not end with the attributes merge gave it ({what}): "
            "the file was changed after `chakra merge`",
            node_id=int(trace.ids[i]),
        )
    keep = np.ones(trace.extra.size, bool)
    keep[at] = False
    extra = trace.extra[keep]

    ids = _restore(trace, trace.ids, bounds, all_ranks, stride, tables, where, None)
    deps = {
        flat: _restore(trace, getattr(trace, flat), getattr(trace, ip)[bounds], all_ranks, stride, tables, where, ip)
        for ip, flat in (("ctrl_indptr", "ctrl"), ("data_indptr", "data"))
    }
    columns = {k: getattr(trace, k) for k in Trace.ARRAYS}
    columns.update(ids=ids, extra=extra, extra_indptr=_indptr(lens - tail.lens), **deps)
    whole = Trace(len(trace), names=trace.names, groups=trace.groups, placed=trace.placed, **columns)

    wanted = select_ranks(
        where or "<merged trace>", dict.fromkeys(all_ranks), None if ranks is None else sorted(set(ranks))
    )
    out: dict[int, Trace] = {}
    seen: dict[tuple, list[tuple[Trace, bytes, Trace]]] = {}  # key -> [(rows, metadata, its trace)]
    for i, r in enumerate(all_ranks):
        if r not in wanted:
            continue
        view = whole.slice(int(bounds[i]), int(bounds[i + 1]))
        alike = seen.setdefault(_key(view), [])
        same = next((t for v, m, t in alike if m == metas[i] and _same_rows(v, view)), None)
        if same is None:
            same = _own(view, metas[i], where, r)
            alike.append((view, metas[i], same))
        out[r] = same
    return Workload(out, {g: list(m) for g, m in groups.items()})


def _layout(trace: Trace, where: str | None):
    """What the merged metadata says: (ranks, node counts, id stride, id tables or None, each
    rank's metadata bytes, groups), checked against the trace."""
    if not is_merged(trace):
        raise TraceFormatError(
            where,
            f"not a merged job (its global metadata has no `{MARKER}` first); expected a file "
            "written by `chakra merge` (per-rank files open as they are)",
        )
    attrs: dict[str, list] = {}
    for a in trace.metadata.attr:
        attrs.setdefault(a.name, []).append(a)

    def bad(what: str) -> TraceFormatError:
        return TraceFormatError(where, f"a merged job whose global metadata is damaged: {what}", message_index=0)

    fmt = attrs[MARKER][0].int64_val
    if fmt != FORMAT:
        raise bad(f"format {fmt}, this version reads format {FORMAT}")
    try:
        ranks = [int(x) for x in attrs["merged_ranks"][0].int64_list.values]
        counts = np.array(attrs["merged_nodes"][0].int64_list.values, I64)
        stride = int(attrs["merged_id_stride"][0].uint64_val)
        metas = list(attrs["merged_metadata"][0].bytes_list.values)
    except KeyError as e:
        raise bad(f"no {e.args[0]}") from None
    tables = [np.asarray(a.uint64_list.values, U64) for a in attrs.get("merged_id_table", [])]
    if len(counts) != len(ranks) or len(metas) != len(ranks) or (tables and len(tables) != len(ranks)):
        raise bad(f"{len(ranks)} ranks but {len(counts)} node counts, {len(metas)} metadata, {len(tables)} id tables")
    if ranks != sorted(set(ranks)) or (ranks and ranks[0] < 0):
        raise bad(f"ranks {ranks[:8]} are not distinct ascending ranks")
    if (counts < 0).any() or int(counts.sum()) != len(trace):
        raise bad(f"node counts add up to {int(counts.sum())}, the file has {len(trace)} nodes")
    if stride < 1 or (ranks and (ranks[-1] + 1) * stride > _U64_LIMIT):
        raise bad(f"id stride {stride}")
    groups: dict = {}
    if "merged_comm_groups" in attrs:
        try:
            groups = json.loads(attrs["merged_comm_groups"][0].string_val)
        except (ValueError, RecursionError) as e:  # (hostile nesting: RecursionError)
            raise bad(f"communicator groups are not JSON ({e})") from None
        if not isinstance(groups, dict) or not all(
            isinstance(m, list) and all(isinstance(x, int) for x in m) for m in groups.values()
        ):
            raise bad("communicator groups are not {name: [rank, ...]}")
    return ranks, counts, stride, tables or None, metas, groups


def _restore(trace, values, cuts, ranks, stride, tables, where, indptr_name) -> np.ndarray:
    """Original ids from merged ones (rank i's at values[cuts[i]:cuts[i + 1]]): node ids, or the
    dependencies of the CSR `indptr_name`."""
    base = np.repeat(np.array(ranks, U64) * U64(stride), np.diff(cuts))
    local = values - base
    bad = (values < base) | (local >= U64(stride))
    if tables is not None:
        for i, table in enumerate(tables):
            seg = slice(int(cuts[i]), int(cuts[i + 1]))
            miss = bad[seg] | (local[seg] >= U64(table.size))
            bad[seg] = miss
            if table.size:
                local[seg] = table[np.where(miss, U64(0), local[seg]).astype(I64)]
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        rank = ranks[int(np.searchsorted(cuts, i, side="right")) - 1]
        row = i if indptr_name is None else int(np.searchsorted(getattr(trace, indptr_name), i, side="right")) - 1
        kind = "its id" if indptr_name is None else f"a dependency ({int(values[i])})"
        raise TraceFormatError(
            where,
            f"a merged job's node of rank {rank} has {kind} outside that rank's ids "
            f"[{rank * stride}, {(rank + 1) * stride}): the file was changed after `chakra merge`",
            node_id=int(trace.ids[row]),
        )
    return local


def _own(view: Trace, meta_bytes: bytes, where: str | None, rank: int) -> Trace:
    """One rank's rows as a trace of its own: copied columns, string tables of only its strings in
    order of first use (as reading its file builds them), its own metadata."""
    try:
        meta = pb.GlobalMetadata.FromString(meta_bytes)
    except Exception as e:  # protobuf raises DecodeError (a different class per runtime)
        raise TraceFormatError(where, f"rank {rank}'s global metadata does not parse ({e})", message_index=0) from None
    arrays = {k: getattr(view, k).copy() for k in Trace.ARRAYS}
    names, arrays["name_codes"] = _first_use([""] + view.names, np.concatenate([[0], view.name_codes + 1]), True)
    has_pg = view.has(Attr.PG_NAME)
    groups, codes = _first_use(view.groups, view.pg_name[has_pg])
    arrays[Attr.PG_NAME] = np.zeros(len(view), np.int32)
    arrays[Attr.PG_NAME][has_pg] = codes
    placed = tuple(a.copy() for a in view.placed)
    return Trace(len(view), metadata=meta, names=names, groups=groups, placed=placed, **arrays)


def _first_use(table: list[str], codes: np.ndarray, keep_first: bool = False) -> tuple[list[str], np.ndarray]:
    """(the strings `codes` use, by first use and each once; codes into it). With keep_first the
    first code's string is code 0 and the leading element of codes is dropped."""
    out: list[str] = []
    index: dict[str, int] = {}
    uniq, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    remap = np.empty(uniq.size, np.int32)
    for j in np.argsort(first, kind="stable").tolist():
        s = table[int(uniq[j])]
        remap[j] = index.setdefault(s, len(out))
        if remap[j] == len(out):
            out.append(s)
    new = remap[inverse.reshape(-1)]
    return (out, new[1:]) if keep_first else (out, new)


def _key(view: Trace) -> tuple:
    """What rows of one merged trace must share to be equal (cheap: sizes and durations)."""
    sizes = (len(view), view.extra.size, view.data.size, view.ctrl.size, view.placed_rows.size)
    return sizes + (hashlib.blake2b(view.duration.tobytes(), digest_size=16).digest(),)


def _same_rows(a: Trace, b: Trace) -> bool:
    """Whether two ranks' rows of one merged trace (one string table) hold the same nodes."""
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in Trace.ARRAYS) and all(
        np.array_equal(x, y) for x, y in zip(a.placed, b.placed)
    )
