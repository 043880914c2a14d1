"""`chakra analyze kernels|temporal|idle|launches|overlap|stragglers|sequences|memory|counters|overlay`:
the device analyses (`analyze.device`) added to the `chakra analyze` group."""

from __future__ import annotations

import click

from ..analyze import Analysis
from ..analyze.device import DeviceAnalysis
from ..analyze.device.overlay import critical_path_overlay
from ..table import Tables
from ..timeline.open import SOURCE_CHOICES
from .analyze import analyze
from .common import console, json_option, open_workload, print_json, progress, show
from .systems import simulate_one_option, simulated

_WHAT = (
    "WORKLOAD: Kineto trace file(s), a folder of them, a `chakra collect` folder, or any Chakra job "
    "(its nodes at recorded times, or simulated with --simulate)."
)


def _open(workload: tuple[str, ...], source: str, system: str | None) -> DeviceAnalysis:
    if system:
        wl = open_workload(workload[0]) if len(workload) == 1 else None
        if wl is None:
            raise click.UsageError("--simulate takes one Chakra WORKLOAD")
        return Analysis(wl, simulated(wl, system)).devices()
    src = list(workload) if len(workload) > 1 else workload[0]
    return Analysis.open(src, devices=source, progress=progress).devices()


def _show(title: str, res: Tables, as_json: bool, rows: int) -> None:
    if as_json:
        print_json(res.to_dict())
        return
    for k, v in res.summary.items():
        if not isinstance(v, (list, dict)):
            console().print(f"{k}: {v}", markup=False)
    for name, table in res.tables.items():
        if not len(table):
            console().print(f"{title} / {name}: none", markup=False)
            continue
        more = f" (first {rows} of {len(table)})" if rows and len(table) > rows else ""
        show(table.head(rows) if rows else table, title=f"{title}: {name}{more}", limit=None)  # (--rows says how many)


def _common(f):
    f = click.argument("workload", nargs=-1, required=True)(f)
    f = click.option(
        "--source",
        type=click.Choice(SOURCE_CHOICES),
        default="auto",
        show_default=True,
        help="Read Kineto traces where there are any (auto), or insist on them or on the Chakra trace.",
    )(f)
    f = simulate_one_option(f)
    f = click.option("--rows", default=30, show_default=True, help="Rows shown per table (0: all; JSON has all).")(f)
    return json_option(f)


def _command(name: str, method: str, doc: str, options: list | None = None):
    """`chakra analyze NAME`: DeviceAnalysis.METHOD with the common options and its own."""

    @analyze.command(name, help=f"{doc}\n\n{_WHAT}")
    @_common
    def cmd(workload, source, system, rows, as_json, **kw):
        res = getattr(_open(workload, source, system), method)(**kw)
        _show(name, res, as_json, rows)

    for opt in reversed(options or []):
        cmd = opt(cmd)
    return cmd


_command("kernels", "kernels", "Kernel time by kind and by name, per rank (top-k per kind, the rest as others).",
         options=[click.option("--top", "top_k", default=10, show_default=True, help="Kernels named per kind.")])  # fmt: skip
_command("temporal", "temporal", "Each rank's and stream's window: computation, communication, memory, idle.")
_command("idle", "idle", "Idle time per stream by cause: host wait, kernel wait, other.")
_command("launches", "launches", "Kernel launches: CPU launch time, launch-to-start delay, outliers.")
_command("overlap", "overlap", "Communication overlapped by computation; device vs host communication time.")
_command("stragglers", "stragglers", "Ranks late to collectives, and how much each cost the others.")
_command("sequences", "sequences", "Frequent kernel sequences per stream (fusion candidates).",
         options=[click.option("--length", default=3, show_default=True, help="Kernels per sequence."),
                  click.option("--top", "top_k", default=10, show_default=True, help="Sequences per stream."),
                  click.option("--op", default=None, help="Only kernels launched under this host op.")])  # fmt: skip
_command("op-kernels", "op_kernels", "Which kernels each host op launched (aten op -> kernels).")
_command("memory", "memory", "Allocated and reserved memory over time, from the trace's memory events.")
_command("counters", "counters", "Queue length per stream and memory bandwidth over time.")


@analyze.command("overlay")
@click.argument("kineto")
@click.option("-o", "--output", required=True, help="Perfetto/Chrome JSON to write (.json or .json.gz).")
@click.option("--host", "host_trace", default=None, help="The rank's PyTorch host trace (else found beside KINETO).")
@json_option
def overlay(kineto: str, output: str, host_trace: str | None, as_json: bool) -> None:
    """The critical path overlaid on a Kineto trace: its events marked and chained, for Perfetto."""
    res = critical_path_overlay(kineto, output, et_path=host_trace)
    if as_json:
        print_json(res.to_dict())
    else:
        for k, v in res.to_dict().items():
            console().print(f"{k}: {v}", markup=False)
