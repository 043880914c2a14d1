"""`chakra validate`: find what breaks simulators in a trace or workload, and repair what can be."""

from __future__ import annotations

import os
from typing import Any

import click

from ..io.et import read_trace, write_trace
from ..io.workload import Workload, rank_of
from ..schema.trace import Trace
from ..table import Table
from ..validate import ValidationReport, fix_trace, validate_trace, validate_workload
from .common import cell, comm_groups_option, console, json_option, open_workload, print_json, show

_STYLE = {"error": "bold red", "warning": "yellow"}


def _load(path: str, comm_groups: str | None) -> tuple[Trace | Workload, int | None, dict[str, list[int]]]:
    """(trace, rank or None when unknown, groups) for one rank; (workload, None, groups) for several."""
    w = open_workload(path, comm_groups)
    if len(w) > 1:
        return w, None, w.groups
    ((rank, trace),) = w.traces.items()
    return trace, (None if os.path.isfile(path) and rank_of(path) is None else rank), w.groups


def _check(obj: Trace | Workload, rank: int | None, groups: dict[str, list[int]]) -> ValidationReport:
    """The checks `simulate` runs before it runs a job: a lone rank's too is checked as a job
    (its groups may name ranks it has no trace of, its sends peers that are absent)."""
    if isinstance(obj, Trace) and rank is not None:
        return validate_workload(Workload({rank: obj}, groups))
    return validate_workload(obj) if isinstance(obj, Workload) else validate_trace(obj, rank=rank)


def _failed(report, strict: bool) -> bool:
    return bool(report.errors or (strict and report.warnings))


def _print_report(con, title: str, report: ValidationReport) -> None:
    if report.issues:
        show_rank = any(i.rank is not None for i in report.issues) and len(report.ranks) > 1
        t = report.to_table()
        cols = {k: t[k] for k in ("severity", "code", "count", *(["rank"] if show_rank else []))}
        cols["message"] = [m + (" (fixable)" if f else "") for m, f in zip(t["message"], t["fixable"])]
        issues = Table(cols, missing="")
        show(issues, title=title, what="issues", styles={"severity": _STYLE}, title_justify="left", show_lines=False)
    style = "bold red" if report.errors else ("yellow" if report.warnings else "bold green")
    con.print(f"[{style}]{cell(report.summary_line())}[/]")


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="WORKLOAD...", type=click.Path())
@json_option
@click.option(
    "--fix",
    "fix_out",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="OUT",
    help="Write a repaired copy of the (single) trace to OUT and re-validate it; the exit "
    "status then reflects the repaired copy.",
)
@click.option("--strict", is_flag=True, help="Fail (exit 1) on warnings too.")
@comm_groups_option
def validate(paths: tuple[str, ...], as_json: bool, fix_out: str | None, strict: bool, comm_groups: str | None) -> None:
    """Check `.et` files or workloads (WORKLOAD: a file, a prefix of `<prefix>.<rank>.et[.gz]`, a folder,
    a `chakra collect` folder).

    A prefix with several ranks is checked per rank and across ranks (collective order per
    communicator group, send/receive matching). Exit status: 0 without errors (warnings
    allowed unless --strict), 1 with errors, 2 on unreadable input.
    """
    if fix_out is not None and len(paths) != 1:
        raise click.UsageError("--fix takes exactly one WORKLOAD")
    con = console()
    results: list[dict[str, Any]] = []
    failed = False
    for path in paths:
        obj, rank, groups = _load(path, comm_groups)
        if fix_out is not None and isinstance(obj, Workload):
            raise click.UsageError(f"--fix repairs one trace; {path} is a workload of {len(obj)} ranks")
        if comm_groups and not isinstance(obj, Workload) and rank is None and not as_json:
            click.echo("note: --comm-groups applies to workloads (a rank file or prefix); ignored", err=True)
        report = _check(obj, rank, groups)
        out: dict[str, Any] = {"path": path, "report": report.to_dict()}
        if not as_json:
            _print_report(con, path, report)
        if fix_out is None:
            failed |= _failed(report, strict)
        else:
            assert not isinstance(obj, Workload)  # --fix with a workload was refused above
            fixed, changes = fix_trace(obj)
            write_trace(fixed, fix_out)
            fixed_report = validate_trace(read_trace(fix_out), rank=rank)
            failed |= _failed(fixed_report, strict)
            out["fix"] = {"output": fix_out, "changes": changes, "report": fixed_report.to_dict()}
            if not as_json:
                con.print()
                if changes:
                    con.print(f"[bold]repaired copy written to {cell(fix_out)}:[/bold]")
                    for ch in changes:
                        con.print(f"  - {ch}", highlight=False, markup=False)
                else:
                    con.print(f"[bold]nothing to repair; unchanged copy written to {cell(fix_out)}[/bold]")
                con.print()
                _print_report(con, f"{fix_out} (repaired)", fixed_report)
        results.append(out)
    if as_json:
        print_json(results[0] if len(results) == 1 else results)
    if failed:
        # `raise SystemExit` rather than ctx.exit: the status must survive click's
        # standalone_mode=False in `chakra_trace.cli.main`.
        raise SystemExit(1)
