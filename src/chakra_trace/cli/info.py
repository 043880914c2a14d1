"""`chakra info`: what a trace (or every rank of a workload) holds."""
from __future__ import annotations

import os

import click

from .common import console, json_option, print_json, progress


@click.command()
@click.argument("path")
@json_option
def info(path: str, as_json: bool) -> None:
    """Counts by node type, edges, collectives by type and group, and time span.

    PATH is a `.et` file (plain or gzip) or the prefix of a workload's `<prefix>.<rank>.et` files.
    """
    from ..analyze.summary import summarize
    from ..errors import ChakraError
    from ..io.et import discover, read_trace

    if os.path.isfile(path):
        with progress("reading", path) as cb:
            s = summarize(read_trace(path, progress=cb))
        print_json(s.to_dict()) if as_json else _print_trace(path, s)
        return
    ranks = discover(path)
    if not ranks:
        raise ChakraError(f"{path}: no such file, and no workload files named {os.path.basename(path)}.<rank>.et")
    summaries = {}
    for r, p in ranks.items():
        with progress(f"rank {r}", p) as cb:
            summaries[r] = summarize(read_trace(p, progress=cb))
    if as_json:
        print_json({"ranks": {str(r): s.to_dict() for r, s in summaries.items()}})
        return
    _print_workload(path, summaries)


def _print_trace(path: str, s) -> None:
    from rich.table import Table

    con = console()
    con.print(f"[bold]{path}[/bold]: {s.nodes:,} nodes, {s.data_edges:,} data edges, {s.ctrl_edges:,} control edges")
    if s.metadata:
        con.print("metadata: " + ", ".join(f"{k}={v}" for k, v in s.metadata.items()))
    t = Table(title="node types")
    t.add_column("type")
    t.add_column("count", justify="right")
    for k, v in s.node_types.items():
        t.add_row(k, f"{v:,}")
    con.print(t)
    if s.collectives_by_group or s.point_to_point or s.collectives_missing_type:
        t = Table(title="communication")
        for c in ("group", "type", "count", "bytes"):
            t.add_column(c, justify="right" if c in ("count", "bytes") else "left")
        for g, by_type in s.collectives_by_group.items():
            for k, v in by_type.items():
                t.add_row(g or "(all ranks)", k, f"{v['count']:,}", f"{v['bytes']:,}")
        for k, v in s.point_to_point.items():
            t.add_row("", k, f"{v['count']:,}", f"{v['bytes']:,}")
        if s.collectives_missing_type:
            t.add_row("", "[yellow]no comm_type[/yellow]", f"{s.collectives_missing_type:,}", "")
        con.print(t)
    span = (f"{s.start_us:,} .. {s.end_us:,} µs (span {s.span_us:,} µs)" if s.span_us is not None
            else "no start times")
    con.print(f"time: {span}; sum of durations {s.total_duration_us:,} µs; {s.cpu_ops:,} CPU ops")


def _print_workload(prefix: str, summaries: dict) -> None:
    from rich.table import Table

    t = Table(title=f"{prefix}: {len(summaries)} ranks")
    for c in ("rank", "nodes", "COMP", "COLL", "SEND", "RECV", "collective bytes", "data edges", "span µs"):
        t.add_column(c, justify="left" if c == "rank" else "right")
    for r, s in summaries.items():
        nt = s.node_types
        t.add_row(str(r), f"{s.nodes:,}", f"{nt.get('COMP_NODE', 0):,}", f"{nt.get('COMM_COLL_NODE', 0):,}",
                  f"{nt.get('COMM_SEND_NODE', 0):,}", f"{nt.get('COMM_RECV_NODE', 0):,}",
                  f"{sum(v['bytes'] for v in s.collectives.values()):,}", f"{s.data_edges:,}",
                  "" if s.span_us is None else f"{s.span_us:,}")
    console().print(t)
