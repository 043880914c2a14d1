"""The dialects of Kineto traces, read as one.

Kineto's output changed over the years, and vendors' builds spell their runtime differently:

- PyTorch 1.8/1.9 (2021) wrote the categories ``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``,
  ``Memset`` (and ``Python``) where later versions write ``cpu_op``, ``cuda_runtime``, ``kernel``,
  ``gpu_memcpy``, ``gpu_memset`` (``python_function``); some versions spelled the GPU-side
  annotations ``gpu_user_Annotation``. `canonical_cats` renames them once, when a trace is read,
  so that every reader of `KinetoTrace` sees one spelling (TensorBoard's profiler plugin reads the
  same names as one kind, too).
- ROCm builds keep the ``cuda_runtime`` category but name the calls ``hip*`` (hipLaunchKernel,
  hipMemcpyWithStream, hipDeviceSynchronize, ...); the driver API (``cuda_driver``) names them
  ``cu*``. Launches are matched by ``correlation`` whatever their name; `is_blocking_call` says
  which calls make the host wait for the device, in any of the three spellings.
- Timestamps are µs in every version: ``displayTimeUnit`` ("ms", "ns") only tells a viewer how
  to show them, and HTA's "nanosecond resolution" traces hold µs with decimals.
- A Kineto trace is an object with a ``traceEvents`` member, which may come after others (trace
  collections write a ``metadata`` object first); a host execution trace has ``schema`` and
  ``nodes``. `json_kind` tells them apart by the top-level keys, wherever they are in the head.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = [
    "LEGACY_CATS",
    "GPU_STEP_CATS",
    "canonical_cats",
    "describe_contents",
    "gpu_only_note",
    "is_blocking_call",
    "json_kind",
    "no_gpu_note",
]

#: Category names of PyTorch 1.8/1.9-era traces (and one misspelling) -> today's names.
LEGACY_CATS = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Python": "python_function",
    "gpu_user_Annotation": "gpu_user_annotation",
}

#: Categories of device-side events that may carry the host's annotations (``ProfilerStep#N``
#: mirrored onto a GPU stream): never a step of their own.
GPU_STEP_CATS = ("gpu_user_annotation", "kernel", "gpu_memcpy", "gpu_memset")


def canonical_cats(cats: list[str], codes: np.ndarray) -> tuple[list[str], np.ndarray, dict[str, str]]:
    """(categories, codes into them, {old name: new name}) with the legacy names of `LEGACY_CATS`
    renamed; two old and new names of one category (a file that has both) become one code."""
    renamed = {c: LEGACY_CATS[c] for c in cats if c in LEGACY_CATS}
    if not renamed:
        return cats, codes, {}
    idx: dict[str, int] = {}
    lut = np.array([idx.setdefault(LEGACY_CATS.get(c, c), len(idx)) for c in cats], np.int16)
    return list(idx), lut[codes] if codes.size else codes, renamed


# The calls of the runtime (cuda*/hip*) and driver (cu*) APIs that return only once the device has
# done what they ask or all it had been given: synchronizations and the copies and sets that are
# not *Async (hipMemcpyWithStream is PyTorch's blocking device-to-host copy on ROCm).
_BLOCKING_RUNTIME = frozenset(
    {"Memcpy", "Memcpy2D", "Memcpy3D", "MemcpyPeer", "MemcpyToSymbol", "MemcpyFromSymbol", "MemcpyWithStream"}
    | {"Memset", "Memset2D", "Memset3D", "MemsetD8", "MemsetD16", "MemsetD32"}
)


def is_blocking_call(name: str) -> bool:
    """Whether a runtime or driver call (CUDA, HIP or CUDA driver spelling) waits for the device."""
    if "Synchronize" in name:  # cuda/hip Device/Stream/Event Synchronize, cuCtx/cuStream/cuEventSynchronize
        return True
    for prefix in ("cuda", "hip"):
        if name.startswith(prefix):
            return name[len(prefix) :] in _BLOCKING_RUNTIME
    if name.startswith(("cuMemcpy", "cuMemset")):  # the driver API: cuMemcpyDtoH_v2, cuMemsetD32_v2, ...
        return "Async" not in name
    return False


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_COLON = re.compile(rb"[ \t\n\r]*:")


def json_kind(head: bytes) -> str | None:
    """ "kineto" or "pytorch-host" from the top-level keys found in `head` (the start of a JSON
    object; nested keys are skipped, however deep), else None: no such key before the head ends."""
    depth = 0
    for m in _TOKEN.finditer(head):
        tok = m.group()
        if tok in (b"{", b"["):
            depth += 1
        elif tok in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                return None
        elif depth == 1 and _COLON.match(head, m.end()):
            if tok in (b'"traceEvents"', b'"schemaVersion"'):
                return "kineto"
            if tok == b'"schema"':
                return "pytorch-host"
    return None


#: Device activity of accelerators other than GPUs, as Kineto writes it (not converted).
OTHER_DEVICE_CATS = {"mtia_ccp_events": "MTIA", "hpu_op": "HPU", "xpu_runtime": "XPU"}


def no_gpu_note(category_counts: dict[str, int]) -> str | None:
    """What a trace without GPU events (kernel, gpu_memcpy, gpu_memset) holds of a device instead,
    for reports: another accelerator's activity, or runtime calls of a GPU whose activity was not
    recorded. None for a CPU-only trace."""
    head = "no GPU activity (no kernel, gpu_memcpy or gpu_memset events): the host side is converted"
    other = [f"{n:,} {c} events ({OTHER_DEVICE_CATS[c]})" for c, n in category_counts.items() if c in OTHER_DEVICE_CATS]
    if other:
        return f"{head}; the device activity of another accelerator is not: {', '.join(other)}"
    calls = sum(n for c, n in category_counts.items() if c in ("cuda_runtime", "cuda_driver"))
    if calls:
        return f"{head}, and its {calls:,} GPU runtime calls launch nothing (the profiler recorded no GPU activity)"
    return None


def describe_contents(category_counts: dict[str, int]) -> str:
    """What a trace holds, by category, most first ("631 cuda_runtime, 56 uncategorized (metadata)
    events"): the reason a file with nothing to convert is refused names it."""
    if not category_counts:
        return "no events"
    items = sorted(category_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n:,} {c or 'uncategorized (metadata)'}" for c, n in items) + " events"


def gpu_only_note(category_counts: dict[str, int]) -> str:
    """The report's line for a trace with GPU activity and no CPU op: what was converted, and how."""
    calls = sum(n for c, n in category_counts.items() if c in ("cuda_runtime", "cuda_driver"))
    launched = f", launched by {calls:,} runtime calls" if calls else ""
    return (
        "the host side was not recorded (no cpu_op / user_annotation events): the job is the GPU "
        f"activities{launched}, one node each on its stream, in stream order; the window is the whole recording"
    )
