"""Join a PyTorch host execution trace (ET) to its Kineto trace, and attach GPU work.

`link` takes the host side as plain arrays (one row per ET node: id, rf_id, name), so it
does not depend on how the ET was read, and a `KinetoTrace` (`io.kineto.read_kineto`).

Host op -> Kineto CPU event (``cpu_op`` / ``user_annotation`` complete events):

- ``rf_id`` (method 1): ET attribute ``rf_id`` == Kineto ``args["Record function id"]``.
  Both are the RecordFunction handle of the same call, so the join is exact. It is used
  whenever the Kineto trace carries "Record function id" (all our torch 2.13 samples do,
  and there 100% of the host ops that have a Kineto counterpart match; the 2023 ``param``
  GPU traces do not).
- ``external_id`` (method 2), for older Kineto traces without "Record function id":
  ``host_ext_ids`` (default: the ET ``rf_id``) == Kineto ``args["External id"]``, accepted
  only when the names agree. External id is the profiler's own per-session op counter, not
  the RecordFunction handle: it equals rf_id only while both counters advance together from
  the start of the first profiling session, so on real traces only part of the ops match.
  On ``param/linear_{et,kineto}`` (ET schema 1.0.1) ET ``rf_id`` gives 928 candidate
  events, 218 with the same name (the first 171 ops in a row, then sporadic), and the ET node
  ``id`` gives 931 candidates of which only 131 share the name: ``rf_id`` is the host field
  that tracks External id, and the name check is what keeps the join honest. (The 3 host
  rows without a candidate are the synthetic thread/process nodes, rf_id 0.)

GPU work -> launching host op: a ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` event has the
``correlation`` of the runtime call (``cuda_runtime`` / ``cuda_driver``) that launched it.
The runtime call is attached to a CPU op by its ``External id`` when that names a CPU op that
encloses the call in time on the same thread (method 1: Kineto's documented link; we have no
recent GPU sample to confirm it on, a synthetic test covers it), otherwise to the innermost
CPU op that encloses it (method 2: the 2023 ``param`` GPU traces write each runtime call's
own correlation id as its "External id", which names no CPU op). That CPU op gives the
host row; a CPU op with no host row (the ET may lack it) defers to its nearest enclosing CPU
op that has one.

`interval_parents` (innermost enclosing interval per thread) is also what repairs call-tree
parents around asynchronous collectives.

`link` is one join on one key; `convert.linking.link_host` runs every method in turn (adding
External ids under a constant offset and the alignment of the op order, `convert.sequences`)
and is what the converter uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..io.kineto import CPU_CATS, GPU_CATS, RUNTIME_CATS, KinetoTrace
from ..io.nesting import interval_parents
from ..table import Column, Table, Tabular, categorical

__all__ = [
    "GPU_ENCLOSING",
    "GPU_EXTERNAL_ID",
    "Link",
    "METHOD_ALIGN",
    "METHOD_EXTERNAL_ID",
    "METHOD_EXTERNAL_OFFSET",
    "METHOD_NAMES",
    "METHOD_NONE",
    "METHOD_RF_ID",
    "finish_link",
    "link",
]

METHOD_NONE, METHOD_RF_ID, METHOD_EXTERNAL_ID, METHOD_EXTERNAL_OFFSET, METHOD_ALIGN = 0, 1, 2, 3, 4
METHOD_NAMES = {
    METHOD_NONE: "",
    METHOD_RF_ID: "rf_id",
    METHOD_EXTERNAL_ID: "external_id",
    METHOD_EXTERNAL_OFFSET: "external_id_offset",
    METHOD_ALIGN: "align",
}
#: How a GPU event's runtime call was attached to a CPU op.
GPU_EXTERNAL_ID, GPU_ENCLOSING = 1, 2
GPU_METHOD_NAMES = {0: "", GPU_EXTERNAL_ID: "external_id", GPU_ENCLOSING: "enclosing"}


def _climb(parent: np.ndarray, start: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """For each index in ``start`` (-1 allowed), the nearest of itself and its ancestors with
    ``ok`` True; -1 if none. Vectorized over all starts, one level per step."""
    cur = np.asarray(start, np.int64).copy()
    while True:
        live = cur >= 0
        bad = np.zeros(cur.size, bool)
        bad[live] = ~ok[cur[live]]
        if not bad.any():
            return cur
        cur[bad] = parent[cur[bad]]


def _take(a: np.ndarray, idx: np.ndarray, fill: Any = -1) -> np.ndarray:
    """a[idx] where idx >= 0, ``fill`` elsewhere (idx may be empty or all -1 with a empty)."""
    idx = np.asarray(idx, np.int64)
    out = np.full(idx.shape, fill, dtype=a.dtype if fill is not None else object)
    m = idx >= 0
    out[m] = a[idx[m]]
    return out


def _names(codes: dict[int, str]) -> np.ndarray:
    """The names of codes 0, 1, ... as an array to index with codes."""
    return np.asarray([codes[i] for i in range(len(codes))], dtype=object)


def _first_lookup(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Sorted unique keys (>= 0) and the position of the first occurrence of each; and the
    number of extra occurrences (duplicates)."""
    pos = np.flatnonzero(keys >= 0)
    k = keys[pos]
    u, first = np.unique(k, return_index=True)
    return u, pos[first], int(k.size - u.size)


def _lookup(u: np.ndarray, where: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Position (from `_first_lookup`) for each query key; -1 where absent."""
    out = np.full(q.size, -1, np.int64)
    if u.size == 0 or q.size == 0:
        return out
    i = np.searchsorted(u, q)
    i_c = np.minimum(i, u.size - 1)
    hit = (q >= 0) & (i < u.size) & (u[i_c] == q)
    out[hit] = where[i_c[hit]]
    return out


# ---------------------------------------------------------------------- result
@dataclass(eq=False)
class Link(Tabular):
    """The join of one host trace with its Kineto trace.

    Host side (one entry per host row, in the order given to `link`): ``event`` (Kineto row,
    -1 if unmatched), ``method`` (int8: 0 none, 1 rf_id, 2 external_id, 3 external_id under an
    offset, 4 order alignment; the last two from `convert.linking.link_host`), ``start`` and
    ``duration`` (int64 ns on the Kineto clock, -1 if unmatched).

    GPU side (one entry per ``kernel``/``gpu_memcpy``/``gpu_memset`` event, in file order):
    ``gpu_event`` (Kineto row), ``gpu_runtime`` (row of the launching runtime call, -1),
    ``gpu_cpu_event`` (row of the CPU op it is attached to, -1), ``gpu_launch_method`` (int8:
    0 none, 1 the runtime call's External id, 2 the innermost enclosing CPU op),
    ``gpu_host`` (host row, -1), ``gpu_stream``, ``gpu_device``, ``gpu_start``,
    ``gpu_duration`` (ns).

    ``host_of_event`` maps every Kineto row to the host row matched to it (-1).
    ``counts`` summarizes both sides; ``unmatched_names`` counts unmatched host ops by name.
    """

    kineto: KinetoTrace
    host_ids: np.ndarray
    host_names: np.ndarray
    key: str
    event: np.ndarray
    method: np.ndarray
    start: np.ndarray
    duration: np.ndarray
    host_of_event: np.ndarray
    gpu_event: np.ndarray
    gpu_runtime: np.ndarray
    gpu_cpu_event: np.ndarray
    gpu_launch_method: np.ndarray
    gpu_host: np.ndarray
    gpu_stream: np.ndarray
    gpu_device: np.ndarray
    gpu_start: np.ndarray
    gpu_duration: np.ndarray
    counts: dict = field(default_factory=dict)
    unmatched_names: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        c = self.counts
        return (
            f"<Link {c.get('matched', 0)}/{c.get('host_rows', 0)} host ops matched by {self.key}, "
            f"{c.get('gpu_with_host', 0)}/{c.get('gpu_events', 0)} GPU events attached to host ops>"
        )

    @property
    def matched(self) -> np.ndarray:
        return self.event >= 0

    def to_table(self, kind: str = "host") -> Table:
        """The host rows (``kind="host"``) or the GPU events (``"gpu"``), with how each was linked
        (``method``, ``launch_method``: categorical)."""
        names = np.asarray(self.kineto.names, dtype=object)
        if kind == "host":
            method, methods = categorical(_names(METHOD_NAMES)[self.method])
            return Table(
                {
                    "host_id": self.host_ids,
                    "name": self.host_names,
                    "event": self.event,
                    "method": method,
                    "start": self.start,
                    "duration": self.duration,
                },
                title="host rows",
                spec={"method": Column(categories=methods)},
            )
        if kind == "gpu":
            k = self.kineto
            cats = np.asarray(k.cats, dtype=object)
            ev = self.gpu_event
            host_id = _take(np.asarray(self.host_ids, np.int64), self.gpu_host)
            launch, launches = categorical(_names(GPU_METHOD_NAMES)[self.gpu_launch_method])
            return Table(
                {
                    "event": ev,
                    "cat": cats[k.cat[ev]],
                    "name": names[k.name[ev]],
                    "stream": self.gpu_stream,
                    "device": self.gpu_device,
                    "start": self.gpu_start,
                    "duration": self.gpu_duration,
                    "correlation": k.correlation[ev],
                    "runtime_event": self.gpu_runtime,
                    "cpu_event": self.gpu_cpu_event,
                    "cpu_name": _take(names, _take(k.name, self.gpu_cpu_event), None),
                    "launch_method": launch,
                    "host_row": self.gpu_host,
                    "host_id": host_id,
                },
                title="GPU events",
                spec={"launch_method": Column(categories=launches)},
            )
        raise ValueError(f"kind must be 'host' or 'gpu', not {kind!r}")


# ---------------------------------------------------------------------- link
def link(
    host_ids: Any,
    host_rf_ids: Any,
    host_names: Sequence[str] | np.ndarray,
    kineto: KinetoTrace,
    *,
    host_ext_ids: Any = None,
    method: str = "auto",
    check_names: bool = True,
) -> Link:
    """Match host ops to Kineto CPU events and attach GPU events to host ops.

    ``host_ids``: the ET node ids (kept for output only). ``host_rf_ids``: int64, the ET
    ``rf_id`` attribute, -1 where missing. ``host_names``: the ET node names.
    ``host_ext_ids``: the host values to compare with Kineto "External id" when the Kineto
    trace has no "Record function id" (default: ``host_rf_ids``; see the module docstring).
    ``method``: "auto" (rf_id if the Kineto trace has any "Record function id", else
    external_id), "rf_id" or "external_id". ``check_names``: reject candidate pairs whose
    names differ (they are counted as ``unmatched_name_mismatch``).
    """
    host_ids = np.asarray(host_ids)
    host_rf_ids = np.asarray(host_rf_ids, np.int64)
    host_names = np.asarray(list(host_names) if not isinstance(host_names, np.ndarray) else host_names, dtype=object)
    n = host_ids.size
    if host_rf_ids.size != n or host_names.size != n:
        raise ValueError(f"host arrays differ in length: ids {n}, rf_ids {host_rf_ids.size}, names {host_names.size}")
    k = kineto
    is_x = k.ph == ord("X")
    cpu_rows = np.flatnonzero(k.mask(CPU_CATS) & is_x)

    if method == "auto":
        method = "rf_id" if np.any(k.rf_id[cpu_rows] >= 0) else "external_id"
    if method == "rf_id":
        kin_key, host_key, code = k.rf_id[cpu_rows], host_rf_ids, METHOD_RF_ID
    elif method == "external_id":
        hk = host_rf_ids if host_ext_ids is None else np.asarray(host_ext_ids, np.int64)
        if hk.size != n:
            raise ValueError("host_ext_ids differs in length from host_ids")
        kin_key, host_key, code = k.external_id[cpu_rows], hk, METHOD_EXTERNAL_ID
    else:
        raise ValueError(f"method must be 'auto', 'rf_id' or 'external_id', not {method!r}")

    u, where, kin_dups = _first_lookup(kin_key)
    pos = _lookup(u, where, host_key)  # position in cpu_rows
    cand = _take(cpu_rows, pos)
    has_cand = cand >= 0
    kin_names = np.asarray(k.names, dtype=object)
    name_ok = np.ones(n, bool)
    if check_names and has_cand.any():
        name_ok[has_cand] = kin_names[k.name[cand[has_cand]]] == host_names[has_cand]
    matched = has_cand & name_ok
    event = np.where(matched, cand, -1).astype(np.int64)
    meth = np.where(matched, code, METHOD_NONE).astype(np.int8)
    counts: dict[str, Any] = {
        "key": method,
        "host_rows": int(n),
        "matched": int(matched.sum()),
        "matched_rf_id": int(matched.sum()) if code == METHOD_RF_ID else 0,
        "matched_external_id": int(matched.sum()) if code == METHOD_EXTERNAL_ID else 0,
        "unmatched": int(n - matched.sum()),
        "unmatched_no_key": int(np.count_nonzero(host_key < 0)),
        "unmatched_not_in_kineto": int(np.count_nonzero((host_key >= 0) & ~has_cand)),
        "unmatched_name_mismatch": int(np.count_nonzero(has_cand & ~name_ok)),
        "kineto_duplicate_keys": kin_dups,
    }
    return finish_link(k, host_ids, host_names, method, event, meth, counts)


def finish_link(
    k: KinetoTrace, host_ids: Any, host_names: np.ndarray, key: str, event: np.ndarray, meth: np.ndarray, counts: dict
) -> Link:
    """The `Link` of host rows already matched to Kineto CPU events (``event``, -1: none; ``meth``
    the method of each): times, the reverse map and the GPU work attached to host ops. Shared by
    `link` (one key) and `convert.linking.link_host` (every method in turn)."""
    host_ids = np.asarray(host_ids)
    n = event.size
    matched = event >= 0
    is_x = k.ph == ord("X")
    cpu_rows = np.flatnonzero(k.mask(CPU_CATS) & is_x)
    start = _take(k.ts, event)
    duration = _take(k.dur, event)
    host_of_event = np.full(len(k), -1, np.int64)
    m_rows = np.flatnonzero(matched)
    # first host row wins if several point at one event
    host_of_event[event[m_rows][::-1]] = m_rows[::-1]
    shared = int(m_rows.size - np.unique(event[m_rows]).size)
    unmatched_names = Counter(host_names[~matched].tolist())
    cpu_matched = int(np.count_nonzero(host_of_event[cpu_rows] >= 0))
    counts.update(
        {
            "host_rows": int(n),
            "matched": int(matched.sum()),
            "unmatched": int(n - matched.sum()),
            "host_rows_sharing_an_event": shared,
            "kineto_cpu_events": int(cpu_rows.size),
            "kineto_cpu_matched": cpu_matched,
            "kineto_cpu_unmatched": int(cpu_rows.size - cpu_matched),
        }
    )
    gpu = _attach_gpu(k, cpu_rows, is_x, host_of_event, counts)
    return Link(
        kineto=k,
        host_ids=host_ids,
        host_names=host_names,
        key=key,
        event=event,
        method=meth,
        start=start.astype(np.int64),
        duration=duration.astype(np.int64),
        host_of_event=host_of_event,
        counts=counts,
        unmatched_names=dict(unmatched_names.most_common()),
        **gpu,
    )


def _attach_gpu(
    k: KinetoTrace, cpu_rows: np.ndarray, is_x: np.ndarray, host_of_event: np.ndarray, counts: dict
) -> dict[str, np.ndarray]:
    gpu_rows = np.flatnonzero(k.mask(GPU_CATS) & is_x)
    rt_rows = np.flatnonzero(k.mask(RUNTIME_CATS) & is_x)
    g = gpu_rows.size

    # kernel -> runtime call, by correlation
    u, where, rt_dups = _first_lookup(k.correlation[rt_rows])
    pos = _lookup(u, where, k.correlation[gpu_rows])
    gpu_rt = _take(rt_rows, pos)

    # nesting of host-side events (CPU ops and runtime calls) per thread
    sub = np.concatenate([cpu_rows, rt_rows])
    is_cpu_sub = np.zeros(sub.size, bool)
    is_cpu_sub[: cpu_rows.size] = True
    sub_of_row = np.full(len(k), -1, np.int64)
    sub_of_row[sub] = np.arange(sub.size)
    if sub.size and g:  # (no GPU work, nothing to attach: skip the nesting)
        keys = k.thread_keys()[sub]
        par = interval_parents(k.ts[sub], k.ts[sub] + np.maximum(k.dur[sub], 0), keys)
    else:
        keys = np.zeros(0, np.int64)
        par = np.zeros(0, np.int64)

    # runtime call -> CPU op: (1) its External id names an enclosing CPU op on the same thread
    has_rt = gpu_rt >= 0
    rt_used = gpu_rt[has_rt]
    u_c, where_c, _ = _first_lookup(k.external_id[cpu_rows])
    ext_pos = _lookup(u_c, where_c, k.external_id[rt_used])
    ext_cpu = _take(cpu_rows, ext_pos)
    ok = ext_cpu >= 0
    if ok.any():
        r, c = rt_used[ok], ext_cpu[ok]
        same_thread = keys[sub_of_row[r]] == keys[sub_of_row[c]]
        encloses = (k.ts[c] <= k.ts[r]) & (k.ts[r] + np.maximum(k.dur[r], 0) <= k.ts[c] + np.maximum(k.dur[c], 0))
        ok[ok] = same_thread & encloses
    # (2) else the innermost enclosing CPU op
    enc_sub = _climb(par, par[sub_of_row[rt_used]] if rt_used.size else np.zeros(0, np.int64), is_cpu_sub)
    enc_cpu = _take(sub, enc_sub)
    launch = np.where(ok, ext_cpu, enc_cpu)
    lmethod = np.where(ok, GPU_EXTERNAL_ID, np.where(enc_cpu >= 0, GPU_ENCLOSING, 0)).astype(np.int8)
    gpu_cpu = np.full(g, -1, np.int64)
    gpu_cpu[has_rt] = launch
    gpu_lm = np.zeros(g, np.int8)
    gpu_lm[has_rt] = lmethod

    # CPU op -> host row, deferring to the nearest enclosing CPU op that has one
    has_cpu = gpu_cpu >= 0
    matched_sub = np.zeros(sub.size, bool)
    matched_sub[: cpu_rows.size] = host_of_event[cpu_rows] >= 0
    anc = _climb(par, sub_of_row[gpu_cpu[has_cpu]], matched_sub)
    gpu_host = np.full(g, -1, np.int64)
    gpu_host[has_cpu] = _take(host_of_event, _take(sub, anc))
    direct = np.zeros(g, bool)
    direct[has_cpu] = host_of_event[gpu_cpu[has_cpu]] >= 0

    cats = np.asarray(k.cats, dtype=object)
    by_cat = Counter(cats[k.cat[gpu_rows]].tolist())
    agree = int(np.count_nonzero(ok & (ext_cpu == enc_cpu)))
    counts.update(
        {
            "gpu_events": int(g),
            "gpu_by_cat": dict(by_cat),
            "gpu_with_runtime": int(has_rt.sum()),
            "gpu_without_runtime": int(g - has_rt.sum()),
            "gpu_with_cpu_op": int(has_cpu.sum()),
            "gpu_cpu_by_external_id": int(np.count_nonzero(gpu_lm == GPU_EXTERNAL_ID)),
            "gpu_cpu_by_enclosing": int(np.count_nonzero(gpu_lm == GPU_ENCLOSING)),
            "gpu_external_id_agrees_with_enclosing": agree,
            "gpu_with_host": int(np.count_nonzero(gpu_host >= 0)),
            "gpu_host_direct": int(np.count_nonzero(direct)),
            "gpu_host_via_ancestor": int(np.count_nonzero((gpu_host >= 0) & ~direct)),
            "runtime_events": int(rt_rows.size),
            "runtime_duplicate_correlations": rt_dups,
        }
    )
    return {
        "gpu_event": gpu_rows.astype(np.int64),
        "gpu_runtime": gpu_rt.astype(np.int64),
        "gpu_cpu_event": gpu_cpu,
        "gpu_launch_method": gpu_lm,
        "gpu_host": gpu_host,
        "gpu_stream": k.stream[gpu_rows],
        "gpu_device": k.device[gpu_rows],
        "gpu_start": k.ts[gpu_rows],
        "gpu_duration": k.dur[gpu_rows],
    }
