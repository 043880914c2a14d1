"""`chakra convert astra-sim`: a Chakra job as ASTRA-sim's reference binary reads it."""

from __future__ import annotations

import click

from ..convert.astra_sim import to_astra_sim
from .common import comm_groups_option, console, json_option, open_workload, print_json


@click.command("astra-sim")
@click.argument("workload")
@click.option("--output", "-o", "prefix", metavar="PREFIX", required=True, help="Write PREFIX.<rank>.et.")
@comm_groups_option
@click.option("--gzip", "compress", is_flag=True, help="Write .et.gz files.")
@click.option(
    "--even-sizes",
    type=click.Choice(["max"]),
    default=None,
    help="Give a collective whose size differs across its members (an uneven all-to-all, on which "
    "ASTRA-sim deadlocks) the largest size on every member.",
)
@json_option
def convert_astra_cmd(workload, prefix, comm_groups, compress, even_sizes, as_json) -> None:
    """Write WORKLOAD so that ASTRA-sim's binary runs it: METADATA nodes dropped (its statistics
    abort on them), what `chakra validate --fix` repairs repaired (it aborts or stops on those),
    communicator groups named as it reads them ("0" for every rank, positive
    integers for the others, listed in PREFIX.comm_groups.json for its --comm-group-configuration).

    \b
      chakra convert astra-sim out/job -o astra/job
    """
    res = to_astra_sim(open_workload(workload, comm_groups), prefix, compress=compress, even_sizes=even_sizes)
    if as_json:
        print_json(res.to_dict())
        return
    con = console()
    dropped = sum(res.dropped.values())
    con.print(f"wrote {len(res.files)} rank files ({prefix}.<rank>.et); {dropped} METADATA node(s) dropped")
    for rank, changes in list(res.repairs.items())[:4]:
        con.print(f"rank {rank}: " + "; ".join(changes))
    if len(res.repairs) > 4:
        con.print(f"... {len(res.repairs) - 4} more ranks repaired (--json)")
    for ours, theirs in res.groups.items():
        members = res.members.get(theirs)
        con.print(f"group {ours or '(unnamed)'!r} -> {theirs}" + (f": ranks {members}" if members else ": every rank"))
    if res.comm_groups_file:
        con.print(f"communicator groups: {res.comm_groups_file}")
    for e in res.uneven[:10]:
        sizes = ", ".join(f"{r}: {b:,}" for r, b in e["sizes"].items())
        what = "given the largest" if res.evened else "ASTRA-sim deadlocks on it (--even-sizes max)"
        con.print(f"uneven sizes: {e['name']!r} (#{e['index']} of group {e['group'] or 'all'}; {sizes} B): {what}")
    if len(res.uneven) > 10:
        con.print(f"... {len(res.uneven) - 10} more uneven collectives (--json)")
    con.print(f"run: {res.command()}")
