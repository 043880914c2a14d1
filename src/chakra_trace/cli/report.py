"""`chakra report`: one self-contained HTML file with every analysis of a workload, and of
its simulations on other systems."""
from __future__ import annotations

import click

from .common import console

simulate_option = click.option(
    "--simulate", "systems", multiple=True, metavar="SYSTEM",
    help="Also simulate the job on SYSTEM: a preset (ring-8, torus-8x8, dgx-8x8, dgx-8x128, torus-4x4x4) or "
         "NETWORK.yaml,SYSTEM.json. A job with fewer ranks than the system's NPUs is scaled out data-parallel. "
         "Repeatable.")


def run_simulations(workload, systems) -> dict:
    """{label: SimResult} for each --simulate value, simulation notes shown once."""
    import warnings

    from ..simulate import SimulationWarning
    from ..simulate.presets import resolve, simulate_on

    out = {}
    for spec in systems:
        p = resolve(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SimulationWarning)  # kept in result.warnings
            out[p.name] = simulate_on(workload, p)
    return out


@click.command()
@click.argument("workload")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@click.option("--comm-groups", type=click.Path(exists=True, dir_okay=False), help="Communicator groups JSON.")
@simulate_option
@click.option("--device", default=None, help="Roofline device preset (h100, a100, ...); omitted: no roofline.")
@click.option("--title", default=None, help="Report title.")
@click.option("--timeline-events", default=60_000, show_default=True,
              help="Most events per timeline (the longest are kept).")
def report(workload, output, comm_groups, systems, device, title, timeline_events) -> None:
    """Write WORKLOAD's report (a `.et` file or the prefix of `<prefix>.<rank>.et`): summary,
    breakdowns, critical path, top operations, collectives and imbalance, communication
    matrix, roofline, and interactive timelines, recorded and simulated."""
    import time

    from ..visualize.report import write_report
    from .analyze import _workload

    t0 = time.perf_counter()
    wl = _workload(workload, comm_groups)
    sims = run_simulations(wl, systems)
    for label, res in sims.items():
        console().print(f"simulated on {label}: step {res.step_ns / 1e6:,.3f} ms on {res.finish_ns.size} NPUs "
                        f"({res.wall_s:.2f} s)")
    path = write_report(wl, output, simulations=sims, title=title, device=device,
                        max_timeline_events=timeline_events)
    console().print(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - t0:.1f} s)")
