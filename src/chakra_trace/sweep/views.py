"""Views over a sweep's rows: the Pareto front of step time against cost (or energy), which axis
moves the step time, and how the step scales with the NPU count.

Both compare like with like: points are grouped by ``by`` (default the workload), since one
job's step time says nothing about another's. The Pareto front is found within each group.
Sensitivity works on each point's metric relative to its group's mean (1.0 = the workload's
average point), so a 10% change counts the same for a short job and a long one; each axis's
main effect is then its share of that relative metric's variance: the variance of the axis's
level means (weighted by how many points each level has) over the total. On a full factorial the
shares of all axes plus their interactions sum to 1; a ``where`` filter makes the design
unbalanced and the shares approximate (still a fair ranking of the axes).

Rows may come from someone else's results folder: a column a view needs must exist and hold
numbers (text there is an error naming the folder and column); NaN and infinite values count as
missing, so those rows are left out.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ChakraError
from ..io.documents import short
from .results import load_results, read_meta


def _frame(results):
    """Rows of a results folder or a DataFrame, the successful points only."""
    df = load_results(results) if isinstance(results, (str, os.PathLike)) else results
    return df[df["status"] == "ok"] if "status" in df.columns else df


def _numbers(df, cols: list[str], results):
    """``df`` (a copy) with ``cols`` as floats, non-finite values as NaN; a column that is
    missing or holds anything but numbers is a ChakraError naming ``results``."""
    import pandas as pd

    where = str(results) if isinstance(results, (str, os.PathLike)) else "rows"
    df = df.copy()
    for c in dict.fromkeys(cols):
        if c not in df.columns:
            names = ", ".join(map(str, list(df.columns)[:30]))
            raise ChakraError(f"{where}: no column {short(c)} (the rows have {names})")
        v = pd.to_numeric(df[c], errors="coerce")
        if int(v.isna().sum()) > int(df[c].isna().sum()):
            raise ChakraError(f"{where}: column {short(c)} holds values that are not numbers")
        v = v.astype(float)
        df[c] = v.where(np.isfinite(v))
    return df


def _groups(df, by) -> list[str]:
    """The grouping columns that exist and take more than one value."""
    cols = [by] if isinstance(by, str) else list(by or ())
    return [c for c in cols if c in df.columns and df[c].astype(str).nunique() > 1]


def _front(df, x: str, y: str) -> list:
    keep, best = [], float("inf")
    for i, v in zip(df.index, df[y].to_numpy()):
        if v < best:
            keep.append(i)
            best = v
    return keep


def pareto(results, x: str = "step_s", y: str = "cost", by: str | list[str] | None = "workload"):
    """The points no other point of their group (``by``, default the workload) beats on both
    ``x`` and ``y`` (lower is better), by group then ``x``: a DataFrame with every column of
    those rows."""
    df = _numbers(_frame(results), [x, y], results).dropna(subset=[x, y]).sort_values([x, y], kind="stable")
    groups = _groups(df, by)
    if not groups:
        keep = _front(df, x, y)
    else:
        keys = df[groups].astype(str).agg("\x1f".join, axis=1)
        keep = [i for _, part in df.groupby(keys, sort=True) for i in _front(part, x, y)]
    return df.loc[keep].reset_index(drop=True)


def sensitivity(
    results, metric: str = "step_s", axes: list[str] | None = None, by: str | list[str] | None = "workload"
):
    """Per axis (default: the sweep's axes, from its ``sweep.json``, that take more than one
    value, less the ``by`` columns): its levels, the main-effect share of the variance of
    ``metric`` relative to its group's mean, the best level, and the relative metric's mean at
    its best and worst level (``best_rel``, ``worst_rel``: 0.8 = 20% under the group's mean).
    Sorted by share, largest first."""
    import pandas as pd

    df = _numbers(_frame(results), [metric], results).dropna(subset=[metric])
    if axes is None:
        meta = read_meta(results) if isinstance(results, (str, os.PathLike)) else {}
        axes = [a for a in meta.get("axes", []) if a in df.columns]
    groups = _groups(df, by)
    axes = [a for a in axes if a not in groups]
    y = df[metric].astype(float)
    if groups:
        y = y / y.groupby([df[g].astype(str) for g in groups]).transform("mean")
    else:
        y = y / y.mean()
    finite = np.isfinite(y.to_numpy())  # (a group whose mean is 0 has no relative metric)
    df, y = df[finite], y[finite]
    total = float(((y - y.mean()) ** 2).sum())
    rows = []
    for a in axes:
        col = df[a].astype(str)  # levels as labels (lists are JSON text already)
        if col.nunique() < 2:
            continue
        g = y.groupby(col)
        means, counts = g.mean(), g.size()
        between = float((counts * (means - y.mean()) ** 2).sum())
        rows.append(
            {
                "axis": a,
                "levels": int(col.nunique()),
                "share": between / total if total > 0 else 0.0,
                "best_level": str(means.idxmin()),
                "best_rel": float(means.min()),
                "worst_rel": float(means.max()),
            }
        )
    out = pd.DataFrame(rows, columns=["axis", "levels", "share", "best_level", "best_rel", "worst_rel"])
    return out.sort_values("share", ascending=False, kind="stable").reset_index(drop=True)


#: Axes that set the NPU count: what a scaling view varies rather than groups by.
NPU_AXES = ("npus", "dims")


def scaling(
    results,
    weak: bool = False,
    by: str | list[str] | None = "workload",
    within: list[str] | None = None,
    npus: str = "sim_npus",
    metric: str = "step_s",
):
    """Strong or weak scaling of ``metric`` against the NPU count, per group: ``by`` (default the
    workload) and ``within`` (default: the sweep's other axes that take more than one value, the
    NPU-count axes `NPU_AXES` aside). Within a group the base is its smallest NPU count N0, time T0.

    Strong scaling (fixed total work): speedup S(N) = T0 / T(N), efficiency S / (N / N0).
    Weak scaling (work grows with N, as a job scaled out data-parallel): efficiency T0 / T(N),
    speedup (scaled) efficiency x N / N0. With energy columns, ``energy_rel``: energy per unit of
    work relative to the base (strong: E / E0; weak: (E / (N / N0)) / E0).
    A DataFrame, one row per group and NPU count (points sharing both: their mean)."""
    import pandas as pd

    df = _frame(results)
    df = _numbers(df, [npus, metric] + (["energy_j"] if "energy_j" in df.columns else []), results)
    df = df.dropna(subset=[npus, metric])
    df = df[df[npus] >= 1]
    if within is None:
        meta = read_meta(results) if isinstance(results, (str, os.PathLike)) else {}
        within = [a for a in meta.get("axes", []) if a in df.columns and a not in NPU_AXES]
    wanted = [*([by] if isinstance(by, str) else list(by or ())), *within]
    groups = _groups(df, [c for c in dict.fromkeys(wanted) if c not in (npus, *NPU_AXES)])
    keys = [df[g].astype(str) for g in groups]
    cols = [metric] + (["energy_j"] if "energy_j" in df.columns else [])
    agg = df.groupby([*keys, df[npus].astype(int)], sort=True)[cols].mean().reset_index()
    agg.columns = [*groups, "npus", *cols]
    rows = []
    parts = agg.groupby(groups, sort=True) if groups else ([(None, agg)] if len(agg) else [])  # (no rows left: none)
    for _, part in parts:
        part = part.sort_values("npus", kind="stable")
        n0, t0 = float(part["npus"].iloc[0]), float(part[metric].iloc[0])
        ratio = part["npus"].astype(float) / n0
        out = part.copy()
        if weak:
            out["efficiency"] = t0 / part[metric].astype(float)
            out["speedup"] = out["efficiency"] * ratio
        else:
            out["speedup"] = t0 / part[metric].astype(float)
            out["efficiency"] = out["speedup"] / ratio
        if "energy_j" in cols:
            e = part["energy_j"].astype(float)
            out["energy_rel"] = (e / ratio if weak else e) / float(e.iloc[0])
        rows.append(out)
    if not rows:
        return pd.DataFrame(columns=[*groups, "npus", metric, "speedup", "efficiency"])
    return pd.concat(rows, ignore_index=True)
