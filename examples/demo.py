"""End-to-end tour of chakra-trace on a real Chakra trace and on traces built in Python.

Run from the project root:  .venv/bin/python examples/demo.py   (writes into ./out/demo)
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import chakra_trace as ct
from chakra_trace.analyze.summary import summarize
from chakra_trace.analyze.validate import fix_trace, validate_trace, validate_workload
from chakra_trace.io.jsonio import read_json, write_json

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "tests" / "data" / "resnet50_ddp.0.et.gz"  # real trace from mlcommons/chakra
OUT = ROOT / "out" / "demo"
CHAKRA = [sys.executable, "-m", "chakra_trace.cli"]


def step(title: str) -> None:
    print(f"\n=== {title}")


def run(*args: str) -> int:
    print("$ chakra " + " ".join(args))
    sys.stdout.flush()
    return subprocess.run([*CHAKRA, *args], cwd=ROOT).returncode


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)

    step("1. Inspect a real trace (ResNet-50 DDP, rank 0)")
    run("info", str(SAMPLE))
    trace = ct.read_trace(SAMPLE)
    s = summarize(trace)
    print(f"library: {s.nodes} nodes, {s.data_edges} data edges, all-reduce bytes "
          f"{s.collectives['ALL_REDUCE']['bytes']:,}")

    step("2. Validate it, repair what is unambiguous, validate the copy")
    run("validate", str(SAMPLE))
    fixed, changes = fix_trace(trace)
    fixed_path = OUT / "resnet50_fixed.0.et"
    ct.write_trace(fixed, fixed_path)
    print("fixes:", *changes, sep="\n  - ")
    rc = run("validate", str(fixed_path))
    assert rc == 0 and validate_trace(fixed).issues == [], "the fixed copy must validate clean"

    step("3. JSON and back, losslessly")
    json_path = OUT / "resnet50.json"
    write_json(trace, json_path)
    back = read_json(json_path)
    ct.write_trace(back, OUT / "resnet50_from_json.et")
    ct.write_trace(trace, OUT / "resnet50_direct.et")
    same = (OUT / "resnet50_from_json.et").read_bytes() == (OUT / "resnet50_direct.et").read_bytes()
    print(f"{json_path.name}: {json_path.stat().st_size:,} bytes; .et -> JSON -> .et byte-identical: {same}")
    assert same

    step("4. Build a 2-rank workload in Python and check it across ranks")
    for rank in (0, 1):
        b = ct.TraceBuilder(metadata={"schema": "demo"})
        fwd = b.comp("forward", duration=900, num_ops=4e9)
        bwd = b.comp("backward", duration=1800, num_ops=8e9, deps=[fwd])
        ar = b.collective("ALL_REDUCE", 25 << 20, deps=[bwd], pg_name="dp")
        if rank == 0:
            b.send(1, 4 << 20, tag=7, deps=[ar])
        else:
            b.recv(0, 4 << 20, tag=7, deps=[ar])
        ct.write_trace(b.build(), OUT / f"job.{rank}.et")
    run("validate", str(OUT / "job"))
    w = ct.Workload.load(OUT / "job")
    bad = w.traces[1].copy()
    bad.set_attr("comm_size", 24 << 20, rows=[2])  # rank 1 reduces a different size
    report = validate_workload(ct.Workload({0: w[0], 1: bad}))
    print("after corrupting rank 1:", *[f"{i.severity}: {i.message}" for i in report.issues], sep="\n  ")

    step("5. Scale: write and bulk-load a generated 1,000,000-node trace")
    n = 1_000_000
    rng = np.random.default_rng(0)
    deps = np.maximum(np.arange(n) - rng.integers(1, 8, n), 0).astype(np.uint64)
    big = ct.Trace(n, names=["", "aten::mm", "aten::add_", "aten::relu"],
                   ids=np.arange(n, dtype=np.uint64), types=np.full(n, 4, np.int32),
                   name_codes=rng.integers(1, 4, n).astype(np.int32),
                   duration=rng.integers(1, 500, n).astype(np.uint64),
                   data_indptr=np.arange(n + 1, dtype=np.int64), data=deps)
    path = OUT / "big.0.et"
    t0 = time.perf_counter()
    ct.write_trace(big, path)
    t1 = time.perf_counter()
    loaded = ct.read_trace(path)
    t2 = time.perf_counter()
    assert loaded.equals(big)
    print(f"wrote {n:,} nodes in {t1 - t0:.2f} s, loaded in {t2 - t1:.2f} s "
          f"({n / (t2 - t1) / 1e6:.1f} M nodes/s, {loaded.nbytes() / n:.0f} bytes/node in memory)")
    print(f"\nDone: outputs in {OUT.relative_to(ROOT)}/")


if __name__ == "__main__":
    main()
