"""One rank's trace as a program: lanes, tokens, grammar, per-op coordinates and edges.

A rank runs ops on *lanes*: a resource kind (accelerator, CPU, communication, other;
`schema.resources`) on one recorded thread or stream. Each lane's ops, in a topological order of
the trace, are a token sequence whose grammar (`grammar.parse`) gives every op a slot and an
instance. A token is what an op is, not where it runs: node type, resource kind, the name with
its digits folded (``layers.3.mlp`` and ``layers.7.mlp`` are one token; the names themselves are
kept per instance), collective type, and the communicator's *role* on this rank (the k-th
group it uses, so the ranks of an SPMD job share one program while naming different groups).

Ranks whose lanes hold the same tokens, sizes and peers are one program (`identity`); their
durations pool. METADATA nodes are not part of a program (the sampled job's groups are written
beside it instead).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import numpy as np

from ...schema import codec
from ...schema.enums import Attr, NodeType
from ...schema.groups import ALL_RANKS_GROUPS
from ...schema.resources import node_kinds
from ...schema.trace import Trace
from ...schema.wire import WT_LEN, equals_literal
from . import grammar

_DIGITS = re.compile(r"\d+")
PHASES = ("", "forward", "backward", "optimizer", "recompute")
P2P = (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
LANE_NONE, LANE_TID, LANE_STREAM = 0, 1, 2


def op_class(name: str) -> str:
    """A name with its digits folded: what the op mix and the grammar compare."""
    return _DIGITS.sub("#", name)


class Vocabulary:
    """Tokens and raw names, numbered as first seen (shared by every program of a model)."""

    def __init__(self, tokens: list[tuple] | None = None, names: list[str] | None = None) -> None:
        self.tokens: list[tuple[int, int, str, int, int]] = list(tokens or [])
        self.names: list[str] = list(names or [])
        self._tok = {t: i for i, t in enumerate(self.tokens)}
        self._name = {n: i for i, n in enumerate(self.names)}

    def token(self, t: tuple[int, int, str, int, int]) -> int:
        i = self._tok.get(t)
        if i is None:
            i = self._tok[t] = len(self.tokens)
            self.tokens.append(t)
        return i

    def name(self, n: str) -> int:
        i = self._name.get(n)
        if i is None:
            i = self._name[n] = len(self.names)
            self.names.append(n)
        return i

    def copy(self) -> Vocabulary:
        return Vocabulary(self.tokens, self.names)


@dataclass
class RankProgram:
    """One rank as a program. Ops are numbered by (slot, instance): op k of the inst table is
    instance ``k - inst_ptr[slot]`` of its slot."""

    tree: grammar.Tree
    slot_token: np.ndarray
    slot_lane: np.ndarray
    lane_kind: np.ndarray
    lane_attr: np.ndarray
    inst_ptr: np.ndarray
    # per op of the inst table
    key: np.ndarray  # position in the rank's topological order
    seq: np.ndarray  # issue order of a collective (comm_seq, else key); -1 otherwise
    name: np.ndarray  # raw name code
    duration: np.ndarray
    comm_size: np.ndarray
    num_ops: np.ndarray
    tensor_size: np.ndarray
    peer: np.ndarray
    tag: np.ndarray
    phase: np.ndarray
    micro_batch: np.ndarray  # -1 where not recorded (what tells a micro-batch repeat from layers)
    # edges between ops of the inst table
    edge_v: np.ndarray
    edge_u: np.ndarray
    edge_kind: np.ndarray
    roles: list[str] = field(default_factory=list)  # group names by role on this rank

    def identity(self) -> bytes:
        """What makes two ranks one program: lanes, grammar, tokens, sizes, peers and names."""
        h = hashlib.blake2b(digest_size=20)
        for a in (
            self.lane_kind,
            self.lane_attr,
            self.tree.kind,
            self.tree.count,
            self.tree.child,
            self.tree.nslots,
            self.slot_token,
            self.name,
            self.comm_size,
            self.num_ops,
            self.tensor_size,
            self.peer,
            self.tag,
            self.edge_v,
            self.edge_u,
        ):
            h.update(np.ascontiguousarray(a).tobytes())
            h.update(b"|")
        return h.digest()


def _lanes(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(lane value, attribute it came from) per row: the recorded stream, else thread, else -1."""
    value = np.full(len(trace), -1, np.int64)
    attr = np.zeros(len(trace), np.int8)
    for name, code in ((Attr.TID, LANE_TID), (Attr.STREAM, LANE_STREAM)):  # a stream overrides the thread
        vals, has = trace.attr_array(name, np.int64)
        value[has] = vals[has].astype(np.int64)
        attr[has] = code
    return value, attr


def _phase(trace: Trace) -> np.ndarray:
    """Each row's `phase` attribute (a captured step's forward/backward/optimizer) as its index in
    PHASES, 0 where absent: the string values compared on the wire, not decoded per node."""
    out = np.zeros(len(trace), np.int8)
    f, a, sub = codec.attr_fields(trace)
    if not a.size:
        return out
    buf = trace.extra
    is_name = (sub.number == 1) & (sub.wtype == WT_LEN)
    named = np.zeros(a.size, bool)
    nr = np.flatnonzero(is_name)
    named[sub.msg[nr]] = equals_literal(buf, sub.data[nr], sub.value[nr].astype(np.int64), b"phase")
    val = np.flatnonzero(named[sub.msg] & ~is_name & (sub.wtype == WT_LEN) & (sub.number >= 3))
    rows = f.msg[a[sub.msg[val]]]
    for code, ph in enumerate(PHASES):
        if ph:
            hit = equals_literal(buf, sub.data[val], sub.value[val].astype(np.int64), ph.encode())
            out[rows[hit]] = code
    return out


def extract(trace: Trace, vocab: Vocabulary, max_period: int = 8192) -> RankProgram:
    """The program of one rank's trace (see the module docstring)."""
    keep = trace.types != NodeType.METADATA_NODE
    order = trace.graph().order(partial=True)
    if order.size < len(trace):  # rows on or behind a cycle: after the rest, in row order
        left = np.ones(len(trace), bool)
        left[order] = False
        order = np.concatenate([order, np.flatnonzero(left)])
    order = order[keep[order]]
    n = order.size
    pos = np.full(len(trace), -1, np.int64)  # row -> position in `order`
    pos[order] = np.arange(n)

    kinds = node_kinds(trace)[order]
    lane_val, lane_attr = _lanes(trace)
    lane_val, lane_attr = lane_val[order], lane_attr[order]
    types = trace.types[order]
    ctype = np.where(trace.has(Attr.COMM_TYPE), trace.comm_type, -1)[order]
    comm = (types == NodeType.COMM_COLL_NODE) | np.isin(types, P2P)

    # roles: the groups this rank's collectives name, by first use; the all-ranks group is -1
    pg_vals, pg_has = trace.attr_array(Attr.PG_NAME)
    pg = np.where(pg_has, pg_vals, "").astype(object)[order]
    role_of: dict[str, int] = {}  # (a dict: `list.index` per collective was collectives x groups)
    role = np.full(n, -1, np.int64)
    for i in np.flatnonzero(comm & (types == NodeType.COMM_COLL_NODE)).tolist():
        g = str(pg[i])
        if g in ALL_RANKS_GROUPS:
            continue
        role[i] = role_of.setdefault(g, len(role_of))
    roles = list(role_of)

    # lanes: (kind, attribute, value), numbered by first appearance
    lane_key = np.stack([kinds.astype(np.int64), lane_attr.astype(np.int64), lane_val], axis=1)
    _, first, lane_code = np.unique(lane_key, axis=0, return_index=True, return_inverse=True)
    lane_code = lane_code.reshape(-1)
    rank_of_lane = np.empty(first.size, np.int64)
    rank_of_lane[np.argsort(first, kind="stable")] = np.arange(first.size)
    lane = rank_of_lane[lane_code]
    lane_first = np.sort(first)

    # tokens: one vocabulary look-up per distinct (type, kind, name, collective type, role)
    what = np.stack([types, kinds, trace.name_codes[order], ctype, role], axis=1).astype(np.int64)
    uniq, inverse = np.unique(what, axis=0, return_inverse=True) if n else (np.zeros((0, 5), np.int64), np.zeros(0))
    codes = [vocab.token((int(u[0]), int(u[1]), op_class(trace.names[u[2]]), int(u[3]), int(u[4]))) for u in uniq]
    tok = np.asarray(codes, np.int64)[inverse.reshape(-1).astype(np.int64)] if n else np.zeros(0, np.int64)
    by_lane = np.argsort(lane, kind="stable")  # (a mask per lane: lanes x ops)
    lane_rows = np.split(by_lane, np.searchsorted(lane[by_lane], np.arange(1, lane_first.size)))
    tree, slot_token = grammar.parse([tok[r] for r in lane_rows], max_period)
    slot_lane = np.zeros(tree.num_slots, np.int64)
    # where each op lands: (slot, instance) from expanding the tree, lane by lane
    slot_of = np.zeros(n, np.int64)
    inst_of = np.zeros(n, np.int64)
    for k, (s, i, _) in enumerate(grammar.expand(tree)):
        rows = lane_rows[k]
        slot_of[rows], inst_of[rows] = s, i
        slot_lane[s] = k
    assert (slot_token[slot_of] == tok).all(), "grammar does not expand to its lane"
    inst = grammar.instances(tree)
    inst_ptr = np.zeros(tree.num_slots + 1, np.int64)
    np.cumsum(inst, out=inst_ptr[1:])
    at = inst_ptr[slot_of] + inst_of  # op position in the inst table
    table = np.empty(n, np.int64)
    table[at] = np.arange(n)  # inst table -> position in `order`

    rows = order[table]
    seq_vals, seq_has = trace.attr_array(Attr.COMM_SEQ, np.int64)
    is_coll = trace.types[rows] == NodeType.COMM_COLL_NODE
    key = table.astype(np.int64)
    seq_key = np.where(is_coll, key, -1)
    if seq_has[rows].any():  # collectives meet in comm_seq order: their keys, reordered by it
        coll = np.flatnonzero(is_coll)
        cseq = np.where(seq_has[rows][coll], seq_vals[rows][coll], np.iinfo(np.int64).max)
        seq_key[coll[np.lexsort((key[coll], cseq))]] = np.sort(key[coll])
    peer = np.full(n, -1, np.int64)
    send = trace.types[rows] == NodeType.COMM_SEND_NODE
    recv = trace.types[rows] == NodeType.COMM_RECV_NODE
    peer[send] = trace.comm_dst[rows][send]
    peer[recv] = trace.comm_src[rows][recv]
    tag = np.where(send | recv, trace.comm_tag[rows], -1).astype(np.int64)
    mb_vals, mb_has = trace.attr_array("micro_batch", np.int64)
    name_map = np.asarray([vocab.name(x) for x in trace.names], np.int64)
    name_code = name_map[trace.name_codes[rows]]

    srcs, dsts, kinds_e = [], [], []
    for code, kind in enumerate(("data", "ctrl")):
        src, dst, _ = trace.dep_rows(kind)
        ok = (dst >= 0) & (src != dst)
        ok &= (pos[src.clip(0)] >= 0) & (pos[dst.clip(0)] >= 0)
        srcs.append(at[pos[src[ok]]])
        dsts.append(at[pos[dst[ok]]])
        kinds_e.append(np.full(int(ok.sum()), code, np.int8))
    ev, eu, ek = np.concatenate(srcs), np.concatenate(dsts), np.concatenate(kinds_e)
    uniq = np.unique(np.stack([ev, eu, ek.astype(np.int64)], axis=1), axis=0) if ev.size else np.zeros((0, 3), np.int64)

    return RankProgram(
        tree=tree,
        slot_token=slot_token,
        slot_lane=slot_lane,
        lane_kind=kinds[lane_first].astype(np.int8),
        lane_attr=lane_attr[lane_first].astype(np.int8),
        inst_ptr=inst_ptr,
        key=key,
        seq=seq_key,
        name=name_code,
        duration=trace.duration[rows].astype(np.int64),
        comm_size=np.where(trace.has(Attr.COMM_SIZE)[rows], trace.comm_size[rows], 0).astype(np.int64),
        num_ops=np.where(trace.has(Attr.NUM_OPS)[rows], trace.num_ops[rows], 0).astype(np.int64),
        tensor_size=np.where(trace.has(Attr.TENSOR_SIZE)[rows], trace.tensor_size[rows], 0).astype(np.int64),
        peer=peer,
        tag=tag,
        phase=_phase(trace)[rows],
        micro_batch=np.where(mb_has[rows], mb_vals[rows], -1).astype(np.int64),
        edge_v=uniq[:, 0],
        edge_u=uniq[:, 1],
        edge_kind=uniq[:, 2].astype(np.int8),
        roles=roles,
    )
