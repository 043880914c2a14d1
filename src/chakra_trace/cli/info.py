"""`chakra info`: what a trace (or every rank of a workload) holds."""

from __future__ import annotations

import os

import click
from rich.table import Table

from ..analyze.summary import TraceSummary, summarize
from .common import capped, cell, console, json_option, open_workload, print_json


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
    t = Table(title="node types")
    t.add_column("type")
    t.add_column("count", justify="right")
    for k, v in s.node_types.items():
        t.add_row(k, f"{v:,}")
    con.print(t)
    if s.collectives_by_group or s.point_to_point or s.collectives_missing_type:
        rows = [(g, k, v) for g, by_type in s.collectives_by_group.items() for k, v in by_type.items()]
        rows, note = capped(rows, "group and type rows")
        t = Table(title="communication" + (f" ({note})" if note else ""))
        for c in ("group", "type", "count", "bytes"):
            t.add_column(c, justify="right" if c in ("count", "bytes") else "left")
        for g, k, st in rows:
            t.add_row(cell(g) if g else "(all ranks)", k, f"{st['count']:,}", f"{st['bytes']:,}")
        for k, st in s.point_to_point.items():
            t.add_row("", k, f"{st['count']:,}", f"{st['bytes']:,}")
        if s.collectives_missing_type:
            t.add_row("", "[yellow]no comm_type[/yellow]", f"{s.collectives_missing_type:,}", "")
        con.print(t)
    span = f"{s.start_us:,} .. {s.end_us:,} µs (span {s.span_us:,} µs)" if s.span_us is not None else "no start times"
    con.print(f"time: {span}; sum of durations {s.total_duration_us:,} µs; {s.cpu_ops:,} CPU ops")


def _print_workload(prefix: str, summaries: dict[int, TraceSummary]) -> None:
    shown, note = capped(list(summaries.items()), "ranks")
    t = Table(title=f"{cell(prefix)}: {len(summaries)} ranks" + (f" ({note})" if note else ""))
    for c in ("rank", "nodes", "COMP", "COLL", "SEND", "RECV", "collective bytes", "data edges", "span µs"):
        t.add_column(c, justify="left" if c == "rank" else "right")
    for r, s in shown:
        nt = s.node_types
        t.add_row(
            str(r),
            f"{s.nodes:,}",
            f"{nt.get('COMP_NODE', 0):,}",
            f"{nt.get('COMM_COLL_NODE', 0):,}",
            f"{nt.get('COMM_SEND_NODE', 0):,}",
            f"{nt.get('COMM_RECV_NODE', 0):,}",
            f"{sum(v['bytes'] for v in s.collectives.values()):,}",
            f"{s.data_edges:,}",
            "" if s.span_us is None else f"{s.span_us:,}",
        )
    console().print(t)
