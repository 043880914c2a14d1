"""The report's device section: what each rank's devices (GPU streams, a CPU job's backend
threads, or the Chakra nodes) did, from `analyze.device`: the window by kind, idle time by
cause, kernel time by kind and name, communication overlap, launch delays and stragglers."""

from __future__ import annotations

from ..analyze.device import DeviceAnalysis
from ..document import table, why_section
from ..errors import ChakraError

_SOURCE = {
    "kineto-gpu": "the GPU kernels of the Kineto traces",
    "kineto-cpu": "the Kineto traces of a CPU job (each thread a stream; the backend's worker threads run the collectives)",
    "recorded": "the Chakra nodes at their recorded times (compute on stream 0, communication on 1, memory on 2)",
    "simulated": "the Chakra nodes at their simulated times",
}


def _frac(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """Percent columns (0-100) as the fractions the page's "pct" format takes."""
    return [{**r, **{k: (r[k] / 100.0 if r.get(k) is not None else None) for k in keys}} for r in rows]


def device_section(d: DeviceAnalysis, sid: str = "devices", title: str = "Devices") -> dict:
    try:
        tmp, idle, ker, ov, st = d.temporal(), d.idle(), d.kernels(), d.overlap(), d.stragglers()
        launches = d.launches()
    except ChakraError as e:
        return why_section(sid, title, str(e))
    parts = ("computation", "communication", "memory", "idle")
    window_bars = {
        "type": "bars",
        "title": "each rank's window",
        "unit": "µs",
        "stacked": True,
        "categories": [f"rank {r['rank']}" for r in tmp["ranks"]],
        "series": [{"name": p, "values": [r[f"{p}_us"] for r in tmp["ranks"]]} for p in parts],
    }
    nodes = d.source in ("recorded", "simulated")  # (the Breakdown section splits the same nodes' time per rank)
    blocks: list[dict] = [
        {
            "type": "text",
            "text": f"From {_SOURCE.get(d.source, d.source)}. Each window is split by what ran: computation "
            "before communication before memory where they overlap, so the parts add up to the window"
            + ("; the Breakdown section splits each rank's time, so here only per stream." if nodes else "."),
        },
        *([] if nodes else [window_bars]),
        table(
            "per rank and stream",
            [("rank", "rank", "int"), ("stream_label", "stream", "str"), ("window_us", "window", "us")]
            + [(f"{p}_us", p, "us") for p in parts]
            + [("idle_pct", "idle", "pct")],
            _frac(tmp["streams"], ("idle_pct",)),
            max_rows=40,
        ),
        table(
            "idle time by cause (host wait: the next kernel was launched after the stream went idle; "
            "kernel wait: gaps under the threshold between kernels)",
            [
                ("rank", "rank", "int"),
                ("stream_label", "stream", "str"),
                ("idle_us", "idle", "us"),
                ("host_wait_us", "host wait", "us"),
                ("kernel_wait_us", "kernel wait", "us"),
                ("other_us", "other", "us"),
            ],
            idle["streams"],
            max_rows=40,
        ),  # fmt: skip
        table(
            "time by kind, all ranks (sum of durations)",
            [
                ("kind", "kind", "str"),
                ("count", "count", "int"),
                ("sum_us", "time", "us"),
                ("percentage", "share", "pct"),
            ],
            _frac(ker["kinds_all"], ("percentage",)),
        ),  # fmt: skip
        table(
            "top kernels per rank and kind",
            [
                ("rank", "rank", "int"),
                ("kind", "kind", "str"),
                ("name", "name", "str"),
                ("count", "count", "int"),
                ("sum_us", "time", "us"),
                ("mean_us", "mean", "us"),
                ("percentage", "of kind", "pct"),
            ],
            _frac(ker["kernels"], ("percentage",)),
            max_rows=60,
        ),  # fmt: skip
        table(
            "communication: overlapped by computation, as the device ran it and as the host called it",
            [
                ("rank", "rank", "int"),
                ("device_comm_us", "device comm", "us"),
                ("overlapped_us", "overlapped", "us"),
                ("exposed_comm_us", "exposed", "us"),
                ("comp_comm_overlap_ratio", "overlap", "pct"),
                ("host_calls", "host calls", "int"),
                ("host_call_us", "host call time", "us"),
            ],
            ov["ranks"],
        ),  # fmt: skip
    ]
    if launches.tables.get("ranks"):
        rows = launches["ranks"]
        blocks.append(table("kernel launches", [(k, k.replace("_", " "), _fmt_of(k)) for k in rows[0]], rows))
    if st.tables.get("ranks"):
        blocks.append(
            table(
                f"stragglers: {', '.join(map(str, st.summary.get('stragglers') or [])) or 'none'} "
                "(caused: time the others waited on this rank alone, when it was last to a collective)",
                [
                    ("rank", "rank", "int"),
                    ("instances", "collectives", "int"),
                    ("times_last", "times last", "int"),
                    ("caused_ns", "caused", "ns"),
                    ("caused_frac", "of window", "pct"),
                    ("waited_ns", "waited", "ns"),
                    ("straggler", "straggler", "str"),
                ],
                [{**r, "straggler": "yes" if r["straggler"] else ""} for r in st["ranks"]],
            )  # fmt: skip
        )
    return {"id": sid, "title": title, "blocks": blocks}


def _fmt_of(key: str) -> str:
    if key == "rank" or key.endswith(("count", "kernels", "launches", "outliers")):
        return "int"
    if key.endswith("_us"):
        return "us"
    if key.endswith("_ns"):
        return "ns"
    return "float" if not key.endswith(("note", "label")) else "str"
