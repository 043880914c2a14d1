"""`chakra convert pytorch`: PyTorch execution traces (+ Kineto) to Chakra, one rank or a whole job."""

from __future__ import annotations

import os
import warnings

import click

from ..convert.pytorch import convert_collection, convert_pytorch
from ..errors import ChakraError
from ..io.collect_folder import collection_files
from ..io.et import write_trace
from .common import console, json_option, print_json, steps


@click.command("pytorch")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--output", required=True, help="Output prefix: writes PREFIX.<rank>.et")
@click.option("--rank", type=int, default=None, help="Rank of a single trace (default: from Kineto, else 0).")
@click.option("-j", "--jobs", type=int, default=None, help="Ranks converted in parallel (default: CPU count).")
@click.option("--gzip", "compress", is_flag=True, help="Write .et.gz files.")
@json_option
def convert_pytorch_cmd(
    inputs: tuple[str, ...], output: str, rank: int | None, jobs: int | None, compress: bool, as_json: bool
) -> None:
    """Convert PyTorch traces to Chakra.

    INPUTS is either a host execution trace and optionally its Kineto trace (one rank), or a
    folder written by `chakra collect` (every rank, in parallel).

    Host ops are linked to Kineto events by rf_id, External id (also under a constant offset),
    then by aligning each thread's op order; each rank prints its host ops, the linked fraction
    and methods, and its collectives by type. Ops linked to nothing are kept with estimated times.
    Exit 2 when the two files are clearly not of one job (under 50% of the ops of the compared
    iterations correspond): convert the host trace alone then.
    """

    if len(inputs) == 1 and os.path.isdir(inputs[0]):
        files = collection_files(inputs[0])
        with steps("converting ranks", len(files)) as advance:
            done = (lambda _rank, _report: advance(1)) if advance else None
            reports = convert_collection(inputs[0], output, jobs=jobs, compress=compress, on_rank_done=done)
    elif 1 <= len(inputs) <= 2 and all(os.path.isfile(p) for p in inputs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace, report = convert_pytorch(inputs[0], inputs[1] if len(inputs) == 2 else None, rank=rank)
        r = rank if rank is not None else next((a.int64_val for a in trace.metadata.attr if a.name == "rank"), 0)
        write_trace(trace, f"{output}.{r}.et" + (".gz" if compress else ""), compress=compress)
        reports = {r: report}
    else:
        raise ChakraError("expected ET [KINETO] files or one folder written by `chakra collect`")
    suffix = ".et.gz" if compress else ".et"
    if as_json:
        print_json(
            {
                str(r): {
                    "output": f"{output}.{r}{suffix}",
                    "nodes": rep.nodes,
                    "node_types": rep.node_types,
                    "collectives": len(rep.collectives),
                    "collectives_by_type": rep.collectives_by_type(),
                    "link": rep.link_summary(),
                    "span_us": rep.span_us,
                    "gpu_time": rep.gpu_time.to_dict() if rep.gpu_time is not None else None,
                    "waits": rep.waits.to_dict(),
                    "warnings": rep.warnings,
                }
                for r, rep in reports.items()
            }
        )
        return
    con = console()
    for r, rep in reports.items():
        by_type = ", ".join(f"{k} {v}" for k, v in rep.collectives_by_type().items()) or "none"
        con.print(
            f"rank {r}: {rep.nodes:,} nodes ({', '.join(f'{k} {v:,}' for k, v in rep.node_types.items())}), "
            f"{rep.span_us:,.0f} µs recorded -> {output}.{r}{suffix}"
        )
        link = rep.link_summary()
        if link:
            con.print(
                f"  host ops {link['host_ops']:,}, linked {link['linked_fraction']:.1%} "
                f"({link['by'] or 'none'})" + (f", {link['estimated']:,} estimated" if link["estimated"] else "")
            )
        con.print(f"  collectives {len(rep.collectives)}: {by_type}")
        if rep.gpu_time is not None:
            con.print("  " + rep.gpu_time.summary())
        if rep.waits.summary():
            con.print("  " + rep.waits.summary())
        for w in rep.warnings:
            con.print(f"  [yellow]warning:[/yellow] {w}")
