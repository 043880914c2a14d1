"""Fitting a generator on a corpus of jobs.

Every rank becomes a program (`program.extract`); ranks with the same program, in one job or
across jobs (the steps of one recording, the replicas of an SPMD job), pool their durations. Per
program the fit keeps the grammar, the template's per-instance sizes and names, the pooled
duration distribution of every slot, and the dependency relations (`relations.fit`). Then:

- **Layers.** A program's layer count is the count of its repeat with the longest body (one
  forward or backward layer; the optimizer's per-parameter block is shorter). Each repeat gets a
  count rule ``round(a * layers + b)``: a multiple of the layer count keeps its multiple (TP
  collectives: 2 per layer), a count of at least twice the layers scales in proportion (the
  optimizer's per-parameter blocks), a count within 2 of a multiple keeps the difference (one
  all-gather per layer plus the embedding's) where the repeat is a layer's size or on another
  lane, anything else stays (nested repeats inside a layer, a repeat holding sends or receives,
  whose tags and peers do not scale). Programs of one *family* (the
  same grammar and tokens at different repeat counts: one model at 2 and 4 layers) replace
  those rules with the exact line through their counts, learned from the corpus.
- **Jitter.** Per token, how much one op's duration varies among its instances (`_jitter`):
  sampling adds that much noise to the values it draws, so a sample is a new draw, not the
  training values rearranged.
- **Elasticity.** Per token, the slope of log(duration) on log(work) (FLOPs, else bytes) over
  every training op with both, clipped to [0, 1]: how a batch change scales its duration.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ...errors import ChakraError, TraceFormatError
from ...io.documents import load_json
from ...io.workload import Workload
from ...schema.enums import Attr, NodeType
from ...schema.groups import declared_groups
from ...schema.trace import Trace
from . import grammar, relations, stats
from .model import FEATURE_QUANTILES, QUANTILES, GeneratorModel, Job, JobFeatures, Program
from .program import PHASES, RankProgram, Vocabulary, extract

GLOBAL_QUANTILES = 257
OPTIMIZER = PHASES.index("optimizer")


@dataclass
class _Acc:
    rep: RankProgram
    durations: list[np.ndarray]


def _jobs(jobs: Mapping[str, Workload | Trace] | Iterable[tuple[str, Workload | Trace]]) -> list[tuple[str, Workload]]:
    items = list(jobs.items()) if isinstance(jobs, Mapping) else list(jobs)
    out, seen = [], set()
    for name, w in items:
        if name in seen:
            raise ChakraError(f"fit: job name {name!r} given twice")
        seen.add(name)
        out.append((str(name), Workload.of(w)))
    if not out:
        raise ChakraError("fit: no jobs to fit on")
    return out


def _micro_batch_reps(tree: grammar.Tree, inst_ptr: np.ndarray, micro_batch: np.ndarray) -> np.ndarray:
    """Repeats whose instances are different micro-batches (the ops' `micro_batch` attribute, as
    `chakra parallelize` writes it, differs between their first and second instance): a pipeline
    schedule, not layers."""
    out = np.zeros(tree.kind.size, bool)
    if (micro_batch < 0).all():
        return out
    levels = tree.levels()
    counts = tree.count
    for v in np.flatnonzero(tree.kind == grammar.REP).tolist():
        first: set[int] = set()
        second: set[int] = set()
        for lf in np.flatnonzero(tree.kind == grammar.LIT).tolist():
            if v not in levels[lf]:
                continue
            j = levels[lf].index(v)
            cs = [int(counts[x]) for x in levels[lf]]
            for slot in range(int(tree.slot0[lf]), int(tree.slot0[lf] + tree.nslots[lf])):
                mb = micro_batch[inst_ptr[slot] : inst_ptr[slot + 1]]
                idx = relations.decode(np.arange(mb.size), cs)[:, j]
                first.update(mb[(idx == 0) & (mb >= 0)].tolist())
                second.update(mb[(idx == 1) & (mb >= 0)].tolist())
        out[v] = bool(first) and bool(second) and not (first & second)
    return out


def _optimizer_reps(tree: grammar.Tree, slot_phase: np.ndarray) -> np.ndarray:
    """Repeats all of whose ops are the optimizer's (where the trace says: a captured step's
    `phase`): per-parameter blocks, not layers."""
    out = np.zeros(tree.kind.size, bool)
    levels = tree.levels()
    leaf = tree.slot_leaf()
    for v in np.flatnonzero(tree.kind == grammar.REP).tolist():
        under = np.asarray([v in levels[lf] for lf in leaf.tolist()], bool)
        out[v] = bool(under.any()) and bool((slot_phase[under] == OPTIMIZER).all())
    return out


def layer_count(tree: grammar.Tree, exclude: np.ndarray | None = None) -> tuple[int, int]:
    """(layers, the repeat node that holds them), or (1, -1) when nothing repeats: the repeat with
    the longest body (at least 4 ops; ties: the most ops covered), or, where most of that body is
    itself one repeated block (layers inside a pipeline's micro-batch), that block. `exclude`:
    repeats that are not layers (micro-batches)."""
    body = tree.body_length()
    ok = (tree.kind == grammar.REP) & (tree.count >= 2) & (body >= 4)
    if exclude is not None:
        ok &= ~exclude
    reps = np.flatnonzero(ok)
    if reps.size == 0:
        return 1, -1
    best = max(reps.tolist(), key=lambda v: (int(body[v]), int(body[v] * tree.count[v])))
    levels = tree.levels()
    while True:
        inner = [v for v in reps.tolist() if best in levels[v] and body[v] * tree.count[v] * 2 >= body[best]]
        if not inner:
            break
        best = max(inner, key=lambda v: int(body[v] * tree.count[v]))
    return int(tree.count[best]), best


def program_layers(rp: RankProgram) -> tuple[int, int, np.ndarray]:
    """(layers, the repeat holding them, the micro-batch repeats) of a rank program."""
    tree = rp.tree
    micro = _micro_batch_reps(tree, rp.inst_ptr, rp.micro_batch)
    layers, main = layer_count(tree, micro | _optimizer_reps(tree, rp.phase[rp.inst_ptr[:-1]]))
    return layers, main, micro


def _default_rules(
    tree: grammar.Tree, layers: int, main: int, p2p_slot: np.ndarray, fixed: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per node (a, b) with count = round(a * layers + b) (module docstring). `fixed`: repeats that
    keep their count (micro-batches)."""
    a = np.zeros(tree.kind.size)
    b = tree.count.astype(np.float64)
    if layers < 2:
        return a, b
    levels = tree.levels()
    body = tree.body_length()
    # a repeat holding sends/receives keeps its count (their tags and peers do not scale)
    has_p2p = fixed.copy()
    for v in np.flatnonzero(tree.kind == grammar.LIT).tolist():
        if p2p_slot[tree.slot0[v] : tree.slot0[v] + tree.nslots[v]].any():
            has_p2p[v] = True
            for x in levels[v]:
                has_p2p[x] = True
    has_p2p[levels[main]] = True  # the repeats around the layers (a pipeline's micro-batches)
    lane_of = np.zeros(tree.kind.size, np.int64)
    for k, root in enumerate(tree.roots.tolist()):
        lane_of[root] = k
    for v in range(1, tree.kind.size):  # parents before children: node ids are in pre-order
        if tree.parent[v] >= 0:
            lane_of[v] = lane_of[tree.parent[v]]
    scaled = np.zeros(tree.kind.size, bool)
    for v in range(tree.kind.size):
        if tree.kind[v] != grammar.REP or has_p2p[v] or any(scaled[x] for x in levels[v]):
            continue
        c = int(tree.count[v])
        k = round(c / layers)
        near = v == main or lane_of[v] != lane_of[main] or body[v] * 4 >= body[main]
        if c >= 2 * layers:  # many per layer (the optimizer's per-parameter blocks): in proportion
            a[v], b[v] = c / layers, 0.0
        elif k >= 1 and abs(c - k * layers) <= 2 and near:
            a[v], b[v] = float(k), float(c - k * layers)  # k per layer, and a few more (the embedding's)
        else:
            continue
        scaled[v] = True
    return a, b


def _pool(values: np.ndarray) -> np.ndarray:
    if values.size <= QUANTILES:
        return np.sort(values)
    return np.rint(np.quantile(values, np.linspace(0, 1, QUANTILES))).astype(np.int64)


def _program(acc: _Acc, ranks: int) -> Program:
    rp = acc.rep
    tree = rp.tree
    n_slots = tree.num_slots
    slot_of_op = np.repeat(np.arange(n_slots), np.diff(rp.inst_ptr))
    stacked = np.stack(acc.durations) if acc.durations else rp.duration[None, :]
    dur_parts = [_pool(stacked[:, rp.inst_ptr[s] : rp.inst_ptr[s + 1]].ravel()) for s in range(n_slots)]
    dur_ptr = np.zeros(n_slots + 1, np.int64)
    np.cumsum([p.size for p in dur_parts], out=dur_ptr[1:])
    levels = tree.levels()
    slot_levels = [levels[leaf] for leaf in tree.slot_leaf().tolist()]
    inst_of_op = np.arange(rp.key.size) - rp.inst_ptr[slot_of_op]
    rel = relations.fit(
        slot_levels,
        tree.count,
        np.diff(rp.inst_ptr),
        slot_of_op[rp.edge_v],
        inst_of_op[rp.edge_v],
        slot_of_op[rp.edge_u],
        inst_of_op[rp.edge_u],
        rp.edge_kind,
    )
    layers, main, micro = program_layers(rp)
    p2p = np.zeros(n_slots, bool)
    p2p[slot_of_op[rp.peer >= 0]] = True
    a, b = _default_rules(tree, layers, main, p2p, micro)
    return Program(
        tree=tree,
        count_a=a,
        count_b=b,
        layers=layers,
        lane_kind=rp.lane_kind,
        lane_attr=rp.lane_attr,
        slot_token=rp.slot_token,
        slot_lane=rp.slot_lane,
        inst_ptr=rp.inst_ptr,
        key=rp.key,
        seq=rp.seq,
        name=rp.name,
        comm_size=rp.comm_size,
        comm_slope=np.zeros(rp.comm_size.size),
        num_ops=rp.num_ops,
        tensor_size=rp.tensor_size,
        peer=rp.peer,
        tag=rp.tag,
        phase=rp.phase,
        dur_ptr=dur_ptr,
        dur=np.concatenate(dur_parts) if dur_parts else np.zeros(0, np.int64),
        rel=rel,
        ranks_pooled=ranks,
    )


def _family_rules(programs: list[Program]) -> int:
    """Programs of one grammar at different layer counts: each repeat's count as the line through
    theirs (replacing the default rules). Returns the families fitted."""
    families: dict[bytes, list[Program]] = {}
    for p in programs:
        families.setdefault(p.family_key(), []).append(p)
    fitted = 0
    for members in families.values():
        ls = np.asarray([p.layers for p in members], np.float64)
        if np.unique(ls).size < 2:
            continue
        counts = np.stack([p.tree.count for p in members]).astype(np.float64)
        design = np.stack([ls, np.ones_like(ls)], axis=1)
        coef, *_ = np.linalg.lstsq(design, counts, rcond=None)
        for p in members:
            p.count_a, p.count_b = coef[0].copy(), coef[1].copy()
        # sizes of the slots whose instances do not change with the layers, op by op
        inst = np.stack([np.diff(p.inst_ptr) for p in members])
        fixed = (inst == inst[0]).all(axis=0)
        for p in members:
            p.comm_slope = np.zeros(p.comm_size.size)
        if fixed.any():
            rows = [np.flatnonzero(np.repeat(fixed, np.diff(p.inst_ptr))) for p in members]
            sizes = np.stack([p.comm_size[r] for p, r in zip(members, rows)]).astype(np.float64)
            slope = np.linalg.lstsq(design, sizes, rcond=None)[0][0]
            for p, r in zip(members, rows):
                p.comm_slope[r] = slope
        fitted += 1
    return fitted


def _elasticity(programs: list[Program], n_tokens: int) -> np.ndarray:
    """Per token, d log(duration) / d log(work) over the template ops with both (clipped to [0, 1];
    1 for tokens without enough spread, 0 for tokens without work)."""
    toks, work, dur = [], [], []
    for p in programs:
        slot = np.repeat(np.arange(p.num_slots), np.diff(p.inst_ptr))
        w = np.where(p.num_ops > 0, p.num_ops, p.tensor_size).astype(np.float64)
        d = p.dur[(p.dur_ptr[slot] + p.dur_ptr[slot + 1]) // 2].astype(np.float64)  # the slot's median
        m = (w > 0) & (d > 0)
        toks.append(p.slot_token[slot][m])
        work.append(np.log(w[m]))
        dur.append(np.log(d[m]))
    out = np.zeros(n_tokens)
    if not toks:
        return out
    t, x, y = np.concatenate(toks), np.concatenate(work), np.concatenate(dur)
    has_work = np.zeros(n_tokens, bool)
    has_work[t] = True
    out[has_work] = 1.0
    for k in np.unique(t).tolist():
        m = t == k
        if m.sum() < 3 or np.ptp(x[m]) < np.log(2):
            continue
        slope = np.polyfit(x[m], y[m], 1)[0]
        out[k] = float(np.clip(slope, 0.0, 1.0))
    return out


def _jitter(programs: list[Program], n_tokens: int) -> np.ndarray:
    """Per token, the median over its slots of the robust spread (1.4826 x the median absolute
    deviation) of log(duration) among the slot's pooled values (its instances over layers, ranks
    and steps; a rare long wait among them does not count); tokens never seen twice in a slot
    take the median over every slot. At most 0.5; 0 where durations do not vary (a roofline's)."""
    toks, sds = [], []
    for p in programs:
        for slot in np.flatnonzero(np.diff(p.dur_ptr) >= 2).tolist():
            x = np.log(np.maximum(p.dur[p.dur_ptr[slot] : p.dur_ptr[slot + 1]].astype(np.float64), 1.0))
            toks.append(int(p.slot_token[slot]))
            sds.append(1.4826 * float(np.median(np.abs(x - np.median(x)))))
    out = np.zeros(n_tokens)
    if not toks:
        return out
    t, sd = np.asarray(toks), np.asarray(sds)
    out[:] = float(np.median(sd))
    order = np.argsort(t, kind="stable")  # (a mask per token: tokens x slots)
    keys, first = np.unique(t[order], return_index=True)
    for k, part in zip(keys.tolist(), np.split(sd[order], first[1:])):
        out[k] = float(np.median(part))
    return np.clip(out, 0.0, 0.5)


def features(w: Workload) -> JobFeatures:
    """A job's features for novelty (`model.JobFeatures`)."""
    mix = stats.op_mix(w)
    total = float(sum(mix.values())) or 1.0
    return JobFeatures(
        op_mix={k: v / total for k, v in sorted(mix.items())},
        nodes=total / max(len(w), 1),
        dur_q=stats.quantiles(stats.log_durations(w), FEATURE_QUANTILES),
        size_q=stats.quantiles(stats.log_sizes(w), FEATURE_QUANTILES),
    )


def capture_batch(t: Trace) -> float | None:
    """The batch a captured master trace was captured at (its `capture` metadata), or None,
    also where the metadata does not read as JSON (nested too deep, an over-long integer) or
    gives no finite positive batch: the fit only conditions on it."""
    for a in t.metadata.attr:
        if a.name == "capture":
            try:
                v = load_json(a.string_val, "capture metadata")
            except ChakraError:
                return None
            v = v.get("batch") if isinstance(v, dict) else None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                return None
            return float(v)
    return None


_NODE_TYPES = np.asarray(sorted(int(x) for x in NodeType), np.int64)
MAX_DURATION_US = 1 << 53  # (what a float keeps exactly; 285 years)


def check_trace(t: Trace, source: str, ranks: int | None = None) -> None:
    """What a fit cannot learn from, refused with the file and node (`chakra validate` flags
    these too): a node type Chakra does not define; a negative FLOP count, size or collective
    type, or one past 2^63; a duration past 2^53 µs; a send or receive peer outside the job's
    `ranks`. The model file keeps these values and refuses them on reading."""
    bad = ~np.isin(t.types, _NODE_TYPES)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise TraceFormatError(
            source,
            f"node type {int(t.types[row])} is not a Chakra node type (0..{int(_NODE_TYPES.max())}); fit cannot learn it",
            node_id=int(t.ids[row]),
        )
    for attr in (Attr.NUM_OPS, Attr.TENSOR_SIZE, Attr.COMM_SIZE, Attr.COMM_TYPE):
        v = getattr(t, attr)
        v = v.view(np.int64) if v.dtype == np.uint64 else v  # (a uint64 >= 2^63 reads as negative)
        neg = t.has(attr) & ((v < 0) | (v >= 1 << 31) if attr == Attr.COMM_TYPE else v < 0)
        if neg.any():
            row = int(np.flatnonzero(neg)[0])
            raw = int(getattr(t, attr)[row])
            raise TraceFormatError(source, f"{attr} {raw} is out of range", node_id=int(t.ids[row]))
    long = t.duration > MAX_DURATION_US
    if long.any():
        row = int(np.flatnonzero(long)[0])
        raise TraceFormatError(
            source, f"a duration of {int(t.duration[row])} µs is out of range", node_id=int(t.ids[row])
        )
    for typ, attr in ((NodeType.COMM_SEND_NODE, Attr.COMM_DST), (NodeType.COMM_RECV_NODE, Attr.COMM_SRC)):
        rows = t.types == typ
        peer = getattr(t, attr).astype(np.int64)
        out = rows & ((peer < 0) | (peer >= (ranks if ranks is not None else 1 << 31)))
        if out.any():
            row = int(np.flatnonzero(out)[0])
            raise TraceFormatError(
                source,
                f"{attr} {int(peer[row])} is not a rank of the job (0..{(ranks or 1 << 31) - 1})",
                node_id=int(t.ids[row]),
            )


def fit(
    jobs: Mapping[str, Workload | Trace] | Iterable[tuple[str, Workload | Trace]], *, max_period: int = 8192
) -> GeneratorModel:
    """A generator fitted on `jobs` ({name: workload}, or (name, workload) pairs; a lone trace is a
    one-rank job). `max_period`: the longest repeated block looked for, in ops of one lane."""
    t0 = time.perf_counter()
    vocab = Vocabulary()
    accs: list[_Acc] = []
    index: dict[bytes, int] = {}
    pooled: list[int] = []
    job_parts = []
    for name, w in _jobs(jobs):
        ranks = w.ranks
        if ranks != list(range(len(ranks))):
            raise ChakraError(f"fit: job {name!r} has ranks {ranks[:8]}; expected 0..{len(ranks) - 1}")
        by_trace: dict[int, RankProgram] = {}
        rank_program, rank_roles = [], []
        for r in ranks:
            t = w.traces[r]
            rp = by_trace.get(id(t))
            if rp is None:
                try:
                    check_trace(t, str(w.paths.get(r, f"job {name!r} rank {r}")), len(ranks))
                    rp = by_trace[id(t)] = extract(t, vocab, max_period)
                except ChakraError as e:
                    raise ChakraError(f"fit: job {name!r} rank {r}: {e}") from None
            key = rp.identity()
            k = index.get(key)
            if k is None:
                k = index[key] = len(accs)
                accs.append(_Acc(rp, []))
                pooled.append(0)
            accs[k].durations.append(rp.duration)
            pooled[k] += 1
            rank_program.append(k)
            rank_roles.append(list(rp.roles))
        known = {g: list(m) for g, m in declared_groups(w.traces.values()).items()}
        known.update(w.all_groups())
        known.update({g: list(m) for g, m in w.groups.items()})
        used = {g for roles in rank_roles for g in roles}
        groups = {g: known.get(g) or w.group_ranks(g) for g in sorted(used)}
        job_parts.append((name, w, rank_program, rank_roles, groups))
    programs = [_program(acc, n) for acc, n in zip(accs, pooled)]
    families = _family_rules(programs)
    jobs_out = []
    for name, w, rank_program, rank_roles, groups in job_parts:
        jobs_out.append(
            Job(
                name=name,
                ranks=len(rank_program),
                rank_program=rank_program,
                rank_roles=rank_roles,
                groups=groups,
                layers=max(programs[k].layers for k in rank_program),
                features=features(w),
                batch=capture_batch(w.traces[w.ranks[0]]),
            )
        )
    token_ops = np.zeros(len(vocab.tokens))
    for p in programs:
        np.add.at(token_ops, p.slot_token, np.diff(p.inst_ptr) * p.ranks_pooled)
    all_dur = np.concatenate([d for acc in accs for d in acc.durations]) if accs else np.zeros(0)
    token_type = np.asarray([t[0] for t in vocab.tokens], np.int64)
    sizes = []
    for p in programs:
        slot = np.repeat(np.arange(p.num_slots), np.diff(p.inst_ptr))
        sizes.append(p.comm_size[np.isin(token_type[p.slot_token[slot]], stats.COMM_TYPES)])
    all_size = np.concatenate(sizes) if sizes else np.zeros(0)
    grid = np.linspace(0, 1, GLOBAL_QUANTILES)
    return GeneratorModel(
        tokens=vocab.tokens,
        names=vocab.names,
        programs=programs,
        jobs=jobs_out,
        token_ops=token_ops,
        token_elasticity=_elasticity(programs, len(vocab.tokens)),
        token_jitter=_jitter(programs, len(vocab.tokens)),
        dur_q=np.quantile(all_dur, grid) if all_dur.size else np.zeros(0),
        size_q=np.quantile(all_size, grid) if all_size.size else np.zeros(0),
        fit_info={
            "wall_s": round(time.perf_counter() - t0, 3),
            "max_period": max_period,
            "families": families,
            "node_types": {str(x): NodeType(x).name for x in sorted({t[0] for t in vocab.tokens})},
        },
    )
