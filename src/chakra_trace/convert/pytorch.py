"""PyTorch execution trace (+ Kineto) -> one rank's Chakra trace.

Which ops become nodes: per thread, the outermost ops inside the recorded steps. Annotations
(ProfilerStep#N, Optimizer.step#..., record_function ranges) are descended into, and so is
any op whose subtree holds communication, so that a collective is never hidden inside a
compute node. An op that becomes a node folds its children: their FLOPs and bytes add up on
it, their time is already inside its duration. Time on the step's main thread that no op
covers (Python, the framework) becomes explicit `[host]` COMP nodes, so idle gaps stay
visible and the critical path of the result reproduces the measured step.

Dependencies are execution order, in `data_deps` (what every simulator resolves): nodes of a
thread in order; a collective after the node that issued it; the issuing thread joins the
collective at its first node that starts after the collective ends. Every edge goes from a
node that ended to one that started later in the measurement, so no dependency can make the
converted trace slower than the run it came from.
"""
from __future__ import annotations

import bisect
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..schema.builder import TraceBuilder
from ..schema.enums import NodeType, collective_name
from ..schema.trace import Trace
from .collectives import SCALAR_TYPE_BYTES, classify, is_bookkeeping, is_comm_op_name, message_bytes
from .flops import needs_values, tensor_cost

# Which argument of a c10d op holds the data a collective moves (its "input"), by normalized name.
_INPUT_ARG = {"allreduce": 0, "broadcast": 0, "reduce": 0, "allgather": 1, "reducescatter": 1,
              "alltoall": 1, "alltoallv": 1, "gather": 1, "scatter": 0, "send": 0, "recv": 0}
# Ranges that only label time; record_param_comms only wraps the op that does the communication.
_ANNOTATION_PREFIXES = ("ProfilerStep#", "Optimizer.", "## ", "[pytorch|profiler", "enumerate(DataLoader)",
                        "DistributedDataParallel.", "PyTorch Profiler", "record_param_comms")


class ConversionWarning(UserWarning):
    """Something in the input could not be converted faithfully (the conversion continues)."""


@dataclass
class ConversionReport:
    """What a conversion did, for logs and tests."""

    nodes: int = 0
    node_types: dict[str, int] = field(default_factory=dict)
    collectives: list[tuple[str, int]] = field(default_factory=list)  # (type, bytes) in order
    steps_us: list[float] = field(default_factory=list)  # measured step durations (Kineto)
    span_us: float = 0.0  # first step start to last step end
    linked: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        self.warnings.append(message)
        warnings.warn(message, ConversionWarning, stacklevel=3)


def _is_annotation(name: str, cat: str | None) -> bool:
    return cat == "user_annotation" or name.startswith(_ANNOTATION_PREFIXES)


def convert_pytorch(et_path: str | os.PathLike, kineto_path: str | os.PathLike | None = None, *,
                    rank: int | None = None) -> tuple[Trace, ConversionReport]:
    """Convert one rank's host execution trace (and its Kineto trace, for timing) to Chakra."""
    from .kineto import read_kineto
    from .link import interval_parents, link
    from .pytorch_host import read_host_trace

    report = ConversionReport()
    host = read_host_trace(et_path)
    names = host.name_array
    n = len(host)
    start = np.full(n, -1, np.int64)
    end = np.full(n, -1, np.int64)
    tid = host.tid.copy()
    cats: list[str | None] = [None] * n
    if kineto_path is not None:
        kin = read_kineto(kineto_path)
        lk = link(host.ids, np.where(host.has("rf_id"), host.rf_id, -1), names, kin)
        report.linked = dict(lk.counts)
        matched = lk.event >= 0
        start[matched] = lk.start[matched]
        end[matched] = lk.start[matched] + np.maximum(lk.duration[matched], 0)
        tid[matched] = kin.tid[lk.event[matched]]
        for i in np.flatnonzero(matched).tolist():
            c = kin.cat[lk.event[i]]
            cats[i] = kin.cats[c] if c > 0 else None
        steps = kin.steps()
        if not steps and matched.any():  # no ProfilerStep annotations: the span of the linked ops
            steps = [(-1, int(start[matched].min()), int(end[matched].max()))]
        unlinked = int((~matched & ~host.synthetic).sum())
        if unlinked > 0:
            report.warn(f"{et_path}: {unlinked} of {n} host ops have no Kineto event "
                        f"(linked by {lk.counts.get('key')}); they are left out of the timed trace")
        if rank is None:
            rank = kin.rank
    else:
        steps = []
    conv = _Converter(host, names, start, end, tid, cats, steps, report)
    if kineto_path is not None:
        conv.gpu = _GpuWork(kin, lk)
    trace = conv.run(interval_parents)
    if rank is not None:
        trace.metadata.attr.add(name="rank").int64_val = int(rank)
    report.nodes = len(trace)
    report.node_types = trace.node_type_counts()
    return trace, report


class _Converter:
    def __init__(self, host, names, start, end, tid, cats, steps, report: ConversionReport):
        self.h = host
        self.names = names
        self.start, self.end, self.tid, self.cats = start, end, tid, cats
        self.steps = steps
        self.r = report
        self.timed = bool(steps)
        self.gpu: _GpuWork | None = None

    # ------------------------------------------------------------------ structure
    def _rows_in_scope(self) -> np.ndarray:
        h = self.h
        synthetic = h.synthetic
        if not self.timed:
            return np.flatnonzero(~synthetic)
        lo = min(s for _, s, _ in self.steps)
        hi = max(e for _, _, e in self.steps)
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
        pos = np.array([h.row(int(x)) if x >= 0 else -1 for x in h.parent[rows].tolist()], np.int64)
        in_scope = np.zeros(len(h), bool)
        in_scope[rows] = True
        return np.where((pos >= 0) & in_scope[np.maximum(pos, 0)], pos, -1)

    def run(self, interval_parents) -> Trace:
        h, names = self.h, self.names
        rows = self._rows_in_scope()
        parent = np.full(len(h), -1, np.int64)
        parent[rows] = self._parents(rows, interval_parents)
        self.parent = parent
        kinds = {int(i): classify(names[i]) for i in rows.tolist() if is_comm_op_name(names[i])}
        comm = {i for i, k in kinds.items() if k.is_comm}
        if self.gpu is not None:  # with GPU kernels recorded, the kernel is the collective
            comm -= self.gpu.hosts_of_comm_kernels()
        unknown = [i for i, k in kinds.items() if not k.is_comm and not is_bookkeeping(names[i])
                   and names[i] != "record_param_comms"]
        for i in unknown:
            self.r.warn(f"node id {int(h.ids[i])}: unknown collective {names[i]!r} converted as a COMP node")
        # an op is descended into when it is an annotation or holds communication in its subtree
        holds = np.zeros(len(h), bool)
        for i in comm:
            j = parent[i]
            while j >= 0 and not holds[j]:
                holds[j] = True
                j = parent[j]
        annotation = np.array([_is_annotation(names[i], self.cats[i]) for i in range(len(h))])
        node_rows, folded_into = [], np.full(len(h), -1, np.int64)
        order = rows[np.lexsort((h.ids[rows], self.start[rows]))] if self.timed else rows[np.argsort(h.ids[rows])]
        for i in order.tolist():
            p = parent[i]
            if p >= 0 and folded_into[p] >= 0:
                folded_into[i] = folded_into[p]  # inside an op that is a node
            elif annotation[i] or holds[i]:
                continue  # descended into
            else:
                folded_into[i] = i
                node_rows.append(i)
        return self._emit(np.asarray(node_rows, np.int64), folded_into, comm, kinds)

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
            shape = dims[sp[k]:sp[k + 1]].tolist() if t.has_shape[k] else [int(t.numel[k])]
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

    def _issuer(self, i: int, comm: set[int]) -> int:
        """The c10d op that issued backend op i (gloo:/nccl:), by shared tensors, else the ET parent."""
        h, names = self.h, self.names
        if names[i].startswith("c10d::") or names[i] == "record_param_comms":
            return i
        t = h.tensors
        if not hasattr(self, "_c10d_by_tensor"):  # tensor id -> c10d rows using it, ascending, built once
            self._c10d_by_tensor: dict[int, list[int]] = {}
            for j in sorted(comm):
                if names[j].startswith("c10d::"):
                    for tid in set(t.tensor_id[t.of(j)].tolist()):
                        self._c10d_by_tensor.setdefault(tid, []).append(j)
        best = -1
        for tid in set(t.tensor_id[t.of(i)].tolist()):
            rows = self._c10d_by_tensor.get(tid, [])
            k = bisect.bisect_left(rows, i)
            if k:
                best = max(best, rows[k - 1])
        p, hops = i, 0
        while best < 0 and h.parent[p] >= 0 and hops < 4:  # nccl:* -> record_param_comms -> c10d::*
            p, hops = h.row(int(h.parent[p])), hops + 1
            if p < 0:
                break
            if names[p].startswith("c10d::"):
                best = p
        return best

    def _comm_size(self, i: int, issuer: int, ctype: int | None) -> int:
        """Bytes a collective moves (record_param_comms attributes, else the c10d op's tensors)."""
        h = self.h
        rpc = self._record_param_comms(issuer if issuer >= 0 else i)
        if rpc >= 0:
            nel_in = h.attr(rpc, "in_msg_nelems")
            nel_out = h.attr(rpc, "out_msg_nelems")
            item = SCALAR_TYPE_BYTES.get(str(h.attr(rpc, "dtype")), None)
            if nel_in is not None and item is not None:
                return message_bytes(ctype, int(nel_in) * item, int(nel_out or 0) * item)
        src = issuer if issuer >= 0 else i
        key = classify(self.names[src]).key
        arg = _INPUT_ARG.get(key, 0)
        t = h.tensors
        sl = t.of(src)
        sel = (~t.output[sl]) & (t.arg[sl] == arg)
        if not sel.any():  # e.g. a backend op whose only tensor is its buffer
            sel = ~t.output[sl]
        return int((t.numel[sl][sel] * t.itemsize[sl][sel]).sum())

    def _record_param_comms(self, issuer: int) -> int:
        """The record_param_comms child of a c10d op that carries collective attributes, if any."""
        h = self.h
        if self.names[issuer] == "record_param_comms":
            return issuer if h.attr(issuer, "in_msg_nelems") is not None else -1
        if not hasattr(self, "_rpc_children"):  # record_param_comms rows by parent id, built once
            self._rpc_children: dict[int, list[int]] = {}
            for j in np.flatnonzero(self.names == "record_param_comms").tolist():
                self._rpc_children.setdefault(int(h.parent[j]), []).append(j)
        for j in self._rpc_children.get(int(h.ids[issuer]), []):
            if h.attr(j, "in_msg_nelems") is not None and h.attr(j, "collective_name") != "wait":
                return j
        return -1

    def _splits(self, issuer: int) -> dict[str, str]:
        """all_to_allv split sizes (elements per peer) as recorded, e.g. {"in_split_size": "[2, 6]"}."""
        rpc = self._record_param_comms(issuer) if issuer >= 0 else -1
        out = {}
        for key in ("in_split_size", "out_split_size"):
            v = self.h.attr(rpc, key) if rpc >= 0 else None
            if v not in (None, "", "[]", []):
                out[key] = v if isinstance(v, str) else json.dumps(v)
        return out

    def _pg_name(self, issuer: int) -> str | None:
        rpc = self._record_param_comms(issuer) if issuer >= 0 else -1
        if rpc >= 0 and self.h.attr(rpc, "pg_name") is not None:
            return str(self.h.attr(rpc, "pg_name"))
        groups = self.h.process_groups
        return str(groups[0].get("pg_name", "0")) if len(groups) == 1 else None

    # ------------------------------------------------------------------ output
    def _emit(self, node_rows, folded_into, comm, kinds) -> Trace:
        h, names = self.h, self.names
        us = (lambda t: int(round(t / 1000.0))) if self.timed else (lambda t: 0)
        lo = self.window[0] if self.timed else 0
        b = TraceBuilder(metadata={"schema": "chakra-trace pytorch converter 1", "source_schema": h.schema or ""})
        # FLOPs: the outermost op of each folded subtree that the cost model knows counts, and
        # its descendants do not (aten::linear counts, its addmm child does not; an autograd
        # wrapper the model does not know passes through to its mm children).
        # tensor_size: what the node's own op reads and writes.
        flops = np.zeros(len(h), np.int64)
        known = np.zeros(len(h), bool)
        nbytes = np.zeros(len(h), np.int64)
        covered = np.zeros(len(h), bool)  # an ancestor inside the node already counted FLOPs
        folded = np.flatnonzero(folded_into >= 0)
        folded = folded[np.lexsort((h.ids[folded], self.start[folded]))]  # parents before children
        for i in folded.tolist():
            tgt = int(folded_into[i])
            if tgt in comm:
                continue
            p = self.parent[i]
            if i != tgt and p >= 0 and covered[p]:
                covered[i] = True
                continue
            f, by = self._cost(i)
            if i == tgt:
                nbytes[tgt] = by
            if f:
                flops[tgt] += f
                known[tgt] = True
                covered[i] = True
            elif f == 0:
                known[tgt] = True
        events = [(int(self.start[i]), int(self.end[i]), int(self.tid[i]), i) for i in node_rows.tolist()]
        gpu_events = self.gpu.events(folded_into, self.window) if self.gpu is not None and self.timed else []
        events += gpu_events
        syncs = self.gpu.sync_points() if gpu_events else {}
        main = self._main_thread(node_rows)
        node_of: dict[int, int] = {}
        last: dict[int, tuple[int, int]] = {}  # thread -> (node id, end ns)
        pending_joins: dict[int, list[tuple[int, int]]] = {}  # thread -> [(coll node, end ns)]
        first_start = lo
        last_gpu: dict[tuple, tuple[int, int]] = {}  # (device, stream) -> (node id, end ns)
        emitted: dict[int, tuple[list, list]] = {}  # thread -> (end times, node ids) in order
        # walk all threads in time order so cross-thread edges only point backwards in time
        for s, e, th, i in sorted(events, key=lambda ev: (ev[0], ev[3] if isinstance(ev[3], int) else -1)):
            if isinstance(i, tuple):  # GPU work: (kineto row, launching host row)
                node_of_gpu = self._gpu_node(b, i, s, e, th, node_of, folded_into, last_gpu, us, lo, comm)
                last_gpu[th] = (node_of_gpu, e)
                continue
            deps = []
            if th in last:
                deps.append(last[th][0])
                if self.timed and th == main and s > last[th][1]:
                    deps = [self._gap(b, last[th], s, th, us, lo)]
            elif self.timed and th == main and s > first_start:
                deps = [self._gap(b, (None, first_start), s, th, us, lo)]
            for coll, cend in pending_joins.pop(th, []):
                if cend <= s:
                    deps.append(coll)
                else:
                    pending_joins.setdefault(th, []).append((coll, cend))
            deps += _sync_waits(syncs.get(th, ()), s, e, last_gpu)
            kind = kinds.get(i)
            common = dict(start=us(s - lo) if self.timed else 0, duration=us(e) - us(s) if self.timed else 0,
                          rf_id=int(h.rf_id[i]) if h.has("rf_id")[i] else None, tid=int(th))
            if i in comm and kind is not None and (kind.collective is not None or kind.p2p):
                issuer = self._issuer(i, comm)
                if issuer >= 0 and issuer != i and issuer in node_of:
                    deps.append(node_of[issuer])
                elif issuer >= 0 and issuer != i:
                    prev = self._last_before(issuer, emitted)
                    if prev is not None:
                        deps.append(prev)
                nid = self._comm_node(b, i, issuer, kind, deps, common)
                issuing_thread = int(self.tid[issuer]) if issuer >= 0 else th
                if issuing_thread != th and self.timed:
                    pending_joins.setdefault(issuing_thread, []).append((nid, e))
            else:
                sched = h.op_schema[i]
                nid = b.comp(names[i], deps=sorted(set(deps)), is_cpu_op=True,
                             num_ops=int(flops[i]) if known[i] else None, tensor_size=int(nbytes[i]) or None,
                             op_schema=h.strings[sched] if sched >= 0 and h.strings[sched] else None, **common)
            node_of[i] = nid
            last[th] = (nid, e)
            ends, ids = emitted.setdefault(th, ([], []))
            ends.append(e)
            ids.append(nid)
        if self.timed and main in last and last[main][1] < self.window[1]:
            self._gap(b, last[main], self.window[1], main, us, lo)
        self._metadata_node(b)
        return b.build()

    def _gpu_node(self, b, ev, s, e, stream_key, node_of, folded_into, last_gpu, us, lo, comm) -> int:
        """A kernel / memcpy / memset: after its launching host node and its stream's previous op."""
        k_row, host_row = ev
        kin = self.gpu.kin
        name = kin.names[kin.name[k_row]]
        deps = []
        host_node = node_of.get(int(folded_into[host_row])) if host_row >= 0 else None
        if host_node is not None:
            deps.append(host_node)
        if stream_key in last_gpu:
            deps.append(last_gpu[stream_key][0])
        common = dict(start=us(s - lo), duration=us(e) - us(s), stream=int(stream_key[1]),
                      device=int(stream_key[0]))
        kind = classify(name)
        if kind.collective is not None:
            issuer = self._issuer(host_row, comm | {host_row}) if host_row >= 0 else -1
            size = self._comm_size(host_row, issuer, kind.collective) if host_row >= 0 else 0
            self.r.collectives.append((collective_name(kind.collective), size))
            return b.collective(kind.collective, size, name=name, deps=sorted(set(deps)),
                                pg_name=self._pg_name(issuer) if issuer >= 0 else None, **common)
        return b.comp(name, deps=sorted(set(deps)), is_cpu_op=False, **common)

    def _gap(self, b: TraceBuilder, prev: tuple, until: int, thread: int, us, lo: int) -> int:
        """A `[host]` COMP node for time on the main thread that no op covers."""
        prev_id, prev_end = prev
        return b.comp("[host]", us(until) - us(prev_end), deps=[] if prev_id is None else [prev_id],
                      is_cpu_op=True, start=us(prev_end - lo), tid=thread)

    def _main_thread(self, node_rows) -> int:
        """The thread that runs the training loop: the one of the ProfilerStep annotations."""
        names = self.names
        steps = [i for i in range(len(self.h)) if names[i].startswith("ProfilerStep#") and self.end[i] >= 0]
        if steps:
            return int(self.tid[steps[0]])
        if len(node_rows):
            vals, counts = np.unique(self.tid[node_rows], return_counts=True)
            return int(vals[np.argmax(counts)])
        return -1

    def _last_before(self, issuer: int, emitted: dict) -> int | None:
        """The node that ran last on the issuer's thread before the issuer started."""
        ends, ids = emitted.get(int(self.tid[issuer]), ([], []))
        k = bisect.bisect_right(ends, int(self.start[issuer]))  # a thread's nodes do not overlap
        return ids[k - 1] if k else None

    def _comm_node(self, b: TraceBuilder, i: int, issuer: int, kind, deps, common) -> int:
        names = self.names
        size = self._comm_size(i, issuer, kind.collective)
        deps = sorted(set(deps))
        if kind.collective is not None:
            self.r.collectives.append((collective_name(kind.collective), size))
            return b.collective(kind.collective, size, name=names[i], deps=deps, pg_name=self._pg_name(issuer),
                                **self._splits(issuer), **common)
        src = issuer if issuer >= 0 else i
        vals = self.h.io(src)[0]["values"]
        peer = vals[2] if len(vals) > 2 and isinstance(vals[2], int) else None
        tag = vals[3] if len(vals) > 3 and isinstance(vals[3], int) else 0
        if peer is None:
            self.r.warn(f"node id {int(self.h.ids[i])}: {names[i]} without a recorded peer rank")
            peer = -1
        if kind.p2p == "recv":
            return b.recv(peer, size, tag=tag, name=names[i], deps=deps, **common)
        return b.send(peer, size, tag=tag, name=names[i], deps=deps, **common)

    def _metadata_node(self, b: TraceBuilder) -> None:
        groups = self.h.process_groups
        if groups:
            b.add("process_groups", NodeType.METADATA_NODE, pg_config=json.dumps(groups, sort_keys=True))


class _GpuWork:
    """GPU kernels, copies and sets from Kineto, with the host rows that launched them."""

    def __init__(self, kin, lk):
        self.kin = kin
        self.lk = lk

    def hosts_of_comm_kernels(self) -> set[int]:
        lk, kin = self.lk, self.kin
        out = set()
        for g in range(lk.gpu_event.size):
            if lk.gpu_host[g] >= 0 and classify(kin.names[kin.name[lk.gpu_event[g]]]).is_comm:
                out.add(int(lk.gpu_host[g]))
        return out

    def events(self, folded_into: np.ndarray, window: tuple[int, int]) -> list:
        """(start, end, (device, stream), (kineto row, host row)) of GPU work launched by converted ops."""
        lk = self.lk
        out = []
        for g in range(lk.gpu_event.size):
            h = int(lk.gpu_host[g])
            s = int(lk.gpu_start[g])
            if h < 0 or folded_into[h] < 0 or not (window[0] <= s <= window[1]):
                continue
            out.append((s, s + max(int(lk.gpu_duration[g]), 0), (int(lk.gpu_device[g]), int(lk.gpu_stream[g])),
                        (int(lk.gpu_event[g]), h)))
        return out

    def sync_points(self) -> dict[int, list[tuple[int, int]]]:
        """{thread: [(start, end), ...] sorted} of runtime calls where the host waits for the GPU."""
        kin = self.kin
        out: dict[int, list[tuple[int, int]]] = {}
        names = kin.names
        for r in np.flatnonzero(kin.cat == kin.cats.index("cuda_runtime")).tolist() if "cuda_runtime" in kin.cats \
                else []:
            name = names[kin.name[r]]
            if "Synchronize" in name or name in ("cudaMemcpy", "cudaMemcpy2D", "cudaMemset"):
                out.setdefault(int(kin.tid[r]), []).append((int(kin.ts[r]), int(kin.ts[r] + max(kin.dur[r], 0))))
        for calls in out.values():
            calls.sort()
        return out


def _sync_waits(calls, start: int, end: int, last_gpu: dict) -> list[int]:
    """GPU nodes a host op from start to end waited for: each stream's last op that had ended when
    a synchronizing call inside the host op returned (synchronize, item(), blocking copy)."""
    waits: list[int] = []
    for k in range(bisect.bisect_left(calls, (start, -1)), len(calls)):
        t0, t1 = calls[k]
        if t0 > end:
            break
        if t1 <= end:
            waits += [g for g, ge in last_gpu.values() if ge <= t1 and g not in waits]
    return waits


__all__ = ["ConversionReport", "ConversionWarning", "collection_files", "convert_collection", "convert_pytorch"]


# --------------------------------------------------------------------------- whole collections

_RANK_FILE = re.compile(r"^rank(\d+)\.(et|kineto)\.json(?:\.gz)?$")


def collection_files(folder: str | os.PathLike) -> dict[int, tuple[str, str | None]]:
    """{rank: (host ET path, Kineto path or None)} of a folder written by `chakra collect`."""
    found: dict[int, dict[str, str]] = {}
    for entry in sorted(os.listdir(folder)):
        m = _RANK_FILE.match(entry)
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2)] = os.path.join(folder, entry)
    from ..errors import ChakraError

    missing = [r for r, f in found.items() if "et" not in f]
    if missing:
        raise ChakraError(f"{folder}: rank(s) {missing} have a Kineto trace but no host trace (rank<r>.et.json)")
    if not found:
        raise ChakraError(f"{folder}: no rank<r>.et.json[.gz] files (is this a `chakra collect` folder?)")
    return {r: (f["et"], f.get("kineto")) for r, f in sorted(found.items())}


def _convert_one(args) -> tuple[int, ConversionReport]:
    rank, et, kineto, out, compress = args
    from ..io.et import write_trace

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConversionWarning)  # they are in the report
        trace, report = convert_pytorch(et, kineto, rank=rank)
    write_trace(trace, out, compress=compress)
    return rank, report


def convert_collection(folder: str | os.PathLike, output_prefix: str | os.PathLike, *, jobs: int | None = None,
                       compress: bool = False, on_rank_done=None) -> dict[int, ConversionReport]:
    """Convert every rank of a collected folder to `<output_prefix>.<rank>.et`, ranks in parallel."""
    files = collection_files(folder)
    suffix = ".et.gz" if compress else ".et"
    tasks = [(r, et, k, f"{output_prefix}.{r}{suffix}", compress) for r, (et, k) in files.items()]
    os.makedirs(os.path.dirname(os.path.abspath(str(output_prefix))), exist_ok=True)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    reports: dict[int, ConversionReport] = {}
    if jobs == 1:
        results = map(_convert_one, tasks)
        for rank, rep in results:
            reports[rank] = rep
            if on_rank_done:
                on_rank_done(rank, rep)
    else:
        import concurrent.futures as cf
        import multiprocessing as mp

        with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            for rank, rep in pool.map(_convert_one, tasks):
                reports[rank] = rep
                if on_rank_done:
                    on_rank_done(rank, rep)
    return dict(sorted(reports.items()))
