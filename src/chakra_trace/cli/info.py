"""`chakra info`: what a trace holds."""
from __future__ import annotations

import click

from .common import console, json_option, print_json, progress


@click.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@json_option
def info(path: str, as_json: bool) -> None:
    """Counts by node type, edges, collectives by type and group, and time span of a `.et` file."""
    from ..analyze.summary import summarize
    from ..io.et import read_trace

    with progress("reading", path) as cb:
        trace = read_trace(path, progress=cb)
    s = summarize(trace)
    if as_json:
        print_json(s.to_dict())
        return
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
    if s.span_us is not None:
        con.print(f"time: {s.start_us} .. {s.end_us} µs (span {s.span_us:,} µs), "
                  f"sum of durations {s.total_duration_us:,} µs, {s.cpu_ops:,} CPU ops")
