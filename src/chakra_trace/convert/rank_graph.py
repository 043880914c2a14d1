"""The graph of one rank: which host ops become Chakra nodes, their times, costs and edges.

PyTorch execution trace (+ Kineto) -> one rank's Chakra trace.

Which ops become nodes: per thread, the outermost ops inside the recorded steps. Annotations
(ProfilerStep#N, Optimizer.step#..., record_function ranges) are descended into, and so is
any op whose subtree holds communication, so that a collective is never hidden inside a
compute node. An op that becomes a node folds its children: their FLOPs and bytes add up on
it, their time is already inside its duration. Time on the step's main thread that no op
covers (Python, the framework) becomes explicit `[host]` COMP nodes, so idle gaps stay
visible and the critical path of the result reproduces the measured step; the part of a gap the
thread spent blocked in a collective it queued is a dependency on it instead (`convert.waits`).

Dependencies are execution order, in `data_deps` (what every simulator resolves): nodes of a
thread in order; without recorded times, the threads in record order too (`convert.threads`:
the thread that asked for the backward pass waits for it); a collective after the node that
issued it; the issuing thread joins the collective at its first node that starts after the
collective ends; an op that waited for the GPU inside a synchronizing call after the GPU work
that had ended when the call returned, keeping only its time after that work ended
(`sync.after_the_wait`). Every edge goes from a node that ended to one that started later in the
measurement, so no dependency can make the converted trace slower than the run it came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TraceFormatError
from ..io.collective_names import (
    CommKind,
    classify,
    is_bookkeeping,
    is_comm_op_name,
)
from ..io.comm_kernels import match_kernel
from ..schema.builder import global_metadata
from ..schema.enums import Attr, NodeType
from ..schema.resources import HOST_GAP
from ..schema.trace import Trace
from ..schema.wire import intern_bytes
from . import sync
from .dtypes import node_dtypes
from .flops import needs_values, tensor_cost
from .gpu_work import GpuWork, _ThreadIndex, concurrent_order
from .host_rows import _SIG_CHUNK, _Cycle, _levels, _signatures, name_mask, ns_to_us, rows_on_device
from .kernel_comm import KernelComm, kernel_codes
from .report import ConversionReport
from .threads import record_order_edges
from .waits import Waits, collective_waits

# Ranges that only label time; record_param_comms only wraps the op that does the communication.
_ANNOTATION_PREFIXES = (
    "ProfilerStep#",
    "Optimizer.",
    "## ",
    "[pytorch|profiler",
    "enumerate(DataLoader)",
    "DistributedDataParallel.",
    "PyTorch Profiler",
    "record_param_comms",
)


@dataclass(eq=False)
class _Timeline:
    """The events of the converted trace in time order (host nodes and GPU work) and the `[host]`
    gaps between them; `n` nodes in all: events and gaps, the tail gap, the process-group node."""

    gpu: dict[str, np.ndarray] | None  # `GpuWork.events` (None: no GPU work)
    n_gpu: int
    is_gpu: np.ndarray  # per event
    host: np.ndarray  # ~is_gpu
    src: np.ndarray  # host row, or index into gpu
    s: np.ndarray  # start and end, ns
    e: np.ndarray
    key: np.ndarray  # the thread (host) or the stream (GPU) it runs on
    prev: np.ndarray  # the event before it on its key (-1: none)
    prev_end: np.ndarray  # when that one ended (the window start if none)
    th: np.ndarray  # thread of host events
    main: int  # the thread of the training loop
    main_ev: np.ndarray  # events on the main thread
    gap: np.ndarray  # a `[host]` node comes right before the event
    busy_from: np.ndarray  # where the gap before each event starts (after any wait: `convert.waits`)
    tail_from: int  # where the tail gap starts
    waits: tuple[np.ndarray, np.ndarray]  # (event that waited, -1: the tail; the collective's event)
    ids: np.ndarray  # node id of each event
    gap_ids: np.ndarray  # node id of each `[host]` gap before an event
    gaps: np.ndarray  # every `[host]` node (with the tail)
    n_ids: int  # nodes of events and gaps
    tail: bool  # a `[host]` node from the last main-thread event to the window end
    n: int  # nodes in all
    host_pos: np.ndarray  # host row -> event position (-1: not a node)
    side: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))  # (event, after event)


@dataclass(eq=False)
class _Nodes:
    """Per-node columns of the converted trace (length `_Timeline.n`)."""

    types: np.ndarray
    name_src: np.ndarray  # codes into names
    names: list[str]  # host op names, Kineto names, "[host]", "process_groups"
    host_name: int  # code of "[host]" ("process_groups" is next)
    is_host_node: np.ndarray
    has_tid: np.ndarray  # host ops and gaps
    cpu_op: np.ndarray  # value of is_cpu_op
    row_of: np.ndarray  # host row of each host node (-1)
    thread_of: np.ndarray


class GraphBuilder(KernelComm):
    def __init__(self, host, start, end, tid, user_annotation, steps, report: ConversionReport):
        self.h = host
        self.names = host.name_array
        self.start, self.end, self.tid = start, end, tid
        self.user_annotation = user_annotation
        self.steps = steps
        self.r = report
        self.timed = bool(steps)
        self.window = (0, 0)
        self.gpu: GpuWork | None = None
        self.estimated = np.zeros(len(host), bool)  # host ops timed by `convert.estimate`
        self.cover: tuple[int, int] | None = None  # where they lie: the window stretches over it
        self.late_work = np.zeros((0, 2), np.int64)  # (start, end) ns of backend ops only Kineto has
        self.detached: dict[int, tuple[int, int]] = {}  # c10d op standing for late work -> its thread, end
        self._lane = -(1 << 40)  # lanes of their own: below any thread id either trace uses

    # ------------------------------------------------------------------ structure
    def _rows_in_scope(self) -> np.ndarray:
        h = self.h
        synthetic = h.synthetic
        if not self.timed:
            return np.flatnonzero(~synthetic)
        lo = min(s for _, s, _ in self.steps)
        hi = max(e for _, _, e in self.steps)
        if self.cover is not None:
            lo, hi = min(lo, self.cover[0]), max(hi, self.cover[1])
        self.window = (lo, hi)
        self.r.steps_us = [(e - s) / 1000 for _, s, e in self.steps]
        self.r.span_us = (hi - lo) / 1000
        inside = (self.start >= lo) & (self.start <= hi) & (self.end >= 0)
        return np.flatnonzero(inside & ~synthetic)

    def _parents(self, rows: np.ndarray, interval_parents) -> np.ndarray:
        """Parent row of each row in scope: time nesting per thread (Kineto), else the ET call tree."""
        h = self.h
        if self.timed:
            p = interval_parents(self.start[rows], self.end[rows], self.tid[rows])
            return np.where(p >= 0, rows[np.maximum(p, 0)], -1)
        par = h.parent[rows]
        pos = np.where(par >= 0, h.rows(par), -1)
        in_scope = np.zeros(len(h), bool)
        in_scope[rows] = True
        return np.where((pos >= 0) & in_scope[np.maximum(pos, 0)], pos, -1)

    def run(self, interval_parents) -> Trace:
        h, names = self.h, self.names
        rows = self._rows_in_scope()
        comm_like = rows[name_mask(h.names, h.name[rows], is_comm_op_name)]
        kinds = {i: classify(names[i]) for i in comm_like.tolist()}
        comm = {i for i, k in kinds.items() if k.is_comm}
        if self.gpu is not None:  # with GPU kernels recorded, the kernel is the collective
            comm -= self._kernel_collective_ops(
                self.gpu.hosts_of_comm_kernels(self.window if self.timed else None), comm
            )
        self._take_late_work(comm)
        self._own_lanes(comm)
        parent = np.full(len(h), -1, np.int64)
        parent[rows] = self._parents(rows, interval_parents)
        if self.detached:  # still inside the ops that called it
            cs = np.fromiter(self.detached, np.int64, len(self.detached))
            up = self._enclosing(rows, cs)
            parent[cs[up >= 0]] = up[up >= 0]
        self.parent = parent
        sync, issuers = self._async_work(comm)
        comm -= sync | issuers
        unknown = [
            i
            for i, k in kinds.items()
            if not k.is_comm and not is_bookkeeping(names[i]) and names[i] != "record_param_comms"
        ]
        for i in unknown:
            self.r.warn(f"node id {int(h.ids[i])}: unknown collective {names[i]!r} converted as a COMP node")
        # an op is descended into when it is an annotation or holds communication in its subtree
        holds = np.zeros(len(h), bool)
        for i in comm | issuers:  # (an op that queued async work stays a node of its own)
            j = parent[i]
            while j >= 0 and not holds[j]:
                holds[j] = True
                j = parent[j]
        descend = name_mask(h.names, h.name, lambda s: s.startswith(_ANNOTATION_PREFIXES))
        descend |= self.user_annotation | holds
        descend[list(comm)] = False  # a backend op (gloo:all_reduce is a user annotation) is the node
        # each op folds into the outermost op above it (or itself) that is not descended into
        try:
            levels = _levels(parent, rows)
        except _Cycle as c:
            loop = [int(h.ids[r]) for r in c.rows]
            shown = " -> ".join(map(str, loop[:8])) + (" -> ..." if len(loop) > 8 else f" -> {loop[0]}")
            raise TraceFormatError(
                h.path,
                f"the parent links form a cycle ({shown}); each op's parent must lead to a root",
                node_id=loop[0],
            ) from None
        folded_into = np.full(len(h), -1, np.int64)
        is_comm = np.zeros(len(h), bool)
        is_comm[list(comm)] = True  # never folded away, even into another collective
        for lv in levels:
            p = parent[lv]
            up = np.where(p >= 0, folded_into[np.maximum(p, 0)], -1)
            folded_into[lv] = np.where(is_comm[lv], lv, np.where(up >= 0, up, np.where(descend[lv], -1, lv)))
        node_rows = rows[folded_into[rows] == rows]
        columns = self._emit(node_rows, folded_into, comm, kinds, levels)
        del parent, folded_into, levels, self.parent  # (the per-op working set goes before encoding)
        meta = global_metadata({"schema": "chakra-trace pytorch converter 1", "source_schema": h.schema or ""})
        return Trace.from_columns(**columns, metadata=meta)

    def _enclosing(self, rows: np.ndarray, cs: np.ndarray) -> np.ndarray:
        """For each op c of `cs` that stands for late work (`detached`: it left thread th, its
        work ends at e), the row of `rows` on th that started last at or before c and ends at or
        after e (of those starting together the shortest, then the last row); -1 where none.
        One sort of the rows of those threads and a tree of their ends (a mask over every row
        per op was detached ops x rows)."""
        th = np.array([self.detached[int(c)][0] for c in cs], np.int64)
        e = np.array([self.detached[int(c)][1] for c in cs], np.int64)
        rows = rows[np.isin(self.tid[rows], th)]
        if not rows.size:
            return np.full(cs.size, -1, np.int64)
        tid, start, end = self.tid[rows], self.start[rows], self.end[rows]
        o = np.lexsort((rows, -end, start, tid))  # per thread by start; the one chosen comes last
        tid, start, end, rows = tid[o], start[o], end[o], rows[o]
        lo = np.searchsorted(tid, th, "left")
        hi = np.searchsorted(tid, th, "right")
        upto = np.array(
            [a + int(np.searchsorted(start[a:b], self.start[c], "right")) for a, b, c in zip(lo, hi, cs.tolist())],
            np.int64,
        )
        at = sync._last_at_least(end, lo, upto, e)
        return np.where(at >= 0, rows[np.maximum(at, 0)], -1)

    # ------------------------------------------------------------------ attributes
    def _cost(self, i: int) -> tuple[int | None, int]:
        """FLOPs and bytes of host op i from its flattened tensors (no JSON decoding)."""
        name = self.names[i]
        t = self.h.tensors
        a, b = int(t.indptr[i]), int(t.indptr[i + 1])
        ins, outs, singles, seen = [], [], [], set()
        dims, sp = t.shape_dims, t.shape_indptr
        for k in range(a, b):
            if t.itemsize[k] <= 0 or "nullptr" in t.types[t.type[k]]:
                continue  # an undefined tensor (e.g. no bias) is no operand
            shape = dims[sp[k] : sp[k + 1]].tolist() if t.has_shape[k] else [int(t.numel[k])]
            entry = (shape, int(t.itemsize[k]))
            if t.output[k]:
                outs.append(entry)
            else:
                ins.append(entry)
                arg = int(t.arg[k])
                if t.elem[k] == 0 and arg not in seen:
                    seen.add(arg)
                    singles.append(shape)
        values = self.h.io(i)[0]["values"] if needs_values(name) else None
        c = tensor_cost(name, ins, outs, singles, values)
        return c.flops, c.bytes

    def _cost_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """FLOPs (-1: unknown) and bytes of many rows. Training repeats a few op signatures many
        times, so the cost model runs once per distinct signature (exact bytes, not a hash)."""
        h = self.h
        flops = np.empty(rows.size, np.int64)
        nbytes = np.empty(rows.size, np.int64)
        by_values = name_mask(h.names, h.name[rows], needs_values)
        cache: dict[bytes, tuple[int, int]] = {}
        for a in range(0, rows.size, _SIG_CHUNK):
            part = rows[a : a + _SIG_CHUNK]
            buf, starts, lens = _signatures(h.name, h.tensors, part)
            codes, first = intern_bytes(buf, starts, lens)
            f_u = np.empty(first.size, np.int64)
            b_u = np.empty(first.size, np.int64)
            for u, k in enumerate(first.tolist()):
                key = buf[starts[k] : starts[k] + lens[k]].tobytes()
                if key not in cache:
                    f, b = self._cost(int(part[k]))
                    cache[key] = (-1 if f is None else int(f), int(b))
                f_u[u], b_u[u] = cache[key]
            flops[a : a + part.size] = f_u[codes]
            nbytes[a : a + part.size] = b_u[codes]
        for k in np.flatnonzero(by_values).tolist():  # the cost depends on argument values too
            f, b = self._cost(int(rows[k]))
            flops[k], nbytes[k] = (-1 if f is None else int(f)), int(b)
        return flops, nbytes

    def _costs(self, folded_into: np.ndarray, comm_mask: np.ndarray, levels) -> tuple:
        """num_ops, whether known, and tensor_size of every node row.

        FLOPs: the outermost op of each folded subtree that the cost model knows counts, and
        its descendants do not (aten::linear counts, its addmm child does not; an autograd
        wrapper the model does not know passes through to its mm children).
        tensor_size: what the node's own op reads and writes."""
        n = len(self.h)
        tgt = folded_into
        rows = np.flatnonzero(tgt >= 0)
        rows = rows[~comm_mask[tgt[rows]]]
        f_rows, b_rows = self._cost_rows(rows)
        f = np.full(n, -1, np.int64)
        f[rows] = f_rows
        use = np.zeros(n, bool)
        use[rows] = True
        covered = np.zeros(n, bool)  # an op at or above it inside its node has FLOPs
        skipped = np.zeros(n, bool)  # an op above it inside its node has FLOPs
        for lv in levels:
            lv = lv[use[lv]]
            p = self.parent[lv]
            skipped[lv] = (lv != tgt[lv]) & (p >= 0) & covered[np.maximum(p, 0)]
            covered[lv] = skipped[lv] | (f[lv] > 0)
        counted = rows[~skipped[rows]]
        flops = np.zeros(n, np.int64)
        pos = counted[f[counted] > 0]
        np.add.at(flops, tgt[pos], f[pos])
        known = np.zeros(n, bool)
        known[tgt[counted[f[counted] >= 0]]] = True
        nbytes = np.zeros(n, np.int64)
        own = rows == tgt[rows]
        nbytes[rows[own]] = b_rows[own]
        return flops, known, nbytes

    def _main_thread(self, node_rows) -> int:
        """The thread that runs the training loop: the one of the ProfilerStep annotations."""
        h = self.h
        steps = np.flatnonzero(name_mask(h.names, h.name, lambda s: s.startswith("ProfilerStep#")) & (self.end >= 0))
        if steps.size:
            return int(self.tid[steps[0]])
        if len(node_rows):
            vals, counts = np.unique(self.tid[node_rows], return_counts=True)
            return int(vals[np.argmax(counts)])
        return -1

    # ------------------------------------------------------------------ output
    def _emit(self, node_rows, folded_into, comm, kinds, levels) -> dict:
        """Nodes in time order (host ops, GPU work, `[host]` gaps), dependencies, attributes:
        the arguments of `Trace.from_columns`."""
        comm_mask = np.zeros(len(self.h), bool)
        comm_mask[list(comm)] = True
        flops, known, nbytes = self._costs(folded_into, comm_mask, levels)
        dtypes = node_dtypes(self.h.tensors, folded_into, self.h.ids)  # (of the ops folded in, too)
        tl = self._timeline(node_rows, folded_into)
        nodes = self._node_columns(tl)
        start, dur = self._node_times(tl)
        dep_src, dep_dst = self._order_edges(tl, folded_into)
        comm_attr, extra_src, extra_dst = self._comm_nodes(tl, nodes, comm, comm_mask, kinds)
        dep_src.append(np.asarray(extra_src, np.int64))
        dep_dst.append(np.asarray(extra_dst, np.int64))
        if not self.timed:  # no times: threads in the order they were recorded (`convert.threads`)
            hk = np.flatnonzero(tl.host)
            rows = tl.src[hk]
            after, before = record_order_edges(self.h.ids[rows], tl.th[hk], comm_mask[rows])
            dep_src.append(tl.ids[hk[after]])
            dep_dst.append(tl.ids[hk[before]])
        if tl.n_gpu:
            self._sync_edges(tl, dep_src, dep_dst)
        data = self._dependency_csr(tl.n, dep_src, dep_dst)
        if self.timed and tl.n_gpu:  # an op that waited for the GPU: its time after the wait
            device = np.zeros(tl.n, bool)
            device[tl.ids[tl.is_gpu]] = True
            before = dur
            start, dur = sync.after_the_wait(start, dur, data[0], data[1], device)
            cut = before - dur  # (counted as waiting, not lost)
            self.r.waits.gpu_syncs, self.r.waits.gpu_us = int((cut > 0).sum()), float(cut.sum())
        attrs = self._attributes(tl, nodes, comm_attr, flops, known, nbytes, dtypes)
        self._process_group_node(nodes, attrs)
        names, name_codes = self._name_table(nodes.names, nodes.name_src)
        return dict(
            names=names,
            name_codes=name_codes,
            types=nodes.types,
            start=start,
            duration=dur,
            data=data,
            attrs=attrs,
        )

    def _timeline(self, node_rows, folded_into) -> _Timeline:
        """Host nodes and GPU work in time order, each with the event before it on its thread or
        stream, and where the `[host]` gaps of the main thread go."""
        h = self.h
        timed = self.timed
        lo, hi = self.window
        gpu = self.gpu.events(folded_into, self.window) if self.gpu is not None and timed else None
        if self.gpu is not None:  # what the trace keeps of the file's GPU time, and why not the rest
            self.r.gpu_time = self.gpu.account(self.window if timed else None)
        n_gpu = 0 if gpu is None else gpu["krow"].size
        # "key" is the thread (host) or the stream (GPU) they run on
        is_gpu = np.r_[np.zeros(node_rows.size, bool), np.ones(n_gpu, bool)]
        src = np.r_[node_rows, np.arange(n_gpu)]  # host row, or index into gpu
        s = np.r_[self.start[node_rows], gpu["start"] if n_gpu and gpu is not None else []].astype(np.int64)
        e = np.r_[self.end[node_rows], gpu["end"] if n_gpu and gpu is not None else []].astype(np.int64)
        thread = self.tid[node_rows]
        _, key_h = np.unique(thread, return_inverse=True)
        key = np.r_[key_h.reshape(-1), gpu["stream_key"] + node_rows.size if n_gpu and gpu is not None else []].astype(
            np.int64
        )
        order = np.lexsort((np.where(is_gpu, -1, src), s))
        is_gpu, src, s, e, key = is_gpu[order], src[order], s[order], e[order], key[order]
        E = order.size
        by_key = np.argsort(key, kind="stable")
        same = key[by_key[1:]] == key[by_key[:-1]]
        prev = np.full(E, -1, np.int64)
        prev[by_key[1:][same]] = by_key[:-1][same]
        prev, side_k, side_p = concurrent_order(key, s, e, prev, is_gpu)  # (work of a stream side by side)
        host = ~is_gpu
        th = np.zeros(E, np.int64)
        th[host] = self.tid[src[host]]
        main = self._main_thread(node_rows)
        prev_end = np.where(prev >= 0, e[np.maximum(prev, 0)], lo)
        main_ev = np.flatnonzero(host & (th == main))
        host_pos = np.full(len(h), -1, np.int64)  # host row -> event position
        host_pos[src[host]] = np.flatnonzero(host)
        w = self._waits(s, e, prev, prev_end, main_ev, main, host_pos) if timed else None
        busy_from = w.busy_from if w is not None else prev_end  # a gap starts where the thread stopped waiting
        gap = host & (th == main) & (s > busy_from) if timed else np.zeros(E, bool)
        nid = np.cumsum(1 + gap.astype(np.int64)) - 1  # a gap node takes the id before its event
        n_ids = int(nid[-1]) + 1 if E else 0
        tail_from = w.tail_from if w is not None else hi
        tail = timed and main_ev.size > 0 and tail_from < hi
        N = n_ids + int(tail) + int(bool(h.process_groups))
        gap_ids = nid[gap] - 1
        gaps = np.r_[gap_ids, [n_ids] if tail else []].astype(np.int64)  # every `[host]` node
        return _Timeline(
            gpu=gpu,
            n_gpu=n_gpu,
            is_gpu=is_gpu,
            host=host,
            src=src,
            s=s,
            e=e,
            key=key,
            prev=prev,
            prev_end=prev_end,
            th=th,
            main=main,
            main_ev=main_ev,
            gap=gap,
            busy_from=busy_from,
            tail_from=tail_from,
            waits=(w.waiter, w.on) if w is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64)),
            ids=nid,
            gap_ids=gap_ids,
            gaps=gaps,
            n_ids=n_ids,
            tail=tail,
            n=N,
            host_pos=host_pos,
            side=(side_k, side_p),
        )

    def _waits(self, s, e, prev, prev_end, main_ev, main: int, host_pos) -> Waits:
        """Where the main thread blocked in a collective it queued (`convert.waits`), counted in the report."""
        coll = [(c, i, int(self.end[i])) for i, c in self.issued_by.items() if self.tid[c] == main]
        coll += [(c, c, t) for c, (th, t) in self.detached.items() if th == main]  # (its own lane now)
        # (collectives only: a send/recv's recorded time includes its wait for the peer already)
        coll = [x for x in coll if host_pos[x[1]] >= 0 and classify(self.names[x[1]]).collective is not None]
        issue = np.array([self.start[c] for c, _, _ in coll], np.int64)
        done = np.array([t for _, _, t in coll], np.int64)
        pos = np.array([host_pos[i] for _, i, _ in coll], np.int64)
        w = collective_waits(s, e, prev, prev_end, main_ev, self.window[1], issue, done, pos)
        self.r.waits.collectives, self.r.waits.collective_us = w.count, w.waited_ns / 1000
        return w

    def _node_columns(self, tl: _Timeline) -> _Nodes:
        """Each node's type (COMP until `_comm_nodes`), name, host row and thread, and flags."""
        h = self.h
        N = tl.n
        host, src, is_gpu, ev_ids, gaps = tl.host, tl.src, tl.is_gpu, tl.ids, tl.gaps
        types = np.full(N, NodeType.COMP_NODE, np.int32)
        name_src = np.zeros(N, np.int64)  # codes into names_all below
        kin = self.gpu.kin if self.gpu is not None else None
        k_off = len(h.names)
        names_all = list(h.names) + (list(kin.names) if kin is not None else []) + [HOST_GAP, "process_groups"]
        host_name = len(names_all) - 2
        name_src[ev_ids[host]] = h.name[src[host]]
        if tl.n_gpu:
            assert kin is not None and tl.gpu is not None  # GPU work: self.gpu is set
            name_src[ev_ids[is_gpu]] = k_off + kin.name[tl.gpu["krow"][src[is_gpu]]]
        name_src[gaps] = host_name
        is_host_node = np.zeros(N, bool)
        is_host_node[ev_ids[host]] = True
        has_tid = is_host_node.copy()  # host ops and gaps: a thread, and is_cpu_op true (but comm nodes)
        has_tid[gaps] = True
        cpu_op = has_tid.copy()  # value of is_cpu_op
        row_of = np.full(N, -1, np.int64)  # host row of each host node
        row_of[ev_ids[host]] = src[host]
        self.device_nodes = np.zeros(N, bool)
        if not self.timed:  # no Kineto: an op on device tensors ran on the device, for a time unknown here
            on_dev = rows_on_device(h)
            self.device_nodes[ev_ids[host]] = on_dev[src[host]]
            cpu_op[self.device_nodes] = False
        thread_of = np.zeros(N, np.int64)
        thread_of[ev_ids[host]] = tl.th[host]
        thread_of[gaps] = tl.main
        return _Nodes(
            types=types,
            name_src=name_src,
            names=names_all,
            host_name=host_name,
            is_host_node=is_host_node,
            has_tid=has_tid,
            cpu_op=cpu_op,
            row_of=row_of,
            thread_of=thread_of,
        )

    def _node_times(self, tl: _Timeline) -> tuple[np.ndarray, np.ndarray]:
        """Start and duration of each node in µs from the start of the window (0 when untimed)."""
        lo, hi = self.window
        ev_ids, gap, gap_ids, s, e = tl.ids, tl.gap, tl.gap_ids, tl.s, tl.e
        start = np.zeros(tl.n, np.int64)
        dur = np.zeros(tl.n, np.int64)
        if self.timed:
            start[ev_ids] = ns_to_us(s) - ns_to_us(lo)  # (not ns_to_us(s - lo): a node ends where the next starts)
            dur[ev_ids] = ns_to_us(e) - ns_to_us(s)
            start[gap_ids] = ns_to_us(tl.busy_from[gap]) - ns_to_us(lo)
            dur[gap_ids] = ns_to_us(s[gap]) - ns_to_us(tl.busy_from[gap])
            if tl.tail:
                t0 = tl.tail_from
                start[tl.n_ids], dur[tl.n_ids] = ns_to_us(t0) - ns_to_us(lo), ns_to_us(hi) - ns_to_us(t0)
        return start, dur

    def _order_edges(self, tl: _Timeline, folded_into) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Execution-order dependencies (sources, destinations): thread / stream order, through
        the `[host]` gaps, GPU work after the op that launched it, the tail gap last."""
        ev_ids, gap, prev = tl.ids, tl.gap, tl.prev.copy()
        nxt = np.full(prev.size, -1, np.int64)  # the event after each on its thread or stream
        nxt[tl.prev[tl.prev >= 0]] = np.flatnonzero(tl.prev >= 0)
        resume_src, resume_dst = [], []
        skips = []  # where the thread's order skips an op (`_sync_edges` reads it)
        for i, c in self.issued_by.items():
            k, p = tl.host_pos[i], tl.host_pos[c]
            if k >= 0 and p >= 0 and prev[k] == p:  # work recorded on its issuer's thread, started inside it
                prev[k] = tl.prev[p]  # runs beside the issuer (`_comm_nodes` orders it after it)
                skips.append(int(k))
                if nxt[k] >= 0:  # the thread goes on after both
                    resume_src.append(int(ev_ids[nxt[k]]))
                    resume_dst.append(int(ev_ids[p]))
        self._order_skips = np.array(sorted(skips), np.int64)
        dep_src = [
            ev_ids[gap & (prev >= 0)] - 1,
            ev_ids[gap],
            ev_ids[~gap & (prev >= 0)],
            np.array(resume_src, np.int64),
            ev_ids[tl.side[0]],
        ]
        dep_dst = [
            ev_ids[prev[gap & (prev >= 0)]],
            tl.gap_ids,
            ev_ids[prev[~gap & (prev >= 0)]],
            np.array(resume_dst, np.int64),
            ev_ids[tl.side[1]],
        ]
        if tl.n_gpu:
            assert tl.gpu is not None  # GPU work: self.gpu is set
            gk = np.flatnonzero(tl.is_gpu)
            node_row = tl.gpu["node_row"][tl.src[gk]]
            launcher = (  # (no host op at all: a GPU-only trace)
                np.where(node_row >= 0, tl.host_pos[np.maximum(node_row, 0)], -1) if tl.host_pos.size else node_row
            )
            ok = (launcher >= 0) & (launcher < gk)
            # after the launcher when it had returned; else after what ran before it on its thread
            # (the kernel started inside it: an edge must not make the trace slower than the run)
            # (the `[host]` gap just before it, when the thread was idle before it)
            lp = np.maximum(launcher, 0)
            before = ok & (tl.e[lp] > tl.s[gk])
            prev = tl.prev[lp]
            earlier = np.where(tl.gap[lp], ev_ids[lp] - 1, np.where(prev >= 0, ev_ids[np.maximum(prev, 0)], -1))
            dep = np.where(before, earlier, ev_ids[lp])
            ok &= dep >= 0
            dep_src.append(ev_ids[gk[ok]])
            dep_dst.append(dep[ok])
            orphan = gk[launcher < 0]  # launched by no converted op (a graph replay, an annotation)
            src_o, dst_o = self._after_launch(tl, orphan)
            dep_src.append(src_o)
            dep_dst.append(dst_o)
        if tl.tail:
            dep_src.append(np.array([tl.n_ids]))
            dep_dst.append(ev_ids[tl.main_ev[-1:]])
        waiter, on = tl.waits  # after a wait, the gap (or the op) depends on the collective
        k, keep = np.maximum(waiter, 0), (waiter >= 0) | tl.tail
        node = np.where(waiter < 0, tl.n_ids, np.where(gap[k], ev_ids[k] - 1, ev_ids[k]))
        dep_src.append(node[keep])
        dep_dst.append(ev_ids[on][keep])
        return dep_src, dep_dst

    @staticmethod
    def _after_launch(tl: _Timeline, gk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Edges (sources, destinations) from GPU work that no converted op launched (events at
        positions gk) to the last node of the launching thread that had ended when the launch
        call started (none where the launch was not recorded). It ended before the work began,
        so the edge cannot make the trace slower than the run; the stream's order does the rest."""
        assert tl.gpu is not None  # GPU work: self.gpu is set
        idx = tl.src[gk]
        thread, launch = tl.gpu["thread"][idx], tl.gpu["launch"][idx]
        src: list[np.ndarray] = []
        dst: list[np.ndarray] = []
        host = np.flatnonzero(tl.host)
        for t in np.unique(thread[thread >= 0]).tolist():
            on = host[tl.th[host] == t]  # the thread's nodes, by start
            if not on.size:
                continue
            reach = np.maximum.accumulate(tl.e[on])  # everything up to a node had ended by its reach
            mine = np.flatnonzero(thread == t)
            j = np.searchsorted(reach, launch[mine], "right") - 1
            ok = j >= 0
            src.append(tl.ids[gk[mine[ok]]])
            dst.append(tl.ids[on[j[ok]]])
        if not src:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(src), np.concatenate(dst)

    def _comm_nodes(
        self, tl: _Timeline, nodes: _Nodes, comm: set[int], comm_mask: np.ndarray, kinds: dict
    ) -> tuple[dict[str, dict[int, Any]], list[int], list[int]]:
        """The communication nodes (few): their type and attributes (set in `nodes.types` /
        `nodes.cpu_op`; the rest returned by attribute name and node), and the edges (sources,
        destinations) that order them after their issuer and before the issuing thread goes on."""
        host, is_gpu, src, th, s, e, ev_ids = tl.host, tl.is_gpu, tl.src, tl.th, tl.s, tl.e, tl.ids
        gpu, host_pos = tl.gpu, tl.host_pos
        types, cpu_op = nodes.types, nodes.cpu_op
        kin = self.gpu.kin if self.gpu is not None else None
        extra_src: list[int] = []
        extra_dst: list[int] = []
        comm_attr: dict[str, dict[int, Any]] = {}
        threads = _ThreadIndex(host, th, s, e, ev_ids) if comm else None
        gpu_kinds = {}
        specials = np.flatnonzero(host & comm_mask[np.where(host, src, 0)]).tolist() if comm_mask.size else []
        if tl.n_gpu:
            assert kin is not None and gpu is not None  # GPU work: self.gpu is set
            codes = kin.name[gpu["krow"][src[is_gpu]]]
            gpu_kinds = kernel_codes(kin.names, codes, match_kernel)  # communication kernels (`io.comm_kernels`)
            coll_code = np.fromiter(gpu_kinds, np.int64, len(gpu_kinds))
            specials += np.flatnonzero(is_gpu)[np.isin(codes, coll_code)].tolist()
        issued: dict[int, int] = {}  # comm node -> when its issuer started (the issue order)
        kind: CommKind | None
        for k in sorted(specials):
            nk = int(ev_ids[k])
            if is_gpu[k]:
                assert kin is not None and gpu is not None  # GPU work: self.gpu is set
                i = int(gpu["hrow"][src[k]])
                attrs, issuer = self._kernel_comm_attrs(i, gpu_kinds[int(kin.name[gpu["krow"][src[k]]])], comm)
                issued[nk] = int(self.start[issuer]) if issuer >= 0 else int(s[k])
            else:
                i = int(src[k])
                kind = kinds.get(i)
                if kind is None or not (kind.collective is not None or kind.p2p):
                    continue
                assert threads is not None  # a host special is in comm
                issuer = self._issuer(i, comm)
                home = self.detached.get(i)  # (it left its thread: `_take_late_work`)
                if home is not None:
                    dep = threads.last_before(home[0], k, int(s[k]))
                    if dep is not None:
                        extra_src.append(nk)
                        extra_dst.append(dep)
                elif issuer >= 0 and issuer != i:
                    p = host_pos[issuer]
                    dep = (  # the issuer, or what ran before it when the work started inside it
                        ev_ids[p]
                        if 0 <= p < k and self.end[issuer] <= s[k]
                        else threads.last_before(int(self.tid[issuer]), k, int(min(self.start[issuer], s[k])))
                    )
                    if dep is not None:
                        extra_src.append(nk)
                        extra_dst.append(int(dep))
                attrs = self._comm_attrs(i, issuer, kind)
                if self._kernel_not_recorded(i, issuer):  # its time is the host call's, not the transfer's
                    attrs["duration_unknown"] = True
                issued[nk] = int(self.start[issuer] if issuer >= 0 else s[k])
                issuing_thread = home[0] if home else int(self.tid[issuer]) if issuer >= 0 else int(th[k])
                if issuing_thread != th[k] and self.timed:  # the issuing thread joins it when it is done
                    target = threads.joiner(issuing_thread, k, int(e[k]))
                    if target is not None:
                        extra_src.append(int(target))
                        extra_dst.append(nk)
                cpu_op[nk] = False
            types[nk] = attrs.pop("type")
            for name, v in attrs.items():
                if v is not None:
                    comm_attr.setdefault(name, {})[nk] = v
        order = sorted(issued, key=lambda nk: (issued[nk], nk))
        if order != sorted(issued):  # worker threads started collectives out of issue order
            comm_attr[Attr.COMM_SEQ] = {nk: k for k, nk in enumerate(order)}
        return comm_attr, extra_src, extra_dst

    @staticmethod
    def _dependency_csr(n: int, dep_src: list[np.ndarray], dep_dst: list[np.ndarray]) -> tuple:
        """The dependencies as `data_deps` CSR over n nodes (indptr, destinations), sorted, without duplicates."""
        pairs = np.unique(np.concatenate(dep_src).astype(np.int64) * n + np.concatenate(dep_dst).astype(np.int64))
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(pairs // max(n, 1), minlength=n), out=indptr[1:])
        return indptr, (pairs % n).astype(np.uint64)

    def _attributes(
        self, tl: _Timeline, nodes: _Nodes, comm_attr: dict[str, dict[int, Any]], flops, known, nbytes, dtypes
    ) -> dict[str, tuple]:
        """Node attributes as (values, present) columns: is_cpu_op, FLOPs and bytes, communication,
        op_schema, rf_id, tid, the GPU stream and device, all_to_allv split sizes; ``dtypes``:
        (codes per host row, names) of `dtypes.node_dtypes`."""
        h = self.h
        N = tl.n
        ev_ids, is_gpu = tl.ids, tl.is_gpu
        row_of, is_host_node = nodes.row_of, nodes.is_host_node
        comp_host = is_host_node & (nodes.types == NodeType.COMP_NODE)
        rows_c = np.maximum(row_of, 0)

        def at(col: np.ndarray) -> np.ndarray:  # a per-host-row column per node (no host row: zeros)
            return col[rows_c] if len(col) else np.zeros(N, col.dtype)

        has_rf = h.has("rf_id")
        schema_ok = np.array([bool(x) for x in h.strings], bool) if h.strings else np.zeros(1, bool)
        sched = at(h.op_schema)
        attrs: dict[str, tuple] = {
            "is_cpu_op": (nodes.cpu_op, np.arange(N) < tl.n_ids + int(tl.tail)),
            "num_ops": (at(flops), comp_host & at(known)),
            "tensor_size": (at(nbytes).astype(np.uint64), comp_host & (at(nbytes) != 0)),
        }
        costed = comp_host & at(known)  # the compute type the roofline costs FLOPs at (`dtypes`)
        dt, dt_names = at(dtypes[0])[costed], dtypes[1]
        dt_col = np.zeros(N, np.int64)
        dt_col[costed] = np.maximum(dt, 0)
        dt_has = np.zeros(N, bool)
        dt_has[costed] = dt >= 0
        attrs["dtype"] = ((dt_col, dt_names), dt_has)
        for name in ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", Attr.COMM_SEQ):
            if name in comm_attr:
                attrs[name] = _sparse(comm_attr[name], N)
        if "pg_name" in comm_attr:
            attrs["pg_name"] = _sparse_strings(comm_attr["pg_name"], N)
        attrs["op_schema"] = (
            (np.maximum(sched, 0), h.strings),
            comp_host & (sched >= 0) & schema_ok[np.maximum(sched, 0)],
        )
        attrs["rf_id"] = (at(h.rf_id), is_host_node & at(has_rf))
        attrs["tid"] = (nodes.thread_of, nodes.has_tid)
        if self.estimated.any():
            attrs["duration_estimated"] = (np.ones(N, bool), is_host_node & at(self.estimated))
        dev = self.device_nodes & comp_host
        if "duration_unknown" in comm_attr:  # collectives whose kernel the trace lacks (`_kernel_not_recorded`)
            dev |= _sparse(comm_attr["duration_unknown"], N)[1]
        if dev.any():
            attrs["duration_unknown"] = (np.ones(N, bool), dev)
        if tl.n_gpu:
            on_gpu = np.zeros(N, bool)
            on_gpu[ev_ids[is_gpu]] = True
            assert tl.gpu is not None  # GPU work: self.gpu is set
            for name in ("stream", "device"):
                col = np.zeros(N, np.int64)
                col[ev_ids[is_gpu]] = tl.gpu[name][tl.src[is_gpu]]
                attrs[name] = (col, on_gpu)
        for name in ("in_split_size", "out_split_size"):
            if name in comm_attr:
                attrs[name] = _sparse_strings(comm_attr[name], N)
        return attrs

    def _process_group_node(self, nodes: _Nodes, attrs: dict[str, tuple]) -> None:
        """The last node, when the trace describes process groups: METADATA, with them in `pg_config`."""
        groups = self.h.process_groups
        if groups:
            N = nodes.types.size
            nodes.types[N - 1] = NodeType.METADATA_NODE
            nodes.name_src[N - 1] = nodes.host_name + 1
            attrs["pg_config"] = _sparse_strings({N - 1: json.dumps(groups, sort_keys=True)}, N)

    @staticmethod
    def _name_table(names_all: list[str], name_src: np.ndarray) -> tuple[list[str], np.ndarray]:
        """The distinct names the nodes use, in order of first code, and each node's code into them."""
        used, inv = np.unique(name_src, return_inverse=True)
        table: dict[str, int] = {}
        remap = np.array([table.setdefault(names_all[u], len(table)) for u in used.tolist()], np.int32)
        return list(table), remap[inv.reshape(-1)]

    def _sync_edges(self, tl: _Timeline, out_src: list, out_dst: list) -> None:
        """Edges (arrays appended to out_src, out_dst) from GPU work to the host op that waited
        for it: each stream's last op that had ended when a synchronizing call inside the host op
        returned (synchronize, item(), a blocking copy), without the edges a thread's order
        already implies, in work linear in the stream ops looked at (`convert.sync`)."""
        assert self.gpu is not None  # called with GPU work only (tl.n_gpu)
        syncs = self.gpu.sync_points()
        if not syncs:
            return
        host, is_gpu, th, s, e, ev_ids = tl.host, tl.is_gpu, tl.th, tl.s, tl.e, tl.ids
        gk = np.flatnonzero(is_gpu)
        tails = sync.StreamTails(gk, tl.key[gk], is_gpu.size)
        threads = _ThreadIndex(host, th, s, e, ev_ids).by  # positions, in order
        skips = self._order_skips
        runs = []
        for thread, calls in syncs.items():
            ks = threads.get(thread)
            if ks is None:
                continue
            t0 = np.array([c[0] for c in calls], np.int64)
            t1 = np.array([c[1] for c in calls], np.int64)
            until = sync.waited_until(s[ks], e[ks], t0, t1)
            waited = until != sync.NONE
            ks, until = ks[waited], until[waited]
            runs += [(ks[r], until[r]) for r in sync.segments(ks, skips[th[skips] == thread])]
        work = sum(sync.lookups(tails, k) for k, _ in runs)
        allowed = sync.limit(tl.n)
        if work > allowed:
            raise TraceFormatError(
                self.gpu.kin.path,
                f"{len(syncs):,} threads wait for the GPU ({sum(k.size for k, _ in runs):,} ops) while "
                f"{tails.streams:,} streams run: their dependencies need {work:,} look-ups, more than the "
                f"{allowed:,} allowed for {tl.n:,} nodes (${sync.LIMIT_ENV} sets it)",
            )
        end = e[gk]
        for k, until in runs:
            at, cand = sync.edges(tails, end, k, until)
            out_src.append(ev_ids[k[at]])
            out_dst.append(ev_ids[gk[cand]])


def _sparse(values: dict[int, Any], n: int) -> tuple[np.ndarray, np.ndarray]:
    col = np.zeros(n, np.int64)
    mask = np.zeros(n, bool)
    if values:
        idx = np.fromiter(values.keys(), np.int64, len(values))
        col[idx] = list(values.values())
        mask[idx] = True
    return col, mask


def _sparse_strings(values: dict[int, str], n: int) -> tuple[tuple[np.ndarray, list[str]], np.ndarray]:
    table: dict[str, int] = {}
    codes = {k: table.setdefault(v, len(table)) for k, v in values.items()}
    col, mask = _sparse(codes, n)
    return (col, list(table)), mask
