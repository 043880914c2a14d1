"""What each rank's devices ran, as columns: the one input of the device analyses.

Why one model: HTA answers its questions on GPU Kineto traces only. The same questions (where
a stream idles, which kernels take the time, how much communication hides behind compute)
apply to a CPU job whose collectives run on the backend's worker threads (gloo), and to a
simulated job whose NPUs have no trace at all. Each source is reduced here to the same
arrays, and every analysis in this package reads only them.

Per rank (`RankTimeline`), one row per device activity, sorted by (stream, start):

- a GPU Kineto trace: kernels, memcpy and memset on their CUDA stream; the runtime call that
  launched each (``correlation``) with its start and duration, and the innermost host op
  around that call (``op``);
- a CPU Kineto trace (no GPU activity): each thread is a stream; the backend's collectives on
  its worker threads (``gloo:all_reduce`` on ``pt_gloo_runloop``) are communication, the
  top-level host ops of the other threads compute (or communication, for c10d's host calls);
- a Chakra trace, recorded or simulated: compute nodes on stream 0, collectives and
  point-to-point on stream 1, memory nodes on stream 2, at their recorded times (on the job's
  clock, `align.rank_offsets_ns`) or simulated ones; `[host]` gap nodes are left out (no device
  ran them).

Kinds: a kernel that `io.comm_kernels.RULES` names is communication (HTA's rule, a name holding
``nccl`` or ``rccl``, and the expert-parallel, symmetric-memory, custom all-reduce and MSCCL
kernels HTA counts as computation), memcpy/memset are memory, the rest computation. A Chakra
trace with device nodes (GPU kernels converted from Kineto) counts those only: its host ops
(``is_cpu_op``) ran on no device, as the Kineto trace's CPU ops are not device activity.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ChakraError
from ..io.collect_folder import kineto_files, trace_rank
from ..io.collective_names import is_backend_op_name, is_comm_op_name
from ..io.comm_kernels import is_comm_kernel
from ..io.kineto import CPU_CATS, GPU_CATS, RUNTIME_CATS, KinetoTrace, read_kineto
from ..io.kineto_formats import MEMORY_NAME
from ..io.nesting import interval_parents
from ..schema.enums import NodeType
from ..schema.resources import host_gap_mask
from .clock import rank_offsets_ns

COMPUTE, COMM, MEMORY = 0, 1, 2
KINDS = ("computation", "communication", "memory")

#: Where a timeline came from.
SOURCES = ("kineto-gpu", "kineto-cpu", "recorded", "simulated")

_MEMORY_KERNEL = MEMORY_NAME  # (copies and sets by name, MTIA's dma_request included)
_STEP = re.compile(r"^ProfilerStep#\d+$")


def kernel_kind(name: str, cat: str = "kernel") -> int:
    """Communication (`io.comm_kernels.RULES`), memory (copies, sets), computation."""
    if cat in ("gpu_memcpy", "gpu_memset") or _MEMORY_KERNEL.match(name):
        return MEMORY
    return COMM if is_comm_kernel(name) else COMPUTE


@dataclass
class HostOps:
    """The host ops of one rank (CPU ``cpu_op``/``user_annotation`` events), for the analyses
    that map device work back to the code that asked for it."""

    thread: np.ndarray  # int64 thread key
    start: np.ndarray  # int64 ns
    dur: np.ndarray  # int64 ns
    name: np.ndarray  # int32 code into RankTimeline.names
    parent: np.ndarray  # int64 row of the innermost enclosing op on the same thread, -1 at top

    @classmethod
    def empty(cls) -> HostOps:
        z = np.zeros(0, np.int64)
        return cls(z, z, z, np.zeros(0, np.int32), z)

    def __len__(self) -> int:
        return int(self.start.size)


@dataclass
class RankTimeline:
    rank: int
    source: str  # one of SOURCES
    names: list[str]
    stream: np.ndarray  # int64: CUDA stream, thread key (CPU), 0/1/2 (Chakra)
    start: np.ndarray  # int64 ns
    dur: np.ndarray  # int64 ns
    name: np.ndarray  # int32 code into names
    kind: np.ndarray  # uint8: COMPUTE, COMM, MEMORY
    correlation: np.ndarray  # int64, -1 where no launch is known
    launch_start: np.ndarray  # int64 ns of the runtime call that launched it, -1 if unknown
    launch_dur: np.ndarray  # int64 ns, -1 if unknown
    op: np.ndarray  # int64 row in `host` of the innermost host op around the launch, -1 if none
    bytes: np.ndarray  # int64 (memcpy/memset, Chakra comm size), -1 if unknown
    window: tuple[int, int]  # the span analysed: profiler steps' bounds or the events' extent
    host: HostOps = field(default_factory=HostOps.empty)
    stream_names: dict[int, str] = field(default_factory=dict)
    memory: dict[str, np.ndarray] = field(default_factory=dict)  # [memory] events: ts, bytes, allocated, ...
    path: str = ""

    def __len__(self) -> int:
        return int(self.start.size)

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    @property
    def streams(self) -> np.ndarray:
        return np.unique(self.stream)

    def stream_label(self, s: int) -> str:
        return self.stream_names.get(int(s), str(int(s)))

    def name_of(self, codes: np.ndarray) -> np.ndarray:
        return np.asarray(self.names, dtype=object)[codes] if len(self.names) else np.zeros(0, object)

    def select(self, mask: np.ndarray) -> RankTimeline:
        """The same rank with only the activities in `mask` (host ops, memory kept)."""
        cols = {c: getattr(self, c)[mask] for c in _ROW_COLUMNS}
        return RankTimeline(
            self.rank, self.source, self.names, window=self.window, host=self.host,
            stream_names=self.stream_names, memory=self.memory, path=self.path, **cols,
        )  # fmt: skip


_ROW_COLUMNS = ("stream", "start", "dur", "name", "kind", "correlation", "launch_start", "launch_dur", "op", "bytes")


@dataclass
class JobTimeline:
    """Every rank's `RankTimeline`, by rank."""

    ranks: dict[int, RankTimeline]

    def __iter__(self):
        return iter(self.ranks[r] for r in sorted(self.ranks))

    def __len__(self) -> int:
        return len(self.ranks)

    @property
    def source(self) -> str:
        kinds = {t.source for t in self.ranks.values()}
        return kinds.pop() if len(kinds) == 1 else "+".join(sorted(kinds))


def _sorted(t: RankTimeline) -> RankTimeline:
    order = np.lexsort((t.start, t.stream))
    for c in _ROW_COLUMNS:
        setattr(t, c, getattr(t, c)[order])
    return t


# ---------------------------------------------------------------- Kineto
def _window(k: KinetoTrace, x: np.ndarray) -> tuple[int, int]:
    steps = k.steps()
    if steps:
        return min(s[1] for s in steps), max(s[2] for s in steps)
    if not x.any():
        return 0, 0
    return int(k.ts[x].min()), int(k.end[x].max())


def _host_ops(k: KinetoTrace, keys: np.ndarray) -> tuple[HostOps, np.ndarray]:
    rows = np.flatnonzero(k.mask(CPU_CATS, "X"))
    start, end, thread = k.ts[rows], k.end[rows], keys[rows]
    parent = interval_parents(start, end, thread)
    return HostOps(thread, start, end - start, k.name[rows].astype(np.int32), parent), rows


def _memory(k: KinetoTrace) -> dict[str, np.ndarray]:
    code = k.name_code("[memory]")
    if code < 0:
        return {}
    rows = [i for i in np.flatnonzero(k.name == code).tolist() if i in k.args]
    if not rows:
        return {}
    # (key, value when null or empty): the arguments kept, each a 64-bit integer (-1 when absent)
    keys = (("Bytes", 0), ("Total Allocated", 0), ("Total Reserved", 0), ("Device Id", -1), ("Device Type", -1))
    values: list[list[int]] = []
    kept: list[int] = []
    for i in rows:
        got = [_arg_int(k.args[i], key, null) for key, null in keys]
        if all(v is not None for v in got):
            values.append(got)  # type: ignore[arg-type]
            kept.append(i)
    if len(kept) < len(rows):  # text, NaN or 2**70 where a byte count goes: not a memory event
        warnings.warn(
            f"{k.path}: {len(rows) - len(kept):,} of {len(rows):,} [memory] events left out: their "
            f"{', '.join(key for key, _ in keys)} are not all 64-bit integers",
            stacklevel=2,
        )
    if not kept:
        return {}
    cols = np.asarray(values, np.int64).reshape(-1, len(keys)).T
    return {
        "ts": k.ts[kept],
        "bytes": cols[0],
        "allocated": cols[1],
        "reserved": cols[2],
        "device": cols[3],
        "device_type": cols[4],
    }


_I64 = (-(1 << 63), (1 << 63) - 1)


def _arg_int(args: dict, key: str, null: int) -> int | None:
    """A Kineto event argument as a 64-bit integer: -1 when absent, `null` when null or empty;
    None when it is not one (text, NaN, an infinity, past 64 bits)."""
    v = args.get(key, _ABSENT)
    if v is _ABSENT:
        return -1
    if v is None or v == "":
        return null
    if isinstance(v, str) and len(v) <= 20:
        try:
            v = int(v, 10)
        except ValueError:
            return None
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        v = int(v)
    if not isinstance(v, int) or not _I64[0] <= v <= _I64[1]:
        return None
    return int(v)


_ABSENT = object()


def read_for_devices(path: str | os.PathLike) -> KinetoTrace:
    """A Kineto trace read with the arguments the device analyses need (memory and counters)."""
    return read_kineto(os.fspath(path), args_for=lambda n: n == "[memory]")


def from_kineto(k: KinetoTrace, rank: int | None = None) -> RankTimeline:
    """One rank's device activity from its Kineto trace (GPU, or CPU-only: see the module doc)."""
    if rank is None:
        rank = k.rank or 0
    keys = k.thread_keys()
    host, host_rows = _host_ops(k, keys)
    x = k.ph == ord("X")
    gpu = np.flatnonzero(k.mask(GPU_CATS, "X"))
    window = _window(k, x)
    memory = _memory(k)
    if gpu.size:
        t = _gpu_rows(k, gpu, keys, host, host_rows, rank, window)
    else:
        t = _cpu_rows(k, keys, host, host_rows, rank, window)
    t.memory, t.path = memory, k.path
    return _sorted(t)


def _gpu_rows(k, gpu, keys, host, host_rows, rank, window) -> RankTimeline:
    names, nc = k.names, len(k.cats)
    pair, inv = np.unique(k.name[gpu].astype(np.int64) * nc + k.cat[gpu], return_inverse=True)
    kind = np.fromiter((kernel_kind(names[p // nc], k.cats[p % nc]) for p in pair.tolist()), np.uint8, pair.size)[
        inv.reshape(-1)
    ]  # classified once per distinct (name, category)
    stream = np.where(k.stream[gpu] >= 0, k.stream[gpu], k.tid[gpu])
    corr = k.correlation[gpu]
    # the runtime call with the same correlation id (launch time, duration, the op around it)
    rt = np.flatnonzero(k.mask(RUNTIME_CATS, "X") & (k.correlation >= 0))
    rt = rt[np.argsort(k.correlation[rt], kind="stable")]
    pos = np.searchsorted(k.correlation[rt], corr)
    pos = np.clip(pos, 0, max(rt.size - 1, 0))
    hit = (rt.size > 0) & (corr >= 0)
    if rt.size:
        hit &= k.correlation[rt[pos]] == corr
    row = np.where(hit, rt[pos] if rt.size else -1, -1)
    launch_start = np.where(hit, k.ts[row], -1)
    launch_dur = np.where(hit, k.dur[row], -1)
    op = np.full(gpu.size, -1, np.int64)
    if hit.any() and len(host):
        # the innermost host op open on the launching thread when the launch began
        r = row[hit]
        op[hit] = _enclosing(host, keys[r], k.ts[r], k.end[r])
    labels = {}
    for s in np.unique(stream).tolist():
        labels[int(s)] = f"stream {s}"
    return RankTimeline(
        rank, "kineto-gpu", names, stream.astype(np.int64), k.ts[gpu], np.maximum(k.dur[gpu], 0),
        k.name[gpu].astype(np.int32), kind, corr, launch_start, launch_dur, op, k.num_bytes[gpu],
        window, host, labels,
    )  # fmt: skip


def _enclosing(host: HostOps, thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Row in `host` of the innermost op of `thread` that encloses [start, end), -1 if none: one
    `interval_parents` over the host ops and the launches together (a launch inside another
    launch, a driver call in a runtime call, takes that one's op)."""
    n = len(host)
    par = interval_parents(
        np.concatenate([host.start, start]), np.concatenate([host.start + host.dur, end]),
        np.concatenate([host.thread, thread]),
    )  # fmt: skip
    out = par[n:]
    while (nested := out >= n).any():  # launches nest a level or two at most
        out[nested] = par[out[nested]]
    return out


def _cpu_rows(k, keys, host, host_rows, rank, window) -> RankTimeline:
    names = k.names
    top = host.parent < 0
    is_step = np.fromiter((bool(_STEP.match(n)) for n in names), bool, len(names))
    # a ProfilerStep annotation is not work: its children are the top-level ops
    step_rows = is_step[host.name]
    parent_is_step = np.zeros(len(host), bool)
    has_parent = host.parent >= 0
    parent_is_step[has_parent] = step_rows[host.parent[has_parent]]
    top = (top | parent_is_step) & ~step_rows
    backend = np.fromiter((is_backend_op_name(n) for n in names), bool, len(names))
    comm_name = np.fromiter((is_comm_op_name(n) for n in names), bool, len(names))
    worker_threads = np.unique(host.thread[backend[host.name]])
    on_worker = np.isin(host.thread, worker_threads)
    # worker threads: their backend ops (whatever the nesting); other threads: top-level ops
    take = np.where(on_worker, backend[host.name], top)
    rows = np.flatnonzero(take)
    kind = np.where(comm_name[host.name[rows]], COMM, COMPUTE).astype(np.uint8)
    tnames = k.thread_names()
    thread_of: dict[int, tuple[str | int, str | int]] = {}
    for i in host_rows[rows].tolist():
        thread_of.setdefault(int(keys[i]), (k.label_of(k.pid[i]), k.label_of(k.tid[i])))
    labels = {s: tnames.get(pt, f"thread {pt[1]}") for s, pt in thread_of.items()}
    n = rows.size
    neg = np.full(n, -1, np.int64)
    return RankTimeline(
        rank, "kineto-cpu", names, host.thread[rows], host.start[rows], host.dur[rows], host.name[rows], kind,
        neg, neg.copy(), neg.copy(), rows.astype(np.int64), neg.copy(), window, host, labels,
    )  # fmt: skip


# ---------------------------------------------------------------- Chakra traces
_STREAM_OF = {
    int(NodeType.COMP_NODE): (0, COMPUTE),
    int(NodeType.COMM_COLL_NODE): (1, COMM),
    int(NodeType.COMM_SEND_NODE): (1, COMM),
    int(NodeType.COMM_RECV_NODE): (1, COMM),
    int(NodeType.MEM_LOAD_NODE): (2, MEMORY),
    int(NodeType.MEM_STORE_NODE): (2, MEMORY),
}
_CHAKRA_STREAMS = {0: "compute", 1: "communication", 2: "memory"}


def host_compute_mask(trace) -> np.ndarray:
    """COMP nodes that ran on the host (``is_cpu_op`` true) of a trace that also has device COMP
    nodes (``is_cpu_op`` false: GPU kernels): not device activity, as a Kineto trace's CPU ops
    are not. A trace of host ops only (a CPU job) keeps them all: they are its compute."""
    cpu, has = trace.attr_array("is_cpu_op", bool)
    comp = trace.types == int(NodeType.COMP_NODE)
    if not (comp & has & ~cpu).any():
        return np.zeros(comp.size, bool)
    return comp & has & cpu


def from_chakra(trace, rank: int, start=None, end=None, source: str = "recorded", offset_ns: int = 0) -> RankTimeline:
    """A Chakra trace's nodes as device activity, at recorded times (shifted by `offset_ns` onto
    the job's clock) or the given (simulated) ones."""
    types = trace.types.astype(np.int64)
    stream = np.full(types.size, -1, np.int64)
    kind = np.zeros(types.size, np.uint8)
    for ty, (s, kd) in _STREAM_OF.items():
        m = types == ty
        stream[m], kind[m] = s, kd
    # a converted GPU copy or set ("Memcpy DtoD ...", "Memset ...": a COMP node on a stream) is
    # memory time, as the Kineto file's gpu_memcpy / gpu_memset events are
    on_stream = trace.attr_array("stream", np.int64)[1] & (types == int(NodeType.COMP_NODE))
    if on_stream.any():
        memory_name = np.array([bool(_MEMORY_KERNEL.match(n)) for n in trace.names], bool)
        mem = on_stream & memory_name[trace.name_codes]
        stream[mem], kind[mem] = 2, MEMORY
    if start is None:
        start = trace.start.astype(np.int64) * 1000 + offset_ns
        end = start + trace.duration.astype(np.int64) * 1000
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    keep = (stream >= 0) & (start >= 0) & (end >= start) & ~host_gap_mask(trace)  # `[host]`: no device ran it
    keep &= ~host_compute_mask(trace) & ~trace.attr_array("duration_unknown", bool)[1]  # (no device time known)
    names, codes = list(trace.names), trace.name_codes[keep].astype(np.int32)
    nbytes = np.where(kind[keep] == COMM, trace.comm_size[keep].astype(np.int64), -1)
    n = int(keep.sum())
    neg = np.full(n, -1, np.int64)
    window = (int(start[keep].min()), int(end[keep].max())) if n else (0, 0)
    t = RankTimeline(
        rank, source, names, stream[keep], start[keep], end[keep] - start[keep], codes, kind[keep],
        neg, neg.copy(), neg.copy(), neg.copy(), nbytes, window, stream_names=dict(_CHAKRA_STREAMS),
    )  # fmt: skip
    return _sorted(t)


def from_workload(wl, result=None) -> JobTimeline:
    """Every rank of a Chakra workload, at the simulated times of `result` (a `SimResult` with
    per-node times) when given, else at the recorded times."""
    out = {}
    offsets = rank_offsets_ns(wl) if result is None else {}
    for r, t in wl.traces.items():
        if result is not None:
            nodes = getattr(result, "nodes", {}) or {}
            if r not in nodes:
                raise ChakraError(f"rank {r}: the simulation result holds no per-node times for it")
            s, e, _ = nodes[r]
            ran = (result.traces or {}).get(r, t)
            out[r] = from_chakra(ran, r, s, e, source="simulated")
        else:
            out[r] = from_chakra(t, r, offset_ns=offsets.get(r, 0))
    return JobTimeline(out)


# ---------------------------------------------------------------- paths
def from_kineto_files(source, say=None) -> JobTimeline:
    """Read and reduce each rank's Kineto trace: the files `io.collect_folder.kineto_files` names
    (files as given, or one folder), ranked as the Kineto converter ranks them (`trace_rank`)."""
    out: dict[int, RankTimeline] = {}
    paths: dict[int, Path] = {}
    for k, p in enumerate(kineto_files(source)):
        if say:
            say(str(p))
        kin = read_for_devices(p)
        rank = trace_rank(kin, p, k, paths)
        paths[rank] = p
        out[rank] = from_kineto(kin, rank)
    return JobTimeline(dict(sorted(out.items())))
