"""`chakra report`: one self-contained HTML file with every analysis of a workload, and of
its simulations on other systems."""

from __future__ import annotations

import time

import click

from ..visualize.report import write_report
from .common import comm_groups_option, console, open_workload
from .systems import run_simulations, simulate_many_option


@click.command()
@click.argument("workload")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@comm_groups_option
@simulate_many_option
@click.option("--device", default=None, help="Roofline device preset (h100, a100, ...); omitted: no roofline.")
@click.option("--title", default=None, help="Report title.")
@click.option(
    "--timeline-events", default=60_000, show_default=True, help="Most events per timeline (the longest are kept)."
)
def report(workload, output, comm_groups, systems, device, title, timeline_events) -> None:
    """Write WORKLOAD's report (a `.et` file, a `<prefix>.<rank>.et` prefix or a folder): summary,
    breakdowns, critical path, top operations, collectives and imbalance, communication
    matrix, roofline, and interactive timelines, recorded and simulated."""
    t0 = time.perf_counter()
    wl = open_workload(workload, comm_groups)
    sims = run_simulations(wl, systems)
    for label, res in sims.items():
        console().print(
            f"simulated on {label}: step {res.step_ns / 1e6:,.3f} ms on {res.finish_ns.size} NPUs ({res.wall_s:.2f} s)"
        )
    path = write_report(wl, output, simulations=sims, title=title, device=device, max_timeline_events=timeline_events)
    console().print(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - t0:.1f} s)")
