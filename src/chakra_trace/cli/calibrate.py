"""`chakra calibrate`: measure this machine's collectives and compute once; write a system profile."""

from __future__ import annotations

import os
import sys

import click

from ..calibrate import COLLECTIVES
from ..calibrate import calibrate as run
from ..errors import ChakraError
from .common import console, json_option, print_json, show


def _ints(text: str) -> list[int]:
    try:
        return [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {text!r}") from None


@click.command()
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The profile JSON to write.")
@click.option("--ranks", default="2,4", show_default=True, help="Rank counts to measure (comma-separated).")
@click.option(
    "--sizes",
    default="4096,16384,65536,262144,1048576,4194304,16777216,67108864",
    show_default=True,
    help="Message sizes in bytes (Chakra's comm_size: an all-gather's per-rank input).",
)
@click.option("--collectives", default=",".join(COLLECTIVES), show_default=True)
@click.option("--repeats", type=click.IntRange(min=3), default=20, show_default=True, help="Samples per point.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="Intra-op threads.")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default=None, help="Default: NCCL on GPUs, else gloo.")
@json_option
def calibrate(output, ranks, sizes, collectives, repeats, threads, backend, as_json) -> None:
    """Measure this machine (torch.distributed on 127.0.0.1, spawned ranks) and write a system
    profile for `chakra predict` and `chakra simulate --profile`.

    \b
      chakra calibrate -o profile.json
      chakra calibrate -o quick.json --ranks 2 --sizes 4096,1048576 --repeats 5
    """
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):  # before minutes of measuring
        raise ChakraError(f"{output}: cannot write here (no writable folder {folder})")
    quiet = as_json or not sys.stderr.isatty()  # progress on a terminal, quiet in pipes
    say = (lambda m: None) if quiet else (lambda m: click.echo(m, err=True))
    kinds = [c.strip() for c in collectives.split(",") if c.strip()]
    prof = run(
        ranks=_ints(ranks),
        sizes=_ints(sizes),
        collectives=kinds,
        repeats=repeats,
        threads=threads,
        backend=backend,
        say=say,
    )
    prof.save(output)
    if as_json:
        print_json(prof.to_dict())
        return
    show(prof.fits_table())
    con = console()
    for r, n in sorted(prof.networks.items()):
        worst = max((abs(x) for v in n["residuals"].values() for x in v), default=0.0)
        con.print(
            f"network at {r} ranks: switch, {n['bandwidth_gbps']:.3g} GB/s, {n['latency_ns'] / 1e3:.1f} µs "
            f"(worst residual {worst:.0%})"
        )
    c = prof.compute
    con.print(
        f"compute: {c.op_ns:.0f} ns per op, {c.mem_gbps:.3g} GB/s copy, matmul up to "
        f"{max((g for _f, g in c.matmul), default=0):.3g} GFLOP/s"
    )
    con.print(f"profile: {output}")
