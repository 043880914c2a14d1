#!/usr/bin/env python3
"""The device kernel model against kernels measured in public GPU profiler traces.

    python benchmarks/kernel_check.py TRACE.json[.gz] ... [--device a100] [--json OUT.json]

Each trace is read here from its raw Kineto JSON, independently of `chakra convert` (a few lines:
a kernel belongs to the innermost operator whose thread launched it, by the runtime call's
correlation id). For every operator whose recorded input shapes say its work -- matrix multiplies
(`aten::mm`, `addmm`, `bmm`, `baddbmm`) and memory-bound operators whose output has their first
input's shape (elementwise, softmax, normalization, dropout, Megatron's fused softmax and
LayerNorm) -- its measured GPU time (the sum of its kernels) is set beside the kernel model's
(`simulate.kernels.op_ns`, the trace's GPU's preset; docs/device-model.md). The table per class:
operators, measured and modelled time, the model's share of the measurement (1: exact; < 1: the
model is faster than the GPU was), and the achieved rates.

Nothing here feeds the model: the traces are a check, not a calibration.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from chakra_trace.schema.devices import device_spec  # noqa: E402
from chakra_trace.schema.kernel_models import KERNEL_MODELS, gemm_quantization  # noqa: E402
from chakra_trace.simulate.kernels import GEMM, OTHER, op_ns  # noqa: E402

ITEMSIZE = {"c10::Half": 2, "c10::BFloat16": 2, "float": 4, "double": 8, "c10::Float8_e4m3fn": 1}
DTYPE = {"c10::Half": "fp16", "c10::BFloat16": "bf16", "float": "fp32", "double": "fp64", "c10::Float8_e4m3fn": "fp8"}
GEMMS = {"aten::mm": (0, 1, None), "aten::addmm": (1, 2, 0), "aten::bmm": (0, 1, None), "aten::baddbmm": (1, 2, 0)}
MEMORY = {
    "aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::sub", "aten::div", "aten::gelu", "aten::silu",
    "aten::gelu_backward", "aten::silu_backward", "aten::native_dropout", "aten::_softmax", "aten::softmax",
    "aten::_softmax_backward_data", "aten::native_layer_norm", "aten::layer_norm", "aten::copy_", "aten::relu",
    "aten::tanh", "aten::neg", "aten::rsqrt", "aten::pow", "ScaledUpperTriangMaskedSoftmax",
    "FusedLayerNormAffineFunction", "aten::native_dropout_backward", "aten::threshold_backward",
}  # fmt: skip
DEVICE_OF = (
    ("A100", "a100"),
    ("H100", "h100"),
    ("H200", "h200"),
    ("H800", "h100"),
    ("B200", "b200"),
    ("MI300X", "mi300x"),
)


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def device_of(doc: dict) -> str | None:
    for p in doc.get("deviceProperties") or []:
        for word, key in DEVICE_OF:
            if word in str(p.get("name", "")):
                return key
    return None


def measured_ops(doc: dict) -> list[tuple[dict, float]]:
    """(operator event, GPU µs of the kernels it launched) for operators with input shapes."""
    ev = doc["traceEvents"] if isinstance(doc, dict) else doc
    ops = [e for e in ev if e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {}) and "dur" in e]
    by_thread: dict = defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    starts = {}
    for k, v in by_thread.items():
        v.sort(key=lambda e: e["ts"])
        starts[k] = [e["ts"] for e in v]
    launch = {
        e["args"]["correlation"]: e
        for e in ev
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    gpu: dict[int, float] = defaultdict(float)
    for k in ev:
        if k.get("cat") != "kernel":
            continue
        r = launch.get(k.get("args", {}).get("correlation"))
        if r is None:
            continue
        key = (r.get("pid"), r.get("tid"))
        v = by_thread.get(key, [])
        i = bisect.bisect_right(starts.get(key, []), r["ts"])
        owner = None
        for e in reversed(v[max(0, i - 64) : i]):  # the innermost op holding the call
            if e["ts"] <= r["ts"] <= e["ts"] + e["dur"] and (owner is None or e["dur"] < owner["dur"]):
                owner = e
        if owner is not None:
            gpu[id(owner)] += float(k.get("dur", 0))
    return [(e, gpu[id(e)]) for e in ops if gpu.get(id(e), 0) > 0]


def work(e: dict) -> tuple[int, float, float, tuple[int, int, int, int], str] | None:
    """(class, FLOPs, bytes, (M, N, batch, K), dtype) of an operator from its recorded shapes."""
    name, a = e["name"], e["args"]
    dims, types = a.get("Input Dims") or [], a.get("Input type") or []
    tensors = [(d, t) for d, t in zip(dims, types) if isinstance(d, list) and d and t in ITEMSIZE]
    if not tensors:
        return None
    dtype = DTYPE[tensors[0][1]]
    if name in GEMMS:
        ia, ib, ic = GEMMS[name]
        try:
            A, B = dims[ia], dims[ib]
        except IndexError:
            return None
        if not (isinstance(A, list) and isinstance(B, list) and len(A) == len(B) and len(A) in (2, 3)):
            return None
        batch = A[0] if len(A) == 3 else 1
        m, k, n = A[-2], A[-1], B[-1]
        item = ITEMSIZE[types[ia]]
        nbytes = item * batch * (m * k + k * n + m * n)
        concrete = a.get("Concrete Inputs") or []
        beta_zero = name == "aten::baddbmm" and len(concrete) > 3 and str(concrete[3]) in ("0", "0.0")
        if ic is not None and not beta_zero and isinstance(dims[ic], list):
            nbytes += item * math.prod(dims[ic])
        return GEMM, 2.0 * batch * m * n * k, float(nbytes), (m, n, batch, k), dtype
    if name in MEMORY:
        first = math.prod(tensors[0][0])
        nbytes = sum(math.prod(d) * ITEMSIZE[t] for d, t in tensors) + first * ITEMSIZE[tensors[0][1]]
        return OTHER, 0.0, float(nbytes), (0, 0, 0, 0), dtype
    return None


def check(path: Path, device: str | None) -> list[dict]:
    doc = load(path)
    dev_key = device or device_of(doc)
    if dev_key is None or dev_key not in KERNEL_MODELS:
        names = sorted({str(p.get("name")) for p in (doc.get("deviceProperties") or [])}) or ["no deviceProperties"]
        print(
            f"{path.name}: skipped, its GPU ({', '.join(names)}) has no kernel model "
            f"(have: {', '.join(KERNEL_MODELS)}; --device names one)",
            file=sys.stderr,
        )
        return []
    km, dev = KERNEL_MODELS[dev_key], device_spec(dev_key)
    rows = []
    for e, us in measured_ops(doc):
        w = work(e)
        if w is None:
            continue
        cls, flops, nbytes, (m, n, batch, k), dtype = w
        fill = gemm_quantization(m, n, batch, km.sms, km.tile, k) if cls == GEMM else 1.0
        peak = dev.peak_for(dtype)[0]
        (ns,) = op_ns(
            np.array([cls]), np.array([flops]), np.array([nbytes]), np.array([fill]), np.array([dtype], object),
            np.array([peak]), km, dev,
        )  # fmt: skip
        rows.append({"trace": path.name, "device": dev_key, "op": e["name"], "class": "matmul" if cls == GEMM else "memory-bound",
                     "flops": flops, "bytes": nbytes, "measured_us": us, "model_us": ns / 1e3})  # fmt: skip
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    groups: dict = defaultdict(list)
    for r in rows:
        groups[(r["trace"], r["device"], r["class"])].append(r)
    out = []
    for (trace, dev, cls), rs in sorted(groups.items()):
        meas = sum(r["measured_us"] for r in rs)
        model = sum(r["model_us"] for r in rs)
        big = [r for r in rs if r["measured_us"] >= 20]  # kernels long enough that launch noise is small
        bw = device_spec(dev).mem_bw
        out.append(
            {
                "trace": trace,
                "device": dev,
                "class": cls,
                "ops": len(rs),
                "measured_ms": meas / 1e3,
                "model_ms": model / 1e3,
                "model_over_measured": model / meas if meas else None,
                "median_ratio_ops_20us": statistics.median(r["model_us"] / r["measured_us"] for r in big) if big else None,
                "achieved": (sum(r["flops"] for r in rs) / meas / 1e6) if cls == "matmul" else (sum(r["bytes"] for r in rs) / meas / 1e3),
                "achieved_unit": "TFLOP/s" if cls == "matmul" else "GB/s",
                # of memory-bound kernels: the median achieved share of the datasheet bandwidth
                "median_bandwidth_share_20us": statistics.median(r["bytes"] / (r["measured_us"] * 1e-6) / bw for r in big)
                if big and cls == "memory-bound" else None,
            }
        )  # fmt: skip
    return out


def vendor_shares(table: list[dict]) -> dict[str, tuple[float, int]]:
    """Per vendor: the median over traces (one per job: ranks of one job agree) of each trace's
    median achieved bandwidth share of memory-bound kernels >= 20 us, and the number of traces --
    how `schema.kernel_models` sets its ``mem`` shares."""
    per: dict[str, dict[str, float]] = defaultdict(dict)
    for t in table:
        share = t.get("median_bandwidth_share_20us")
        if share is None:
            continue
        vendor = "AMD" if t["device"].startswith("mi") else "NVIDIA"
        job = t["trace"].split("_kineto_")[0]  # ranks of one recorded job count once
        per[vendor].setdefault(job, share)
    return {v: (statistics.median(jobs.values()), len(jobs)) for v, jobs in sorted(per.items())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--device", help="the GPU (default: the trace's deviceProperties)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    for p in args.traces:
        for f in sorted(p.glob("*.json*")) if p.is_dir() else [p]:
            try:
                rows.extend(check(f, args.device))
            except (OSError, EOFError, ValueError, TypeError, KeyError, AttributeError) as e:
                print(f"{f}: skipped, not a readable Kineto trace ({type(e).__name__}: {e})", file=sys.stderr)
    table = summarize(rows)
    print(
        f"{'trace':42s} {'device':7s} {'class':13s} {'ops':>5s} {'measured ms':>12s} {'model ms':>9s} {'model/meas':>10s} {'median >=20us':>13s}  achieved"
    )
    for t in table:
        med = t["median_ratio_ops_20us"]
        print(
            f"{t['trace'][:42]:42s} {t['device']:7s} {t['class']:13s} {t['ops']:5d} {t['measured_ms']:12.2f} {t['model_ms']:9.2f} "
            f"{t['model_over_measured']:10.2f} {'-' if med is None else f'{med:.2f}':>13s}  {t['achieved']:.0f} {t['achieved_unit']}"
        )  # fmt: skip
    shares = vendor_shares(table)
    for vendor, (share, n) in shares.items():
        print(
            f"memory-bound kernels, {vendor}: median over {n} traces of each trace's median bandwidth share: {share:.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"summary": table, "bandwidth_share": shares}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
