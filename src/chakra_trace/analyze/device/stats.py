"""Grouped statistics and row building, shared by the device analyses: one sort for all groups,
pandas' ``describe`` semantics (sample std, linear quantiles), NaN (None in rows) where a group
is empty or a statistic undefined."""

from __future__ import annotations

from typing import Any, cast

import numpy as np


def group_stats(values: np.ndarray, groups: np.ndarray, n: int, qs=(0.25, 0.5, 0.75, 0.95)) -> dict[str, np.ndarray]:
    """Per group (codes 0..n-1): count, sum, mean, std (sample, as pandas' ``describe``), min,
    max and the quantiles `qs` (linear interpolation, as numpy's and pandas' default); NaN where
    a group is empty. Sorted once for all groups (by value, then stably by group)."""
    v = np.asarray(values, np.float64)
    g = np.asarray(groups, np.int64)
    sv = np.sort(v)
    if n > 1:
        by_value = np.argsort(v, kind="stable")
        small = g.astype(np.int16) if n < 2**15 else g  # radix sort for small codes
        sv = v[by_value[np.argsort(small[by_value], kind="stable")]]
    count = np.bincount(g, minlength=n)
    has = count > 0
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    total = np.bincount(g, weights=v, minlength=n)
    mean = np.where(has, total / np.maximum(count, 1), np.nan)
    sq = np.bincount(g, weights=(v - mean[g]) ** 2, minlength=n)
    std = np.where(count > 1, np.sqrt(sq / np.maximum(count - 1, 1)), np.nan)

    def at(i):
        return np.where(has, sv[np.clip(i, 0, max(sv.size - 1, 0))] if sv.size else np.nan, np.nan)

    out = {"count": count, "sum": total, "mean": mean, "std": std, "min": at(first), "max": at(first + count - 1)}
    for q in qs:
        pos = np.maximum(count - 1, 0) * q
        lo = np.floor(pos).astype(np.int64)
        a, b, w = at(first + lo), at(first + np.ceil(pos).astype(np.int64)), pos - lo
        out[f"p{round(q * 100)}"] = np.where(w >= 0.5, b - (b - a) * (1 - w), a + (b - a) * w)  # numpy's lerp
    return out


def rows(cols: dict[str, Any]) -> list[dict]:
    """Row dicts from equal-length columns (numpy arrays become Python scalars, NaN None)."""
    lists = []
    for c in cols.values():
        if isinstance(c, np.ndarray):
            if c.dtype.kind == "f" and np.isnan(c).any():
                # numpy's stubs reject a None operand to np.where; at run time it makes an object array
                c = np.where(np.isnan(c), cast(Any, None), c.astype(object))
            c = c.tolist()
        lists.append(list(c))
    keys = list(cols)
    return [dict(zip(keys, r)) for r in zip(*lists)]


def by_key(keys: np.ndarray, values: np.ndarray, qs=(0.5,)) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """`group_stats` over the distinct `keys` present: (the keys ascending, their statistics)."""
    uniq, inv = np.unique(np.asarray(keys), return_inverse=True)
    return uniq, group_stats(values, inv.reshape(-1), uniq.size, qs)
