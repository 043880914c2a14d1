"""PyTorch execution trace (+ Kineto) -> Chakra: one rank (`convert_pytorch`), a `chakra collect`
folder (`convert_collection`, `read_collection`).

The host ops are linked to their Kineto events (`convert.linking`), ops linked to nothing get
estimated times (`convert.estimate`), and `convert.rank_graph` builds the rank's graph.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import multiprocessing as mp
import os
import warnings
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from ..io.cache import cached_trace
from ..io.collect_folder import collection_files, is_collection
from ..io.collective_names import is_backend_op_name, is_comm_op_name
from ..io.et import read_trace, write_trace
from ..io.kineto import CPU_CATS, read_kineto
from ..io.nesting import interval_parents
from ..io.outputs import file_set
from ..io.pytorch_host import read_host_trace
from ..io.workers import pool_options
from ..io.workload import Progress, Workload, register_source, select_ranks
from ..schema.enums import STEP_BOUNDS, TIME_ORIGIN
from ..schema.groups import resolve_unnamed_groups
from ..schema.trace import Trace
from .estimate import time_unlinked
from .gpu_work import GpuWork
from .host_rows import name_mask, ns_to_us
from .linking import MIN_SIMILARITY, check_same_job, link_host, method_label
from .rank_graph import GraphBuilder
from .report import ConversionReport, ConversionWarning


def convert_pytorch(
    et_path: str | os.PathLike,
    kineto_path: str | os.PathLike | None = None,
    *,
    rank: int | None = None,
    min_similarity: float | None = MIN_SIMILARITY,
) -> tuple[Trace, ConversionReport]:
    """Convert one rank's host execution trace (and its Kineto trace, for timing) to Chakra.

    Host ops are linked to Kineto events by every method of `convert.linking.link_host`; one
    linked to nothing is kept with an estimated time (`convert.estimate`, node attribute
    ``duration_estimated``). Raises `UnrelatedTracesError` when the two files are clearly not
    of one job (`check_same_job`; ``min_similarity=None`` converts anyway).
    """

    report = ConversionReport()
    if kineto_path is not None:  # first: its columns are small, the host trace's peak is not
        kin = read_kineto(kineto_path)
    host = read_host_trace(et_path)
    n = len(host)
    start = np.full(n, -1, np.int64)
    end = np.full(n, -1, np.int64)
    tid = host.tid.copy()
    user_annotation = np.zeros(n, bool)
    estimated = np.zeros(n, bool)
    if kineto_path is not None:
        lk = link_host(host, kin)
        report.linked = _link_summary(lk.counts)
        check_same_job(lk.counts, et_path, kineto_path, min_similarity)
        matched = lk.event >= 0
        start[matched] = lk.start[matched]
        end[matched] = lk.start[matched] + np.maximum(lk.duration[matched], 0)
        tid[matched] = kin.tid[lk.event[matched]]
        user_annotation[matched] = kin.cat[lk.event[matched]] == kin.cat_code("user_annotation")
        steps = kin.steps()
        if not steps and matched.any():  # no ProfilerStep annotations: the span of the linked ops
            steps = [(-1, int(start[matched].min()), int(end[matched].max()))]
        estimated = ~matched & ~host.synthetic
        if rank is None:
            rank = kin.rank
    else:
        steps = []
    conv = GraphBuilder(host, start, end, tid, user_annotation, steps, report)
    if estimated.any():
        _estimate(conv, host, estimated, lk, et_path, report)
    if kineto_path is not None and steps:  # a collective outside the profiler steps is still kept
        comm = np.flatnonzero(name_mask(host.names, host.name, is_comm_op_name) & (conv.end >= 0) & ~host.synthetic)
        if comm.size:
            lo, hi = int(conv.start[comm].min()), int(conv.end[comm].max())
            c = conv.cover
            conv.cover = (lo, hi) if c is None else (min(lo, c[0]), max(hi, c[1]))
    base_ns = None
    if kineto_path is not None:
        base_ns = kin.base_time_ns or 0
        if lk.gpu_event.size:
            conv.gpu = GpuWork(kin, lk)
        conv.late_work = _unrecorded_backend_ops(kin, lk)
        del kin, lk  # a CPU trace needs nothing more from Kineto: free it before the big step
    trace = conv.run(interval_parents)
    if rank is not None:
        trace.metadata.attr.add(name="rank").int64_val = int(rank)
    if base_ns is not None and conv.timed:  # where time 0 lies on the profiler's clock (aligns ranks)
        trace.metadata.attr.add(name=TIME_ORIGIN).int64_val = int(base_ns + conv.window[0])
        lo = conv.window[0]
        bounds = sorted(
            {int(ns_to_us(s) - ns_to_us(lo)) for _, s, _ in conv.steps} | {int(ns_to_us(conv.window[1]) - ns_to_us(lo))}
        )
        trace.metadata.attr.add(name=STEP_BOUNDS).int64_list.values.extend(bounds)
    report.nodes = len(trace)
    report.node_types = trace.node_type_counts()
    return trace, report


def _link_summary(counts: dict) -> dict:
    """The link counts the report keeps (plain numbers, JSON-ready)."""
    return {k: v for k, v in counts.items() if not isinstance(v, np.ndarray)}


def _estimate(conv, host, estimated: np.ndarray, lk, et_path, report: ConversionReport) -> None:
    """Give the unlinked host ops a time (`convert.estimate.time_unlinked`) so the converter keeps them."""
    origin = min((s for _, s, _ in conv.steps), default=0)
    rows, conv.cover = time_unlinked(
        host, conv.start, conv.end, conv.tid, lk.event >= 0, lk.duration, origin, conv._cost_rows
    )
    conv.estimated = estimated
    comm = int(np.count_nonzero(name_mask(host.names, host.name[rows], is_comm_op_name)))
    report.linked["estimated"] = int(rows.size)
    report.warn(
        f"{et_path}: {rows.size:,} of {int((~host.synthetic).sum()):,} host ops have no Kineto event "
        f"(linked by {method_label(report.linked)}); kept with estimated durations"
        + (f" ({comm} of them communication)" if comm else "")
    )


# --------------------------------------------------------------------------- whole collections


def _unrecorded_backend_ops(kin, lk) -> np.ndarray:
    """(start, end) ns of the backend collectives Kineto recorded and no host op links to. The
    host trace can stop before gloo's worker thread begins the work a last c10d op queued."""
    rows = np.flatnonzero(kin.mask(CPU_CATS, ph="X") & (lk.host_of_event < 0))
    rows = rows[name_mask(kin.names, kin.name[rows], is_backend_op_name)]
    return np.stack([kin.ts[rows], kin.end[rows]], axis=1).astype(np.int64)


def _convert_one(args) -> tuple[int, ConversionReport]:
    rank, et, kineto, out, compress = args
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConversionWarning)  # they are in the report
        trace, report = convert_pytorch(et, kineto, rank=rank)
    write_trace(trace, out, compress=compress, leftovers=False)  # (into a fresh temporary folder)
    return rank, report


def convert_collection(
    folder: str | os.PathLike,
    output_prefix: str | os.PathLike,
    *,
    jobs: int | None = None,
    compress: bool = False,
    on_rank_done=None,
) -> dict[int, ConversionReport]:
    """Convert every rank of a collected folder to `<output_prefix>.<rank>.et`, ranks in parallel
    (worker processes that end with this one, `io.workers`), written as one set (`io.outputs`:
    an interruption leaves the files there were, and ranks the folder lacks are removed)."""
    files = collection_files(folder)
    suffix = ".et.gz" if compress else ".et"
    name = os.path.basename(str(output_prefix))
    os.makedirs(os.path.dirname(os.path.abspath(str(output_prefix))), exist_ok=True)
    reports: dict[int, ConversionReport] = {}
    with file_set(output_prefix) as out:
        tasks = [(r, et, k, str(out.path(f"{name}.{r}{suffix}")), compress) for r, (et, k) in files.items()]
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
        if jobs == 1:
            results = map(_convert_one, tasks)
            for rank, rep in results:
                reports[rank] = rep
                if on_rank_done:
                    on_rank_done(rank, rep)
        else:
            with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), **pool_options()) as pool:
                for rank, rep in pool.map(_convert_one, tasks):
                    reports[rank] = rep
                    if on_rank_done:
                        on_rank_done(rank, rep)
        _resolve_written_groups({r: t[3] for r, t in zip(files, tasks)}, compress, reports)
    return dict(sorted(reports.items()))


def _resolve_written_groups(paths: dict[int, str], compress: bool, reports: dict[int, ConversionReport]) -> None:
    """Collectives recorded without a process group are matched across the written ranks
    (`resolve_unnamed_groups`); ranks whose collectives were named are written again."""
    if len(paths) < 2:
        return
    traces = {r: read_trace(p) for r, p in paths.items()}
    before = {r: (t.present.copy(), t.pg_name.copy()) for r, t in traces.items()}
    notes = resolve_unnamed_groups(traces, paths=paths)
    for r, t in traces.items():
        if not (np.array_equal(before[r][0], t.present) and np.array_equal(before[r][1], t.pg_name)):
            write_trace(t, paths[r], compress=compress, leftovers=False)
            reports[r].notes.extend(notes)


@functools.cache
def converter_stamp() -> str:
    """Which converter made a cached trace: every source file of the `convert` package, by size and
    mtime (a new version or an edited checkout converts afresh)."""
    here = Path(__file__).parent
    return ";".join(
        f"{p.relative_to(here)}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(here.rglob("*.py"))
    )


def read_collection(folder: Path, progress: Progress | None = None, ranks: list[int] | None = None) -> Workload:
    """Every rank (or `ranks`) of a `chakra collect` folder, converted one after another (and kept in
    the user's cache, `io.cache`, so the next open of the same bytes reads `.et`). What
    `Workload.open` does with such a folder; `convert_collection` writes the files instead."""
    files = select_ranks(folder, collection_files(folder), ranks)
    traces = {}
    for r, (et, kineto) in files.items():

        def convert(r=r, et=et, kineto=kineto) -> Trace:
            with progress(f"converting rank {r}", Path(et)) if progress else nullcontext():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConversionWarning)  # `chakra convert pytorch` shows them
                    return convert_pytorch(et, kineto, rank=r)[0]

        sources = [Path(et)] + ([Path(kineto)] if kineto else [])
        traces[r] = cached_trace(sources, f"rank{r}", convert, stamp=converter_stamp())
    paths = {r: Path(et) for r, (et, _) in files.items()}
    resolve_unnamed_groups(traces, paths=paths)  # (after the cache: it matches collectives across the ranks read)
    return Workload(traces, paths=paths)


register_source(is_collection, read_collection)

__all__ = [
    "ConversionReport",
    "ConversionWarning",
    "MIN_SIMILARITY",
    "check_same_job",
    "convert_collection",
    "convert_pytorch",
    "read_collection",
]
