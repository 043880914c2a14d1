"""What a compute node costs on this CPU, measured once: the time of one op called from Python
(dispatch, allocation, the interpreter between calls), matmul throughput by size, and memory
bandwidth. A node then costs op + max(FLOPs / matmul rate at its size, bytes / bandwidth);
`[host]` nodes (the recording's time between ops) cost nothing apart, since the measured op
time already holds the Python between two calls.

Why not the recorded durations: they ran under the execution-trace observer and Kineto, which
made the corpus's steps 2-7 times the unprofiled ones, unevenly per op (`compute="recorded"`
of `predict` still takes them as they are)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ChakraError
from ..replay.measure import measure
from ..schema.enums import NodeType
from ..schema.resources import host_gap_mask
from ..schema.trace import Trace

MATMUL_SIZES = (16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class ComputeModel:
    """op_ns: one op from Python, with its 95% CI; matmul: [[FLOPs, GFLOP/s]] by size, increasing;
    mem_gbps: copy bandwidth (bytes read + written per ns); threads: intra-op threads measured with."""

    op_ns: float
    op_ci_ns: list[float] = field(default_factory=list)
    matmul: list[list[float]] = field(default_factory=list)
    mem_gbps: float = 10.0
    threads: int = 1

    def rate_gflops(self, flops: np.ndarray) -> np.ndarray:
        """Matmul throughput at each FLOP count (log-interpolated between measured sizes)."""
        if not self.matmul:
            return np.full(np.shape(flops), np.inf)
        f = np.asarray(self.matmul, float)
        return np.interp(np.log(np.maximum(flops, 1.0)), np.log(f[:, 0]), f[:, 1])

    def node_ns(self, t: Trace, op_ns: float | None = None, scale: float = 1.0) -> np.ndarray:
        """Each compute node's time in ns (others 0). ``op_ns``/``scale`` shift the per-op
        time and the throughput terms (a band's low and high ends)."""
        op = self.op_ns if op_ns is None else op_ns
        comp = t.types == NodeType.COMP_NODE
        gap = host_gap_mask(t)
        flops = t.num_ops.astype(float)
        size = t.tensor_size.astype(float)
        with np.errstate(divide="ignore"):
            work = np.maximum(flops / self.rate_gflops(flops), size / self.mem_gbps)
        return np.where(comp & ~gap, op + scale * work, 0.0)

    def to_dict(self) -> dict:
        return {
            "op_ns": self.op_ns,
            "op_ci_ns": list(self.op_ci_ns),
            "matmul": [list(x) for x in self.matmul],
            "mem_gbps": self.mem_gbps,
            "threads": self.threads,
        }

    @classmethod
    def from_dict(cls, d: dict) -> ComputeModel:
        try:
            return cls(
                float(d["op_ns"]),
                [float(x) for x in d.get("op_ci_ns", [])],
                [[float(a), float(b)] for a, b in d.get("matmul", [])],
                float(d.get("mem_gbps", 10.0)),
                int(d.get("threads", 1)),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise ChakraError(f"the compute model lacks or mistypes {str(e)[:160]}") from None


def measure_compute(threads: int = 1, budget_s: float = 2.0) -> ComputeModel:
    """Time ops on this CPU with `threads` intra-op threads (the corpus jobs use one)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b, c = torch.ones(16), torch.ones(16), torch.empty(16)
        calls = 200

        def ops():
            for _ in range(calls):
                torch.add(a, b, out=c)

        m = measure(ops, warmup=3, min_repeats=10, target_rel_ci=0.01, budget_s=budget_s)
        op_ns = m.median / calls * 1e9
        ci = m.ci95_median or m.ci95_mean or (m.median, m.median)
        matmul = []
        for n in MATMUL_SIZES:
            x, y = torch.randn(n, n), torch.randn(n, n)
            k = max(1, int(2e7 // (2 * n**3)))

            def mm(x=x, y=y, k=k):
                for _ in range(k):
                    torch.mm(x, y)

            t = measure(mm, warmup=2, min_repeats=5, target_rel_ci=0.02, budget_s=budget_s / 2).median / k
            flops = 2.0 * n**3
            matmul.append([flops, flops / max(t * 1e9 - op_ns, 1.0)])
        src, dst = torch.ones(2**22), torch.empty(2**22)  # 16 MiB: past the caches
        t_copy = measure(lambda: dst.copy_(src), warmup=2, min_repeats=5, budget_s=budget_s / 2).median
        mem = 2 * src.numel() * 4 / (t_copy * 1e9)
    finally:
        torch.set_num_threads(old)
    return ComputeModel(op_ns, [ci[0] / calls * 1e9, ci[1] / calls * 1e9], matmul, mem, threads)
