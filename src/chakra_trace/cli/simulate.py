"""`chakra simulate`: predict a training step on a system described in ASTRA-sim's formats."""

from __future__ import annotations

import warnings

import click
import numpy as np
from rich.table import Table

from ..simulate import SimulationWarning
from ..simulate import simulate as run
from ..visualize.timeline import timeline as build_timeline
from ..visualize.timeline import write_timeline
from .common import console, json_option, open_workload, print_json


@click.command()
@click.option(
    "--workload",
    "workload",
    required=True,
    help="Prefix of the per-NPU traces (<prefix>.<npu>.et[.gz]), or one .et file run on every NPU.",
)
@click.option("--network", required=True, type=click.Path(exists=True, dir_okay=False), help="Network YAML.")
@click.option("--system", required=True, type=click.Path(exists=True, dir_okay=False), help="System JSON.")
@click.option("--memory", type=click.Path(exists=True, dir_okay=False), help="Memory JSON (remote memory model).")
@click.option("--comm-groups", type=click.Path(exists=True, dir_okay=False), help="Communicator groups JSON.")
@click.option(
    "--compat",
    type=click.Choice(["none", "astra"]),
    default="none",
    show_default=True,
    help="astra: reproduce ASTRA-sim's numbers exactly, flaws included.",
)
@click.option("--congestion-aware", "aware", is_flag=True, help="Per-link queues instead of the unaware model.")
@click.option("--timeline", type=click.Path(dir_okay=False), help="Write the simulated timeline (Perfetto JSON).")
@json_option
def simulate(workload, network, system, memory, comm_groups, compat, aware, timeline, as_json) -> None:
    """Simulate every NPU's trace on the network and print per-NPU finish and exposed
    communication times (ns), totals and the collectives."""
    wl = open_workload(workload, comm_groups)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SimulationWarning)  # listed once at the end (result.warnings)
        res = run(wl, network, system, memory=memory, compat=compat == "astra", aware=aware)
    if timeline:
        write_timeline(build_timeline(None, res), timeline)
    if as_json:
        print_json(res.to_dict())
        return
    _print(res, timeline)


def _print(res, timeline) -> None:

    con = console()
    f = res.finish_ns
    con.print(
        f"[bold]step[/bold] {res.step_ns:,} ns on {f.size} NPUs ({res.mode}); "
        f"simulated in {res.wall_s:.3f} s ({res.events:,} events)"
    )
    t = Table(title="per NPU (ns)" if f.size <= 16 else "per NPU (ns): min / median / max")
    for col in ("", "finish", "compute", "comm", "overlap", "exposed comm", "other", "idle"):
        t.add_column(col, justify="right")
    arrays = (
        res.finish_ns,
        res.compute_ns,
        res.comm_ns,
        res.overlap_ns,
        res.exposed_comm_ns,
        res.other_ns,
        res.idle_ns,
    )

    if f.size <= 16:
        for i in range(f.size):
            t.add_row(str(i), *(f"{int(a[i]):,}" for a in arrays))
    else:
        for label, fn in (("min", np.min), ("median", np.median), ("max", np.max)):
            t.add_row(label, *(f"{int(fn(a)):,}" for a in arrays))
    con.print(t)
    if res.collectives:
        c = Table(title=f"collectives ({len(res.collectives)})")
        for col in ("group", "#", "type", "bytes", "algorithm", "start", "end"):
            c.add_column(col, justify="right" if col in ("#", "bytes", "start", "end") else "left")
        for r in res.collectives[:20]:
            c.add_row(r.group, str(r.index), r.type, f"{r.bytes:,}", r.algorithm, f"{r.start_ns:,}", f"{r.end_ns:,}")
        con.print(c)
        if len(res.collectives) > 20:
            con.print(f"... {len(res.collectives) - 20} more (use --json)")
    for w in res.warnings:
        con.print(f"[yellow]warning[/yellow]: {w}")
    if timeline:
        con.print(f"timeline: {timeline} (open in ui.perfetto.dev)")
