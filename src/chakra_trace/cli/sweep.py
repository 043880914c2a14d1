"""`chakra sweep ...`: design-space sweeps over the simulator, and views of their results."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..sweep import pareto, query, run_sweep, scaling, sensitivity
from ..sweep.results import read_meta
from ..table import Column, Table
from .common import console, json_option, print_json, show


@click.group()
def sweep() -> None:
    """Simulate every point of a design space (a YAML spec: systems, network fields, NPU counts,
    workloads and plans, simulator modes) into a Parquet results folder, then query it.

    \b
      chakra sweep run sweep.yaml -o results/            # local worker processes
      chakra sweep run sweep.yaml -o results/ --ray auto # on a local Ray runtime
      chakra sweep query results/ "SELECT system, min(step_s) FROM points GROUP BY system"
      chakra sweep pareto results/
      chakra sweep pareto results/ --y energy_j
      chakra sweep sensitivity results/
      chakra sweep scaling results/ --weak
    """


@sweep.command("run")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False), help="Results folder.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes [default: CPUs].")
@click.option("--ray", metavar="auto|ADDRESS", default=None, help="Run on Ray: auto starts a local runtime.")
@click.option("--retries", type=click.IntRange(min=0), default=2, show_default=True, help="Tries after a worker dies.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Run at most this many of the points left.")
@click.option(
    "--max-points",
    type=click.IntRange(min=1),
    default=None,
    help="Refuse a spec that makes more points than this [default: $CHAKRA_SWEEP_MAX_POINTS, else 100,000].",
)
@click.option(
    "--allow-path",
    "allow_paths",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    help="A folder whose files the spec may name besides its own folder (repeatable).",
)
@json_option
def run_cmd(spec, out, workers, ray, retries, limit, max_points, allow_paths, as_json) -> None:
    """Simulate the points of SPEC not yet in the results folder (rerun to resume).

    SPEC is data: its `where` is one SQL expression over the points' columns, and the files it
    names (workloads, network and system files) must be in its own folder or an --allow-path."""
    with _bar("sweep") as (advance, set_total):
        result = run_sweep(
            spec,
            out,
            workers=workers,
            ray=ray,
            retries=retries,
            limit=limit,
            progress=advance,
            on_total=set_total,
            max_points=max_points,
            allow_paths=allow_paths,
        )
    d = result.to_dict()
    if as_json:
        print_json(d)
        return
    console().print(
        f"{d['points']:,} points: {d['ran']:,} simulated ({d['errors']} failed), {d['skipped']:,} already there; "
        f"{d['wall_s']:.1f} s ({d['points_per_s']:.1f} points/s, {d['executor']}, {d['workers']} workers)"
        + (f"; {d['retried']} retried after a worker died" if d["retried"] else "")
        + (f"; {d['lost']} lost (rerun to retry)" if d["lost"] else "")
        + f" -> {out}"
    )


@contextmanager
def _bar(label: str) -> Iterator[tuple]:
    """(advance, set_total) driving a rich bar with ETA on a terminal, (None, None) in pipes: as
    `common.steps`, with the total told once the points left to run are known."""
    if not sys.stderr.isatty():
        yield None, None
        return
    cols = [TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*cols, transient=True, console=Console(stderr=True)) as p:
        task = p.add_task(label, total=None)
        yield (lambda n=1: p.advance(task, n)), (lambda n: p.update(task, total=n))


@sweep.command("query")
@click.argument("results", type=click.Path(exists=True, file_okay=False))
@click.argument("sql")
@json_option
def query_cmd(results, sql, as_json) -> None:
    """Run DuckDB SQL over RESULTS; its rows are the table `points` (the query reads no file)."""
    _show(query(results, sql), "query", as_json)


_by_option = click.option(
    "--by",
    multiple=True,
    default=("workload",),
    show_default=True,
    help="Compare points only within groups of this column (repeatable; --by '' for none).",
)


@sweep.command("pareto")
@click.argument("results", type=click.Path(exists=True, file_okay=False))
@click.option("--x", default="step_s", show_default=True, help="First objective (lower is better).")
@click.option("--y", default="cost", show_default=True, help="Second objective (lower is better).")
@_by_option
@json_option
def pareto_cmd(results, x, y, by, as_json) -> None:
    """The points of RESULTS no other point of their workload beats on both step time and cost."""
    df = pareto(results, x, y, by=list(by))
    cols = [c for c in _input_columns(results) if c in df.columns] + [x, y]
    _show(df[list(dict.fromkeys(cols))], f"Pareto front: {x} vs {y}", as_json)


@sweep.command("sensitivity")
@click.argument("results", type=click.Path(exists=True, file_okay=False))
@click.option("--metric", default="step_s", show_default=True, help="The column whose variance is split.")
@_by_option
@json_option
def sensitivity_cmd(results, metric, by, as_json) -> None:
    """Which axis moves the step time: each axis's main-effect share of the variance of the step
    time relative to its workload's mean."""
    _show(sensitivity(results, metric, by=list(by)), f"sensitivity of {metric}", as_json)


@sweep.command("scaling")
@click.argument("results", type=click.Path(exists=True, file_okay=False))
@click.option("--weak", is_flag=True, help="Weak scaling (work grows with the NPUs) instead of strong (fixed work).")
@click.option("--metric", default="step_s", show_default=True, help="The time column.")
@click.option(
    "--within",
    multiple=True,
    help="Group also by this column (repeatable) [default: the sweep's other axes that vary, NPU counts aside].",
)
@_by_option
@json_option
def scaling_cmd(results, weak, metric, within, by, as_json) -> None:
    """Speedup and parallel efficiency against the NPU count, per workload: strong scaling
    S(N) = T(N0) / T(N), efficiency S / (N / N0); --weak: efficiency T(N0) / T(N)."""
    df = scaling(results, weak=weak, by=list(by), within=list(within) or None, metric=metric)
    _show(df, f"{'weak' if weak else 'strong'} scaling of {metric}", as_json)


def _input_columns(results) -> list[str]:
    return list(read_meta(results).get("axes", []))


def _show(df, title: str, as_json: bool) -> None:
    t = Table.from_pandas(df, title=title)
    if as_json:
        print_json(t.records())
        return
    spec = {str(c): Column(format=_g6, align="right" if df[c].dtype.kind in "iuf" else "left") for c in df.columns}
    show(t.with_spec(**spec), limit=None)  # (all rows: the query chose them)


def _g6(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)
