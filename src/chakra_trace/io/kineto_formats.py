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
- Meta's MTIA writes all its device activity under one category, ``mtia_ccp_events``, and its
  runtime calls under ``mtia_runtime``. `DEVICE_RULES` says, by name, which of those events are
  work (kernels such as ``fc-dtype_Float``, ``pe_exe``, ``remote``; ``dma_request`` copies) and
  which only mark a synchronization (``event_record``, ``event_wait``: a stream waiting is not
  work). `device_cats` files each under the GPU category of its kind when the trace is read, so
  every reader converts, links and analyzes it as GPU work (HTA reads ``mtia_ccp_events`` as
  GPU kernels too). Its events name their stream in ``args.stream`` (else their track is the
  stream) and their device by their ``pid``; launches carry ``correlation`` and an ``ac2g``
  flow, and `link_by_flows` lets a flow alone link one.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = [
    "DEVICE_RULES",
    "GPU_STEP_CATS",
    "LEGACY_CATS",
    "MEMORY_NAME",
    "SYNC_CATS",
    "canonical_cats",
    "describe_contents",
    "device_cats",
    "device_kind",
    "gpu_only_note",
    "is_blocking_call",
    "json_kind",
    "link_by_flows",
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


#: Device activity of accelerators that write it under one category: (category, name pattern
#: (`re.match`), the category it is read as), the first rule that matches wins. Work becomes
#: ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` (a GPU activity in every reader: converted,
#: kept or listed, analyzed); a synchronization marker becomes ``mtia_sync`` (`SYNC_CATS`: not
#: work, counted apart). MTIA (HTA's reading: a ``dma*`` event is memory; ``event_record``
#: marks a point on a stream, ``event_wait`` is a stream waiting for another, its
#: ``wait_on_stream``): every other event is a kernel, ``pe_exe`` included (it runs the jobs
#: that ``remote`` / ``merge`` run, where their launch was not recorded).
DEVICE_RULES: tuple[tuple[str, str, str], ...] = (
    ("mtia_ccp_events", r"event_", "mtia_sync"),
    ("mtia_ccp_events", r"dma", "gpu_memcpy"),
    ("mtia_ccp_events", r"memset", "gpu_memset"),
    ("mtia_ccp_events", r"", "kernel"),
)
_RULES = [(c, re.compile(p), t) for c, p, t in DEVICE_RULES]

#: Device-side synchronization markers (not work): CUDA's ``cuda_sync`` (Stream Wait Event, ...)
#: and MTIA's markers (`DEVICE_RULES`).
SYNC_CATS = ("cuda_sync", "mtia_sync")

#: Names of device activity that moves memory whatever its category: CUDA's and HIP's copies and
#: sets (``Memcpy DtoD ...``, ``Memset ...``) and MTIA's ``dma_request`` (HTA's memory pattern).
MEMORY_NAME = re.compile(r"^(memcpy|memset|dma)", re.IGNORECASE)


def device_kind(cat: str, name: str) -> str:
    """The category an event of `cat` named `name` is read as (`DEVICE_RULES`; `cat` itself
    where no rule is about it)."""
    for c, pat, target in _RULES:
        if c == cat and pat.match(name):
            return target
    return cat


def device_cats(
    cats: list[str], codes: np.ndarray, names: list[str], name_codes: np.ndarray
) -> tuple[list[str], np.ndarray, dict[str, str], np.ndarray]:
    """(categories, codes, {category: what it was read as}, rows moved) with the events of the
    categories of `DEVICE_RULES` filed by name, once per distinct name."""
    moved = np.zeros(codes.size, bool)
    src = {c for c, _, _ in DEVICE_RULES}
    present = [i for i, c in enumerate(cats) if c in src]
    if not present or not codes.size:
        return cats, codes, {}, moved
    cats, codes = list(cats), codes.copy()
    idx = {c: i for i, c in enumerate(cats)}
    renamed: dict[str, str] = {}
    for ci in present:
        rows = np.flatnonzero(codes == ci)
        if not rows.size:
            continue
        u, inv = np.unique(name_codes[rows], return_inverse=True)
        targets = [device_kind(cats[ci], names[n]) for n in u.tolist()]
        for t in targets:
            if t not in idx:
                idx[t] = len(cats)
                cats.append(t)
        codes[rows] = np.array([idx[t] for t in targets], codes.dtype)[inv.reshape(-1)]
        moved[rows] = True
        renamed[cats[ci]] = " / ".join(sorted(set(targets))) + " by name (kineto_formats.DEVICE_RULES)"
    return cats, codes, renamed, moved


def _at(keys: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For each query key, the row of `rows` with the same key (-1: none; the first if several)."""
    if not rows.size or not query.size:
        return np.full(query.size, -1, np.int64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    pos = np.clip(np.searchsorted(sk, query), 0, sk.size - 1)
    return np.where(sk[pos] == query, rows[order][pos], -1)


def link_by_flows(k, gpu_cats: tuple[str, ...], runtime_cats: tuple[str, ...]) -> int:
    """Give device work that has no ``correlation`` the one of the runtime call its ``ac2g`` flow
    starts at (flow ``s`` on the call, ``f`` on the work: same pid, tid and ts), in place on the
    `KinetoTrace` `k`; a call without one takes the flow's id. Returns how many were linked."""
    is_x = k.ph == ord("X")
    work = np.flatnonzero(k.mask(gpu_cats) & is_x & (k.correlation < 0))
    ac2g = k.mask("ac2g")
    f_rows = np.flatnonzero(ac2g & (k.ph == ord("f")))
    if not work.size or not f_rows.size:
        return 0
    s_rows = np.flatnonzero(ac2g & (k.ph == ord("s")))
    calls = np.flatnonzero(k.mask(runtime_cats) & is_x)
    pt = np.stack([k.pid, k.tid, k.ts], axis=1).astype(np.int64)
    key = np.ascontiguousarray(pt).view(np.dtype((np.void, 24))).reshape(-1)
    dev = _at(key[work], work, key[f_rows])  # the work each f lands on
    s_of = _at(k.flow_id[s_rows], s_rows, k.flow_id[f_rows])
    ok = (dev >= 0) & (s_of >= 0)
    call = np.full(f_rows.size, -1, np.int64)
    call[ok] = _at(key[calls], calls, key[s_of[ok]])
    ok &= call >= 0
    dev, call, fid = dev[ok], call[ok], k.flow_id[f_rows[ok]]
    k.correlation[call] = np.where(k.correlation[call] >= 0, k.correlation[call], fid)
    k.correlation[dev] = k.correlation[call]
    return int(np.unique(dev).size)


# The calls of the runtime (cuda*/hip*) and driver (cu*) APIs that return only once the device has
# done what they ask or all it had been given: synchronizations and the copies and sets that are
# not *Async (hipMemcpyWithStream is PyTorch's blocking device-to-host copy on ROCm).
_BLOCKING_RUNTIME = frozenset(
    {"Memcpy", "Memcpy2D", "Memcpy3D", "MemcpyPeer", "MemcpyToSymbol", "MemcpyFromSymbol", "MemcpyWithStream"}
    | {"Memset", "Memset2D", "Memset3D", "MemsetD8", "MemsetD16", "MemsetD32"}
)


def is_blocking_call(name: str) -> bool:
    """Whether a runtime or driver call (CUDA, HIP, CUDA driver or MTIA spelling) waits for the device."""
    if "Synchronize" in name:  # cuda/hip Device/Stream/Event Synchronize, cuCtx/cuStream/cuEventSynchronize
        return True
    if name.startswith("synchronize"):  # MTIA: synchronize, synchronizeStream, synchronizeDevice
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
