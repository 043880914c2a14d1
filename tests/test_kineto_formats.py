"""Every Kineto dialect is read as one, and every host trace schema loads (io/kineto_formats.py).

Real traces of other projects are read in place from ../shared/traces (gpu-wild: NVIDIA, AMD,
MTIA, a PyTorch 1.8 trace, metadata-first files, HTA's "ns resolution" trace; param; chakra), one
test per format class, with ground truth counted from the raw JSON by a few lines here. Variants
the corpus lacks (hip runtime names on a tiny trace, both spellings of a category in one file,
``displayTimeUnit: ns``, a metadata object before traceEvents) are written in tmp_path.
"""

from __future__ import annotations

import gzip
import json
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.analyze.device.kernels import kernel_breakdown
from chakra_trace.convert.profiler import convert_kineto_trace
from chakra_trace.convert.pytorch import convert_pytorch
from chakra_trace.errors import TraceFormatError
from chakra_trace.io import kineto
from chakra_trace.io.kineto import read_kineto
from chakra_trace.io.kineto_formats import LEGACY_CATS, is_blocking_call, json_kind
from chakra_trace.io.pytorch_host import read_host_trace
from chakra_trace.io.workload import sniff
from chakra_trace.timeline.job import JobTimeline, from_chakra, from_kineto
from conftest import SHARED, run_cli

WILD = SHARED / "gpu-wild"
KINETO_FILES = sorted(WILD.glob("*.json.gz")) + sorted((SHARED / "param").glob("*_kineto.json.gz"))
HOST_FILES = (
    sorted((SHARED / "param").glob("*_et*.json.gz"))
    + sorted((SHARED / "pytorch-cpu").glob("*.et.json.gz"))
    + [SHARED / "chakra" / "allgather_host_1.0.2.json.gz"]
)
# the GPU activity of a trace, in either spelling (written out here, not taken from the code)
GPU = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}


def _device_work(e: dict) -> bool:
    """GPU activity, or MTIA's work: every ``mtia_ccp_events`` event but its ``event_*`` markers."""
    if e.get("cat") == "mtia_ccp_events":
        return not str(e.get("name", "")).startswith("event_")
    return e.get("cat") in GPU


def _needs(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"needs {path}: ../shared/traces beside the checkout (CI has it)")
    return path


def _raw(path: Path) -> dict:
    """The file as json gives it, numbers with decimals as `Decimal` (µs since the epoch, 1.7e15,
    have no ns left in a float)."""
    with gzip.open(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


def _ns(us) -> int:
    """µs (as written: an int, a Decimal or a float of a test's own) -> int ns."""
    return int((Decimal(str(us)) * 1000).to_integral_value(ROUND_HALF_UP))


def _ids(paths):
    return [p.name.split(".json")[0] for p in paths]


# ------------------------------------------------------------------------------ the wild corpus
@pytest.mark.parametrize("path", KINETO_FILES, ids=_ids(KINETO_FILES))
def test_wild_trace_gpu_activity_and_steps_as_in_the_file(path):
    """Every format class: the device activity read (timeline) is the file's, event for event and
    ns for ns (legacy ``Kernel``/``Memcpy``/``Memset`` too), the steps are the host's
    ``ProfilerStep#N`` (not their GPU-side copies), and the file is sniffed as Kineto wherever
    its ``traceEvents`` key is."""
    raw = _raw(_needs(path))
    ev = raw["traceEvents"]
    gpu = [e for e in ev if e.get("ph") == "X" and _device_work(e)]
    host_steps = {
        (e["name"], e["ts"])
        for e in ev
        if e.get("ph") == "X"
        and str(e.get("name", "")).startswith("ProfilerStep#")
        and e.get("cat") not in ("gpu_user_annotation", "gpu_user_Annotation")
    }
    k = read_kineto(path)
    t = from_kineto(k)
    if gpu:
        assert t.source == "kineto-gpu"
        assert len(t) == len(gpu)
        assert int(t.dur.sum()) == sum(_ns(max(e.get("dur", 0), 0)) for e in gpu)
    else:
        assert t.source == "kineto-cpu"
    assert len(k.steps()) == len(host_steps)
    assert sniff(path) == "kineto"


def test_legacy_categories_pytorch_1_8():
    """A 2021 trace (``Operator``/``Kernel``/``Runtime``/``Memcpy``/``Memset``): kernels found,
    every launch linked through its ``Runtime`` call, the host side converted."""
    path = _needs(WILD / "v100_resnet50_2021.pt.trace.json.gz")
    ev = _raw(path)["traceEvents"]
    kernels = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "Kernel"]
    ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "Operator"]
    k = read_kineto(path)
    assert k.renamed_cats == {c: LEGACY_CATS[c] for c in ("Operator", "Runtime", "Kernel", "Memcpy", "Memset")}
    assert int(k.mask("kernel", "X").sum()) == len(kernels) > 8000
    t = from_kineto(k)
    assert np.count_nonzero(t.launch_start >= 0) == len(t)  # every activity has its runtime call
    trace, rep = convert_kineto_trace(k)
    assert rep.cpu_ops == len(ops)
    assert rep.gpu_events["kernel"] == len(kernels)
    assert rep.steps == len({e["name"] for e in ops if e["name"].startswith("ProfilerStep#")})


def test_gpu_side_step_annotations_are_no_steps():
    """Traces that mirror ProfilerStep#N onto a GPU stream: steps are counted once, from the host."""
    for name in ("h100_bert_small_inference", "hta_mi250_minitoy_train"):
        path = _needs(WILD / f"{name}.json.gz")
        ev = _raw(path)["traceEvents"]
        on_gpu = [e for e in ev if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("ProfilerStep#")]
        on_host = {e["name"] for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
        assert on_gpu  # (what this test is about)
        assert [f"ProfilerStep#{n}" for n, _, _ in read_kineto(path).steps()] == sorted(on_host)


def test_ns_resolution_trace_is_in_microseconds():
    """HTA's ns-resolution trace says ``displayTimeUnit: ns`` but its ts and dur are µs (with
    decimals): consecutive profiler steps start where the previous one ends plus a gap far below
    one step, which holds only if dur is read in the unit of ts."""
    path = _needs(WILD / "hta_ns_resolution_rank0.json.gz")
    raw = _raw(path)
    assert raw["displayTimeUnit"] == "ns"
    steps = sorted((e["ts"], e["dur"]) for e in raw["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#"))
    got = read_kineto(path).steps()
    assert [(s, e - s) for _, s, e in got] == [(_ns(ts), _ns(d)) for ts, d in steps]
    for (_, s0, e0), (_, s1, _) in zip(got, got[1:]):
        assert 0 <= s1 - e0 < (e0 - s0) / 10


def test_mtia_device_activity_is_device_work():
    """A trace of Meta's MTIA: its device activity (``mtia_ccp_events``) is read as device work,
    by name (kernels and ``pe_exe`` / ``remote`` / ``merge`` compute, ``dma_request`` memory),
    its ``event_record`` / ``event_wait`` markers are not work and are counted apart; every
    launch recorded by ``mtia_runtime`` is linked, and the file and the converted job agree on
    the kinds of work."""
    path = _needs(WILD / "hta_mtia_inference_rank0.json.gz")
    ev = [e for e in _raw(path)["traceEvents"] if e.get("ph") == "X"]
    ccp = [e for e in ev if e.get("cat") == "mtia_ccp_events"]
    marks = [e for e in ccp if e["name"].startswith("event_")]
    dma = [e for e in ccp if e["name"].startswith("dma")]
    work = [e for e in ccp if not e["name"].startswith("event_")]
    launched = {e["args"]["correlation"] for e in ev if e.get("cat") == "mtia_runtime" and "correlation" in e["args"]}
    ops = sum(1 for e in ev if e.get("cat") in ("cpu_op", "user_annotation"))
    k = read_kineto(path)
    assert "mtia_ccp_events" in k.renamed_cats and "mtia_ccp_events" not in k.category_counts()
    t = from_kineto(k)
    assert t.source == "kineto-gpu" and len(t) == len(work)
    assert int(np.count_nonzero(t.launch_start >= 0)) == sum(
        1 for e in work if e["args"].get("correlation") in launched
    )
    trace, rep = convert_kineto_trace(k)
    assert rep.cpu_ops == ops and not rep.warnings
    assert rep.gpu_events == {"gpu_memcpy": len(dma), "kernel": len(work) - len(dma)}
    assert sum(rep.sync_markers.values()) == len(marks)
    assert rep.sync_marker_us == pytest.approx(sum(_ns(e["dur"]) for e in marks) / 1000, abs=1e-3)
    assert rep.gpu_time is not None and rep.gpu_time.events == len(work)
    kinds = {(r["kind"], r["count"]) for r in kernel_breakdown(JobTimeline({0: t})).tables["kinds_all"]}
    assert kinds == {
        (r["kind"], r["count"]) for r in kernel_breakdown(JobTimeline({0: from_chakra(trace, 0)})).tables["kinds_all"]
    }
    assert ("memory", len(dma)) in kinds and ("computation", len(work) - len(dma)) in kinds


def test_metadata_first_file_analyzed_by_the_cli(capsys):
    """`chakra analyze kernels` on a file whose top-level ``metadata`` comes before traceEvents
    (it was taken for Chakra JSON and refused)."""
    path = _needs(WILD / "h100_vit_inference.json.gz")
    raw = _raw(path)
    assert next(iter(raw)) == "metadata"
    n = sum(1 for e in raw["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU)
    rc, out, err = run_cli(["analyze", "kernels", str(path), "--json"], capsys)
    assert rc == 0, err
    assert json.loads(out)["summary"]["activities"] == n


def test_native_and_pure_readers_agree_on_legacy_categories():
    """The categories are renamed after either path has read them: one result."""
    if kineto._native is None:
        pytest.skip("C Kineto scanner not built")
    path = _needs(WILD / "v100_resnet50_2021.pt.trace.json.gz")
    a = read_kineto(path)
    saved = kineto._native
    kineto._native = None
    try:
        b = read_kineto(path)
    finally:
        kineto._native = saved
    assert a.cats == b.cats and a.renamed_cats == b.renamed_cats
    for col in a._COLUMNS:
        assert np.array_equal(getattr(a, col), getattr(b, col)), col


# ------------------------------------------------------------------------------ host traces
@pytest.mark.parametrize("path", HOST_FILES, ids=_ids(HOST_FILES))
def test_every_host_trace_schema_loads_and_converts(path):
    """Host execution traces of schemas 1.0.1 to 1.1.1: every node read, a Chakra trace out; and
    the Kineto reader names them for what they are instead of 'no traceEvents'."""
    raw = _raw(_needs(path))
    host = read_host_trace(path)
    assert host.schema == raw["schema"] and len(host) == len(raw["nodes"])
    trace, _ = convert_pytorch(path)
    assert len(trace) > 0
    assert sniff(path) == "pytorch-host"
    with pytest.raises(TraceFormatError, match=r"host execution trace \(schema .*chakra convert pytorch"):
        read_kineto(path)


# ------------------------------------------------------------------------------ synthetic variants
def _write(tmp_path: Path, doc: dict, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def _launch_trace(runtime: str, sync: str, cat: str = "cuda_runtime") -> list[dict]:
    """One op that launches a kernel (correlation 7) and then waits for the device."""
    return [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 100.0},
        {
            "ph": "X",
            "cat": cat,
            "name": runtime,
            "pid": 1,
            "tid": 1,
            "ts": 20.0,
            "dur": 5.0,
            "args": {"correlation": 7},
        },  # fmt: skip
        {"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 1, "tid": 1, "ts": 200.0, "dur": 100.0},
        {"ph": "X", "cat": "cuda_runtime", "name": sync, "pid": 1, "tid": 1, "ts": 210.0, "dur": 80.0},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "Cijk_gemm",
            "pid": 0,
            "tid": 7,
            "ts": 30.0,
            "dur": 250.5,
            "args": {"correlation": 7, "stream": 7, "device": 0},
        },  # fmt: skip
    ]


@pytest.mark.parametrize(
    ("runtime", "sync", "cat"),
    [
        ("hipLaunchKernel", "hipDeviceSynchronize", "cuda_runtime"),
        ("hipExtModuleLaunchKernel", "hipMemcpyWithStream", "cuda_runtime"),
        ("cuLaunchKernel", "cudaStreamSynchronize", "cuda_driver"),
    ],
)
def test_hip_and_driver_launches_link_and_sync(tmp_path, runtime, sync, cat):
    """ROCm and driver-API launches are linked to their kernel, and the blocking call that follows
    makes the next op wait for it, as with cudaLaunchKernel / cudaDeviceSynchronize."""
    p = _write(tmp_path, {"traceEvents": _launch_trace(runtime, sync, cat)})
    t = from_kineto(read_kineto(p))
    assert len(t) == 1 and t.launch_start.tolist() == [20_000] and t.dur.tolist() == [250_500]
    trace, rep = convert_kineto_trace(p)
    assert rep.gpu_nodes == 1 and not rep.warnings
    kernel = next(n for n in trace if n.name == "Cijk_gemm")
    item = next(n for n in trace if n.name == "aten::item")
    assert kernel.id in item.data_deps  # the op that synchronized waits for the kernel


def test_blocking_calls_in_every_spelling():
    for name in (
        "cudaDeviceSynchronize", "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize",
        "cuCtxSynchronize", "cuStreamSynchronize", "cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream",
        "hipMemset", "cuMemcpyDtoH_v2", "cuMemsetD32_v2",
    ):  # fmt: skip
        assert is_blocking_call(name), name
    for name in ("cudaLaunchKernel", "hipLaunchKernel", "hipMemcpyAsync", "cuMemcpyDtoHAsync_v2", "hipGraphLaunch"):
        assert not is_blocking_call(name), name


def test_both_spellings_of_a_category_are_one(tmp_path):
    """A file with ``Kernel`` and ``kernel`` events (and ``gpu_user_Annotation``): one category each."""
    ev = _launch_trace("cudaLaunchKernel", "cudaDeviceSynchronize")
    ev.append(dict(ev[-1], cat="Kernel", ts=400.0, args={"correlation": 8, "stream": 7}))
    ev.append(
        {"ph": "X", "cat": "gpu_user_Annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 0, "dur": 1}
    )
    k = read_kineto(_write(tmp_path, {"traceEvents": ev}))
    assert k.cats.count("kernel") == 1 and "Kernel" not in k.cats
    assert int(k.mask("kernel").sum()) == 2 and k.steps() == []
    assert k.renamed_cats == {"Kernel": "kernel", "gpu_user_Annotation": "gpu_user_annotation"}


def test_display_time_unit_does_not_change_units(tmp_path):
    """ts and dur are µs whatever ``displayTimeUnit`` says."""
    ev = _launch_trace("cudaLaunchKernel", "cudaDeviceSynchronize")
    got = [read_kineto(_write(tmp_path, {"displayTimeUnit": u, "traceEvents": ev}, f"{u}.json")) for u in ("ms", "ns")]
    assert got[0].ts.tolist() == got[1].ts.tolist() == [_ns(e["ts"]) for e in ev]
    assert got[1].dur.tolist()[-1] == 250_500


def test_sniffer_reads_top_level_keys_only(tmp_path):
    """A metadata object (large, with keys named like the markers inside it) before traceEvents
    is Kineto; the same keys only nested are not."""
    meta = {"profiler": {"schema": "x", "traceEvents": [], "pad": ["y" * 1000] * 40}}
    ev = _launch_trace("cudaLaunchKernel", "cudaDeviceSynchronize")
    p = _write(tmp_path, {"metadata": meta, "traceEvents": ev})
    assert sniff(p) == "kineto"
    assert len(read_kineto(p)) == len(ev)
    assert json_kind(json.dumps({"format": "chakra", "metadata": meta}).encode()) is None
    assert json_kind(json.dumps({"metadata": meta, "schema": "1.1.1", "nodes": []}).encode()) == "pytorch-host"
