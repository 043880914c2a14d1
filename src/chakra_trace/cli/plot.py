"""`chakra plot`: static figures (PNG, SVG or PDF) of the analyses."""
from __future__ import annotations

import click

from .analyze import _groups_option, _workload

_out_option = click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False),
                           help="Image file; its suffix (.png, .svg, .pdf) picks the format.")


def _done(path) -> None:
    click.echo(f"wrote {path}")


@click.group()
def plot() -> None:
    """Figures of a workload (WORKLOAD: a `.et` file or the prefix of `<prefix>.<rank>.et`).
    Needs matplotlib: pip install 'chakra-trace[plot]'."""


@plot.command()
@click.argument("workload")
@_out_option
@_groups_option
def breakdown(workload: str, out: str, comm_groups) -> None:
    """Per rank: compute, overlap, exposed communication and idle time (stacked bars)."""
    from ..analyze.breakdown import breakdown as run
    from ..visualize.plots import plot_breakdown

    _done(plot_breakdown(run(_workload(workload, comm_groups)), out))


@plot.command()
@click.argument("workload")
@_out_option
@_groups_option
@click.option("--tolerance", type=float, default=0.0, show_default=True,
              help="Relative size difference from the group's median that still counts as equal.")
def imbalance(workload: str, out: str, comm_groups, tolerance: float) -> None:
    """Heatmap of imbalanced collective instances by rank (bytes / the instance's median)."""
    from ..analyze.collectives import imbalance as run
    from ..visualize.plots import plot_imbalance

    _done(plot_imbalance(run(_workload(workload, comm_groups), tolerance), out))


@plot.command()
@click.argument("workload")
@_out_option
@_groups_option
def matrix(workload: str, out: str, comm_groups) -> None:
    """Heatmap of the bytes sent between every pair of ranks."""
    from ..analyze.collectives import communication_matrix
    from ..visualize.plots import plot_matrix

    _done(plot_matrix(communication_matrix(_workload(workload, comm_groups)), out))


@plot.command()
@click.argument("workload")
@_out_option
@click.option("--device", default="h100", show_default=True, help="Device whose roofs to draw (e.g. a100, h100).")
def roofline(workload: str, out: str, device: str) -> None:
    """Roofline of the compute ops: intensity vs achieved FLOP/s against the device's roofs."""
    from ..analyze.roofline import roofline as run
    from ..visualize.plots import plot_roofline

    _done(plot_roofline(run(_workload(workload, None), device), out))
