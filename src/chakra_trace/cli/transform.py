"""`chakra transform`: a job changed the way a what-if question asks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..io.et import write_trace
from ..io.outputs import comm_groups_path
from ..io.workload import Workload, write_comm_groups
from ..synthesize import transforms as tf
from ..synthesize.scale import data_parallel
from .common import comm_groups_option, console, json_option, open_workload, print_json


@click.command()
@click.argument("workload")
@click.option(
    "--output",
    "-o",
    "prefix",
    metavar="PREFIX",
    required=True,
    help="Write PREFIX.<rank>.et; a one-rank result to PREFIX itself where it ends in .et or .et.gz.",
)
@comm_groups_option
@click.option("--batch", type=click.IntRange(min=1), help="Rescale a master trace to this batch size.")
@click.option("--seq", type=click.IntRange(min=1), help="Rescale a master trace to this sequence length.")
@click.option("--remove", metavar="REGEX", help="Remove compute nodes whose name matches (dependencies bridged).")
@click.option("--fuse", metavar="REGEX", help="Fuse chains of matching compute nodes into their first.")
@click.option("--device", "device", metavar="NAME", help="Compute nodes with FLOPs take their roofline time on it.")
@click.option("--efficiency", type=float, default=1.0, show_default=True, help="Of the roofline, with --device.")
@click.option("--speedup", type=float, help="Compute nodes take 1/SPEEDUP of their time.")
@click.option("--match", metavar="REGEX", help="With --speedup: only compute nodes whose name matches.")
@click.option("--comm-scale", type=float, help="Collectives and sends move this many times their bytes.")
@click.option("--comm-types", metavar="TYPES", help="With --comm-scale: only these collective types (ALL_REDUCE,...).")
@click.option("--dp", type=click.IntRange(min=1), help="Scale out to this many data-parallel ranks.")
@json_option
def transform(
    workload,
    prefix,
    comm_groups,
    batch,
    seq,
    remove,
    fuse,
    device,
    efficiency,
    speedup,
    match,
    comm_scale,
    comm_types,
    dp,
    as_json,
) -> None:
    """Write WORKLOAD changed as a what-if asks, in this order: --batch/--seq, --remove, --fuse,
    --device, --speedup, --comm-scale, --dp. Each step is a function of
    `chakra_trace.synthesize.transforms` (`scale.data_parallel` for --dp) and says what it keeps.
    --batch/--seq rescale a master trace captured with `chakra capture --shape-rules`: every op's
    shapes, FLOPs and bytes as a capture at that batch and seq gives them (needs PyTorch).

    \b
      chakra transform out/job --speedup 2 -o out/fast/job          # compute 2x faster
      chakra transform out/job --comm-scale 0.25 --comm-types ALL_REDUCE -o out/c/job
      chakra transform out/job --remove 'aten::(zero_|fill_)' --dp 64 -o out/dp64/job
      chakra transform gpt.master.et --seq 8192 -o gpt.s8192.master.et   # then: chakra parallelize it
    """
    steps: list[tuple[str, tf.Transform]] = []
    if batch or seq:
        point = ", ".join(f"{k} {v}" for k, v in (("batch", batch), ("seq", seq)) if v)
        steps.append((f"rescaled to {point}", lambda w: tf.rescale(w, batch, seq)))
    if remove:
        steps.append((f"removed {remove!r}", lambda w: tf.remove_ops(w, remove)))
    if fuse:
        steps.append((f"fused {fuse!r}", lambda w: tf.fuse_ops(w, fuse)))
    if device:
        steps.append((f"on {device} at {efficiency:g} of its roofline", lambda w: tf.on_device(w, device, efficiency)))
    if speedup:
        steps.append((f"compute {speedup:g}x faster", lambda w: tf.speed_up_compute(w, speedup, match)))
    if comm_scale:
        types = comm_types.split(",") if comm_types else None
        steps.append((f"bytes x {comm_scale:g}", lambda w: tf.scale_collectives(w, comm_scale, types)))
    if dp:
        steps.append((f"{dp} data-parallel ranks", lambda w: data_parallel(w, dp)))
    if not steps:
        raise click.UsageError(
            "nothing to do: give at least one of --batch, --seq, --remove, --fuse, --device, --speedup, "
            "--comm-scale, --dp"
        )
    w = open_workload(workload, comm_groups)
    before = sum(len(t) for t in {id(t): t for t in w.traces.values()}.values())
    w = tf.apply(w, [fn for _, fn in steps])
    files = _save(w, prefix)
    groups = str(comm_groups_path(prefix)) if w.groups else None
    after = sum(len(t) for t in {id(t): t for t in w.traces.values()}.values())
    out: dict[str, Any] = {
        "steps": [s for s, _ in steps],
        "ranks": len(w),
        "files": len(files),
        "comm_groups_file": groups,
        "distinct_nodes_before": before,
        "distinct_nodes_after": after,
    }
    if as_json:
        print_json(out)
        return
    con = console()
    wrote = prefix if files == [Path(prefix)] else f"{len(files)} rank files ({prefix}.<rank>.et)"
    con.print(f"{'; '.join(out['steps'])}: wrote {wrote}")
    con.print(f"nodes (distinct traces): {before:,} -> {after:,}" + (f"; groups: {groups}" if groups else ""))


def _save(w: Workload, prefix: str) -> list[Path]:
    """PREFIX.<rank>.et and PREFIX.comm_groups.json as one set (`Workload.save`), or PREFIX itself
    for a one-rank result where it names an .et file (a master trace, which `chakra parallelize`
    takes as one file)."""
    if len(w) == 1 and prefix.endswith((".et", ".et.gz")):
        (trace,) = w.traces.values()
        write_trace(trace, prefix)
        if w.groups:
            write_comm_groups(w.groups, comm_groups_path(prefix))
        return [Path(prefix)]
    return w.save(prefix, groups=w.groups or None)
