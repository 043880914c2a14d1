#!/usr/bin/env python3
"""Device analyses side by side with Holistic Trace Analysis 0.5 on the same traces: which tool
answers each analysis, the figures of both, and the wall time (ours / HTA's, one run each, both
in their own process so that each one's peak memory is its own).

    python3 -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis==0.5.0 "pandas<3"
    python benchmarks/device_bench.py --hta-python /tmp/hta/bin/python \
        [--hta-data HTA_REPO/tests/data] [--ranks 64] --json benchmarks/results/device_bench.json

Trace sets (each a folder of rank traces, the same folder given to both tools):
- PARAM's public GPU traces (`../shared/traces/param`: resnet, linear; one rank each);
- HTA's own public GPU test traces where `--hta-data` names them (2 ranks of a 128-GPU NCCL
  job; rank 0 of a 16-GPU NCCL job);
- the CPU DDP pair of our corpus (gloo; Kineto traces only);
- `--ranks` N ranks made from one recorded GPU rank (the 16-GPU job's rank 0, or resnet): each
  rank a copy with its own `distributedInfo.rank` and its clock shifted by a few µs, and one
  rank (N // 5) 2 ms late to everything: a straggler both tools should name.

A single-rank trace without `distributedInfo` gets `{"rank": 0}` added (HTA needs it).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"
ANALYSES = (
    "temporal",
    "idle",
    "kernels",
    "overlap",
    "launches",
    "op_kernels",
    "sequences",
    "counters",
    "memory",
    "stragglers",
)
LATE_NS = 2_000_000


def _write(doc: dict, path: Path) -> None:
    with gzip.open(path, "wt", compresslevel=1) as f:
        json.dump(doc, f)


def with_rank(src: Path, dst_dir: Path, rank: int = 0, world: int | None = None) -> Path:
    """A copy of `src` in `dst_dir` as rank-<rank>.json.gz, with distributedInfo when it has none."""
    doc = json.load(gzip.open(src) if src.suffix == ".gz" else open(src))
    info = doc.get("distributedInfo") or {}
    if "rank" not in info or world is not None:
        info = {**info, "rank": rank, "world_size": world or info.get("world_size", 1)}
        info.setdefault("backend", "nccl")
        doc["distributedInfo"] = info
    dst_dir.mkdir(parents=True, exist_ok=True)
    out = dst_dir / f"rank-{rank}.json.gz"
    _write(doc, out)
    return out


def scaled(src: Path, dst_dir: Path, ranks: int) -> int:
    """`ranks` copies of one recorded rank: rank r's clock shifted by (r * 7919) % 97 µs, rank
    ranks // 5 by LATE_NS more. Returns the straggler's rank."""
    doc = json.load(gzip.open(src))
    events = doc["traceEvents"]
    ts = [e.get("ts") for e in events]
    late = ranks // 5
    dst_dir.mkdir(parents=True, exist_ok=True)
    base = dict(doc.get("distributedInfo") or {"backend": "nccl"})
    for r in range(ranks):
        shift = ((r * 7919) % 97) + (LATE_NS / 1000 if r == late else 0)
        for e, t in zip(events, ts):
            if isinstance(t, (int, float)):
                e["ts"] = t + shift
        doc["distributedInfo"] = {**base, "rank": r, "world_size": ranks}
        _write(doc, dst_dir / f"rank-{r}.json.gz")
    return late


def trace_sets(work: Path, hta_data: Path | None, ranks: int) -> dict[str, dict]:
    sets: dict[str, dict] = {}
    for name in ("resnet", "linear"):
        src = SHARED / "param" / f"{name}_kineto.json.gz"
        if src.is_file():
            with_rank(src, work / f"param-{name}")
            sets[f"param-{name}"] = {"dir": work / f"param-{name}", "what": f"PARAM {name}, 1 GPU (RTX 2080 Ti)"}
    big = None
    if hta_data is not None:
        pair = [hta_data / "trace_filter" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
        if all(p.is_file() for p in pair):
            d = work / "hta-sampled"
            d.mkdir(parents=True, exist_ok=True)
            for r, p in enumerate(pair):
                shutil.copy(p, d / f"rank-{r}.json.gz")
            sets["hta-sampled"] = {"dir": d, "what": "HTA test data: 2 ranks of a 128-GPU NCCL job"}
        one = hta_data / "negative_queue_length_values_check" / "rank0.json.gz"
        if one.is_file():
            with_rank(one, work / "hta-16")
            sets["hta-16"] = {"dir": work / "hta-16", "what": "HTA test data: rank 0 of a 16-GPU NCCL job"}
            big = one
    d = work / "corpus-ddp"
    d.mkdir(parents=True, exist_ok=True)
    for r in (0, 1):
        shutil.copy(ROOT / "tests" / "data" / "corpus" / "ddp" / f"rank{r}.kineto.json.gz", d / f"rank-{r}.json.gz")
    sets["corpus-ddp"] = {"dir": d, "what": "our corpus: DDP, 2 CPU ranks, gloo"}
    if ranks:
        src = big or SHARED / "param" / "resnet_kineto.json.gz"
        t = time.perf_counter()
        late = scaled(src, work / f"scaled-{ranks}", ranks)
        sets[f"scaled-{ranks}"] = {
            "dir": work / f"scaled-{ranks}",
            "what": f"{ranks} ranks made from {src.name} (rank {late} {LATE_NS / 1e6:g} ms late)",
            "straggler": late,
            "made_s": time.perf_counter() - t,
        }
    return sets


# ------------------------------------------------------------------------- our side


def peak_mb() -> float:
    """This process's peak resident memory since its exec (VmHWM), MB. Not ru_maxrss: Linux
    carries a forked parent's high-water mark over the exec into it."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def ours(trace_dir: str, out: str, op: str | None) -> None:
    """In a process of its own: every analysis of ours on `trace_dir`, timed."""
    from chakra_trace.analyze import Analysis

    res: dict = {"analyses": {}}
    t = time.perf_counter()
    d = Analysis.open(trace_dir, devices="kineto").devices()
    res["load"] = {"ok": True, "s": time.perf_counter() - t, "source": d.source, "ranks": len(d.timeline)}
    calls = {
        "temporal": d.temporal,
        "idle": d.idle,
        "kernels": d.kernels,
        "overlap": d.overlap,
        "launches": d.launches,
        "op_kernels": d.op_kernels,
        "sequences": lambda: d.sequences(op=op),
        "counters": d.counters,
        "memory": d.memory,
        "stragglers": d.stragglers,
        "critical_path": lambda: _overlay(trace_dir),
    }
    for name, fn in calls.items():
        t = time.perf_counter()
        try:
            r = fn()
            res["analyses"][name] = {"ok": True, "s": time.perf_counter() - t, "result": _head(r.to_dict())}
        except Exception as e:  # a failure is a result of the comparison
            res["analyses"][name] = {
                "ok": False,
                "s": time.perf_counter() - t,
                "error": f"{type(e).__name__}: {e}"[:400],
            }
    res["max_rss_mb"] = peak_mb()
    with open(out, "w") as f:
        json.dump(res, f, indent=1, default=str)


def _overlay(trace_dir: str):
    """Our critical path on the first rank's Kineto trace (converted on the fly), marked on a copy."""
    from chakra_trace.analyze.device.overlay import critical_path_overlay
    from chakra_trace.io.collect_folder import kineto_files
    from chakra_trace.table import Tables

    first = kineto_files(trace_dir)[0]
    with tempfile.TemporaryDirectory() as tmp:
        res = critical_path_overlay(first, os.path.join(tmp, "cp.json.gz"))
    return Tables({}, res.to_dict())


def _head(d, rows: int = 200):
    if isinstance(d, dict):
        return {k: _head(v, rows) for k, v in d.items()}
    if isinstance(d, list):
        return [_head(v, rows) for v in d[:rows]] + ([f"... {len(d) - rows} more"] if len(d) > rows else [])
    return d


def hta_versions(python: str) -> dict:
    """HTA's and pandas' versions in the Python that runs HTA (its pandas decides what works)."""
    code = "import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
    code += "('HolisticTraceAnalysis', 'pandas', 'numpy')}))"
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)


def run(cmd: list[str], timeout: float) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - t, (p.stderr or "")[-600:] if p.returncode else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default=None, help="a Python with HolisticTraceAnalysis 0.5 installed")
    ap.add_argument("--hta-data", type=Path, default=None, help="HTA's tests/data folder")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--sets", default=None, help="comma-separated trace sets to run")
    ap.add_argument("--json", required=True)
    ap.add_argument("--ours", default=None, help=argparse.SUPPRESS)  # internal: our side, in its own process
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--op", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ours:
        ours(args.ours, args.out, args.op)
        return
    from device_compare import compare  # beside this script

    work = Path(tempfile.mkdtemp(prefix="device_bench_"))
    try:
        sets = trace_sets(work, args.hta_data, args.ranks)
        if args.sets:
            sets = {k: v for k, v in sets.items() if k in args.sets.split(",")}
        report: dict = {"sets": {}, "hta": hta_versions(args.hta_python) if args.hta_python else None}
        for name, s in sets.items():
            mine, theirs = work / f"{name}.ours.json", work / f"{name}.hta.json"
            entry: dict = {"what": s["what"], "traces": len(list(Path(s["dir"]).iterdir()))}
            op = "aten::linear" if "linear" in name else ("aten::conv2d" if "resnet" in name else None)
            wall, err = run([sys.executable, __file__, "--json", "-", "--ours", str(s["dir"]), "--out", str(mine)]
                            + (["--op", op] if op else []), 3600)  # fmt: skip
            entry["ours_process_s"], entry["ours_error"] = wall, err
            o = json.load(open(mine)) if mine.is_file() else None
            h = None
            if args.hta_python:
                wall, err = run([args.hta_python, str(ROOT / "benchmarks" / "hta_side.py"), str(s["dir"]), "--json",
                                 str(theirs)] + (["--op", op] if op else []), 3600)  # fmt: skip
                entry["hta_process_s"], entry["hta_error"] = wall, err
                h = json.load(open(theirs)) if theirs.is_file() else None
            entry.update(compare(o, h, s))
            report["sets"][name] = entry
            print(f"{name}: ours {entry['ours_process_s']:.1f} s, HTA {entry.get('hta_process_s', float('nan')):.1f} s",
                  file=sys.stderr)  # fmt: skip
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
