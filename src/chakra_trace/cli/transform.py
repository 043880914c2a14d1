"""`chakra transform`: a job changed the way a what-if question asks."""

from __future__ import annotations

from pathlib import Path

import click

from ..io.workload import write_comm_groups
from ..synthesize import transforms as tf
from ..synthesize.scale import data_parallel
from .common import comm_groups_option, console, json_option, open_workload, print_json


@click.command()
@click.argument("workload")
@click.option("--output", "-o", "prefix", metavar="PREFIX", required=True, help="Write PREFIX.<rank>.et.")
@comm_groups_option
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
    workload, prefix, comm_groups, remove, fuse, device, efficiency, speedup, match, comm_scale, comm_types, dp, as_json
) -> None:
    """Write WORKLOAD changed as a what-if asks, in this order: --remove, --fuse, --device,
    --speedup, --comm-scale, --dp. Each step is a function of `chakra_trace.synthesize.transforms`
    (`scale.data_parallel` for --dp) and says what it keeps.

    \b
      chakra transform out/job --speedup 2 -o out/fast/job          # compute 2x faster
      chakra transform out/job --comm-scale 0.25 --comm-types ALL_REDUCE -o out/c/job
      chakra transform out/job --remove 'aten::(zero_|fill_)' --dp 64 -o out/dp64/job
    """
    steps: list[tuple[str, tf.Transform]] = []
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
            "nothing to do: give at least one of --remove, --fuse, --device, --speedup, --comm-scale, --dp"
        )
    w = open_workload(workload, comm_groups)
    before = sum(len(t) for t in {id(t): t for t in w.traces.values()}.values())
    w = tf.apply(w, [fn for _, fn in steps])
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    files = w.save(prefix)
    groups = str(write_comm_groups(w.groups, f"{prefix}.comm_groups.json")) if w.groups else None
    after = sum(len(t) for t in {id(t): t for t in w.traces.values()}.values())
    out = {
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
    con.print(f"{'; '.join(out['steps'])}: wrote {len(files)} rank files ({prefix}.<rank>.et)")
    con.print(f"nodes (distinct traces): {before:,} -> {after:,}" + (f"; groups: {groups}" if groups else ""))
