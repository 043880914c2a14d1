"""Compute time of each node as a GPU's kernels would take it, not at the datasheet roof.

The roofline (`costs`) charges a node max(FLOPs / peak, bytes / bandwidth): a lower bound real
kernels miss by 1.5-2x on a training step. The kernel model (`schema.kernel_models`) charges

- a matrix multiply (``MATMUL_OPS``, convolutions, and their autograd backward nodes:
  `schema.compute_types.op_kind`) its FLOPs at the device's achievable matmul
  rate (MAMF) scaled by how its output tiles fill the SMs (``gemm_m``/``gemm_n``/``gemm_batch``
  attributes, written by `chakra parallelize`; without them the best shape's fill);
- fused attention (``ATTENTION_OPS`` and their backward) its FLOPs at the FlashAttention share of
  the type's peak;
- everything else (elementwise, norms, softmax, dropout, reductions, optimizer steps) its
  arithmetic on the vector units (FP32 peak);

each no faster than its bytes at the achievable HBM bandwidth, plus the launch gap every kernel
pays on the GPU. Pure: arrays in, an array of ns out.
"""

from __future__ import annotations

import numpy as np

from ..schema.compute_types import NodePeaks, op_kind
from ..schema.devices import DeviceSpec
from ..schema.kernel_models import KernelModel, gemm_quantization
from ..schema.trace import Trace

__all__ = ["GEMM", "ATTENTION", "OTHER", "kernel_ns", "memory_ns", "op_classes", "op_ns"]

OTHER, GEMM, ATTENTION = 0, 1, 2
_ATTENTION_WORDS = ("scaled_dot_product", "flash_attention", "efficient_attention", "flash_attn", "fused_attention")


def _class_of(name: str) -> int:
    base = name.split(".")[0]
    kind = op_kind(base)  # (autograd backward nodes of converted traces by their forward's kind)
    if kind == "attention" or any(w in base for w in _ATTENTION_WORDS):
        return ATTENTION
    return GEMM if kind in ("matmul", "conv") else OTHER


def op_classes(t: Trace) -> np.ndarray:
    """OTHER / GEMM / ATTENTION per node, by its name (Python once per distinct name)."""
    table = np.fromiter((_class_of(str(n)) for n in t.names), np.int8, len(t.names))
    return table[t.name_codes] if len(t.names) else np.zeros(len(t), np.int8)


def _fill(t: Trace, km: KernelModel) -> np.ndarray:
    """Tile and wave fill of each GEMM node with recorded dimensions, NaN elsewhere (`op_ns`: the
    best shape's)."""
    m, has_m = t.attr_array("gemm_m", np.int64)
    n, has_n = t.attr_array("gemm_n", np.int64)
    k, has_k = t.attr_array("gemm_k", np.int64)
    b, has_b = t.attr_array("gemm_batch", np.int64)
    q = np.full(len(t), np.nan)
    rows = np.flatnonzero(has_m & has_n)
    if not rows.size:
        return q
    batch = np.where(has_b, b, 1)
    depth = np.where(has_k, k, 0)
    key = np.stack([m[rows], n[rows], batch[rows], depth[rows]], axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    vals = np.array(
        [gemm_quantization(int(x), int(y), int(z), km.sms, km.tile, int(w)) for x, y, z, w in uniq.tolist()]
    )
    q[rows] = vals[inv.reshape(-1)]
    return q


def op_ns(
    cls: np.ndarray,
    flops: np.ndarray,
    nbytes: np.ndarray,
    fill: np.ndarray,
    dtypes: np.ndarray,
    type_peak: np.ndarray,
    km: KernelModel,
    dev: DeviceSpec,
    efficiency: float = 1.0,
) -> np.ndarray:
    """Time (ns, float) of ops given as arrays: class (`op_classes`), FLOPs, bytes, tile and wave
    fill of GEMMs (NaN where unknown: the benchmark's best shape's, i.e. its measured rate), element type names and their datasheet peaks (FLOP/s): the
    module docstring's model, for traces (`kernel_ns`) and for ops read from anywhere else (a
    profiler trace's recorded shapes, `benchmarks/kernel_check.py`)."""
    ops = np.asarray(flops, float)
    size = np.asarray(nbytes, float)
    # achievable matmul rate at the best shape, per type (a type without its own MAMF: its peak
    # times the BF16 MAMF's share of the BF16 peak)
    best = gemm_quantization(km.gemm_shape[0], km.gemm_shape[1], 1, km.sms, km.tile, km.gemm_shape[2])
    bf16_share = km.gemm_rate("bf16") / dev.peak_for("bf16")[0]
    own = dict(km.gemm)
    rate = np.empty(len(ops))
    for ty in set(np.asarray(dtypes, object).tolist()):
        m = dtypes == ty
        rate[m] = own[ty] if ty in own else type_peak[m] * bf16_share
    per_sm_rate = rate / best * efficiency
    fill = np.where(np.isnan(fill), best, fill)
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(
            cls == GEMM,
            ops / (per_sm_rate * fill),
            np.where(cls == ATTENTION, ops / (type_peak * km.attention * efficiency), ops / (km.vector * efficiency)),
        )
    busy = (ops > 0) | (size > 0)
    return np.where(
        busy, np.maximum(np.nan_to_num(compute) * 1e9, memory_ns(size, km, dev, efficiency)) + km.launch_ns, 0.0
    )


def memory_ns(nbytes, km: KernelModel, dev: DeviceSpec, efficiency: float = 1.0) -> np.ndarray:
    """Time (ns) of moving ``nbytes`` at the bandwidth memory-bound kernels reach (without the
    launch gap): the memory roof of `op_ns`."""
    return np.asarray(nbytes, float) / (dev.mem_bw * km.mem * efficiency) * 1e9


def kernel_ns(
    t: Trace, rows: np.ndarray, km: KernelModel, dev: DeviceSpec, peaks: NodePeaks | None, efficiency: float = 1.0
) -> np.ndarray:
    """Time (ns, float) of each node of ``t`` where ``rows`` (bool) holds, 0 elsewhere (`op_ns`).
    ``peaks`` (`schema.compute_types.node_peaks`): each node's compute type (None: the device's
    default type for all)."""
    out = np.zeros(len(t))
    if not rows.any():
        return out
    # each node's type: the name of the peak it runs at (bf16, fp16, tf32, fp8, fp32, ...)
    if peaks is not None:
        type_of = np.asarray(peaks.names, object)[peaks.peak]
        type_peak = peaks.flops
    else:
        d = dev.default_dtype
        type_of = np.full(len(t), d, object)
        type_peak = np.full(len(t), dev.peak_for(d)[0])
    r = np.flatnonzero(rows)
    out[r] = op_ns(
        op_classes(t)[r],
        t.num_ops[r],
        t.tensor_size[r],
        _fill(t, km)[r],
        type_of[r],
        type_peak[r],
        km,
        dev,
        efficiency,
    )
    return out
