"""Shared CLI pieces: output helpers and progress that shows only on a terminal."""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import click

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


def print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def console():
    from rich.console import Console

    return Console()


@contextmanager
def progress(label: str, path: str | os.PathLike | None = None) -> Iterator[Callable[[int], None] | None]:
    """Yield a callback(bytes_done) that drives a rich progress bar on a terminal, None in pipes."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    total = None
    if path is not None:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        total = None if gz else os.path.getsize(path)
    cols = [TextColumn(label), BarColumn(), DownloadColumn(), TimeRemainingColumn()]
    with Progress(*cols, transient=True, console=Console(stderr=True)) as p:
        task = p.add_task(label, total=total)
        yield lambda done: p.update(task, completed=done)
