"""`chakra merge` / `chakra split`: a whole job in one `.et` file, and back to one file per rank."""

from __future__ import annotations

import click

from ..io.merged_file import merge_job, split_job
from .common import comm_groups_option, console, json_option, print_json, progress


@click.command("merge")
@click.argument("workload")
@click.option(
    "--output", "-o", required=True, type=click.Path(dir_okay=False), help="The merged file (.et, or .et.gz: gzip)."
)
@comm_groups_option
@json_option
def merge_cmd(workload: str, output: str, comm_groups: str | None, as_json: bool) -> None:
    """Every rank of WORKLOAD in one trace: each node keeps its rank (`rank`), ids become
    rank * stride + id, the members of one collective share a `coll_instance`, and each rank's
    metadata and groups are kept, so `chakra split` gives back the files byte for byte. Every
    command opens the merged file as the job. PREFIX.comm_groups.json is taken when it is there.

    \b
      chakra merge out/job -o job.et
    """
    res = merge_job(workload, output, comm_groups=comm_groups, progress=progress)
    if as_json:
        print_json(res.to_dict())
        return
    console().print(
        f"wrote {output}: {res.ranks:,} ranks, {res.nodes:,} nodes, {res.collective_instances:,} collective "
        f"instances, ids rank * {res.id_stride:,} + id"
        + (f", {res.comm_groups} communicator groups" if res.comm_groups else "")
    )


@click.command("split")
@click.argument("merged")
@click.option("--output", "-o", "prefix", metavar="PREFIX", required=True, help="Write PREFIX.<rank>.et.")
@click.option("--gzip", "compress", is_flag=True, help="Write .et.gz files.")
@json_option
def split_cmd(merged: str, prefix: str, compress: bool, as_json: bool) -> None:
    """The per-rank files of a file written by `chakra merge`, byte for byte as they were (and
    PREFIX.comm_groups.json when the job has communicator groups).

    \b
      chakra split job.et -o out/job
    """
    res = split_job(merged, prefix, compress=compress, progress=progress)
    if as_json:
        print_json(res.to_dict())
        return
    console().print(
        f"wrote {res.ranks:,} rank files ({prefix}.<rank>.et{'.gz' if compress else ''}), {res.nodes:,} nodes"
        + (f"; communicator groups: {res.comm_groups_file}" if res.comm_groups_file else "")
    )
