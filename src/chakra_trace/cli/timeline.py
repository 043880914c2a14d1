"""`chakra timeline`: a recorded workload's timeline for Perfetto / chrome://tracing."""

from __future__ import annotations

import click

from ..visualize.timeline import build_timeline, write_timeline
from .common import comm_groups_option, json_option, open_workload, print_json
from .terminal import echo_warning


@click.command()
@click.argument("workload")
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="Output file: .json, or .json.gz to compress.",
)
@comm_groups_option
@click.option(
    "--align",
    type=click.Choice(["auto", "origin", "collectives", "none"]),
    default="auto",
    show_default=True,
    help="How ranks' clocks are aligned: recorded time origins, collective ends, "
    "or not at all (auto: origins when every rank has one).",
)
@click.option(
    "--max-events",
    type=click.IntRange(min=0),
    default=None,
    help="Keep only the N longest slices (a bounded file for huge jobs).",
)
@click.option("--no-flows", is_flag=True, help="Leave out the arrows linking collectives and sends to receives.")
@json_option
def timeline(workload: str, output: str, comm_groups, align: str, max_events, no_flows: bool, as_json: bool) -> None:
    """Write the recorded timeline of WORKLOAD (a `.et` file, a `<prefix>.<rank>.et` prefix, a folder, a
    `chakra collect` folder)
    as Chrome Trace Event JSON: a process per rank, a track per thread, stream or resource,
    flows linking each collective's members. (`chakra simulate --timeline` writes simulated ones.)"""
    tl = build_timeline(open_workload(workload, comm_groups), align=align, flows=not no_flows, max_events=max_events)
    path = write_timeline(tl.to_chrome(), output)
    info = {
        "output": str(path),
        "ranks": len({t["pid"] for t in tl.tracks}),
        "tracks": len(tl.tracks),
        **{k: tl.metadata[k] for k in ("slices", "kept", "flows")},
    }
    if tl.metadata.get("note"):
        info["note"] = tl.metadata["note"]
    for w in tl.metadata.get("warnings", []):
        echo_warning(w)
    if as_json:
        print_json(info)
        return
    click.echo(
        f"wrote {path}: {info['kept']:,} slices on {info['tracks']} tracks of {info['ranks']} rank(s), "
        f"{info['flows']:,} flows" + (f" ({info['note']})" if "note" in info else "")
    )
    click.echo("open in https://ui.perfetto.dev")
