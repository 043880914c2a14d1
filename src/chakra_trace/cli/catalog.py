"""`chakra catalog`: a fleet of jobs in an embedded DuckDB database (a thin layer over
`chakra_trace.catalog.Catalog`)."""

from __future__ import annotations

import csv
import os
import sys

import click

from ..catalog import QUERIES, Catalog
from ..errors import ChakraError
from ..table import Column, Table
from .common import print_json, show, steps
from .terminal import safe_line


@click.group()
def catalog() -> None:
    """A fleet of traces in one DuckDB file: add jobs, query them in SQL, report, export Parquet."""


def _tags(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        key, eq, value = v.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"{v!r}: expected KEY=VALUE", param_hint="--tag")
        out[key] = value
    return out


@catalog.command()
@click.argument("db", type=click.Path(dir_okay=False))
@click.argument("paths", nargs=-1, required=True)
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Worker processes.")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Tag every job added (repeatable).")
@click.option("--date", metavar="YYYY-MM-DD", help="The jobs' date (trends by date in the report).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def add(db: str, paths: tuple[str, ...], jobs: int, tags: tuple[str, ...], date: str | None, as_json: bool) -> None:
    """Add jobs (.et files, prefixes, job folders, `chakra collect` folders) to catalog DB.

    A job already in the catalog (same content hash) is skipped. Unreadable inputs are listed
    and the command exits with status 2 after adding the others."""
    with Catalog(db) as cat, steps("jobs", len(paths)) as bar:
        result = cat.add(list(paths), jobs=jobs, tags=_tags(tags), date=date, progress=bar)
    if as_json:
        print_json(result.to_dict())
    else:
        click.echo(
            f"{db}: added {len(result.added):,} jobs, skipped {result.skipped:,} already present "
            f"({result.seconds:.2f} s, {result.jobs_per_s:,.1f} jobs/s)"
        )
    for _source, err in result.errors:
        click.echo(f"error: {safe_line(err)}", err=True)
    if result.errors:
        sys.exit(2)


@catalog.command()
@click.argument("db", type=click.Path(dir_okay=False))
@click.argument("sql")
@click.option("--json", "as_json", is_flag=True, help="Print rows as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Print rows as CSV.")
def query(db: str, sql: str, as_json: bool, as_csv: bool) -> None:
    """Run SQL on catalog DB and print the rows.

    SQL may also be a named query: imbalance, outlier-ranks, fleet, top-types,
    top-collectives, by-date, by-tag, top-ops."""
    with Catalog(db, read_only=True) as cat:
        cols, rows = cat.rows(QUERIES.get(sql, sql))
    if as_csv:
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(rows)
        return
    names = [c if c not in cols[:i] else f"{c}_{i}" for i, c in enumerate(cols)]  # (SQL may repeat a name)
    t = Table(
        {n: [r[i] for r in rows] for i, n in enumerate(names)},
        spec={n: Column(label=c, format=str) for n, c in zip(names, cols)},
        missing="",
    )
    print_json(t.records()) if as_json else show(t, limit=None)  # (all rows: the SQL chose them)


@catalog.command()
@click.argument("db", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="fleet.html", show_default=True)
@click.option("--title", default="Fleet report", show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Rows per ranked table.")
def report(db: str, output: str, title: str, limit: int) -> None:
    """Write the fleet report (HTML): imbalance, top collectives by bytes, trends by date and tag."""
    with Catalog(db, read_only=True) as cat:
        path = cat.report(output, title=title, limit=limit)
    click.echo(f"wrote {path}")


@catalog.command()
@click.argument("db", type=click.Path(dir_okay=False))
@click.argument("directory", type=click.Path(file_okay=False))
def export(db: str, directory: str) -> None:
    """Export every table as Parquet: DIRECTORY/<table>/<table>.parquet."""
    if not os.path.exists(db):
        raise ChakraError(f"{db}: no such catalog")
    with Catalog(db, read_only=True) as cat:
        for p in cat.export(directory):
            click.echo(str(p))
