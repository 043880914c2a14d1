"""Which device kernels (and backend host ops) are communication: one rule table, as data.

Why a table: a GPU trace names its communication by library, not by collective. NCCL writes the
collective into the kernel name (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``) except for
all-to-all and grouped point-to-point, which run as ``SendRecv`` kernels; RCCL (and NCCL's
generic path) runs every collective as ``ncclDevKernel_Generic[_N]``; expert-parallel,
symmetric-memory and custom all-reduce libraries name kernels after their own algorithms. A
kernel that no rule names is computation. `RULES` is read top to bottom, the first match wins;
docs/communication-kernels.md prints it (tests check that the two agree).

Each rule says how the conversion finds the collective type (``derive``):

- ``name``: from the kernel name (NCCL's specialised kernels);
- ``host``: from the op that launched the kernel (its ``record_param_comms`` ``Collective
  name``, its ``c10d::`` op, its ``nccl:``/``gloo:`` backend op), else unknown;
- a `CollectiveType` name: fixed by the library (a custom all-reduce is an all-reduce), unless
  the launching op names another.

The size always comes from the launching op (``record_param_comms`` ``In msg nelems`` x
``dtype``, else the c10d op's recorded input shapes); without one it is unknown, and said so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..schema.enums import CollectiveType
from .collective_names import classify

__all__ = ["RULES", "KernelMatch", "KernelRule", "is_comm_kernel", "match_kernel", "rule_table"]


@dataclass(frozen=True)
class KernelRule:
    """One row of the table: a regular expression searched in the kernel name (case-insensitive)."""

    id: str
    pattern: str
    library: str
    derive: str  # "name", "host", or a CollectiveType name: see the module doc
    comm: bool = True  # False: a computation kernel whose name looks like communication
    side: str = "gpu"  # "gpu": a device kernel; "host": a CPU op (gloo runs collectives on the CPU)
    example: str = ""
    note: str = ""


RULES: tuple[KernelRule, ...] = (
    KernelRule(
        "inductor-triton",
        r"^triton_",
        "Triton (torch.compile)",
        "computation",
        comm=False,
        example="triton_poi_fused_add_all_reduce_4",
        note="Inductor names its kernels after the ops they fused: a fused copy next to an all-reduce computes",
    ),
    KernelRule(
        "deepep-layout",
        r"deep_ep::layout::|(deep_ep|dpsk::ep)::.*get_dispatch_layout",
        "DeepEP",
        "computation",
        comm=False,
        example="deep_ep::layout::get_dispatch_layout<256, 32, 8>; dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>",
        note="the routing layout computed before a dispatch moves no data",
    ),
    KernelRule(
        "nccl-generic",
        r"^nccl(Dev)?Kernel_Generic",
        "RCCL / NCCL",
        "host",
        example="ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
        note="RCCL runs every collective as this kernel (NCCL 2.19+ its non-specialised ones): the type is the launching op's",
    ),
    KernelRule(
        "nccl-sendrecv",
        r"^nccl(Dev)?Kernel_SendRecv|^ncclSendRecv",
        "NCCL / RCCL",
        "host",
        example="ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        note="all-to-all and grouped send/recv: the launching op says which (c10d::alltoall_base_, nccl:send, ...)",
    ),
    KernelRule(
        "nccl-named",
        r"^nccl(Dev)?(Kernel_)?(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|AllToAll)",
        "NCCL / RCCL",
        "name",
        example="ncclDevKernel_AllReduce_Sum_f32_RING_LL; ncclAllReduceRingLLKernel_sum_f32 (NCCL 2.4-2.7)",
    ),
    KernelRule(
        "msccl",
        r"msccl(?!pp)",
        "MSCCL (RCCL)",
        "host",
        example="mscclKernel_Sum_bf16_LL128",
        note="one kernel runs any custom algorithm: the launching op names the collective",
    ),
    KernelRule("mscclpp", r"mscclpp", "MSCCL++", "host", example="mscclpp::allreduce8<__nv_bfloat16>"),
    KernelRule(
        "deepep",
        r"deep_ep::|dpsk::ep::",
        "DeepEP (expert parallel)",
        "ALL_TO_ALL",
        example="deep_ep::intranode::dispatch<8, 768, 8192>; dpsk::ep::internode::combine<...> (DeepSeek's own build)",
        note="dispatch, combine and their notify kernels exchange tokens between experts' ranks",
    ),
    KernelRule(
        "pplx",
        r"pplx::|a2a_(dispatch|combine)_kernel",
        "pplx-kernels (expert parallel)",
        "ALL_TO_ALL",
        example="pplx::a2a_dispatch_kernel<...>",
    ),
    KernelRule(
        "nvshmem",
        r"nvshmem",
        "NVSHMEM",
        "host",
        example="nvshmemi_transfer_rma_nbi<...>",
        note="one-sided puts and barriers; the launching op, if any, names the collective",
    ),
    KernelRule(
        "symm-all-reduce",
        r"(one|two)_shot_all_reduce|multimem_(one_shot_)?all_reduce|multimem_reduce_scatter",
        "PyTorch symmetric memory",
        "ALL_REDUCE",
        example="two_shot_all_reduce_kernel_inplace<c10::BFloat16, 16, 2>; multimem_all_reduce_kernel",
    ),
    KernelRule(
        "symm-all-gather",
        r"multimem_all_gather|one_shot_all_gather",
        "PyTorch symmetric memory",
        "ALL_GATHER",
        example="multimem_all_gather_kernel<...>",
    ),
    KernelRule(
        "custom-all-reduce",
        r"cross_device_reduce_[12]stage|custom_?all_?reduce|quickreduce::|quick_?all_?reduce",
        "vLLM / SGLang custom all-reduce",
        "ALL_REDUCE",
        example="vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>; sglang::cross_device_reduce_2stage<...>",
    ),
    KernelRule(
        "trtllm-all-reduce",
        r"tensorrt_llm.*all_?reduce|trtllm_?all_?reduce|allreduce_fusion|(one|two)ShotAllReduce|lamport.*all_?reduce",
        "TensorRT-LLM / FlashInfer all-reduce",
        "ALL_REDUCE",
        example="flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<...>",
        note="fused all-reduce (+ residual add, RMSNorm): counted as communication",
    ),
    KernelRule(
        "nccl-other",
        r"nccl|rccl",
        "NCCL / RCCL",
        "host",
        example="ncclKernel_... of a kind not named above",
        note="HTA's rule: any kernel whose name holds nccl or rccl is communication",
    ),
    KernelRule(
        "gloo",
        r"^gloo:",
        "gloo (CPU)",
        "name",
        side="host",
        example="gloo:all_reduce",
        note="gloo runs collectives on its worker threads: the backend op is the collective, its time the transfer",
    ),
)

_COMPILED = tuple((r, re.compile(r.pattern, re.IGNORECASE)) for r in RULES if r.side == "gpu")
_COLL = {c.name: int(c) for c in CollectiveType}
# NCCL's kernel names (both spellings) -> collective_names keys
_NCCL_NAMED = re.compile(
    r"^nccl(?:Dev)?(?:Kernel_)?(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|AllToAll|SendRecv)", re.IGNORECASE
)


@dataclass(frozen=True)
class KernelMatch:
    """What a communication kernel's name tells: its rule, library, and the collective (None:
    the launching op must say) or point-to-point kind ("sendrecv")."""

    rule: str
    library: str
    derive: str
    collective: int | None = None
    p2p: str | None = None


@lru_cache(maxsize=65536)
def match_kernel(name: str) -> KernelMatch | None:
    """The rule a device kernel's name matches, None when it is computation (or memory)."""
    for rule, rx in _COMPILED:
        if rx.search(name):
            if not rule.comm:
                return None
            collective, p2p = None, None
            if rule.derive == "name":
                m = _NCCL_NAMED.match(name)
                kind = classify(m.group(1)) if m else None
                if kind is not None:
                    collective, p2p = kind.collective, kind.p2p
            elif rule.derive in _COLL:
                collective = _COLL[rule.derive]
            if rule.id == "nccl-sendrecv":
                p2p = "sendrecv"
            return KernelMatch(rule.id, rule.library, rule.derive, collective, p2p)
    return None


def is_comm_kernel(name: str) -> bool:
    """Whether a device kernel is communication (by `RULES`)."""
    return match_kernel(name) is not None


def rule_table() -> list[dict[str, str]]:
    """The rules as rows (what docs/communication-kernels.md shows)."""
    derive = {
        "name": "from the kernel name (the launching op's, where it names one)",
        "host": "from the launching op (record_param_comms, c10d::, nccl:), else unknown",
        "computation": "not communication",
    }
    return [
        {
            "rule": r.id,
            "pattern": r.pattern,
            "side": r.side,
            "library": r.library,
            "collective type": "from the op name"
            if r.side == "host"
            else derive.get(r.derive, f"{r.derive} (unless the launching op names another)"),
            "example": r.example,
            "note": r.note,
        }
        for r in RULES
    ]
