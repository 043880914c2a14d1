"""The benchmark report as a document (`chakra_trace.document`), drawn by the one renderer every
report shares: the sections of `bench_report_text` (the Markdown's paragraphs and tables, so both
forms say the same thing), flags set apart as warnings, and per result an `intervals` plot of its
samples with the median's and the mean's 95% CIs, its baseline beside it. One self-contained page:
the renderer's CSS and script are inlined and nothing is fetched.
"""

from __future__ import annotations

import numpy as np

from ..document import intervals, section, table, text
from ..document import render_html as render_document
from .bench_report_text import sections, unit_of
from .measure import format_time

MAX_DOTS = 1500  # per row; more samples are thinned evenly for the plot (the statistics use them all)
ROLES = ["result", "baseline"]  # the plots' groups (colors)
LEGEND = "Dots: samples (red: outliers); band and bar: the median with its 95% CI; whisker below: the mean's 95% CI."


def _table(t: dict) -> dict:
    """A table of `bench_report_text` (rows of strings) as a table block."""
    keys = [f"c{i}" for i in range(len(t["columns"]))]
    return table(
        t["caption"], [(k, c, "str") for k, c in zip(keys, t["columns"])], [dict(zip(keys, r)) for r in t["rows"]]
    )


def _row(e: dict) -> dict:
    """One benchmark's plot row: its samples (thinned past MAX_DOTS, outliers always kept) and intervals."""
    st = e["stats"]
    s = np.asarray(e["samples"], dtype=np.float64)
    keep = np.arange(len(s)) if len(s) <= MAX_DOTS else np.linspace(0, len(s) - 1, MAX_DOTS).astype(int)
    keep = np.union1d(keep, np.asarray(st["outliers"], dtype=int))
    at = {int(i): k for k, i in enumerate(keep)}
    return {
        "label": e["label"],
        "note": f"{e['role']}, n={st['n']}",
        "group": ROLES.index(e["role"]),
        "samples": s[keep].tolist(),
        "outliers": [at[i] for i in st["outliers"]],
        "median": st["median"],
        "median_ci": st["ci95_median"],
        "mean_ci": st["ci95_mean"],
    }


def _plots(d: dict) -> list[dict]:
    """Per result, its samples and its baseline's on one axis: log when they span more than 20x
    (heavy tails: a log axis keeps the bulk of the samples readable), else linear."""
    base = {b["label"]: b for b in d["baselines"]}
    pairs = {c["result"]: c["baseline"] for c in d["comparisons"]}
    blocks = [text(LEGEND)]
    for e in d["results"]:
        rows = [r for r in [e] + ([base[pairs[e["label"]]]] if e["label"] in pairs else []) if r["samples"]]
        if not rows:
            continue
        lo = min(min(r["samples"]) for r in rows)
        hi = max(max(r["samples"]) for r in rows)
        title = f"{e['label']}: median {format_time(e['stats']['median'], unit_of(e))}"
        blocks.append(intervals(title, [_row(r) for r in rows], unit="s", log=lo > 0 and hi / lo > 20, groups=ROLES))
    return blocks


def document(d: dict) -> dict:
    """The report document of `BenchReport.to_dict()`."""
    out = []
    for sec in sections(d):
        blocks = [text(p, warn=p.startswith("⚠") or p in d["flags"]) for p in sec["paras"]]
        if sec["id"] == "results":
            blocks += _plots(d)
        blocks += [_table(t) for t in sec["tables"]]
        out.append(section(sec["id"], sec["title"], blocks))
    return {"title": d["title"], "sections": out}


def render_html(d: dict) -> str:
    """The page for `BenchReport.to_dict()`."""
    return render_document(document(d))
