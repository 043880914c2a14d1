"""Device breakdowns (kernels, temporal, idle, overlap): invariants on real traces, known
answers on hand-built timelines, and figures checked against HTA 0.5.0."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.analyze.device.idle import idle_breakdown
from chakra_trace.analyze.device.kernels import kernel_breakdown, overlap_label
from chakra_trace.analyze.device.overlap import comm_overlap
from chakra_trace.analyze.device.stats import by_key
from chakra_trace.analyze.device.temporal import split, temporal_breakdown
from chakra_trace.intervals import length, union
from chakra_trace.timeline import COMM, COMPUTE, MEMORY, JobTimeline, RankTimeline, from_kineto_files
from chakra_trace.timeline.job import HostOps, _sorted
from conftest import sample

DATA = Path(__file__).parent / "data"
RESNET = sample("kineto/resnet_kineto_head.json.gz")
LINEAR = sample("kineto/linear_kineto_head.json.gz")
DDP_SMALL = [DATA / "kineto" / "ddp_rank0.kineto.json.gz", DATA / "kineto" / "ddp_rank1.kineto.json.gz"]
TRACES = {
    "resnet_head": RESNET,
    "linear_head": LINEAR,
    "ddp": DATA / "corpus" / "ddp",
    "ddp_small": DDP_SMALL,
    "dlrm": DATA / "corpus" / "dlrm",
}

_JOBS: dict[str, JobTimeline] = {}


def job(name: str) -> JobTimeline:
    if name not in _JOBS:
        _JOBS[name] = from_kineto_files(TRACES[name])
    return _JOBS[name]


def timeline(rows, source="kineto-gpu", window=None, names=None, host=None, rank=0) -> RankTimeline:
    """rows: (stream, start, end, kind, name code, launch start or -1)."""
    a = np.asarray(rows, np.int64).reshape(-1, 6)
    n = len(a)
    neg = np.full(n, -1, np.int64)
    names = names or [f"k{i}" for i in range(int(a[:, 4].max()) + 1 if n else 0)]
    window = window or ((int(a[:, 1].min()), int(a[:, 2].max())) if n else (0, 0))
    t = RankTimeline(
        rank, source, names, a[:, 0].copy(), a[:, 1].copy(), a[:, 2] - a[:, 1], a[:, 4].astype(np.int32),
        a[:, 3].astype(np.uint8), neg, a[:, 5].copy(), neg.copy(), neg.copy(), neg.copy(), window,
        host=host or HostOps.empty(),
    )  # fmt: skip
    return _sorted(t)


# ---------------------------------------------------------------- invariants on every trace
@pytest.mark.parametrize("name", sorted(TRACES))
def test_temporal_parts_add_up_to_the_window(name):
    j = job(name)
    res = temporal_breakdown(j)
    for t, row in zip(j, res["ranks"]):
        lo, hi = t.window
        parts = split(t.start, t.end, t.kind, lo, hi)
        assert (parts >= 0).all() and int(parts.sum()) == hi - lo
        got = row["computation_us"] + row["communication_us"] + row["memory_us"] + row["idle_us"]
        assert got == pytest.approx(row["window_us"], abs=1e-6)
    for row in res["streams"]:
        total = row["computation_us"] + row["communication_us"] + row["memory_us"] + row["idle_us"]
        assert total == pytest.approx(row["window_us"], abs=1e-6) and row["idle_us"] >= 0
    for row in res["hta"]:
        total = row["idle_time_us"] + row["compute_time_us"] + row["non_compute_time_us"]
        assert total == pytest.approx(row["kernel_time_us"], abs=1e-6)


@pytest.mark.parametrize("name", sorted(TRACES))
def test_idle_categories_sum_to_the_gaps(name):
    j = job(name)
    res = idle_breakdown(j)
    by_stream = {}
    for row in res["idle"]:
        by_stream.setdefault((row["rank"], row["stream"]), []).append(row)
    for s in res["streams"]:
        cats = by_stream[(s["rank"], s["stream"])]
        assert sum(c["idle_time_us"] for c in cats) == pytest.approx(s["idle_us"], abs=1e-6)
        assert s["busy_us"] + s["idle_us"] == pytest.approx(s["span_us"], abs=1e-6)
        if s["idle_us"] > 0:
            assert sum(c["idle_time_ratio"] for c in cats) == pytest.approx(1.0)
        if not s["launch_known"]:
            assert s["host_wait_us"] == 0
    counts = {}
    for row in res["intervals"]:
        counts[(row["rank"], row["stream"])] = counts.get((row["rank"], row["stream"]), 0) + row["count"]
    for s in res["streams"]:
        assert counts[(s["rank"], s["stream"])] == s["activities"] - 1
    for t, r in zip(j, res["ranks"]):
        # the idle time of each stream is its span less the union of its activities
        want = sum(
            int(t.end[t.stream == s].max() - t.start[t.stream == s].min())
            - length(union(t.start[t.stream == s], t.end[t.stream == s]))
            for s in t.streams
        )
        assert r["idle_us"] == pytest.approx(want / 1e3, abs=1e-6)


@pytest.mark.parametrize("name", sorted(TRACES))
def test_overlap_fraction_is_a_fraction(name):
    for row in comm_overlap(job(name))["ranks"]:
        ratio = row["comp_comm_overlap_ratio"]
        assert ratio is None or 0.0 <= ratio <= 1.0
        assert row["overlapped_us"] <= row["device_comm_us"] + 1e-9
        assert row["overlapped_us"] + row["exposed_comm_us"] == pytest.approx(row["device_comm_us"], abs=1e-6)
        assert row["device_comm_us"] <= row["device_comm_sum_us"] + 1e-9
        assert row["host_call_us"] <= row["host_call_sum_us"] + 1e-9


@pytest.mark.parametrize("name", sorted(TRACES))
def test_kernel_breakdown_sums_to_the_kernel_time(name):
    j = job(name)
    res = kernel_breakdown(j, top_k=3)
    total = sum(int(t.dur.sum()) for t in j)
    assert sum(r["sum_us"] for r in res["kinds_all"]) == pytest.approx(total / 1e3, abs=1e-6)
    assert res.summary["total_time_us"] == pytest.approx(total / 1e3, abs=1e-6)
    for t in j:
        rows = [r for r in res["kernels"] if r["rank"] == t.rank]
        assert sum(r["count"] for r in rows) == len(t)
        assert sum(r["sum_us"] for r in rows) == pytest.approx(int(t.dur.sum()) / 1e3, abs=1e-6)
        for kind in {r["kind"] for r in rows}:
            named = [r for r in rows if r["kind"] == kind and r["name"] != "others"]
            assert len(named) <= 3
            assert sum(r["percentage"] for r in rows if r["kind"] == kind) == pytest.approx(100.0)
        # the exclusive kind combinations partition the union of all activities
        ov = sum(r["time_us"] for r in res["kind_overlap"] if r["rank"] == t.rank)
        assert ov == pytest.approx(length(union(t.start, t.end)) / 1e3, abs=1e-6)


@pytest.mark.parametrize("name", sorted(TRACES))
def test_results_are_json_and_pandas_ready(name):
    j = job(name)
    for res in (kernel_breakdown(j), temporal_breakdown(j), idle_breakdown(j), comm_overlap(j)):
        text = json.dumps(res.to_dict(), allow_nan=False)
        assert json.loads(text).keys() == res.to_dict().keys()
        for table, rows in res.tables.items():
            assert len(res.to_pandas(table)) == len(rows)
            assert all(r.keys() == rows[0].keys() for r in rows)
            assert all(type(v) in (int, float, str, bool, type(None)) for r in rows for v in r.values())


# ---------------------------------------------------------------- hand-built timelines
def test_temporal_precedence_on_a_tiny_timeline():
    t = timeline([(0, 0, 10, COMPUTE, 0, -1), (1, 5, 20, COMM, 1, -1), (2, 15, 30, MEMORY, 2, -1)], window=(0, 40))
    res = temporal_breakdown(JobTimeline({0: t}))
    r = res["ranks"][0]
    assert (r["computation_us"], r["communication_us"], r["memory_us"], r["idle_us"]) == (0.01, 0.01, 0.01, 0.01)
    h = res["hta"][0]  # span 0..30: all busy, compute 10, the rest non-compute
    assert (h["kernel_time_us"], h["idle_time_us"], h["compute_time_us"], h["non_compute_time_us"]) == (
        0.03, 0.0, 0.01, 0.02,
    )  # fmt: skip
    streams = {s["stream"]: s for s in res["streams"]}
    assert streams[1]["communication_us"] == 0.015 and streams[1]["idle_us"] == 0.025
    # clipped to a window narrower than the activities
    assert split(t.start, t.end, t.kind, 8, 18).tolist() == [2, 8, 0, 0]


def test_idle_categories_on_a_tiny_stream():
    # kernel 1 launched at 5 (before kernel 0 ends at 10): gap 2 is a kernel wait;
    # kernel 2 launched at 40 after kernel 1 ended at 20: host wait 30;
    # kernel 3 launched at 45 while kernel 2 ran: gap 100 over the threshold is other
    rows = [(7, 0, 10, COMPUTE, 0, 0), (7, 12, 20, COMPUTE, 0, 5), (7, 50, 60, COMPUTE, 1, 40),
            (7, 160, 170, MEMORY, 2, 45), (9, 0, 5, COMPUTE, 0, -1)]  # fmt: skip
    res = idle_breakdown(JobTimeline({0: timeline(rows)}), consecutive_kernel_delay_ns=50)
    got = {(r["stream"], r["idle_category"]): r["idle_time_us"] * 1e3 for r in res["idle"]}
    assert got[(7, "host_wait")] == pytest.approx(30)
    assert got[(7, "kernel_wait")] == pytest.approx(2)
    assert got[(7, "other")] == pytest.approx(100)
    s = {r["stream"]: r for r in res["streams"]}
    assert s[7]["activities"] == 4 and s[7]["span_us"] == 0.17 and s[7]["busy_us"] == pytest.approx(0.038)
    assert s[9]["idle_us"] == 0
    iv = {(r["stream"], r["idle_category"]): r for r in res["intervals"]}
    assert iv[(7, "host_wait")]["count"] == 1 and iv[(7, "other")]["max_us"] == 0.1
    assert iv[(9, "other")]["count"] == 0 and iv[(9, "other")]["mean_us"] is None
    # the default threshold (HTA's 30 µs) makes the 100 ns gap a kernel wait
    res = idle_breakdown(JobTimeline({0: timeline(rows)}))
    assert res.summary["consecutive_kernel_delay_ns"] == 30_000
    assert res["ranks"][0]["kernel_wait_us"] == pytest.approx(0.102)


def test_idle_without_launch_information_uses_the_threshold_only():
    rows = [(1, 0, 10, COMPUTE, 0, -1), (1, 15, 20, COMPUTE, 0, -1), (1, 120, 130, COMM, 1, -1)]
    res = idle_breakdown(JobTimeline({0: timeline(rows, source="recorded")}), consecutive_kernel_delay_ns=50)
    r = res["ranks"][0]
    assert not r["launch_known"] and r["host_wait_us"] == 0
    assert r["kernel_wait_us"] == 0.005 and r["other_us"] == 0.1


def test_idle_overlapping_activities_give_no_negative_gap():
    rows = [(1, 0, 100, COMPUTE, 0, -1), (1, 10, 20, COMPUTE, 0, -1), (1, 130, 140, COMPUTE, 0, -1)]
    res = idle_breakdown(JobTimeline({0: timeline(rows)}), consecutive_kernel_delay_ns=10)
    assert res["ranks"][0]["idle_us"] == 0.03  # from the first one's end, 100, to 130


def test_comm_overlap_on_a_tiny_timeline():
    t = timeline([(0, 0, 10, COMPUTE, 0, -1), (1, 5, 20, COMM, 1, -1), (1, 30, 40, COMM, 1, -1),
                  (0, 35, 50, COMPUTE, 0, -1)])  # fmt: skip
    r = comm_overlap(JobTimeline({0: t}))["ranks"][0]
    assert r["device_comm_us"] == 0.025 and r["overlapped_us"] == 0.01
    assert r["comp_comm_overlap_ratio"] == pytest.approx(0.4) and r["comp_comm_overlap_pctg"] == pytest.approx(40)
    assert r["exposed_comm_us"] == 0.015
    none = comm_overlap(JobTimeline({0: timeline([(0, 0, 10, COMPUTE, 0, -1)])}))["ranks"][0]
    assert none["comp_comm_overlap_ratio"] is None and none["device_comm_us"] == 0


def test_comm_overlap_host_calls_on_a_cpu_timeline():
    names = ["forward", "autograd::engine::evaluate_function", "c10d::allreduce_", "record_param_comms",
             "gloo:all_reduce", "c10d::broadcast_"]  # fmt: skip
    # host ops: thread 1 main, thread 2 gloo worker; the c10d call under autograd holds a
    # record_param_comms (not counted again); a top-level broadcast; the worker's gloo op
    host = HostOps(
        thread=np.array([1, 1, 1, 1, 1, 2], np.int64),
        start=np.array([0, 100, 110, 112, 300, 120], np.int64),
        dur=np.array([100, 100, 20, 10, 50, 200], np.int64),
        name=np.array([0, 1, 2, 3, 5, 4], np.int32),
        parent=np.array([-1, -1, 1, 2, -1, -1], np.int64),
    )
    rows = [(1, 0, 100, COMPUTE, 0, -1), (1, 100, 200, COMPUTE, 1, -1), (1, 300, 350, COMM, 5, -1),
            (2, 120, 320, COMM, 4, -1)]  # fmt: skip
    t = timeline(rows, source="kineto-cpu", names=names, host=host)
    res = comm_overlap(JobTimeline({0: t}))
    r = res["ranks"][0]
    assert r["device_comm_us"] == 0.2 and r["device_comm_activities"] == 1  # the worker only
    assert r["overlapped_us"] == 0.08 and r["comp_comm_overlap_ratio"] == pytest.approx(0.4)
    assert r["host_calls"] == 2 and r["host_call_us"] == 0.07
    assert {c["name"]: c["count"] for c in res["host_calls"]} == {"c10d::allreduce_": 1, "c10d::broadcast_": 1}


def test_kernel_breakdown_top_k_and_others():
    # name 0: 10, 20 (sum 30); name 1: 25; name 2: 5, 1 (sum 6); name 3 (memory): 4
    rows = [(0, 0, 10, COMPUTE, 0, -1), (0, 10, 30, COMPUTE, 0, -1), (0, 30, 55, COMPUTE, 1, -1),
            (0, 55, 60, COMPUTE, 2, -1), (0, 60, 61, COMPUTE, 2, -1), (1, 0, 4, MEMORY, 3, -1)]  # fmt: skip
    res = kernel_breakdown(JobTimeline({0: timeline(rows)}), top_k=1)
    k = {(r["kind"], r["name"]): r for r in res["kernels"]}
    assert set(k) == {("computation", "k0"), ("computation", "others"), ("memory", "k3")}
    a = k[("computation", "k0")]
    assert (a["count"], a["sum_us"], a["mean_us"], a["max_us"], a["min_us"]) == (2, 0.03, 0.015, 0.02, 0.01)
    assert a["std_us"] == pytest.approx(np.std([10, 20], ddof=1) / 1e3)
    assert a["percentage"] == pytest.approx(100 * 30 / 61)
    o = k[("computation", "others")]  # statistics over the folded kernels themselves
    assert (o["count"], o["sum_us"], o["max_us"], o["min_us"]) == (3, 0.031, 0.025, 0.001)
    assert o["std_us"] == pytest.approx(np.std([25, 5, 1], ddof=1) / 1e3)
    kinds = {r["kind"]: r for r in res["kinds"]}
    assert kinds["computation"]["sum_us"] == 0.061 and kinds["memory"]["count"] == 1
    ov = {r["kind"]: r["time_us"] for r in res["kind_overlap"]}
    assert ov == {"computation": 0.057, "computation overlapping memory": 0.004}
    assert overlap_label(7) == "computation overlapping communication overlapping memory"


def test_group_stats_median_and_std():
    groups, st = by_key(np.array([1, 0, 1, 1, 0]), np.array([5, 2, 1, 3, 4]))
    assert groups.tolist() == [0, 1] and st["count"].tolist() == [2, 3]
    assert st["p50"].tolist() == [3.0, 3.0] and st["sum"].tolist() == [6, 9]
    assert st["std"][1] == pytest.approx(2.0)


def test_empty_rank():
    j = JobTimeline({0: timeline([])})
    assert temporal_breakdown(j)["ranks"][0]["idle_us"] == 0
    assert idle_breakdown(j)["ranks"][0]["idle_us"] == 0
    assert comm_overlap(j)["ranks"][0]["comp_comm_overlap_ratio"] is None
    assert kernel_breakdown(j)["kernels"] == []


# ---------------------------------------------------------------- figures from HTA 0.5.0
# HTA 0.5.0 run on the same files, each copied alone into a folder D with "distributedInfo":
# {"rank": 0} added (HTA needs it), with:
#   a = hta.trace_analysis.TraceAnalysis(trace_dir=D)
#   a.get_temporal_breakdown(visualize=False)
#   a.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
#   a.get_idle_time_breakdown(ranks=[0], visualize=False, show_idle_interval_stats=True)
#   a.get_comm_comp_overlap(visualize=False)
# The traces have integer-µs timestamps, so HTA's rounding does not change them.
HTA = {
    RESNET: {
        "temporal": (4669070, 176831, 45678, 4891579),  # idle, compute, non-compute, kernel time (µs)
        "kind_time": {"computation": 176831, "memory": 45678},
        "idle": {"host_wait": 4668517, "kernel_wait": 559, "other": 0},  # stream 7
        "intervals": {"host_wait": (12, 389043.08, 3833.5, 2252907), "kernel_wait": (416, 1.34, 1.0, 8)},
        "others": 70276,  # computation kernels past the 10 longest names
        "kernels": {  # memory names: sum, max, min, mean, stddev
            "Memcpy HtoD (Pageable -> Device)": (45331, 24914, 1, 9066.2, 12514.580324565422),
            "Memcpy DtoD (Device -> Device)": (314, 37, 2, 5.064516129032258, 7.923550635924746),
            "Memset (Device)": (33, 7, 1, 2.357142857142857, 1.5984195491000024),
        },
    },
    LINEAR: {
        "temporal": (20877, 12344, 63, 33284),
        "kind_time": {"computation": 12344, "memory": 63},
        "idle": {"host_wait": 20537, "kernel_wait": 340, "other": 0},
        "intervals": {"host_wait": (134, 153.26, 70.0, 1570), "kernel_wait": (162, 2.10, 2.0, 15)},
        "others": 77,
        "kernels": {"Memset (Device)": (63, 1, 1, 1.0, 0.0)},
    },
}


@pytest.mark.parametrize("path", [RESNET, LINEAR], ids=["resnet_head", "linear_head"])
def test_figures_match_hta(path):
    want = HTA[path]
    j = job("resnet_head" if path == RESNET else "linear_head")
    h = temporal_breakdown(j)["hta"][0]
    assert (h["idle_time_us"], h["compute_time_us"], h["non_compute_time_us"], h["kernel_time_us"]) == want["temporal"]
    kb = kernel_breakdown(j, duration_ratio=0.8)
    assert {r["kind"]: r["time_us"] for r in kb["kind_overlap_all"]} == want["kind_time"]
    k = {(r["kind"], r["name"]): r for r in kb["kernels"]}
    assert k[("computation", "others")]["sum_us"] == want["others"]
    for name, (s, mx, mn, mean, std) in want["kernels"].items():
        r = k[("memory", name)]
        assert (r["sum_us"], r["max_us"], r["min_us"]) == (s, mx, mn)
        assert r["mean_us"] == pytest.approx(mean) and r["std_us"] == pytest.approx(std)
    idle = idle_breakdown(j)
    assert {r["idle_category"]: r["idle_time_us"] for r in idle["idle"] if r["stream"] == 7} == want["idle"]
    for cat, (count, mean, median, mx) in want["intervals"].items():
        (r,) = [r for r in idle["intervals"] if r["stream"] == 7 and r["idle_category"] == cat]
        assert r["count"] == count and round(r["mean_us"], 2) == mean
        assert r["median_us"] == median and r["max_us"] == mx
    # no communication kernels: HTA divides by zero (NaN), we say None
    assert comm_overlap(j)["ranks"][0]["comp_comm_overlap_ratio"] is None


def test_ddp_gloo_workers_against_host_calls():
    # the CPU DDP pair: gloo worker threads ran (union) 3,843.6 / 6,316.6 µs while the main
    # thread's c10d calls (which only enqueue the work) took 2,835.2 / 572.9 µs
    rows = comm_overlap(job("ddp_small"))["ranks"]
    assert [r["device_comm_us"] for r in rows] == pytest.approx([3843.649, 6316.579])
    assert [r["host_call_us"] for r in rows] == pytest.approx([2835.151, 572.855])
    assert [r["host_calls"] for r in rows] == [8, 8]
