"""`device_bench.py`'s comparison: per analysis, whether each tool answered, one headline figure
of each (the same quantity where both define it), whether they agree (within 1%), and the time
ratio. Inputs are the JSON of `device_bench.ours` and of `hta_side.py`."""

from __future__ import annotations

import re


def _rows(x) -> list[dict]:
    """HTA's DataFrame records ({"rows", "head"}) or our table rows, as a list of dicts."""
    if isinstance(x, dict) and "head" in x:
        return [r for r in x["head"] if isinstance(r, dict)]
    if isinstance(x, list):
        return [r for r in x if isinstance(r, dict)]
    return []


def _n(x) -> int:
    if isinstance(x, dict) and "rows" in x:
        return int(x["rows"])
    return len(_rows(x))


def _close(a, b, tol=0.01) -> bool | None:
    if a is None or b is None:
        return None
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return sorted(a) == sorted(b)
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-9)


def _label(s: str) -> str:
    return " ".join(sorted(w for w in re.split(r"\W+", str(s).lower()) if w and w != "overlapping"))


def _temporal(o, h):
    ours = {r["rank"]: r for r in _rows(o["hta"])}
    theirs = {r["rank"]: r for r in _rows(h)}
    r = min(set(ours) & set(theirs), default=None)
    if r is None:
        return None, None, "idle % of rank 0"
    return ours[r]["idle_time_pctg"], theirs[r].get("idle_time_pctg"), f"idle % of rank {r}"


def _idle(o, h):
    def total(rows, key, rank):
        return sum(x[key] for x in rows if x.get("rank") == rank and x.get("idle_category") == "host_wait")

    mine = _rows(o["idle"])
    hta = _rows(h[0] if isinstance(h, list) else h)
    r = min((x["rank"] for x in mine), default=0)
    return total(mine, "idle_time_us", r), total(hta, "idle_time", r) if hta else None, f"host-wait idle µs, rank {r}"


def _kernels(o, h):
    mine = {_label(r["kind"]): r["percentage"] for r in _rows(o["kind_overlap_all"])}
    hta = {_label(r.get("kernel_type", "")): r.get("percentage") for r in _rows(h[0] if isinstance(h, list) else h)}
    key = "communication" if "communication" in hta or "communication" in mine else "computation"
    return mine.get(key), hta.get(key) if hta else None, f"% of kernel time: {key} only"


def _overlap(o, h):
    mine = {r["rank"]: r.get("comp_comm_overlap_pctg") for r in _rows(o["ranks"])}
    hta = {r.get("rank"): r.get("comp_comm_overlap_pctg") for r in _rows(h)}
    r = min(mine, default=0)
    return mine.get(r), hta.get(r), f"comm overlapped by compute %, rank {r}"


def _launches(o, h):
    mine = o["summary"].get("kernels", 0)  # none when the trace has no launch records
    hta = sum(_n(v) for v in h.values()) if isinstance(h, dict) else None
    return mine, hta, "kernels with launch statistics"


def _critical_path(o, h):
    mine = o["summary"].get("path_nodes")
    theirs = h.get("critical_path_nodes") if isinstance(h, dict) else None
    return mine, theirs, "operations on the critical path (HTA: also runtime calls and kernels)"


def _stragglers(o, h):
    return o["summary"].get("stragglers"), h if isinstance(h, list) else None, "straggler ranks (HTA names k=2)"


FIGURES = {
    "temporal": _temporal,
    "idle": _idle,
    "kernels": _kernels,
    "overlap": _overlap,
    "launches": _launches,
    "stragglers": _stragglers,
    "critical_path": _critical_path,
}
#: Figures both tools give but count differently: shown side by side, never called equal or not.
UNLIKE = {"critical_path"}
HTA_NAME = {"memory": None}
#: One analysis of ours that HTA splits in several: HTA answers it when all its parts answer.
PARTS = {"counters": ("queue_length", "memory_bw")}


def fold(rows: list[dict]) -> list[dict]:
    """Rows with HTA's parts of one of our analyses (`PARTS`) folded into its row (idempotent)."""
    by = {r["analysis"]: r for r in rows}
    for ours_name, parts in PARTS.items():
        got = [by[p] for p in parts if p in by]
        if ours_name not in by or not got:
            continue
        row = by[ours_name]
        fails = [f"{g['analysis']}: {g['hta']}" for g in got if g["hta"] != "yes"]
        row["hta"] = "yes" if not fails else "no: " + "; ".join(fails)[:160]
        row["hta_s"] = sum(g["hta_s"] or 0 for g in got)
        row["hta_parts"] = list(parts)
        if row.get("ours_s"):
            row["hta_over_ours"] = row["hta_s"] / max(row["ours_s"], 1e-6)
    drop = {p for parts in PARTS.values() for p in parts}
    return [r for r in rows if r["analysis"] not in drop]


def compare(ours: dict | None, hta: dict | None, trace_set: dict) -> dict:
    rows = []
    oa = (ours or {}).get("analyses", {})
    ha = (hta or {}).get("analyses", {})
    for name in dict.fromkeys([*oa, *ha]):
        o, h = oa.get(name), ha.get(HTA_NAME.get(name, name) or "") if hta else None
        if name in PARTS and hta:
            h = None  # filled in from its parts by `fold`
        row = {
            "analysis": name,
            "ours": "yes" if o and o["ok"] else f"no: {o['error'][:120]}" if o else "-",
            "hta": "yes" if h and h["ok"] else (f"no: {h['error'][:120]}" if h else "no such analysis" if hta else "-"),
            "ours_s": o["s"] if o else None,
            "hta_s": h["s"] if h else None,
        }
        fig = FIGURES.get(name)
        if fig and o and o["ok"]:
            try:
                mine, theirs, what = fig(o["result"], h["result"] if h and h["ok"] else None)
                agree = None if name in UNLIKE else _close(mine, theirs)
                row.update({"figure": what, "ours_value": mine, "hta_value": theirs, "agree": agree})
            except (KeyError, TypeError, IndexError) as e:
                row["figure_error"] = f"{type(e).__name__}: {e}"
        if row["ours_s"] and row["hta_s"]:
            row["hta_over_ours"] = row["hta_s"] / max(row["ours_s"], 1e-6)
        rows.append(row)
    out = {"analyses": fold(rows)}
    if ours:
        out["ours_load_s"] = ours.get("load", {}).get("s")
        out["ours_max_rss_mb"] = ours.get("max_rss_mb")
    if hta:
        out["hta_load_s"] = hta.get("load", {}).get("s")
        out["hta_max_rss_mb"] = max(hta.get("max_rss_mb") or 0, hta.get("children_max_rss_mb") or 0)
        if not hta.get("load", {}).get("ok", True):
            out["hta_load_error"] = hta["load"].get("error")
    if "straggler" in trace_set:
        out["planted_straggler"] = trace_set["straggler"]
    return out


if __name__ == "__main__":  # re-fold a results file written before `fold` existed
    import json
    import sys

    path = sys.argv[1]
    with open(path) as f:
        report = json.load(f)
    for entry in report["sets"].values():
        entry["analyses"] = fold(entry["analyses"])
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=str)
