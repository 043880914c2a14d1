"""`chakra to-json` and `chakra from-json`: lossless conversion between `.et` and JSON."""

from __future__ import annotations

import click

from ..errors import ChakraError
from ..io.et import iter_chunks, write_trace
from ..io.jsonio import is_json_lines_path, is_json_path, read_json, write_json
from ..io.workload import refuse_pytorch
from .common import json_option, print_json, progress


def _report(nodes: int, output: str, as_json: bool) -> None:
    if as_json:
        print_json({"nodes": nodes, "output": output})
    else:
        click.echo(f"wrote {nodes:,} nodes to {output}")


@click.command("to-json")
@click.argument("src", metavar="IN", type=click.Path(dir_okay=False))
@click.argument("dst", metavar="OUT", type=click.Path(dir_okay=False, writable=True))
@click.option(
    "--lines",
    is_flag=True,
    help="Write JSON Lines (header line, then one node per line). Implied by a .jsonl / .jsonl.gz name.",
)
@click.option(
    "--indent",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Pretty-print the JSON document with N spaces (not with JSON Lines).",
)
@json_option
def to_json(src: str, dst: str, lines: bool, indent: int | None, as_json: bool) -> None:
    """Convert a `.et` file (plain or gzip) to lossless JSON; gzip the output if OUT ends in .gz.

    IN may be a pipe or device, read to at most CHAKRA_MAX_STREAM_BYTES bytes (default 1 GiB).
    """

    if indent is not None and (lines or is_json_lines_path(dst)):
        raise click.ClickException("--indent cannot be used with JSON Lines output (one object per line)")
    refuse_pytorch(src)
    if is_json_path(src):
        raise ChakraError(f"{src}: already JSON; to-json reads a .et file (from-json turns Chakra JSON into .et)")
    with progress("reading", src) as cb:
        chunks = iter_chunks(src, progress=cb, empty=True)  # read once: IN may be a pipe
        n = write_json(_chain(next(chunks), chunks), dst, lines=lines, indent=indent)
    _report(n, dst, as_json)


def _chain(first, rest):
    yield first
    yield from rest


@click.command("from-json")
@click.argument("src", metavar="IN", type=click.Path(dir_okay=False))
@click.argument("dst", metavar="OUT", type=click.Path(dir_okay=False, writable=True))
@json_option
def from_json(src: str, dst: str, as_json: bool) -> None:
    """Convert JSON written by `to-json` (document or JSON Lines, plain or gzip) back to `.et`.

    OUT is gzipped if its name ends in .gz.
    """

    refuse_pytorch(src)
    with progress("reading", src) as cb:
        trace = read_json(src, progress=cb)
    write_trace(trace, dst)
    _report(len(trace), dst, as_json)
