"""`chakra convert kineto`: Kineto (PyTorch profiler) traces alone to a Chakra job."""

from __future__ import annotations

import os
from typing import cast

import click

from ..convert.profiler import convert_kineto
from ..io.collect_folder import kineto_files
from .common import console, json_option, print_json, steps


@click.command("kineto")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--output", required=True, help="Output prefix: writes PREFIX.<rank>.et")
@click.option("--gzip", "compress", is_flag=True, help="Write .et.gz files.")
@click.option(
    "--no-shapes",
    "no_shapes",
    is_flag=True,
    help="Read the recorded shapes of communication ops only: faster on large traces; FLOPs unknown.",
)
@json_option
def convert_kineto_cmd(inputs: tuple[str, ...], output: str, compress: bool, no_shapes: bool, as_json: bool) -> None:
    """Convert Kineto (profiler) traces, without host execution traces, to Chakra.

    INPUTS: one Kineto trace (.json or .json.gz) per rank, or one folder (a `chakra collect`
    folder: its rank<r>.kineto.json.gz). Ranks come from each trace's distributedInfo.
    """
    files = kineto_files(list(inputs))
    with steps("converting ranks", len(files)) as advance:
        done = (lambda _rank, _report: advance(1)) if advance else None
        workload, report = convert_kineto(
            cast("list[str | os.PathLike]", files), shapes=not no_shapes, on_rank_done=done
        )
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    outputs = {r: str(p) for r, p in zip(workload.traces, workload.save(output, compress=compress))}
    if as_json:
        d = report.to_dict()
        for r, rep in d["ranks"].items():
            rep["output"] = outputs[int(r)]
        print_json(d)
        return
    con = console()
    for r, rep in report.ranks.items():
        gpu = sum(rep.gpu_events.values())
        coll = ", ".join(f"{k} {v}" for k, v in rep.collectives.items()) or "none"
        p2p = ", ".join(f"{k.split('_')[1].lower()} {v}" for k, v in rep.p2p.items())
        con.print(
            f"rank {r}: {rep.cpu_ops:,} CPU ops on {rep.threads} threads, {gpu:,} GPU events, "
            f"{rep.steps} steps -> {rep.nodes:,} nodes; collectives: {coll}"
            + (f"; {p2p}" if p2p else "")
            + f" -> {outputs[r]}"
        )
        if rep.gpu_time is not None:
            con.print("  " + rep.gpu_time.summary())
        if rep.waits.summary():
            con.print("  " + rep.waits.summary())
        if rep.sync_markers:  # (a stream waiting is not GPU time)
            marks = ", ".join(f"{v:,} {k}" for k, v in rep.sync_markers.items())
            con.print(
                f"  device sync markers (not work, not in GPU time): {marks}; {rep.sync_marker_us / 1000:,.2f} ms"
            )
        if rep.sizes_from:
            con.print("  message sizes from: " + ", ".join(f"{k} {v}" for k, v in rep.sizes_from.items()))
        if rep.comm_kernels:  # communication kernels: library, where the type and size came from
            con.print("  communication kernels: " + "; ".join(f"{k} {v}" for k, v in rep.comm_kernels.items()))
        if not rep.with_shapes and rep.host_recorded:
            con.print(
                "  [yellow]note:[/yellow] no input shapes recorded (record_shapes=False): sizes and FLOPs unknown"
            )
        for w in rep.warnings:
            con.print(f"  [yellow]warning:[/yellow] {w}")
    for n in report.notes:
        con.print(f"note: {n}")
