"""Every GPU microsecond of a Kineto trace is kept by `chakra convert kineto`, or listed with its
reason: an invariant over every Kineto trace at hand (the public traces of ../shared/traces/gpu-wild
and param, the project's own under tests/data), not an expected value per trace.

Ground truth comes from the raw JSON in a few lines (`_truth`): the GPU activities (and MTIA's
work, `_is_work`) per (device, stream) of their args, else (pid, tid), the recorded window (the
CPU-side ``ProfilerStep#N`` annotations; the whole recording without any), each activity's
launch (the runtime call with its correlation id, else its own start).
The converted job is measured by `analyze.streams.stream_busy` after a round trip through .et."""

from __future__ import annotations

import gzip
import json
import re
import warnings
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.analyze.streams import stream_busy
from chakra_trace.convert.profiler import convert_kineto, convert_kineto_trace
from chakra_trace.convert.pytorch import convert_pytorch
from chakra_trace.errors import TraceFormatError
from chakra_trace.io.et import read_trace, write_trace
from chakra_trace.schema.enums import NodeType
from chakra_trace.simulate.presets import simulate_on
from conftest import DATA, SHARED, run_cli

# today's categories and PyTorch 1.8's (2021: Kernel, Memcpy, Memset, Operator, Runtime)
GPU = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
CPU = {"cpu_op", "user_annotation", "Operator"}
RUNTIME = {"cuda_runtime", "cuda_driver", "Runtime", "mtia_runtime"}
STEP = re.compile(r"ProfilerStep#\d+$")


def _is_work(e: dict) -> bool:
    """A GPU activity, or MTIA's (all under ``mtia_ccp_events``): every one of its events is work
    (kernels, pe_exe, dma_request copies) except the ``event_record`` / ``event_wait`` markers."""
    if e.get("cat") == "mtia_ccp_events":
        return not str(e.get("name", "")).startswith("event_")
    return e.get("cat") in GPU


def _corpus() -> list[Path]:
    files = sorted((SHARED / "gpu-wild").glob("*.json.gz")) + sorted((SHARED / "param").glob("*kineto*"))
    return files + sorted(DATA.rglob("*.kineto.json.gz"))


def _id(p: Path) -> str:
    return str(p.relative_to(SHARED) if p.is_relative_to(SHARED) else p.relative_to(DATA.parent))


def _union(iv: list[tuple[int, int]]) -> int:
    tot, end = 0, None
    for s, e in sorted(iv):
        if end is None or e > end:
            tot += e - (s if end is None else max(s, end))
            end = e
    return tot


def _ns(v) -> int:
    return int(Decimal(v) * 1000)  # (µs as written: a float of 1.7e15 µs is off by up to 0.25 µs)


def _truth(path: Path) -> dict:
    """From the raw file: per stream, every GPU activity's (start, end) ns, and those launched
    inside the recorded window."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    ev = [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc) if e.get("ph") == "X"]
    gpu = [e for e in ev if _is_work(e)]
    launch_at = {
        e["args"]["correlation"]: _ns(e["ts"])
        for e in ev
        if e.get("cat") in RUNTIME and "correlation" in e.get("args", {})
    }
    steps = [e for e in ev if e.get("cat") in CPU and STEP.match(e.get("name", ""))]
    lo = min((_ns(e["ts"]) for e in steps), default=None)
    hi = max((_ns(e["ts"]) + _ns(e.get("dur", 0)) for e in steps), default=None)
    streams: dict[tuple[int, int], dict] = {}
    for e in gpu:
        s = _ns(e["ts"])
        t = launch_at.get(e.get("args", {}).get("correlation"), s)
        a = e.get("args", {})  # (2021 traces name the track "stream 7": the numbers are in args)
        key = (int(a.get("device", e["pid"])), int(a.get("stream", e["tid"])))
        st = streams.setdefault(key, {"all": [], "kept": []})
        st["all"].append((s, s + max(_ns(e.get("dur", 0)), 0)))
        if lo is None or (lo <= t <= hi and s >= lo):  # (no steps: the whole recording is the window)
            st["kept"].append(st["all"][-1])
    return {"streams": streams, "events": len(gpu)}


@pytest.mark.parametrize("path", _corpus(), ids=_id)
def test_gpu_time_is_kept_or_listed(path, tmp_path):
    if not path.is_file():
        pytest.skip(f"needs {path}: ../shared/traces beside the checkout (CI has it)")
    _check_conserved(path, tmp_path)


@pytest.mark.parametrize("path", _corpus(), ids=_id)
def test_recorded_replay_is_the_recording(path):
    """`simulate --system recorded` of the converted job takes as long as what it keeps ran, host
    and GPU, from the first start to the last end (the GPU may run past the host's steps): the
    edges, the kept waits and the ops that waited for the GPU reproduce the run (to 10 ppm and 2 µs:
    times are whole µs)."""
    if not path.is_file():
        pytest.skip(f"needs {path}: ../shared/traces beside the checkout (CI has it)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job, _ = convert_kineto([path], shapes=False)  # (one file: one rank, numbered as recorded)
    (trace,) = job.traces.values()
    p2p = np.isin(trace.types, [int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)])
    if p2p.any():  # (validate refuses it: a receive's sender is absent)
        pytest.skip("one rank of a pipeline: its peers' sends are not in the file")
    start, end = trace.start.astype(np.int64), (trace.start + trace.duration).astype(np.int64)
    span_ns = int(end.max() - start.min()) * 1000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = simulate_on(job, "recorded").step_ns
    assert step == pytest.approx(span_ns, rel=1e-5, abs=2000)


def _check_conserved(path: Path, tmp_path: Path):
    """The invariant on one file: every GPU activity kept or listed, per stream, against the raw
    JSON; the converted job's busy time per stream equal to the file's; no edge slows it down."""
    truth = _truth(path)
    trace, rep = convert_kineto_trace(path, shapes=False)
    gt = rep.gpu_time
    if not truth["events"]:
        assert gt is None or gt.events == 0
        return trace, rep
    assert gt is not None
    # kept + listed as left out = every GPU activity of the file, per stream
    by = {(s.device, s.stream): s for s in gt.streams}
    assert set(by) == set(truth["streams"])
    for k, st in truth["streams"].items():
        s = by[k]
        assert s.events == len(st["all"])
        assert s.kept + sum(s.dropped.values()) == s.events
        assert s.kept == len(st["kept"]), k  # the ones launched inside the window
        assert s.busy_us == pytest.approx(_union(st["all"]) / 1000, abs=1e-3)
        assert s.kept_us == pytest.approx(_union(st["kept"]) / 1000, abs=1e-3)
    # the converted job (written and read back) runs what the report says, stream by stream:
    # its times are whole µs, so the file's intervals are rounded likewise
    write_trace(trace, tmp_path / "rank.et")
    back = read_trace(tmp_path / "rank.et")
    busy = stream_busy(back).busy_us()
    for k, st in truth["streams"].items():
        expect = _union([(round(Fraction(a, 1000)), round(Fraction(b, 1000))) for a, b in st["kept"]])
        assert busy.get(k, 0) == expect, k
    # and no dependency makes it slower than the run: every edge goes from a node that ended to
    # one that started later (a kernel that started inside its launching op follows what ran
    # before the op; an op that waited for the GPU keeps its time after the wait), up to the
    # rounding of times to whole µs
    ip, pred = back.graph().preds
    pred, node = pred.astype(np.int64), np.repeat(np.arange(len(back)), np.diff(ip))
    late = (
        back.start[pred].astype(np.int64) + back.duration[pred].astype(np.int64) > back.start[node].astype(np.int64) + 1
    )
    assert not late.any(), [(int(a), int(b)) for a, b in zip(pred[late][:5], node[late][:5])]
    assert rep.gpu_nodes == sum(len(st["kept"]) for st in truth["streams"].values())
    return trace, rep


def test_cli_reports_gpu_time(tmp_path, capsys):
    """`convert kineto` prints the GPU time kept of the file's, and --json has it per stream."""
    path = SHARED / "gpu-wild" / "hta_event_sync_multistream.json.gz"
    if not path.is_file():
        pytest.skip(f"needs {path}: ../shared/traces beside the checkout (CI has it)")
    rc, out, _ = run_cli(["convert", "kineto", str(path), "-o", str(tmp_path / "a")], capsys)
    assert rc == 0 and "GPU time kept" in out
    rc, out, _ = run_cli(["convert", "kineto", str(path), "-o", str(tmp_path / "b"), "--json"], capsys)
    d = json.loads(out)["ranks"]["0"]["gpu_time"]
    assert d["events"] == d["kept"] + sum(d["dropped"].values())
    assert {"device", "stream", "busy_us", "kept_us"} <= set(d["streams"][0])


def _x(name, cat, ts, dur, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_work_no_op_launched_and_work_after_the_window(tmp_path):
    """A graph replay launched outside any CPU op gets nodes of its own on its stream, after what
    the launching thread ran before; work that runs after the step is kept; work launched
    before the step is listed, not kept."""
    ev = [
        _x("cudaLaunchKernel", "cuda_runtime", 5, 5, correlation=9),  # before the step
        _x("early_kernel", "kernel", 12, 30, tid=7, pid=0, correlation=9, stream=7, device=0),
        _x("ProfilerStep#1", "user_annotation", 10, 400),
        _x("aten::mm", "cpu_op", 20, 80),
        _x("cudaLaunchKernel", "cuda_runtime", 30, 10, correlation=1),
        _x("gemm", "kernel", 50, 100, tid=7, pid=0, correlation=1, stream=7, device=0),
        _x("cudaGraphLaunch", "cuda_runtime", 120, 10, correlation=2),  # inside the step, in no op
        _x("graph_a", "kernel", 150, 100, tid=7, pid=0, correlation=2, stream=7, device=0),
        _x("graph_b", "kernel", 250, 300, tid=7, pid=0, correlation=2, stream=7, device=0),  # ends after the step
        _x("aten::add", "cpu_op", 200, 50),
    ]
    path = tmp_path / "rank0.kineto.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    t, rep = convert_kineto_trace(path)
    gt = rep.gpu_time
    assert gt is not None and (gt.events, gt.kept) == (4, 3)
    assert gt.dropped() == {"launched before the recorded window": 1}
    assert gt.kept_us == 500 and gt.busy_us == 530  # 50-550; the file: 12-42 and 50-550
    assert "3 of 4 activities" in gt.summary() and len(gt.to_table()) == 1
    names = t.name_array.tolist()
    node = {n: names.index(n) for n in ("aten::mm", "gemm", "graph_a", "graph_b", "aten::add")}
    ip, pred = t.graph().preds
    preds = {n: set(pred[ip[k] : ip[k + 1]].tolist()) for n, k in node.items()}
    assert node["gemm"] in preds["graph_a"]  # the stream's order
    assert node["graph_a"] in preds["graph_b"]
    assert node["aten::mm"] in preds["graph_a"]  # the thread had run aten::mm when it launched the graph
    assert stream_busy(t).busy_us() == {(0, 7): 500}
    assert stream_busy(t).to_table()["busy_us"] == [500]


def test_host_and_kineto_conversion_accounts_for_gpu_time():
    """`convert pytorch HOST KINETO` shares the rank graph: every GPU activity of the Kineto file
    is kept or listed (PARAM's linear: the host trace holds one iteration of many profiled)."""
    et, kin = SHARED / "param" / "linear_et.json.gz", SHARED / "param" / "linear_kineto.json.gz"
    if not (et.is_file() and kin.is_file()):
        pytest.skip(f"needs {et.parent}: ../shared/traces beside the checkout (CI has it)")
    truth = _truth(kin)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t, rep = convert_pytorch(et, kin)
    gt = rep.gpu_time
    assert gt is not None and gt.events == truth["events"]
    assert gt.kept + sum(gt.dropped().values()) == gt.events and 0 < gt.kept < gt.events
    assert set(gt.dropped()) <= {"launched before the recorded window", "launched after the recorded window"}
    assert int(t.attr_array("stream", np.int64)[1].sum()) == gt.kept
    busy = stream_busy(t).busy_us()
    for s in gt.streams:
        assert abs(busy.get((s.device, s.stream), 0) - s.kept_us) <= 1 + s.kept  # (whole µs per node)


def _gpu_only(tmp_path: Path, name: str = "gpu_only.json.gz") -> Path:
    """A GPU-only trace (what TraceLens' MI210 example is: hip runtime calls and kernels, no CPU
    op): two threads launch onto two streams, one kernel launched by no recorded call."""
    ev = [
        _x("hipLaunchKernel", "cuda_runtime", 100, 5, tid=11, pid=11, correlation=1),
        _x("k1", "kernel", 110, 50, tid=0, pid=1, correlation=1, stream=0, device=1),
        _x("hipLaunchKernel", "cuda_runtime", 106, 5, tid=11, pid=11, correlation=2),
        _x("k2", "kernel", 160, 30, tid=0, pid=1, correlation=2, stream=0, device=1),  # queued behind k1
        _x("hipMemcpyAsync", "cuda_runtime", 120, 4, tid=12, pid=11, correlation=3),
        _x("Memcpy HtoD", "gpu_memcpy", 130, 20, tid=3, pid=1, correlation=3, stream=3, device=1),
        _x("k3", "kernel", 200, 10, tid=0, pid=1, correlation=99, stream=0, device=1),  # no launch recorded
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "x", "ts": 90, "dur": 140},
        {"ph": "M", "name": "process_name", "pid": 11, "tid": 0, "args": {"name": "python3"}},
    ]
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": ev}).encode()))
    return path


def test_gpu_only_trace_is_a_job_of_its_gpu_work(tmp_path, capsys):
    """No CPU op recorded (the MI210 trace of TraceLens' examples): the job is the GPU activities,
    one node each, chained per stream, in a window that is the whole recording; GPU time is
    conserved (the corpus invariant), and the report says the host side was not recorded."""
    path = _gpu_only(tmp_path)
    t, rep = _check_conserved(path, tmp_path)
    assert not rep.host_recorded and rep.cpu_ops == 0
    assert any("host side was not recorded" in w for w in rep.warnings)
    gt = rep.gpu_time
    assert gt is not None and (gt.events, gt.kept, gt.dropped()) == (4, 4, {})
    assert len(t) == rep.gpu_nodes == 4 and rep.span_us == 140  # the profiler's span: 90-230 µs
    names = t.name_array.tolist()
    ip, pred = t.graph().preds
    preds = {n: {names[p] for p in pred[ip[k] : ip[k + 1]]} for k, n in enumerate(names)}
    assert preds == {"k1": set(), "k2": {"k1"}, "k3": {"k2"}, "Memcpy HtoD": set()}  # stream order only
    assert stream_busy(t).busy_us() == {(1, 0): 90, (1, 3): 20}
    rc, out, _ = run_cli(["convert", "kineto", str(path), "-o", str(tmp_path / "out")], capsys)
    assert rc == 0 and "host side was not recorded" in out and "GPU time kept 0.11 of 0.11 ms" in out


@pytest.mark.parametrize(
    "events, held",
    [
        ([_x("hipLaunchKernel", "cuda_runtime", 100, 5, correlation=1)], "1 cuda_runtime"),
        ([{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python3"}}], "1 uncategorized"),
        ([], "no events"),
    ],
    ids=["runtime-calls-only", "metadata-only", "empty"],
)
def test_trace_without_ops_or_gpu_work_is_refused(tmp_path, capsys, events, held):
    """Neither CPU ops nor GPU activity: nothing ran that a job could be made of; refused in one
    line that names the file and what it holds."""
    path = tmp_path / "rank0.kineto.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    with pytest.raises(TraceFormatError, match=f"holds {held}.*: no CPU op .* and no GPU activity"):
        convert_kineto_trace(path)
    rc, out, err = run_cli(["convert", "kineto", str(path), "-o", str(tmp_path / "out")], capsys)
    assert rc != 0 and str(path) in err and held in err and len(err.strip().splitlines()) == 1


def _flow(ph, fid, ts, tid=1, pid=1):
    return {"ph": ph, "cat": "ac2g", "name": "ac2g", "id": fid, "pid": pid, "tid": tid, "ts": ts} | (
        {"bp": "e"} if ph == "f" else {}
    )


def test_mtia_work_is_device_work(tmp_path):
    """Meta's MTIA writes its device activity as ``mtia_ccp_events``: kernels and ``dma_request``
    copies become nodes on their stream (``args.stream``; the track where none), linked to their
    ``mtia_runtime`` launch by correlation or by an ``ac2g`` flow alone; ``event_wait`` /
    ``event_record`` are markers, not work: counted apart, never GPU time. Copies of one stream
    that ran side by side stay side by side (no edge between them); what follows waits for both."""
    dev = {"pid": 17, "tid": 300}
    ev = [
        _x("dma_request", "mtia_ccp_events", 2, 4, pid=17, tid=400, direction="DEVICE_TO_HOST", size=16),  # before
        _x("ProfilerStep#1", "user_annotation", 10, 400),
        _x("aten::to", "cpu_op", 20, 30),
        _x("enqueueCommand memcpyHtoDAsync", "mtia_runtime", 25, 2, correlation=6, device=17, stream_id=101),
        _flow("s", 6, 25),
        _x("dma_request", "mtia_ccp_events", 60, 30, **dev, correlation=6, stream=101, direction="HOST_TO_DEVICE"),
        _flow("f", 6, 60, **dev),
        _x("dma_request", "mtia_ccp_events", 70, 40, **dev, correlation=6, stream=101, direction="HOST_TO_DEVICE"),
        _flow("f", 6, 70, **dev),
        _x("aten::add", "cpu_op", 100, 50),
        _x("runFunction - job_prep_and_submit_for_execution", "mtia_runtime", 110, 5, correlation=7, device=17),
        _flow("s", 7, 110),
        _x("add-dtype_Float", "mtia_ccp_events", 160, 90, **dev, stream=101),  # linked by the flow alone
        _flow("f", 7, 160, **dev),
        _x("event_record", "mtia_ccp_events", 250, 1, **dev, stream=101),
        _x("event_wait", "mtia_ccp_events", 150, 60, pid=17, tid=301, stream=102, wait_on_stream=101),
        _x("aten::item", "cpu_op", 210, 100),
        _x("synchronizeStream", "mtia_runtime", 215, 90, correlation=8, device=17, stream_id=101),
    ]
    path = tmp_path / "rank0.kineto.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": ev}).encode()))
    truth = _truth(path)
    t, rep = convert_kineto_trace(path)
    gt = rep.gpu_time
    assert gt is not None and truth["events"] == gt.events == 4 and gt.kept == 3
    assert gt.dropped() == {"launched before the recorded window": 1}
    assert {(s.device, s.stream) for s in gt.streams} == set(truth["streams"]) == {(17, 101), (17, 400)}
    assert gt.kept_us == 140  # 60-110 and 160-250 on stream 101; the markers are no GPU time
    assert rep.gpu_events == {"gpu_memcpy": 3, "kernel": 1}
    assert rep.sync_markers == {"event_record": 1, "event_wait": 1} and rep.sync_marker_us == 61
    assert not rep.warnings
    names = t.name_array.tolist()
    assert "event_wait" not in names and "event_record" not in names
    ip, pred = t.graph().preds
    preds = {k: set(pred[ip[k] : ip[k + 1]].tolist()) for k in range(len(t))}
    dma = [k for k, n in enumerate(names) if n == "dma_request"]
    add, op_add, item = names.index("add-dtype_Float"), names.index("aten::add"), names.index("aten::item")
    assert len(dma) == 2 and not preds[dma[1]] & {dma[0]} and not preds[dma[0]] & {dma[1]}  # side by side
    assert set(dma) <= preds[add]  # the kernel after both copies of its stream
    assert op_add in preds[add]  # launched by aten::add (the ac2g flow: no correlation on the kernel)
    assert add in preds[item]  # aten::item waited in synchronizeStream for the stream's work
    assert stream_busy(t).busy_us() == {(17, 101): 140}
