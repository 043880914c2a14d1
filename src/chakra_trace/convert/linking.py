"""Link every host op that a Kineto trace can explain, by each method in turn.

`convert.link.link` joins on one id. Real pairs need more: an older Kineto trace has no
"Record function id", its External ids may be the host ids under a constant offset, and a
profiler window may cover another iteration than the host trace, where no id agrees at all.
`link_host` tries, for what is still unlinked on both sides:

1. ``rf_id``: ET ``rf_id`` == Kineto "Record function id" (exact).
2. ``external_id``: Kineto "External id" == the host ``rf_id``, then == the node id, where the
   names agree.
3. ``external_id_offset``: the same under the dominant constant offset d (External id = host
   key + d), found among name-equal pairs (`dominant_offset`); only name-equal pairs link.
4. ``align``: the per-thread op-name sequences aligned in order (`convert.sequences`).

Each method's count and the linked fraction (of the host ops that are not synthetic
process/thread nodes) are in ``Link.counts["methods"]`` / ``["linked_fraction"]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UnrelatedTracesError
from ..io.kineto import CPU_CATS, KinetoTrace
from . import sequences
from .link import (
    METHOD_ALIGN,
    METHOD_EXTERNAL_ID,
    METHOD_EXTERNAL_OFFSET,
    METHOD_NAMES,
    METHOD_NONE,
    METHOD_RF_ID,
    Link,
    _first_lookup,
    _lookup,
    finish_link,
)

__all__ = ["METHODS", "MIN_SIMILARITY", "check_same_job", "dominant_offset", "link_host", "method_label"]

#: Below this share of linked ops (`linking.link_host`'s ``similarity``: the ops linked over
#: the larger side of the iterations compared) a host trace and a Kineto trace are not taken
#: for one job: same-job pairs link 98-100% (rf_id, or the order of another iteration), and
#: a small model's host trace against a larger model's Kineto trace links ~15%.
MIN_SIMILARITY = 0.5
METHODS = ("rf_id", "external_id", "external_id_offset", "align")
#: Names per side (at most) that a name contributes to the offset vote.
_VOTE_PER_NAME = 4


def _join(
    host_key: np.ndarray, kin_key: np.ndarray, host_code: np.ndarray, kin_code: np.ndarray, free_h, free_k
) -> np.ndarray:
    """For each host row: the Kineto position whose key equals its key and whose name code equals
    its name code, among free rows on both sides (-1: none)."""
    out = np.full(host_key.size, -1, np.int64)
    kpos = np.flatnonzero(free_k & (kin_key >= 0))
    hpos = np.flatnonzero(free_h & (host_key >= 0))
    if kpos.size == 0 or hpos.size == 0:
        return out
    u, where, _ = _first_lookup(np.where(free_k, kin_key, -1))
    pos = _lookup(u, where, host_key[hpos])
    ok = pos >= 0
    ok[ok] = kin_code[pos[ok]] == host_code[hpos[ok]]
    out[hpos[ok]] = pos[ok]
    return out


def dominant_offset(
    host_key: np.ndarray, kin_key: np.ndarray, host_code: np.ndarray, kin_code: np.ndarray
) -> tuple[int, int]:
    """The offset d (Kineto key - host key) that most name-equal pairs share, and how many
    votes it got: each name votes with the differences of its first few occurrences on each
    side (by key), so the vote is linear in the ops, not quadratic in a frequent name's count."""
    hv = host_key >= 0
    kv = kin_key >= 0
    if not hv.any() or not kv.any():
        return 0, 0
    diffs = []
    for key, code, valid in ((host_key, host_code, hv), (kin_key, kin_code, kv)):
        pos = np.flatnonzero(valid)
        order = pos[np.lexsort((key[pos], code[pos]))]
        c = code[order]
        first = np.r_[0, np.flatnonzero(c[1:] != c[:-1]) + 1]
        rank = np.arange(order.size) - np.repeat(first, np.diff(np.r_[first, order.size]))
        keep = rank < _VOTE_PER_NAME
        diffs.append((c[keep], key[order][keep]))
    (hc, hk), (kc, kk) = diffs
    common = np.intersect1d(hc, kc)
    if common.size == 0:
        return 0, 0
    hsel = np.isin(hc, common)
    ksel = np.isin(kc, common)
    hc, hk, kc, kk = hc[hsel], hk[hsel], kc[ksel], kk[ksel]
    # all pairs of the (few) kept occurrences of each name
    ho = np.argsort(hc, kind="stable")
    ko = np.argsort(kc, kind="stable")
    hc, hk, kc, kk = hc[ho], hk[ho], kc[ko], kk[ko]
    h_lo = np.searchsorted(hc, common)
    h_hi = np.searchsorted(hc, common, "right")
    k_lo = np.searchsorted(kc, common)
    k_hi = np.searchsorted(kc, common, "right")
    out = []
    for a in range(_VOTE_PER_NAME):
        for b in range(_VOTE_PER_NAME):
            ok = (h_lo + a < h_hi) & (k_lo + b < k_hi)
            out.append(kk[k_lo[ok] + b] - hk[h_lo[ok] + a])
    d = np.concatenate(out)
    d = d[d != 0]
    if d.size == 0:
        return 0, 0
    vals, counts = np.unique(d, return_counts=True)
    best = int(np.argmax(counts))
    return int(vals[best]), int(counts[best])


def link_host(host, kineto: KinetoTrace, *, methods: tuple[str, ...] = METHODS, align_max_d: int | None = None) -> Link:
    """Link the ops of a `HostTrace` to ``kineto``'s CPU events by each of ``methods`` in turn
    (see the module docstring), then attach the GPU work. ``counts["methods"]`` has the host ops
    each method linked, ``counts["linked_fraction"]`` the share of the real (not synthetic) host
    ops linked, ``counts["offset"]`` the External id offset used (0: none)."""
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"unknown link method(s) {bad}; methods: {', '.join(METHODS)}")
    k = kineto
    n = len(host)
    cpu_rows = np.flatnonzero(k.mask(CPU_CATS) & (k.ph == ord("X")))
    names = host.name_array
    # one code per name across both traces
    table: dict[str, int] = {}
    h_lut = np.array([table.setdefault(s, len(table)) for s in host.names], np.int64)
    k_lut = np.array([table.setdefault(s, len(table)) for s in k.names], np.int64)
    host_code = h_lut[host.name] if n else np.zeros(0, np.int64)
    kin_code = k_lut[k.name[cpu_rows]] if cpu_rows.size else np.zeros(0, np.int64)
    real = ~host.synthetic
    rf = np.where(host.has("rf_id"), host.rf_id, -1).astype(np.int64)
    ids = np.asarray(host.ids, np.int64)
    seqs: list = []

    def sequence():
        if not seqs:
            seqs.append(sequences.build(host, k, cpu_rows))
        return seqs[0]

    def run(methods: tuple[str, ...]):
        pos = np.full(n, -1, np.int64)  # position in cpu_rows
        meth = np.zeros(n, np.int8)
        free_k = np.ones(cpu_rows.size, bool)
        by: dict[str, int] = {}
        offset = 0

        def take(found: np.ndarray, code: int) -> int:
            ok = (found >= 0) & (pos < 0) & real
            # a Kineto event links once: the first host row that names it
            f = found[ok]
            rows = np.flatnonzero(ok)
            _, first = np.unique(f, return_index=True)
            rows, f = rows[first], f[first]
            f_ok = free_k[f]
            rows, f = rows[f_ok], f[f_ok]
            pos[rows] = f
            meth[rows] = code
            free_k[f] = False
            return int(rows.size)

        if "rf_id" in methods:
            found = _join(rf, k.rf_id[cpu_rows], host_code, kin_code, real, free_k)
            by["rf_id"] = take(found, METHOD_RF_ID)
        ext = k.external_id[cpu_rows]
        # External id candidates: each host key as is, and under its dominant offset; the one
        # that names the most ops goes first (so chance hits of one do not take the other's events)
        cands: list[tuple[int, np.ndarray, int, int]] = []  # (ops named, key, offset, method)
        free_h = real & (pos < 0)
        for key in (rf, ids):
            if "external_id" in methods:
                hits = _join(key, ext, host_code, kin_code, free_h, free_k)
                cands.append((int(np.count_nonzero(hits >= 0)), key, 0, METHOD_EXTERNAL_ID))
            if "external_id_offset" in methods:
                fk = free_h & (key >= 0)
                d, _ = dominant_offset(np.where(fk, key, -1), np.where(free_k, ext, -1), host_code, kin_code)
                if d:
                    hits = _join(np.where(key >= 0, key + d, -1), ext, host_code, kin_code, free_h, free_k)
                    cands.append((int(np.count_nonzero(hits >= 0)), key, d, METHOD_EXTERNAL_OFFSET))
        for m in ("external_id", "external_id_offset"):
            if m in methods:
                by[m] = 0
        for _, key, d, code in sorted(cands, key=lambda c: -c[0]):
            shifted = np.where(key >= 0, key + d, -1) if d else key
            got = take(_join(shifted, ext, host_code, kin_code, real & (pos < 0), free_k), code)
            by[METHOD_NAMES[code]] += got
            if d and got and not offset:
                offset = d
        need_align = "align" in methods and bool((real & (pos < 0)).any()) and bool(free_k.any())
        seq = sequence() if need_align or (meth > METHOD_RF_ID).any() else None
        # links by ids that cross the order of the others are coincidences: drop them
        by_id = np.flatnonzero((pos >= 0) & (meth != METHOD_RF_ID))
        if by_id.size and seq is not None:
            bad = by_id[~sequences.consistent(seq, by_id, pos[by_id])]
            for c in (METHOD_EXTERNAL_ID, METHOD_EXTERNAL_OFFSET):
                by[METHOD_NAMES[c]] = by.get(METHOD_NAMES[c], 0) - int(np.count_nonzero(meth[bad] == c))
            free_k[pos[bad]] = True
            pos[bad] = -1
            meth[bad] = METHOD_NONE
            dropped = int(bad.size)
        else:
            dropped = 0
        align_info: dict[str, Any] = {}
        if "align" in methods:
            by["align"] = 0
            if seq is not None and (real & (pos < 0)).any() and free_k.any():
                kw = {} if align_max_d is None else {"max_d": align_max_d}
                hrow, kpos, align_info = sequences.align_traces(seq, pos, free_k, real, **kw)
                found = np.full(n, -1, np.int64)
                found[hrow] = kpos
                by["align"] = take(found, METHOD_ALIGN)
                # aligned links that cross the links by ids (each consistent on its own) go too
                inexact = np.flatnonzero((pos >= 0) & (meth != METHOD_RF_ID))
                bad = inexact[~sequences.consistent(seq, inexact, pos[inexact])]
                for c in (METHOD_EXTERNAL_ID, METHOD_EXTERNAL_OFFSET, METHOD_ALIGN):
                    by[METHOD_NAMES[c]] = by.get(METHOD_NAMES[c], 0) - int(np.count_nonzero(meth[bad] == c))
                free_k[pos[bad]] = True
                pos[bad] = -1
                meth[bad] = METHOD_NONE
                dropped += int(bad.size)
        return pos, meth, by, offset, dropped, align_info

    pos, meth, by, offset, dropped, align_info = run(tuple(methods))
    ext_methods = ("external_id", "external_id_offset")
    if "align" in methods and any(by.get(m) for m in ext_methods):
        # ids that coincide can anchor the alignment in the wrong iteration: keep whichever links more
        alt = run(tuple(m for m in methods if m not in ext_methods))
        if np.count_nonzero(alt[0] >= 0) > np.count_nonzero(pos >= 0):
            pos, meth, by, offset, dropped, align_info = alt
            by.update({m: 0 for m in ext_methods})
    event = np.where(pos >= 0, cpu_rows[np.maximum(pos, 0)] if cpu_rows.size else -1, -1).astype(np.int64)
    n_real = int(real.sum())
    linked = int(np.count_nonzero(pos >= 0))
    counts: dict[str, Any] = {
        "key": "+".join(m for m in methods if by.get(m)) or "none",
        "methods": by,
        "offset": offset,
        "host_ops": n_real,
        "linked_fraction": linked / n_real if n_real else 1.0,
        "matched_rf_id": by.get("rf_id", 0),
        "matched_external_id": by.get("external_id", 0),
        "unmatched_no_key": int(np.count_nonzero(real & (pos < 0) & (rf < 0))),
        "dropped_out_of_order": dropped,
        "similarity": _similarity(linked, n_real, align_info),
    }
    if align_info:
        counts["align"] = align_info
    lk = finish_link(k, ids, names, counts["key"], event, meth, counts)
    lk.counts["unmatched_real"] = n_real - linked
    return lk


def check_same_job(counts: dict, et_path, kineto_path, min_similarity: float | None = MIN_SIMILARITY) -> None:
    """Raise `UnrelatedTracesError` when the link counts say the two files are not of one job."""
    sim = float(counts.get("similarity", 1.0))
    if min_similarity is None or sim >= min_similarity or not counts.get("host_ops"):
        return
    raise UnrelatedTracesError(
        f"{et_path} and {kineto_path} are not of the same job: only {sim:.0%} of the ops of the iterations compared "
        f"correspond (need {min_similarity:.0%}; host ops linked: {method_label(counts)}); convert the host trace alone: "
        f"chakra convert pytorch {et_path} -o OUT"
    )


def _similarity(linked: int, n_real: int, align_info: dict) -> float:
    """How surely the two files are of one job: the linked ops over the larger side. Where the
    order was aligned, only the iterations paired count on each side (a host trace of one step
    against a window of three is still one job), and the Kineto side counts too: a small model's
    ops are a subsequence of a large one's, so the host side alone would link them."""
    if not n_real:
        return 1.0
    if not align_info:
        return linked / n_real
    big = max(align_info["host_ops_in_iterations"], align_info["kineto_ops_in_iterations"], 1)
    return min(1.0, linked / big)


def method_label(counts: dict) -> str:
    """'rf_id 99.5%' style summary of the methods that linked something."""
    n = max(int(counts.get("host_ops", 0)), 1)
    parts = [f"{m} {c / n:.1%}" for m, c in counts.get("methods", {}).items() if c]
    return ", ".join(parts) or "none"
