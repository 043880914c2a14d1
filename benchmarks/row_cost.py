#!/usr/bin/env python3
"""What one published large-training run costs to predict end to end: capture -> parallelize ->
simulate, per row of Megatron-LM's SC21 weak-scaling table and Llama 3 405B on 16,384 GPUs.

    python benchmarks/row_cost.py [--only NAME ...] [--json benchmarks/results/row_cost.json]

Each row runs in a fresh process, its stages in order as `published.run` chains them: `capture`
(examples/models/gpt.py at one data-parallel replica's batch, meta tensors), `parallelize` (the
plan: TP x PP x DP, micro-batches, interleaved virtual stages, full recomputation) and `simulate`
(`published.network` and `published.system` at kernel efficiency 1.0). Per stage: wall time and
peak RSS (the process's VmHWM, restarted as the stage starts: what earlier stages left alive
counts, as it does in the pipeline; the master trace is dropped before simulating). The budget
(issue 31): 60 s and 8 GB per stage and row. Results, to show that a change leaves them alone:
the simulated step (ns), the nodes per stage's program, and a digest of every rank's trace
columns, groups and names (`digest`), and of the run's per-NPU times, node times and
collective records (`result`). benchmarks/results/row_cost.json also holds each row's `before`:
the same measurement at commit c190e7d (the 529.6B row ran out of memory there).

Rows (NVIDIA's examples/sc21/run_table_1.sh: GPT with vocabulary 51,200, sequence 2,048, fp16,
full recomputation, no sequence parallelism; the script's layers per virtual stage as chunks
per stage). Llama 3 405B (Dubey et al. 2024, §3.3): TP 8, PP 16, DP 128, 16 sequences of 8,192
per replica and step in micro-batches of one, bf16, modelled with full recomputation and no
interleaving like the others.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

BUDGET_S, BUDGET_GB = 60, 8


@dataclass(frozen=True)
class Row:
    name: str
    tp: int
    pp: int
    dp: int
    layers: int
    hidden: int
    heads: int
    global_batch: int
    micro_batch: int
    chunks: int = 1
    seq: int = 2048
    vocab: int = 51200
    dtype: str = "float16"
    llama: dict | None = None  # Llama options (RMSNorm, SwiGLU, rotary, GQA) instead of Megatron's GPT

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


ROWS = [
    Row("1.7B", 1, 1, 32, 24, 2304, 24, 512, 16),
    Row("3.6B", 2, 1, 32, 30, 3072, 32, 512, 16),
    Row("7.5B", 4, 1, 32, 36, 4096, 32, 512, 16),
    Row("18.4B", 8, 1, 32, 40, 6144, 48, 1024, 8),
    Row("39.1B", 8, 2, 32, 48, 8192, 64, 1536, 4),
    Row("76.1B", 8, 4, 32, 60, 10240, 80, 1792, 2, chunks=3),
    Row("145.6B", 8, 8, 24, 80, 12288, 96, 2304, 2, chunks=2),
    Row("310.1B", 8, 16, 15, 96, 16384, 128, 2160, 1, chunks=2),
    Row("529.6B", 8, 35, 9, 105, 20480, 128, 2520, 1, chunks=3),
    Row("1008B", 8, 64, 6, 128, 25600, 160, 3072, 1),
    Row(
        "Llama 3 405B",
        8,
        16,
        128,
        126,
        16384,
        128,
        16 * 128,
        1,
        seq=8192,
        vocab=128256,
        dtype="bfloat16",
        llama=dict(kv_heads=8, ffn=53248, rope_base=500000.0),
    ),
]


def config(row: Row) -> dict:
    base = dict(layers=row.layers, hidden=row.hidden, heads=row.heads, vocab=row.vocab, max_seq=row.seq)
    if row.llama is not None:
        return {**base, **row.llama}
    return {**base, "norm": "layer", "mlp": "gelu", "positions": "learned", "bias": True, "tie": True}


def plan(row: Row):
    from chakra_trace.synthesize.parallel import Plan

    per_replica = row.global_batch // row.dp
    return Plan(
        tp=row.tp,
        pp=row.pp,
        dp=row.dp,
        micro_batches=per_replica // row.micro_batch,
        recompute="full",
        virtual_stages=row.chunks,
    )


def digest(workload) -> str:
    """sha256 over every rank's columns, names and groups (a column shared by ranks hashed once)."""
    seen: dict[int, bytes] = {}
    h = hashlib.sha256()
    from chakra_trace.schema.trace import Trace

    for rank, t in sorted(workload.traces.items()):
        h.update(rank.to_bytes(8, "little"))
        for k in Trace.ARRAYS:
            a = getattr(t, k)
            d = seen.get(id(a))
            if d is None:
                d = seen[id(a)] = hashlib.sha256(a.dtype.str.encode() + a.tobytes()).digest()
            h.update(d)
        for names in (t.names, t.groups):
            d = seen.get(id(names))
            if d is None:
                d = seen[id(names)] = hashlib.sha256("\0".join(names).encode()).digest()
            h.update(d)
    h.update(json.dumps(workload.groups, sort_keys=True).encode())
    return h.hexdigest()[:16]


def result_digest(res) -> str:
    """sha256 over a run's per-NPU times, node start/end times and collective records (as a set:
    a shortcut may list them in another order)."""
    h = hashlib.sha256()
    for k in ("finish_ns", "exposed_comm_ns", "compute_ns", "comm_ns", "overlap_ns", "other_ns", "idle_ns"):
        h.update(getattr(res, k).tobytes())
    seen: dict[int, bytes] = {}
    for r, cols in sorted(res.nodes.items()):
        h.update(r.to_bytes(8, "little"))
        for a in cols:
            d = seen.get(id(a))
            if d is None:
                d = seen[id(a)] = hashlib.sha256(a.tobytes()).digest()
            h.update(d)
    for rec in sorted(json.dumps(c.to_dict(), sort_keys=True) for c in res.collectives):
        h.update(rec.encode())
    return h.hexdigest()[:16]


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def child(row: Row, check: bool) -> dict:
    """The three stages of one row in this process (run by `measure` in a fresh one)."""
    import published

    from chakra_trace.capture import capture, load_build
    from chakra_trace.simulate.simulator import simulate
    from chakra_trace.synthesize.parallel import parallelize_detailed

    out: dict = {}

    def stage(name, fn):
        _reset_peak()
        t0 = time.perf_counter()
        value = fn()
        out[f"{name}_s"] = round(time.perf_counter() - t0, 2)
        out[f"{name}_gb"] = round(_status("VmHWM") / 1e9, 2)
        return value

    gpt = load_build(f"{published.GPT}:build")
    per_replica = row.global_batch // row.dp
    cap = stage(
        "capture",
        lambda: capture(gpt, config(row), batch=per_replica, seq=row.seq, dtype=row.dtype, fold_views=True),
    )
    out["master_nodes"] = len(cap.trace)
    todo = partial(parallelize_detailed, cap.trace, plan(row))
    par = stage("parallelize", todo)
    del cap, todo  # (the master trace is not needed to simulate)
    out["stage_nodes"] = [s.nodes for s in par.stages]
    if check:
        out["digest"] = digest(par.workload)
    net = published.network(row.gpus)
    res = stage("simulate", lambda: simulate(par.workload, net, published.system(len(net.dims), 1.0)))
    out["step_ns"] = int(res.step_ns)
    out["events"] = int(res.events)
    out["shortcuts"] = list(res.shortcuts)
    if check:
        out["result"] = result_digest(res)
    return out


def measure(row: Row, check: bool) -> dict:
    args = [sys.executable, __file__, "--child", row.name] + (["--check"] if check else [])
    t0 = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="rows by name")
    ap.add_argument("--check", action="store_true", help="also digest every rank's trace (slower)")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    by_name = {r.name: r for r in ROWS}
    if args.child:
        print(json.dumps(child(by_name[args.child], args.check)))
        return 0
    rows = [by_name[n] for n in args.only] if args.only else ROWS
    print(
        f"{'row':14s} {'GPUs':>6s} {'capture':>13s} {'parallelize':>13s} {'simulate':>13s} "
        f"{'step (ns)':>16s}  nodes/stage  shortcuts",
        flush=True,
    )
    out = []
    for row in rows:
        r = measure(row, args.check)
        out.append({**asdict(row), "gpus": row.gpus, **r})
        if "error" in r:
            print(f"{row.name:14s} {row.gpus:6d}  failed: {r['error']}", flush=True)
            continue
        cells = []
        for s in ("capture", "parallelize", "simulate"):
            over = r[f"{s}_s"] > BUDGET_S or r[f"{s}_gb"] > BUDGET_GB
            cells.append(f"{r[f'{s}_s']:6.1f}s {r[f'{s}_gb']:4.1f}G{'!' if over else ' '}")
        nodes = sorted(set(r["stage_nodes"]))
        print(
            f"{row.name:14s} {row.gpus:6d} {' '.join(cells)} {r['step_ns']:16,d}  "
            f"{nodes[0]:,}..{nodes[-1]:,}  {'; '.join(s[:60] for s in r['shortcuts']) or '-'}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps({"budget": {"s": BUDGET_S, "gb": BUDGET_GB}, "rows": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
