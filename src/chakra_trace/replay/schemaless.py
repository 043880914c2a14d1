"""Replay any Chakra workload as a benchmark, without op schemas: timed kernels and real collectives.

Works on every Chakra trace (converted from PyTorch, synthetic, ASTRA-sim text): it needs only node
types, durations / FLOP counts, dependencies and the communication attributes.

- A COMP node becomes a calibrated kernel that takes the node's recorded time: ``mode="duration"`` uses
  ``duration_micros``; ``mode="flops"`` uses ``num_ops`` at the FLOP rate measured here (nodes without a
  positive ``num_ops``, and host ops of a CUDA replay, keep their duration). On CPU the kernel is a loop
  of small matmuls (the calibrated work unit) finished by a busy-wait on ``time.perf_counter``, yielding
  the core between slices to runnable threads (see `kernels.py`). On CUDA, device-side nodes
  (``is_cpu_op`` false or absent) become ``torch.cuda._sleep`` (calibrated in cycles per µs) or, in flops
  mode, matmuls plus a sleep for the remainder, launched asynchronously; host nodes stay CPU busy-waits.
  MEM_LOAD / MEM_STORE nodes are replayed like compute, by their duration.
- A COMM node becomes a real ``torch.distributed`` call of the recorded size on the recorded group
  (Chakra's size convention: the input, per-rank input for all-gather, per-rank output for scatter),
  on zero-filled buffers (float32 when the size divides by 4, else uint8) allocated before timing.
  What cannot be replayed is reported per node ("not replayed: <why>"), never fatal.
- Nodes run in a topological order (ties by id). Collectives and send/recv are issued asynchronously and
  waited for by the first node that depends on them (or at the end of the step), so communication
  overlaps compute as in the trace.

Host kernels follow a timeline: each ends at the previous one's deadline plus its own time, so the
replayer's per-node overhead is absorbed by the kernels after it instead of adding up (the timeline
restarts after every wait on communication, which is real time). `SchemaLessReplay.lags_us` says how far
behind the timeline a step ended (0 when the trace's tiny nodes left enough slack).

`replay_workload` always runs the ranks as separate processes (`run_ranks`), one per rank of a
`<prefix>.<rank>.et` job. A single `.et` file is replayed by `world_size` ranks (1 by default) that all
run that same trace (a symmetric workload); with one rank its collectives run on a group of one (no
traffic, but still a real call). `SchemaLessReplay` can also be used in-process, where a process group
exists or not (without one, communication nodes are reported as not replayed).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..analyze.steps import find_steps
from ..errors import ChakraError
from ..io.et import read_trace
from ..io.workload import Workload, locate, read_comm_groups, select_ranks
from ..schema.enums import Attr, CollectiveType, NodeType, node_type_name
from ..validate import fix_trace
from .budget import Budget, BudgetSpent
from .energy import gpu_of, rank_meter
from .environment import environment
from .kernels import Kernel
from .launch import progress_reporter, run_ranks, stop_together
from .measure import Measurement, measure
from .process_groups import build_process_groups
from .result import ReplayResult, ReplayWarning, step_measurement
from .units import PER_RECORDING

MODES = ("duration", "flops")

_NOP, _HOST, _ASYNC, _DEVICE = 0, 1, 2, 3


# ------------------------------------------------------------------------------------------------ graph order
def topological_order(trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows in a dependency-respecting order, ties by id; dependent row and dependency row of each edge).

    Data and control dependencies both order; dependencies on missing ids are ignored. Raises ChakraError
    on a cycle.
    """
    g = trace.graph()
    return g.order(), g.src, g.dst


def without_cycles(trace, label: str = "trace"):
    """(`trace`, []) when its dependencies are acyclic; else the copy `chakra validate --fix` makes
    (the control dependencies on a cycle dropped, as `simulate` does) and what changed. A cycle
    through data dependencies has no choice-free repair: ChakraError, one line."""
    if trace.graph().order(partial=True).size == len(trace):
        return trace, []
    fixed, changes = fix_trace(trace)
    if fixed.graph().order(partial=True).size < len(fixed):
        try:
            fixed.graph().order()
        except ChakraError as e:
            raise ChakraError(
                f"{label}: {e}; it cannot be repaired (the cycle runs through data dependencies)"
            ) from None
    return fixed, [f"{label}: {c}" for c in changes]


# ------------------------------------------------------------------------------------------------ replay
def _json_list(v) -> list[int] | None:
    if v is None:
        return None
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v):
        return [int(x) for x in v]
    return None


class SchemaLessReplay:
    """One rank's trace, prepared once (order, waits, kernels, buffers, communicators); `run_step()`
    replays one pass over it.

    `groups`: from `build_process_groups` (which every rank must call together); None builds them when a
    process group is up (so every rank must construct its replay at the same time), and without one the
    communication nodes are not replayed. The first step also tries every collective: one the backend
    refuses is reported and left out from then on.
    """

    def __init__(
        self,
        trace,
        *,
        mode: str = "duration",
        device: str = "cpu",
        groups: dict[str, tuple[Any, list[int]]] | None = None,
        comm_groups: dict[str, list[int]] | None = None,
        name: str = "",
        yield_cpu: bool = True,
        max_node_s: float | None = None,
    ):
        import torch

        if mode not in MODES:
            raise ChakraError(f"mode {mode!r}: expected one of {MODES}")
        self.torch = torch
        self.trace = trace
        self.name = name
        self.mode = mode
        self.kernel = Kernel(device, yield_cpu=yield_cpu)
        self.device = self.kernel.device
        self.on_cuda = self.device.startswith("cuda")
        import torch.distributed as dist

        self._dist = dist if dist.is_available() and dist.is_initialized() else None
        if self._dist is not None:
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            self.backend = str(dist.get_backend())
            if groups is None:
                groups = build_process_groups(trace, comm_groups=comm_groups)
        else:
            self.rank, self.world_size, self.backend = 0, 1, ""
        self.groups = groups or {}
        self._buffers: dict[tuple, Any] = {}
        n = len(trace)
        self.status = np.zeros(n, np.int8)  # 0 replayed, 1 not replayed, 2 no work (metadata)
        self.reasons: dict[int, str] = {}
        self.lags_us: list[float] = []  # per step: how far behind its timeline the last host kernel ended
        self.waits_us: list[float] = []  # per step: time blocked waiting for communication (exposed comm)
        self.steps_us: list[float] = []  # per step: host time of run_step
        self.max_node_s = max_node_s  # (a node recorded as lasting longer is not replayed: a trace is data)
        self._prepare()

    # -------------------------------------------------------------- preparation
    def _skip(self, row: int, why: str) -> None:
        self.status[row] = 1
        self.reasons[row] = why

    def _prepare(self) -> None:
        t = self.trace
        n = len(t)
        order, dependent, dep = topological_order(t)
        types = t.types
        dur_s = t.duration.astype(np.float64) * 1e-6
        num_ops = np.where(t.has(Attr.NUM_OPS), t.num_ops, 0).astype(np.float64)
        use_flops = (num_ops > 0) if self.mode == "flops" else np.zeros(n, bool)
        host_side = (t.has(Attr.IS_CPU_OP) & t.is_cpu_op) if self.on_cuda else np.ones(n, bool)
        ops: list = [None] * n  # by row, put in order below
        async_rows: list[int] = []
        slot_of = np.full(n, -1, np.int64)
        cpu_rate = self.kernel.cpu_cal.flops_per_s
        for r in range(n):
            ty = int(types[r])
            if ty in (NodeType.COMP_NODE, NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE):
                # on CUDA a host op's FLOPs ran in the kernels it launched: it keeps its own (CPU) time
                flops = use_flops[r] and ty == NodeType.COMP_NODE and not (self.on_cuda and host_side[r])
                sec = num_ops[r] / cpu_rate if flops else dur_s[r]
                if self.max_node_s is not None and sec > self.max_node_s:
                    self._skip(r, f"not replayed: it lasts {sec:.3g} s alone, more than the time budget")
                    ops[r] = (_NOP, None)
                elif host_side[r]:
                    sec = num_ops[r] / cpu_rate if flops else dur_s[r]
                    ops[r] = (_HOST, sec) if sec > 0 else (_NOP, None)
                else:
                    fn = self.kernel.device_op(dur_s[r] * 1e6, num_ops[r] if flops else None)
                    ops[r] = (_DEVICE, fn) if fn is not None else (_NOP, None)
            elif ty in (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                issue, why = self._comm(r, ty)
                if issue is None:
                    self._skip(r, f"not replayed: {why}")
                    ops[r] = (_NOP, None)
                else:
                    slot_of[r] = len(async_rows)
                    async_rows.append(r)
                    ops[r] = (_ASYNC, (int(slot_of[r]), issue))
            elif ty == NodeType.METADATA_NODE:
                self.status[r] = 2
                ops[r] = (_NOP, None)
            else:
                self._skip(r, f"not replayed: {node_type_name(ty)} has no replay")
                ops[r] = (_NOP, None)
        # each asynchronous node is waited for by its first dependent in the order (or at the end)
        pos = np.empty(n, np.int64)
        pos[order] = np.arange(n)
        waits: dict[int, list[int]] = {}
        if async_rows:
            first = np.full(n, n, np.int64)
            e = slot_of[dep] >= 0
            np.minimum.at(first, dep[e], pos[dependent[e]])
            for r in async_rows:
                if first[r] < n:
                    waits.setdefault(int(first[r]), []).append(int(slot_of[r]))
        self._ops = [(ops[r][0], ops[r][1], tuple(waits.get(p, ())), r) for p, r in enumerate(order.tolist())]
        self._pending: list = [None] * len(async_rows)
        self._probed = False

    def _buffer(self, role: str, numel: int, dtype) -> Any:
        """Zero-filled (sums stay 0: no overflow, no denormals); shared by nodes of the same shape and role."""
        key = (role, int(numel), dtype)
        b = self._buffers.get(key)
        if b is None:
            b = self.torch.zeros(int(numel), dtype=dtype, device=self.device)
            self._buffers[key] = b
        return b

    def _comm(self, r: int, ty: int) -> tuple[Callable[[], Any] | None, str]:
        """(closure issuing the communication asynchronously, or None and why not)."""
        t, torch, dist = self.trace, self.torch, self._dist
        if dist is None:
            return None, "no torch.distributed process group"
        pg_name = t.groups[t.pg_name[r]] if t.has(Attr.PG_NAME)[r] else ""
        if pg_name not in self.groups:
            return None, f"unknown process group {pg_name!r}"
        pg, members = self.groups[pg_name]
        if pg is False:
            return None, f"process group {pg_name!r} names ranks beyond the world size {self.world_size}"
        if self.rank not in members:
            return None, f"rank {self.rank} is not a member of process group {pg_name!r} {members}"
        size = int(t.comm_size[r]) if t.has(Attr.COMM_SIZE)[r] else None
        if ty != NodeType.COMM_COLL_NODE:
            return self._p2p(r, ty, size, pg)
        if not t.has(Attr.COMM_TYPE)[r]:
            return None, "no comm_type"
        ct = int(t.comm_type[r])
        if ct == CollectiveType.BARRIER:
            return (lambda: dist.barrier(group=pg, async_op=True)), ""
        try:
            ct = CollectiveType(ct)
        except ValueError:
            return None, f"unknown collective type {ct}"
        if size is None or size < 0:
            return None, f"{ct.name} without a comm_size"
        g = len(members)
        dtype, item = (torch.float32, 4) if size % 4 == 0 else (torch.uint8, 1)
        numel = max(size // item, 1)
        root = int(t.comm_src[r]) if t.has(Attr.COMM_SRC)[r] else members[0]
        if root not in members:
            return None, f"{ct.name} root rank {root} is not in process group {pg_name!r}"
        A = True
        if ct == CollectiveType.ALL_REDUCE:
            buf = self._buffer("io", numel, dtype)
            return (lambda: dist.all_reduce(buf, group=pg, async_op=A)), ""
        if ct == CollectiveType.ALL_GATHER:
            inp, out = self._buffer("in", numel, dtype), self._buffer("out", numel * g, dtype)
            ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
            return (lambda: ag(out, inp, group=pg, async_op=A)), ""
        if ct in (CollectiveType.REDUCE_SCATTER, CollectiveType.REDUCE_SCATTER_BLOCK):
            per = -(-numel // g)  # an uneven size is padded to a multiple of the group
            inp, out = self._buffer("in", per * g, dtype), self._buffer("out", per, dtype)
            rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
            return (lambda: rs(out, inp, group=pg, async_op=A)), ""
        if ct == CollectiveType.ALL_TO_ALL:
            return self._all_to_all(r, size, g, pg)
        if ct == CollectiveType.BROADCAST:
            buf = self._buffer("io", numel, dtype)
            return (lambda: dist.broadcast(buf, src=root, group=pg, async_op=A)), ""
        if ct == CollectiveType.REDUCE:
            buf = self._buffer("io", numel, dtype)
            return (lambda: dist.reduce(buf, dst=root, group=pg, async_op=A)), ""
        if ct == CollectiveType.GATHER:
            inp = self._buffer("in", numel, dtype)
            outs = [self._buffer(f"out{i}", numel, dtype) for i in range(g)] if self.rank == root else None
            return (lambda: dist.gather(inp, outs, dst=root, group=pg, async_op=A)), ""
        if ct == CollectiveType.SCATTER:
            out = self._buffer("out", numel, dtype)
            ins = [self._buffer(f"in{i}", numel, dtype) for i in range(g)] if self.rank == root else None
            return (lambda: dist.scatter(out, ins, src=root, group=pg, async_op=A)), ""
        return None, f"{ct.name} has no replay"  # pragma: no cover - every CollectiveType is handled

    def _all_to_all(self, r: int, size: int, g: int, pg) -> tuple[Callable | None, str]:
        t, torch, dist = self.trace, self.torch, self._dist
        assert dist is not None  # (called by _comm once it found a process group)
        ins = _json_list(t.attr(r, "in_split_size"))
        outs = _json_list(t.attr(r, "out_split_size"))
        if ins is not None and len(ins) == g and sum(ins) > 0:
            # recorded splits are elements of the recorded dtype: convert to bytes, then to our dtype
            if size % sum(ins):
                return None, f"ALL_TO_ALL comm_size {size} is not a whole number of elements of its splits {ins}"
            per = size // sum(ins)
            outs = outs if outs is not None and len(outs) == g else ins
            in_b, out_b = [x * per for x in ins], [x * per for x in outs]
            item = 4 if all(x % 4 == 0 for x in in_b + out_b) else 1
            dtype = torch.float32 if item == 4 else torch.uint8
            in_s, out_s = [x // item for x in in_b], [x // item for x in out_b]
            inp, out = self._buffer("in", sum(in_s), dtype), self._buffer("out", sum(out_s), dtype)
            return (lambda: dist.all_to_all_single(out, inp, out_s, in_s, group=pg, async_op=True)), ""
        dtype, item = (torch.float32, 4) if size % (4 * g) == 0 else (torch.uint8, 1)
        numel = -(-max(size // item, 1) // g) * g  # equal splits: padded to a multiple of the group
        inp, out = self._buffer("in", numel, dtype), self._buffer("out", numel, dtype)
        return (lambda: dist.all_to_all_single(out, inp, group=pg, async_op=True)), ""

    def _p2p(self, r: int, ty: int, size: int | None, pg) -> tuple[Callable | None, str]:
        t, torch, dist = self.trace, self.torch, self._dist
        assert dist is not None  # (called by _comm once it found a process group)
        send = ty == NodeType.COMM_SEND_NODE
        attr = Attr.COMM_DST if send else Attr.COMM_SRC
        what = "send" if send else "recv"
        if not t.has(attr)[r]:
            return None, f"{what} without {attr}"
        peer = int(getattr(t, attr)[r])
        if not 0 <= peer < self.world_size or peer == self.rank:
            return None, f"{what} peer rank {peer} (this is rank {self.rank} of {self.world_size})"
        if size is None or size < 0:
            return None, f"{what} without a comm_size"
        tag = int(t.comm_tag[r]) if t.has(Attr.COMM_TAG)[r] else 0
        dtype, item = (torch.float32, 4) if size % 4 == 0 else (torch.uint8, 1)
        buf = self._buffer(what, max(size // item, 1), dtype)
        group = pg if pg is not None else None
        if send:
            return (lambda: dist.isend(buf, peer, group=group, tag=tag)), ""
        return (lambda: dist.irecv(buf, peer, group=group, tag=tag)), ""

    # -------------------------------------------------------------- running
    def run_step(self, deadline: float | None = None) -> bool:
        """One pass over the trace (asynchronous CUDA work may still run when it returns: sync to time it).
        ``deadline`` (`time.perf_counter`): past it, only the communication runs (peers wait for it)
        and the pass returns False (cut short: not a sample); True otherwise."""
        pc = time.perf_counter
        host = self.kernel.host
        pending = self._pending
        probe = not self._probed
        waited = 0.0
        whole = True
        t = t_begin = pc()
        for i, (kind, arg, waits, row) in enumerate(self._ops):
            if deadline is not None and kind in (_HOST, _DEVICE) and (not whole or t > deadline or pc() > deadline):
                whole = False
                continue
            if waits:
                w0 = pc()
                for s in waits:
                    w = pending[s]
                    if w is not None:
                        w.wait()
                        pending[s] = None
                now = pc()
                waited += now - w0
                if now > t:
                    t = now
            if kind == _HOST:
                t += arg
                host(t if deadline is None else min(t, deadline))
            elif kind == _ASYNC:
                slot, issue = arg
                if probe:
                    try:
                        pending[slot] = issue()
                    except (RuntimeError, NotImplementedError, ValueError, TypeError) as e:
                        self._skip(
                            row,
                            f"not replayed: backend {self.backend or '?'} cannot run it "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})",
                        )
                        self._ops[i] = (_NOP, None, waits, row)
                else:
                    pending[slot] = issue()
            elif kind == _DEVICE:
                arg()
        now = pc()
        self.lags_us.append(max(0.0, now - t) * 1e6)
        for s, w in enumerate(pending):
            if w is not None:
                w.wait()
                pending[s] = None
        end = pc()
        self.waits_us.append((waited + end - now) * 1e6)
        self.steps_us.append((end - t_begin) * 1e6)
        self._probed = True
        return whole

    def pass_s(self) -> float:
        """The recorded time of the host kernels of one pass (seconds): what a pass takes at least."""
        return float(sum(arg for kind, arg, _w, _r in self._ops if kind == _HOST))

    # -------------------------------------------------------------- reporting
    def coverage(self) -> dict:
        """Work nodes replayed and not (with why), overall and by node name; metadata nodes are no work."""
        t = self.trace
        names = t.names
        work = self.status != 2
        total = int(work.sum())
        replayed = int((self.status == 0).sum())
        by_name: dict[str, dict] = {}
        codes, counts = np.unique(t.name_codes[self.status == 0], return_counts=True)
        for c, k in zip(codes.tolist(), counts.tolist()):
            by_name.setdefault(names[c], {"replayed": 0, "not_replayed": {}})["replayed"] = int(k)
        reasons: dict[str, int] = {}
        for r, why in sorted(self.reasons.items()):
            e = by_name.setdefault(names[t.name_codes[r]], {"replayed": 0, "not_replayed": {}})
            e["not_replayed"][why] = e["not_replayed"].get(why, 0) + 1
            reasons[why] = reasons.get(why, 0) + 1
        examples = [
            {"id": int(t.ids[r]), "name": names[t.name_codes[r]], "reason": why}
            for r, why in sorted(self.reasons.items())[:100]
        ]
        return {
            "total": total,
            "replayed": replayed,
            "not_replayed": total - replayed,
            "share": replayed / total if total else 1.0,
            "reasons": reasons,
            "by_name": by_name,
            "examples": examples,
            "metadata_nodes": int((self.status == 2).sum()),
        }


# ------------------------------------------------------------------------------------------------ per rank
def recorded_time_us(trace) -> tuple[float, str]:
    """The trace's own time: the span of its timed nodes (all the steps it recorded), or the sum of its
    compute when it has no start times (e.g. built by hand). Returns (µs, "span" | "span of K steps" |
    "compute_sum")."""
    work = trace.types != NodeType.METADATA_NODE
    if not work.any():
        return 0.0, "span"
    start, dur = trace.start[work].astype(np.float64), trace.duration[work].astype(np.float64)
    if trace.timed and (start > 0).any():
        steps = len(find_steps(trace))  # a replay runs the whole recording: say how many steps that is
        return float((start + dur).max() - start.min()), "span" if steps <= 1 else f"span of {steps} steps"
    comp = np.isin(trace.types, [NodeType.COMP_NODE, NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE])
    return float(trace.duration[comp].astype(np.float64).sum()), "compute_sum"


def recorded_steps(trace) -> int | None:
    """How many training steps the trace recorded (`analyze.steps.find_steps`: the profiler's
    windows, ProfilerStep annotations or whole repeats), None when it cannot tell."""
    if not trace.timed:
        return None
    found = find_steps(trace)
    return len(found) if len(found) and not found.method.startswith(("one window", "no recorded")) else None


def _rank_file(source: str, rank: int) -> Path:
    """The trace rank `rank` replays: a lone file serves every rank."""
    p = Path(source)
    return p if p.is_file() else select_ranks(source, locate(source), [rank])[rank]


def replay_rank(
    rank: int,
    world_size: int,
    source: str,
    *,
    mode: str = "duration",
    device: str = "cpu",
    warmup: int = 3,
    min_repeats: int = 5,
    max_repeats: int = 1000,
    target_rel_ci: float = 0.02,
    budget_s: float = 10.0,
    comm_groups: dict[str, list[int]] | None = None,
    yield_cpu: bool = True,
) -> dict:
    """The per-rank entry `run_ranks` runs (inside an initialized process group): load this rank's trace
    (`<source>.<rank>.et`, or the file `source` itself), replay it with `measure()` in lockstep with the
    other ranks, and return {"measurement", "coverage", "calibration", "recorded_us", ...} (JSON-able).

    The ranks pass a barrier before each sample (not timed) and decide together when to stop (an
    all-reduce MIN of the stop flags: when every rank is done), so sample i of every rank is the same step.
    The measurement's `extra` adds per-step medians of `comm_wait_us` (time blocked on communication)
    and `compute_us` (the rest), and how far the host timeline lagged (`timeline_lag_us_*`).
    """
    import torch
    import torch.distributed as dist

    path = _rank_file(source, rank)
    trace, repairs = without_cycles(read_trace(path), f"rank {rank} ({Path(path).name})")
    budget = Budget(budget_s)  # (from here on: preparing, warm-up, samples)
    cuda = str(device).startswith("cuda")
    # decisions and barriers go through gloo on the CPU: cheap, and they never queue behind NCCL work
    ctrl = None
    if str(dist.get_backend()) != "gloo":
        ctrl = dist.new_group(backend="gloo")
    replay = SchemaLessReplay(
        trace,
        mode=mode,
        device=device,
        comm_groups=comm_groups,
        name=f"rank{rank}",
        yield_cpu=yield_cpu,
        max_node_s=budget.seconds,
    )
    decide = stop_together(ctrl)  # stop when every rank has converged (or hit the budget)

    state = {"ran": False}

    def step() -> bool:
        whole = replay.run_step(budget.hard)
        state["ran"] = True
        return whole

    def sync() -> None:
        # before a sample's first clock reading: line the ranks up; before its last: only drain the device
        if cuda:
            torch.cuda.synchronize()
        if not state["ran"]:
            dist.barrier(group=ctrl)
        state["ran"] = False

    warm = 0
    for _ in range(max(warmup, 1)):  # the first pass also probes what the backend can run
        dist.barrier(group=ctrl)
        replay.run_step(budget.hard)
        if cuda:
            torch.cuda.synchronize()
        warm += 1
        if decide(time.perf_counter() > budget.start + budget.seconds / 2):  # (at most half the budget)
            break
    meter = rank_meter(rank, gpu_of(replay.device) if cuda else None)
    m = measure(
        step,
        name=f"rank{rank}",
        warmup=0,
        min_repeats=min_repeats,
        max_repeats=max_repeats,
        target_rel_ci=target_rel_ci,
        budget_s=budget_s,
        sync=sync,
        decide=decide,
        on_sample=progress_reporter() if rank == 0 else None,
        meter=meter,
        origin=budget.start,
        deadline=budget.hard,
    )
    m.warmup = warm
    if not m.n:
        raise BudgetSpent(
            f"{path}: no pass of the replay finished within the time budget of {budget.seconds:g} s (and "
            f"{budget.grace:g} s of grace): its recorded time per pass is about {replay.pass_s():.3g} s; give a "
            "larger budget (--budget-s)"
        )

    m.env.update(environment(device if cuda else None))
    skip = warm
    lags, waits, steps = replay.lags_us[skip:], replay.waits_us[skip:], replay.steps_us[skip:]
    m.extra.update(
        {
            "rank": rank,
            "mode": mode,
            "device": replay.device,
            "backend": replay.backend,
            "timeline_lag_us_mean": float(np.mean(lags)) if lags else 0.0,
            "timeline_lag_us_max": float(np.max(lags)) if lags else 0.0,
            "comm_wait_us_median": float(np.median(waits)) if waits else 0.0,
            "compute_us_median": float(np.median(np.subtract(steps, waits))) if waits else 0.0,
        }
    )
    rec, basis = recorded_time_us(trace)
    k = recorded_steps(trace)  # a sample is one pass over the recording (`units`)
    m.extra.update(unit=PER_RECORDING, **({"steps_per_sample": k} if k else {}))
    cal = {"device": replay.kernel.cal.to_dict()}
    if cuda:
        cal["host"] = replay.kernel.cpu_cal.to_dict()
    out = {
        "rank": rank,
        "path": str(path),
        "nodes": len(trace),
        "measurement": m.to_dict(),
        "coverage": replay.coverage(),
        "calibration": cal,
        "recorded_us": rec,
        "recorded_basis": basis,
        "repairs": repairs,
    }
    if ctrl is not None:
        dist.destroy_process_group(ctrl)
    return out


# ------------------------------------------------------------------------------------------------ whole job
def replay_workload(
    source,
    *,
    world_size: int | None = None,
    mode: str = "duration",
    device: str = "cpu",
    backend: str | None = None,
    comm_groups: str | os.PathLike | dict | None = None,
    timeout_s: float | None = None,
    env: dict | None = None,
    yield_cpu: bool = True,
    progress=None,
    **measure_opts,
) -> ReplayResult:
    """Replay a workload on one process per rank (`run_ranks`) and measure its step time.

    `source`: a `<prefix>.<rank>.et` job prefix, a single `.et` file (replayed by `world_size` ranks, 1 by
    default, all running that trace), or a `Workload` (saved to a temporary folder first). `backend`:
    gloo on CPU, nccl on CUDA by default. `measure_opts`: warmup, min_repeats, max_repeats, target_rel_ci,
    budget_s (see `measure()`). `comm_groups`: an ASTRA-sim group file or {name: ranks}. `yield_cpu`: see
    `kernels.Kernel`. `timeout_s` (default 300 s + 3 budgets) bounds the whole job. `progress(n)`: called
    as rank 0 takes its timed samples.
    """

    if mode not in MODES:
        raise ChakraError(f"mode {mode!r}: expected one of {MODES}")
    known = {"warmup", "min_repeats", "max_repeats", "target_rel_ci", "budget_s"}
    unknown = set(measure_opts) - known
    if unknown:
        raise TypeError(f"replay_workload() got unexpected options {sorted(unknown)}; expected {sorted(known)}")
    groups = read_comm_groups(comm_groups) if isinstance(comm_groups, (str, os.PathLike)) else comm_groups
    backend = backend or ("nccl" if str(device).startswith("cuda") else "gloo")
    budget = float(measure_opts.get("budget_s", 10.0))
    timeout = float(timeout_s) if timeout_s is not None else 300.0 + 3 * budget
    with tempfile.TemporaryDirectory(prefix="chakra-replay-") as tmp:
        if isinstance(source, Workload):
            if world_size is not None and world_size != len(source):
                raise ChakraError(f"world_size={world_size} but the workload has {len(source)} ranks")
            groups = groups if groups is not None else (source.groups or None)
            ranks = source.ranks
            if ranks != list(range(len(ranks))):
                raise ChakraError(f"workload ranks must be 0..{len(ranks) - 1}, got {ranks}")
            source.save(os.path.join(tmp, "wl"))
            path, label, ws = os.path.join(tmp, "wl"), "<workload>", len(ranks)
        else:
            path = label = os.fspath(source)
            if os.path.isfile(path):
                ws = int(world_size or 1)
            else:
                found = sorted(locate(path))
                if found != list(range(len(found))):
                    raise ChakraError(f"{path}: ranks must be 0..{len(found) - 1}, found {found}")
                if world_size is not None and world_size != len(found):
                    raise ChakraError(f"{path}: world_size={world_size} but the job has {len(found)} ranks")
                ws = len(found)
        results = run_ranks(
            "chakra_trace.replay.schemaless:replay_rank",
            ws,
            args=(path,),
            kwargs={"mode": mode, "device": device, "comm_groups": groups, "yield_cpu": yield_cpu, **measure_opts},
            backend=backend,
            device=device,
            timeout_s=timeout,
            env=env,
            progress=progress,
        )
    per_rank = {r["rank"]: Measurement.from_dict(r["measurement"]) for r in results}
    notes = [f"trace repaired before replay: {c}" for r in results for c in r.get("repairs", [])]
    for w in notes:
        warnings.warn(w, ReplayWarning, stacklevel=2)
    return ReplayResult(
        warnings=notes,
        source=label,
        world_size=ws,
        mode=mode,
        device=str(device),
        backend=backend,
        step=step_measurement(per_rank),
        per_rank=per_rank,
        coverage={r["rank"]: r["coverage"] for r in results},
        calibration={r["rank"]: r["calibration"] for r in results},
        recorded_us={r["rank"]: r["recorded_us"] for r in results},
        recorded_basis=results[0]["recorded_basis"] if results else "span",
    )


__all__ = [
    "SchemaLessReplay",
    "recorded_time_us",
    "replay_rank",
    "replay_workload",
    "topological_order",
    "without_cycles",
    "MODES",
]
