"""A benchmark report as one self-contained HTML page: inline CSS, tables, and an inline SVG plot per
benchmark of its samples with the median's and the mean's 95% CIs (baseline beside the result).

Nothing is fetched and nothing runs: no script, so the page reads the same offline, printed, or years
later. (`visualize/html.py` draws the other reports with JavaScript from JSON; the layer map keeps
`replay`, where this report's statistics live, from importing it, and a static page needs none of it.)
"""

from __future__ import annotations

import html
import math

import numpy as np

from .bench_report_text import sections, unit_of
from .measure import _UNITS, format_time

MAX_DOTS = 1500  # per row; more samples are thinned evenly for the plot (the statistics use them all)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;margin:0;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d9dde5;padding-bottom:4px}
p{margin:6px 0}.warn{background:#fff4e0;border-left:4px solid #e08a00;padding:6px 10px}
table{border-collapse:collapse;margin:8px 0 16px;background:#fff;font-size:13px}
caption{text-align:left;font-weight:600;padding:4px 0;color:#3a4250}
th,td{border:1px solid #d9dde5;padding:4px 8px;vertical-align:top;text-align:left}
th{background:#eef1f5}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
figure{background:#fff;border:1px solid #d9dde5;margin:8px 0 16px;padding:8px 12px}
figcaption{font-weight:600;color:#3a4250;margin-bottom:4px}
svg text{font:12px system-ui,sans-serif;fill:#3a4250}
.legend{font-size:12px;color:#5a6270}
"""

_COLORS = {"result": "#3b6fb6", "baseline": "#8a8f99"}


def _e(s: object) -> str:
    return html.escape(str(s))


def _table(t: dict) -> str:
    num = t["numeric"]
    head = "".join(f"<th>{_e(c)}</th>" for c in t["columns"])
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{_e(c)}</td>' if num and i >= num else f"<td>{_e(c)}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in t["rows"]
    )
    return f"<table><caption>{_e(t['caption'])}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _ticks(lo: float, hi: float, k: int = 5) -> list[float]:
    step = (hi - lo) / k
    mag = 10 ** math.floor(math.log10(step))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= step)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _tick(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _log_ticks(lo: float, hi: float) -> list[float]:
    out = []
    for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        out += [m * 10.0**k for m in (1, 2, 5) if lo <= m * 10.0**k <= hi]
    return out


def _plot(rows: list[dict], unit: str) -> str:
    """SVG: per row, the samples as dots (outliers red), the median's CI as a band with the median as a bar,
    and the mean's CI as a whisker below."""
    width, left, right, rh, top = 1080, 260, 20, 56, 8
    all_s = np.concatenate([np.asarray(r["samples"], dtype=np.float64) for r in rows])
    lo, hi = float(all_s.min()), float(all_s.max())
    log = lo > 0 and hi / lo > 20  # heavy tails: a log axis keeps the bulk of the samples readable
    if log:
        lo, hi = lo / 1.15, hi * 1.15
    else:
        pad = 0.04 * (hi - lo) if hi > lo else 0.05 * abs(hi) or 1e-9
        lo, hi = lo - pad, hi + pad
    scale = _UNITS[unit]
    f = math.log if log else (lambda v: v)
    flo, span = f(lo), f(hi) - f(lo)

    def x(v: float) -> float:  # (a CI's end may lie off the axis, below 0 on a log one: drawn at its edge)
        return left + (width - left - right) * (f(min(max(v, lo), hi)) - flo) / span

    parts = []
    height = top + rh * len(rows) + 40
    for k, r in enumerate(rows):
        y0 = top + k * rh
        cy = y0 + rh * 0.42
        color = _COLORS.get(r["role"], "#3b6fb6")
        st = r["stats"]
        label = r["label"] if len(r["label"]) <= 38 else r["label"][:36] + "…"
        parts.append(f'<text x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end">{_e(label)}</text>')
        parts.append(f'<text x="{left - 8}" y="{cy + 18:.1f}" text-anchor="end" class="legend">{_e(r["role"])}, n={st["n"]}</text>')  # fmt: skip
        ci = st["ci95_median"]
        if ci and ci[0] is not None:
            parts.append(
                f'<rect class="ci-median" x="{x(ci[0]):.1f}" y="{cy - 16:.1f}" width="{max(x(ci[1]) - x(ci[0]), 1):.1f}" '
                f'height="32" fill="{color}" fill-opacity="0.18"/>'
            )
        s = np.asarray(r["samples"], dtype=np.float64)
        out = set(st["outliers"])
        idx = np.arange(len(s)) if len(s) <= MAX_DOTS else np.unique(np.linspace(0, len(s) - 1, MAX_DOTS).astype(int))
        idx = np.union1d(idx, np.asarray(sorted(out), dtype=int))
        for i in idx.tolist():
            jitter = ((i * 0.6180339887) % 1.0 - 0.5) * 24
            fill = "#d1342f" if i in out else color
            parts.append(
                f'<circle cx="{x(s[i]):.1f}" cy="{cy + jitter:.1f}" r="2.2" fill="{fill}" fill-opacity="0.55"/>'
            )
        if st["median"] is not None:
            xm = x(st["median"])
            parts.append(f'<line class="median" x1="{xm:.1f}" x2="{xm:.1f}" y1="{cy - 18:.1f}" y2="{cy + 18:.1f}" stroke="{color}" stroke-width="3"/>')  # fmt: skip
        mci = st["ci95_mean"]
        if mci and mci[0] is not None:
            a, b, yy = x(mci[0]), x(mci[1]), cy + 22
            parts.append(
                f'<path class="ci-mean" d="M{a:.1f},{yy - 4:.1f}V{yy + 4:.1f}M{a:.1f},{yy:.1f}H{b:.1f}M{b:.1f},{yy - 4:.1f}V{yy + 4:.1f}" '
                f'stroke="#1d2330" fill="none"/>'
            )
    axis_y = top + rh * len(rows) + 4
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{axis_y}" y2="{axis_y}" stroke="#8a8f99"/>')
    for t in _log_ticks(lo, hi) if log else _ticks(lo, hi):
        parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{axis_y}" y2="{axis_y + 4}" stroke="#8a8f99"/>')
        parts.append(f'<text x="{x(t):.1f}" y="{axis_y + 17}" text-anchor="middle">{_tick(t / scale)}</text>')
    parts.append(
        f'<text x="{width - right}" y="{axis_y + 30}" text-anchor="end">{_e(unit)}{" (log scale)" if log else ""}</text>'
    )
    return f'<svg class="samples" viewBox="0 0 {width} {height}" width="100%" role="img">{"".join(parts)}</svg>'


def _plots(d: dict) -> str:
    base = {b["label"]: b for b in d["baselines"]}
    pairs = {c["result"]: c["baseline"] for c in d["comparisons"]}
    figs = []
    for e in d["results"]:
        rows = [e] + ([base[pairs[e["label"]]]] if e["label"] in pairs else [])
        rows = [r for r in rows if r["samples"]]
        if not rows:
            continue
        unit = unit_of(e)
        st = e["stats"]
        figs.append(
            f"<figure><figcaption>{_e(e['label'])}: median {_e(format_time(st['median'], unit))}"
            f"</figcaption>{_plot(rows, unit)}</figure>"
        )
    legend = (
        '<p class="legend">Dots: samples (red: outliers); band and bar: the median with its 95% CI; '
        "whisker below: the mean's 95% CI.</p>"
    )
    return legend + "".join(figs)


def render_html(d: dict) -> str:
    """The page for `BenchReport.to_dict()`."""
    body = [f"<h1>{_e(d['title'])}</h1>"]
    for sec in sections(d):
        body.append(f'<section id="{_e(sec["id"])}"><h2>{_e(sec["title"])}</h2>')
        for p in sec["paras"]:
            cls = ' class="warn"' if p.startswith("⚠") or p in d["flags"] else ""
            body.append(f"<p{cls}>{_e(p)}</p>")
        if sec["id"] == "results":
            body.append(_plots(d))
        body.extend(_table(t) for t in sec["tables"])
        body.append("</section>")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(d['title'])}</title>\n<style>{CSS}</style>\n</head>\n"
        f'<body data-rendered="1"><main>\n{"".join(body)}\n</main></body>\n</html>\n'
    )
