"""`chakra collect`: run a training command unchanged and record the ET and Kineto traces of every rank."""

from __future__ import annotations

import os
import sys

import click
from rich.markup import escape

from ..collect.launch import collect as run_collect
from ..table import Column, Table
from .common import console, json_option, print_json, show

DEFAULT_DIR = "chakra-collect"


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "-o",
    "--output",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False),
    help=f"Output folder (files of an earlier collection there are replaced)  [default: {DEFAULT_DIR}]",
)
@click.option("--out", "out_old", default=None, hidden=True, type=click.Path(file_okay=False))
@click.option(
    "--wait",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Steps before the profiler warms up (at least 1: step 0 ends at the first optimizer step).",
)
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(min=0), help="Warm-up steps, not recorded.")
@click.option("--active", default=2, show_default=True, type=click.IntRange(min=1), help="Steps recorded.")
@click.option("--gzip/--no-gzip", default=True, show_default=True, help="Write .json.gz traces.")
@click.option(
    "--num-threads",
    type=click.IntRange(min=1),
    default=None,
    help="Intra-op threads of every process (OMP_NUM_THREADS and torch.set_num_threads); left alone by default.",
)
@click.option(
    "--profile-memory",
    is_flag=True,
    help="Record the allocator's memory events in the Kineto traces (for `chakra analyze memory`).",
)
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def collect(
    out_dir: str | None,
    out_old: str | None,
    wait: int,
    warmup: int,
    active: int,
    gzip: bool,
    num_threads: int | None,
    profile_memory: bool,
    as_json: bool,
    command: tuple[str, ...],
) -> int:
    """Run COMMAND unchanged and record, per rank, the host execution trace and the Kineto trace.

    \b
      chakra collect -o traces -- python train.py --epochs 1
      chakra collect -- torchrun --nproc-per-node 2 train.py

    Every Python process of the job records the same steps, counted by optimizer steps: step k
    ends at the (k+1)-th optimizer.step() of the first optimizer that steps; steps
    WAIT+WARMUP .. WAIT+WARMUP+ACTIVE-1 are recorded. The folder gets rank<r>.et.json.gz,
    rank<r>.kineto.json.gz and manifest.json. The exit status is the job's. With --json, the
    job's standard output goes to standard error so that standard output holds only the manifest.
    """
    if out_dir is not None and out_old is not None and out_dir != out_old:
        raise click.UsageError("give the output folder once (-o/--output; --out is its old spelling)")
    out_dir = out_dir or out_old or DEFAULT_DIR
    res = run_collect(
        list(command),
        out_dir,
        wait=wait,
        warmup=warmup,
        active=active,
        gzip=gzip,
        num_threads=num_threads,
        stdout=sys.stderr.fileno() if as_json else None,
        profile_memory=profile_memory,
    )
    if as_json:
        print_json(res.manifest)
    else:
        _print_summary(res)
    return res.exit_status


def _print_summary(res) -> None:

    m = res.manifest
    con = console()
    per_rank = m.get("per_rank") or {}
    if per_rank:
        rows = []
        for r, d in per_rank.items():
            walls = [s["wall_ms"] for s in d.get("steps", []) if s.get("finished") and s.get("wall_ms") is not None]
            files, sizes = d.get("files") or {}, d.get("bytes") or {}
            rows.append(
                {
                    "rank": r,
                    "status": d.get("status", "?"),
                    "steps": _span(d.get("steps_recorded") or []),
                    "ms/step": sum(walls) / len(walls) if walls else None,
                    "ET": _file(files.get("et"), sizes.get("et")),
                    "Kineto": _file(files.get("kineto"), sizes.get("kineto")),
                }
            )
        title = (
            f"{len(per_rank)} of {m.get('world_size')} ranks, backend {m.get('backend') or '-'}, {m.get('device_type')}"
        )
        spec = {"rank": Column(align="right"), "ms/step": Column(format=",.2f")}
        show(Table.from_records(rows, title=title, spec=spec, missing=""), title_justify="left")
    for w in m.get("warnings") or []:
        con.print(f"[yellow]warning[/yellow]: {escape(w)}")
    path = os.path.relpath(res.manifest_path)
    path = res.manifest_path if path.startswith("..") else path
    con.print(f"manifest: {escape(path)}; job exit status {res.exit_status} after {res.seconds:.1f} s")


def _span(steps: list[int]) -> str:
    if not steps:
        return "-"
    if steps == list(range(steps[0], steps[-1] + 1)):
        return str(steps[0]) if len(steps) == 1 else f"{steps[0]}..{steps[-1]}"
    return ",".join(map(str, steps))


def _file(name: str | None, size: int | None) -> str:
    if not name:
        return "-"
    return f"{name} ({size / 1e6:.2f} MB)" if size is not None else name
