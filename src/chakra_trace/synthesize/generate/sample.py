"""Sampling new jobs from a fitted generator, and the trivial baselines they are compared with.

`sample(model, like=JOB, layers_scale=..., batch_scale=..., ranks=..., seed=...)` generates a job
like a training job: each of its programs is expanded with the repeat counts the layer count
asks for (`fit`'s count rules), its dependencies come from the fitted relations, and every op
draws its duration from its slot's pooled distribution (every instance of that op over the
layers, ranks and steps it was seen in), independently per rank. Sizes, FLOPs, bytes, names and
send/receive peers and tags are those of the template instance an op maps to (the same layer, or
the layer at the same relative depth when layers were added). Ranks that ran one program run
one sampled structure, so their collectives match: the same types and sizes, in the same order
per communicator (written as `comm_seq`), each rank naming its own communicators. Ranks that ran
different programs whose collectives on a communicator would differ at the layers asked for run
its first member's structure (`agree`), and every sample is validated across ranks before it is
returned (`agree.refuse_invalid`: a ChakraError naming the failed check).

Conditioning:

- ``layers_scale`` / ``layers``: the layer count (every repeat follows its count rule);
- ``batch_scale`` s: the durations of compute ops outside the optimizer scale by s to their
  token's fitted elasticity, and their FLOPs and bytes by s (an approximation: it also scales
  ops whose work does not depend on the batch, like weight casts); communication is unchanged,
  except sends, receives and all-to-alls, which carry activations (sizes x s);
- ``jitter``: times the fitted per-token noise on durations (0: the pooled values only);
- ``ranks``: data-parallel scale-out of the sampled job (`synthesize.scale.data_parallel`), for
  jobs whose communicators span every rank.

The baselines (`sample_baseline`) generate as many ops per rank, i.i.d.: ``iid-global`` draws
op tokens from the whole training corpus's op mix and durations from its global duration
distribution; ``iid-like`` draws both from the job it is like (durations per token). Each op
depends on the one before (a chain); collectives run on the all-ranks group, sends and receives
and collectives recorded without a type are left out (they would not match, or not run).
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field

import numpy as np

from ...errors import ChakraError
from ...io.workload import Workload
from ...schema.builder import global_metadata
from ...schema.enums import Attr, CollectiveType, NodeType
from ...schema.resources import COMM, CPU
from ...schema.trace import Trace
from ..scale import data_parallel
from . import grammar, relations
from .agree import refuse_invalid, shared_programs
from .budget import baseline_nodes, layer_target, plan_sample
from .model import GeneratorModel, Job, Program
from .program import LANE_STREAM, LANE_TID, P2P, PHASES

OPTIMIZER = PHASES.index("optimizer")
BASELINES = ("iid-global", "iid-like")
MAX_JITTER = 100.0  # times the fitted noise: exp(0.5 * 100 * z) stays finite
_INT64_MAX = float(2**63 - 2**10)  # the largest float below 2^63: what a cast to int64 keeps


def _ints(x: np.ndarray, dtype) -> np.ndarray:
    """Rounded to integers of `dtype`, clipped to what it holds (no cast of inf or NaN)."""
    low = 0.0 if np.dtype(dtype).kind == "u" else -_INT64_MAX
    return np.rint(np.clip(np.nan_to_num(x, nan=0.0), low, _INT64_MAX)).astype(dtype)


@dataclass
class _Structure:
    """One program expanded: ops in row order with their slot, template op, token, lane, role,
    collective issue order, and the dependency CSR (rows)."""

    slot: np.ndarray
    inst: np.ndarray
    tmpl: np.ndarray
    token: np.ndarray
    lane: np.ndarray
    comm_seq: np.ndarray
    data: tuple[np.ndarray, np.ndarray]
    ctrl: tuple[np.ndarray, np.ndarray]
    dropped: int


def periods(p: Program, counts: np.ndarray) -> np.ndarray:
    """Per repeat, the whole number of instances per layer its count rule gives (2 collectives
    per layer: 2) when both counts divide by it, else 1: what `relations.map_index` keeps."""
    a = np.rint(p.count_a).astype(np.int64)
    ok = (np.abs(p.count_a - a) < 1e-6) & (np.abs(p.count_b) < 1e-6) & (a >= 2)
    ok &= (counts % np.maximum(a, 1) == 0) & (p.tree.count % np.maximum(a, 1) == 0)
    return np.where(ok, a, 1)


def _template_instances(
    p: Program, slot: np.ndarray, inst: np.ndarray, counts: np.ndarray, period: np.ndarray
) -> np.ndarray:
    """The template instance each (slot, instance) maps to (`relations.map_index` per repeat)."""
    levels = p.tree.levels()
    leaf = p.tree.slot_leaf()[slot]
    out = np.zeros(slot.size, np.int64)
    for v in np.unique(leaf).tolist():
        m = leaf == v
        lv = levels[v]
        if not lv:
            continue
        cs = [int(counts[x]) for x in lv]
        ct = [int(p.tree.count[x]) for x in lv]
        idx = relations.decode(inst[m], cs)
        for j, x in enumerate(lv):
            idx[:, j] = relations.map_index(idx[:, j], cs[j], ct[j], int(period[x]))
        out[m] = relations.encode(idx, ct)
    return out


def _order(n: int, key: np.ndarray, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A topological order of the ops, by key where the edges allow (edges are dependent ->
    dependency); edges on a cycle, if any, are dropped. Returns (order, kept edge mask)."""
    keep = np.ones(src.size, bool)
    if src.size == 0 or (key[dst] < key[src]).all():
        return np.argsort(key, kind="stable"), keep
    indeg = np.bincount(src, minlength=n).tolist()
    succ_order = np.argsort(dst, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    succ, ptrl, keyl = src[succ_order].tolist(), ptr.tolist(), key.tolist()
    heap = [(keyl[v], v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, v = heapq.heappop(heap)
        out.append(v)
        for c in succ[ptrl[v] : ptrl[v + 1]]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(heap, (keyl[c], c))
    if len(out) == n:
        return np.asarray(out, np.int64), keep
    keep = key[dst] < key[src]  # a cycle: keep only the edges the key order allows
    return np.argsort(key, kind="stable"), keep


def _csr(rows: np.ndarray, deps: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    o = np.lexsort((deps, rows))
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
    return ptr, deps[o].astype(np.uint64)


def expand_program(model: GeneratorModel, p: Program, counts: np.ndarray) -> _Structure:
    """A program's ops and dependencies with repeat counts `counts` (see the module docstring)."""
    tree = p.tree
    ninst = grammar.instances(tree, counts)
    offsets = np.zeros(ninst.size + 1, np.int64)
    np.cumsum(ninst, out=offsets[1:])
    n = int(offsets[-1])
    slot = np.repeat(np.arange(ninst.size), ninst)
    inst = np.arange(n) - offsets[slot]
    period = periods(p, counts)
    tmpl = p.inst_ptr[slot] + _template_instances(p, slot, inst, counts, period)
    key = np.zeros(n)
    seq_key = np.full(n, -1.0)
    lane_pos = np.zeros(n, np.int64)
    template_lanes = grammar.expand(tree)
    for (s, i, pos), (st, it, _) in zip(grammar.expand(tree, counts, period), template_lanes):
        g = offsets[s] + i
        t_ops = p.inst_ptr[st] + it
        x = np.arange(t_ops.size, dtype=np.float64)
        key[g] = np.interp(pos, x, p.key[t_ops].astype(np.float64)) if t_ops.size > 1 else p.key[t_ops[:1]]
        lane_pos[g] = np.arange(g.size)
        coll = p.seq[t_ops] >= 0
        mine = p.seq[tmpl[g]] >= 0
        if coll.any() and mine.any():
            xs = x[coll]
            seq_key[g[mine]] = np.interp(pos[mine], xs, p.seq[t_ops][coll].astype(np.float64))
    levels = tree.levels()
    slot_levels = [levels[leaf] for leaf in tree.slot_leaf().tolist()]
    src, dst, kind = relations.apply(p.rel, slot_levels, tree.count, counts, offsets, period)
    order, keep = _order(n, key + lane_pos * 1e-9, src, dst)
    dropped = int((~keep).sum())
    src, dst, kind = src[keep], dst[keep], kind[keep]
    row = np.empty(n, np.int64)
    row[order] = np.arange(n)
    token = p.slot_token[slot][order]
    tok_type = np.asarray([t[0] for t in model.tokens], np.int64)
    tok_role = np.asarray([t[4] for t in model.tokens], np.int64)
    comm_seq = np.full(n, -1, np.int64)
    coll = np.flatnonzero(tok_type[token] == NodeType.COMM_COLL_NODE)
    if coll.size:
        roles = tok_role[token[coll]]
        sk = seq_key[order][coll]
        by_role = np.lexsort((coll, sk, roles))  # per role, by key then row (a mask per role: roles x ops)
        seg = np.r_[0, np.flatnonzero(np.diff(roles[by_role])) + 1]
        comm_seq[coll[by_role]] = np.arange(by_role.size) - np.repeat(seg, np.diff(np.r_[seg, by_role.size]))
    return _Structure(
        slot=slot[order],
        inst=inst[order],
        tmpl=tmpl[order],
        token=token,
        lane=p.slot_lane[slot][order],
        comm_seq=comm_seq,
        data=_csr(row[src[kind == 0]], row[dst[kind == 0]], n),
        ctrl=_csr(row[src[kind == 1]], row[dst[kind == 1]], n),
        dropped=dropped,
    )


def _token_columns(model: GeneratorModel, token: np.ndarray) -> dict[str, np.ndarray]:
    t = np.asarray([x[0] for x in model.tokens], np.int64)[token]
    kind = np.asarray([x[1] for x in model.tokens], np.int64)[token]
    ctype = np.asarray([x[3] for x in model.tokens], np.int64)[token]
    role = np.asarray([x[4] for x in model.tokens], np.int64)[token]
    return {"type": t, "kind": kind, "ctype": ctype, "role": role}


def _scaled_durations(
    model: GeneratorModel,
    p: Program,
    s: _Structure,
    cols: dict,
    rng: np.random.Generator,
    batch_scale: float,
    jitter: float,
) -> np.ndarray:
    """Each op's duration: its slot's pooled values in a random order, one each while they last
    (drawn without replacement, so a slot's total stays what was observed: a rare long wait
    moves to another layer, it is not drawn three times), then again in another order; times
    a log-normal factor of its token's jitter (x `jitter`), the factors of one token on one rank
    normalized so that the token's total stays what was drawn."""
    size = np.diff(p.dur_ptr)
    owner = np.repeat(np.arange(size.size), size)
    perm = np.lexsort((rng.random(owner.size), owner))  # each slot's pool, shuffled, slots in order
    m = size[s.slot]
    pick = perm[p.dur_ptr[s.slot] + s.inst % np.maximum(m, 1)] if perm.size else np.zeros(s.slot.size, np.int64)
    dur = np.where(m > 0, p.dur[pick] if p.dur.size else 0, 0).astype(np.float64)
    sigma = model.token_jitter[s.token] * jitter
    if (sigma > 0).any():  # noise that keeps each token's total on the rank (a chain's length)
        noisy = dur * np.exp(sigma * rng.standard_normal(dur.size))
        before = np.bincount(s.token, dur, minlength=len(model.tokens))
        after = np.bincount(s.token, noisy, minlength=len(model.tokens))
        dur = noisy * np.where(after > 0, before / np.where(after > 0, after, 1.0), 1.0)[s.token]
    if batch_scale != 1.0:
        rows = _batch_rows(p, s, cols)
        with np.errstate(over="ignore"):  # (a scale of 1e300: clipped below)
            dur[rows] *= batch_scale ** model.token_elasticity[s.token[rows]]
        dur = np.where((dur > 0) & (dur < 1), 1.0, dur)
    return _ints(dur, np.uint64)


def _batch_rows(p: Program, s: _Structure, cols: dict) -> np.ndarray:
    return (cols["type"] == NodeType.COMP_NODE) & (p.phase[s.tmpl] != OPTIMIZER)


def _build(
    model: GeneratorModel,
    p: Program,
    s: _Structure,
    roles: list[str],
    durations: np.ndarray,
    batch_scale: float,
    extra_layers: float,
    metadata,
) -> Trace:
    cols = _token_columns(model, s.token)
    n = s.slot.size
    names_used, name_codes = np.unique(p.name[s.tmpl], return_inverse=True)
    types = cols["type"]
    comm = np.isin(types, (NodeType.COMM_COLL_NODE, *P2P))
    coll = types == NodeType.COMM_COLL_NODE
    send, recv = types == NodeType.COMM_SEND_NODE, types == NodeType.COMM_RECV_NODE
    num_ops = p.num_ops[s.tmpl].astype(np.float64)
    tensor = p.tensor_size[s.tmpl].astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # (huge scales or slopes: clipped by _ints)
        size = p.comm_size[s.tmpl] + p.comm_slope[s.tmpl] * extra_layers
        size = np.maximum(size, 0.0)
        if batch_scale != 1.0:
            m = _batch_rows(p, s, cols)
            num_ops[m] *= batch_scale
            tensor[m] *= batch_scale
            acts = send | recv | (coll & (cols["ctype"] == CollectiveType.ALL_TO_ALL))
            size[acts] *= batch_scale
    lane_attr = p.lane_attr[s.lane]
    tid = lane_attr == LANE_TID
    stream = lane_attr == LANE_STREAM
    role = cols["role"]
    named = coll & (role >= 0)
    attrs: dict[str, tuple] = {
        Attr.IS_CPU_OP: (cols["kind"] == CPU, np.ones(n, bool)),
        Attr.NUM_OPS: (_ints(num_ops, np.int64), (types == NodeType.COMP_NODE) & (num_ops > 0)),
        Attr.TENSOR_SIZE: (_ints(tensor, np.uint64), (types == NodeType.COMP_NODE) & (tensor > 0)),
        Attr.COMM_TYPE: (cols["ctype"], coll & (cols["ctype"] >= 0)),
        Attr.COMM_SIZE: (_ints(size, np.int64), comm),
        Attr.COMM_DST: (p.peer[s.tmpl], send),
        Attr.COMM_SRC: (p.peer[s.tmpl], recv),
        Attr.COMM_TAG: (p.tag[s.tmpl], send | recv),
        Attr.PG_NAME: ((np.where(named, role, 0), list(roles)), named),
        Attr.COMM_SEQ: (s.comm_seq, coll),
        Attr.TID: (s.lane + 1, tid),
        Attr.STREAM: (s.lane + 1, stream),
    }
    if not roles:
        del attrs[Attr.PG_NAME]
    return Trace.from_columns(
        [model.names[i] for i in names_used.tolist()],
        name_codes,
        types,
        duration=durations,
        data=s.data,
        ctrl=s.ctrl,
        attrs=attrs,
        metadata=metadata,
    )


@dataclass
class SampleInfo:
    """What a sample was made from: the job, layer counts, scales, seed, and dependencies dropped
    to break a cycle (0 unless the relations disagree at other counts)."""

    like: str
    layers: int
    template_layers: int
    batch_scale: float
    ranks: int
    seed: int
    dropped_deps: int
    generator: str = "hierarchical"
    shared: list[int] = field(default_factory=list)  # ranks running another rank's structure (`agree`)
    rank_program: list[int] = field(default_factory=list)  # the program each rank runs

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def sample(
    model: GeneratorModel,
    like: str | int | None = None,
    *,
    layers_scale: float = 1.0,
    layers: int | None = None,
    batch_scale: float = 1.0,
    ranks: int | None = None,
    seed: int = 0,
    jitter: float = 1.0,
    max_nodes: int | None = None,
) -> Workload:
    """A new job like training job `like` (name or index; see the module docstring), refused
    before anything is built when it would pass the limits (`budget`)."""
    return sample_detailed(
        model,
        like,
        layers_scale=layers_scale,
        layers=layers,
        batch_scale=batch_scale,
        ranks=ranks,
        seed=seed,
        jitter=jitter,
        max_nodes=max_nodes,
    )[0]


def sample_detailed(
    model: GeneratorModel,
    like: str | int | None = None,
    *,
    layers_scale: float = 1.0,
    layers: int | None = None,
    batch_scale: float = 1.0,
    ranks: int | None = None,
    seed: int = 0,
    jitter: float = 1.0,
    max_nodes: int | None = None,
) -> tuple[Workload, SampleInfo]:
    """`sample`, and what it was made from. The sample's size is checked before anything is
    built (`budget.plan_sample`: nodes per rank against `max_nodes`, else the node limit of
    every trace load; dependencies; the job's ranks)."""
    job = model.job(like)
    if not (math.isfinite(batch_scale) and batch_scale > 0):
        raise ChakraError(f"batch_scale must be a finite number > 0, got {batch_scale}")
    if not (math.isfinite(jitter) and 0 <= jitter <= MAX_JITTER):
        raise ChakraError(f"jitter must be a number in 0..{MAX_JITTER:g}, got {jitter}")
    target = layer_target(job, layers_scale, layers)
    plan = plan_sample(model, job, target, max_nodes)
    info = SampleInfo(job.name, target, job.layers, batch_scale, ranks or job.ranks, seed, 0)
    about = {"generator": "hierarchical", "like": job.name, "layers": target, "batch_scale": batch_scale, "seed": seed}
    meta = global_metadata({"generator": json.dumps(about, sort_keys=True)})
    built: dict[int, tuple[Program, _Structure, dict, Trace]] = {}
    for r in range(job.ranks):
        k = job.rank_program[r]
        if k not in built:  # one expansion and one set of columns per program: ranks differ in durations
            e = plan[k]
            p = e.template
            s = expand_program(model, p, e.counts)
            info.dropped_deps += s.dropped
            zero = np.zeros(s.slot.size, np.uint64)
            base = _build(model, p, s, job.rank_roles[r], zero, batch_scale, p.layers * (e.factor - 1), meta)
            built[k] = (p, s, _token_columns(model, s.token), base)
    shaped: dict[tuple[int, int], Trace] = {}

    def shape(k: int, r: int) -> Trace:
        if (k, r) not in shaped:
            base = built[k][3]
            shaped[k, r] = _rank_trace(base, base.duration, job.rank_roles[r])
        return shaped[k, r]

    use = shared_programs(job, shape)
    info.shared = [r for r in range(job.ranks) if use[r] != job.rank_program[r]]
    info.rank_program = list(use)
    traces: dict[int, Trace] = {}
    for r in range(job.ranks):
        p, s, cols, base = built[use[r]]
        rng = np.random.default_rng([seed, r])
        dur = _scaled_durations(model, p, s, cols, rng, batch_scale, jitter)
        traces[r] = _rank_trace(base, dur, job.rank_roles[r])
    w = Workload(traces, {g: list(m) for g, m in job.groups.items()})
    if ranks is not None and ranks != job.ranks:
        w = data_parallel(w, ranks)
    refuse_invalid(w, f"{model.source + ': ' if model.source else ''}a sample like {job.name!r} at {target} layers")
    return w, info


def _rank_trace(base: Trace, duration: np.ndarray, roles: list[str]) -> Trace:
    """A rank of a program: the program's columns (shared, not copied), its own durations and
    its own communicator names (a collective's pg_name code is its role on the rank)."""
    arrays = {k: getattr(base, k) for k in Trace.ARRAYS}
    arrays["duration"] = duration
    return Trace(
        len(base), metadata=base.metadata, names=list(base.names), groups=list(roles), placed=base.placed, **arrays
    )


# --------------------------------------------------------------------------- baselines


def _draw(rng: np.random.Generator, q: np.ndarray, n: int) -> np.ndarray:
    """n draws from the distribution with quantiles q (evenly spaced probabilities)."""
    if q.size == 0:
        return np.zeros(n)
    return np.interp(rng.random(n), np.linspace(0, 1, q.size), q)


def _like_pools(model: GeneratorModel, job: Job) -> tuple[np.ndarray, dict[int, np.ndarray], dict[int, np.ndarray]]:
    """The like job's ops per token, and per token its pooled durations and comm sizes."""
    counts = np.zeros(len(model.tokens))
    durs: dict[int, list[np.ndarray]] = {}
    sizes: dict[int, list[np.ndarray]] = {}
    for k in job.rank_program:
        p = model.programs[k]
        np.add.at(counts, p.slot_token, np.diff(p.inst_ptr))
        for slot in range(p.num_slots):
            t = int(p.slot_token[slot])
            durs.setdefault(t, []).append(p.dur[p.dur_ptr[slot] : p.dur_ptr[slot + 1]])
            sizes.setdefault(t, []).append(p.comm_size[p.inst_ptr[slot] : p.inst_ptr[slot + 1]])
    return (
        counts,
        {t: np.concatenate(v) for t, v in durs.items()},
        {t: np.concatenate(v) for t, v in sizes.items()},
    )


def sample_baseline(
    model: GeneratorModel,
    like: str | int | None = None,
    kind: str = "iid-global",
    *,
    layers_scale: float = 1.0,
    layers: int | None = None,
    ranks: int | None = None,
    seed: int = 0,
    max_nodes: int | None = None,
) -> Workload:
    """A trivial job with as many ops per rank as `sample` would make (module docstring),
    checked against the same limits first."""
    if kind not in BASELINES:
        raise ChakraError(f"baseline {kind!r}: expected one of {', '.join(BASELINES)}")
    job = model.job(like)
    target = layer_target(job, layers_scale, layers)
    n = baseline_nodes(model, job, target, max_nodes)
    types = np.asarray([t[0] for t in model.tokens], np.int64)
    ctypes = np.asarray([t[3] for t in model.tokens], np.int64)
    usable = ~np.isin(types, (*P2P, NodeType.METADATA_NODE))
    usable &= (types != NodeType.COMM_COLL_NODE) | (ctypes >= 0)  # (an untyped collective would not run)
    if kind == "iid-global":
        weights = model.token_ops * usable
    else:
        weights, dur_pool, size_pool = _like_pools(model, job)
        weights = weights * usable
    if weights.sum() <= 0 and n:
        raise ChakraError(f"job {job.name!r}: no ops to sample a baseline from")
    weights = weights / weights.max() if n else weights  # (a sum of huge counts stays finite)
    rng = np.random.default_rng([seed, 1 << 20])
    token = rng.choice(len(model.tokens), size=n, p=weights / weights.sum()) if n else np.zeros(0, np.int64)
    cols = _token_columns(model, token)
    coll = cols["type"] == NodeType.COMM_COLL_NODE
    size = np.zeros(n)
    if kind == "iid-global":
        size[coll] = _draw(rng, model.size_q, int(coll.sum()))
    else:
        for t in np.unique(token[coll]).tolist():
            m = token == t
            pool = size_pool[t]
            size[m] = pool[rng.integers(0, pool.size, int(m.sum()))]
    names = [model.tokens[t][2] for t in range(len(model.tokens))]
    data = (np.concatenate([[0], np.arange(n, dtype=np.int64)]), np.arange(max(n - 1, 0), dtype=np.uint64))  # a chain
    meta = global_metadata({"generator": json.dumps({"generator": kind, "like": job.name, "seed": seed})})
    traces: dict[int, Trace] = {}
    for r in range(job.ranks):
        rr = np.random.default_rng([seed, r, 1 << 21])
        if kind == "iid-global":
            dur = _draw(rr, model.dur_q, n)
        else:
            dur = np.zeros(n)
            for t in np.unique(token).tolist():
                m = token == t
                pool = dur_pool.get(t, np.zeros(1))
                dur[m] = pool[rr.integers(0, pool.size, int(m.sum()))]
        traces[r] = Trace.from_columns(
            names,
            token,
            cols["type"],
            duration=np.rint(dur).astype(np.uint64),
            data=data,
            attrs={
                Attr.IS_CPU_OP: (cols["kind"] == CPU, np.ones(n, bool)),
                Attr.COMM_TYPE: (cols["ctype"], coll),
                Attr.COMM_SIZE: (np.rint(size).astype(np.int64), coll),
                Attr.TID: (np.where(cols["kind"] == COMM, 2, 1), np.ones(n, bool)),
            },
            metadata=meta,
        )
    w = Workload(traces, {})
    if ranks is not None and ranks != job.ranks:
        w = data_parallel(w, ranks)
    refuse_invalid(
        w, f"{model.source + ': ' if model.source else ''}a {kind} sample like {job.name!r} at {target} layers"
    )
    return w
