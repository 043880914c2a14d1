"""`chakra report`: one self-contained HTML file with every analysis of a workload, and of
its simulations on other systems."""

from __future__ import annotations

import time

import click

from ..analyze import Analysis
from ..analyze.roofline import roofline_device
from ..simulate.devices import untimed_compute
from ..simulate.presets import resolve, with_compute
from ..visualize.report import report_parts, write_report
from .common import comm_groups_option, console, echo_warning, progress, steps
from .plot import device_options
from .systems import run_simulations, simulate_many_option


@click.command()
@click.argument("workload")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@comm_groups_option
@simulate_many_option
@device_options
@click.option("--title", default=None, help="Report title.")
@click.option(
    "--timeline-events", default=60_000, show_default=True, help="Most events per timeline (the longest are kept)."
)
@click.option(
    "--sweep",
    "sweep",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="A `chakra sweep` results folder: add its Pareto front and sensitivity.",
)
def report(
    workload, output, comm_groups, systems, device, peak_tflops, mem_bw_gbps, title, timeline_events, sweep
) -> None:
    """Write WORKLOAD's report (a `.et` file, a `<prefix>.<rank>.et` prefix or a folder): summary,
    breakdowns, critical path, top operations, collectives and imbalance, communication
    matrix, roofline, the devices (GPU streams from the job's Kineto traces, else its nodes:
    idle time by cause, kernels, overlap, stragglers), and interactive timelines, recorded and
    simulated. A job whose compute
    nodes have FLOPs but no times (`chakra capture`, `chakra parallelize`) is simulated with its
    compute at the --device roofline, as `chakra simulate --device` does."""
    t0 = time.perf_counter()
    job = Analysis.open(workload, comm_groups, progress=progress)
    wl = job.workload
    presets = [resolve(spec) for spec in systems]  # (read once: a system may be config files)
    dev = None
    if untimed_compute(wl) and (device is not None or (peak_tflops is not None and mem_bw_gbps is not None)):
        dev = roofline_device(wl, device, peak_tflops, mem_bw_gbps)  # FLOPs without times: at its roofline
        presets = [with_compute(p, dev) for p in presets]
    failed: dict[str, str] = {}  # the report says why in that system's place; the others still run
    sims = run_simulations(wl, presets, failed)
    for label, why in failed.items():
        echo_warning(f"not simulated on {label}: {why}")
    for label, res in sims.items():
        console().print(
            f"simulated on {label}{f' with {dev.name} compute' if dev is not None else ''}: "
            f"{res.recording_ns / 1e6:,.3f} ms (the whole recording) on {res.finish_ns.size} NPUs ({res.wall_s:.2f} s)",
            markup=False,
        )
    with steps("report", report_parts(job, sims, failed, sweep)) as advance:
        path = write_report(
            job,
            output,
            simulations=sims,
            failed=failed,
            systems={p.name: p for p in presets},
            title=title,
            device=device,
            peak_tflops=peak_tflops,
            mem_bw_gbps=mem_bw_gbps,
            max_timeline_events=timeline_events,
            progress=advance,
            sweep=sweep,
        )
    console().print(
        f"report: {path} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - t0:.1f} s)", markup=False
    )
