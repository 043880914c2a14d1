"""Order-preserving alignment of two op-name sequences (Myers' O(ND) diff, linear space).

Why: when a Kineto trace's ids do not name the host ops (an older trace without
"Record function id", a profiler window from another iteration), the two traces still run
the same code, so each thread's ops come in the same order. The longest common subsequence
of the two name sequences pairs them without trusting any id, and never crosses two pairs.

`align` takes integer codes (one per op name) and returns the matched index pairs. It is
Myers' greedy diff with the linear-space middle-snake bisection (as in diff-match-patch):
common prefix and suffix are cut off with numpy, the rest is split at a middle snake and
solved piece by piece on an explicit stack, so memory is O(N + D) and time O((N + M) D),
where D is the number of ops that differ. Sequences that differ in more than ``max_d`` ops
per piece are left unmatched there (the traces are then not of the same job, or not of the
same iteration: the caller segments by iteration first).
"""

from __future__ import annotations

import numpy as np

__all__ = ["align", "MAX_D"]

#: Default bound on the edit distance searched per piece (keeps a mismatched pair to ~1 s).
MAX_D = 1500


def _prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two int arrays."""
    n = min(a.size, b.size)
    if n == 0:
        return 0
    ne = np.flatnonzero(a[:n] != b[:n])
    return int(ne[0]) if ne.size else n


def _suffix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    if n == 0:
        return 0
    ne = np.flatnonzero(a[a.size - n :][::-1] != b[b.size - n :][::-1])
    return int(ne[0]) if ne.size else n


def _bisect(a: list, b: list, max_d: int) -> tuple[int, int] | None:
    """The split point (x, y) of a middle snake of a and b (Myers 1986, section 4b), or None
    when the edit distance exceeds 2 * max_d (or there is nothing in common)."""
    n, m = len(a), len(b)
    dmax = min((n + m + 1) // 2, max_d)
    off = dmax + 1
    size = 2 * off + 2
    v1 = [-1] * size
    v2 = [-1] * size
    v1[off + 1] = 0
    v2[off + 1] = 0
    delta = n - m
    front = delta % 2 != 0
    k1s = k1e = k2s = k2e = 0
    for d in range(dmax + 1):
        for k1 in range(-d + k1s, d + 1 - k1e, 2):
            i = off + k1
            if k1 == -d or (k1 != d and v1[i - 1] < v1[i + 1]):
                x1 = v1[i + 1]
            else:
                x1 = v1[i - 1] + 1
            y1 = x1 - k1
            while x1 < n and y1 < m and a[x1] == b[y1]:
                x1 += 1
                y1 += 1
            v1[i] = x1
            if x1 > n:
                k1e += 2
            elif y1 > m:
                k1s += 2
            elif front:
                j = off + delta - k1
                if 0 <= j < size and v2[j] != -1 and x1 >= n - v2[j]:
                    return x1, y1
        for k2 in range(-d + k2s, d + 1 - k2e, 2):
            i = off + k2
            if k2 == -d or (k2 != d and v2[i - 1] < v2[i + 1]):
                x2 = v2[i + 1]
            else:
                x2 = v2[i - 1] + 1
            y2 = x2 - k2
            while x2 < n and y2 < m and a[n - x2 - 1] == b[m - y2 - 1]:
                x2 += 1
                y2 += 1
            v2[i] = x2
            if x2 > n:
                k2e += 2
            elif y2 > m:
                k2s += 2
            elif not front:
                j = off + delta - k2
                if 0 <= j < size and v1[j] != -1:
                    x1 = v1[j]
                    y1 = x1 - (delta - k2)
                    if x1 >= n - x2:
                        return x1, y1
    return None


def _chunked(a: np.ndarray, b: np.ndarray, max_d: int) -> tuple[np.ndarray, np.ndarray]:
    """Greedy order-preserving alignment of long sequences with many differences spread over
    them (no single edit script within ``max_d``): consecutive chunks of a, each aligned
    exactly against the stretch of b it should correspond to (same length scaled by
    len(b)/len(a), plus a margin); the next chunk starts after the last pair found. Not an
    LCS, but linear in the length for differences spread evenly."""
    n, m = a.size, b.size
    size = max(2 * max_d, 256)
    margin = max(16, size // 16)
    ratio = m / n if n else 1.0
    out_a: list[np.ndarray] = []
    out_b: list[np.ndarray] = []
    i = j = 0
    poor = 0  # chunks in a row that hardly match: the sequences are not alike, stop
    while i < n and j < m and poor < 3:
        ac = a[i : i + size]
        bc = b[j : j + int(ac.size * ratio) + margin]
        ia, ib, _ = align(ac, bc, max(max_d // 4, 16), chunked=False)
        poor = poor + 1 if ia.size < ac.size // 4 else 0
        if ia.size == 0:
            i += ac.size
            j += int(ac.size * ratio)
            continue
        out_a.append(ia + i)
        out_b.append(ib + j)
        if i + ac.size >= n:
            break
        keep = max(1, ia.size - ia.size // 8)  # the tail of a chunk is retried with the next
        i += int(ia[keep - 1]) + 1
        j += int(ib[keep - 1]) + 1
        out_a[-1], out_b[-1] = out_a[-1][:keep], out_b[-1][:keep]
    if not out_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out_a), np.concatenate(out_b)


def align(a, b, max_d: int = MAX_D, *, chunked: bool = True) -> tuple[np.ndarray, np.ndarray, bool]:
    """Matched positions (ia, ib) of an LCS-style alignment of int sequences a and b
    (a[ia] == b[ib], both increasing), and whether every piece was solved exactly (False:
    some piece differed in more than ``max_d`` ops; a long one is then aligned chunk by
    chunk (`_chunked`), a short one left unmatched)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    out_a: list[np.ndarray] = []
    out_b: list[np.ndarray] = []
    complete = True
    stack = [(0, a.size, 0, b.size)]
    while stack:
        a0, a1, b0, b1 = stack.pop()
        p = _prefix(a[a0:a1], b[b0:b1])
        if p:
            out_a.append(np.arange(a0, a0 + p))
            out_b.append(np.arange(b0, b0 + p))
            a0 += p
            b0 += p
        s = _suffix(a[a0:a1], b[b0:b1])
        if s:
            out_a.append(np.arange(a1 - s, a1))
            out_b.append(np.arange(b1 - s, b1))
            a1 -= s
            b1 -= s
        if a0 == a1 or b0 == b1:
            continue
        if not np.isin(a[a0:a1], b[b0:b1]).any():
            continue  # nothing in common: all of it differs
        sa, sb = a[a0:a1].tolist(), b[b0:b1].tolist()
        split = _bisect(sa, sb, max_d)
        if split is None or split in ((0, 0), (len(sa), len(sb))):
            complete = False
            if chunked and (a1 - a0) + (b1 - b0) > 4 * max_d:
                ca, cb = _chunked(a[a0:a1], b[b0:b1], max_d)
                out_a.append(ca + a0)
                out_b.append(cb + b0)
            continue
        x, y = split
        stack.append((a0 + x, a1, b0 + y, b1))
        stack.append((a0, a0 + x, b0, b0 + y))
    if not out_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), complete
    ia = np.concatenate(out_a)
    ib = np.concatenate(out_b)
    order = np.argsort(ia, kind="stable")
    return ia[order], ib[order], complete
