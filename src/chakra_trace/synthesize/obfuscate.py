"""Obfuscation: a job others may see, which performs like the original but does not show its
model, so companies can share traces (the Chakra paper's obfuscated sharing).

Levels, each including the ones before:

- ``a`` names and strings: op names become a keyed hash (HMAC-SHA256 under a secret, the same
  name the same token in every rank and every job obfuscated with that secret, so per-op
  analyses still group them) or their node class (``names="class"``); communicator groups are
  renamed alike (but PyTorch's world group "0", which means every rank) (in the job's group file and in the process-group declarations of metadata
  nodes, which keep only names and ranks); the global metadata keeps its numbers only (rank, time origin, step bounds); every node's inputs
  and outputs (shapes, types, values) and every attribute but the numeric ones the simulator and
  analyses read (`KEPT`, and an all-to-all's split sizes, `SPLITS`) are dropped, doc strings
  included. Times, sizes, dependencies and collectives are untouched: the simulated step is the
  original's.
- ``b`` sizes bucketed: collective bytes, tensor bytes and FLOPs rounded to a geometric grid of
  ratio ``1 + 2·bucket`` (each value moves by at most about ``bucket``, 1% by default; every rank
  rounds the same value alike, so collectives still match), split sizes too.
- ``c`` durations perturbed: each compute node's time times a factor in [1 - jitter, 1 + jitter]
  drawn from a keyed hash of its id and name (identical ranks perturbed identically), rounded to
  whole µs (a short op may move by up to 1 µs more).
- ``d`` structure: chains of short compute ops (under the `small_us` quantile of a rank's compute
  times) fused into one, and `dummies` x nodes of zero-time independent compute ops inserted, so
  the graph no longer fingerprints the model's op sequence. Dummies cost no time; fusion keeps
  every ordering between kept nodes.

What each level preserves is tested (`tests/test_obfuscate.py`): a (and b within its bound) keep
the simulated step; `leak_scan` checks that no name, string or shape of the original is in the
output's bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema import proto as pb
from ..schema.codec import attr_fields, attribute_rows, extra_attr_array
from ..schema.enums import Attr, NodeType, collective_name, node_type_name
from ..schema.groups import pg_entries
from ..schema.proto import ATTR_MEMBERS
from ..schema.trace import Trace
from ..schema.wire import I64, WT_LEN, Rows, equals_literal, intern_bytes, ranges
from .transforms import fuse_chains

LEVELS = ("a", "b", "c", "d")
WORLD = ("", "0")
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
#: every attribute name a level-a output may still carry (the process-group declaration rewritten)
CARRIED = frozenset({*KEPT, *KEPT_LISTS, *SPLITS, "pg_config"})
_SIZES = ("comm_size", Attr.TENSOR_SIZE, Attr.NUM_OPS)
_LIST_FIELDS = [num for num, t, is_list in ATTR_MEMBERS.values() if is_list and t not in ("string", "bytes")]
_NUMERIC = {member for member, (_, t, _) in ATTR_MEMBERS.items() if t not in ("string", "bytes")}


@dataclass
class ObfuscationReport:
    """What was changed, per kind, over the job's distinct traces."""

    level: str
    names: int = 0  # distinct op names replaced
    groups: int = 0  # communicator groups renamed
    attributes_dropped: dict[str, int] = field(default_factory=dict)  # attribute name -> nodes
    extras_dropped: int = 0  # nodes whose inputs/outputs, other attributes or doc strings were dropped
    max_size_change: float = 0.0  # largest relative change of a bucketed size
    max_duration_change: float = 0.0
    fused: int = 0  # nodes fused into their chain's first
    dummies: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Obfuscated:
    workload: Workload
    report: ObfuscationReport


def obfuscate(
    w: Workload,
    level: str = "b",
    secret: bytes | str = b"",
    *,
    names: str = "hash",
    bucket: float = 0.01,
    jitter: float = 0.05,
    small_us: float = 0.25,
    dummies: float = 0.05,
) -> Obfuscated:
    """`w` obfuscated up to `level` (see the module docstring). `secret` keys every hash and
    random draw: keep it to obfuscate other jobs consistently, never share it. Pure: `w` is not
    changed; ranks that share a trace keep sharing one."""
    if level not in LEVELS:
        raise ChakraError(f"obfuscate: level {level!r}: expected one of {', '.join(LEVELS)}")
    if names not in ("hash", "class"):
        raise ChakraError(f"obfuscate: names {names!r}: expected hash or class")
    if not 0 < bucket < 0.5 or not 0 <= jitter < 1 or not 0 <= dummies <= 1:
        raise ChakraError("obfuscate: bucket must be in (0, 0.5), jitter in [0, 1), dummies in [0, 1]")
    key = secret.encode() if isinstance(secret, str) else bytes(secret)
    # PyTorch's world group "0" keeps its name: it means every rank, to us and to ASTRA-sim
    group_map = {
        g: g if g in WORLD else _token(key, "group", g) for g in sorted({*map(str, w.groups), *_all_groups(w)})
    }
    rep = ObfuscationReport(level=level, groups=len(group_map))
    names_seen: set[str] = set()
    done: dict[int, Trace] = {}
    for t in w.traces.values():
        if id(t) in done:
            continue
        out = t
        if level == "d":
            out = _restructure(out, key, small_us, dummies, rep)
        names_seen.update(out.names)
        out = _strip(out, key, names, group_map, rep, bucket if level != "a" else None)
        if level in ("b", "c", "d"):
            out = _bucket(out, bucket, rep)
        if level in ("c", "d"):
            out = _perturb(out, key, jitter, rep)
        done[id(t)] = out
    rep.names = len(names_seen - {""})
    groups = {group_map[g]: list(m) for g, m in w.groups.items()}
    return Obfuscated(Workload({r: done[id(t)] for r, t in w.traces.items()}, groups), rep)


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


def _strip(
    t: Trace, key: bytes, names: str, group_map: dict[str, str], rep: ObfuscationReport, bucket: float | None
) -> Trace:
    """Level a on one trace: names, groups, metadata, inputs/outputs and attributes (split sizes
    bucketed when `bucket` is given)."""
    out = t.copy()
    if names == "hash":
        out.names = [_token(key, "op", s) if s else "" for s in t.names]
    else:  # the node's class: its type, a collective's type
        kind = t.types.astype(np.int64) * 256 + np.where(t.types == NodeType.COMM_COLL_NODE, t.comm_type, 0)
        uniq, first, codes = np.unique(kind, return_index=True, return_inverse=True)
        out.names = [_class_name(t, int(r)) for r in first]
        out.name_codes = codes.reshape(-1).astype(np.int32)
        del uniq
    out.groups = [group_map.get(g, _token(key, "group", g)) if g else g for g in t.groups]
    out.metadata = pb.GlobalMetadata()  # its numbers only: rank, time origin, step bounds
    for attr in t.metadata.attr:
        if attr.WhichOneof("value") in _NUMERIC:
            out.metadata.attr.add().CopyFrom(attr)
            out.metadata.attr[-1].ClearField("doc_string")
    out.metadata.attr.add(name="obfuscated", string_val=json.dumps({"level": rep.level}))
    fields = attr_fields(t)  # (scanned once for the raw attributes and the report)
    kept: list[Rows] = []
    for name, member in KEPT.items():
        vals, present = extra_attr_array(t, name)
        if not present.any():
            continue
        if vals.dtype == object:  # a list or string where a number was expected: not kept
            continue
        kept.append(attribute_rows(name, member, vals, present))
    for name in KEPT_LISTS:
        kept.extend(_raw_attr(t, name, fields))
    for name in SPLITS:
        kept.extend(_json_attr(t, name, lambda v: _split_text(v, bucket)))
    kept.extend(_json_attr(t, "pg_config", lambda v: _pg_text(v, group_map)))
    extras = Rows.concat(kept) if kept else Rows(np.zeros(0, np.uint8), np.zeros(len(t), I64))
    rep.extras_dropped += int((np.diff(t.extra_indptr) > 0).sum())
    _count_dropped(t, fields, rep)
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


def _json_attr(t: Trace, name: str, rewrite) -> list[Rows]:
    """Attribute `name` (a string) rewritten by `rewrite` on the rows that have it (None: dropped)."""
    vals, present = extra_attr_array(t, name)
    rows = np.flatnonzero(present)
    if not rows.size:
        return []
    table: dict[str, int] = {}
    codes = np.zeros(len(t), np.int64)
    keep = np.zeros(len(t), bool)
    for r in rows.tolist():
        text = rewrite(vals[r])
        if text is not None:
            codes[r] = table.setdefault(text, len(table))
            keep[r] = True
    return [attribute_rows(name, "string_val", codes, keep, list(table))] if keep.any() else []


def _split_text(value, bucket: float | None) -> str | None:
    try:
        xs = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if not (isinstance(xs, list) and all(isinstance(x, int) and x >= 0 for x in xs)):
        return None
    if bucket is not None:
        xs = bucketed(np.asarray(xs, np.int64), bucket).tolist()
    return json.dumps(xs, separators=(",", ":"))


def _pg_text(value, group_map: dict[str, str]) -> str | None:
    """A process-group declaration with only the groups' (renamed) names and ranks."""
    try:
        cfg = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    entries = cfg if isinstance(cfg, list) else list(cfg.values()) if isinstance(cfg, dict) else []
    out = []
    for g in entries:
        if isinstance(g, dict) and "pg_name" in g:
            ranks = g.get("ranks")
            ranks = ranks if isinstance(ranks, list) and all(isinstance(x, int) for x in ranks) else []
            out.append({"pg_name": group_map.get(str(g["pg_name"]), str(g["pg_name"])), "ranks": ranks})
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


def bucketed(values: np.ndarray, bucket: float) -> np.ndarray:
    """Values rounded to the geometric grid of ratio 1 + 2·bucket (0 stays 0)."""
    v = values.astype(np.float64)
    out = np.zeros(values.shape, np.float64)
    pos = v > 0
    ratio = np.log1p(2 * bucket)
    out[pos] = np.exp(np.round(np.log(v[pos]) / ratio) * ratio)
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
    name_keys = np.array(
        [
            int.from_bytes(hmac.new(key, f"{salt}\0{s}".encode(), hashlib.sha256).digest()[:8], "little")
            for s in t.names
        ],
        np.uint64,
    )
    x = name_keys[t.name_codes[rows]] ^ t.ids[rows].astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _perturb(t: Trace, key: bytes, jitter: float, rep: ObfuscationReport) -> Trace:
    out = t.copy()
    rows = np.flatnonzero((t.types == NodeType.COMP_NODE) & (t.duration > 0))
    if not rows.size or jitter == 0:
        return out
    factor = 1 + jitter * (2 * _unit(key, t, rows, "duration") - 1)
    new = out.duration.copy()
    new[rows] = np.maximum(np.rint(t.duration[rows] * factor), 1).astype(new.dtype)
    out.duration = new
    change = np.abs(new[rows].astype(np.float64) / t.duration[rows].astype(np.float64) - 1)
    rep.max_duration_change = max(rep.max_duration_change, float(change.max()))
    return out


def _restructure(t: Trace, key: bytes, small_us: float, dummies: float, rep: ObfuscationReport) -> Trace:
    """Level d: short compute chains fused, zero-time dummy ops added."""
    comp = t.types == NodeType.COMP_NODE
    if comp.any():
        cut = np.quantile(t.duration[comp].astype(np.float64), small_us)
        before = len(t)
        t = fuse_chains(t, comp & (t.duration.astype(np.float64) <= cut))
        rep.fused += before - len(t)
    comp_rows = np.flatnonzero(t.types == NodeType.COMP_NODE)
    n = int(round(dummies * len(t)))
    if not n or not comp_rows.size:
        return t
    u = _unit(key, t, comp_rows[np.arange(n) % comp_rows.size], "dummy")
    parents = t.ids[comp_rows[(u * comp_rows.size).astype(np.int64)]]
    rep.dummies += n
    return _with_dummies(t, parents, _token(key, "op", "dummy"))


def _with_dummies(t: Trace, parents: np.ndarray, name: str) -> Trace:
    """`t` with one zero-time compute node per parent id, depending on it, ids past the largest."""
    n, k = len(t), parents.size
    arrays = {c: _grow(t, c, k) for c in Trace.ARRAYS if c not in ("data_indptr", "data", "ctrl_indptr", "ctrl")}
    arrays["ctrl_indptr"] = np.concatenate([t.ctrl_indptr, np.full(k, t.ctrl_indptr[-1], np.int64)])
    arrays["ctrl"] = t.ctrl.copy()
    arrays["data_indptr"] = np.concatenate([t.data_indptr, t.data_indptr[-1] + np.arange(1, k + 1, dtype=np.int64)])
    arrays["data"] = np.concatenate([t.data, parents.astype(np.uint64)])
    out = Trace(n + k, metadata=t.metadata, names=[*t.names, name], groups=list(t.groups), **arrays)  # type: ignore[arg-type]  # columns only
    top = int(t.ids.max()) if n else 0
    out.ids[n:] = np.arange(top + 1, top + 1 + k, dtype=np.uint64)
    out.types[n:] = NodeType.COMP_NODE
    out.name_codes[n:] = len(t.names)
    return out


def _grow(t: Trace, col: str, k: int) -> np.ndarray:
    a = getattr(t, col)
    if col == "extra":
        return a.copy()
    if col == "extra_indptr":
        return np.concatenate([a, np.full(k, a[-1], a.dtype)])
    return np.concatenate([a, np.zeros(k, a.dtype)])


__all__ = [
    "obfuscate",
    "Obfuscated",
    "ObfuscationReport",
    "LEVELS",
    "KEPT",
    "KEPT_LISTS",
    "SPLITS",
    "CARRIED",
    "bucketed",
]
