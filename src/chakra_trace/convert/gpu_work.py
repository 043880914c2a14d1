"""A rank's GPU work from Kineto (kernels, copies and sets with the host ops that launched them,
and the runtime calls where the host waited for the GPU), and the per-thread index of host events
that places a collective's issue and join."""

from __future__ import annotations

import numpy as np

from ..io.comm_kernels import is_comm_kernel
from ..io.kineto import RUNTIME_CATS
from ..io.kineto_formats import is_blocking_call
from .conservation import AFTER, BEFORE, KEPT, UNTIMED, GpuTime, account
from .host_rows import name_mask

_JOIN_NS = 100_000  # a thread that resumes this soon after asynchronous work ends was waiting for it
_CONCURRENT_NS = 1_000  # work that overlaps what ran before it on its stream by more ran beside it


def concurrent_order(
    key: np.ndarray, s: np.ndarray, e: np.ndarray, prev: np.ndarray, on: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stream order where work of one stream ran side by side (MTIA's ``dma_request``s of one
    copy overlap on their stream; a CUDA stream runs one thing at a time): events (in start
    order, `on` the streams; `prev` the one before each on its key) fall into runs that overlap
    each other by more than `_CONCURRENT_NS`; each event of a run comes after the one of the
    run before that ended last, and the run's first after every one of it. Returns (prev,
    extra later events, the events they come after): no edge makes work wait for work that
    ran beside it, and nothing is unordered. Streams without such overlap keep `prev`."""
    prev = prev.copy()
    ks = np.flatnonzero(on)
    if ks.size < 2:
        return prev, np.zeros(0, np.int64), np.zeros(0, np.int64)
    later: list[np.ndarray] = []
    before: list[np.ndarray] = []
    ks = ks[np.argsort(key[ks], kind="stable")]  # per stream, in start order
    for g in np.split(ks, np.flatnonzero(np.diff(key[ks])) + 1):
        reach = np.maximum.accumulate(e[g])
        new = np.r_[True, s[g[1:]] + _CONCURRENT_NS >= reach[:-1]]
        if new.all():
            continue
        run = np.cumsum(new) - 1
        last = np.zeros(int(run[-1]) + 1, np.int64)  # the event of each run that ended last
        by_end = np.lexsort((e[g], run))
        last[run[by_end]] = g[by_end]
        tail = run > 0
        prev[g[tail]] = last[run[tail] - 1]
        prev[g[~tail]] = prev[g[0]]  # (the first run: none of it waits for another)
        first = g[new]
        others = g[(run < run[-1]) & (g != last[run])]  # not the run's last: before the next run's first
        later.append(first[run[np.isin(g, others)] + 1])
        before.append(others)
    if not later:
        return prev, np.zeros(0, np.int64), np.zeros(0, np.int64)
    return prev, np.concatenate(later), np.concatenate(before)


class _ThreadIndex:
    """Host events of each thread in time order, for the few lookups communication needs."""

    def __init__(self, host, th, s, e, ev_ids):
        self.th, self.s, self.e, self.ids = th, s, e, ev_ids
        ks = np.flatnonzero(host)
        order = np.argsort(th[ks], kind="stable")
        ks = ks[order]
        cut = np.flatnonzero(np.diff(th[ks])) + 1
        self.by = {int(th[g[0]]): g for g in np.split(ks, cut) if g.size}

    def last_before(self, thread: int, k: int, t: int) -> int | None:
        """The node that ran last on `thread` before time t, among events before position k."""
        pos = self.by.get(thread)
        if pos is None:
            return None
        n = int(np.searchsorted(pos, k))
        j = int(np.searchsorted(self.e[pos[:n]], t, "right"))  # a thread's nodes do not overlap
        return int(self.ids[pos[j - 1]]) if j else None

    def joiner(self, thread: int, k: int, t: int) -> int | None:
        """The node on `thread` (after position k) that waited for work ending at time t: the
        first one that starts at or after t, when it starts within `_JOIN_NS` of t (the thread
        sat waiting); otherwise the thread was busy and joins the work only at its last node
        (DDP waits for its buckets at the end of backward, not where each happened to end)."""
        pos = self.by.get(thread)
        if pos is None:
            return None
        j = max(int(np.searchsorted(pos, k, "right")), int(np.searchsorted(self.s[pos], t, "left")))
        if j >= pos.size:
            return None
        if self.s[pos[j]] - t > _JOIN_NS:
            j = pos.size - 1
        return int(self.ids[pos[j]])


class GpuWork:
    """GPU kernels, copies and sets from Kineto, with the host rows that launched them."""

    def __init__(self, kin, lk):
        self.kin = kin
        self.lk = lk

    def launch_times(self) -> np.ndarray:
        """When each GPU activity was launched (ns): its runtime call's start; its own start where
        no launch was recorded (kernels of a replayed graph on some platforms)."""
        rt = self.lk.gpu_runtime
        return np.where(rt >= 0, self.kin.ts[np.maximum(rt, 0)], self.lk.gpu_start).astype(np.int64)

    def launch_span(self) -> tuple[int, int] | None:
        """First and last launch of GPU work (ns), None without any: where the recorded window
        lies when no step bounds it."""
        t = self.launch_times()
        return (int(t.min()), int(t.max())) if t.size else None

    def fate(self, window: tuple[int, int] | None) -> np.ndarray:
        """Per GPU activity: `KEPT`, or why it is left out (`conservation.REASONS`): launched
        before or after the window (None: there is no recorded window). Work launched inside
        the window is kept wherever it runs (the GPU runs behind the host), even without a
        converted op that launched it: it becomes a node of its own on its stream."""
        lk = self.lk
        out = np.full(lk.gpu_event.size, KEPT, np.int8)
        if window is None:
            out[:] = UNTIMED
            return out
        t = self.launch_times()
        out[(t < window[0]) | (lk.gpu_start < window[0])] = BEFORE  # (a node never starts before the window)
        out[t > window[1]] = AFTER
        return out

    def account(self, window: tuple[int, int] | None) -> GpuTime:
        """GPU time per stream in the file and kept in the window (`conservation.GpuTime`)."""
        lk = self.lk
        s = lk.gpu_start.astype(np.int64)
        return account(lk.gpu_device, lk.gpu_stream, s, s + np.maximum(lk.gpu_duration, 0), self.fate(window))

    def hosts_of_comm_kernels(self, window: tuple[int, int] | None = None) -> set[int]:
        """Host ops whose communication a GPU kernel kept in the window does (that kernel becomes
        the collective node; an op whose kernel is left out keeps its own node)."""
        lk, kin = self.lk, self.kin
        comm_code = name_mask(kin.names, kin.name[lk.gpu_event], is_comm_kernel)
        ok = comm_code & (lk.gpu_host >= 0)
        if window is not None:
            ok &= self.fate(window) == KEPT
        return set(lk.gpu_host[ok].tolist())

    def events(self, folded_into: np.ndarray, window: tuple[int, int]) -> dict[str, np.ndarray]:
        """Every GPU activity kept in the window (`fate`): start, end, device, stream, stream_key
        (one code per (device, stream)), krow (Kineto row), hrow (launching host row, -1), node_row
        (the converted op that launched it, -1: none), launch (ns) and thread (the launching
        runtime call's thread, -1: not recorded)."""
        lk = self.lk
        h = lk.gpu_host
        s = lk.gpu_start
        ok = self.fate(window) == KEPT
        dev, stream = lk.gpu_device[ok], lk.gpu_stream[ok]
        pairs = np.stack([dev, stream], axis=1)
        key = np.unique(pairs, axis=0, return_inverse=True)[1].reshape(-1) if ok.any() else np.zeros(0, np.int64)
        hk = h[ok]
        rt = lk.gpu_runtime[ok]
        return {
            "start": s[ok],
            "end": s[ok] + np.maximum(lk.gpu_duration[ok], 0),
            "device": dev,
            "stream": stream,
            "stream_key": key,
            "krow": lk.gpu_event[ok],
            "hrow": hk,
            "node_row": np.where(hk >= 0, folded_into[np.maximum(hk, 0)], -1) if folded_into.size else hk,
            "launch": self.launch_times()[ok],
            "thread": np.where(rt >= 0, self.kin.tid[np.maximum(rt, 0)], -1).astype(np.int64),
        }

    def sync_points(self) -> dict[int, list[tuple[int, int]]]:
        """{thread: [(start, end), ...] sorted} of runtime calls where the host waits for the GPU
        (CUDA, HIP or driver API spelling: `kineto_formats.is_blocking_call`)."""
        kin = self.kin
        out: dict[int, list[tuple[int, int]]] = {}
        names = kin.names
        for r in np.flatnonzero(kin.mask(RUNTIME_CATS)).tolist():
            name = names[kin.name[r]]
            if is_blocking_call(name):
                out.setdefault(int(kin.tid[r]), []).append((int(kin.ts[r]), int(kin.ts[r] + max(kin.dur[r], 0))))
        for calls in out.values():
            calls.sort()
        return out
