"""`chakra convert ...`: inputs from other tools into Chakra traces."""

from __future__ import annotations

import click

from . import LazyGroup

SUBCOMMANDS = {
    "text": ("convert_text:convert_text", "An ASTRA-sim 1.0 text workload to Chakra traces."),
    "pytorch": ("convert_pytorch:convert_pytorch_cmd", "PyTorch traces to Chakra."),
    "kineto": ("convert_kineto:convert_kineto_cmd", "Kineto traces, without host traces, to Chakra."),
    "astra-sim": ("convert_astra:convert_astra_cmd", "A workload as ASTRA-sim's binary reads it."),
}


@click.group(cls=LazyGroup, commands=SUBCOMMANDS)
def convert() -> None:
    """Convert other trace and workload formats into Chakra `.et` traces (and Chakra jobs into what
    ASTRA-sim's binary reads)."""
