"""Shared CLI pieces: output helpers and progress that shows only on a terminal."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from ..io.workload import Workload

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")

tolerance_option = click.option(
    "--tolerance",
    type=float,
    default=0.0,
    show_default=True,
    help="Relative size difference from the group's median that still counts as equal.",
)

comm_groups_option = click.option(
    "--comm-groups", type=click.Path(exists=True, dir_okay=False), help="Communicator groups JSON (ASTRA-sim format)."
)


def print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def console() -> Console:
    return Console()


@contextmanager
def progress(label: str, path: str | os.PathLike | None = None) -> Iterator[Callable[[int], None] | None]:
    """Yield a callback(bytes_done) that drives a rich progress bar on a terminal, None in pipes."""
    if not sys.stderr.isatty():
        yield None
        return
    total = None
    if path is not None:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        total = None if gz else os.path.getsize(path)
    cols = [TextColumn(label), BarColumn(), DownloadColumn(), TimeRemainingColumn()]
    with Progress(*cols, transient=True, console=Console(stderr=True)) as p:
        task = p.add_task(label, total=total)
        yield lambda done: p.update(task, completed=done)


def open_workload(path: str, comm_groups: str | None = None, ranks: list[int] | None = None) -> Workload:
    """`Workload.open` with a progress bar per file on a terminal: what every command reads."""
    return Workload.open(path, comm_groups, ranks=ranks, progress=progress)
