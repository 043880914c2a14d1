"""`chakra plot`: static figures (PNG, SVG or PDF) of the analyses."""

from __future__ import annotations

import click

from ..analyze import Analysis
from ..analyze.roofline import roofline_device
from ..visualize.plots import plot_breakdown, plot_imbalance, plot_matrix, plot_roofline
from .common import comm_groups_option, open_workload, tolerance_option

_out_option = click.option(
    "-o",
    "--output",
    "out",
    required=True,
    type=click.Path(dir_okay=False),
    help="Image file; its suffix (.png, .svg, .pdf) picks the format.",
)


def device_options(f):
    """--device, --peak-tflops and --mem-bw-gbps: the roofline device, the same options with the
    same meaning in `chakra plot roofline` and `chakra report` (see `analyze.roofline.roofline_device`)."""
    f = click.option("--mem-bw-gbps", type=float, default=None, help="Roofline device memory bandwidth in GB/s.")(f)
    f = click.option("--peak-tflops", type=float, default=None, help="Roofline device peak compute in TFLOP/s.")(f)
    return click.option(
        "--device",
        default=None,
        help="Roofline device: a preset (v100, a100, h100, h100-pcie, h200, b200, mi300x, mi250x, mi210, tpu-v5e, xeon-8380x2) or cpu "
        "(this machine's CPU, estimated from /proc/cpuinfo); --peak-tflops/--mem-bw-gbps override its "
        "figures or, both given, replace it. Omitted: this machine's CPU for a CPU-only trace; a trace "
        "with accelerator kernels needs one.",
    )(f)


def _analysis(workload: str, comm_groups: str | None = None) -> Analysis:
    return Analysis(open_workload(workload, comm_groups))


def _done(path) -> None:
    click.echo(f"wrote {path}")


@click.group()
def plot() -> None:
    """Figures of a workload (WORKLOAD: a `.et` file, a `<prefix>.<rank>.et` prefix or a folder).
    Needs matplotlib: pip install 'chakra-trace[plot]'."""


@plot.command()
@click.argument("workload")
@_out_option
@comm_groups_option
def breakdown(workload: str, out: str, comm_groups) -> None:
    """Per rank: compute, overlap, exposed communication and idle time (stacked bars)."""
    _done(plot_breakdown(_analysis(workload, comm_groups).breakdown(), out))


@plot.command()
@click.argument("workload")
@_out_option
@comm_groups_option
@tolerance_option
def imbalance(workload: str, out: str, comm_groups, tolerance: float) -> None:
    """Heatmap of imbalanced collective instances by rank (bytes / the instance's median)."""
    _done(plot_imbalance(_analysis(workload, comm_groups).imbalance(tolerance), out))


@plot.command()
@click.argument("workload")
@_out_option
@comm_groups_option
def matrix(workload: str, out: str, comm_groups) -> None:
    """Heatmap of the bytes sent between every pair of ranks."""
    _done(plot_matrix(_analysis(workload, comm_groups).communication_matrix(), out))


@plot.command()
@click.argument("workload")
@_out_option
@device_options
def roofline(workload: str, out: str, device, peak_tflops, mem_bw_gbps) -> None:
    """Roofline of the compute ops: intensity vs achieved FLOP/s against the device's roofs."""
    a = _analysis(workload)
    _done(plot_roofline(a.roofline(roofline_device(a.workload, device, peak_tflops, mem_bw_gbps)), out))
