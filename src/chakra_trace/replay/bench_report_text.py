"""The content of a benchmark report as sections of paragraphs and tables of strings, and its Markdown.

Built once from `BenchReport.to_dict()` so that the Markdown and the HTML page (`bench_report_html.py`)
say the same thing; times are shown in a unit chosen per benchmark from its median.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .measure import format_time, unit_for

NOT_RECORDED = "not recorded"
NO_ENERGY = "not measured (no counters)"

STATUS = {
    "slower": "significantly slower",
    "faster": "significantly faster",
    "no_meaningful_difference": "no meaningful difference",
    "no_significant_difference": "not significant",
    "not_enough_evidence": "not enough evidence",
    "cannot_compare": "cannot compare",
}
STOP = {
    "converged": "CI target reached",
    "max_repeats": "repeat limit (CI target not reached)",
    "budget": "time budget (CI target not reached)",
    "peer": "stopped by another rank",
}


def _t(x: float | None, unit: str | None) -> str:
    return format_time(x, unit) if x is not None else "–"


def _ci(p: list | None, unit: str) -> str:
    if not p or p[0] is None or p[1] is None:
        return "n/a"
    return f"{_t(p[0], unit).split()[0]}–{_t(p[1], unit)}"


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _val(v: Any) -> str:
    if v is None or v == "":
        return NOT_RECORDED
    if isinstance(v, list):
        return ".".join(map(str, v))
    return str(v)


def unit_of(e: dict) -> str:
    m = e["stats"]["median"]
    return unit_for(m) if m is not None else "s"


def _table(caption: str, columns: list[str], rows: list[list[str]], numeric: int = 0) -> dict:
    """`numeric`: columns from this index on are right-aligned (0: none)."""
    return {"caption": caption, "columns": columns, "rows": rows, "numeric": numeric}


def _system_rows(s: dict) -> list[list[str]]:
    hw, sw, cfg = s["hardware"], s["software"], s["config"]
    mem = hw.get("memory_bytes")
    accel = hw.get("cuda_device") or (hw.get("device") if str(hw.get("device") or "").startswith("cuda") else None)
    rows = [
        ["CPU", _val(hw.get("cpu_model"))],
        ["logical CPUs (usable)", f"{_val(hw.get('logical_cpus'))} ({_val(cfg.get('affinity_cpus'))})"],
        ["memory", f"{mem / 2**30:.1f} GiB" if isinstance(mem, (int, float)) else NOT_RECORDED],
        ["accelerator", _val(accel) if accel else "none recorded (CPU)"],
        ["architecture / host", f"{_val(hw.get('machine'))} / {_val(hw.get('hostname'))}"],
        ["OS", _val(sw.get("platform"))],
        ["Python / numpy", f"{_val(sw.get('python'))} / {_val(sw.get('numpy'))}"],
        ["torch / CUDA", f"{_val(sw.get('torch'))} / {_val(sw.get('cuda'))}"],
        ["chakra-trace", _val(sw.get("chakra_trace"))],
        ["backend", _val(s.get("backend"))],
        [
            "threads (torch / OMP / MKL)",
            f"{_val(cfg.get('torch_threads'))} / {_val(cfg.get('OMP_NUM_THREADS'))} / {_val(cfg.get('MKL_NUM_THREADS'))}",
        ],
        ["timer", _val(cfg.get("timer"))],
        ["benchmarks", ", ".join(s["entries"])],
    ]
    return rows


def sections(d: dict) -> list[dict]:
    """[{"id", "title", "paras": [str], "tables": [table]}]: the report's content, format-free."""
    entries = d["results"] + d["baselines"]
    out: list[dict[str, Any]] = []

    # summary
    paras = [f"Generated {d['generated']}." if d.get("generated") else ""]
    paras += [f"⚠ {f}" for f in d["flags"]]
    comps = {c["result"]: c for c in d["comparisons"]}
    lines = []
    for e in d["results"]:
        u, st = unit_of(e), e["stats"]
        line = f"{e['label']}: median {_t(st['median'], u)} (95% CI {_ci(st['ci95_median'], u)}), n={st['n']}"
        c = comps.get(e["label"])
        if c:
            line += f"; vs baseline: {c['comparison']['verdict']}"
        lines.append(line)
    out.append({"id": "summary", "title": "Summary", "paras": [p for p in paras if p] + lines, "tables": []})

    # system
    tables = [_table(f"System {s['id']}", ["", "value"], _system_rows(s)) for s in d["systems"]]
    paras = d["flags"] or ["All measurements ran on the same system, software and configuration."]
    out.append({"id": "system", "title": "System description", "paras": paras, "tables": tables})

    # run rules
    rows = []
    for e in entries:
        st = e["stats"]
        unit = e.get("unit") or e["extra"].get("unit") or e["context"].get("unit") or "seconds per sample"
        reasons = [STOP.get(r, r) for r in (e["stop_reason"] or "").split(",") if r] or [NOT_RECORDED]
        rows.append([
            e["label"], e["role"], f"time ({unit})", f"{e['division']}: {e['division_note']}",
            str(e["warmup"]), str(st["n"]), str(st["runs"]), ", ".join(reasons), _pct(st["rel_ci"]),
            e["timed_region"],
        ])  # fmt: skip
    repro = []
    for e in entries:
        x = e["extra"]
        cmd = x.get("command") or x.get("argv") or e["context"].get("command")
        repro.append([e["label"], "; ".join(e["files"]), _val(cmd if not isinstance(cmd, list) else " ".join(cmd)),
                      _val(x.get("seed"))])  # fmt: skip
    out.append(
        {
            "id": "rules",
            "title": "Run rules",
            "paras": [
                "Warm-up runs are untimed. Samples repeat until the 95% CI of the mean is within its target "
                '("CI target reached") or a repeat or time budget is spent. A run is one process; samples '
                "of one process are not independent replications, so comparisons take runs as the unit.",
                "Division: closed = the recorded job replayed as is; open = transformed (a subgraph, ops left "
                "out or substituted).",
            ],
            "tables": [
                _table(
                    "What was measured and how",
                    [
                        "benchmark",
                        "role",
                        "metric",
                        "division",
                        "warm-up",
                        "samples",
                        "runs",
                        "stop reason",
                        "rel. CI (mean)",
                        "timed region",
                    ],
                    rows,
                ),  # fmt: skip
                _table("Reproducibility", ["benchmark", "files", "command line", "seed"], repro),
            ],
        }
    )

    # results
    rows, outl = [], []
    for e in entries:
        st, u = e["stats"], unit_of(e)
        rows.append([
            e["label"], e["role"], str(st["n"]), str(st["runs"]), _t(st["median"], u), _ci(st["ci95_median"], u),
            _t(st["mean"], u), _ci(st["ci95_mean"], u), _pct(st["cv"]), _t(st["iqr"], u),
            f"{len(st['outliers'])} of {st['n']}",
        ])  # fmt: skip
        if st["outliers"]:
            shown = ", ".join(
                f"#{i} ({_t(v, u)})" for i, v in zip(st["outliers"][:20], st["outlier_values"][:20], strict=True)
            )
            more = f" and {len(st['outliers']) - 20} more" if len(st["outliers"]) > 20 else ""
            outl.append([e["label"], shown + more])
    tables = [
        _table(
            "Per benchmark (times per sample; outliers are reported, never dropped)",
            [
                "benchmark",
                "role",
                "n",
                "runs",
                "median",
                "95% CI (median)",
                "mean",
                "95% CI (mean)",
                "CV",
                "IQR",
                "outliers",
            ],
            rows,
            numeric=2,
        ),  # fmt: skip
    ]
    if outl:
        tables.append(_table("Outliers (Tukey fences, 1.5 IQR beyond the quartiles): sample index (time)",
                             ["benchmark", "samples"], outl))  # fmt: skip
    out.append({"id": "results", "title": "Results", "paras": [], "tables": tables})

    # comparison
    if d["baselines"]:
        rows = []
        for c in d["comparisons"]:
            k = c["comparison"]
            sci = c["speedup_ci"]
            rows.append([
                c["result"], c["baseline"], f"{k['b_runs']} vs {k['a_runs']}", _num(k["ratio"]),
                _num(c["speedup"]) + "×" if c["speedup"] else "–",
                f"{sci[0]:.3f}–{sci[1]:.3f}×" if sci else f"n/a (needs ≥ {k['min_runs']} runs per side)",
                "–" if k["p_value"] is None else f"{k['p_value']:.2g}", STATUS.get(k["status"], k["status"]),
            ])  # fmt: skip
        compared = {c["result"] for c in d["comparisons"]}
        paras = [
            "Each run counts once (its median); Welch's t-test on the log run medians, so the ratio is of "
            f"geometric means of run medians. Differences under {100 * d['comparisons'][0]['comparison']['threshold']:g}% "
            "are not called meaningful."
            if d["comparisons"]
            else "No result has a baseline of the same benchmark."
        ]
        paras += [f"{e['label']}: no baseline of this benchmark" for e in d["results"] if e["label"] not in compared]
        out.append(
            {
                "id": "comparison",
                "title": "Against the baseline",
                "paras": paras,
                "tables": [
                    _table(
                        "Result vs baseline (speedup = baseline / result; > 1: faster)",
                        [
                            "benchmark",
                            "baseline",
                            "runs (result vs baseline)",
                            "time ratio",
                            "speedup",
                            "speedup 95% CI",
                            "p",
                            "verdict",
                        ],
                        rows,
                        numeric=2,
                    )
                ],  # fmt: skip
            }
        )

    # scaling
    if d["scaling"]:
        tables = []
        for s in d["scaling"]:
            rows = [
                [r["label"], _num(r["scale"], "g"), _t(r["median"], None), _num(r["speedup"]),
                 f"{r['speedup_ci'][0]:.3f}–{r['speedup_ci'][1]:.3f}" if r["speedup_ci"] else "n/a",
                 _pct(r["efficiency"])]
                for r in s["rows"]
            ]  # fmt: skip
            how = (
                "weak scaling (work per rank fixed): efficiency = T(smallest) / T"
                if s["model"] == "weak"
                else "strong scaling (total work fixed): efficiency = speedup / scale factor"
            )
            tables.append(_table(f"{s['family']} by {s['kind']}: {how}",
                                 ["benchmark", s["kind"], "median", "speedup", "speedup 95% CI", "efficiency"],
                                 rows, numeric=1))  # fmt: skip
        out.append({"id": "scaling", "title": "Scaling", "paras": [], "tables": tables})

    # energy
    rows = []
    for e in entries:
        en = e["energy"]
        if en is None or "absent" in en:
            why = (en or {}).get("absent")  # the meter's reason, when one was asked for
            rows.append([e["label"], f"not measured ({why})" if why else NO_ENERGY, "–", "–", "–", "–"])
            continue
        ci = en["ci95_median"]
        rows.append([
            e["label"], _val(en["source"]), _num(en["median"], ".4g") + " J",
            f"{ci[0]:.4g}–{ci[1]:.4g} J" if ci else "n/a", _num(en["mean"], ".4g") + " J",
            (_num(en["power_w"], ".4g") + " W") if en["power_w"] is not None else "–",
        ])  # fmt: skip
    out.append(
        {
            "id": "energy",
            "title": "Energy",
            "paras": ["Energy per sample; average power = total energy / total timed seconds."],
            "tables": [
                _table(
                    "Energy per sample",
                    ["benchmark", "source", "median", "95% CI (median)", "mean", "average power"],
                    rows,
                    numeric=2,
                )
            ],  # fmt: skip
        }
    )

    out.append(
        {
            "id": "method",
            "title": "Statistics used",
            "paras": [
                "Median: 95% CI from order statistics (distribution-free, needs n ≥ 6). Mean: Student-t 95% CI. "
                "CV = sd / mean; IQR = Q3 − Q1 (linear interpolation). Outliers: outside Tukey's fences; kept. "
                "Comparison: Welch's t-test on log run medians with ≥ 3 runs per side (fewer: not enough "
                "evidence, nothing is called significant); speedup CI from the same t-distribution.",
            ],
            "tables": [],
        }
    )
    return out


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_MD_SPECIAL = re.compile(r"([\\`|]|!(?=\[)|\](?=[(\[:]))")


def md_text(s: str) -> str:
    """Text for Markdown: its values come from result files (someone else's, maybe), so nothing in
    them is markup. HTML is escaped (a renderer shows ``<script>`` as text); what Markdown would
    read as code, a table cell, a link, an image or a link definition (`` ` ``, ``|``, the ``]``
    of ``](``, ``][``, ``]:``, the ``!`` of ``![``) and a leading heading or list mark are
    backslash-escaped (emphasis is left alone: names are full of ``_``); line breaks and control
    characters become a space (a row stays one row)."""
    s = _CONTROL.sub(" ", str(s))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = re.sub(r"^(\s*\d+)([.)])", r"\1\\\2", s)  # (no list from a leading "1." or "-", no heading "#", "=")
    return re.sub(r"^(\s*)([-+=#])", r"\1\\\2", s)


def render_markdown(d: dict) -> str:
    """The report as Markdown: headings, paragraphs and pipe tables; every text escaped (`md_text`)."""
    lines = [f"# {md_text(d['title'])}", ""]
    for sec in sections(d):
        lines += [f"## {md_text(sec['title'])}", ""]
        for p in sec["paras"]:
            lines += [md_text(p), ""]
        for t in sec["tables"]:
            lines += [f"**{md_text(t['caption'])}**", ""]
            lines.append("| " + " | ".join(md_text(c) or " " for c in t["columns"]) + " |")
            num = t["numeric"]
            lines.append("|" + "|".join("---:" if num and i >= num else "---" for i in range(len(t["columns"]))) + "|")
            for r in t["rows"]:
                lines.append("| " + " | ".join(md_text(c) for c in r) + " |")
            lines.append("")
    return "\n".join(lines)
