"""`chakra bench`: read and compare saved benchmark measurements."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from ..errors import ChakraError
from ..replay.comparison import compare as compare_ms
from ..replay.measure import format_time, load_measurements, unit_for
from .common import console, json_option, print_json


@click.group()
def bench() -> None:
    """Saved benchmark results (JSON written by `Measurement.save` or `save_measurements`)."""


def _ci(ci, unit: str) -> str:

    if ci is None:
        return "-"
    return f"{format_time(ci[0], unit).split()[0]}–{format_time(ci[1], unit)}"


@bench.command()
@click.argument("a", type=click.Path(exists=True, dir_okay=False))
@click.argument("b", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--alpha",
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="Significance level of the t-test.",
)
@json_option
def compare(a: str, b: str, alpha: float, as_json: bool) -> None:
    """Is B different from A? Compares every benchmark name the two files share.

    Two files of one measurement each are compared whatever their names. The exit status is 0 whatever the
    verdict (2 for unreadable files): this reports, it does not gate.
    """

    ma, mb = load_measurements(a), load_measurements(b)
    if len(ma) == 1 and len(mb) == 1:
        (ka, xa), (kb, xb) = next(iter(ma.items())), next(iter(mb.items()))
        pairs = [(ka if ka == kb else f"{ka} / {kb}", xa, xb)]
    else:
        pairs = [(k, ma[k], mb[k]) for k in ma if k in mb]
        if not pairs:
            raise ChakraError(f"{a} and {b} have no benchmark names in common")
    results = [(k, x, y, compare_ms(x, y, alpha=alpha)) for k, x, y in pairs]
    if as_json:
        print_json([{"name": k, **c.to_dict(), "a": x.stats(), "b": y.stats()} for k, x, y, c in results])
        return

    t = Table(title=f"A = {escape(a)}   B = {escape(b)}")
    for col in ("name", "A median", "A 95% CI", "B median", "B 95% CI", "B/A", "B/A 95% CI", "p", "verdict"):
        t.add_column(
            col,
            justify="left" if col in ("name", "verdict") else "right",
            overflow="fold" if col in ("name", "verdict") else "ellipsis",
        )
    for k, x, y, c in results:
        unit = unit_for(x.median) if x.n else "s"
        ratio_ci = "-" if c.ratio_ci95 is None else f"{c.ratio_ci95[0]:.3f}–{c.ratio_ci95[1]:.3f}"
        p = "-" if c.p_value != c.p_value else f"{c.p_value:.2g}"
        style = "bold" if c.significant else ""
        t.add_row(
            escape(k),
            format_time(x.median, unit),
            _ci(x.ci95_median, unit),
            format_time(y.median, unit),
            _ci(y.ci95_median, unit),
            f"{c.ratio:.3f}",
            ratio_ci,
            p,
            escape(c.verdict),
            style=style,
        )
    console().print(t)


@bench.command()
@click.argument("result", type=click.Path(exists=True, dir_okay=False))
@json_option
def show(result: str, as_json: bool) -> None:
    """One summary line per measurement in RESULT."""

    ms = load_measurements(result)
    if as_json:
        print_json({k: m.to_dict() for k, m in ms.items()})
        return
    for k, m in ms.items():
        click.echo(f"{k}: {m.summary()}" if k else m.summary())
