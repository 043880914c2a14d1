#!/usr/bin/env python3
"""Conversion throughput: PyTorch host ET + Kineto -> Chakra, on a large generated pair.

The pair is the real gloo DDP rank-0 trace (tests/data) repeated until it has at least
--nodes host nodes: every copy gets fresh node ids, rf_ids / External ids and timestamps
shifted past the previous copy, so it reads like one long recording of many steps.
Measured in a fresh subprocess: wall time of `convert_pytorch` (nodes/s of host nodes) and
its peak RSS growth per host node. Targets from the issue: >= 100,000 nodes/s, <= 1 KB/node.
Baseline, same run, also a fresh subprocess: only `json.load` of the two files, the first
step of any converter that parses them with the standard library (the reference one does).

Then every job of the corpus of real parallel jobs (tests/data/corpus: DDP, FSDP, tensor and
pipeline parallel, DLRM-like, GPT-2), each rank's gzipped pair as checked in: the same two
measurements per job, so the ratio also holds on traces that are not one pattern repeated.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import tempfile
import time

import _probe as probe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
CORPUS = os.path.join(DATA, "corpus")


def _write_doc(path: str, doc: dict, key: str, first: list, rest) -> None:
    """`doc` with its list `key` replaced by first + rest, written item by item."""
    head = {k: v for k, v in doc.items() if k != key}
    with open(path, "w") as f:
        f.write(json.dumps(head)[:-1] + f', "{key}": [\n')
        for k, item in enumerate(itertools.chain(first, rest)):
            f.write((",\n" if k else "") + json.dumps(item))
        f.write("\n]}\n")


def generate(out_dir: str, min_nodes: int) -> tuple[str, str, int]:
    et = json.load(gzip.open(os.path.join(DATA, "ddp_rank0.et.json.gz")))
    kin = json.load(gzip.open(os.path.join(DATA, "kineto", "ddp_rank0.kineto.json.gz")))
    nodes = et["nodes"]
    synthetic = [n for n in nodes if n["name"].startswith("[pytorch|profiler") or n["name"].startswith("## ")]
    body = [n for n in nodes if n not in synthetic]
    events = [e for e in kin["traceEvents"] if e.get("ph") == "X"]
    other = [e for e in kin["traceEvents"] if e.get("ph") != "X"]
    id_span = max(n["id"] for n in nodes) + 1
    rf_span = max(e.get("args", {}).get("Record function id", 0) for e in events) + 1
    t0 = min(e["ts"] for e in events)
    t_span = max(e["ts"] + e.get("dur", 0) for e in events) - t0 + 100.0
    copies = -(-min_nodes // len(body))
    et_path = os.path.join(out_dir, "big.et.json")
    k_path = os.path.join(out_dir, "big.kineto.json")

    def host_copy(n: dict, c: int) -> dict:
        m = dict(n, id=n["id"] + c * id_span)
        if isinstance(n.get("ctrl_deps"), int) and n["ctrl_deps"] > 3:
            m["ctrl_deps"] = n["ctrl_deps"] + c * id_span
        m["attrs"] = [
            dict(a, value=a["value"] + c * rf_span) if a["name"] == "rf_id" and a["value"] else a for a in n["attrs"]
        ]
        return m

    def event_copy(e: dict, c: int) -> dict:
        m = dict(e, ts=round(e["ts"] + c * t_span, 3))
        args = dict(e.get("args", {}))
        for key in ("Record function id", "External id"):
            if key in args:
                args[key] += c * rf_span
        if e["name"].startswith("ProfilerStep#"):
            m["name"] = f"ProfilerStep#{2 + 2 * c + int(e['name'][13:]) - 2}"
        m["args"] = args
        return m

    _write_doc(et_path, et, "nodes", synthetic, (host_copy(n, c) for c in range(copies) for n in body))
    _write_doc(k_path, kin, "traceEvents", other, (event_copy(e, c) for c in range(copies) for e in events))
    return et_path, k_path, copies * len(body) + len(synthetic)


PROBE = """
import warnings
from chakra_trace.convert.pytorch import convert_pytorch
base = status("VmRSS")
reset_peak()
t = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trace, report = convert_pytorch(sys.argv[1], sys.argv[2])
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_growth": status("VmHWM") - base, "chakra_nodes": len(trace),
                  "collectives": len(report.collectives)}))
"""

BASELINE = """
base = status("VmRSS")
reset_peak()
t = time.perf_counter()
docs = [json.load(open(p)) for p in sys.argv[1:3]]
print(json.dumps({"seconds": time.perf_counter() - t, "peak_growth": status("VmHWM") - base}))
"""

CORPUS_PROBE = """
import gzip, warnings
from chakra_trace.convert.pytorch import convert_pytorch
pairs = list(zip(sys.argv[2::2], sys.argv[3::2]))
t = time.perf_counter()
if sys.argv[1] == "convert":
    nodes = collectives = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for et, kin in pairs:
            trace, report = convert_pytorch(et, kin)
            nodes, collectives = nodes + len(trace), collectives + len(report.collectives)
    out = {"chakra_nodes": nodes, "collectives": collectives}
else:
    docs = [json.load(gzip.open(p, "rt")) for pair in pairs for p in pair]
    out = {"host_nodes": sum(len(d["nodes"]) for d in docs[::2])}
out["seconds"] = time.perf_counter() - t
print(json.dumps(out))
"""


def corpus() -> list[dict]:
    """Per corpus job: conversion of every rank's checked-in pair against json.load of them."""
    index = os.path.join(CORPUS, "index.json")
    if not os.path.exists(index):
        return []
    rows = []
    for job in json.load(open(index))["jobs"]:
        folder = os.path.join(CORPUS, job["name"])
        files = []
        for r in range(job["ranks"]):
            files += [os.path.join(folder, f"rank{r}.et.json.gz"), os.path.join(folder, f"rank{r}.kineto.json.gz")]
        c = probe.run(CORPUS_PROBE, "convert", *files)
        b = probe.run(CORPUS_PROBE, "load", *files)
        rows.append(
            {
                "job": job["name"],
                "ranks": job["ranks"],
                "host_nodes": b["host_nodes"],
                "chakra_nodes": c["chakra_nodes"],
                "collectives": c["collectives"],
                "seconds": c["seconds"],
                "baseline_json_load_seconds": b["seconds"],
                "speedup": b["seconds"] / c["seconds"],
            }
        )
        print(
            f"corpus {job['name']:>5} ({job['ranks']} ranks, {b['host_nodes']:,} host nodes): convert "
            f"{c['seconds']:.2f} s, json.load alone {b['seconds']:.2f} s ({b['seconds'] / c['seconds']:.1f}x)"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=300_000, help="host nodes to generate (default 300,000)")
    ap.add_argument("--json", dest="json_out", help="write the figures to this JSON file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        et, kin, n = generate(tmp, args.nodes)
        gen = time.perf_counter() - t
        size = os.path.getsize(et) + os.path.getsize(kin)
        print(f"generated {n:,} host nodes ({size / 2**20:.0f} MiB of JSON) in {gen:.1f} s")
        r = probe.run(PROBE, et, kin)
        b = probe.run(BASELINE, et, kin)
    rate = n / r["seconds"]
    per_node = r["peak_growth"] / n
    res = {
        "host_nodes": n,
        "json_bytes": size,
        "seconds": r["seconds"],
        "nodes_per_s": rate,
        "peak_bytes_per_node": per_node,
        "chakra_nodes": r["chakra_nodes"],
        "collectives": r["collectives"],
        "baseline_json_load": {
            "seconds": b["seconds"],
            "nodes_per_s": n / b["seconds"],
            "peak_bytes_per_node": b["peak_growth"] / n,
        },
        "targets": {"nodes_per_s >= 100000": rate >= 100_000, "peak_bytes_per_node <= 1024": per_node <= 1024},
    }
    print(
        f"convert_pytorch: {r['seconds']:.2f} s -> {rate:,.0f} host nodes/s "
        f"({'MET' if rate >= 100_000 else 'NOT MET'}: target >= 100,000)"
    )
    print(
        f"peak memory: {per_node:,.0f} bytes per host node ({'MET' if per_node <= 1024 else 'NOT MET'}: "
        f"target <= 1,024); {r['chakra_nodes']:,} Chakra nodes, {r['collectives']:,} collectives"
    )
    print(
        f"baseline, json.load of the two files only: {b['seconds']:.2f} s ({n / b['seconds']:,.0f} nodes/s, "
        f"{b['peak_growth'] / n:,.0f} bytes/node); full conversion is {b['seconds'] / r['seconds']:.1f}x faster "
        f"and uses {b['peak_growth'] / max(r['peak_growth'], 1):.1f}x less memory"
    )
    res["corpus"] = corpus()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
