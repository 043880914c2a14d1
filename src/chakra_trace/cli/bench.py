"""`chakra bench`: read and compare saved benchmark measurements."""

from __future__ import annotations

import os

import click

from ..errors import ChakraError
from ..replay.bench_report import bench_report
from ..replay.comparison import MIN_RUNS, THRESHOLD, compare_runs
from ..replay.measure import Measurement, format_time, load_measurements, unit_for
from ..replay.units import comparable
from ..table import Column, Table
from .common import echo_warning, json_option, print_json, safe_text, show


@click.group()
def bench() -> None:
    """Saved benchmark results (JSON written by `Measurement.save` or `save_measurements`)."""


def _sides(files: tuple[str, ...], a_opt: tuple[str, ...], b_opt: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """A's and B's files: positional `A B` or `A... vs B...`, plus any -a / -b."""
    files_l = list(files)
    if "vs" in files_l:
        k = files_l.index("vs")
        a, b = files_l[:k], files_l[k + 1 :]
        if not a or not b:
            raise click.UsageError("give files on both sides of 'vs': A... vs B...")
    elif len(files_l) == 2:
        a, b = files_l[:1], files_l[1:]
    elif files_l:
        raise click.UsageError(f"{len(files_l)} files: give A B, or A... vs B... (or -a/-b per file)")
    else:
        a, b = [], []
    a, b = a + list(a_opt), b + list(b_opt)
    if not a or not b:
        raise click.UsageError("need result files for A and for B (A B, A... vs B..., or -a FILE -b FILE)")
    for f in a + b:
        if not os.path.isfile(f):
            raise click.UsageError(f"{f}: no such file")
    return a, b


def _pairs(a: list[str], b: list[str]) -> list[tuple[str, list[Measurement], list[Measurement]]]:
    """(name, A's runs, B's runs) per benchmark: files of one measurement each pair whatever their names;
    otherwise the names both sides have, each name's measurements from every file of a side."""
    la, lb = [load_measurements(f) for f in a], [load_measurements(f) for f in b]
    if all(len(m) == 1 for m in la + lb):
        xa = [next(iter(m.values())) for m in la]
        xb = [next(iter(m.values())) for m in lb]
        names = list(dict.fromkeys(m.name for m in xa + xb))
        return [(" / ".join(names), xa, xb)]
    out = []
    names_b = {k for m in lb for k in m}
    for k in dict.fromkeys(k for m in la for k in m):
        if k in names_b:
            out.append((k, [m[k] for m in la if k in m], [m[k] for m in lb if k in m]))
    if not out:
        raise ChakraError(f"{', '.join(a)} and {', '.join(b)} have no benchmark names in common")
    return out


@bench.command()
@click.argument("files", nargs=-1, metavar="A B | A... vs B...")
@click.option("-a", "a_opt", multiple=True, metavar="FILE", help="A result file of A (repeatable).")
@click.option("-b", "b_opt", multiple=True, metavar="FILE", help="A result file of B (repeatable).")
@click.option(
    "--alpha",
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="Significance level of the t-test (and 1 - the CI level).",
)
@click.option(
    "--min-runs",
    type=click.IntRange(2),
    default=MIN_RUNS,
    show_default=True,
    help="Runs (processes) per side needed before anything is called significant.",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0.0),
    default=THRESHOLD,
    show_default=True,
    help="Relative differences smaller than this are 'no meaningful difference'.",
)
@json_option
def compare(
    files: tuple[str, ...],
    a_opt: tuple[str, ...],
    b_opt: tuple[str, ...],
    alpha: float,
    min_runs: int,
    threshold: float,
    as_json: bool,
) -> None:
    """Is B different from A? Runs (processes) are the unit: each result file is one run, or several
    when it holds them (`chakra replay --runs N`, `Measurement.merge_runs`).

    \b
    chakra bench compare a.json b.json                 # one run each: not enough evidence
    chakra bench compare a*.json vs b*.json            # one run per file (e.g. bench.py --json)
    chakra bench compare -a a1.json -a a2.json -a a3.json -b b1.json -b b2.json -b b3.json

    Samples of one process share its memory layout, clock frequency and caches, so they do not
    replicate a benchmark: each run's median counts once, and Welch's t-test on the log run medians
    decides (see `chakra_trace.replay.comparison.compare_runs`). Fewer than --min-runs runs on a side
    give "not enough evidence". Every benchmark name the two sides share is compared (files of one
    measurement each pair whatever their names). The exit status is 0 whatever the verdict (2 for
    unreadable files): this reports, it does not gate.
    """
    a, b = _sides(files, a_opt, b_opt)
    results, units = [], []
    for k, xa, xb in _pairs(a, b):
        try:
            xa, xb, unit, converted = comparable(xa, xb)
        except ChakraError as e:
            raise ChakraError(f"{', '.join(a)} vs {', '.join(b)} ({k}): {e}") from None
        results.append((k, compare_runs(xa, xb, alpha=alpha, min_runs=min_runs, threshold=threshold, name=k)))
        units.append((unit, converted))
    if as_json:
        print_json([{**c.to_dict(), "unit": u, "converted": v} for (_, c), (u, v) in zip(results, units)])
        return

    cs = [c for _, c in results]
    shown = [unit_for(c.a_center) if c.a_center == c.a_center else "s" for c in cs]  # (B in A's unit)
    spread, right = Column(format=".1%"), Column(align="right")
    level = f"{100 * (1 - alpha):g}%"
    t = Table(
        {
            "name": [k for k, _ in results],
            "A runs": [c.a_runs for c in cs],
            "A": [format_time(c.a_center, u) for c, u in zip(cs, shown)],
            "A spread": [c.a_between_run_sd for c in cs],
            "B runs": [c.b_runs for c in cs],
            "B": [format_time(c.b_center, u) for c, u in zip(cs, shown)],
            "B spread": [c.b_between_run_sd for c in cs],
            "B/A": [c.ratio for c in cs],
            "ci": [None if c.ratio_ci is None else f"{c.ratio_ci[0]:.3f}–{c.ratio_ci[1]:.3f}" for c in cs],
            "p": [c.p_value for c in cs],
            "verdict": [c.verdict for c in cs],
        },
        title=f"A = {', '.join(a)}   B = {', '.join(b)}",
        spec={
            "A": right,
            "B": right,
            "A spread": spread,
            "B spread": spread,
            "B/A": Column(format=".3f"),
            "ci": Column(label=f"B/A {level} CI", align="right"),
            "p": Column(format=".2g"),
        },
    )
    show(
        t,
        limit=None,
        row_styles=["bold" if c.meaningful else "" for c in cs],
        caption="A, B: geometric mean of the run medians; spread: between-run sd (log)",
    )
    for unit, converted in dict.fromkeys(units):  # (on stdout: part of the result)
        click.echo(f"unit: {unit}" + (f" ({converted})" if converted else ""))


@bench.command("show")
@click.argument("result", type=click.Path(exists=True, dir_okay=False))
@json_option
def show_cmd(result: str, as_json: bool) -> None:
    """One summary line per measurement in RESULT."""

    ms = load_measurements(result)
    if as_json:
        print_json({k: m.to_dict() for k, m in ms.items()})
        return
    for k, m in ms.items():
        click.echo(safe_text(f"{k}: {m.summary()}" if k else m.summary()))  # (a result file is data)


@bench.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="The report: .html (one self-contained page) or .md (Markdown).",
)
@click.option(
    "--baseline",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="A result file of the baseline (repeatable; one file per run).",
)
@click.option("--title", default=None, help="The report's title.")
@click.option(
    "--scaling",
    type=click.Choice(["weak", "strong"]),
    default="weak",
    show_default=True,
    help="How results at several rank counts (or sizes) are read: work per rank fixed, or total work fixed.",
)
@json_option
def report(
    results: tuple[str, ...], output: str, baseline: tuple[str, ...], title: str | None, scaling: str, as_json: bool
) -> None:
    """Write a benchmark report of RESULTS (files of `chakra replay -o`, `Measurement.save`,
    `save_measurements`): the system, the run rules, per benchmark the median and mean with 95% CIs,
    variability and outliers, significance and speedup against --baseline (runs as the unit),
    scaling and energy where given.

    \b
    chakra bench report new*.json --baseline old*.json -o report.html
    chakra bench report run.json -o report.md --title "MLP replay, 1 thread"

    Files of the same benchmark are its runs (e.g. `chakra replay --runs 3`, or three files).
    --json also prints the report's figures (`BenchReport.to_dict()`)."""
    if not output.lower().endswith((".html", ".htm", ".md", ".markdown")):
        raise click.UsageError(f"{output}: give a .html or .md name")
    rep = bench_report(list(results), list(baseline) or None, title=title, scaling=scaling)
    path = rep.write(output)
    for f in rep.flags:
        echo_warning(f)
    if as_json:
        print_json(rep.to_dict())
    else:
        click.echo(f"report: {path}")
