"""`chakra analyze`: per-rank breakdowns, collective statistics, message-size imbalance."""
from __future__ import annotations

import click

from .common import console, json_option, print_json


def _workload(path: str, comm_groups: str | None):
    import os

    from ..io.et import read_trace
    from ..schema.workload import Workload, read_comm_groups

    groups = read_comm_groups(comm_groups) if comm_groups else {}
    if os.path.isfile(path):
        return Workload({0: read_trace(path)}, groups)
    return Workload.load(path, comm_groups=comm_groups)


_groups_option = click.option("--comm-groups", type=click.Path(exists=True, dir_okay=False),
                              help="Communicator groups JSON (ASTRA-sim format).")


@click.group()
def analyze() -> None:
    """Analyses of a workload (WORKLOAD: a `.et` file or the prefix of `<prefix>.<rank>.et`)."""


def _table(title: str, rows: list[dict], columns: list[str]) -> None:
    from rich.table import Table

    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="left" if c in ("group", "type") else "right")
    for r in rows:
        t.add_row(*("all" if c == "group" and r.get(c) == "" else _fmt(r.get(c)) for c in columns))
    console().print(t)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


@analyze.command()
@click.argument("workload")
@_groups_option
@json_option
def breakdown(workload: str, comm_groups, as_json: bool) -> None:
    """Per rank: span, compute, communication, overlap, exposed communication, idle (µs)."""
    from ..analyze.breakdown import _COLUMNS, breakdown as run

    res = run(_workload(workload, comm_groups))
    if as_json:
        print_json(res.to_dict())
        return
    _table("per-rank breakdown (µs, recorded times)", res.rows, ["rank", *_COLUMNS])


@analyze.command()
@click.argument("workload")
@_groups_option
@json_option
def collectives(workload: str, comm_groups, as_json: bool) -> None:
    """Count, bytes, time, algorithm and bus bandwidth per group, type and rank."""
    from ..analyze.collectives import collective_stats

    res = collective_stats(_workload(workload, comm_groups))
    if as_json:
        print_json(res.to_dict())
        return
    _table("collectives", res.summary(), ["group", "type", "rank", "count", "bytes", "time_us", "algbw_GBps",
                                          "busbw_GBps"])


@analyze.command()
@click.argument("workload")
@_groups_option
@click.option("--tolerance", type=float, default=0.0, show_default=True,
              help="Relative size difference from the group's median that still counts as equal.")
@json_option
def imbalance(workload: str, comm_groups, tolerance: float, as_json: bool) -> None:
    """Collective instances whose members move different bytes, and the ranks that stand out.
    Exits 1 when any is found."""
    from ..analyze.collectives import imbalance as run

    res = run(_workload(workload, comm_groups), tolerance)
    if as_json:
        print_json(res.to_dict())
    else:
        con = console()
        con.print(f"{res.checked:,} collective instances checked, {len(res.imbalanced):,} imbalanced")
        for x in res.imbalanced[:30]:
            sizes = ", ".join(f"{r}: {b:,}" for r, b in sorted(x.bytes.items()))
            con.print(f"[bold]{x.group or 'all'}#{x.index} {x.type}[/bold]: ranks {x.outliers} differ from the "
                      f"median {x.median:,.0f} B (max/min {x.spread:.2f}); bytes per rank {{{sizes}}}")
        if res.imbalanced:
            con.print("ranks that stand out (instances): " +
                      ", ".join(f"{r} ({n})" for r, n in res.by_rank().items()))
    if res.imbalanced:
        raise SystemExit(1)


@analyze.command()
@click.argument("workload")
@_groups_option
@json_option
def matrix(workload: str, comm_groups, as_json: bool) -> None:
    """Bytes sent between every pair of ranks (collectives as rings over their groups, plus sends)."""
    from ..analyze.collectives import communication_matrix

    res = communication_matrix(_workload(workload, comm_groups))
    if as_json:
        print_json(res.to_dict())
        return
    rows = [{"from": r, **{str(c): int(v) for c, v in zip(res.ranks, res.bytes[i])}} for i, r in enumerate(res.ranks)]
    _table("bytes sent (rows: from, columns: to)", rows[:32], ["from", *(str(c) for c in res.ranks[:16])])

