"""What a GPU's kernels achieve, per device: the figures behind the simulator's kernel model
(`simulate.kernels`), each from a datasheet, a public microbenchmark or first principles, with
its source beside it (docs/device-model.md has the table and the reasoning).

A datasheet peak is what no kernel reaches: a matrix multiply reaches the maximum achievable
matmul FLOP/s (MAMF, a brute-force search over shapes on the real GPU) at its best shape and less
at others, by how its output tiles fill the SMs (tile and wave quantization); a memory-bound
kernel streams HBM at what framework kernels reach in public profiler traces (60% of the datasheet
bandwidth on NVIDIA GPUs, 72% on AMD's; a pure streaming kernel: ~90%); fused attention reaches what the
FlashAttention papers measured; every kernel pays a launch gap on the GPU. A preset holds those
figures; nothing in it is fitted to the published training runs the model is checked against
(`benchmarks/published_bench.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import ChakraError

__all__ = ["KERNEL_MODELS", "SPLIT_K_MIN", "KernelModel", "gemm_quantization", "kernel_model"]

# Sources, cited by key in each preset's ``sources``.
MAMF = (
    "Bekman, ml-engineering (github.com/stas00/ml-engineering), compute/accelerator/README.md, 'Maximum "
    "Achievable Matmul FLOPS comparison table' (BF16 and FP8 matmul, brute-force shape search, mamf-finder.py)"
)
HBM = (
    "memory-bound operator kernels measured in public GPU profiler traces (benchmarks/kernel_check.py over "
    "../shared/traces/gpu-wild and the public traces listed in docs/device-model.md): per trace the median "
    "achieved share of the datasheet bandwidth of kernels of 20 us or more, the median over the traces of the "
    "vendor: NVIDIA 0.60 (6 traces: A100 Megatron-LM TP8, HTA A100 x2, H100 x3), AMD 0.72 (6 MI300X traces). "
    "A streaming kernel reaches ~0.90 (NVIDIA forum thread 339083: 1.80 of 2.04 TB/s on A100): framework "
    "kernels (norms, softmax, elementwise with broadcasts, copies) reach less"
)
LAUNCH = (
    "NVIDIA technical blog 'Getting Started with CUDA Graphs' (developer.nvidia.com/blog/cuda-graphs): a "
    "2.9 us kernel takes 3.8 us per launch in a stream without synchronization: ~0.9 us between kernels"
)
FA2 = (
    "Dao 2023, 'FlashAttention-2' (arXiv 2307.08691): forward+backward reaches 50-73% of the theoretical "
    "maximum FLOP/s on A100; ~35% on H100 (FlashAttention-3 paper, Shah et al. 2024, arXiv 2407.08608)"
)
FA3 = (
    "Shah et al. 2024, 'FlashAttention-3' (arXiv 2407.08608): FP16 up to 740 TFLOP/s (75%) on H100 "
    "forward; backward 1.5-1.75x FlashAttention-2's"
)
SMS = "vendor architecture whitepapers: A100 108 SMs, H100 SXM 132, B200 148 (2 dies x 74), MI300X 304 CUs"
TILES = (
    "first principles: the CTA tile of the large half-precision GEMM kernels (CUTLASS/cuBLAS defaults: "
    "256x128 on Ampere, 128x256 on Hopper/Blackwell warp-group MMA, 256x256 macro tiles on CDNA3)"
)
VECTOR = "datasheet FP32 (non-tensor) peak: elementwise and reduction arithmetic runs on the vector units"


@dataclass(frozen=True)
class KernelModel:
    """A GPU's achievable kernel rates (see the module docstring).

    ``gemm`` maps a compute type to the MAMF (FLOP/s) measured at ``gemm_shape`` (M, N, K); the
    per-SM rate the model uses is that divided by the shape's own quantization, so the best shape
    reproduces its measurement. ``attention``: fused attention's achieved share of the type's
    datasheet peak. ``mem``: achievable share of the datasheet HBM bandwidth. ``vector``: FLOP/s
    of non-matrix arithmetic. ``launch_ns``: the gap a kernel adds on the GPU."""

    device: str  # `schema.devices` key
    sms: int
    tile: tuple[int, int]
    gemm: tuple[tuple[str, float], ...]
    gemm_shape: tuple[int, int, int]
    attention: float
    mem: float
    vector: float
    launch_ns: float
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for name in ("attention", "mem"):
            v = getattr(self, name)
            if not (0 < v <= 1):
                raise ChakraError(f"kernel model {self.device}: {name} must be in (0, 1], got {v}")
        if self.sms < 1 or min(self.tile) < 1 or not self.gemm:
            raise ChakraError(f"kernel model {self.device}: SMs, tile and a GEMM rate are required")

    def gemm_rate(self, dtype: str) -> float:
        """The achievable matmul FLOP/s of ``dtype`` at the best shape: its own MAMF, else the
        next wider type's (fp8 -> bf16), else the widest given."""
        table = dict(self.gemm)
        for d in (dtype, {"fp8": "bf16", "int8": "bf16", "fp16": "bf16"}.get(dtype, "bf16")):
            if d in table:
                return table[d]
        return min(table.values())

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "sms": self.sms,
            "tile": list(self.tile),
            "gemm_tflops": {k: v / 1e12 for k, v in self.gemm},
            "gemm_shape": list(self.gemm_shape),
            "attention": self.attention,
            "mem": self.mem,
            "vector_tflops": self.vector / 1e12,
            "launch_ns": self.launch_ns,
            "sources": dict(self.sources),
        }


def gemm_quantization(m: int, n: int, batch: int, sms: int, tile: tuple[int, int], k: int = 0) -> float:
    """Share of the SMs' peak an M x N (x batch) output with reduction depth K gets, over the tiles
    a GEMM library chooses from: the large-GEMM tile and its halvings (a smaller tile loads more
    operand bytes per FLOP, so an SM runs it at its operand intensity 2ab/(a+b) over the large
    tile's), each in both orientations, with split-K where the output has fewer tiles than SMs
    (slices of K at least `SPLIT_K_MIN` deep run as separate CTAs). Each choice: (output / padded
    tiles) x (CTAs / whole waves of CTAs) x (its intensity share); the best one."""
    if m < 1 or n < 1 or batch < 1:
        return 1.0
    tm, tn = tile
    big = 2 * tm * tn / (tm + tn)
    best = 0.0
    for a, b in {(tm, tn), (tm // 2, tn), (tm // 2, tn // 2), (tm // 4, tn // 2), (tm // 4, tn // 4)}:
        if a < 16 or b < 16:
            continue
        rate = min(1.0, 2 * a * b / (a + b) / big)
        for x, y in {(a, b), (b, a)}:
            rows, cols = math.ceil(m / x), math.ceil(n / y)
            tiles = batch * rows * cols
            splits = max(1, min(sms // tiles, k // SPLIT_K_MIN)) if tiles < sms and k else 1
            ctas = tiles * splits
            fill = (m * n) / (rows * x * cols * y)
            waves = ctas / sms
            best = max(best, fill * waves / math.ceil(waves) * rate)
    return best


#: The least K slice a split-K GEMM gives one CTA (first principles: a few main-loop iterations of
#: a 32- or 64-deep K tile, so the pipeline fills).
SPLIT_K_MIN = 256


_T, _G = 1e12, 1e9


def _model(device, sms, tile, gemm, shape, attention, mem, vector, launch_ns, sources) -> KernelModel:
    return KernelModel(device, sms, tile, tuple((k, v * _T) for k, v in gemm.items()), shape, attention, mem,
                       vector * _T, launch_ns, tuple(sources.items()))  # fmt: skip


#: Kernel models by `schema.devices` key. MAMF figures: the newest BF16/FP8 tables of `MAMF`.
KERNEL_MODELS: dict[str, KernelModel] = {
    m.device: m
    for m in (
        # A100 SXM: MAMF BF16 271.2 TFLOP/s at 1024x10240x5120 (torch 2.6, CUDA 12.6); FlashAttention-2
        # 50-73% of peak forward+backward: the midpoint 0.615 (a range, not a fit); FP32 19.5 TFLOP/s.
        _model("a100", 108, (256, 128), {"bf16": 271.2}, (1024, 10240, 5120), 0.615, 0.60, 19.5, 900,
               {"sms": SMS, "tile": TILES, "gemm": MAMF, "attention": FA2, "mem": HBM, "vector": VECTOR,
                "launch_ns": LAUNCH}),
        # H100 SXM: MAMF BF16 794.5 at 2048x2048x13312, FP8 1402.6 at 1024x9216x14336; fused attention
        # FlashAttention-3's 75% forward with a backward 1.5-1.75x FA2's (~35% -> ~55-60%): 0.65 for both.
        _model("h100", 132, (128, 256), {"bf16": 794.5, "fp8": 1402.6}, (2048, 2048, 13312), 0.65, 0.60, 67, 900,
               {"sms": SMS, "tile": TILES, "gemm": MAMF, "attention": FA3, "mem": HBM, "vector": VECTOR,
                "launch_ns": LAUNCH}),
        # H200 SXM: the H100's die ("H200 is the same" in the MAMF table: 794.5 BF16), FP8 1453.4 measured.
        _model("h200", 132, (128, 256), {"bf16": 794.5, "fp8": 1453.4}, (2048, 2048, 13312), 0.65, 0.60, 67, 900,
               {"sms": SMS, "tile": TILES, "gemm": MAMF, "attention": FA3, "mem": HBM, "vector": VECTOR,
                "launch_ns": LAUNCH}),
        # B200 SXM: MAMF BF16 1745.0 at 1792x16128x3072, FP8 3432.5 at 15360x4096x3072; attention as Hopper's
        # share (no published FlashAttention figure for Blackwell in the sources: an assumption, named).
        _model("b200", 148, (128, 256), {"bf16": 1745.0, "fp8": 3432.5}, (1792, 16128, 3072), 0.65, 0.60, 75, 900,
               {"sms": SMS, "tile": TILES, "gemm": MAMF, "attention": FA3 + " (Hopper's share, assumed)",
                "mem": HBM, "vector": VECTOR, "launch_ns": LAUNCH}),
        # MI300X: MAMF BF16 668.4 at 10240x15360x8192 (ROCm 6.3, TunableOp); attention at FlashAttention-2's
        # share on A100 (no MI300X figure in the sources: assumed); FP32 vector 163.4 TFLOP/s (datasheet).
        _model("mi300x", 304, (256, 256), {"bf16": 668.4}, (10240, 15360, 8192), 0.615, 0.72, 163.4, 900,
               {"sms": SMS, "tile": TILES, "gemm": MAMF, "attention": FA2 + " (A100's share, assumed)",
                "mem": HBM, "vector": VECTOR, "launch_ns": LAUNCH}),
    )
}  # fmt: skip


def kernel_model(device: str) -> KernelModel:
    """The kernel model of a `schema.devices` key; ChakraError naming the ones there are."""
    try:
        return KERNEL_MODELS[device.strip().lower()]
    except KeyError:
        raise ChakraError(
            f"no kernel model for device {device!r}; devices with one: {', '.join(KERNEL_MODELS)}"
        ) from None
