"""Static plots of analysis results (PNG, SVG or PDF, chosen by the file suffix).

matplotlib is an optional dependency (`pip install 'chakra-trace[plot]'`), imported only
when a plot is made, and used through `Figure` + the Agg canvas so no display is needed and
the global pyplot state is never touched. Every plot stays readable for jobs of thousands of
ranks: past a few dozen ranks it aggregates, and heatmaps cap or bin their rows and columns.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..io.et import atomic_output
from .graph import format_bytes

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
MAX_BARS = 64  # per-rank bars up to this many ranks, a distribution beyond
MAX_INSTANCES = 60  # imbalance heatmap rows
MAX_RANKS = 96  # imbalance heatmap columns
MAX_SIDE = 512  # communication matrix cells per side before ranks are binned
MAX_POINTS = 200_000  # roofline dots (the longest ops are kept)

_COLORS = {"compute": "#4c72b0", "overlap": "#8172b3", "exposed": "#dd8452", "other": "#55a868", "idle": "#c8c8c8"}


def _require():
    """matplotlib, or a ChakraError saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise ChakraError(
            "plotting needs matplotlib, which is not installed: pip install 'chakra-trace[plot]'"
        ) from None
    return matplotlib


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(min(width, 40.0), min(height, 40.0)), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ChakraError(f"{path}: cannot tell the image format from the name; expected one of {', '.join(FORMATS)}")
    return fmt


def _save(fig, path: Path) -> Path:

    fmt = _format(path)
    meta: dict[str, Any] = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(fmt, {})
    with atomic_output(path, compress=False) as f:
        fig.savefig(f, format=fmt, dpi=120, metadata=meta)
    return path


def _time_unit(max_us: float) -> tuple[float, str]:
    if max_us >= 1e6:
        return 1e6, "s"
    if max_us >= 1e3:
        return 1e3, "ms"
    return 1.0, "µs"


def _message(fig, text: str) -> None:
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=12, transform=ax.transAxes)


# ---------------------------------------------------------------------- breakdown
def plot_breakdown(breakdown, path: str | os.PathLike, *, max_bars: int = MAX_BARS) -> Path:
    """Per rank: compute (not overlapped), overlap, exposed communication and idle time as
    stacked horizontal bars (their sum is the span). Past `max_bars` ranks: the distribution
    over ranks of each part (min, quartiles, median, max) and the ranks at the extremes."""
    _require()
    path = Path(path)
    _format(path)
    rows = breakdown.rows if hasattr(breakdown, "rows") else list(breakdown)
    if not rows:
        raise ChakraError("plot_breakdown: the breakdown has no ranks to plot")
    col = {
        k: np.array([float(r.get(k, 0)) for r in rows])
        for k in ("span_us", "compute_us", "overlap_us", "exposed_comm_us", "other_us", "idle_us")
    }
    ranks = [r.get("rank", i) for i, r in enumerate(rows)]
    parts = [
        ("compute (not overlapped)", np.maximum(col["compute_us"] - col["overlap_us"], 0), _COLORS["compute"]),
        ("overlap (compute + comm)", np.maximum(col["overlap_us"], 0), _COLORS["overlap"]),
        ("exposed comm", np.maximum(col["exposed_comm_us"], 0), _COLORS["exposed"]),
        ("other (host, memory)", np.maximum(col["other_us"], 0), _COLORS["other"]),
        ("idle", np.maximum(col["idle_us"], 0), _COLORS["idle"]),
    ]
    total = sum(p[1] for p in parts)
    scale, unit = _time_unit(float(max(total.max(), col["span_us"].max())))
    n = len(rows)
    if n <= max_bars:
        fig = _figure(9, 1.6 + 0.3 * n)
        ax = fig.add_subplot()
        y = np.arange(n)
        left = np.zeros(n)
        for label, v, color in parts:
            ax.barh(y, v / scale, left=left, color=color, label=label, height=0.7)
            left += v / scale
        ax.set_yticks(y, [str(r) for r in ranks])
        ax.invert_yaxis()
        ax.set_ylabel("rank")
        ax.set_title("Step breakdown per rank (recorded times)")
    else:
        fig = _figure(9, 4.2)
        ax = fig.add_subplot()
        labels = [p[0] for p in parts] + ["span"]
        for i, (v, color) in enumerate([(p[1], p[2]) for p in parts] + [(col["span_us"], "#6c757d")]):
            lo, q1, med, q3, hi = np.percentile(v / scale, [0, 25, 50, 75, 100])
            ax.hlines(i, lo, hi, color="black", lw=1)
            ax.barh(i, q3 - q1, left=q1, height=0.5, color=color, edgecolor="black")
            ax.plot([med, med], [i - 0.25, i + 0.25], color="black", lw=2)
        ax.set_yticks(np.arange(len(labels)), labels)
        ax.invert_yaxis()
        worst = {"idle": int(np.argmax(parts[3][1])), "exposed comm": int(np.argmax(parts[2][1]))}
        note = "; ".join(
            f"most {k}: rank {ranks[i]} ({parts[3 if k == 'idle' else 2][1][i] / scale:,.3g} {unit})"
            for k, i in worst.items()
        )
        ax.set_title(f"Step breakdown over {n:,} ranks: min, quartiles, median, max\n{note}", fontsize=10)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    if n <= max_bars:
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.6 / (1.6 + 0.3 * n)), ncol=4, fontsize=8, frameon=False
        )
    return _save(fig, path)


# ---------------------------------------------------------------------- imbalance
def _instance_label(x) -> str:
    return f"{x.group or 'all'}#{x.index} {x.type}"


def plot_imbalance(
    report, path: str | os.PathLike, *, max_instances: int = MAX_INSTANCES, max_ranks: int = MAX_RANKS
) -> Path:
    """Heatmap of the imbalanced collective instances (rows) by rank (columns), colored by
    each rank's bytes / the instance's median on a log scale centered at 1 (grey: not a
    member). Caps: the `max_instances` most skewed instances, the `max_ranks` ranks that
    stand out most often. With no imbalance, a figure that says so."""
    matplotlib = _require()
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import FuncFormatter, LogLocator

    path = Path(path)
    _format(path)
    found = list(report.imbalanced)
    if not found:
        fig = _figure(6.5, 2.2)
        _message(
            fig,
            f"no imbalance in {report.checked:,} collective instances\n(tolerance {report.tolerance:g} of the median)",
        )
        return _save(fig, path)

    def skew(x) -> float:
        v = np.array(list(x.bytes.values()), float)
        med = max(float(x.median), 1.0)
        return float(np.max(np.abs(np.log2(np.maximum(v, 1.0) / med))))

    shown = found
    if len(found) > max_instances:
        keep = sorted(sorted(range(len(found)), key=lambda i: -skew(found[i]))[:max_instances])
        shown = [found[i] for i in keep]
    all_ranks = sorted({r for x in shown for r in x.bytes})
    ranks = all_ranks
    if len(all_ranks) > max_ranks:
        # every shown instance's most deviating rank first, then the ranks standing out most often
        hits: dict[int, int] = {}
        for x in shown:
            for r in x.outliers:
                hits[r] = hits.get(r, 0) + 1

        def off(x, r) -> float:
            return abs(math.log2(max(x.bytes[r], 1) / max(x.median, 1)))

        worst = [
            max(x.outliers or list(x.bytes), key=lambda r: off(x, r)) for x in sorted(shown, key=skew, reverse=True)
        ]
        order = worst + sorted(hits, key=lambda r: (-hits[r], r)) + all_ranks
        ranks = sorted(list(dict.fromkeys(order))[:max_ranks])
    col = {r: i for i, r in enumerate(ranks)}
    m = np.full((len(shown), len(ranks)), np.nan)
    for i, x in enumerate(shown):
        med = float(x.median)
        for r, b in x.bytes.items():
            if r in col:
                m[i, col[r]] = b / med if med > 0 else (1.0 if b == 0 else np.inf)
    finite = m[np.isfinite(m) & (m > 0)]
    span = max(2.0, float(np.max(np.maximum(finite, 1 / finite))) if finite.size else 2.0)
    shown_m = np.clip(np.nan_to_num(m, nan=np.nan, posinf=span), 1 / span, span)
    shown_m[np.isnan(m)] = np.nan

    fig = _figure(
        min(3.5 + 0.2 * len(ranks) + 0.06 * max(len(_instance_label(x)) for x in shown), 22.0),
        min(2.0 + 0.28 * len(shown), 20.0),
    )
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="#e9ecef")
    im = ax.imshow(
        np.ma.masked_invalid(shown_m),
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        norm=LogNorm(vmin=1 / span, vmax=span),
    )
    ax.set_yticks(np.arange(len(shown)), [_instance_label(x) for x in shown], fontsize=8)
    if len(ranks) <= 48:
        ax.set_xticks(np.arange(len(ranks)), [str(r) for r in ranks], fontsize=8)
    else:
        ticks = np.linspace(0, len(ranks) - 1, 12).round().astype(int)
        ax.set_xticks(ticks, [str(ranks[t]) for t in ticks], fontsize=8)
    if m.size <= 400:
        for (i, j), v in np.ndenumerate(m):
            if not np.isnan(v):
                ax.text(
                    j,
                    i,
                    "inf" if np.isinf(v) else f"{v:.2g}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if abs(math.log(max(min(v, span), 1 / span))) > 0.6 * math.log(span) else "black",
                )
    ax.set_xlabel("rank")
    cb = fig.colorbar(
        im, ax=ax, ticks=LogLocator(base=2, numticks=9), format=FuncFormatter(lambda v, _pos: f"×{v:.3g}")
    )
    cb.minorticks_off()
    cb.set_label("bytes / instance median")
    title = f"Collective size imbalance: {len(found):,} of {report.checked:,} instances"
    if len(shown) < len(found) or len(ranks) < len(all_ranks):
        title += f"\n(showing the {len(shown):,} most skewed, {len(ranks):,} of {len(all_ranks):,} ranks)"
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------------- communication matrix
def _bin(a: np.ndarray, k: int) -> np.ndarray:
    n = a.shape[0]
    pad = (-n) % k
    a = np.pad(a, ((0, pad), (0, pad)))
    s = a.shape[0] // k
    return a.reshape(s, k, s, k).sum(axis=(1, 3))


def plot_matrix(matrix, path: str | os.PathLike, *, max_side: int = MAX_SIDE) -> Path:
    """Heatmap of bytes sent between ranks (rows: from, columns: to) on a log color scale;
    zero cells are blank. Past `max_side` ranks, consecutive ranks are binned (sums)."""
    matplotlib = _require()
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import FuncFormatter, LogLocator

    path = Path(path)
    _format(path)
    ranks = list(matrix.ranks)
    b = np.asarray(matrix.bytes, float)
    n = len(ranks)
    if n == 0:
        raise ChakraError("plot_matrix: the communication matrix has no ranks")
    if b.shape != (n, n):
        raise ChakraError(f"plot_matrix: expected a {n}x{n} byte matrix for {n} ranks, got shape {b.shape}")
    if not (b > 0).any():
        fig = _figure(6.5, 2.2)
        _message(fig, f"no communication between the {n:,} ranks")
        return _save(fig, path)
    k = max(1, math.ceil(n / max_side))
    if k > 1:
        b = _bin(b, k)
    side = b.shape[0]
    size = min(4.5 + 0.3 * side, 12.0)
    fig = _figure(size + 1.8, size)
    ax = fig.add_subplot()
    vmax = float(b.max())
    vmin = float(b[b > 0].min())
    vmin = min(vmin, vmax / 4)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#f8f9fa")
    im = ax.imshow(
        np.ma.masked_less_equal(b, 0),
        cmap=cmap,
        norm=LogNorm(vmin=vmin, vmax=vmax),
        interpolation="nearest",
        aspect="equal",
    )
    if side <= 32:
        ticks = np.arange(side)
    else:
        ticks = np.linspace(0, side - 1, 12).round().astype(int)
    tick_labels = [str(ranks[min(t * k, n - 1)]) for t in ticks]
    ax.set_xticks(ticks, tick_labels, fontsize=8)
    ax.set_yticks(ticks, tick_labels, fontsize=8)
    binned = f" (bins of {k} ranks)" if k > 1 else ""
    ax.set_xlabel(f"to rank{binned}")
    ax.set_ylabel(f"from rank{binned}")
    if side <= 12:
        for (i, j), v in np.ndenumerate(b):
            if v > 0:
                ax.text(
                    j,
                    i,
                    format_bytes(v),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if math.log(v) < (math.log(vmin) + math.log(vmax)) / 2 else "black",
                )
    cb = fig.colorbar(
        im,
        ax=ax,
        shrink=0.8,
        ticks=LogLocator(base=2, numticks=8),
        format=FuncFormatter(lambda v, _pos: format_bytes(v)),
    )
    cb.minorticks_off()
    cb.set_label("bytes sent")
    ax.set_title(
        f"Communication matrix: {format_bytes(float(np.asarray(matrix.bytes).sum()))} between {n:,} ranks", fontsize=10
    )
    return _save(fig, path)


# ---------------------------------------------------------------------- roofline
_BOUND_COLORS = {"memory": "#1f77b4", "compute": "#d62728"}


def plot_roofline(roofline, path: str | os.PathLike, *, max_points: int = MAX_POINTS) -> Path:
    """Log-log roofline of a device (the roof min(peak, bandwidth x intensity) and its ridge
    point) with one dot per op at (intensity, achieved FLOP/s), colored by what bounds it and
    sized by its duration. Ops without a positive intensity and rate are left out; past
    `max_points`, the longest ops are kept."""
    _require()
    from matplotlib.ticker import EngFormatter

    path = Path(path)
    _format(path)
    dev = roofline.device
    peak, bw = float(dev.peak_flops), float(dev.mem_bw)
    ridge = getattr(dev, "ridge", None)
    ridge = float(ridge() if callable(ridge) else ridge) if ridge is not None else peak / bw
    df = roofline.to_pandas()
    x = df["intensity"].to_numpy(float)
    y = df["achieved_flops"].to_numpy(float)
    dur = df["duration_us"].to_numpy(float)
    bound = df["bound"].astype(str).to_numpy()
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    total = len(df)
    idx = np.flatnonzero(ok)
    if idx.size > max_points:
        idx = np.sort(idx[np.argpartition(-dur[idx], max_points - 1)[:max_points]])
    xs, ys = x[idx], y[idx]
    lo = min(float(xs.min()) if xs.size else ridge, ridge) / 4
    hi = max(float(xs.max()) if xs.size else ridge, ridge) * 4
    xx = np.geomspace(lo, hi, 256)
    roof = np.minimum(peak, bw * xx)

    fig = _figure(8, 5.5)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.plot(xx, roof, color="black", lw=2, label=f"roof: {peak / 1e12:,.4g} TFLOP/s, {bw / 1e9:,.4g} GB/s")
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.plot([ridge], [peak], "o", color="black", ms=6, label=f"ridge: {ridge:,.3g} FLOP/byte")
    if xs.size:
        d = np.nan_to_num(dur[idx], nan=0.0)
        sizes = 6 + 120 * np.sqrt(d / d.max()) if d.max() > 0 else np.full(d.size, 12.0)
        b = bound[idx]
        extra = iter(["#2ca02c", "#9467bd", "#8c564b", "#e377c2"])
        for kind in sorted(set(b.tolist()), key=lambda k: (k not in _BOUND_COLORS, k)):
            m = b == kind
            color = _BOUND_COLORS.get(kind) or next(extra, "#7f7f7f")
            ax.scatter(
                xs[m],
                ys[m],
                s=sizes[m],
                c=color,
                alpha=0.55,
                edgecolors="none",
                label=f"{kind} bound ({int(m.sum()):,} ops)",
                rasterized=xs.size > 5000,
            )
        ymin = min(float(ys.min()), float(roof.min())) / 3
    else:
        ax.text(
            0.5,
            0.08,
            "no op with FLOPs, bytes and a recorded duration",
            transform=ax.transAxes,
            ha="center",
            fontsize=10,
        )
        ymin = float(roof.min()) / 3
    ax.set_xlim(lo, hi)
    ax.set_ylim(ymin, peak * 3)
    ax.yaxis.set_major_formatter(EngFormatter(unit="FLOP/s"))
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    note = f"{idx.size:,} of {total:,} ops" + (" (the longest)" if ok.sum() > idx.size else "")
    ax.set_title(f"Roofline: {dev.name} — {note}", fontsize=10)
    return _save(fig, path)
