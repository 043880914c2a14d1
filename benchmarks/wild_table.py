#!/usr/bin/env python3
"""Profiler traces from the wild: what `chakra convert kineto` keeps of each, beside the raw file, HTA and TraceLens.

    python benchmarks/wild_table.py FOLDER... [--json OUT] [--max-mb 200] [--timeout 300]
        [--hta /tmp/hta-venv/bin/python] [--tracelens /tmp/tl-venv/bin/python]

For every Kineto trace under the folders (``*.json``, ``*.json.gz``, recursively; files that are
not Kineto traces are listed as such) one row:

- the device vendor (``deviceProperties`` names, else the runtime's names: ``hip*`` is AMD);
- GPU time in the file: per stream (pid, stream) the union of its kernel / memcpy / memset
  intervals, summed over streams, and the plain sum of durations (Meta MTIA's ``mtia_ccp_events``
  too: ``event_*`` markers are no work, ``dma*`` are copies, the rest kernels); read from the raw
  JSON by the few lines of `file_figures`, never by the code under test;
- GPU time kept after conversion: the same union over the converted job's nodes that carry a
  ``stream`` (the GPU nodes), through `chakra_trace.intervals`;
- the communication share of kernel time: in the file, kernels whose name matches `COMM_RE`;
  after conversion, as the library's kernel analysis (`chakra analyze kernels`) counts the
  converted job: communication over communication + computation kernel time; HTA's,
  time of the ``get_gpu_kernel_breakdown`` classes naming COMMUNICATION over those naming
  COMMUNICATION or COMPUTATION (memory-only time left out, as in the two others; HTA's classes
  are wall time, so overlapped kernels count once), or its one-line failure; TraceLens's,
  ``total_comm_time`` over ``total_comm_time`` + ``computation_time`` of its GPU timeline (also
  wall time, memcpy and idle left out; `tracelens_side.py` says exactly what these are), or its
  one-line failure;
- TraceLens's GPU busy time: the union of all GPU events over every stream at once (wall time,
  so at most the per-stream sum of the file column), with, where it differs, the busy time of
  TraceLens's default that keeps only GPU events linked to a CPU op;
- collectives: communication kernels in the file vs COMM nodes by type after conversion;
- steps: distinct CPU-side ``ProfilerStep#N`` annotations in the file vs the converter's;
- ``simulate --system recorded`` of the converted job vs its recorded span (first start to last
  end of what it keeps, host and GPU: the GPU may run past the host's steps).

Each trace is measured in a child process with a time limit (``--timeout``) and an address-space
limit (``--mem-mb``); a file over ``--max-mb`` is listed, not read. A failure is the row's text,
never the end of the table. HTA (HolisticTraceAnalysis, not a dependency of chakra-trace) runs
under the Python given by ``--hta`` (`hta_side.py`), e.g.
``python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis "pandas<3"``.
TraceLens (AMD's, no dependency either; installed from its source, see `tracelens_side.py`) runs
likewise under ``--tracelens``, with the address-space limit of ``--mem-mb``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Communication kernels by name, any library: NCCL / RCCL (ncclKernel_*, ncclDevKernel_* incl.
# SendRecv and RCCL's Generic), MSCCL(++), NVSHMEM, DeepEP-style expert-parallel kernels
# (dpsk::ep::internode::dispatch, deep_ep::intranode::combine, notify_dispatch, ...), vLLM's
# custom all-reduce (cross_device_reduce), AMD's quick reduce, symmetric-memory one/two-shot and
# multimem all-reduce, and any kernel named for a collective.
COMM_RE = re.compile(
    r"nccl|rccl|msccl|nvshmem|\bdeep_?ep\b|\bep::|(?:inter|intra)node::|cross_device_reduce|quick_?reduce"
    r"|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv|(?:one|two)_?shot|multimem",
    re.I,
)
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}  # (legacy 1.8: Kernel, Memcpy, Memset)
CPU_STEP_CATS = {"cpu_op", "user_annotation", "operator"}  # a GPU-side step annotation is no step
STEP_RE = re.compile(r"ProfilerStep#(\d+)$")


# ------------------------------------------------------------------------------------ the raw file
def load_events(path: str | os.PathLike) -> tuple[dict, list]:
    """The top-level members and the ``traceEvents`` of a Chrome-trace JSON (plain or gzip)."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if isinstance(doc, list):
        return {}, doc
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError("not a Chrome/Kineto trace: no traceEvents array")
    return doc, doc["traceEvents"]


def vendor(doc: dict, events: list) -> str:
    """NVIDIA, AMD, MTIA or "?" with the first device name (from deviceProperties, else the runtime)."""
    names = [str(d.get("name", "")) for d in doc.get("deviceProperties") or [] if isinstance(d, dict)]
    name = next((n for n in names if n), "")
    if re.search(r"AMD|Instinct|Radeon|\bMI\d", name):
        return f"AMD {name.replace('AMD Instinct ', '')}".strip()
    if re.search(r"NVIDIA|Tesla|Quadro|GeForce|RTX|\b[ABHV]\d{2,3}\b|GB\d{3}|B[23]00", name):
        return f"NVIDIA {name.replace('NVIDIA ', '')}".strip()
    backend = str((doc.get("distributedInfo") or {}).get("backend", ""))
    cats = {str(e.get("cat", "")) for e in events[:20000] if isinstance(e, dict)}
    if "mtia" in backend or any(c.startswith("mtia") for c in cats):
        return "MTIA"
    runtime = {
        str(e.get("name", ""))[:3].lower()
        for e in events[:20000]
        if isinstance(e, dict) and str(e.get("cat", "")).lower() in ("cuda_runtime", "runtime")
    }
    if "roctracer_version" in doc or "hip" in runtime:
        return f"AMD {name}".strip()
    if "cud" in runtime or "cupti_version" in doc:
        return f"NVIDIA {name}".strip()
    return name or "?"


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals (µs)."""
    total, reach, start = 0.0, None, 0.0
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            if reach is not None:
                total += reach - start
            start, reach = s, e
        else:
            reach = max(reach, e)
    return total + (reach - start if reach is not None else 0.0)


def kernel_label(name: str) -> str:
    """A kernel's short name: no return type, template or argument list, last scope only."""
    name = re.sub(r"^void ", "", name.replace("(anonymous namespace)::", ""))
    return re.sub(r"[(<].*", "", name).split("::")[-1].strip()[:40]


def file_figures(path: str | os.PathLike) -> dict[str, Any]:
    """What the raw file holds, by a few lines of plain Python over ``traceEvents``."""
    doc, events = load_events(path)
    per_stream: dict[tuple, list] = {}
    kernel_us = comm_us = sum_us = 0.0
    comm = Counter()
    steps = set()
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        dur = float(e.get("dur") or 0)
        if cat == "mtia_ccp_events":  # Meta MTIA's device events: event_* are markers, dma* copies
            name = str(e.get("name", ""))
            cat = "" if name.startswith("event_") else "memcpy" if name.startswith("dma") else "kernel"
        if cat in GPU_CATS:
            args = e.get("args") or {}
            key = (e.get("pid"), args.get("stream", e.get("tid")))
            ts = float(e.get("ts", 0))
            per_stream.setdefault(key, []).append((ts, ts + max(dur, 0.0)))
            sum_us += max(dur, 0.0)
            if cat == "kernel":
                kernel_us += max(dur, 0.0)
                if COMM_RE.search(str(e.get("name", ""))):
                    comm_us += max(dur, 0.0)
                    comm[kernel_label(str(e.get("name", "")))] += 1
        elif cat in CPU_STEP_CATS:
            m = STEP_RE.match(str(e.get("name", "")))
            if m:
                steps.add((int(m.group(1)), e.get("pid"), e.get("tid")))
    return {
        "device": vendor(doc, events),
        "rank": (doc.get("distributedInfo") or {}).get("rank"),
        "world": (doc.get("distributedInfo") or {}).get("world_size"),
        "gpu_union_us": sum(union_us(v) for v in per_stream.values()),
        "gpu_sum_us": sum_us,
        "streams": len(per_stream),
        "kernel_us": kernel_us,
        "comm_kernel_us": comm_us,
        "comm_share": comm_us / kernel_us if kernel_us else 0.0,
        "comm_kernels": sum(comm.values()),
        "comm_kernel_names": dict(comm.most_common(4)),
        "steps": len({s[0] for s in steps}),
    }


# ------------------------------------------------------------------------------------ converted
def converted_figures(path: str | os.PathLike, *, simulate: bool = True) -> dict[str, Any]:
    """`convert_kineto` of the file and what the converted job keeps (through the library)."""
    import numpy as np

    from chakra_trace.analyze import Analysis
    from chakra_trace.convert.profiler import convert_kineto
    from chakra_trace.intervals import length, union
    from chakra_trace.schema.enums import COMM_NODE_TYPES, NodeType

    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        workload, report = convert_kineto([path])
    (rank, trace), rep = next(iter(workload.traces.items())), next(iter(report.ranks.values()))
    stream, on_gpu = trace.attr_array("stream", np.int64)
    start = trace.start.astype(np.int64)
    dur = trace.duration.astype(np.int64)
    is_comm = np.isin(trace.types, [int(t) for t in COMM_NODE_TYPES])
    kept = 0
    for s in np.unique(stream[on_gpu]).tolist():
        rows = on_gpu & (stream == s)
        kept += length(union(start[rows], start[rows] + dur[rows]))
    # the communication share of kernel time as the library's kernel analysis counts it on the
    # converted job (copies and sets are memory, not kernels, as on the file's side)
    kinds = {r["kind"]: r["sum_us"] for r in Analysis(workload).devices().kernels().to_dict()["kinds_all"]}
    comm_t, all_t = kinds.get("communication", 0.0), kinds.get("communication", 0.0) + kinds.get("computation", 0.0)
    types = Counter(NodeType(int(t)).name.replace("COMM_", "").replace("_NODE", "") for t in trace.types[is_comm])
    out |= {
        "rank": rank,
        "kept_union_us": float(kept),
        "kept_sum_us": float(dur[on_gpu].sum()),
        "gpu_nodes": int(on_gpu.sum()),
        "gpu_events": int(sum(rep.gpu_events.values())),
        "comm_share": comm_t / all_t if all_t else 0.0,
        "comm_nodes": int(is_comm.sum()),
        "collectives": dict(rep.collectives) or ({"SEND/RECV": sum(rep.p2p.values())} if rep.p2p else {}),
        "comm_node_types": dict(types),
        "steps": rep.steps,
        "steps_us": list(rep.steps_us),
        "span_us": rep.span_us,
        # what ran, host and GPU, from the first start to the last end: `recorded` replays this
        "job_span_us": float((start + dur).max() - start.min()) if len(trace) else 0.0,
        "warnings": len(rep.warnings),
    }
    if simulate:
        from chakra_trace.simulate.presets import simulate_on

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out["sim_us"] = simulate_on(workload, "recorded").step_ns / 1000
        except Exception as e:  # noqa: BLE001 - a failure is the row's figure
            out["sim_error"] = one_line(e)
    return out


def one_line(e: BaseException) -> str:
    s = f"{type(e).__name__}: {e}".replace("|", "/").replace("\n", " ")
    return s[:160]


# ------------------------------------------------------------------------------------ HTA
def hta_figures(path: str | os.PathLike, python: str, timeout: float) -> dict[str, Any]:
    """HTA's kernel breakdown of the one trace, by `hta_side.py` under HTA's own Python."""
    tmp = tempfile.mkdtemp(prefix="wild_hta_")
    try:
        name = Path(path).name if str(path).endswith((".json", ".json.gz")) else Path(path).name + ".json"
        os.symlink(os.path.abspath(path), os.path.join(tmp, name))
        out = os.path.join(tmp, "hta.json.out")
        cmd = [python, str(HERE / "hta_side.py"), tmp, "--json", out, "--only", "kernels", "--rows", "10"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(HERE))
        except subprocess.TimeoutExpired:
            return {"error": f"timeout after {timeout:g} s"}
        if not os.path.exists(out):
            return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:160]}
        res = json.load(open(out))
        if not res.get("load", {}).get("ok"):
            return {"error": res.get("load", {}).get("error", "load failed")[:160]}
        k = res["analyses"].get("kernels", {})
        if not k.get("ok"):
            return {"error": k.get("error", "?")[:160]}
        by_type = {r.get("kernel_type"): float(r.get("sum", 0)) for r in k["result"][0]["head"]}
        # HTA 0.5 splits time into overlap classes ("COMPUTATION overlapping COMMUNICATION", ...)
        comm = sum(v for t, v in by_type.items() if "COMMUNICATION" in str(t))
        comp = sum(v for t, v in by_type.items() if "COMMUNICATION" not in str(t) and "COMPUTATION" in str(t))
        return {"comm_share": comm / (comm + comp) if comm + comp else 0.0, "by_type_us": by_type}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------ TraceLens
def tracelens_summary(res: dict[str, Any]) -> dict[str, Any]:
    """The table's TraceLens figures from `tracelens_side.py`'s JSON, or {"error": one line}."""
    if not res.get("load", {}).get("ok"):
        return {"error": str(res.get("load", {}).get("error", "load failed"))[:160]}
    tl = res.get("timeline", {})
    every, linked = tl.get("all", {}), tl.get("linked", {})
    if not every.get("ok"):
        return {"error": str(every.get("error", "no GPU timeline"))[:160]}
    us = every["us"]
    comm, comp = float(us.get("total_comm_time", 0.0)), float(us.get("computation_time", 0.0))
    out: dict[str, Any] = {
        "comm_share": comm / (comm + comp) if comm + comp else 0.0,
        "comm_us": comm,
        "comp_us": comp,
        "memcpy_us": float(us.get("total_memcpy_time", 0.0)),
        "busy_us": float(us.get("busy_time", 0.0)),
        "total_us": float(us.get("total_time", 0.0)),
        "version": res.get("version", "?"),
    }
    # TraceLens's default (its reports'): only GPU events linked to a CPU op; none linked is an error
    out["linked_busy_us"] = float(linked["us"].get("busy_time", 0.0)) if linked.get("ok") else 0.0
    return out


def tracelens_figures(path: str | os.PathLike, python: str, timeout: float, mem_mb: int = 12000) -> dict[str, Any]:
    """TraceLens's GPU timeline of the one trace, by `tracelens_side.py` under TraceLens's own Python."""
    tmp = tempfile.mkdtemp(prefix="wild_tl_")
    try:
        # TraceLens picks its reader by the name's ending: a plain .json or .json.gz link to the file
        with open(path, "rb") as f:
            name = "trace.json.gz" if f.read(2) == b"\x1f\x8b" else "trace.json"
        os.symlink(os.path.abspath(path), os.path.join(tmp, name))
        out = os.path.join(tmp, "tracelens.json.out")
        cmd = [python, str(HERE / "tracelens_side.py"), os.path.join(tmp, name), "--json", out]
        try:
            p = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp, preexec_fn=lambda: _limit_memory(mem_mb)
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timeout after {timeout:g} s"}
        except OSError as e:  # no such Python
            return {"error": one_line(e)}
        if not os.path.exists(out):
            why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
            if p.returncode < 0 or "MemoryError" in why:
                why = f"over {mem_mb} MB of memory ({why})"
            return {"error": why[:160]}
        with open(out) as f:
            return tracelens_summary(json.load(f))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------ a row
def measure(path: str | os.PathLike, *, simulate: bool = True) -> dict[str, Any]:
    """One trace's row: the raw file's figures and the converted job's, each failure as text."""
    row: dict[str, Any] = {"file": str(path)}
    try:
        row["raw"] = file_figures(path)
    except Exception as e:  # noqa: BLE001
        row["raw_error"] = one_line(e)
        return row
    try:
        row["conv"] = converted_figures(path, simulate=simulate)
    except Exception as e:  # noqa: BLE001
        row["conv_error"] = one_line(e)
    return row


def find_traces(folders: list[str]) -> list[Path]:
    out: list[Path] = []
    for f in folders:
        p = Path(f)
        if p.is_file():
            out.append(p)
            continue
        out.extend(sorted(q for q in p.rglob("*") if q.is_file() and q.name.endswith((".json", ".json.gz"))))
    return out


def is_kineto(path: Path) -> bool:
    """A Chrome-trace JSON with traceEvents (sniffed from its first 64 KiB)."""
    with open(path, "rb") as f:
        head = f.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    try:
        with opener(path, "rb") as f:
            text = f.read(1 << 16)
    except OSError:
        return False
    return b'"traceEvents"' in text or text.lstrip()[:1] == b"["


def measure_in_child(path: Path, *, timeout: float, mem_mb: int, simulate: bool = True) -> dict[str, Any]:
    """`measure` in a child process under a time and an address-space limit."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--row", str(path), "--mem-mb", str(mem_mb)]
    if not simulate:
        cmd.append("--no-simulate")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"file": str(path), "conv_error": f"timeout after {timeout:g} s"}
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        if p.returncode < 0 or "MemoryError" in why:
            why = f"over {mem_mb} MB of memory ({why})"
        return {"file": str(path), "conv_error": why[:160]}
    return json.loads(lines[-1])


def collect(
    folders: list[str],
    *,
    max_mb: float = 200,
    timeout: float = 300,
    mem_mb: int = 12000,
    hta: str | None = None,
    tracelens: str | None = None,
    simulate: bool = True,
    progress=None,
) -> list[dict[str, Any]]:
    """Every trace's row (`measure`, in a child), with HTA's and TraceLens's figures when
    ``hta`` / ``tracelens`` name their Pythons."""
    rows = []
    for path in find_traces(folders):
        mb = path.stat().st_size / 2**20
        if mb > max_mb:
            rows.append({"file": str(path), "skipped": f"{mb:.0f} MB > --max-mb {max_mb:g}"})
            continue
        if not is_kineto(path):
            rows.append({"file": str(path), "skipped": "not a Kineto trace (no traceEvents)"})
            continue
        row = measure_in_child(path, timeout=timeout, mem_mb=mem_mb, simulate=simulate)
        if hta and "raw" in row:
            row["hta"] = hta_figures(path, hta, timeout)
        if tracelens and "raw" in row:
            row["tracelens"] = tracelens_figures(path, tracelens, timeout, mem_mb)
        rows.append(row)
        if progress:
            progress(row)
    return rows


# ------------------------------------------------------------------------------------ the table
def _ms(us: float | None) -> str:
    return "–" if us is None else f"{us / 1000:,.1f}" if us >= 100 else f"{us / 1000:.3f}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: -kv[1])) or "0"


def name_of(row: dict, base: str | None = None) -> str:
    p = Path(row["file"])
    return str(p.relative_to(base)) if base and p.is_relative_to(base) else f"{p.parent.name}/{p.name}"


def markdown(rows: list[dict[str, Any]], base: str | None = None) -> str:
    """The table, one line per trace (Markdown)."""
    sys.path.insert(0, str(HERE))
    from readme_tables import table

    head = [
        "trace",
        "device",
        "GPU ms in file (union / sum)",
        "kept (union / sum)",
        "kept %",
        "comm: file",
        "converted",
        "HTA",
        "TraceLens",
        "TraceLens busy ms",
        "comm kernels in file",
        "COMM nodes after",
        "steps file / conv",
        "simulate recorded / recorded ms",
    ]
    out = []
    for r in rows:
        name = name_of(r, base)
        if "skipped" in r:
            out.append([name, "–", f"skipped: {r['skipped']}", *["–"] * (len(head) - 3)])
            continue
        if "raw" not in r:
            out.append([name, "–", f"unreadable: {r.get('raw_error', r.get('conv_error'))}", *["–"] * (len(head) - 3)])
            continue
        raw, conv = r["raw"], r.get("conv")
        hta = r.get("hta") or {}
        hta_s = _pct(hta["comm_share"]) if "comm_share" in hta else (f"fails: {hta['error']}" if hta else "–")
        tl_s = tracelens_cells(r.get("tracelens"))
        cells = [name, raw["device"], f"{_ms(raw['gpu_union_us'])} / {_ms(raw['gpu_sum_us'])}"]
        comm_file = _counts(raw["comm_kernel_names"]) if raw["comm_kernels"] else "0"
        if conv is None:
            cells += [f"fails: {r.get('conv_error')}", "–", _pct(raw["comm_share"]), "–", hta_s, *tl_s, comm_file, "–"]
            cells += [f"{raw['steps']} / –", "–"]
        else:
            kept = conv["kept_union_us"] / raw["gpu_union_us"] if raw["gpu_union_us"] else None
            recorded = conv["job_span_us"]
            sim = (
                _ms(conv["sim_us"])
                if "sim_us" in conv
                else f"fails: {conv['sim_error']}"
                if "sim_error" in conv
                else "–"
            )
            cells += [
                f"{_ms(conv['kept_union_us'])} / {_ms(conv['kept_sum_us'])}",
                _pct(kept),
                _pct(raw["comm_share"]),
                _pct(conv["comm_share"]),
                hta_s,
                *tl_s,
                comm_file,
                _counts(conv["comm_node_types"]) if conv["comm_nodes"] else "0",
                f"{raw['steps']} / {conv['steps']}",
                f"{sim} / {_ms(recorded)}",
            ]
        out.append(cells)
    return table(head, "llrrrrrlllllll", out)


def tracelens_cells(tl: dict[str, Any] | None) -> list[str]:
    """The two TraceLens cells: its communication share, its GPU busy ms (and its linked-only default's)."""
    if not tl:
        return ["–", "–"]
    if "error" in tl:
        return [f"fails: {tl['error']}", "–"]
    busy = _ms(tl["busy_us"])
    if abs(tl["linked_busy_us"] - tl["busy_us"]) > 0.0005 * tl["busy_us"]:
        busy += f" (linked {_ms(tl['linked_busy_us'])})"
    return [_pct(tl["comm_share"]), busy]


def failures(rows: list[dict[str, Any]], base: str | None = None) -> list[str]:
    """The worst of each row, one line each: GPU time lost, communication share off, errors."""
    out = []
    for r in rows:
        raw, conv, why = r.get("raw"), r.get("conv"), []
        if raw is None:
            continue
        if conv is None:
            why.append(f"convert fails: {r.get('conv_error')}")
        else:
            lost = raw["gpu_union_us"] - conv["kept_union_us"]
            rounding = conv["gpu_nodes"]  # converted times are whole µs: up to 1 µs per node
            if raw["gpu_union_us"] and lost > max(0.01 * raw["gpu_union_us"], rounding):
                why.append(
                    f"GPU time lost {_ms(lost)} of {_ms(raw['gpu_union_us'])} ms "
                    f"({_pct(lost / raw['gpu_union_us'])}; {conv['gpu_nodes']} of {conv['gpu_events']} GPU events kept)"
                )
            if abs(raw["comm_share"] - conv["comm_share"]) > 0.05:
                why.append(f"comm share {_pct(conv['comm_share'])} after vs {_pct(raw['comm_share'])} in the file")
            if raw["comm_kernels"] and not conv["comm_nodes"]:
                why.append(f"{raw['comm_kernels']} communication kernels, no COMM node")
            if raw["steps"] != conv["steps"]:
                why.append(f"steps {conv['steps']} vs {raw['steps']} in the file")
            if "sim_error" in conv:
                why.append(f"simulate fails: {conv['sim_error']}")
        if why:
            out.append(f"- {name_of(r, base)}: " + "; ".join(why))
    return out


def _limit_memory(mb: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (mb * 2**20, mb * 2**20))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*")
    ap.add_argument("--json", dest="json_out", help="write the rows as JSON")
    ap.add_argument("--max-mb", type=float, default=200, help="skip files larger than this (MB on disk)")
    ap.add_argument("--mem-mb", type=int, default=12000, help="address-space limit of each trace's child")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per trace (and per HTA run)")
    ap.add_argument("--hta", help="a Python with HolisticTraceAnalysis installed (default: /tmp/hta-venv if there)")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--tracelens", help="a Python with AMD's TraceLens installed (default: /tmp/tl-venv if there)")
    ap.add_argument("--no-tracelens", action="store_true")
    ap.add_argument("--no-simulate", action="store_true")
    ap.add_argument("--base", help="file names relative to this folder")
    ap.add_argument("--row", help=argparse.SUPPRESS)  # the child: one trace's row as JSON on stdout
    args = ap.parse_args(argv)
    if args.row:
        _limit_memory(args.mem_mb)
        print(json.dumps(measure(args.row, simulate=not args.no_simulate)))
        return 0
    if not args.folders:
        ap.error("give at least one FOLDER")
    hta = (
        None if args.no_hta else args.hta or next((p for p in ["/tmp/hta-venv/bin/python"] if os.path.exists(p)), None)
    )
    tracelens = (
        None
        if args.no_tracelens
        else args.tracelens or next((p for p in ["/tmp/tl-venv/bin/python"] if os.path.exists(p)), None)
    )
    rows = collect(
        args.folders,
        max_mb=args.max_mb,
        timeout=args.timeout,
        mem_mb=args.mem_mb,
        hta=hta,
        tracelens=tracelens,
        simulate=not args.no_simulate,
        progress=lambda r: print(f"measured {r['file']}", file=sys.stderr),
    )
    print(markdown(rows, args.base))
    worst = failures(rows, args.base)
    if worst:
        print("\nWorst per trace:\n" + "\n".join(worst))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
