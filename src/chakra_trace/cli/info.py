"""`chakra info`: what a trace (or every rank of a workload) holds."""

from __future__ import annotations

import os
from typing import Any

import click

from ..analyze.summary import TraceSummary, summarize
from ..table import Column, Table
from .common import TABLE_ROWS, cell, console, json_option, open_workload, print_json, show

_NO_TYPE = "no comm_type"  # (the row of collectives without a type)


@click.command()
@click.argument("path", metavar="WORKLOAD")
@json_option
def info(path: str, as_json: bool) -> None:
    """Counts by node type, edges, collectives by type and group, and time span.

    WORKLOAD is a `.et` file (plain or gzip), the prefix of a workload's `<prefix>.<rank>.et` files, a
    folder holding one job, or a `chakra collect` folder.
    """
    w = open_workload(path)
    summaries = {r: summarize(t) for r, t in w.traces.items()}
    if os.path.isfile(path) and len(summaries) == 1:  # (a merged file holds a whole job)
        (s,) = summaries.values()
        print_json(s.to_dict()) if as_json else _print_trace(path, s)
    elif as_json:
        print_json({"ranks": {str(r): s.to_dict() for r, s in summaries.items()}})
    else:
        _print_workload(path, summaries)


def _print_trace(path: str, s: TraceSummary) -> None:
    con = console()
    con.print(
        f"[bold]{cell(path)}[/bold]: {s.nodes:,} nodes, {s.data_edges:,} data edges, {s.ctrl_edges:,} control edges"
    )
    if s.metadata:
        con.print("metadata: " + ", ".join(f"{k}={v}" for k, v in s.metadata.items()), markup=False)
    show(Table({"type": list(s.node_types), "count": list(s.node_types.values())}, title="node types"))
    if s.collectives_by_group or s.point_to_point or s.collectives_missing_type:
        colls = [
            (g or "(all ranks)", k, v) for g, by_type in s.collectives_by_group.items() for k, v in by_type.items()
        ]
        shown = colls[:TABLE_ROWS]
        rows: list[tuple[str, str, dict[str, Any]]] = [*shown, *(("", k, v) for k, v in s.point_to_point.items())]
        if s.collectives_missing_type:
            rows.append(("", _NO_TYPE, {"count": s.collectives_missing_type, "bytes": None}))
        comm = Table(
            {
                "group": [g for g, _, _ in rows],
                "type": [k for _, k, _ in rows],
                "count": [v["count"] for _, _, v in rows],
                "bytes": [v["bytes"] for _, _, v in rows],
            },
            missing="",
        )
        note = (
            f" (first {TABLE_ROWS:,} of {len(colls):,} group and type rows; --json lists all)"
            if len(colls) > len(shown)
            else ""
        )
        show(comm, title="communication" + note, limit=None, styles={"type": {_NO_TYPE: "yellow"}})
    span = f"{s.start_us:,} .. {s.end_us:,} µs (span {s.span_us:,} µs)" if s.span_us is not None else "no start times"
    con.print(f"time: {span}; sum of durations {s.total_duration_us:,} µs; {s.cpu_ops:,} CPU ops")


def _print_workload(prefix: str, summaries: dict[int, TraceSummary]) -> None:
    ss = list(summaries.values())

    def nodes(kind: str) -> list[int]:
        return [s.node_types.get(kind, 0) for s in ss]

    t = Table(
        {
            "rank": list(summaries),
            "nodes": [s.nodes for s in ss],
            "COMP": nodes("COMP_NODE"),
            "COLL": nodes("COMM_COLL_NODE"),
            "SEND": nodes("COMM_SEND_NODE"),
            "RECV": nodes("COMM_RECV_NODE"),
            "collective bytes": [sum(v["bytes"] for v in s.collectives.values()) for s in ss],
            "data edges": [s.data_edges for s in ss],
            "span µs": [s.span_us for s in ss],
        },
        title=f"{prefix}: {len(summaries)} ranks",
        spec={"rank": Column(align="left", format=str)},
        missing="",
    )
    show(t, what="ranks")
