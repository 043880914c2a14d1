"""Stragglers (collective arrivals across ranks) and the critical path overlaid on a Kineto trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.analyze.device.overlay import FLOW_CAT, critical_path_overlay
from chakra_trace.analyze.device.stragglers import stragglers
from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.timeline.clock import rank_offsets_ns
from chakra_trace.timeline.job import (
    COMM,
    COMPUTE,
    JobTimeline,
    RankTimeline,
    from_chakra,
    from_kineto_files,
    from_workload,
)

CORPUS = Path(__file__).parent / "data" / "corpus"
MS = 1_000_000
KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _rank(rank: int, ops: list[tuple], source: str = "kineto-gpu", window=(0, 100 * MS)) -> RankTimeline:
    """ops: (stream, start, dur, name, kind)."""
    names = sorted({o[3] for o in ops})
    stream, start, dur = (np.asarray([o[i] for o in ops], np.int64) for i in range(3))
    name = np.asarray([names.index(o[3]) for o in ops], np.int32)
    kind = np.asarray([o[4] for o in ops], np.uint8)
    neg = np.full(len(ops), -1, np.int64)
    return RankTimeline(
        rank, source, names, stream, start, dur, name, kind, neg, neg.copy(), neg.copy(), neg.copy(), neg.copy(), window
    )


def _job(arrivals: dict[int, list[int]], stream=lambda r: 7, name=KERNEL, source="kineto-gpu") -> JobTimeline:
    """Rank -> arrival (ns) at each collective; each ends at 10 ms past the instance's last arrival."""
    ends = [max(a[i] for a in arrivals.values()) + 2 * MS for i in range(min(map(len, arrivals.values())))]
    out = {}
    for r, arr in arrivals.items():
        ops = [(stream(r), a, (ends[i] if i < len(ends) else a + MS) - a, name, COMM) for i, a in enumerate(arr)]
        ops.append((0, 0, MS, "gemm", COMPUTE))
        out[r] = _rank(r, ops, source)
    return JobTimeline(out)


def test_known_straggler():
    base = [10 * MS, 30 * MS, 50 * MS, 70 * MS, 90 * MS]
    jitter = {0: 0, 1: 100_000, 2: 0, 3: 50_000}
    arrivals = {r: [b + j for b in base] for r, j in jitter.items()}
    arrivals[2] = [b + MS for b in base]  # rank 2 is 1 ms late every time
    s = stragglers(_job(arrivals))
    ranks = {row["rank"]: row for row in s["ranks"]}
    assert s.summary["stragglers"] == [2] and s.summary["worst_rank"] == 2
    assert ranks[2]["times_last"] == 5 and all(ranks[r]["times_last"] == 0 for r in (0, 1, 3))
    # the others waited on rank 2 alone from the second-latest arrival (rank 1's) on
    assert ranks[2]["caused_ns"] == 5 * (MS - 100_000)
    assert ranks[2]["caused_frac"] == pytest.approx(5 * 0.9 * MS / (100 * MS))
    assert ranks[0]["waited_ns"] == 5 * MS and ranks[1]["waited_ns"] == 5 * 900_000 and ranks[2]["waited_ns"] == 0
    inst = s["instances"]
    assert len(inst) == 5 and {i["last_rank"] for i in inst} == {2}
    # median of (0, 0.1, 1, 0.05) ms past the base is 0.075 ms: the last was 0.925 ms late
    assert all(i["late_vs_median_ns"] == 925_000 and i["caused_ns"] == 900_000 for i in inst)
    arr = [a for a in s["arrivals"] if a["index"] == 0]
    assert {a["rank"]: a["wait_ns"] for a in arr} == {0: MS, 1: 900_000, 2: 0, 3: 950_000}
    assert [a["rank"] for a in arr if a["last"]] == [2]
    assert not s["mismatches"] and s.summary["unmatched_ops"] == 0
    assert s.to_pandas("ranks").shape[0] == 4 and json.dumps(s.to_dict())


def test_ranks_taking_turns_are_not_stragglers():
    base = [10 * MS, 30 * MS, 50 * MS, 70 * MS]
    arrivals = {
        0: [b + (MS if i % 2 else 0) for i, b in enumerate(base)],
        1: [b + (0 if i % 2 else MS) for i, b in enumerate(base)],
    }
    s = stragglers(_job(arrivals))
    assert [r["times_last"] for r in s["ranks"]] == [2, 2]
    assert [r["caused_ns"] for r in s["ranks"]] == [2 * MS, 2 * MS]
    assert s.summary["stragglers"] == []  # each cost the others 2% of the window, but neither dominates
    assert stragglers(_job(arrivals), threshold=0.5)["ranks"][0]["straggler"] is False


def test_a_tie_for_last_counts_for_nobody():
    s = stragglers(_job({0: [10 * MS, 30 * MS], 1: [10 * MS, 30 * MS]}))
    assert [r["times_last"] for r in s["ranks"]] == [0, 0] and s.summary["worst_rank"] is None
    assert all(i["caused_ns"] == 0 and i["late_vs_median_ns"] == 0 for i in s["instances"])


def test_unequal_counts_are_matched_up_to_the_shortest():
    arrivals = {0: [10 * MS, 30 * MS, 50 * MS], 1: [11 * MS, 31 * MS, 51 * MS, 71 * MS], 2: [10 * MS, 30 * MS, 50 * MS]}
    s = stragglers(_job(arrivals))
    assert s.summary["instances"] == 3 and s.summary["unmatched_ops"] == 1
    mis = {m["rank"]: m for m in s["mismatches"]}
    assert mis[1]["count"] == 4 and mis[1]["matched"] == 3 and mis[1]["extra"] == 1 and mis[0]["extra"] == 0
    assert all(i["last_rank"] == 1 for i in s["instances"])


def test_gpu_streams_that_differ_across_ranks_match_by_kernel_name():
    arrivals = {0: [10 * MS, 30 * MS], 1: [12 * MS, 32 * MS]}
    s = stragglers(_job(arrivals, stream=lambda r: 20 + r))
    assert s.summary["instances"] == 2 and s["instances"][0]["channel"] == KERNEL
    same = stragglers(_job(arrivals))
    assert same["instances"][0]["channel"] == f"stream 7: {KERNEL}"


def test_cpu_point_to_point_is_skipped():
    ops = {
        r: [(5, 10 * MS + r, MS, "gloo:send", COMM), (5, 20 * MS + r * MS, MS, "gloo:all_reduce", COMM)] for r in (0, 1)
    }
    job = JobTimeline({r: _rank(r, o, "kineto-cpu") for r, o in ops.items()})
    s = stragglers(job)
    assert s.summary["p2p_skipped"] == 2 and s.summary["instances"] == 1
    assert s["instances"][0]["channel"] == "allreduce" and s["instances"][0]["last_rank"] == 1


def test_offsets_and_bad_align():
    arrivals = {0: [10 * MS, 30 * MS], 1: [12 * MS, 32 * MS]}
    s = stragglers(_job(arrivals), offsets={0: 3 * MS, 1: 0})
    assert all(i["last_rank"] == 0 for i in s["instances"]) and s.summary["align"] == "offsets"
    with pytest.raises(ChakraError):
        stragglers(_job(arrivals), align="sideways")


@pytest.mark.parametrize("job", ["ddp", "dlrm"])
def test_corpus_cpu_jobs(job):
    s = stragglers(from_kineto_files(CORPUS / job))
    ranks = s["ranks"]
    assert s.summary["source"] == "kineto-cpu" and s.summary["instances"] > 0
    assert len({r["instances"] for r in ranks}) == 1  # every rank takes part in every instance
    assert not s["mismatches"] and s.summary["unmatched_ops"] == 0
    assert all(r["caused_ns"] >= 0 and r["waited_ns"] >= 0 for r in ranks)
    assert all(a["wait_ns"] >= 0 for a in s["arrivals"]) and all(i["caused_ns"] >= 0 for i in s["instances"])
    assert sum(r["times_last"] for r in ranks) == sum(i["caused_ns"] > 0 for i in s["instances"])
    assert sum(r["caused_ns"] for r in ranks) == pytest.approx(
        sum(i["caused_ns"] for i in s["instances"]), abs=len(ranks)
    )


def test_chakra_workload_at_recorded_times():
    wl = Workload.open(CORPUS / "dlrm")
    job = JobTimeline({r: from_chakra(t, r) for r, t in wl.traces.items()})  # each rank from 0
    s = stragglers(from_workload(wl))  # on the job's clock (the recorded time origins)
    k = stragglers(from_kineto_files(CORPUS / "dlrm"))
    assert s.summary["source"] == "recorded" and s.summary["instances"] == k.summary["instances"] == 6
    assert not s["mismatches"]
    # on the recorded clocks the converted job tells the Kineto traces' story, to the µs
    assert [r["times_last"] for r in s["ranks"]] == [r["times_last"] for r in k["ranks"]]
    for a, b in zip(s["ranks"], k["ranks"]):
        assert a["caused_ns"] == pytest.approx(b["caused_ns"], abs=100_000)
    assert s.summary["stragglers"] == k.summary["stragglers"]
    assert s.summary["align"] == "none"  # already on one clock: nothing to align
    assert stragglers(job, offsets=rank_offsets_ns(wl)).summary["stragglers"] == k.summary["stragglers"]
    auto = stragglers(job, align="ends")  # ranks each from 0: aligned by the collectives' ends
    assert auto.summary["align"] == "ends" and len(auto.summary["clock_offsets_ns"]) == 4


def _marked_chain(out: Path, original: Path):
    doc = json.loads(out.read_bytes())
    src = json.loads(gzip.decompress(original.read_bytes()))
    ev, orig = doc["traceEvents"], src["traceEvents"]
    n = len(orig)
    for a, b in zip(ev[:n], orig):  # the original events, unchanged but for the mark
        if (a.get("args") or {}).get("critical") is True:
            a = {**a, "args": {k: v for k, v in a["args"].items() if k != "critical"}}
            b = {**b, "args": b.get("args", {})}
        assert a == b
    marked = [i for i, e in enumerate(ev[:n]) if (e.get("args") or {}).get("critical") is True]
    return ev, n, marked


@pytest.mark.parametrize("how", ["workload", "kineto"])
def test_overlay_marks_a_time_ordered_chain(tmp_path, how):
    kineto = CORPUS / "ddp" / "rank1.kineto.json.gz"
    out = tmp_path / "overlay.json"
    o = critical_path_overlay(kineto, out, workload=CORPUS / "ddp" if how == "workload" else None)
    ev, n, marked = _marked_chain(out, kineto)
    assert o.source == how and o.rank == 1 and o.unplaced == 0 and o.marked == len(marked) > 0
    assert o.on_rank == o.marked + o.gaps + o.unplaced and o.length_ns > 0
    flows = ev[n:]
    assert len(flows) == 2 * o.flows and o.flows == len(marked) - 1
    assert all(f["cat"] == FLOW_CAT for f in flows)
    starts, ends = flows[0::2], flows[1::2]
    assert all(s["ph"] == "s" and f["ph"] == "f" and s["id"] == f["id"] for s, f in zip(starts, ends))
    # the arrows go from one marked event to the next, forward in time
    chain = [starts[0]] + ends
    by_key = {(ev[i]["pid"], ev[i]["tid"], ev[i]["ts"]): i for i in marked}
    hops = [by_key[(e["pid"], e["tid"], e["ts"])] for e in chain]
    assert sorted(hops) == sorted(marked)
    ts = [ev[i]["ts"] for i in hops]
    assert ts == sorted(ts)


def test_overlay_writes_gzip_atomically(tmp_path):
    kineto = CORPUS / "dlrm" / "rank2.kineto.json.gz"
    out = tmp_path / "o.json.gz"
    o = critical_path_overlay(kineto, out, workload=CORPUS / "dlrm")
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert (
        o.rank == 2
        and o.unplaced == 0
        and sum(1 for e in doc["traceEvents"] if e.get("cat") == FLOW_CAT) == 2 * o.flows
    )
    assert [p.name for p in tmp_path.iterdir()] == ["o.json.gz"]  # no temporary file left


def test_overlay_of_a_gpu_only_trace_marks_its_gpu_work(tmp_path):
    """A trace of GPU work without CPU ops converts to that work (issue 30): its critical path is
    the stream's kernels, marked on the file."""
    k = tmp_path / "gpu_only.json"
    kernels = [
        {"ph": "X", "cat": "kernel", "name": KERNEL, "pid": 0, "tid": 7, "ts": ts, "dur": 5, "args": {"stream": 7}}
        for ts in (10, 20)
    ]
    k.write_text(json.dumps({"traceEvents": kernels}))
    o = critical_path_overlay(k, tmp_path / "out.json")
    assert o.unplaced == 0 and (tmp_path / "out.json").exists()


def test_overlay_without_any_work_says_why(tmp_path):
    k = tmp_path / "calls_only.json"
    call = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 1, "ts": 10, "dur": 5}
    k.write_text(json.dumps({"traceEvents": [call]}))
    with pytest.raises(ChakraError, match="Kineto-only conversion gives no critical path"):
        critical_path_overlay(k, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()
