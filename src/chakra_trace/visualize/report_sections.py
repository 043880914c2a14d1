"""The report's sections about steps, validation and the simulated systems: per recorded step,
what `chakra validate` finds, each system described and set beside the recording, and its
network (collective time and bandwidth by message size, utilization per dimension).

Each returns a section of the report's document (see `chakra_trace.document`); a section that cannot be computed says why
in its place.
"""

from __future__ import annotations

import numpy as np

from ..analyze import Analysis
from ..analyze.collectives import bus_factor
from ..document import table, why_section
from ..errors import ChakraError
from ..schema.enums import NodeType
from ..schema.resources import HOST_GAP, comm_mask, compute_mask, host_gap_mask
from ..simulate.utilization import dimension_utilization, phase_bytes
from ..validate import validate_workload

#: What a `[host]` node is, wherever the report shows one.
HOST_NOTE = (
    f"{HOST_GAP}: time the host spent between recorded ops, outside any of them (Python, the "
    "data loader, framework overhead); the converter keeps these gaps as nodes so that the "
    "step adds up. Time a thread sat blocked in a collective is not in them: it is a dependency "
    "on the collective."
)
_TOL = 1e-3  # ranks whose every figure agrees within 0.1% are shown as one row


def host_note(workload) -> dict | None:
    """The `[host]` note with its share of the busy time, or None when the trace has none."""
    total = host = 0
    for t in workload.traces.values():
        d = t.duration.astype(np.int64)
        total += int(d.sum())
        host += int(d[host_gap_mask(t)].sum())
    if not host:
        return None
    return {"type": "text", "text": f"{HOST_NOTE} Here {host / max(total, 1):.1%} of all recorded op time."}


def _rank_list(ranks: list[int]) -> str:
    """'0-3, 8, 10-12': runs of consecutive ranks; '0, 2, ..., 62' for an even stride."""
    if len(ranks) > 3 and len(set(np.diff(ranks).tolist())) == 1 and ranks[1] - ranks[0] > 1:
        return f"{ranks[0]}, {ranks[1]}, ..., {ranks[-1]}"
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}" if j > i + 1 else f"{ranks[i]}, {ranks[j]}")
        i = j + 1
    text = ", ".join(out)
    return text if len(text) <= 80 else text[:77] + "..."


def group_ranks(rows: list[dict], keys: tuple[str, ...], tol: float = _TOL) -> list[dict]:
    """Rows of ranks whose `keys` agree within `tol` (relative) merged into one: the first
    rank's figures, with ``ranks`` (which) and ``count`` (how many). Counts sum to len(rows)."""
    groups: list[dict] = []
    reps: list[np.ndarray] = []
    for r in rows:
        v = np.array([float(r[k]) for k in keys])
        for g, rep in zip(groups, reps):
            if np.all(np.abs(v - rep) <= tol * np.maximum(np.maximum(np.abs(v), np.abs(rep)), 1.0)):
                g["_ranks"].append(int(r["rank"]))
                break
        else:
            groups.append({**r, "_ranks": [int(r["rank"])]})
            reps.append(v)
    for g in groups:
        ranks = g.pop("_ranks")
        g["count"] = len(ranks)
        g["ranks"] = _rank_list(ranks)
    return groups


# ------------------------------------------------------------------------------- steps


def steps_section(rec: Analysis) -> dict:
    sid, title = "steps", "Steps (recorded)"
    sb = rec.steps()
    if not sb.rows:
        return why_section(sid, title, "no per-step view: the workload has no recorded start times")
    n = sb.steps
    methods = sorted(set(sb.methods.values()))
    keys = ("span_us", "compute_us", "comm_us", "overlap_us", "exposed_comm_us", "other_us", "idle_us")
    cols = [
        ("rank", "rank", "int"),
        ("step", "step", "str"),
        *((k, k.replace("_us", "").replace("_", " "), "us") for k in keys),
    ]
    steps_of = sorted({r["step"] for r in sb.rows if r["step"] != "all"}, key=int)
    span = {(r["rank"], r["step"]): r["span_us"] for r in sb.rows}
    ranks = sorted({r["rank"] for r in sb.rows})
    whole = {rank: span.get((rank, "all"), 0) for rank in ranks}
    # a bar per rank, each rank's own steps (they add up to its "all"): never one rank's step next to another's
    shown = ranks if len(ranks) <= 8 else [max(ranks, key=lambda k: whole[k])]
    chart = "each step per rank" if len(shown) > 1 else f"each step on rank {shown[0]} (the longest recording)"
    return {
        "id": sid,
        "title": title,
        "blocks": [
            {
                "type": "text",
                "text": f"The recording holds {n} step{'s' * (n != 1)} ({'; '.join(methods)}). "
                'Elsewhere in this report "step" times are of the whole recording (all its steps); '
                'here each step on its own, and the rows "all" are their sums. Times are in the '
                "unit shown in each cell.",
            },
            {
                "type": "bars",
                "title": chart,
                "unit": "µs",
                "categories": [f"step {s}" for s in steps_of] + ["all"],
                "series": [
                    {"name": f"rank {rank}", "values": [span.get((rank, s), 0) for s in steps_of] + [whole[rank]]}
                    for rank in shown
                ],
            },
            table("per rank and step", cols, sb.rows, max_rows=24),
        ],
    }


# ------------------------------------------------------------------------------- validation


def validation_section(workload, sims: dict) -> dict:
    rep = validate_workload(workload)
    blocks: list[dict] = [{"type": "text", "text": f"chakra validate: {rep.summary_line()}."}]
    if rep.issues:
        blocks.append(
            table(
                "findings",
                [
                    ("severity", "severity", "str"),
                    ("code", "check", "str"),
                    ("rank", "rank", "int"),
                    ("count", "count", "int"),
                    ("fixable", "repaired (--fix)", "str"),
                    ("message", "what", "str"),
                ],
                [
                    {
                        "severity": i.severity,
                        "code": i.code,
                        "rank": i.rank,
                        "count": i.count,
                        "fixable": "yes" if i.fixable else "no",
                        "message": i.message,
                    }
                    for i in rep.issues
                ],
                max_rows=20,
            )
        )
    repaired = sorted({m for res in sims.values() for m in res.warnings if "repaired" in m})
    if repaired:
        blocks.append({"type": "text", "text": "Repaired before simulating: " + "; ".join(repaired[:10]) + "."})
    elif sims:
        blocks.append({"type": "text", "text": "The simulations needed no repair."})
    return {"id": "validation", "title": "Validation", "blocks": blocks}


# ------------------------------------------------------------------------------- systems


def _op_classes(trace, durations: np.ndarray) -> dict[str, float]:
    """Total duration (µs) of the compute, [host], collective and other nodes of one rank."""
    comp, comm, host = compute_mask(trace), comm_mask(trace), host_gap_mask(trace)
    meta = trace.types == NodeType.METADATA_NODE
    d = np.maximum(durations.astype(np.float64), 0)
    return {
        "compute": float(d[comp].sum()),
        HOST_GAP: float(d[host].sum()),
        "communication": float(d[comm].sum()),
        "other": float(d[~(comp | comm | host | meta)].sum()),
    }


def _recorded_classes(rec: Analysis) -> dict[str, float]:
    per = [_op_classes(t, t.duration) for t in rec.workload.traces.values() if t.timed]
    return {k: float(np.mean([p[k] for p in per])) for k in per[0]} if per else {}


def _simulated_classes(res) -> dict[str, float]:
    per = []
    for npu, (s, e, _k) in res.nodes.items():
        t = res.traces.get(npu)
        if t is not None and len(t) == len(s):
            per.append(_op_classes(t, np.where(s >= 0, (e - s) / 1000.0, 0.0)))
    return {k: float(np.mean([p[k] for p in per])) for k in per[0]} if per else {}


def _describe_network(p) -> list[dict]:
    if p is None or p.network is None:
        return []
    algs = p.system.all_reduce
    return [
        {
            "dim": f"d{i}",
            "topology": d.topology,
            "npus": d.npus,
            "bandwidth": d.bandwidth,
            "latency_ns": d.latency,
            "all_reduce": algs[i] if i < len(algs) else algs[-1],
        }
        for i, d in enumerate(p.network.dims)
    ]


def systems_section(rec: Analysis, sims: dict, presets: dict, timed: bool) -> dict:
    """Each system described (its network per dimension, collective algorithms), and the
    recording beside every one of them: step and time per op class."""
    blocks: list[dict] = [
        {
            "type": "text",
            "text": '"recorded" is the job as it ran: the baseline each simulated system is set beside. '
            'Step times are of the whole recording (all its steps); "per step" divides by the '
            "steps found in it (see Steps).",
        }
    ]
    for label, res in sims.items():
        p = presets.get(label)
        what = p.description if p is not None else "a system given as files"
        dims = _describe_network(p)
        blocks.append({"type": "text", "text": f"{label}: {what}. {res.finish_ns.size} NPUs, model {res.mode}."})
        if dims:
            blocks.append(
                table(
                    f"{label}: network per dimension",
                    [
                        ("dim", "dimension", "str"),
                        ("topology", "topology", "str"),
                        ("npus", "NPUs", "int"),
                        ("bandwidth", "bandwidth per link (GB/s)", "float"),
                        ("latency_ns", "latency per hop", "ns"),
                        ("all_reduce", "all-reduce algorithm", "str"),
                    ],
                    dims,
                )
            )
    n_steps = rec.steps().steps if timed else 0
    try:
        base_step = rec.critical_path().recording_ns / 1000 if timed else None
    except ChakraError as e:
        base_step = None
        blocks.append({"type": "text", "text": f"No recorded baseline step: {e}."})
    rows = []
    if timed:
        rows.append(_step_row("recorded", base_step, n_steps, None))
    for label, res in sims.items():
        rows.append(_step_row(label, res.recording_ns / 1000, n_steps, base_step))
    blocks.append(
        table(
            "step: recorded and simulated",
            [
                ("system", "system", "str"),
                ("step_us", "whole recording", "us"),
                ("per_step_us", "per step", "us"),
                ("vs", "vs recorded", "float"),
            ],
            rows,
        )
    )
    classes = {"recorded": _recorded_classes(rec)} if timed else {}
    classes.update({label: _simulated_classes(res) for label, res in sims.items()})
    classes = {k: v for k, v in classes.items() if v}
    if classes:
        names = list(next(iter(classes.values())))
        blocks.append(
            {
                "type": "bars",
                "title": "time per op class, mean per rank (whole recording)",
                "unit": "µs",
                "categories": names,
                "series": [{"name": k, "values": [v.get(n, 0.0) for n in names]} for k, v in classes.items()],
            }
        )
        note = host_note(rec.workload)
        if note:
            blocks.append(note)
    return {"id": "systems", "title": "Systems: recorded and simulated", "blocks": blocks}


def _step_row(system: str, step_us: float | None, n_steps: int, base: float | None) -> dict:
    return {
        "system": system,
        "step_us": step_us,
        "per_step_us": step_us / n_steps if step_us is not None and n_steps else None,
        "vs": step_us / base
        if step_us is not None and base
        else (1.0 if base is None and system == "recorded" else None),
    }


# ------------------------------------------------------------------------------- network


def network_section(sid: str, label: str, res, preset) -> dict:
    """Collective time and bus bandwidth against message size on one simulated system, and the
    utilization of each network dimension."""
    title = f"Network on {label} (simulated)"
    if not res.collectives:
        return why_section(sid, title, "no collectives ran on this system")
    net = preset.network if preset is not None else None
    types = sorted({c.type for c in res.collectives})
    pts, bw_pts = [], []
    shape = tuple(d.npus for d in net.dims) if net is not None else ()
    peak = None
    for c in res.collectives:  # transfer time: from the last member's arrival (waits for peers left out)
        t_us = c.transfer_ns / 1000
        g = types.index(c.type)
        pts.append([float(c.bytes), t_us, None, g])
        if t_us > 0 and c.bytes > 0:
            factor = bus_factor(c.type, c.npus)
            bw_pts.append([float(c.bytes), c.bytes / (t_us * 1e3) * factor, None, g])
    blocks: list[dict] = [
        {
            "type": "scatter",
            "title": "collective transfer time vs message size (each instance, last member's arrival to last finish)",
            "x_label": "bytes per member",
            "y_label": "time (µs)",
            "log_x": True,
            "log_y": True,
            "points": pts,
            "groups": types,
        }
    ]
    lines = []
    if net is not None:
        used = {d for c in res.collectives for d in phase_bytes(c, shape)}
        if used:
            peak = min(net.dims[d].bandwidth for d in used)
            xs = [p[0] for p in bw_pts] or [1.0]
            lines.append(
                {"name": f"peak: slowest link crossed, {peak:g} GB/s", "points": [[min(xs), peak], [max(xs), peak]]}
            )
    blocks.append(
        {
            "type": "scatter",
            "title": "achieved bus bandwidth (GB/s, from transfer time) vs message size",
            "x_label": "bytes per member",
            "y_label": "bus bandwidth (GB/s)",
            "log_x": True,
            "log_y": True,
            "points": bw_pts,
            "groups": types,
            "lines": lines,
        }
    )
    blocks.append(
        {
            "type": "text",
            "text": "Bus bandwidth = bytes / time x the algorithm factor (2(n-1)/n for an all-reduce), as "
            "NCCL's tests report it; the peak is the bandwidth of the slowest dimension the "
            "collectives cross. Small messages sit far below it: latency, not bandwidth, sets their time.",
        }
    )
    if net is None:
        blocks.append({"type": "text", "text": "No utilization per dimension: this system has no network model."})
    else:
        util = dimension_utilization(res, net)
        blocks.append(
            table(
                "link utilization per dimension (over the simulated step)",
                [
                    ("dim", "dimension", "int"),
                    ("topology", "topology", "str"),
                    ("npus", "NPUs", "int"),
                    ("bandwidth_GBps", "bandwidth (GB/s)", "float"),
                    ("bytes_per_npu", "sent per NPU", "bytes"),
                    ("utilization", "utilization", "pct"),
                ],
                util,
            )
        )
        blocks.append(
            {
                "type": "text",
                "text": "Utilization = bytes each NPU sends on the dimension (from each collective's phases "
                "and algorithm) / (its link bandwidth x the simulated step).",
            }
        )
    return {"id": sid, "title": title, "blocks": blocks}
