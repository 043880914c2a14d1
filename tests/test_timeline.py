"""Perfetto / Chrome trace timelines of recorded and simulated workloads."""

from __future__ import annotations

import dataclasses
import gzip
import json
import warnings
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.visualize.timeline import (
    NEST_LANES,
    RESOURCES,
    assign_lanes,
    build_timeline,
    timeline,
    timeline_json,
    write_timeline,
)
from conftest import sample


# ---------------------------------------------------------------------- helpers
def _ns(v) -> int:
    return round(v * 1000)


def _slices(doc) -> dict[tuple[int, int], list[dict]]:
    by = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by[(e["pid"], e["tid"])].append(e)
    return by


def _assert_nested(doc) -> None:
    """On every (pid, tid), two slices are disjoint or one contains the other."""
    for key, evs in _slices(doc).items():
        iv = sorted((_ns(e["ts"]), -_ns(e["ts"] + e["dur"])) for e in evs)
        stack: list[int] = []
        for s, neg_e in iv:
            e = -neg_e
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or e <= stack[-1], f"partial overlap on {key} at {s} ns"
            stack.append(e)


def _bound(doc, ev) -> dict:
    """The slice Perfetto binds a flow event to: the deepest one open at its ts on its track."""
    t = _ns(ev["ts"])
    open_ = [x for x in _slices(doc)[(ev["pid"], ev["tid"])] if _ns(x["ts"]) <= t < _ns(x["ts"]) + _ns(x["dur"])]
    assert open_, f"flow {ev['id']} at {ev['ts']} µs lies in no slice of {ev['pid']}/{ev['tid']}"
    return max(open_, key=lambda x: (_ns(x["ts"]), -_ns(x["dur"])))


def _flows(doc) -> dict[int, dict]:
    out: dict[int, dict] = defaultdict(lambda: {"s": [], "f": []})
    for e in doc["traceEvents"]:
        if e["ph"] in ("s", "f"):
            out[e["id"]][e["ph"]].append(e)
    for fl in out.values():  # one start, later than nothing it links to
        assert len(fl["s"]) == 1 and fl["f"]
        assert all(f["bp"] == "e" and f["ts"] > fl["s"][0]["ts"] for f in fl["f"])
    return out


@pytest.fixture(scope="session")
def ddp(ddp_pair) -> Workload:  # the converted DDP pair (conftest), shared: tests must not change it
    return ddp_pair


# ---------------------------------------------------------------------- recorded
def _two_ranks() -> Workload:
    traces = {}
    for r, origin in ((0, 10**12), (1, 10**12 + 2_500_500)):
        b = TraceBuilder(metadata={"time_origin_ns": origin})
        a = b.comp("gemm", 1500, start=100)
        c = b.comp("launch", 40, start=100, is_cpu_op=True, deps=[a])
        b.collective("ALL_REDUCE", 4096, deps=[c], duration=300, start=1700)
        traces[r] = b.build()
    return Workload(traces)


def test_units_offsets_tracks_and_metadata():
    doc = timeline(_two_ranks(), align="origin")
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    gemm = {e["pid"]: e for e in x if e["name"] == "gemm"}
    assert gemm[0]["dur"] == 1500 and gemm[1]["dur"] == 1500  # µs, as the format wants
    assert gemm[0]["ts"] == 100 and gemm[1]["ts"] == pytest.approx(100 + 2500.5)  # plus rank 1's offset
    assert doc["displayTimeUnit"] == "ns" and doc["metadata"]["offsets_ns"] == {"0": 0, "1": 2_500_500}
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert procs == {0: "rank 0", 1: "rank 1"}
    assert {"process_sort_index", "thread_sort_index"} <= {e["name"] for e in meta}
    # no thread or stream attribute: a track per resource, each slice on its own
    for e in x:
        assert threads[(e["pid"], e["tid"])] == {"gemm": "compute", "launch": "cpu", "all_reduce": "comm"}[e["name"]]
    ar = next(e for e in x if e["name"] == "all_reduce")
    assert ar["cat"] == "comm_coll,comm" and ar["args"]["comm_type"] == "ALL_REDUCE"
    assert ar["args"]["bytes"] == 4096 and ar["args"]["group"] == "all" and ar["args"]["type"] == "COMM_COLL_NODE"
    assert {e["ts"] for e in timeline(_two_ranks(), align="none")["traceEvents"] if e.get("name") == "gemm"} == {100}
    fl = _flows(doc)
    assert len(fl) == 1 and next(iter(fl.values()))["s"][0]["name"] == "all#0 ALL_REDUCE"
    assert RESOURCES == ("compute", "cpu", "comm", "other")


def test_converted_ddp_pair_threads_nesting_and_collective_flows(ddp):
    from chakra_trace.analyze.collectives import collective_stats

    doc = timeline(ddp)
    _assert_nested(doc)
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"thread 11248", "thread 11249"} <= threads  # the recorded threads
    assert {"thread 11271", "thread 11273"} <= threads  # rank 0's gloo workers: collectives beside backward
    assert not any("#2" in t for t in threads)  # a node ends where the next starts: no 1-µs rounding overlaps
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(x) == sum(int((t.duration > 0).sum()) for t in ddp.traces.values())
    expect = defaultdict(dict)  # (group, k) -> rank -> node id
    for rec in collective_stats(ddp).records:
        expect[(rec["group"], rec["index"])][rec["rank"]] = rec["node_id"]
    flows = _flows(doc)
    seen = set()
    for fl in flows.values():
        name = fl["s"][0]["name"]
        group, rest = name.split("#")
        k = int(rest.split()[0])
        got = {}
        for ev in fl["s"] + fl["f"]:
            sl = _bound(doc, ev)
            assert sl["args"]["type"] == "COMM_COLL_NODE" and ev["cat"] == "collective"
            got[ev["pid"]] = sl["args"]["node_id"]
        assert got == expect[(group, k)], name
        seen.add((group, k))
    assert seen == set(expect) and len(seen) == 8


def test_gpu_kernels_sit_on_their_stream():
    from chakra_trace.convert.pytorch import convert_pytorch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t, _ = convert_pytorch(sample("linear_et.json.gz"), sample("kineto/linear_kineto_head.json.gz"))
    doc = timeline(t)
    _assert_nested(doc)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    on = defaultdict(set)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            on[names[(e["pid"], e["tid"])]].add(e["cat"])
    assert on["device 0 stream 7"] == {"comp,compute"}  # kernels: the recorded device and stream
    assert {"thread 24248", "thread 24270"} <= set(on) and on["thread 24248"] == {"comp,cpu"}


def test_max_events_keeps_the_longest(ddp):
    full = build_timeline(ddp)
    tl = build_timeline(ddp, max_events=50)
    assert len(tl) == 50 and tl.metadata["capped"] and "50 longest" in tl.metadata["note"]
    assert tl.dur_ns.min() >= np.sort(full.dur_ns)[-50]
    doc = tl.to_chrome()
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == 50
    _assert_nested(doc)
    for fl in _flows(doc).values():
        for ev in fl["s"] + fl["f"]:
            assert _bound(doc, ev)["args"]["type"] == "COMM_COLL_NODE"
    assert "capped" not in full.metadata and len(full) == full.metadata["slices"]


def test_bad_input_is_named():
    with pytest.raises(ChakraError, match="workload"):
        timeline(None)
    with pytest.raises(ChakraError, match="align"):
        timeline(_two_ranks(), align="clock")
    with pytest.raises(ChakraError, match="max_events"):
        timeline(_two_ranks(), max_events=-1)
    b = TraceBuilder()  # durations without start times (the reference converter's traces)
    b.comp("a", 5, deps=[b.comp("b", 7)])
    tl = build_timeline(Workload({0: _two_ranks()[0], 3: b.build()}))
    assert tl.metadata["untimed_ranks"] == [3] and "no start times" in tl.metadata["warnings"][0]
    assert {t["pid"] for t in tl.tracks} == {0} and len(tl) == 3


# ---------------------------------------------------------------------- lanes
intervals = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 25), st.booleans()), max_size=40)


@given(intervals)
@settings(max_examples=300, deadline=None)
def test_lanes_are_properly_nested(iv):
    tr = np.array([t for t, *_ in iv], np.int64)
    s = np.array([x for _, x, _, _ in iv], np.int64)
    e = s + np.array([d for *_, d, _ in iv], np.int64)
    pin = np.array([p for *_, p in iv], bool)
    lanes = assign_lanes(s, e, tr, pin)
    assert np.array_equal(lanes, assign_lanes(s, e, tr, pin))  # deterministic
    for t in set(tr.tolist()):
        on = tr == t
        lane_set = set(lanes[on].tolist())
        assert lane_set == set(range(len(lane_set)))  # no lane skipped
        disjoint = all(s[i] >= e[j] or s[j] >= e[i] for i in np.flatnonzero(on) for j in np.flatnonzero(on) if i < j)
        if disjoint:
            assert lane_set == {0}
        for ln in lane_set:
            idx = np.flatnonzero(on & (lanes == ln))
            for i in idx:
                for j in idx:
                    if i == j:
                        continue
                    nested = s[i] <= s[j] and e[j] <= e[i]
                    assert s[j] >= e[i] or s[i] >= e[j] or nested or (s[j] <= s[i] and e[i] <= e[j]), (i, j)
                    # a pinned slice has no child starting with it: a point just inside it is its own
                    assert not (pin[i] and nested and s[j] == s[i] < e[j] and (e[j] < e[i] or j > i))


def test_many_partial_overlaps_use_bounded_lanes():
    s = np.arange(200, dtype=np.int64)
    e = s + 30  # each overlaps the next 29 partially
    lanes = assign_lanes(s, e)
    assert lanes.max() >= NEST_LANES  # past the nesting lanes: disjoint lanes
    for ln in np.unique(lanes):
        idx = np.flatnonzero(lanes == ln)
        assert (s[idx][1:] >= e[idx][:-1]).all()
    assert lanes.max() < 31


# ---------------------------------------------------------------------- simulated
def _system():
    from chakra_trace.simulate.config import SystemConfig

    return SystemConfig.from_dict(
        {
            "scheduling-policy": "LIFO",
            "endpoint-delay": 10,
            "active-chunks-per-dimension": 1,
            "preferred-dataset-splits": 4,
            "all-reduce-implementation": ["ring"],
            "all-gather-implementation": ["ring"],
            "reduce-scatter-implementation": ["ring"],
            "all-to-all-implementation": ["ring"],
            "collective-optimization": "localBWAware",
            "local-mem-bw": 1600,
        }
    )


def test_simulated_timeline_slices_and_flows(tmp_path):
    from chakra_trace.simulate import simulate
    from chakra_trace.simulate.config import Network
    from chakra_trace.synthesize import from_spec

    net = Network.simple(["Ring", "Switch"], [4, 2], [100, 50], [50, 500])
    w = from_spec("train:layers=3:comp_us=50:size=1048576", net.npus)
    res = simulate(w, net, _system())
    doc = timeline(w, res)
    _assert_nested(doc)
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    want = {}
    for npu, (start, end, _kind) in res.nodes.items():
        for r in np.flatnonzero(end >= 0).tolist():
            want[(npu, int(w.traces[npu].ids[r]))] = (int(start[r]), int(end[r] - start[r]))
    assert {(e["pid"], e["args"]["node_id"]): (_ns(e["ts"]), _ns(e["dur"])) for e in x} == want
    assert len(x) == len(want)
    procs = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert procs == {f"NPU {n}" for n in range(8)}
    flows = _flows(doc)
    assert len(flows) == len(res.collectives) == 3
    for fl in flows.values():
        bound = [_bound(doc, ev) for ev in fl["s"] + fl["f"]]
        assert all(b["args"]["type"] == "COMM_COLL_NODE" for b in bound)
        assert len({ev["pid"] for ev in fl["s"] + fl["f"]}) == 8
        assert len({b["name"] for b in bound}) == 1  # the same layer's all-reduce on every NPU
    # the result alone knows the traces it ran: the same document
    assert timeline(None, res) == doc
    path = tmp_path / "sim.json.gz"
    write_timeline(timeline(None, res), path)
    assert json.loads(gzip.decompress(path.read_bytes())) == json.loads(json.dumps(doc))


def test_one_trace_run_on_every_npu_and_result_without_traces():
    from chakra_trace.simulate import simulate
    from chakra_trace.simulate.config import Network

    b = TraceBuilder()
    c = b.comp("fwd", 20)
    b.collective("ALL_GATHER", 1 << 16, deps=[c])
    w = Workload({0: b.build()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate(w, Network.simple("Ring", 4, 50, 500), _system())
    bare = dataclasses.replace(res, traces={})
    doc = timeline(w, bare)  # the workload's single trace stands for every NPU
    flows = _flows(doc)
    assert len(flows) == 1 and len(next(iter(flows.values()))["f"]) == 3
    for fl in flows.values():
        assert {_bound(doc, ev)["name"] for ev in fl["s"] + fl["f"]} == {"all_gather"}
    alone = timeline(None, bare)  # nothing but the result: names, no node attributes, no flows
    x = [e for e in alone["traceEvents"] if e["ph"] == "X"]
    assert len(x) == 8 and {e["name"] for e in x} == {"fwd", "all_gather"}
    assert not _flows(alone) and all("row" in e["args"] for e in x)


def test_simulated_send_receive_flows():
    from chakra_trace.simulate import simulate
    from chakra_trace.simulate.config import Network
    from chakra_trace.synthesize import from_spec

    w = from_spec("p2p:size=4096", 4)
    res = simulate(w, Network.simple("Ring", 4, 50, 500), _system())
    doc = timeline(w, res)
    _assert_nested(doc)
    flows = _flows(doc)
    assert len(flows) == 4
    for fl in flows.values():
        (s,), (f,) = fl["s"], fl["f"]
        assert s["cat"] == "p2p" and _bound(doc, s)["args"]["type"] == "COMM_SEND_NODE"
        assert _bound(doc, f)["args"]["type"] == "COMM_RECV_NODE" and f["pid"] == (s["pid"] + 1) % 4


# ---------------------------------------------------------------------- CLI
def test_cli_writes_a_loadable_gzip(ddp, tmp_path, capsys):
    from chakra_trace.cli import main

    ddp.save(tmp_path / "job")
    out = tmp_path / "ddp.json.gz"
    assert main(["timeline", str(tmp_path / "job"), "-o", str(out), "--max-events", "100"]) == 0
    text = capsys.readouterr().out
    assert str(out) in text and "https://ui.perfetto.dev" in text
    # the file is timeline()'s document as timeline_json() writes it (what the report's button saves)
    assert gzip.decompress(out.read_bytes()) == timeline_json(timeline(ddp, max_events=100))
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == 100 and doc["metadata"]["capped"]
    assert main(["timeline", str(tmp_path / "job"), "-o", str(tmp_path / "t.json"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ranks"] == 2 and info["flows"] == 8
    assert (tmp_path / "t.json").read_bytes() == timeline_json(timeline(ddp))
    p = write_timeline({"traceEvents": []}, tmp_path / "empty.json")
    assert json.loads(p.read_text()) == {"traceEvents": []}
