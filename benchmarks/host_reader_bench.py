#!/usr/bin/env python
"""Benchmark of the PyTorch host-ET reader (`read_host_trace`) against plain `json.load`.

    python benchmarks/host_reader_bench.py [--nodes N] [--source ET.json.gz] [--repeat K]
                                           [--no-gzip] [--json OUT] [--keep DIR]

It generates a large ET JSON by replicating the real nodes of a PyTorch trace (default
`tests/data/ddp_rank0.et.json.gz`, schema 1.1.1, gloo DDP) with fresh node ids, rf_ids,
seq_ids and tensor/storage ids, written in the observer's own text layout (replica 0 is
checked to be byte-identical to the source nodes). The synthetic process / thread /
process-group nodes are written once. Then, each in a fresh subprocess so memory is measured
cleanly and nothing is cached between them:

  (a) `read_host_trace` on the plain file     (b) `json.load` of the same plain file
  (c) `read_host_trace` on a gzip copy (level 1; skip with --no-gzip)

and reports nodes/s, the ratio to json.load, and the peak RSS per node above the process's
RSS before the load (VmHWM, reset through /proc/self/clear_refs), plus the RSS that stays
and `HostTrace.nbytes()`. Timings are the best of --repeat runs; memory is from the first.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import sys
import tempfile
import time

import _probe

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SOURCE = os.path.join(HERE, "..", "tests", "data", "ddp_rank0.et.json.gz")

SYNTHETIC = (
    "[pytorch|profiler|execution_trace|process]",
    "[pytorch|profiler|execution_trace|thread]",
    "## process_group:init ##",
)


def _dump(v) -> str:
    """A value as the observer writes it: compact lists, doubles with six decimals ("%f")."""
    if isinstance(v, list):
        return "[" + ",".join(_dump(x) for x in v) + "]"
    if isinstance(v, float) and v == v and abs(v) != float("inf"):
        return "%f" % v
    return json.dumps(v)


def _io(d: dict) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {_dump(v)}" for k, v in d.items()) + "}"


def format_node(n: dict, indent: str = "      ") -> str:
    """One node in the text layout of torch's ExecutionTraceObserver (schema 1.1.x)."""
    inner = indent + "  "
    attrs = ",".join(
        "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in a.items()) + "}" for a in n["attrs"]
    )
    return (
        f"{indent}{{\n"
        f'{inner}"id": {n["id"]}, "name": {json.dumps(n["name"])}, "ctrl_deps": {n["ctrl_deps"]},\n'
        f'{inner}"inputs": {_io(n["inputs"])},\n'
        f'{inner}"outputs": {_io(n["outputs"])},\n'
        f'{inner}"attrs": [{attrs}]\n'
        f"{indent}}}"
    )


def _shift_tensors(values, types, shift: int):
    """Tensor values [tensor_id, storage_id, offset, numel, itemsize, device] get fresh ids."""
    out = []
    for v, t in zip(values, types):
        out.append(_shift_value(v, t, shift))
    return out


def _shift_value(v, t: str, shift: int):
    if t.startswith("Tensor") and isinstance(v, list) and len(v) == 6 and all(isinstance(x, int) for x in v[:5]):
        if v[1] == 0 and v[3] == 0:  # undefined tensor
            return v
        return [v[0] + shift, v[1] + shift] + v[2:]
    if isinstance(v, list) and "Tensor" in t and "[" in t:
        inner = t[t.index("[") + 1 : -1]
        parts, depth, cur = [], 0, ""
        for c in inner:
            if c in "[(":
                depth += 1
            elif c in "])":
                depth -= 1
            if c == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += c
        parts.append(cur)
        return [_shift_value(x, parts[min(j, len(parts) - 1)], shift) for j, x in enumerate(v)]
    return v


def generate(source: str, nodes: int, out_path: str) -> dict:
    with gzip.open(source, "rt") if source.endswith(".gz") else open(source) as f:
        text = f.read()
    doc = json.loads(text)
    src_nodes = doc["nodes"]
    # fidelity: our formatter reproduces the source text of every node
    fid = sum(1 for n in src_nodes if format_node(n) in text)
    synth = [n for n in src_nodes if n["name"] in SYNTHETIC]
    ops = [n for n in src_nodes if n["name"] not in SYNTHETIC]
    thread_ids = {n["id"] for n in synth if n["name"].endswith("thread]")}
    max_id = max(n["id"] for n in src_nodes) + 1
    attr_max = {}
    for n in src_nodes:
        for a in n["attrs"]:
            if a["name"] in ("rf_id", "seq_id") and isinstance(a["value"], int):
                attr_max[a["name"]] = max(attr_max.get(a["name"], 0), a["value"] + 1)
    tmax = 0
    for n in src_nodes:
        for io in (n["inputs"], n["outputs"]):
            stack = list(io["values"])
            while stack:
                v = stack.pop()
                if isinstance(v, list):
                    if len(v) == 6 and all(isinstance(x, int) for x in v[:5]) and isinstance(v[5], str):
                        tmax = max(tmax, v[0] + 1, v[1] + 1)
                    else:
                        stack.extend(v)
    reps = max(1, -(-max(0, nodes - len(synth)) // len(ops)))
    head = {k: v for k, v in doc.items() if k not in ("nodes", "finish_ts")}
    written = 0
    with open(out_path, "w") as f:
        f.write("{\n  " + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()) + ',\n  "nodes": [\n')
        first = True

        def emit(n):
            nonlocal first, written
            if not first:
                f.write(",\n")
            first = False
            f.write(format_node(n))
            written += 1

        for n in synth:
            if not n["name"].endswith("process]"):
                emit(n)
        for r in range(reps):
            for n in ops:
                if written >= nodes - 1:
                    break
                m = dict(n)
                m["id"] = n["id"] + r * max_id
                m["ctrl_deps"] = n["ctrl_deps"] if n["ctrl_deps"] in thread_ids else n["ctrl_deps"] + r * max_id
                shift = r * tmax
                for k in ("inputs", "outputs"):
                    io = dict(n[k])
                    io["values"] = _shift_tensors(io["values"], io["types"], shift)
                    m[k] = io
                attrs = []
                for a in n["attrs"]:
                    a = dict(a)
                    if a["name"] == "rf_id":
                        a["value"] += r * attr_max["rf_id"]
                    elif a["name"] == "seq_id" and a["value"] >= 0:
                        a["value"] += r * attr_max.get("seq_id", 0)
                    attrs.append(a)
                m["attrs"] = attrs
                emit(m)
        for n in synth:
            if n["name"].endswith("process]"):
                emit(n)
        f.write('\n  ],\n  "finish_ts": ' + json.dumps(doc.get("finish_ts", 0)) + "\n}\n")
    return {
        "source_nodes": len(src_nodes),
        "format_identical": fid,
        "replicas": reps,
        "nodes": written,
        "bytes": os.path.getsize(out_path),
    }


_PROBE = """
mode, path = sys.argv[1], sys.argv[2]
import numpy as np
from chakra_trace.io.pytorch_host import read_host_trace
reset_peak()
before = status("VmRSS")
t0 = time.perf_counter()
if mode == "json":
    with open(path, "rb") as f:
        doc = json.load(f)
    n = len(doc["nodes"])
    nbytes = None
else:
    h = read_host_trace(path)
    n = len(h)
    nbytes = h.nbytes()
dt = time.perf_counter() - t0
after, peak = status("VmRSS"), status("VmHWM")
extra = {}
if mode != "json":
    tb = h._tables
    extra = {"templates": len(tb), "roles": tb.roles.n_roles, "derived": tb.n_derived,
             "tensors": len(h.tensors)}
print(json.dumps({"nodes": n, "seconds": dt, "before": before, "after": after, "peak": peak,
                  "nbytes": nbytes, **extra}))
"""


def probe(mode: str, path: str) -> dict:
    return _probe.run(_PROBE, mode, path, env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})


def measure(mode: str, path: str, repeat: int) -> dict:
    runs = [probe(mode, path) for _ in range(max(1, repeat))]
    first = runs[0]
    best = min(r["seconds"] for r in runs)
    n = first["nodes"]
    return {
        **first,
        "seconds": best,
        "all_seconds": [round(r["seconds"], 3) for r in runs],
        "nodes_per_s": n / best,
        "peak_per_node": (first["peak"] - first["before"]) / n,
        "kept_per_node": (first["after"] - first["before"]) / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=300_000)
    ap.add_argument("--source", default=DEFAULT_SOURCE)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-gzip", action="store_true")
    ap.add_argument("--json", help="write the results here as JSON")
    ap.add_argument("--keep", help="write the generated files into this folder and keep them")
    args = ap.parse_args()

    tmp = args.keep or tempfile.mkdtemp(prefix="host_bench_")
    os.makedirs(tmp, exist_ok=True)
    plain = os.path.join(tmp, "big.et.json")
    res: dict = {"python": sys.version.split()[0], "machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        t0 = time.perf_counter()
        gen = generate(args.source, args.nodes, plain)
        res["generate"] = {**gen, "seconds": time.perf_counter() - t0}
        print(
            f"generated {gen['nodes']:,} nodes ({gen['bytes'] / 2**20:.1f} MiB, {gen['bytes'] / gen['nodes']:.0f} B/node) "
            f"from {gen['source_nodes']} nodes x {gen['replicas']} replicas; observer layout reproduced for "
            f"{gen['format_identical']}/{gen['source_nodes']} source nodes",
            flush=True,
        )
        gz = None
        if not args.no_gzip:
            gz = plain + ".gz"
            with open(plain, "rb") as fi, gzip.open(gz, "wb", compresslevel=1) as fo:
                shutil.copyfileobj(fi, fo, 8 << 20)
            res["gzip_bytes"] = os.path.getsize(gz)
        steps = [("read_host_trace (plain)", "reader", plain), ("json.load (plain)", "json", plain)]
        if gz:
            steps.append(("read_host_trace (gzip)", "reader", gz))
        res["steps"] = {}
        for label, mode, path in steps:
            r = measure(mode, path, args.repeat)
            res["steps"][label] = r
            print(
                f"  {label:26s} {r['seconds']:7.2f} s  {r['nodes_per_s']:>10,.0f} nodes/s   peak RSS "
                f"{r['peak_per_node']:7.0f} B/node   kept {r['kept_per_node']:6.0f} B/node"
                + (f"   nbytes {r['nbytes'] / r['nodes']:5.0f} B/node" if r.get("nbytes") else ""),
                flush=True,
            )
        a, b = res["steps"]["read_host_trace (plain)"], res["steps"]["json.load (plain)"]
        res["speedup_vs_json_load"] = b["seconds"] / a["seconds"]
        res["peak_ratio_vs_json_load"] = b["peak_per_node"] / a["peak_per_node"]
        print(
            f"read_host_trace vs json.load: {res['speedup_vs_json_load']:.1f}x faster, "
            f"{res['peak_ratio_vs_json_load']:.1f}x less peak memory per node "
            f"(templates {a.get('templates')}, roles {a.get('roles')}, derived {a.get('derived')})"
        )
        target_speed, target_mem = 200_000, 1024
        print(
            f"targets: reader >= {target_speed:,} nodes/s: {'met' if a['nodes_per_s'] >= target_speed else 'MISSED'}"
            f" ({a['nodes_per_s']:,.0f}); peak <= {target_mem} B/node: "
            f"{'met' if a['peak_per_node'] <= target_mem else 'MISSED'} ({a['peak_per_node']:.0f})"
        )
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=2)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
