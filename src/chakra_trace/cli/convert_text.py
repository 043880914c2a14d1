"""`chakra convert text`: ASTRA-sim 1.0 text workloads to per-rank Chakra traces."""

from __future__ import annotations

import os

import click

from ..convert.text import read_text_workload, text_to_chakra
from ..io.outputs import comm_groups_path
from .common import json_option, print_json


def _default_prefix(path: str) -> str:
    root, ext = os.path.splitext(path)
    return root if ext.lower() == ".txt" else path


@click.command("text")
@click.argument("src", metavar="INPUT", type=click.Path(dir_okay=False))
@click.option(
    "--npus",
    "num_npus",
    type=click.IntRange(min=1),
    required=True,
    metavar="N",
    help="Number of ranks (NPUs) to write a trace for.",
)
@click.option(
    "--passes",
    "num_passes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Training iterations to unroll.",
)
@click.option(
    "--output",
    "-o",
    "prefix",
    metavar="PREFIX",
    default=None,
    help="Write PREFIX.<rank>.et (and PREFIX.comm_groups.json for hybrid parallelism). "
    "Default: INPUT without its .txt suffix.",
)
@click.option(
    "--model-parallel",
    "model_parallel",
    type=click.IntRange(min=1),
    default=None,
    metavar="M",
    help="Model-parallel group size (HYBRID_DATA_MODEL / HYBRID_MODEL_DATA need it; the transformer "
    "types read model_parallel_NPU_group from the file).",
)
@click.option(
    "--compute-unit",
    type=click.Choice(["ns", "us"]),
    default="ns",
    show_default=True,
    help="Unit of the compute times in the file: ns (ASTRA-sim 1.0 cycles, converted to µs) or us "
    "(copied as is, like the reference converter).",
)
@click.option(
    "--update-delays",
    is_flag=True,
    help="Add each layer's update delay (last field) as a compute node after its collectives.",
)
@click.option("--gzip", "compress", is_flag=True, help="Write PREFIX.<rank>.et.gz.")
@json_option
def convert_text(
    src: str,
    num_npus: int,
    num_passes: int,
    prefix: str | None,
    model_parallel: int | None,
    compute_unit: str,
    update_delays: bool,
    compress: bool,
    as_json: bool,
) -> None:
    """Convert an ASTRA-sim 1.0 text workload (INPUT) into one Chakra trace per rank.

    Supported parallelism types: DATA, MODEL, HYBRID_DATA_MODEL, HYBRID_MODEL_DATA, HYBRID_DLRM,
    HYBRID_DLRM_ENHANCED, MICRO, HYBRID_TRANSFORMER, HYBRID_TRANSFORMER_FWD_IN_BCKWD.
    """

    wl = read_text_workload(src)
    w = text_to_chakra(
        wl,
        num_npus,
        num_passes,
        model_parallel_size=model_parallel,
        compute_unit=compute_unit,
        update_delays=update_delays,
    )
    prefix = prefix or _default_prefix(src)
    parent = os.path.dirname(prefix)
    if parent:
        os.makedirs(parent, exist_ok=True)
    files = [str(p) for p in w.save(prefix, compress=compress, groups=w.groups or None)]
    groups_path = str(comm_groups_path(prefix)) if w.groups else None
    t0 = w.traces[0]
    info = {
        "input": src,
        "parallelism": wl.parallelism,
        "layers": wl.num_layers,
        "ranks": num_npus,
        "passes": num_passes,
        "nodes_per_rank": len(t0),
        "node_types": t0.node_type_counts(),
        "collectives_per_rank": t0.collectives(),
        "compute_unit": compute_unit,
        "prefix": prefix,
        "files": files,
        "comm_groups": groups_path,
        "groups": w.groups,
    }
    if as_json:
        print_json(info)
        return
    where = f"{prefix}.{{0..{num_npus - 1}}}.et" + (".gz" if compress else "") if num_npus > 1 else files[0]
    click.echo(
        f"{wl.parallelism}, {wl.num_layers} layers, {num_passes} pass{'es' * (num_passes != 1)}: "
        f"wrote {num_npus:,} rank{'s' * (num_npus != 1)} x {len(t0):,} nodes to {where}"
    )
    if groups_path:
        click.echo(
            f"communicator groups ({len(w.groups)}) in {groups_path} "
            f"(ASTRA-sim: --comm-group-configuration; chakra validate --comm-groups)"
        )
