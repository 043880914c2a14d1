"""Shared CLI pieces: output helpers and progress that shows only on a terminal.

What a trace holds (op, group and file names, metadata) reaches the terminal as text, never as
commands to it: every console here escapes control characters and bidirectional overrides
(`safe_text`), and tables show at most `TABLE_ROWS` rows (`--json` gives all)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.segment import Segment
from rich.table import Table as RichTable
from rich.text import Text

from ..errors import ChakraError
from ..io.documents import open_regular
from ..io.workload import Workload
from ..table import Table
from .terminal import echo_warning, safe_line, safe_text  # noqa: F401 (the commands' one import for output)

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
    click.echo(json.dumps(obj, indent=2, sort_keys=False))  # (JSON escapes control characters itself)


class SafeConsole(Console):
    """A rich Console whose text is safe to show: control characters and bidirectional overrides
    in any string it renders become visible escapes (before layout, so tables stay aligned);
    what reaches the output in other renderables (a `Text` built from data) is escaped the same
    way as it is written. Markup that does not parse prints as it is instead of failing, and
    emoji codes are not replaced (":x:" in a name stays text). Data put into markup must still
    go through `rich.markup.escape` (or `cell`) to print literally."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)

    def render_str(self, text: str, **kwargs) -> Text:
        text = safe_text(text)
        try:
            return super().render_str(text, **kwargs)
        except MarkupError:  # e.g. a name holding "[/bold]": the text as it is
            return super().render_str(text, **{**kwargs, "markup": False})

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        # the last stop before the terminal: rich's own control segments pass, text is escaped
        return super()._render_buffer(
            seg if seg.control or not seg.text else Segment(safe_text(seg.text), seg.style, seg.control)
            for seg in buffer
        )


def cell(value: Any) -> str:
    """A value as table text: markup in it shown literally (control characters are the console's)."""
    return escape(str(value))


# Wide enough that no table in a pipe or file is squeezed: rich would otherwise lay tables out for
# 80 columns and cut numbers to "…" (a terminal keeps its own width).
PIPE_WIDTH = 1000

#: Rows a table shows: a trace of 100,000 groups would otherwise print (and lay out, at about a
#: millisecond a row) 100,000 rows; `--json` lists everything.
TABLE_ROWS = 200


def show(
    table: Table,
    *,
    title: str | None = None,
    limit: int | None = TABLE_ROWS,
    what: str = "rows",
    styles: Mapping[str, Mapping[str, str]] | None = None,
    row_styles: Sequence[str] | None = None,
    **options: Any,
) -> None:
    """Print `table` as a rich table: every command's one way to show rows. Headers and cells are
    the table's text (`Table.header`, `Table.text`: its formats), numbers right-aligned, data made
    terminal-safe (`safe_text`) and never read as markup. At most `limit` rows: the title says how
    many there are (`--json` lists all). ``title`` replaces the table's; ``styles`` colours cells by
    their text ({column: {text: style}}), ``row_styles`` whole rows; ``options`` go to rich's Table
    (``caption``, ``title_justify``...)."""
    title = table.title if title is None else title
    if limit is not None and len(table) > limit:
        title += f" (first {limit:,} of {len(table):,} {what}; --json lists all)"
        table = table.head(limit)
    out = RichTable(title=_markup(title) if title else None, **options)
    for name in table.names:
        right = table.align(name) == "right"
        out.add_column(
            _markup(table.header(name)), justify="right" if right else "left", overflow="ellipsis" if right else "fold"
        )
    texts = [table.text(name) for name in table.names]
    looks = [(styles or {}).get(name, {}) for name in table.names]
    for i, row in enumerate(zip(*texts)):
        out.add_row(
            *(_markup(v, look.get(v)) for v, look in zip(row, looks)), style=row_styles[i] if row_styles else None
        )
    console().print(out)


def _markup(text: str, style: str | None = None) -> str:
    """Data as rich markup that shows it literally (and terminal-safe), in `style` if given."""
    text = escape(safe_text(text))
    return f"[{style}]{text}[/]" if style else text


def console() -> Console:
    """Where tables go: the terminal at its width, or a pipe/file without truncation or colour."""
    if sys.stdout.isatty():
        return SafeConsole()
    return SafeConsole(width=PIPE_WIDTH, no_color=True, highlight=False)


def _label() -> TextColumn:
    """A bar's label (the task's description, which may name a file): text, neither markup nor
    a format string."""
    return TextColumn("{task.description}", markup=False)


@contextmanager
def steps(label: str, total: int | None) -> Iterator[Callable[..., None] | None]:
    """Yield a callback(advance=1) that drives a rich bar of `total` steps (ranks, ops, systems) on a
    terminal, None in pipes: long operations show where they are without polluting redirected output."""
    if not sys.stderr.isatty():
        yield None
        return
    cols = [_label(), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*cols, transient=True, console=SafeConsole(stderr=True)) as p:
        task = p.add_task(label, total=total)
        yield lambda n=1: p.advance(task, n)


@contextmanager
def counts(label: str, unit: str = "") -> Iterator[Callable[[int, int | None], None] | None]:
    """Yield a callback(done, total) that drives a rich bar on a terminal, None in pipes: what a
    library function's `progress=` takes (`simulate`'s nodes, `parallelize`'s ranks, ...)."""
    if not sys.stderr.isatty():
        yield None
        return
    cols = [_label(), BarColumn(), MofNCompleteColumn(), TextColumn(unit), TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*cols, transient=True, console=SafeConsole(stderr=True)) as p:
        task = p.add_task(label, total=None)
        yield lambda done, total: p.update(task, completed=done, total=total)


@contextmanager
def progress(label: str, path: str | os.PathLike | None = None) -> Iterator[Callable[[int], None] | None]:
    """Yield a callback(bytes_done) that drives a rich progress bar on a terminal, None in pipes."""
    if not sys.stderr.isatty():
        yield None
        return
    total = None
    if path is not None:
        try:  # (a FIFO or a device is not opened here: the reader refuses it)
            with open_regular(path) as f:
                gz = f.read(2) == b"\x1f\x8b"
                total = None if gz else os.fstat(f.fileno()).st_size
        except ChakraError:
            pass
    cols = [_label(), BarColumn(), DownloadColumn(), TimeRemainingColumn()]
    with Progress(*cols, transient=True, console=SafeConsole(stderr=True)) as p:
        task = p.add_task(label, total=total)
        yield lambda done: p.update(task, completed=done)


def open_workload(path: str, comm_groups: str | None = None, ranks: list[int] | None = None) -> Workload:
    """`Workload.open` with a progress bar per file on a terminal: what every command reads."""
    return Workload.open(path, comm_groups, ranks=ranks, progress=progress)
