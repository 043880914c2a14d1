"""Obfuscation: a job others may see, which performs like the original but does not show its
model, so companies can share traces (the Chakra paper's obfuscated sharing).

Levels, each including the ones before:

- ``a`` names and strings: op names become a keyed hash (HMAC-SHA256 under a secret of at least
  16 bytes, the same name the same token in every rank and every job obfuscated with that
  secret, so per-op analyses still group them) or their node class (``names="class"``);
  communicator groups are renamed alike (but PyTorch's world group "0", which means every rank)
  in the group file and in the process-group declarations of metadata nodes, which keep only
  names and ranks. Every attribute and metadata NAME comes from an allow-list (`CARRIED`,
  `METADATA_KEPT`); anything else is dropped with its value, and so are inputs/outputs, doc
  strings and the metadata's version. Node ids are renumbered 0..n-1 in id order, thread and
  stream ids 1..k in their order, and the recording time (`time_origin_ns`) shifted so that the
  job's first rank starts at 0. Times, sizes, dependencies and collectives are untouched: the
  simulated step is the original's (ids, lanes and rank offsets keep their order).
- ``b`` sizes bucketed: collective bytes, tensor bytes and FLOPs rounded to a geometric grid of
  ratio ``1 + 2·bucket`` (each value moves by at most about ``bucket``, 1% by default; every rank
  rounds the same value alike, so collectives still match), split sizes too.
- ``c`` durations perturbed: each compute node's time times a factor in [1 - jitter, 1 + jitter]
  drawn from a keyed hash of its id and name (identical ranks perturbed identically), rounded to
  whole µs (a short op may move by up to 1 µs more); start times are recomputed from the new
  durations (each node keeps its recorded delay after its dependencies and its lane), so the
  timeline does not give the exact durations back.
- ``d`` structure: chains of short compute ops (under the `small_us` quantile of a rank's compute
  times) fused into one; `dummies` x nodes compute ops, chosen by the secret, split in two
  consecutive parts (the second a new node of the same op, on the same lane, that the first's
  dependents now wait for: no time added, every ordering kept); then nodes renumbered in their
  new start order (ties by the secret; communication keeps its order). The node sequence no
  longer lines up with the original's. This does not hide the graph's shape: see
  `synthesize.reidentify` for what an attacker still recovers at each level.

What each level preserves is tested (`tests/test_obfuscate.py`): a (and b within its bound) keep
the simulated step; `leak_scan` checks that no name, string or shape of the original is in the
output's bytes. `obfuscate` also says, per output row, which input row it stands for
(`Obfuscated.origins`: never written, for measuring re-identification).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import ChakraError, reader_limit
from ..io.workload import Workload
from ..schema import proto as pb
from ..schema.codec import attr_fields, attribute_rows, extra_attr_array
from ..schema.enums import STEP_BOUNDS, TIME_ORIGIN, Attr, NodeType, collective_name, node_type_name
from ..schema.groups import pg_entries
from ..schema.proto import ATTR_MEMBERS
from ..schema.resources import host_gap_mask, node_lanes
from ..schema.trace import Trace
from ..schema.wire import I64, WT_LEN, Rows, equals_literal, intern_bytes, ranges
from .transforms import fuse_chains

LEVELS = ("a", "b", "c", "d")
WORLD = ("", "0")
#: the shortest secret accepted: an empty or short key lets anyone hash a list of op names (the
#: PyTorch registry, public traces) and read the tokens back
MIN_SECRET_BYTES = 16
#: attributes kept at every level (numeric; what the simulator and analyses read), with the
#: member each is written as
KEPT = {
    "duration_unknown": "bool_val",
    Attr.COMM_SEQ: "int64_val",
    Attr.STREAM: "int64_val",
    Attr.TID: "int64_val",
    "micro_batch": "int64_val",
}
#: list-valued numeric attributes kept as they are (the dimensions a collective may use)
KEPT_LISTS = (Attr.INVOLVED_DIM,)
#: attributes kept as numbers written as JSON text: an all-to-all's per-peer sizes (bucketed at b)
SPLITS = ("in_split_size", "out_split_size")
#: every attribute name a level-a output may still carry besides the column attributes (the
#: process-group declaration rewritten)
CARRIED = frozenset({*KEPT, *KEPT_LISTS, *SPLITS, "pg_config"})
#: the only global-metadata attributes an output carries (numbers: the rank, where its time 0
#: lies relative to the job's first rank, the recorded step bounds), and the mark it adds
MARK = "obfuscated"
METADATA_KEPT = frozenset({"rank", TIME_ORIGIN, STEP_BOUNDS, MARK})
_SIZES = ("comm_size", Attr.TENSOR_SIZE, Attr.NUM_OPS)
_LIST_FIELDS = [num for num, t, is_list in ATTR_MEMBERS.values() if is_list and t not in ("string", "bytes")]
_INTS = ("int64_val", "int32_val", "uint64_val", "uint32_val", "sint64_val", "sint32_val")
_COMM = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
_HUGE = 1 << 62  # recorded times past this are hostile: not re-timed


@dataclass
class ObfuscationReport:
    """What was changed, per kind, over the job's distinct traces."""

    level: str
    names: int = 0  # distinct op names replaced
    groups: int = 0  # communicator groups renamed
    attributes_dropped: dict[str, int] = field(default_factory=dict)  # attribute name -> nodes
    metadata_dropped: int = 0  # global-metadata attributes dropped (their names are not shown)
    extras_dropped: int = 0  # nodes whose inputs/outputs, other attributes or doc strings were dropped
    threads: int = 0  # distinct thread and stream ids renumbered
    max_size_change: float = 0.0  # largest relative change of a bucketed size
    max_duration_change: float = 0.0
    fused: int = 0  # nodes fused into their chain's first
    dummies: int = 0  # nodes added: compute ops split in two

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Obfuscated:
    workload: Workload
    report: ObfuscationReport
    #: per rank, the input row each output row stands for (a split op's second part: the op's row)
    origins: dict[int, np.ndarray] = field(default_factory=dict)


def check_secret(secret: bytes | str, source: str = "the secret") -> bytes:
    """`secret` as the key, or a ChakraError when it is empty, shorter than `MIN_SECRET_BYTES` or
    made of a handful of distinct bytes: such a key is guessed, then every token is read back
    by hashing a list of op names."""
    key = secret.encode() if isinstance(secret, str) else bytes(secret)
    hint = "use at least 16 random bytes, e.g. `head -c 32 /dev/urandom > key`"
    if not key.strip():
        what = "empty" if not key else "only whitespace"
        raise ChakraError(f"obfuscate: {source} is {what}: anyone could read the tokens back; {hint}")
    if len(key) < MIN_SECRET_BYTES:
        raise ChakraError(f"obfuscate: {source} is {len(key)} bytes, fewer than {MIN_SECRET_BYTES}; {hint}")
    if len(set(key)) < 6:
        raise ChakraError(f"obfuscate: {source} has only {len(set(key))} distinct bytes: too easy to guess; {hint}")
    return key


def obfuscate(
    w: Workload,
    level: str,
    secret: bytes | str,
    *,
    names: str = "hash",
    bucket: float = 0.01,
    jitter: float = 0.05,
    small_us: float = 0.25,
    dummies: float = 0.25,
) -> Obfuscated:
    """`w` obfuscated up to `level` (see the module docstring). `secret` (at least 16 bytes,
    `check_secret`) keys every hash and random draw: keep it to obfuscate other jobs
    consistently, never share it. Pure: `w` is not changed; ranks that share a trace keep
    sharing one."""
    if level not in LEVELS:
        raise ChakraError(f"obfuscate: level {level!r}: expected one of {', '.join(LEVELS)}")
    if names not in ("hash", "class"):
        raise ChakraError(f"obfuscate: names {names!r}: expected hash or class")
    if not 0 < bucket < 0.5 or not 0 <= jitter < 1 or not 0 <= dummies <= 1 or not 0 <= small_us <= 1:
        raise ChakraError("obfuscate: bucket must be in (0, 0.5), jitter in [0, 1), dummies and small_us in [0, 1]")
    key = check_secret(secret)
    # PyTorch's world group "0" keeps its name: it means every rank, to us and to ASTRA-sim
    group_map = {
        g: g if g in WORLD else _token(key, "group", g) for g in sorted({*map(str, w.groups), *_all_groups(w)})
    }
    rep = ObfuscationReport(level=level, groups=len(group_map))
    base = min((o for t in w.traces.values() if (o := _origin(t.metadata)) is not None), default=0)
    names_seen: set[str] = set()
    done: dict[int, tuple[Trace, np.ndarray]] = {}
    for t in w.traces.values():
        if id(t) in done:
            continue
        rep.extras_dropped += int((np.diff(t.extra_indptr) > 0).sum())
        _count_dropped(t, attr_fields(t), rep)
        out, origin = _renumbered(t, np.lexsort((np.arange(len(t)), t.ids)), reorder=False), np.arange(len(t))
        if level == "d":
            out, origin = _restructure(out, origin, key, small_us, dummies, rep)
        names_seen.update(out.names)
        out = _strip(out, t.ids[origin], key, names, group_map, base, rep, bucket if level != "a" else None)
        if level in ("b", "c", "d"):
            out = _bucket(out, bucket, rep)
        if level in ("c", "d"):
            out = _retimed(out, _perturb(out, key, jitter, rep))
        if level == "d":
            order = _start_order(out, key)
            out, origin = _renumbered(out, order, reorder=True), origin[order]
        done[id(t)] = (out, origin)
    rep.names = len(names_seen - {""})
    groups = {group_map[g]: list(m) for g, m in w.groups.items()}
    traces = {r: done[id(t)][0] for r, t in w.traces.items()}
    return Obfuscated(Workload(traces, groups), rep, {r: done[id(t)][1] for r, t in w.traces.items()})


def _token(key: bytes, kind: str, text: str) -> str:
    digest = hmac.new(key, f"{kind}\0{text}".encode(), hashlib.sha256).hexdigest()
    return f"{kind[0]}{digest[:12]}"


def _all_groups(w: Workload) -> set[str]:
    """Every group a trace names: in collectives and in its metadata nodes' declarations."""
    out: set[str] = set()
    for t in {id(t): t for t in w.traces.values()}.values():
        out.update(g for g in t.groups if g)
        out.update(name for name, _ in pg_entries(t))
    return out


def _class_name(t: Trace, row: int) -> str:
    ty = int(t.types[row])
    if ty == NodeType.COMM_COLL_NODE:
        return collective_name(int(t.comm_type[row]))
    return node_type_name(ty)


# ----------------------------------------------------------------------------- ids


def _renumbered(t: Trace, order: np.ndarray, reorder: bool) -> Trace:
    """`t` with node ids 0..n-1 given in `order` (a permutation of its rows), its rows in that
    order when `reorder`. Dependencies follow their node (on a repeated id: its first row, as
    `Trace.index_of` resolves it; on the node itself: still itself); a dependency on an id that
    is in no row stays dangling, renumbered past n."""
    n = len(t)
    new_id = np.empty(n, np.uint64)
    new_id[order] = np.arange(n, dtype=np.uint64)
    out = t.copy()
    flats = []
    for ip, flat in ((t.ctrl_indptr, t.ctrl), (t.data_indptr, t.data)):
        owner = np.repeat(np.arange(n), np.diff(ip))
        rows = t.index_of(flat)
        own = flat == t.ids[owner]
        rows[own] = owner[own]
        flats.append((flat, rows))
    dangling = np.unique(np.concatenate([f[r < 0] for f, r in flats]))
    mapped = []
    for flat, rows in flats:
        m = np.empty(flat.size, np.uint64)
        hit = rows >= 0
        m[hit] = new_id[rows[hit]]
        m[~hit] = np.uint64(n) + np.searchsorted(dangling, flat[~hit]).astype(np.uint64)
        mapped.append(m)
    out.ctrl, out.data = mapped
    out.ids = new_id
    return out.take(order) if reorder else out


def _start_order(t: Trace, key: bytes) -> np.ndarray:
    """Rows by start time, ties in a keyed random order; communication rows keep their relative
    order (collectives and sends meet across ranks by it)."""
    order = np.lexsort((_unit(key, t, np.arange(len(t)), "order"), t.start))
    comm = np.isin(t.types[order], _COMM)
    order[comm] = np.sort(order[comm])
    return order


# ----------------------------------------------------------------------------- level a


def _strip(
    t: Trace,
    source_ids: np.ndarray,
    key: bytes,
    names: str,
    group_map: dict[str, str],
    base: int,
    rep: ObfuscationReport,
    bucket: float | None,
) -> Trace:
    """Level a on one trace: names, groups, metadata, inputs/outputs and attributes (split sizes
    bucketed when `bucket` is given). `source_ids`: each row's id in the input (for errors)."""
    out = t.copy()
    if names == "hash":
        out.names = [_token(key, "op", s) if s else "" for s in t.names]
    else:  # the node's class: its type, a collective's type
        kind = t.types.astype(np.int64) * 256 + np.where(t.types == NodeType.COMM_COLL_NODE, t.comm_type, 0)
        _, first, codes = np.unique(kind, return_index=True, return_inverse=True)
        out.names = [_class_name(t, int(r)) for r in first]
        out.name_codes = codes.reshape(-1).astype(np.int32)
    out.groups = [group_map.get(g, _token(key, "group", g)) if g else g for g in t.groups]
    out.metadata = _metadata(t.metadata, base, rep)
    fields = attr_fields(t)
    kept: list[Rows] = []
    lanes = _lane_ranks(t)
    rep.threads += len(lanes)
    for name, member in KEPT.items():
        vals, present = extra_attr_array(t, name)
        if not present.any() or vals.dtype == object:  # a list or string where a number was expected
            continue
        if name in (Attr.TID, Attr.STREAM):
            vals = np.searchsorted(lanes, vals.astype(np.int64)) + 1
        kept.append(attribute_rows(name, member, vals, present))
    for name in KEPT_LISTS:
        kept.extend(_raw_attr(t, name, fields))
    for name in SPLITS:
        kept.extend(_json_attr(t, name, source_ids, lambda v, where: _split_text(v, bucket, where)))
    kept.extend(_json_attr(t, "pg_config", source_ids, lambda v, where: _pg_text(v, group_map)))
    extras = Rows.concat(kept) if kept else Rows(np.zeros(0, np.uint8), np.zeros(len(t), I64))
    out.extra = extras.data
    out.extra_indptr = np.zeros(len(t) + 1, np.int64)
    np.cumsum(extras.lens, out=out.extra_indptr[1:])
    out.extra_split = np.zeros(len(t), np.uint32)
    out.placed_rows, out.placed_bits, out.placed_offsets = (
        np.zeros(0, np.int64),
        np.zeros(0, np.uint8),
        np.zeros(0, np.uint32),
    )
    return out


def _origin(meta) -> int | None:
    """The time origin a trace's metadata records as a number (`Trace.time_origin_ns`), else None."""
    for a in meta.attr:
        if a.name == TIME_ORIGIN and a.WhichOneof("value") == "int64_val":
            return int(a.int64_val)
    return None


def _metadata(meta, base: int, rep: ObfuscationReport):
    """The allow-listed global metadata, values only (no doc strings, no version): the rank, the
    time origin minus the job's first (`base`), the step bounds; and the mark."""
    out = pb.GlobalMetadata()
    for a in meta.attr:
        member = a.WhichOneof("value")
        value = None
        if a.name == "rank" and member in _INTS:
            value = int(getattr(a, member))
        elif a.name == TIME_ORIGIN and member == "int64_val":
            value = int(a.int64_val) - base
        if value is not None and -(1 << 63) <= value < 1 << 63:
            out.attr.add(name=a.name, int64_val=value)
        elif a.name == STEP_BOUNDS and member == "int64_list":
            out.attr.add(name=STEP_BOUNDS).int64_list.values.extend(a.int64_list.values)
        else:
            rep.metadata_dropped += 1
    out.attr.add(name=MARK, string_val=json.dumps({"level": rep.level}))
    return out


def _lane_ranks(t: Trace) -> np.ndarray:
    """The distinct thread and stream ids of a trace, sorted: each is renumbered to its position
    + 1, tids and streams on one scale, so that every lane keeps its order (`node_lanes`)."""
    vals = []
    for name in (Attr.TID, Attr.STREAM):
        v, has = extra_attr_array(t, name)
        if has.any() and v.dtype != object:
            vals.append(v[has].astype(np.int64))
    return np.unique(np.concatenate(vals)) if vals else np.zeros(0, np.int64)


def _name_fields(sub) -> np.ndarray:
    """The attributes' name fields among their fields (`codec.attr_fields`)."""
    return np.flatnonzero((sub.number == 1) & (sub.wtype == WT_LEN))


def _raw_attr(t: Trace, name: str, fields) -> list[Rows]:
    """Attribute `name` as its original bytes, where its value is a list of numbers (no doc string)."""
    f, a, sub = fields
    if sub is None:
        return []
    names = _name_fields(sub)
    hit = np.zeros(a.size, bool)
    hit[sub.msg[names]] = equals_literal(t.extra, sub.data[names], sub.value[names].astype(I64), name.encode())
    if not hit.any():
        return []
    odd = np.zeros(a.size, bool)  # a doc string or a non-list member: not kept
    other = ~np.isin(sub.number, [1, *_LIST_FIELDS])
    odd[sub.msg[other]] = True
    fields = a[hit & ~odd]
    rows = f.msg[fields]
    lens = (f.end[fields] - f.start[fields]).astype(I64)
    data = t.extra[ranges(f.start[fields].astype(I64), lens)]
    full = np.zeros(len(t), I64)
    full[rows] = lens
    return [Rows(data, full)]


def _json_attr(t: Trace, name: str, source_ids: np.ndarray, rewrite) -> list[Rows]:
    """Attribute `name` (a string) rewritten by `rewrite(value, where)` on the rows that have it
    (None: dropped); each distinct value is rewritten once."""
    vals, present = extra_attr_array(t, name)
    rows = np.flatnonzero(present)
    if not rows.size:
        return []
    table: dict[str, int] = {}
    done: dict[object, str | None] = {}
    codes = np.zeros(len(t), np.int64)
    keep = np.zeros(len(t), bool)
    for r in rows.tolist():
        v = vals[r]
        if not isinstance(v, str) or v not in done:
            text = rewrite(v, f"obfuscate: node {int(source_ids[r])}: attribute {name}")
            if isinstance(v, str):
                done[v] = text
        else:
            text = done[v]
        if text is not None:
            codes[r] = table.setdefault(text, len(table))
            keep[r] = True
    return [attribute_rows(name, "string_val", codes, keep, list(table))] if keep.any() else []


_INVALID = object()


def _json(text: str, where: str):
    """JSON text as values; `_INVALID` when it is not JSON; a ChakraError naming `where` when
    Python's reader refuses it (nesting too deep, an integer of thousands of digits)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return _INVALID
    except (ValueError, RecursionError) as e:
        limit = reader_limit(e, text)
        if limit is None:
            raise
        raise ChakraError(f"{where}: not accepted as JSON: {limit[0]}") from None


def _split_text(value, bucket: float | None, where: str) -> str | None:
    """An all-to-all's per-peer sizes, bucketed when `bucket` is given; anything but a JSON list
    of sizes (integers in [0, 2^63)) is a ChakraError: dropping it would change the simulation."""
    if isinstance(value, str) and not value.strip():
        return None  # (recorded empty: as if absent)
    xs = _json(value, where) if isinstance(value, str) else _INVALID
    if xs is _INVALID or not isinstance(xs, list):
        raise ChakraError(f"{where}: expected a JSON list of sizes, got {_short(value)}")
    bad = next((x for x in xs if not (isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 63)), None)
    if bad is not None or any(isinstance(x, bool) for x in xs):
        raise ChakraError(f"{where}: split size {_short(bad)} is not a size in [0, 2^63)")
    if bucket is not None:
        xs = bucketed(np.asarray(xs, np.int64), bucket).tolist()
    return json.dumps(xs, separators=(",", ":"))


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _pg_text(value, group_map: dict[str, str]) -> str | None:
    """A process-group declaration with only the groups' (renamed) names and ranks; text that
    declares nothing as `schema.groups.pg_entries` reads it (not JSON, nested past the reader's
    limit) is dropped."""
    try:
        cfg = json.loads(value) if isinstance(value, str) else None
    except (ValueError, RecursionError):
        return None
    entries = cfg if isinstance(cfg, list) else list(cfg.values()) if isinstance(cfg, dict) else []
    out = []
    for g in entries:
        if isinstance(g, dict) and "pg_name" in g:
            ranks = g.get("ranks")
            ranks = ranks if isinstance(ranks, list) and all(type(x) is int for x in ranks) else []
            name = str(g["pg_name"])
            out.append({"pg_name": group_map.get(name, name), "ranks": ranks})
    return json.dumps(out, separators=(",", ":")) if out else None


def _count_dropped(t: Trace, fields, rep: ObfuscationReport) -> None:
    """Per attribute name, the nodes that carried it and lost it (the report's table)."""
    _, _, sub = fields
    if sub is None:
        return
    is_name = _name_fields(sub)
    data, lens = sub.data[is_name].astype(I64), sub.value[is_name].astype(I64)
    codes, first = intern_bytes(t.extra, data, lens)
    counts = np.bincount(codes)
    for c, i in enumerate(first.tolist()):
        name = t.extra[data[i] : data[i] + lens[i]].tobytes().decode("utf-8", "replace")
        if name not in CARRIED:
            rep.attributes_dropped[name] = rep.attributes_dropped.get(name, 0) + int(counts[c])


# ----------------------------------------------------------------------------- levels b, c


def bucketed(values: np.ndarray, bucket: float) -> np.ndarray:
    """Values rounded to the geometric grid of ratio 1 + 2·bucket (0 stays 0)."""
    v = values.astype(np.float64)
    out = np.zeros(values.shape, np.float64)
    pos = v > 0
    ratio = np.log1p(2 * bucket)
    out[pos] = np.exp(np.round(np.log(v[pos]) / ratio) * ratio)
    if values.dtype.kind in "iu":  # (a value near the type's top stays in it)
        out = np.minimum(out, float(np.iinfo(values.dtype).max) * (1 - 1e-15))
    return np.rint(out).astype(values.dtype)


def _bucket(t: Trace, bucket: float, rep: ObfuscationReport) -> Trace:
    out = t.copy()
    for col in _SIZES:
        has = out.has(col)
        if not has.any():
            continue
        old = getattr(out, col)
        new = old.copy()
        new[has] = bucketed(old[has], bucket)
        setattr(out, col, new)
        nz = has & (old != 0)
        if nz.any():
            change = np.abs(new[nz].astype(np.float64) / old[nz].astype(np.float64) - 1)
            rep.max_size_change = max(rep.max_size_change, float(change.max()))
    return out


def _unit(key: bytes, t: Trace, rows: np.ndarray, salt: str) -> np.ndarray:
    """A number in [0, 1) per row from a keyed hash of its id and name (the same on identical
    ranks): each distinct name keyed by HMAC, then mixed with the id by splitmix64."""
    used = np.unique(t.name_codes[rows]) if rows.size else np.zeros(0, np.int64)
    name_keys = np.zeros(len(t.names), np.uint64)
    for c in used.tolist():  # (only the names these rows carry: a trace may hold 200k names)
        digest = hmac.new(key, f"{salt}\0{t.names[c]}".encode(), hashlib.sha256).digest()
        name_keys[c] = int.from_bytes(digest[:8], "little")
    x = name_keys[t.name_codes[rows]] ^ t.ids[rows].astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _perturb(t: Trace, key: bytes, jitter: float, rep: ObfuscationReport) -> Trace:
    out = t.copy()
    rows = np.flatnonzero((t.types == NodeType.COMP_NODE) & (t.duration > 0) & (t.duration < _HUGE))
    if not rows.size or jitter == 0:
        return out
    factor = 1 + jitter * (2 * _unit(key, t, rows, "duration") - 1)
    new = out.duration.copy()
    new[rows] = np.maximum(np.rint(t.duration[rows] * factor), 1).astype(new.dtype)
    out.duration = new
    change = np.abs(new[rows].astype(np.float64) / t.duration[rows].astype(np.float64) - 1)
    rep.max_duration_change = max(rep.max_duration_change, float(change.max()))
    return out


def _retimed(before: Trace, after: Trace) -> Trace:
    """`after` (`before` with new durations) with start times that follow them: each node moves
    by as much as the end of what it waited for moved (its dependencies and the node before it on
    its lane), so every recorded delay is kept and the old durations cannot be read off the
    starts. Hostile times (past 2^62 µs) are left as they are."""
    n = len(before)
    if not n or not before.timed or int(before.start.max()) >= _HUGE or int(before.duration.max()) >= _HUGE:
        return after
    start0 = before.start.astype(np.int64)
    end0 = start0 + before.duration.astype(np.int64)
    order = np.lexsort((np.arange(n), start0))
    lane = node_lanes(before)
    prev = np.full(n, -1, np.int64)  # the node before each on its lane, in start order
    by_lane = order[np.argsort(lane[order], kind="stable")]
    same = lane[by_lane[1:]] == lane[by_lane[:-1]]
    prev[by_lane[1:][same & (lane[by_lane[1:]] >= 0)]] = by_lane[:-1][same & (lane[by_lane[1:]] >= 0)]
    indptr, preds = before.graph().preds
    ip, pl, pv = indptr.tolist(), preds.tolist(), prev.tolist()
    s0, e0 = start0.tolist(), end0.tolist()
    dur1 = after.duration.astype(np.int64).tolist()
    e1 = [s + d for s, d in zip(s0, dur1)]
    s1 = list(s0)
    for r in order.tolist():
        waits = pl[ip[r] : ip[r + 1]]
        if pv[r] >= 0:
            waits = [*waits, pv[r]]
        if waits:
            s1[r] = min(max(s0[r] + max(e1[p] for p in waits) - max(e0[p] for p in waits), 0), _HUGE)
            e1[r] = s1[r] + dur1[r]
    out = after.copy()
    out.start = np.asarray(s1, np.int64).astype(np.uint64)
    return out


# ----------------------------------------------------------------------------- level d


def _restructure(
    t: Trace, origin: np.ndarray, key: bytes, small_us: float, share: float, rep: ObfuscationReport
) -> tuple[Trace, np.ndarray]:
    """Level d: short compute chains fused, then compute ops split in two (`_split`). `t`'s ids
    are unique (`_renumbered`); `origin` follows its rows."""
    comp = t.types == NodeType.COMP_NODE
    if comp.any():
        cut = np.quantile(t.duration[comp].astype(np.float64), small_us)
        fused = fuse_chains(t, comp & (t.duration.astype(np.float64) <= cut))
        if fused is not t:
            rep.fused += len(t) - len(fused)
            origin = origin[t.index_of(fused.ids)]
            t = fused
    return _split(t, origin, key, share, rep)


def _split(t: Trace, origin: np.ndarray, key: bytes, share: float, rep: ObfuscationReport) -> tuple[Trace, np.ndarray]:
    """`share` x n compute ops (of 2 µs or more, chosen by the secret) each split into two
    consecutive parts on its lane: the op keeps the first part of its time (a keyed 25-75%) and
    its sizes in proportion; a new node of the same name takes the rest, depends on it, and
    everything that depended on the op depends on the new node. No time is added, no ordering
    lost; the graph, the op counts and the per-op times no longer match the original's."""
    cand = np.flatnonzero(
        (t.types == NodeType.COMP_NODE) & (t.duration >= 2) & (t.duration < _HUGE) & ~host_gap_mask(t)
    )
    k = min(int(round(share * len(t))), cand.size)
    if k == 0:
        return t, origin
    pick = cand[np.argsort(_unit(key, t, cand, "split"), kind="stable")[:k]]
    pick = pick[np.argsort(t.ids[pick])]  # (by id: the dependents' entries are found by search)
    d = t.duration[pick].astype(np.int64)
    first = np.clip((d * (0.25 + 0.5 * _unit(key, t, pick, "part"))).astype(np.int64), 1, d - 1)
    out = t.copy()
    new = t.take(pick)
    top = max(int(t.ids.max()), int(t.ctrl.max(initial=0)), int(t.data.max(initial=0))) + 1  # (past dangling ids)
    new.ids = np.arange(top, top + k, dtype=np.uint64)
    new.duration = (d - first).astype(np.uint64)
    new.start = t.start[pick] + first.astype(np.uint64)
    new.ctrl_indptr, new.ctrl = np.arange(k + 1, dtype=np.int64), t.ids[pick].astype(np.uint64)
    new.data_indptr, new.data = np.zeros(k + 1, np.int64), np.zeros(0, np.uint64)
    out.duration = out.duration.copy()
    out.duration[pick] = first.astype(np.uint64)
    for col in (Attr.NUM_OPS, Attr.TENSOR_SIZE):
        vals = getattr(t, col)[pick]
        tail = (vals.astype(np.float64) * ((d - first) / d)).astype(vals.dtype)
        getattr(new, col)[:] = tail
        getattr(out, col)[pick] = vals - tail
    for flat_name in ("ctrl", "data"):  # the op's dependents wait for its second part (not itself)
        flat = getattr(out, flat_name).copy()
        owner = np.repeat(np.arange(len(t)), np.diff(getattr(out, f"{flat_name}_indptr")))
        pos = np.minimum(np.searchsorted(t.ids[pick], flat), k - 1)
        hit = (t.ids[pick][pos] == flat) & (owner != pick[pos])
        flat[hit] = new.ids[pos[hit]]
        setattr(out, flat_name, flat)
    rep.dummies += k
    return Trace.concat([out, new]), np.concatenate([origin, origin[pick]])


__all__ = [
    "obfuscate",
    "check_secret",
    "Obfuscated",
    "ObfuscationReport",
    "LEVELS",
    "KEPT",
    "KEPT_LISTS",
    "SPLITS",
    "CARRIED",
    "METADATA_KEPT",
    "MIN_SECRET_BYTES",
    "bucketed",
]
