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
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..io.workload import Workload

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")

tolerance_option = click.option(
    "--tolerance",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Relative size difference from the group's median that still counts as equal.",
)

comm_groups_option = click.option(
    "--comm-groups", type=click.Path(exists=True, dir_okay=False), help="Communicator groups JSON (ASTRA-sim format)."
)


def print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


# Wide enough that no table in a pipe or file is squeezed: rich would otherwise lay tables out for
# 80 columns and cut numbers to "…" (a terminal keeps its own width).
PIPE_WIDTH = 1000


def console() -> Console:
    """Where tables go: the terminal at its width, or a pipe/file without truncation or colour."""
    return Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH, no_color=True, highlight=False)


@contextmanager
def steps(label: str, total: int | None) -> Iterator[Callable[[int], None] | None]:
    """Yield a callback(advance=1) that drives a rich bar of `total` steps (ranks, ops, systems) on a
    terminal, None in pipes: long operations show where they are without polluting redirected output."""
    if not sys.stderr.isatty():
        yield None
        return
    cols = [TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*cols, transient=True, console=Console(stderr=True)) as p:
        task = p.add_task(label, total=total)
        yield lambda n=1: p.advance(task, n)


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
