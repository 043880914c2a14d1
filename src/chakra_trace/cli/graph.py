"""`chakra graph`: one rank's operation graph as DOT, GraphML or a Graphviz drawing."""

from __future__ import annotations

from pathlib import Path

import click

from ..io.merged_file import is_merged_file
from ..visualize.graph import MAX_NODES, export_graph, render
from .common import console, json_option, open_workload, print_json

_RENDERED = (".svg", ".pdf", ".png")


@click.command()
@click.argument("workload")
@click.option(
    "-o",
    "--output",
    "out",
    required=True,
    type=click.Path(dir_okay=False),
    help="Output file: .dot, .graphml (either may end in .gz), or .svg/.pdf/.png (writes the .dot "
    "next to it and draws it with Graphviz).",
)
@click.option("--rank", type=int, default=None, help="Rank to show when WORKLOAD is a job prefix (default 0).")
@click.option("--name", "name", default=None, metavar="REGEX", help="Only ops whose name matches this regex.")
@click.option(
    "--neighbors",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Also include the ops this many dependency hops around the --name matches.",
)
@click.option(
    "--max-nodes",
    type=click.IntRange(min=1),
    default=None,
    help="Refuse graphs with more nodes than this (default 20,000).",
)
@json_option
def graph(
    workload: str, out: str, rank: int | None, name: str | None, neighbors: int, max_nodes: int | None, as_json: bool
) -> None:
    """Export the dependency graph of one rank of WORKLOAD (a `.et` file, a job prefix, a folder holding
    one job, or a `chakra collect` folder).

    Nodes show name, type, duration and, for communication, collective and bytes; data
    dependencies are solid edges, control dependencies dashed. Big traces: pick a part with
    --name REGEX [--neighbors N].
    """
    out_path = Path(out)
    suffix = out_path.suffix.lower()
    rendered = suffix in _RENDERED
    target = out_path.with_suffix(".dot") if rendered else out_path
    # a file is the rank its name says; a merged job's file is the job
    lone = rank is None and Path(workload).is_file() and not is_merged_file(Path(workload))
    w = open_workload(workload, ranks=None if lone else [0 if rank is None else rank])
    ((rank, trace),) = w.traces.items()
    res = export_graph(
        trace,
        target,
        max_nodes=MAX_NODES if max_nodes is None else max_nodes,
        name=name,
        neighbors=neighbors,
        title=f"rank {rank}",
    )
    if rendered:
        render(target, out_path)
    if as_json:
        print_json({**res.to_dict(), "rank": rank, "rendered": str(out_path) if rendered else None})
        return
    skipped = res.skipped_missing + res.skipped_outside
    console().print(
        f"wrote {target} ({res.nodes:,} nodes, {res.data_edges:,} data and {res.ctrl_edges:,} control "
        f"edges"
        + (f"; {skipped:,} dependencies outside the selection or missing left out" if skipped else "")
        + ")"
        + (f" and drew {out_path}" if rendered else "")
    )
