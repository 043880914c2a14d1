"""`chakra report`: every analysis of one workload, and of its simulations on hypothetical
systems, gathered into a document (`chakra_trace.document`) rendered as one offline HTML file.

The document is plain data (sections of typed blocks), so what the report says is testable
without a browser and the renderer knows nothing about traces.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..analyze import Analysis
from ..analyze.roofline import DeviceSpec, default_device, device_spec
from ..document import table, why_section, write_html
from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.resources import HOST_GAP
from ..sweep import pareto, sensitivity
from ..sweep.results import load_results, read_meta
from .report_device import device_section
from .report_sections import (
    group_ranks,
    host_note,
    network_section,
    steps_section,
    systems_section,
    validation_section,
)
from .timeline import build_timeline

_MAX_HEAT_ROWS = 120
_MAX_HEAT_COLS = 128
_MAX_PATH_ROWS = 300


def build_report(
    job: Analysis | Workload,
    *,
    simulations: dict | None = None,
    systems: dict | None = None,
    failed: dict[str, str] | None = None,
    title: str | None = None,
    device: str | DeviceSpec | None = None,
    peak_tflops: float | None = None,
    mem_bw_gbps: float | None = None,
    max_timeline_events: int = 60_000,
    progress: Callable[[int], None] | None = None,
    sweep: str | os.PathLike | None = None,
) -> dict:
    """The report document. ``simulations``: {label: SimResult} of this workload (or of its
    data-parallel scale-out) on other systems; ``systems``: {label: SystemPreset} that describe
    them; ``failed``: {label: why} of systems that could not be simulated (each gets a section
    saying why); ``device``/``peak_tflops``/``mem_bw_gbps``: the roofline device as `device_spec`
    takes it (none: `default_device`); ``progress``: called with 1 after each section; ``sweep``: a
    `chakra sweep` results folder, shown as its Pareto front and sensitivity. ``job``: an
    `Analysis` (opened from a path, its device section reads the job's Kineto traces where it has
    them: `Analysis.timeline`) or a workload in memory."""
    rec = Analysis.of(job)
    workload = rec.workload
    timed = rec.nodes_timed
    sims = simulations or {}
    presets = systems or {}
    tick: Callable[..., None] = progress or (lambda n=1: None)
    sims_a = {label: Analysis(_workload_of(res, workload), res) for label, res in sims.items()}
    makers: list[Callable[..., dict]] = [lambda: _summary(rec, timed, sims), lambda: validation_section(workload, sims)]
    if timed:
        makers += [
            lambda: steps_section(rec),
            lambda: _breakdown_section("breakdown", "Breakdown (recorded)", rec.breakdown()),
            lambda: _path_section("critical-path", "Critical path (recorded)", rec),
            lambda: _top_section("top-ops", "Top operations (recorded)", rec),
        ]
    else:
        why = "the workload has no recorded start times (all 0); simulate it (--simulate SYSTEM) for times"
        makers += [lambda: why_section("breakdown", "Breakdown (recorded)", why)]
    if sims or timed:
        makers.append(lambda: systems_section(rec, sims, presets, timed))
    for i, label in enumerate(sims):

        def sim_sections(i=i, label=label) -> list[dict]:
            sim, res = sims_a[label], sims[label]
            out = [
                _breakdown_section(f"sim{i}-breakdown", f"Breakdown on {label} (simulated)", sim.breakdown()),
                _path_section(f"sim{i}-critical-path", f"Critical path on {label} (simulated)", sim),
                network_section(f"sim{i}-network", label, res, presets.get(label)),
            ]
            if not timed and i == 0:
                out.append(_top_section("top-ops", f"Top operations on {label} (simulated)", sim))
            return out

        makers.append(sim_sections)  # type: ignore[arg-type]
    for i, (label, why) in enumerate((failed or {}).items()):
        makers.append(lambda i=i, label=label, why=why: why_section(f"simfail{i}", f"Simulation on {label}", why))
    makers += [
        lambda: _collectives_section(rec),
        lambda: _matrix_section(rec),
        lambda: _roofline_section(rec, device, peak_tflops, mem_bw_gbps),
    ]
    if rec.timed:
        makers.append(lambda: device_section(rec.devices()))
    if sweep is not None:
        makers.append(lambda: _sweep_section(sweep))
    if timed:
        makers.append(lambda: _timeline_section("timeline", "Timeline (recorded)", rec, None, max_timeline_events))
    for i, (label, res) in enumerate(sims.items()):
        makers.append(
            lambda i=i, label=label, res=res: _timeline_section(
                f"sim{i}-timeline", f"Timeline on {label} (simulated)", sims_a[label], res, max_timeline_events
            )
        )
    sections: list[dict] = []
    for make in makers:
        out = make()
        sections.extend(out if isinstance(out, list) else [out])
        tick(1)
    return {
        "title": title or "chakra-trace report",
        "subtitle": _describe(workload),
        "generated": _dt.datetime.now().isoformat(timespec="seconds"),
        "sections": sections,
    }


def report_parts(
    job: Analysis | Workload, simulations: dict | None = None, failed: dict | None = None, sweep=None
) -> int:
    """How many times `build_report` calls ``progress`` (its sections, a system's counting once
    but for its timeline, a failed system once): the total of a progress bar."""
    rec = Analysis.of(job)
    timed = rec.nodes_timed
    n = len(simulations or {})
    parts = 2 + (4 if timed else 1) + (1 if n or timed else 0) + n + len(failed or {}) + 3 + (1 if timed else 0) + n
    return parts + (sweep is not None) + rec.timed


def write_report(job: Analysis | Workload, path: str | os.PathLike, **kw) -> Path:
    """Build the report and write it as one self-contained HTML file (atomically)."""

    return write_html(build_report(job, **kw), path)


# ------------------------------------------------------------------------------- sections


def _describe(w: Workload) -> str:
    nodes = sum(len(t) for t in w.traces.values())
    return f"{len(w)} rank{'s' if len(w) != 1 else ''}, {nodes:,} nodes"


def _workload_of(res, workload: Workload) -> Workload:
    return Workload(dict(res.traces)) if res.traces else workload


def _summary(rec: Analysis, timed: bool, sims: dict) -> dict:
    w = rec.workload
    counts: dict[str, int] = {}
    for t in w.traces.values():
        for k, v in t.node_type_counts().items():
            counts[k] = counts.get(k, 0) + v
    items = [["ranks", len(w)], ["nodes", sum(counts.values())]]
    items += [[k.replace("_NODE", "").lower() + " nodes", v] for k, v in sorted(counts.items())]
    stats = rec.collective_stats()
    items.append(["collective instances", len({(r["group"], r["index"]) for r in stats.records})])
    items.append(["collective bytes (all ranks)", _bytes(sum(r["bytes"] for r in stats.records))])
    blocks = []
    try:
        path = rec.critical_path() if timed else None
    except ChakraError as e:
        path = None
        items.append(["critical path", f"not computed: {e}"])
    if path is not None:
        n = rec.steps().steps
        items.append([f"recorded time ({n} step{'s' * (n != 1)}, whole job)", _us(path.recording_ns / 1000)])
        if n > 1:  # (the whole job's span over its steps: the ranks' start skew is in it)
            items.append(["recorded time per step (whole job / steps)", _us(path.recording_ns / 1000 / n)])
        top = next(iter(path.by_rank().items()), None)
        if top:
            items.append(["rank most on the critical path", f"{top[0]} ({top[1] / max(path.length_ns, 1):.0%})"])
    imb = rec.imbalance()
    items.append(["imbalanced collectives", f"{len(imb.imbalanced)} of {imb.checked}"])
    blocks.append({"type": "kv", "items": items})
    if sims:
        rows = []
        base = path.recording_ns if path is not None else None
        for label, res in sims.items():
            b = np.asarray(res.exposed_comm_ns)
            worst = int(np.argmax(b)) if b.size else 0  # (the NPU with most exposed comm: its split)
            rows.append(
                {
                    "system": label,
                    "npus": int(res.finish_ns.size),
                    "step_us": res.recording_ns / 1000,
                    "vs_recorded": res.recording_ns / base if base else None,
                    "exposed_comm_us": float(b.max()) / 1000 if b.size else 0.0,
                    "exposed_transfer_us": float(res.exposed_transfer_ns[worst]) / 1000 if b.size else 0.0,
                    "exposed_peer_wait_us": float(res.exposed_peer_wait_ns[worst]) / 1000 if b.size else 0.0,
                    "collectives": len(res.collectives),
                    "mode": res.mode,
                }
            )
        blocks.append(
            table(
                "simulated systems",
                [
                    ("system", "system", "str"),
                    ("npus", "NPUs", "int"),
                    ("step_us", "whole recording", "us"),
                    ("vs_recorded", "vs recorded", "float"),
                    ("exposed_comm_us", "max exposed comm", "us"),
                    ("exposed_transfer_us", "of it: transfer", "us"),
                    ("exposed_peer_wait_us", "of it: waiting for peers", "us"),
                    ("collectives", "collectives", "int"),
                    ("mode", "model", "str"),
                ],
                rows,
            )
        )
        # one rank's trace of a bigger job: the ranks it lacks were taken as copies (`simulate.peers`)
        for said in dict.fromkeys(res.assumption for res in sims.values() if res.assumption):
            blocks.append({"type": "text", "text": f"simulation assumption: {said}"})
        for res in sims.values():
            for msg in [w for w in res.warnings if w != res.assumption][:5]:
                blocks.append({"type": "text", "text": f"simulation note: {msg}"})
    return {"id": "summary", "title": "Summary", "blocks": blocks}


_BD_KEYS = ("span_us", "compute_us", "comm_us", "overlap_us", "exposed_comm_us", "other_us", "idle_us")
_SPLIT_KEYS = ("transfer_us", "peer_wait_us", "exposed_transfer_us", "exposed_peer_wait_us")


def _breakdown_section(sid: str, title: str, bd) -> dict:
    """Stacked bars and a table per rank; ranks whose figures agree within 0.1% are one row
    with their count (a scaled-out job's 64 identical ranks are one or two rows)."""
    keys = _BD_KEYS + (_SPLIT_KEYS if bd.rows and all(k in bd.rows[0] for k in _SPLIT_KEYS) else ())
    groups = group_ranks(bd.rows, keys)
    note = f"{len(bd.rows)} ranks"
    if len(groups) > 64:  # thousands of distinct ranks: the distribution, not one bar each
        arr = {k: np.array([r[k] for r in bd.rows], float) for k in keys}
        shown: list[dict] = [
            {"label": label, "ranks": label, "count": len(bd.rows), **{k: float(fn(arr[k])) for k in keys}}
            for label, fn in (("min", np.min), ("median", np.median), ("max", np.max))
        ]
        note += f" in {len(groups)} distinct groups: their min, median and max"
    else:
        shown = [dict(g, label=g["ranks"] + (f" (x{g['count']})" if g["count"] > 1 else "")) for g in groups]
        if len(groups) < len(bd.rows):
            note += f", {len(groups)} distinct (ranks within 0.1% of each other are one row, with their count)"
    series = [
        ("compute only", [r["compute_us"] - r["overlap_us"] for r in shown]),
        ("compute + comm", [r["overlap_us"] for r in shown]),
        *(
            [
                ("exposed comm: transfer", [r["exposed_transfer_us"] for r in shown]),
                ("exposed comm: waiting for peers", [r["exposed_peer_wait_us"] for r in shown]),
            ]
            if "exposed_peer_wait_us" in keys
            else [("exposed comm", [r["exposed_comm_us"] for r in shown])]
        ),
        ("other (busy, neither)", [r["other_us"] for r in shown]),
        ("idle", [r["idle_us"] for r in shown]),
    ]
    cols = [
        ("ranks", "ranks", "str"),
        ("count", "count", "int"),
    ] + [(k, k.replace("_us", "").replace("peer_wait", "waiting for peers").replace("_", " "), "us") for k in keys]
    return {
        "id": sid,
        "title": title,
        "blocks": [
            {
                "type": "text",
                "text": f"{note}. Over the whole recording: compute + comm - overlap + other + idle = span; "
                '"other" is time busy with neither compute nor communication (host work, memory '
                "nodes). Communication is transfer (after the last peer arrived) plus waiting for peers (arrival "
                "skew, which no faster network removes); so is exposed comm. Each cell carries its own unit.",
            },
            {
                "type": "bars",
                "title": "where each rank's time goes",
                "unit": "µs",
                "stacked": True,
                "categories": [r["label"] for r in shown],
                "series": [{"name": n, "values": [float(v) for v in vals]} for n, vals in series],
            },
            table("per rank", cols, shown, max_rows=32),
        ],
    }


def _path_section(sid: str, title: str, a: Analysis) -> dict:
    try:
        path = a.critical_path()
    except ChakraError as e:
        return {"id": sid, "title": title, "blocks": [{"type": "text", "text": str(e)}]}
    length = max(path.length_ns, 1)
    by_rank = path.by_rank()
    items = [
        ["length", _us(path.length_ns / 1000)],
        ["job span (whole recording)", _us(path.recording_ns / 1000)],
        ["unexplained waits", _us(path.wait_ns / 1000)],
        [
            "before the path: start skew",
            f"{_us(path.start_skew_ns / 1000)} (rank {path.start_rank} vs rank {path.first_rank})",
        ],
        ["before the path: gap on its first rank", _us(path.lead_gap_ns / 1000)],
        ["length + start skew + gap", _us(path.accounted_ns / 1000)],
        ["operations on the path", len(path)],
        ["rank that finishes last", path.last_rank],
        ["ranks on the path", ", ".join(f"{r}: {v / length:.0%}" for r, v in list(by_rank.items())[:8])],
    ]
    kinds = path.by_kind()
    c = path.columns
    top = np.argsort(-c["time_ns"], kind="stable")[:_MAX_PATH_ROWS]  # a path can have millions of ops
    rows = [
        {
            "rank": r,
            "name": n,
            "kind": k,
            "start_us": s / 1000,
            "time_us": t / 1000,
            "share": t / length,
            "wait_us": w / 1000,
            "via": v,
            "gated_by": g if g >= 0 else None,
        }
        for r, n, k, s, t, w, v, g in zip(
            *(
                c[x][top].tolist()
                for x in ("rank", "name", "kind", "start_ns", "time_ns", "wait_ns", "via", "gated_by_rank")
            )
        )
    ]
    return {
        "id": sid,
        "title": title,
        "blocks": [
            {
                "type": "text",
                "text": "The chain of operations, across ranks, that sets the step time: walked back "
                "from the operation that ends last to whatever it waited for (a dependency, "
                "its resource, or the last member to reach a collective).",
            },
            {"type": "kv", "items": items},
            *([note] if (note := _host_on(path.columns["name"], a.workload)) else []),
            {
                "type": "bars",
                "title": "critical path by resource",
                "unit": "µs",
                "stacked": True,
                "categories": ["path"],
                "series": [{"name": k, "values": [v / 1000]} for k, v in kinds.items() if v],
            },
            table(
                f"operations on the critical path, longest first ({len(rows)} of {len(path)})",
                [
                    ("rank", "rank", "int"),
                    ("name", "operation", "str"),
                    ("kind", "resource", "str"),
                    ("start_us", "start", "us"),
                    ("time_us", "time on path", "us"),
                    ("share", "share", "pct"),
                    ("wait_us", "wait before", "us"),
                    ("via", "waited for", "str"),
                    ("gated_by", "last to arrive", "int"),
                ],
                rows,
                max_rows=25,
            ),
        ],
    }


def _top_section(sid: str, title: str, a: Analysis) -> dict:
    cols = [
        ("name", "operation", "str"),
        ("type", "type", "str"),
        ("count", "count", "int"),
        ("total_us", "total", "us"),
        ("mean_us", "mean", "us"),
        ("exposed_us", "exposed", "us"),
        ("exposed_share", "of step", "pct"),
    ]
    return {
        "id": sid,
        "title": title,
        "blocks": [
            {
                "type": "text",
                "text": "Exposed time is the part of an operation on the critical path: what the step "
                "would lose if the operation got faster.",
            },
            *([note] if (note := host_note(a.workload)) else []),
            table("by exposed time", cols, a.top_ops(by="exposed", n=30).rows, max_rows=15),
            table("by total time", cols, a.top_ops(by="total", n=30).rows, max_rows=15),
        ],
    }


def _collectives_section(a: Analysis) -> dict:
    stats = a.collective_stats()
    blocks: list[dict] = []
    if not stats.records:
        return {"id": "collectives", "title": "Collectives", "blocks": [{"type": "text", "text": "no collectives"}]}
    blocks.append(
        table(
            "per group, type and rank",
            [
                ("group", "group", "str"),
                ("type", "type", "str"),
                ("rank", "rank", "int"),
                ("count", "count", "int"),
                ("bytes", "bytes", "bytes"),
                ("time_us", "time", "us"),
                ("transfer_us", "transfer", "us"),
                ("wait_us", "waiting for peers", "us"),
                ("algbw_GBps", "algbw GB/s (transfer)", "float"),
                ("busbw_GBps", "busbw GB/s (transfer)", "float"),
            ],
            [dict(s, group=s["group"] or "all") for s in stats.summary()],
            max_rows=24,
        )
    )
    imb = a.imbalance()
    blocks.append(
        {
            "type": "text",
            "text": f"{imb.checked} collective instances checked, {len(imb.imbalanced)} "
            "move different bytes on different ranks"
            + (
                ": ranks standing out (instances): " + ", ".join(f"{r} ({n})" for r, n in imb.by_rank().items())
                if imb.imbalanced
                else "."
            ),
        }
    )
    blocks.append(_imbalance_heatmap(stats, imb))
    if imb.imbalanced:
        blocks.append(
            table(
                "imbalanced instances",
                [
                    ("instance", "instance", "str"),
                    ("outliers", "ranks that differ", "str"),
                    ("median", "median", "bytes"),
                    ("spread", "max/min", "float"),
                ],
                [
                    {
                        "instance": f"{x.group or 'all'}#{x.index} {x.type}",
                        "outliers": ", ".join(map(str, x.outliers)),
                        "median": x.median,
                        "spread": None if x.spread == float("inf") else x.spread,
                    }
                    for x in imb.imbalanced
                ],
                max_rows=20,
            )
        )
    return {"id": "collectives", "title": "Collectives and imbalance", "blocks": blocks}


def _imbalance_heatmap(stats, imb) -> dict:
    """Bytes of every collective instance on every rank over the instance's median: 1 is
    balanced. Imbalanced instances come first when there are too many to show."""
    inst: dict[tuple[str, int], dict] = {}
    for r in stats.records:
        inst.setdefault((r["group"], r["index"]), {"type": r["type"], "bytes": {}})["bytes"][r["rank"]] = r["bytes"]
    bad = {(x.group, x.index) for x in imb.imbalanced}
    keys = sorted(inst, key=lambda k: (k not in bad, k))[:_MAX_HEAT_ROWS]
    keys.sort()
    ranks = sorted({r for k in keys for r in inst[k]["bytes"]})[:_MAX_HEAT_COLS]
    values = []
    for k in keys:
        b = inst[k]["bytes"]
        med = float(np.median(list(b.values()))) or 1.0
        values.append([b[r] / med if r in b else None for r in ranks])
    return {
        "type": "heatmap",
        "title": "message size / instance median (1 = balanced)",
        "x": [str(r) for r in ranks],
        "y": [f"{g or 'all'}#{i} {inst[(g, i)]['type']}" for g, i in keys],
        "values": values,
        "unit": "x median",
        "scale": "linear",
        "center": 1.0,
    }


def _matrix_section(a: Analysis) -> dict:
    m = a.communication_matrix()
    ranks = m.ranks[:_MAX_HEAT_COLS]
    vals = m.bytes[: len(ranks), : len(ranks)]
    return {
        "id": "matrix",
        "title": "Communication matrix",
        "blocks": [
            {
                "type": "text",
                "text": "Bytes each rank sends to each other rank: collectives as rings over their "
                "groups (the simulator's pattern), all_to_allv by its recorded splits, and "
                "point-to-point sends.",
            },
            {
                "type": "heatmap",
                "title": "bytes sent (rows: from, columns: to)",
                "x": [str(r) for r in ranks],
                "y": [str(r) for r in ranks],
                "values": [[float(v) if v else None for v in row] for row in vals.tolist()],
                "unit": "bytes",
                "scale": "log",
                "center": None,
            },
        ],
    }


def _roofline_section(a: Analysis, device, peak_tflops: float | None, mem_bw_gbps: float | None) -> dict:
    title = "Roofline"
    try:
        if device is None and (peak_tflops is None or mem_bw_gbps is None):
            dev = default_device(a.workload)
            if peak_tflops is not None or mem_bw_gbps is not None:
                dev = device_spec(dev, peak_tflops=peak_tflops, mem_bw_gbps=mem_bw_gbps)
        else:
            dev = device_spec(device, peak_tflops=peak_tflops, mem_bw_gbps=mem_bw_gbps)
    except ChakraError as e:
        return why_section("roofline", title, f"no roofline device: {e}")
    roof = a.roofline(dev)
    ok = np.isfinite(roof.achieved_flops) & (roof.achieved_flops > 0)
    if not ok.any():
        return why_section(
            "roofline",
            title,
            "no compute op has both a FLOP count (num_ops), a byte count (tensor_size) and a recorded duration",
        )
    x, y = roof.intensity[ok], roof.achieved_flops[ok]
    names, index = np.unique(roof.name[ok].astype(str), return_inverse=True)
    compute = (roof.bound[ok] == "compute").astype(int)
    pts = [[float(a_), float(b_), int(i), int(g)] for a_, b_, i, g in zip(x, y, index, compute)]
    dev = roof.device
    lo, hi = float(x.min()) / 4, max(float(x.max()) * 4, dev.ridge * 4)
    line = [[lo, min(dev.peak_flops, dev.mem_bw * lo)], [dev.ridge, dev.peak_flops], [hi, dev.peak_flops]]
    cov = roof.coverage
    return {
        "id": "roofline",
        "title": title,
        "blocks": [
            {
                "type": "text",
                "text": f"Device: {dev.name} (peak {dev.peak_flops / 1e12:,.3g} TFLOP/s, memory "
                f"{dev.mem_bw / 1e9:,.4g} GB/s; --device, --peak-tflops, --mem-bw-gbps choose it). Ops with FLOP and byte counts: {int(ok.sum()):,} timed of "
                f"{cov.get('comp_nodes', len(roof)):,} compute nodes. Achieved FLOP/s uses each "
                "op's recorded duration.",
            },
            {
                "type": "scatter",
                "title": "achieved FLOP/s vs arithmetic intensity",
                "x_label": "FLOP / byte",
                "y_label": "FLOP/s",
                "log_x": True,
                "log_y": True,
                "points": pts[:20_000],
                "labels": names.tolist(),
                "groups": ["memory", "compute"],
                "lines": [{"name": "roof", "points": line}],
            },
        ],
    }


def _sweep_section(folder: str | os.PathLike) -> dict:
    """A sweep's points as step time against cost with its Pareto front, and which axis moves
    the step time (`chakra sweep`); against energy too where the rows have it."""
    title = f"Design-space sweep ({Path(folder).name})"
    rows = load_results(folder)
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        return why_section("sweep", title, "no point of the sweep simulated successfully")
    front = pareto(ok)
    axes = [a for a in read_meta(folder).get("axes", []) if a in ok.columns]
    unit = "USD" if ok["cost_usd"].notna().all() else "NPU-s"
    on_front = set(front["point_id"])
    pts = [
        [float(x), float(y), None, int(pid in on_front)]
        for x, y, pid in zip(ok["step_s"] * 1e6, ok["cost"], ok["point_id"])
    ]
    sens = sensitivity(ok, axes=axes)
    blocks: list[dict] = [
        {
            "type": "text",
            "text": f"{len(rows):,} points ({len(rows) - len(ok):,} failed) over {', '.join(axes) or 'no axes'}; "
            f"cost per step in {unit}.",
        },
        {
            "type": "scatter",
            "title": f"step time vs cost per step ({unit}), each point of the sweep",
            "x_label": "step (µs)",
            "y_label": f"cost ({unit})",
            "log_x": True,
            "log_y": True,
            "points": pts,
            "groups": ["dominated", "Pareto front"],
        },
        table(
            "Pareto front of each workload: no other point of that workload is both faster and cheaper",
            [(a, a, "str") for a in axes] + [("step_us", "step", "us"), ("cost", f"cost ({unit})", "float")],
            [
                {**{a: str(r[a]) for a in axes}, "step_us": float(r["step_s"]) * 1e6, "cost": float(r["cost"])}
                for _, r in front.iterrows()
            ],
            max_rows=50,
        ),
        table(
            "sensitivity: each axis's main-effect share of the variance of the step time relative to its workload's mean",
            [
                ("axis", "axis", "str"),
                ("levels", "levels", "int"),
                ("share", "share", "pct"),
                ("best_level", "best level", "str"),
                ("best_rel", "mean step there (x its workload's mean)", "float"),
                ("worst_rel", "at the worst level", "float"),
            ],
            [
                {
                    "axis": r["axis"],
                    "levels": int(r["levels"]),
                    "share": float(r["share"]),
                    "best_level": r["best_level"],
                    "best_rel": float(r["best_rel"]),
                    "worst_rel": float(r["worst_rel"]),
                }
                for _, r in sens.iterrows()
            ],
        ),
    ]
    blocks.extend(_sweep_energy_blocks(ok, axes))
    return {"id": "sweep", "title": title, "blocks": blocks}


def _sweep_energy_blocks(ok, axes: list[str]) -> list[dict]:
    """Step time against energy per step and its Pareto front, where the rows have energy."""
    if "energy_j" not in ok.columns or not (ok["energy_j"] > 0).any():
        return []
    e = ok[ok["energy_j"] > 0]
    front = pareto(e, y="energy_j")
    on_front = set(front["point_id"])
    devices = ", ".join(sorted(set(e["energy_device"].astype(str)))) if "energy_device" in e.columns else "?"
    pts = [
        [float(x), float(y), None, int(pid in on_front)]
        for x, y, pid in zip(e["step_s"] * 1e6, e["energy_j"], e["point_id"])
    ]
    cols = [(a, a, "str") for a in axes] + [
        ("step_us", "step", "us"),
        ("energy_j", "energy (J)", "float"),
        ("avg_power_w", "avg power (W)", "float"),
        ("perf_per_w", "steps/J", "float"),
        ("compute", "compute", "pct"),
        ("comm", "communication", "pct"),
        ("idle", "idle", "pct"),
    ]
    rows = [
        {
            **{a: str(r[a]) for a in axes},
            "step_us": float(r["step_s"]) * 1e6,
            "energy_j": float(r["energy_j"]),
            "avg_power_w": float(r["avg_power_w"]),
            "perf_per_w": float(r["perf_per_w"]),
            "compute": float(r["energy_compute_j"]) / float(r["energy_j"]),
            "comm": float(r["energy_comm_j"]) / float(r["energy_j"]),
            "idle": float(r["energy_idle_j"]) / float(r["energy_j"]),
        }
        for _, r in front.iterrows()
    ]
    return [
        {
            "type": "scatter",
            "title": f"step time vs energy per step (J; power of {devices}), each point of the sweep",
            "x_label": "step (µs)",
            "y_label": "energy (J)",
            "log_x": True,
            "log_y": True,
            "points": pts,
            "groups": ["dominated", "Pareto front"],
        },
        table(
            "Pareto front of each workload on step time and energy (simulate.energy's model)",
            cols,
            rows,
            max_rows=50,
        ),
    ]


def _timeline_section(sid: str, title: str, a: Analysis, result, max_events: int) -> dict:
    """The timeline as `timeline()` exports it (the block's download saves exactly that
    document), with the critical path's part of each slice on it to outline."""
    tl = build_timeline(a.workload, result, max_events=max_events)
    try:
        path = a.critical_path()
    except ChakraError:
        path = None
    highlight = []
    if path is not None and len(tl) and len(path):
        # a path operation is the slice of its (rank, trace row); slice i is the trace's i-th "X" event
        pids = np.array([t["pid"] for t in tl.tracks], np.int64)[tl.track]
        width = int(max(tl.row.max(), path.columns["row"].max())) + 1
        keys = pids * width + tl.row
        order = np.argsort(keys, kind="stable")
        c = path.columns
        want = c["rank"] * width + c["row"]
        pos = np.minimum(np.searchsorted(keys[order], want), len(tl) - 1)
        found = keys[order][pos] == want
        highlight = [
            [i, p0 / 1000, t / 1000]
            for i, p0, t in zip(
                order[pos][found].tolist(), c["path_start_ns"][found].tolist(), c["time_ns"][found].tolist()
            )
        ]
    block = {"type": "timeline", "trace": tl.to_chrome(), "highlight": highlight}
    note = "Scroll to zoom, drag to pan; the critical path is outlined."
    if tl.metadata.get("capped"):
        note += f" Only part is shown: {tl.metadata['note']}."
    return {"id": sid, "title": title, "blocks": [{"type": "text", "text": note}, block]}


def _host_on(names, workload) -> dict | None:
    """The `[host]` note when the critical path goes through [host] nodes."""
    return host_note(workload) if HOST_GAP in set(np.asarray(names).tolist()) else None


def _us(v: float) -> str:
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:,.3f} {unit}"
    return f"{v:,.1f} µs"


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{int(n):,} B"
