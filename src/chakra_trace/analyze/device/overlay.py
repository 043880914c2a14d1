"""The job's critical path drawn over one rank's Kineto trace, for Perfetto / chrome://tracing.

The output is a copy of the Kineto trace in which every event on the critical path carries
``args["critical"] = true``, and consecutive path events are linked by flow events (``ph`` s/f,
cat ``critical_path``), so the path shows as a chain of arrows. Nothing else changes.

The path is `analyze.critical_path.job_critical_path` on the Chakra job converted from the same
run: a workload given (any rank of it, e.g. a `chakra collect` folder), the host trace with
this Kineto trace (`convert.pytorch`), or this Kineto trace alone (`convert.profiler`). Each
path node of this rank is placed on a Kineto event through what the converter keeps: the
``rf_id`` of a host op (the Kineto "Record function id", where the trace has it) and the node's
name at its recorded start (the converter's µs, from the Kineto ``ts`` less the trace's time
origin), on its thread or stream. ``[host]`` nodes (time between host ops) have no Kineto event
by construction (``gaps``); other nodes that match nothing are counted as ``unplaced``.
"""

from __future__ import annotations

import io
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np

from ...convert.host_rows import ns_to_us
from ...convert.profiler import convert_kineto_trace
from ...convert.pytorch import convert_pytorch
from ...convert.report import ConversionWarning
from ...errors import ChakraError
from ...io.et import atomic_output
from ...io.kineto import CPU_CATS, GPU_CATS, KinetoTrace, read_kineto
from ...io.stream import open_binary
from ...io.workload import Workload
from ...schema.resources import host_gap_mask
from ...schema.trace import Trace
from ..critical_path import job_critical_path

FLOW_CAT = "critical_path"


@dataclass
class Overlay:
    """What `critical_path_overlay` wrote."""

    out_path: str
    rank: int
    source: str  # where the path came from: "workload", "host+kineto" or "kineto"
    length_ns: int  # the job's critical path
    path_nodes: int  # operations on the path, every rank
    on_rank: int  # of them on this rank (the others lie in other ranks' traces)
    marked: int  # Kineto events marked critical
    flows: int  # arrows added (one "s" and one "f" event each)
    gaps: int  # [host] nodes on this rank's path: no Kineto event by construction
    unplaced: int  # other path nodes of this rank that no Kineto event matches
    unplaced_names: list[str] = field(default_factory=list)  # the first few

    def to_dict(self) -> dict:
        return dict(vars(self))


def _rank_of(kin: KinetoTrace, path: str) -> int:
    if kin.rank is not None:
        return int(kin.rank)
    m = re.search(r"rank[-_]?(\d+)", os.path.basename(path), re.IGNORECASE)
    return int(m.group(1)) if m else 0


def _workload(kineto_path: str, et_path, workload, rank: int) -> tuple[Workload, str]:
    if workload is not None:
        if isinstance(workload, (str, os.PathLike)):
            workload = Workload.open(workload)
        return Workload.of(workload), "workload"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConversionWarning)
        if et_path is not None:
            return Workload({rank: convert_pytorch(et_path, kineto_path, rank=rank)[0]}), "host+kineto"
        try:
            return Workload({rank: convert_kineto_trace(kineto_path, rank=rank)[0]}), "kineto"
        except ChakraError as e:
            raise ChakraError(f"{kineto_path}: the Kineto-only conversion gives no critical path: {e}") from None


def critical_path_overlay(
    kineto_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    et_path: str | os.PathLike | None = None,
    workload: Workload | Trace | str | os.PathLike | None = None,
    rank: int | None = None,
) -> Overlay:
    """Write `kineto_path` to `out_path` (gzip when it ends in .gz; atomically) with the critical
    path marked on it. The path comes from `workload` when given, else from `et_path` with this
    trace, else from this trace alone; `rank` is this trace's rank (default: its
    ``distributedInfo``, else ``rank<N>`` in the file name, else 0). Raises ChakraError when no
    path can be had (a Kineto trace with neither CPU ops nor GPU work, a workload without recorded
    times)."""
    kineto_path, out_path = os.fspath(kineto_path), os.fspath(out_path)
    kin = read_kineto(kineto_path)
    if rank is None:
        rank = _rank_of(kin, kineto_path)
    wl, source = _workload(kineto_path, et_path, workload, rank)
    if rank not in wl.traces:
        raise ChakraError(f"{kineto_path}: rank {rank} is not in the workload (ranks {sorted(wl.traces)})")
    try:
        path = job_critical_path(wl)
    except ChakraError as e:
        what = "the Kineto-only conversion" if source == "kineto" else "the workload"
        raise ChakraError(f"{kineto_path}: {what} gives no critical path: {e}") from None
    c = path.columns
    rows = c["row"][c["rank"] == rank] if len(path) else np.zeros(0, np.int64)
    trace = wl.traces[rank]
    placed = _place(trace, rows, kin)
    names = trace.name_array[rows]
    gap = host_gap_mask(trace)[rows]
    miss = (placed < 0) & ~gap
    chain = placed[placed >= 0]
    if chain.size:
        chain = chain[np.concatenate([[True], chain[1:] != chain[:-1]])]
    flows = _write(kineto_path, out_path, chain, kin)
    return Overlay(
        out_path, int(rank), source, int(path.length_ns), len(path), int(rows.size), int(np.unique(chain).size),
        flows, int(gap.sum()), int(miss.sum()), [str(n) for n in names[miss][:10]],
    )  # fmt: skip


def _place(trace: Trace, rows: np.ndarray, kin: KinetoTrace) -> np.ndarray:
    """The Kineto row of each of `rows` (nodes of `trace`), -1 where none is found."""
    out = np.full(rows.size, -1, np.int64)
    origin = trace.time_origin_ns
    cand = np.flatnonzero(kin.mask(CPU_CATS + GPU_CATS, "X"))
    if not rows.size or not cand.size:
        return out
    lo_us = int(ns_to_us(np.array(origin - (kin.base_time_ns or 0)))) if origin is not None else None
    us = ns_to_us(kin.ts[cand])
    dur_us = ns_to_us(kin.end[cand]) - us
    code_of = {n: i for i, n in enumerate(kin.names)}
    rf, has_rf = trace.attr_array("rf_id", np.int64)
    tid, has_tid = trace.attr_array("tid", np.int64)
    stream, has_stream = trace.attr_array("stream", np.int64)
    krf = kin.rf_id[cand]
    by_rf = {int(r): int(k) for r, k in zip(krf[krf >= 0].tolist(), cand[krf >= 0].tolist())}
    order = np.argsort(us, kind="stable")
    us_sorted = us[order]
    names = trace.name_array
    for i, row in enumerate(rows.tolist()):
        code = code_of.get(str(names[row]), -1)
        if has_rf[row] and int(rf[row]) in by_rf and kin.name[by_rf[int(rf[row])]] == code:
            out[i] = by_rf[int(rf[row])]
            continue
        if lo_us is None:
            continue
        at = int(trace.start[row]) + lo_us
        a, b = np.searchsorted(us_sorted, at, "left"), np.searchsorted(us_sorted, at, "right")
        if a == b:
            continue
        j = order[a:b]  # candidates starting in the same µs: prefer the name, the lane, the length
        k = cand[j]
        lane = kin.stream[k] == stream[row] if has_stream[row] else kin.tid[k] == tid[row] if has_tid[row] else True
        score = (kin.name[k] == code) * 4 + np.asarray(lane) * 2 + (dur_us[j] == int(trace.duration[row]))
        best = int(np.argmax(score))
        if score[best] >= 5 or (score[best] >= 4 and code >= 0):  # the name and (lane or length), or the name alone
            out[i] = k[best]
    return out


def _write(kineto_path: str, out_path: str, chain: np.ndarray, kin: KinetoTrace) -> int:
    """Copy the trace with the chain's events marked and linked; returns the arrows added."""
    f, _ = open_binary(kineto_path)
    with f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    if len(events) != len(kin):
        raise ChakraError(f"{kineto_path}: {len(events)} events, {len(kin)} read: the file changed while read")
    for k in chain.tolist():
        args = events[k].get("args")
        if not isinstance(args, dict):
            args = events[k]["args"] = {}
        args["critical"] = True
    fid = int(kin.flow_id.max()) + 1 if kin.flow_id.size and kin.flow_id.max() >= 0 else 1
    flows = 0
    for a, b in zip(chain[:-1].tolist(), chain[1:].tolist()):
        src, dst = events[a], events[b]
        common = {"id": fid + flows, "cat": FLOW_CAT, "name": FLOW_CAT}
        events.append({"ph": "s", "pid": src.get("pid"), "tid": src.get("tid"), "ts": src["ts"], **common})
        events.append({"ph": "f", "bp": "e", "pid": dst.get("pid"), "tid": dst.get("tid"), "ts": dst["ts"], **common})
        flows += 1
    with atomic_output(Path(out_path)) as out:
        w = io.TextIOWrapper(cast(BinaryIO, out), encoding="utf-8")
        json.dump(doc, w)
        w.flush()
        w.detach()
    return flows


__all__ = ["FLOW_CAT", "Overlay", "critical_path_overlay"]
