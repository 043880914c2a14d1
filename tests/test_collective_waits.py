"""Time a thread sat blocked in a collective is a dependency on it, not `[host]` work (issue 32).

Invariants over every recorded multi-rank job (tests/data/corpus, the gloo DDP pair of
tests/data, ../shared's pytorch-cpu pair): a faster network is never slower, `ideal` no slower
than any network nor than the recording; the main thread's time adds up (its ops, its `[host]`
gaps and the waits the conversion reports fill the recorded window); a `[host]` gap that starts
after a wait depends on a collective that ended right then.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.convert.pytorch import convert_pytorch
from chakra_trace.io.workload import Workload
from chakra_trace.schema.enums import NodeType
from chakra_trace.schema.resources import HOST_GAP
from chakra_trace.simulate.presets import resolve, simulate_on
from conftest import DATA, SHARED

CORPUS = DATA / "corpus"
MULTI = [j["name"] for j in json.loads((CORPUS / "index.json").read_text())["jobs"] if j["ranks"] > 1]
PAIRS = {  # gloo DDP recordings of the same kind as the demo: (ET, Kineto) per rank
    "ddp-pair": [(DATA / f"ddp_rank{r}.et.json.gz", DATA / "kineto" / f"ddp_rank{r}.kineto.json.gz") for r in (0, 1)],
    "shared-ddp": [
        (SHARED / "pytorch-cpu" / f"ddp_rank{r}.et.json.gz", SHARED / "pytorch-cpu" / f"ddp_rank{r}.kineto.json.gz")
        for r in (0, 1)
    ],
}
JOBS = MULTI + list(PAIRS)
BANDWIDTHS = (1000.0, 100.0, 10.0, 1.0)  # GB/s per link on one switch, fastest first


@cache
def converted(name: str) -> dict:
    """{rank: (trace, report)} of a job."""
    if name in PAIRS:
        files = PAIRS[name]
    else:
        files = [(CORPUS / name / f"rank{r}.et.json.gz", CORPUS / name / f"rank{r}.kineto.json.gz") for r in range(8)]
        files = [f for f in files if f[0].is_file()]
    if not all(et.is_file() and k.is_file() for et, k in files):
        pytest.skip(f"needs {files[0][0].parent}: ../shared/traces beside the checkout (CI has it)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {r: convert_pytorch(et, k, rank=r) for r, (et, k) in enumerate(files)}


def _per_rank(res, ranks: int) -> np.ndarray:
    f = res.finish_ns
    return np.array([f[np.arange(f.size) % ranks == r].max() for r in range(ranks)], np.int64)


@pytest.mark.parametrize("name", JOBS)
def test_a_faster_network_is_never_slower(name):
    jobs = converted(name)
    w = Workload({r: t for r, (t, _) in jobs.items()})
    R = len(jobs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ideal = _per_rank(simulate_on(w, "ideal"), R)
        recorded = _per_rank(simulate_on(w, "recorded"), R)
        switch = resolve("switch")
        spans = [_per_rank(simulate_on(w, dataclasses.replace(switch, link=(bw, 500))), R) for bw in BANDWIDTHS]
    tol = 1000  # ns: times are whole µs
    assert (ideal <= recorded + tol).all(), (ideal, recorded)
    assert (ideal <= spans[0] + tol).all(), (ideal, spans[0])
    for fast, slow, bw in zip(spans, spans[1:], BANDWIDTHS[1:]):
        assert (fast <= slow + tol).all(), (bw, fast, slow)


@pytest.mark.parametrize("name", JOBS)
def test_main_thread_time_adds_up_with_the_waits(name):
    """Ops + `[host]` gaps + reported waits = the recorded window, on the main thread of every
    rank (whole µs: one per gap of rounding)."""
    for r, (t, rep) in converted(name).items():
        host = np.asarray(t.name_array) == HOST_GAP
        tid, has = t.attr_array("tid", np.int64)
        main = int(tid[host][0]) if host.any() else None
        if main is None:
            continue
        start, dur = t.start.astype(np.int64), t.duration.astype(np.int64)
        mine = has & (tid == main) & ~host
        # the main thread's ops (a node that waited for the GPU keeps its time after the wait)
        s, e = start[mine], start[mine] + dur[mine]
        o = np.argsort(s)
        s, e = s[o], np.maximum.accumulate(e[o])
        busy = int((e - np.maximum(s, np.r_[0, e[:-1]])).clip(0).sum())
        total = busy + int(dur[host].sum()) + rep.waits.collective_us
        span = rep.span_us
        assert abs(total - span) <= int(host.sum()) + 1 + rep.waits.collectives, (r, busy, total, span)


@pytest.mark.parametrize("name", JOBS)
def test_a_gap_after_a_wait_depends_on_the_collective(name):
    """Every `[host]` gap that depends on a collective starts once it ended (no edge makes the
    trace slower than the run), and where a rank blocked in one, some gap or op does."""
    for r, (t, rep) in converted(name).items():
        start, end = t.start.astype(np.int64), (t.start + t.duration).astype(np.int64)
        coll = t.types == NodeType.COMM_COLL_NODE
        ip, deps = t.data_indptr, t.data.astype(np.int64)
        id_pos = {int(i): k for k, i in enumerate(t.ids.tolist())}
        waiting = 0
        for k in range(len(t)):
            waited_for = [p for p in (id_pos[int(d)] for d in deps[ip[k] : ip[k + 1]]) if coll[p]]
            if waited_for:
                assert max(end[p] for p in waited_for) <= start[k], (r, k)
                waiting += 1
        assert waiting >= (1 if rep.waits.collectives else 0), r


def test_ideal_removes_the_waits_on_a_gloo_job():
    """The corpus ddp job: `ideal` is under the recording on every rank by at least the time the
    rank blocked in collectives it issued (what the conversion reports)."""
    jobs = converted("ddp")
    assert sum(rep.waits.collectives for _, rep in jobs.values()) > 0
    w = Workload({r: t for r, (t, _) in jobs.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ideal = _per_rank(simulate_on(w, "ideal"), len(jobs))
        recorded = _per_rank(simulate_on(w, "recorded"), len(jobs))
    for r, (_, rep) in jobs.items():
        assert recorded[r] - ideal[r] >= rep.waits.collective_us * 1000 - 1000, (r, recorded[r], ideal[r])


def test_jobs_are_found():
    assert MULTI and all((CORPUS / n).is_dir() for n in MULTI)
    assert Path(PAIRS["ddp-pair"][0][0]).is_file()
