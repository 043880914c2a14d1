#!/usr/bin/env python3
"""Predict published large-scale training runs from their configuration alone, and compare.

    python benchmarks/published_bench.py --table benchmarks/tables/megatron_sc21_table1.csv \\
        [--only NAME ...] [--json OUT.json] [--jobs 1]

Each row of a table (format: benchmarks/tables/README.md) is captured from
`examples/models/gpt.py` (the row's model, with the kernels its framework ran: Megatron-LM's
unfused attention and fused elementwise kernels for its GPT rows, flash attention otherwise),
parallelized with the row's plan (TP x PP x DP, micro-batches, interleaved stages, recomputation,
sequence parallelism, the distributed optimizer; `auto` resolved as the framework would, from the
table's ``*.settings.json`` where its run scripts say, else by the rules in `resolve`), and
simulated on the cluster preset of its GPU (`chakra systems`: selene for A100, dgx-h100 for H100)
with that GPU's kernel model (`schema.kernel_models`: MAMF, achievable HBM bandwidth, launch gaps;
docs/device-model.md). No parameter is fitted to any row: there is no efficiency knob.

Per row: predicted and published TFLOP/s per GPU (the table's FLOPs convention over the predicted
step), the error, the step and where its time goes on the slowest GPU (compute, exposed
communication, pipeline bubble), and the wall time and peak memory of the row's own process.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

GPT = ROOT / "examples" / "models" / "gpt.py"
COLUMNS = (
    "name,gpu,gpus,tp,pp,dp,cp,ep,layers,hidden,heads,kv_heads,ffn,vocab,seq,global_batch,micro_batch,"
    "recompute,sp,virtual_stages,flops,published_tflops_per_gpu"
).split(",")


@dataclass
class Row:
    """One published run (the table's columns; `extra`: columns beyond the required ones)."""

    name: str
    gpu: str
    gpus: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq: int
    global_batch: int
    micro_batch: str
    recompute: str
    sp: bool
    virtual_stages: str
    flops: str
    published: float
    extra: dict = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.extra.get("model_family") or "gpt"


def read_table(path: Path) -> list[Row]:
    """The rows of a table file; a clear error naming the file and line on a bad cell."""
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise SystemExit(f"{path}: missing columns {', '.join(missing)}")
        for line, r in enumerate(reader, start=2):
            try:
                heads = int(r["heads"])
                hidden = int(r["hidden"])
                rows.append(
                    Row(
                        name=r["name"],
                        gpu=r["gpu"].strip().lower(),
                        gpus=int(r["gpus"]),
                        tp=int(r["tp"]),
                        pp=int(r["pp"]),
                        dp=int(r["dp"]),
                        cp=int(r["cp"] or 1),
                        ep=int(r["ep"] or 1),
                        layers=int(r["layers"]),
                        hidden=hidden,
                        heads=heads,
                        kv_heads=int(r["kv_heads"]) if r["kv_heads"] else heads,
                        ffn=int(r["ffn"]) if r["ffn"] else 4 * hidden,
                        vocab=int(r["vocab"]),
                        seq=int(r["seq"]),
                        global_batch=int(r["global_batch"]),
                        micro_batch=r["micro_batch"].strip(),
                        recompute=r["recompute"].strip(),
                        sp=_sp(r["sp"], int(r["tp"])),
                        virtual_stages=r["virtual_stages"].strip(),
                        flops=r["flops"].strip(),
                        published=float(r["published_tflops_per_gpu"]),
                        extra={k: v for k, v in r.items() if k not in COLUMNS and v not in (None, "")},
                    )
                )
            except (TypeError, ValueError) as e:
                raise SystemExit(f"{path}:{line}: {e}") from None
    return rows


def _sp(cell: str, tp: int) -> bool:
    """Sequence parallelism: 0/1, or `auto`: on wherever TP > 1 (Megatron-Core's and NeMo's
    recommended setting, benchmarks/tables/SOURCES.md)."""
    cell = cell.strip()
    if cell == "auto":
        return tp > 1
    if cell not in ("0", "1"):
        raise ValueError(f"sp {cell!r}: expected 0, 1 or auto")
    return cell == "1"


def settings_of(table: Path) -> dict:
    """The run settings a table's framework used, per row (``TABLE.settings.json`` beside it:
    {"source": ..., "rows": {name: {"micro_batch": .., "virtual_stages": .., ...}}}), or {}."""
    p = table.with_suffix(".settings.json")
    return json.loads(p.read_text()) if p.exists() else {}


def resolve(row: Row, settings: dict) -> dict:
    """The plan of a row with `auto` resolved: the table's run settings where they name the row,
    else Megatron-LM's defaults (micro-batch 1; no interleaving; recomputation: selective with
    sequence parallelism, else none; the distributed optimizer off)."""
    own = {**settings.get("defaults", {}), **settings.get("rows", {}).get(row.name, {})}
    per_replica = row.global_batch // row.dp
    mb = own.get("micro_batch") if row.micro_batch == "auto" else int(row.micro_batch)
    mb = int(mb or 1)
    chunks = own.get("virtual_stages") if row.virtual_stages == "auto" else int(row.virtual_stages)
    recompute = row.recompute
    if recompute == "auto":
        recompute = own.get("recompute") or ("selective" if row.sp else "none")
    # Megatron-LM's "local" DDP all-reduces the whole gradient buffer once after the backward (no
    # overlap): one bucket; torch DDP overlaps its 25 MiB buckets with the backward; Megatron-Core
    # ("mcore") buckets max(40M, 1M x dp x cp) parameters (megatron/core/distributed
    # distributed_data_parallel.py: "larger DP sizes need larger buckets"), gradients in BF16
    bucket_mb = 1e9 if own.get("ddp") == "local" else None
    if own.get("ddp") == "mcore":  # Megatron-Core's default bucket: max(40M, 1M x dp x cp) parameters
        bucket_mb = max(40_000_000, 1_000_000 * row.dp * row.cp) * int(own.get("grad_bytes", 2)) / 2**20
    return {
        "bucket_mb": bucket_mb,
        "micro_batch": mb,
        "micro_batches": per_replica // mb,
        "virtual_stages": int(chunks or 1),
        "recompute": recompute,
        "zero": int(own.get("zero", 0)),
        "cp_comm": own.get("cp_comm", "p2p"),
        "overlap_param_gather": bool(own.get("overlap_param_gather", False)),
        "p2p_blocking": bool(own.get("p2p_blocking", False)),
        "scatter_gather": bool(own.get("scatter_gather", False)),
        "grad_accum": str(own.get("grad_accum", "fused")),
        "model": {**settings.get("model", {}), **own.get("model", {})},
        # the optimizer the framework ran: a torch.optim name or FILE.py:CLASS under the repository
        "optimizer": own.get("optimizer") or settings.get("optimizer") or "adamw",
        "source": settings.get("source", "") if own else "defaults",
    }


def model_config(row: Row, plan: dict) -> dict:
    """`examples/models/gpt.py` config of a row: a GPT of Megatron-LM (LayerNorm, GeLU MLP of 4h,
    learned positions, biases, tied embeddings) or a Llama (RMSNorm, SwiGLU, rotary, GQA)."""
    if row.family == "gpt":
        cfg = dict(norm="layer", mlp="gelu", positions="learned", bias=True, tie=True, max_seq=row.seq)
    elif row.family == "nemotron":  # LayerNorm(1p), squared ReLU, RoPE, no biases, untied embeddings
        cfg = dict(norm="layer", mlp="squared_relu", positions="rope", bias=False, tie=False)
    else:
        cfg = dict(norm="rms", mlp="swiglu", positions="rope", bias=False, tie=False)
    if row.extra.get("mlp"):
        cfg["mlp"] = row.extra["mlp"]
    cfg.update(
        layers=row.layers, hidden=row.hidden, heads=row.heads, kv_heads=row.kv_heads, ffn=row.ffn, vocab=row.vocab
    )
    cfg.update(plan["model"])
    return cfg


def step_flops(row: Row, recompute: str) -> float:
    """FLOPs of one step by the table's convention: ``hardware`` (Megatron-LM's, Narayanan et al.
    eq. 3: 96·B·s·l·h²·(1 + s/6h + V/16lh), which counts the recomputed forward) for GPT rows with
    full recomputation, else 6·N·tokens plus attention's 12·l·s·h per token (PaLM's and NeMo's
    convention, no causal halving: it reproduces every NeMo and Nemotron row's TFLOP/s from its
    tokens/s, benchmarks/tables/SOURCES.md), plus a recomputed forward's third for ``hardware``."""
    b, s, L, h, V = row.global_batch, row.seq, row.layers, row.hidden, row.vocab
    if row.flops == "hardware" and row.family == "gpt" and recompute == "full" and row.ffn == 4 * h:
        return 96 * b * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    kv = row.kv_heads * (h // row.heads)
    mlp = (3 if row.extra.get("mlp", "gelu" if row.family == "gpt" else "swiglu") == "swiglu" else 2) * h * row.ffn
    n = L * (2 * h * h + 2 * h * kv + mlp) + V * h
    tokens = b * s
    model = 6 * n * tokens + 12 * L * s * h * tokens
    if row.flops == "hardware" and recompute == "full":
        model *= 4 / 3
    return model


#: The cluster preset of each GPU's published runs (`chakra simulate --system NAME`).
CLUSTER_OF = {"a100": "selene", "h100": "dgx-h100", "b200": "dgx-b200"}


def system_for(row: Row):
    """The real machine a row ran on (`simulate.clusters`): its network as NCCL runs it and its
    GPU's kernel model."""
    from chakra_trace.simulate.presets import preset  # noqa: PLC0415

    if row.gpu not in CLUSTER_OF:
        raise ValueError(f"no cluster preset for GPU {row.gpu!r} (have: {', '.join(CLUSTER_OF)})")
    return preset(CLUSTER_OF[row.gpu])


def compute_by_class(trace, system) -> dict:
    """Seconds of a rank's compute nodes by kernel class (matmul, fused attention, other), and of
    those the memory-bound share (the kernel model's time is its bytes'), as the simulator costs
    them."""
    import numpy as np  # noqa: PLC0415

    from chakra_trace.simulate.costs import durations, typed_peaks  # noqa: PLC0415
    from chakra_trace.simulate.kernels import ATTENTION, GEMM, memory_ns, op_classes  # noqa: PLC0415
    from chakra_trace.simulate.rules import DEFAULT  # noqa: PLC0415

    peaks = typed_peaks(trace, system, DEFAULT)
    ns = durations(trace, system, None, comm="recorded", rules=DEFAULT, warn=lambda m: None, peaks=peaks)
    cls = op_classes(trace)
    dc = system.device_compute
    bound = memory_ns(trace.tensor_size, dc.kernels, dc.device, dc.efficiency) + dc.kernels.launch_ns >= ns - 1
    out = {}
    for name, c in (("matmul", GEMM), ("attention", ATTENTION), ("other", 0)):
        m = cls == c
        out[name] = float(ns[m].sum()) / 1e9
        out[name + "_memory_bound"] = float(ns[m & bound].sum()) / 1e9
    out["kernels"] = int(np.count_nonzero(ns))
    return out


def predict(row: Row, settings: dict) -> dict:
    from chakra_trace.capture import capture, load_build  # noqa: PLC0415
    from chakra_trace.simulate.presets import simulate_on  # noqa: PLC0415
    from chakra_trace.synthesize.parallel import Plan, parallelize_detailed  # noqa: PLC0415

    t0 = time.perf_counter()
    plan = resolve(row, settings)
    cap = capture(
        load_build(f"{GPT}:build"),
        model_config(row, plan),
        batch=row.global_batch // row.dp,
        seq=row.seq,
        dtype="float16" if row.gpu == "a100" else "bfloat16",
        fold_views=True,
        optimizer=plan["optimizer"] if ":" not in plan["optimizer"] else str(ROOT / plan["optimizer"]),
    )
    t1 = time.perf_counter()
    par = parallelize_detailed(
        cap.trace,
        Plan(
            tp=row.tp,
            pp=row.pp,
            dp=row.dp,
            ep=row.ep,
            cp=row.cp,
            cp_comm=plan["cp_comm"],
            sp=row.sp,
            micro_batches=plan["micro_batches"],
            recompute=plan["recompute"],
            virtual_stages=plan["virtual_stages"],
            zero=plan["zero"],
            fp8=row.extra.get("fp8") in ("1", "true", "True"),
            overlap_param_gather=plan["overlap_param_gather"],
            p2p_blocking=plan["p2p_blocking"],
            scatter_gather=plan["scatter_gather"],
            grad_accum=plan["grad_accum"],
            **({"bucket_mb": plan["bucket_mb"]} if plan["bucket_mb"] else {}),
        ),
    )
    t2 = time.perf_counter()
    system = system_for(row)
    res = simulate_on(par.workload, system)
    t3 = time.perf_counter()
    step = res.step_ns / 1e9
    slow = int(max(range(len(res.finish_ns)), key=lambda i: res.finish_ns[i]))
    predicted = step_flops(row, plan["recompute"]) / (step * row.gpus) / 1e12
    by_class = compute_by_class(par.workload.traces[slow], system.system)
    return {
        "name": row.name,
        "gpus": row.gpus,
        "predicted_tflops_per_gpu": predicted,
        "published_tflops_per_gpu": row.published,
        "error": predicted / row.published - 1,
        "step_s": step,
        "compute_s": float(res.compute_ns[slow]) / 1e9,
        "exposed_comm_s": float(res.exposed_comm_ns[slow]) / 1e9,
        "bubble_s": float(res.idle_ns[slow]) / 1e9,
        "other_s": float(res.other_ns[slow]) / 1e9,
        "compute_by_class_s": by_class,
        "plan": {k: v for k, v in plan.items() if k != "model"},
        "model": model_config(row, plan),
        "system": system.name,
        "capture_s": t1 - t0,
        "parallelize_s": t2 - t1,
        "simulate_s": t3 - t2,
        "wall_s": t3 - t0,
        "shortcuts": list(res.shortcuts),
    }


def _child(row: Row, settings: dict, q, parent: int) -> None:
    from chakra_trace.io.workers import die_with_parent  # noqa: PLC0415

    die_with_parent(parent)  # a row's process ends with the run (Ctrl-C, kill)
    try:
        out = predict(row, settings)
    except Exception as e:  # noqa: BLE001 - a row that cannot run is reported, not fatal
        out = {"name": row.name, "skipped": f"{type(e).__name__}: {e}"}
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    q.put(out)


def run_row(row: Row, settings: dict) -> dict:
    """One row in its own process, so its wall time and peak memory are its own."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(row, settings, q, os.getpid()), daemon=True)
    p.start()
    import queue  # noqa: PLC0415

    while True:  # a row whose process dies (killed for memory) is reported, not waited for
        try:
            out = q.get(timeout=5)
            break
        except queue.Empty:
            if not p.is_alive():
                out = {"name": row.name, "skipped": f"its process ended with exit code {p.exitcode}", "peak_rss_gb": 0}
                break
    p.join()
    return out


def summary(results: list[dict]) -> dict:
    errs = [abs(r["error"]) for r in results if "error" in r]
    return {
        "rows": results,
        "median_abs_error": statistics.median(errs) if errs else None,
        "max_abs_error": max(errs) if errs else None,
        "within_10pct": sum(e <= 0.10 for e in errs),
        "predicted": len(errs),
    }


def figure(results: list[dict], path: Path) -> None:
    """Predicted against published TFLOP/s per GPU, one marker per row, a colour per table, with
    the line of equality and the +-10% band."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    rows = [r for r in results if "error" in r]
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    top = max(max(r["published_tflops_per_gpu"], r["predicted_tflops_per_gpu"]) for r in rows) * 1.1
    xs = [0, top]
    ax.plot(xs, xs, color="black", lw=1, label="predicted = published")
    ax.fill_between(xs, [0.9 * x for x in xs], [1.1 * x for x in xs], color="0.85", label="within 10%")
    for i, table in enumerate(sorted({r["table"] for r in rows})):
        these = [r for r in rows if r["table"] == table]
        ax.scatter(
            [r["published_tflops_per_gpu"] for r in these],
            [r["predicted_tflops_per_gpu"] for r in these],
            s=28,
            marker="os^Dv<>"[i % 7],
            label=table.removesuffix(".csv"),
            zorder=3,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    lo = min(r["published_tflops_per_gpu"] for r in rows) * 0.8
    ax.set_xlim(lo, top)
    ax.set_ylim(lo, top)
    ax.set_xlabel("published TFLOP/s per GPU")
    ax.set_ylabel("predicted TFLOP/s per GPU (capture, parallelize, simulate)")
    ax.set_title("Published training runs predicted from their configuration")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    tmp.replace(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", type=Path, required=True, action="append", help="a table CSV (repeatable)")
    ap.add_argument("--only", nargs="*", help="rows by name")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--figure", type=Path, help="a PNG of predicted against published (needs matplotlib)")
    ap.add_argument("--merge", type=Path, help="a JSON of an earlier run: its rows that this run did not redo are kept")
    args = ap.parse_args(argv)
    results = []
    for table in args.table:
        settings = settings_of(table)
        for row in read_table(table):
            if args.only and row.name not in args.only:
                continue
            r = {"table": table.name, **run_row(row, settings)}
            results.append(r)
            if args.json:  # after every row: an interrupted run keeps what it measured
                _write_json(args.json, summary(results))
            if "error" in r:
                print(
                    f"{r['name']:14s} {row.gpus:6d} GPUs  predicted {r['predicted_tflops_per_gpu']:6.1f}  published "
                    f"{row.published:6.1f}  ({r['error']:+6.1%})  step {r['step_s']:7.2f} s = compute "
                    f"{r['compute_s']:.2f} + exposed comm {r['exposed_comm_s']:.2f} + bubble {r['bubble_s']:.2f}  "
                    f"[{r['wall_s']:.0f} s, {r['peak_rss_gb']:.1f} GB]",
                    flush=True,
                )
            else:
                print(f"{r['name']:14s} skipped: {r['skipped']}", flush=True)
    if args.merge and args.merge.exists():
        done = {(r["table"], r["name"]) for r in results}
        results = [
            r for r in json.loads(args.merge.read_text())["rows"] if (r["table"], r["name"]) not in done
        ] + results
    out = summary(results)
    if args.figure and out["predicted"]:
        figure(results, args.figure)
    if out["predicted"]:
        print(
            f"median |error| {out['median_abs_error']:.1%}, max {out['max_abs_error']:.1%}, "
            f"{out['within_10pct']}/{out['predicted']} within 10%"
        )
    if args.json:
        _write_json(args.json, out)
    return 0


def _write_json(path: Path, out: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1, default=lambda o: asdict(o)) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
