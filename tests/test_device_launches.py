"""Launch statistics, kernel sequences, op -> kernel maps, memory and trace counters
(`analyze.device.launches`, `.sequences`, `.memory`): hand-built timelines with known answers,
invariants on the repository's traces, and figures checked against HTA 0.5.0."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from chakra_trace.analyze.device.launches import NO_LAUNCHES, launch_stats
from chakra_trace.analyze.device.memory import NO_MEMORY, counters, memory_timeline
from chakra_trace.analyze.device.sequences import frequent_sequences, op_kernel_map
from chakra_trace.analyze.device.stats import group_stats
from chakra_trace.timeline.job import COMPUTE, MEMORY, HostOps, JobTimeline, RankTimeline, from_kineto_files
from conftest import sample

DATA = os.path.join(os.path.dirname(__file__), "data")
RESNET = str(sample("kineto/resnet_kineto_head.json.gz"))
LINEAR = str(sample("kineto/linear_kineto_head.json.gz"))
DDP = [os.path.join(DATA, "corpus", "ddp", f"rank{r}.kineto.json.gz") for r in (0, 1)]


def timeline(kernels, names, host=None, memory=None) -> RankTimeline:
    """kernels: (stream, start, dur, name, kind, correlation, launch_start, launch_dur, op, bytes)."""
    cols = list(zip(*kernels)) if kernels else [()] * 10
    a = [np.asarray(c, np.int64) for c in cols]
    t = RankTimeline(
        0, "kineto-gpu", names, a[0], a[1], a[2], a[3].astype(np.int32), a[4].astype(np.uint8), a[5], a[6], a[7],
        a[8], a[9], (0, 1000), host or HostOps.empty(), memory=memory or {},
    )  # fmt: skip
    order = np.lexsort((t.start, t.stream))
    return t.select(order)


def host(rows, names=None):
    """rows: (thread, start, dur, name, parent)."""
    th, st, du, nm, pa = (np.asarray(c, np.int64) for c in zip(*rows))
    return HostOps(th, st, du, nm.astype(np.int32), pa)


@pytest.fixture(scope="module")
def resnet():
    return from_kineto_files(RESNET)


@pytest.fixture(scope="module")
def linear():
    return from_kineto_files(LINEAR)


@pytest.fixture(scope="module")
def ddp():
    return from_kineto_files(DDP)


# ---------------------------------------------------------------- launch statistics
def test_launch_stats_known_answers():
    # k0: launched at 0 for 10, starts at 30 (delay 20), runs 5: short (5 < 10 <= cutoff)
    # k1: launched at 40 for 100 (over a 50 cutoff), starts at 120 (before the call ends: delay 0)
    # k2: a memset, launched at 200 for 5, starts at 400 (delay 195 > 100)
    t = timeline(
        [(7, 30, 5, 0, COMPUTE, 1, 0, 10, -1, -1), (7, 120, 50, 1, COMPUTE, 2, 40, 100, -1, -1),
         (7, 400, 3, 2, MEMORY, 3, 200, 5, -1, 64)],
        ["a", "b", "Memset (Device)"],
    )  # fmt: skip
    r = launch_stats(t, runtime_cutoff_ns=50, launch_delay_cutoff_ns=100)
    rows = {x["name"]: x for x in r["launches"]}
    assert [rows[n]["launch_delay_ns"] for n in ("a", "b", "Memset (Device)")] == [20, 0, 195]
    assert [rows[n]["cpu_duration_ns"] for n in ("a", "b", "Memset (Device)")] == [10, 100, 5]
    assert rows["a"]["short_kernel"] and not rows["b"]["short_kernel"]
    assert rows["Memset (Device)"]["short_kernel"]  # 3 < 5
    assert rows["b"]["runtime_outlier"] and not rows["a"]["runtime_outlier"]
    assert rows["Memset (Device)"]["delay_outlier"] and not rows["a"]["delay_outlier"]
    assert (
        r.summary.items()
        >= {"kernels": 3, "short_kernels": 2, "runtime_outliers": 1, "launch_delay_outliers": 1}.items()
    )
    (rank,) = r["ranks"]
    assert (
        rank["launch_delay_p50_ns"] == 20 and rank["cpu_duration_max_ns"] == 100 and rank["gpu_duration_total_ns"] == 58
    )
    assert [k["name"] for k in r["kernels"]] == ["b", "a", "Memset (Device)"]  # by GPU time
    assert launch_stats(t, include_memory=False).summary["kernels"] == 2
    assert "launches" not in launch_stats(t, per_kernel=False).tables


def test_launch_stats_graph_launches_and_no_launches():
    # one runtime call (correlation 5) that launched two kernels: a graph launch
    t = timeline(
        [(7, 30, 5, 0, COMPUTE, 5, 0, 10, -1, -1), (7, 40, 5, 1, COMPUTE, 5, 0, 10, -1, -1),
         (7, 60, 5, 0, COMPUTE, 6, 45, 2, -1, -1)],
        ["a", "b"],
    )  # fmt: skip
    assert launch_stats(t).summary["kernels"] == 1
    assert launch_stats(t, include_graphs=True).summary["kernels"] == 3
    cpu = timeline([(1, 0, 5, 0, COMPUTE, -1, -1, -1, -1, -1)], ["x"])
    r = launch_stats(cpu)
    assert r.summary["note"] == NO_LAUNCHES and r["launches"] == r["ranks"] == r["kernels"] == []


def test_group_stats_matches_pandas_describe():
    rng = np.random.default_rng(3)
    v, g = rng.integers(0, 1000, 500), rng.integers(0, 7, 500)
    s = group_stats(v, g, 8)  # group 7 is empty
    d = pd.DataFrame({"v": v, "g": g}).groupby("g")["v"].describe(percentiles=[0.25, 0.5, 0.75, 0.95])
    for ours, theirs in (("count", "count"), ("mean", "mean"), ("std", "std"), ("min", "min"), ("p25", "25%"),
                         ("p50", "50%"), ("p95", "95%"), ("max", "max")):  # fmt: skip
        np.testing.assert_allclose(s[ours][:7], d[theirs].to_numpy(), rtol=1e-12)
    assert s["count"][7] == 0 and np.isnan(s["mean"][7]) and np.isnan(s["p50"][7])


# ---------------------------------------------------------------- sequences
def test_ngrams_per_stream():
    names = ["A", "B", "C"]
    seq0 = [0, 1, 2, 0, 1, 2, 0, 1]  # stream 0: ABC twice, BCA twice, CAB twice
    k = [(0, 10 * i, 5, c, COMPUTE, -1, -1, -1, -1, -1) for i, c in enumerate(seq0)]
    k += [(1, 10 * i, 4, c, COMPUTE, -1, -1, -1, -1, -1) for i, c in enumerate([0, 1, 2])]
    r = frequent_sequences(timeline(k, names), length=3, top_k=None)
    by = {(x["stream"], x["pattern"]): x for x in r["sequences"]}
    assert {p: x["count"] for p, x in by.items()} == {
        (0, "A|B|C"): 2, (0, "B|C|A"): 2, (0, "C|A|B"): 2, (1, "A|B|C"): 1,
    }  # fmt: skip  # no window crosses from stream 0 into stream 1
    assert by[(0, "A|B|C")]["busy_ns"] == 30 and by[(0, "A|B|C")]["span_ns"] == 50
    assert by[(0, "A|B|C")]["gap_ns"] == 20 and by[(1, "A|B|C")]["kernels"] == names
    top = frequent_sequences(timeline(k, names), length=3, top_k=1)["sequences"]
    assert [(x["stream"], x["count"]) for x in top] == [(0, 2), (1, 1)]
    assert frequent_sequences(timeline(k, names), length=9)["sequences"] == []


def _op_timeline():
    # thread 1: step (0) > foo (1) > bar (2) launching A, B;  step > foo (3) > bar (4) launching A, B
    #           step > foo (5) launching A;  step > baz (6) launching C;  an unrelated op "foo_x"
    #           nested deeper inside baz: 7 (depth 2) launching A, B, C
    names = ["ProfilerStep#1", "aten::foo", "aten::bar", "aten::baz", "A", "B", "C", "aten::foo_x"]
    h = host(
        [(1, 0, 1000, 0, -1), (1, 10, 100, 1, 0), (1, 20, 50, 2, 1), (1, 200, 100, 1, 0), (1, 210, 50, 2, 3),
         (1, 400, 50, 1, 0), (1, 500, 100, 3, 0), (1, 510, 20, 7, 6)],
        names,
    )  # fmt: skip
    ks = [(7, 100, 10, 4, 0, 1, 21, 2, 2, -1), (7, 120, 20, 5, 0, 2, 23, 2, 2, -1), (7, 300, 10, 4, 0, 3, 211, 2, 4, -1),
          (7, 320, 20, 5, 0, 4, 213, 2, 4, -1), (7, 460, 15, 4, 0, 5, 401, 2, 5, -1), (7, 600, 1, 6, 0, 6, 501, 2, 6, -1),
          (7, 610, 1, 4, 0, 7, 511, 2, 7, -1), (7, 620, 1, 5, 0, 8, 512, 2, 7, -1), (7, 630, 1, 6, 0, 9, 513, 2, 7, -1)]  # fmt: skip
    return timeline(ks, names, host=h)


def test_sequences_of_an_op():
    t = _op_timeline()
    r = frequent_sequences(t, length=1, top_k=None, op="aten::foo")
    # roots: the three aten::foo at depth 1 (aten::foo_x, deeper, is not a root)
    got = {x["pattern"]: (x["count"], x["gpu_duration_ns"], x["cpu_duration_ns"]) for x in r["sequences"]}
    assert got == {"aten::foo|A|B": (2, 60, 200), "aten::foo|A": (1, 15, 50)}
    assert r.summary["roots"] == {0: 3}
    r2 = frequent_sequences(t, length=2, op="aten::foo")["sequences"]
    assert [x["pattern"] for x in r2] == ["aten::foo|A|B"] and r2[0]["kernels"] == ["A", "B"]
    assert frequent_sequences(t, length=1, op="nope")["sequences"] == []


def test_op_kernel_map_inner_and_top():
    t = _op_timeline()
    m = op_kernel_map(t)
    ops = {x["op"]: x for x in m["ops"]}
    assert ops["aten::bar"]["count"] == 4 and ops["aten::bar"]["calls"] == 2 and ops["aten::bar"]["gpu_total_ns"] == 60
    assert ops["aten::bar"]["kernel_names"] == ["B", "A"]  # by GPU time
    assert ops["aten::foo_x"]["count"] == 3
    top = {x["op"]: x for x in m["top_ops"]}
    assert set(top) == {"aten::foo", "aten::baz"}  # below the profiler step
    assert top["aten::foo"]["count"] == 5 and top["aten::foo"]["calls"] == 3 and top["aten::baz"]["count"] == 4
    pairs = {(x["level"], x["op"], x["kernel"]): x["count"] for x in m["pairs"]}
    assert pairs[("top_ops", "aten::baz", "C")] == 2 and pairs[("ops", "aten::bar", "A")] == 2
    assert op_kernel_map(timeline([(1, 0, 5, 0, 0, -1, -1, -1, -1, -1)], ["x"])).summary["note"]


# ---------------------------------------------------------------- counters and memory
def test_queue_length_known_series():
    # k1 launched at 0, starts at 10; k2 launched at 5, starts at 20
    t = timeline(
        [(7, 10, 5, 0, COMPUTE, 1, 0, 2, -1, -1), (7, 20, 5, 0, COMPUTE, 2, 5, 2, -1, -1)], ["k"]
    )  # fmt: skip
    c = counters(t, max_queue_length=2)
    assert [(x["ts_ns"], x["queue_length"]) for x in c["queue_length"]] == [(0, 1), (5, 2), (10, 1), (20, 0)]
    (s,) = c["queue_summary"]
    assert s["count"] == 4 and s["mean"] == 1.0 and s["max"] == 2 and s["min"] == 0
    assert s["time_weighted_mean"] == pytest.approx((1 * 5 + 2 * 5 + 1 * 10) / 20)
    assert s["duration_at_max_ns"] == 5 and s["relative_duration_at_max"] == pytest.approx(5 / 1000)
    binned = counters(t, bin_ns=10)["queue_length"]
    assert [(x["ts_ns"], x["queue_length"]) for x in binned] == [(0, 1.5), (10, 1.0), (20, 0.0)]


def test_memory_bandwidth_known_series():
    names = ["Memcpy HtoD (Pageable -> Device)", "Memset (Device)"]
    # two overlapping copies (1000 B over 100 ns = 10 GB/s; 500 B over 50 ns = 10 GB/s), one memset
    t = timeline(
        [(7, 0, 100, 0, MEMORY, 1, -1, -1, -1, 1000), (8, 50, 50, 0, MEMORY, 2, -1, -1, -1, 500),
         (7, 200, 0, 1, MEMORY, 3, -1, -1, -1, 2000)],
        names,
    )  # fmt: skip
    c = counters(t)
    pts = [(x["name"], x["ts_ns"], x["memory_bw_gbps"]) for x in c["memory_bw"]]
    # one point per change, as HTA: both copies end at 100
    assert pts[:4] == [
        ("Memcpy HtoD", 0, 10.0),
        ("Memcpy HtoD", 50, 20.0),
        ("Memcpy HtoD", 100, 10.0),
        ("Memcpy HtoD", 100, 0.0),
    ]
    assert pts[-2:] == [("Memset", 200, 2.0), ("Memset", 1200, 0.0)]  # 0 ns lasts 1 us, as in HTA
    s = {x["name"]: x for x in c["memory_bw_summary"]}
    assert s["Memcpy HtoD"]["count"] == 3 and s["Memcpy HtoD"]["copies"] == 2  # non-zero points, as HTA
    assert s["Memcpy HtoD"]["bytes"] == 1500 and s["Memcpy HtoD"]["busy_ns"] == 150
    assert s["Memset"]["max"] == 2.0 and c.summary.get("queue_note") == NO_LAUNCHES
    (b,) = [x for x in counters(t, bin_ns=100)["memory_bw"] if x["name"] == "Memcpy HtoD"][:1]
    assert b["memory_bw_gbps"] == pytest.approx(15.0)  # 1500 bytes in 100 ns


def test_memory_timeline_known_and_absent():
    mem = {
        "ts": np.array([10, 20, 30, 40, 5]), "bytes": np.array([100, 50, -100, -50, 8]),
        "allocated": np.array([100, 150, 50, 0, 8]), "reserved": np.array([200, 200, 200, 200, 0]),
        "device": np.array([0, 0, 0, 0, -1]), "device_type": np.array([1, 1, 1, 1, 0]),
    }  # fmt: skip
    m = memory_timeline(timeline([], ["k"], memory=mem))
    d = {x["device"]: x for x in m["devices"]}
    assert (
        d["cuda:0"].items()
        >= {"events": 4, "allocations": 2, "allocated_bytes": 150, "frees": 2, "freed_bytes": 150}.items()
    )
    assert d["cuda:0"]["peak_allocated"] == 150 and d["cuda:0"]["peak_allocated_ts_ns"] == 20
    assert d["cuda:0"]["peak_reserved"] == 200 and d["cpu"]["events"] == 1
    assert [x["allocated"] for x in m["series"] if x["device"] == "cuda:0"] == [100, 150, 50, 0]
    empty = memory_timeline(timeline([], ["k"]))
    assert empty.summary == {"memory_events": 0, "note": NO_MEMORY} and empty["series"] == []


# ---------------------------------------------------------------- the repository's traces
def test_repo_traces_have_no_memory_events(resnet, linear, ddp):
    # none of the traces in the repository was recorded with profile_memory=True
    for job in (resnet, linear, ddp):
        r = memory_timeline(job)
        assert r.summary["note"] == NO_MEMORY and r["devices"] == []


@pytest.mark.parametrize("which", ["resnet", "linear"])
def test_invariants_on_gpu_heads(which, request):
    job = request.getfixturevalue(which)
    (t,) = list(job)
    r = launch_stats(job)
    df = r.to_pandas("launches")
    assert len(df) == int((t.launch_start >= 0).sum())
    assert (df.launch_delay_ns >= 0).all() and (df.cpu_duration_ns >= 0).all()
    assert sum(k["count"] for k in r["kernels"]) == len(df)
    m = op_kernel_map(job)
    n_op = int((t.op >= 0).sum())
    assert sum(x["count"] for x in m["ops"]) == n_op == sum(x["count"] for x in m["top_ops"])
    assert sum(x["gpu_total_ns"] for x in m["ops"]) == int(t.dur[t.op >= 0].sum())
    seq = frequent_sequences(job, length=2, top_k=None)["sequences"]
    windows = sum(max(int((t.stream == s).sum()) - 1, 0) for s in t.streams)
    assert sum(x["count"] for x in seq) == windows
    c = counters(job)
    q = c.to_pandas("queue_length")
    assert (q.groupby("stream").queue_length.last() == 0).all() and q.queue_length.min() >= 0
    assert sum(x["copies"] for x in c["memory_bw_summary"]) == int(((t.kind == MEMORY) & (t.bytes >= 0)).sum())


def test_cpu_pair_has_no_launches(ddp):
    assert launch_stats(ddp).summary["note"] == NO_LAUNCHES
    c = counters(ddp)
    assert c.summary["queue_note"] == NO_LAUNCHES and c["queue_length"] == []
    m = op_kernel_map(ddp)  # each CPU activity is its own host op
    assert {x["rank"] for x in m["ops"]} == {0, 1}
    assert sum(x["count"] for x in m["ops"] if x["rank"] == 0) == len(ddp.ranks[0])
    assert frequent_sequences(JobTimeline({1: ddp.ranks[1]}), 2, top_k=1)["sequences"]


# ---------------------------------------------------------------- HTA 0.5.0 on the same files
# The figures below come from HTA 0.5.0 (TraceAnalysis(trace_dir=...) on a folder holding a copy
# of the same file with distributedInfo {"rank": 0} added): get_cuda_kernel_launch_stats(ranks=[0],
# visualize=False), get_queue_length_summary(ranks=[0]), get_memory_bw_summary(ranks=[0]) and
# get_frequent_cuda_kernel_sequences(op, out_dir, min_pattern_len=L, rank=0). HTA works in us.
def test_launch_stats_agree_with_hta(resnet, linear):
    for job, hta in (
        # kernels, short, runtime outliers, delay outliers, median cpu/gpu/delay, p95 delay, sums cpu/gpu/delay (us)
        (resnet, (431, 123, 11, 414, 7, 130, 11321, 88721, 956994, 222509, 12194957)),
        (linear, (297, 172, 5, 90, 9, 9, 3, 388.8, 5496, 12407, 26017)),
    ):
        r = launch_stats(job)
        (k,) = r["ranks"]
        assert (r.summary["kernels"], r.summary["short_kernels"]) == hta[:2]
        assert (r.summary["runtime_outliers"], r.summary["launch_delay_outliers"]) == hta[2:4]
        ours = [k[f"{c}_p50_ns"] for c in ("cpu_duration", "gpu_duration", "launch_delay")] + [k["launch_delay_p95_ns"]]
        np.testing.assert_allclose(ours, np.asarray(hta[4:8]) * 1000)
        tot = [k[f"{c}_total_ns"] for c in ("cpu_duration", "gpu_duration", "launch_delay")]
        assert tot == [x * 1000 for x in hta[8:]]


def test_queue_length_agrees_with_hta(resnet, linear):
    # per stream: count, mean, std, 25%, 50%, 75%, max of HTA's queue-length points
    want = {
        (7,): (858, 59.742424, 51.581749, 20, 39, 99, 182), (20,): (2, 0.5, 0.707107, 0.25, 0.5, 0.75, 1),
        (36,): (2, 0.5, 0.707107, 0.25, 0.5, 0.75, 1),
    }  # fmt: skip
    got = {(x["stream"],): x for x in counters(resnet)["queue_summary"]}
    for key, (n, mean, std, p25, p50, p75, mx) in want.items():
        x = got[key]
        assert x["count"] == n and x["max"] == mx and (x["p25"], x["p50"], x["p75"]) == (p25, p50, p75)
        assert x["mean"] == pytest.approx(mean, abs=1e-6) and x["std"] == pytest.approx(std, abs=1e-6)
    (x,) = counters(linear)["queue_summary"]
    assert (x["count"], x["max"], x["p50"], x["p75"]) == (594, 12, 1, 3)
    assert x["mean"] == pytest.approx(2.038721, abs=1e-6) and x["std"] == pytest.approx(2.572428, abs=1e-6)
    # memory bandwidth: HTA counts the same non-zero points; its values use Kineto's bandwidth
    # argument (bytes over the exact duration), ours bytes over the trace's duration, rounded to
    # 1 us in these traces, so only the counts are compared
    assert {x["name"]: x["count"] for x in counters(resnet)["memory_bw_summary"]} == {
        "Memcpy DtoD": 62, "Memcpy HtoD": 5, "Memset": 14,
    }  # fmt: skip
    assert [x["count"] for x in counters(linear)["memory_bw_summary"]] == [63]


def test_frequent_sequences_agree_with_hta(resnet):
    # (count, GPU kernel duration us, CPU op duration us), in HTA's order (count desc, pattern)
    for op, length, want in (
        ("aten::conv2d", 3, [(16, 29646, 12747), (1, 3087, 2095120), (1, 1721, 88)]),
        ("aten::add_", 1, [(24, 72, 759), (10, 2650, 260)]),
        ("aten::batch_norm", 1, [(10, 2588, 791), (7, 4879, 624), (5, 343, 396), (2, 6202, 116095)]),
    ):
        got = frequent_sequences(resnet, length=length, top_k=None, op=op)["sequences"]
        assert [(x["count"], x["gpu_duration_ns"], x["cpu_duration_ns"]) for x in got] == [
            (c, g * 1000, p * 1000) for c, g, p in want
        ]
        assert all(x["pattern"].startswith(op + "|") for x in got)
    assert frequent_sequences(resnet, length=3, op="aten::batch_norm")["sequences"] == []  # as HTA: none
