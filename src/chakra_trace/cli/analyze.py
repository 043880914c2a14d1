"""`chakra analyze`: per-rank breakdowns, collective statistics, message-size imbalance."""

from __future__ import annotations

import os

import click
import numpy as np

from ..analyze import Analysis
from ..analyze.roofline import device_spec
from ..errors import ChakraError
from ..table import Column, Table
from .common import (
    cell,
    comm_groups_option,
    console,
    json_option,
    open_workload,
    print_json,
    show,
    tolerance_option,
)
from .systems import simulate_one_option, simulated


def _analysis(workload: str, comm_groups=None, system: str | None = None) -> Analysis:
    wl = open_workload(workload, comm_groups)
    return Analysis(wl, simulated(wl, system))


@click.group()
def analyze() -> None:
    """Analyses of a WORKLOAD: a `.et` file, the prefix of `<prefix>.<rank>.et[.gz]`, a folder holding
    one job, or a `chakra collect` folder."""


@analyze.command()
@click.argument("workload")
@comm_groups_option
@simulate_one_option
@json_option
def breakdown(workload: str, comm_groups, as_json: bool, system) -> None:
    """Per rank: span, compute, communication, overlap, exposed communication, idle (µs), and
    communication split into transfer and waiting for peers (exposed part too)."""
    a = _analysis(workload, comm_groups, system)
    res = a.breakdown()
    if as_json:
        print_json(res.to_dict())
        return
    show(
        res.to_table().head(64),
        title=f"per-rank breakdown (µs, {'simulated on ' + system if system else 'recorded'} times)"
        + (f"; first 64 of {len(res.rows)} ranks" if len(res.rows) > 64 else ""),
    )


@analyze.command()
@click.argument("workload")
@comm_groups_option
@json_option
def collectives(workload: str, comm_groups, as_json: bool) -> None:
    """Count, bytes, time (transfer and waiting for peers), and bus bandwidth from the transfer
    time per group, type and rank."""
    res = _analysis(workload, comm_groups).collective_stats()
    if as_json:
        print_json(res.to_dict())
        return
    cols = ["group", "type", "rank", "count", "bytes", "time_us", "transfer_us", "wait_us", "algbw_GBps", "busbw_GBps"]
    show(
        res.summary_table().select(cols), title="collectives (bandwidths from transfer time: waits for peers left out)"
    )


@analyze.command()
@click.argument("workload")
@comm_groups_option
@tolerance_option
@json_option
def imbalance(workload: str, comm_groups, tolerance: float, as_json: bool) -> None:
    """Collective instances whose members move different bytes, and the ranks that stand out.
    Exits 1 when any is found."""
    res = _analysis(workload, comm_groups).imbalance(tolerance)
    if as_json:
        print_json(res.to_dict())
    else:
        con = console()
        con.print(f"{res.checked:,} collective instances checked, {len(res.imbalanced):,} imbalanced")
        for x in res.imbalanced[:30]:
            sizes = ", ".join(f"{r}: {b:,}" for r, b in sorted(x.bytes.items()))
            line = (
                f"[bold]{cell(x.group or 'all')}#{x.index} {x.type}[/bold]: ranks {x.outliers} stand out; "
                f"bytes sent per rank {{{sizes}}} (median {x.median:,.0f} B, max/min {x.spread:.2f})"
            )
            if x.received:
                got = ", ".join(f"{r}: {b:,.0f}" for r, b in sorted(x.received.items()))
                line += f"; bytes received per rank {{{got}}}"
            con.print(line)
        if res.imbalanced:
            con.print("ranks that stand out (instances): " + ", ".join(f"{r} ({n})" for r, n in res.by_rank().items()))
    if res.imbalanced:
        raise SystemExit(1)


@analyze.command()
@click.argument("workload")
@comm_groups_option
@json_option
def matrix(workload: str, comm_groups, as_json: bool) -> None:
    """Bytes sent between every pair of ranks (collectives as rings over their groups, plus sends)."""
    res = _analysis(workload, comm_groups).communication_matrix()
    if as_json:
        print_json(res.to_dict())
        return
    show(res.to_table().head(32).select(["from", *(str(c) for c in res.ranks[:16])]))


def _short(name: str, width: int = 60) -> str:
    """A name for a table: at most `width` characters."""
    return name if len(name) <= width else name[: width - 1] + "…"


def _num(v: float) -> str:
    """A float over a wide range, readable in a table column."""
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 0.01 or a == 0:
        return f"{v:.3f}"
    return f"{v:.2e}"


def _scaled(label: str, by: float) -> Column:
    """A column shown in larger units (FLOP as GFLOP: ``by`` 1e9)."""
    return Column(label=label, format=lambda v: _num(v / by))


_NAME = Column(format=_short)
_PCT = Column(format=".2%")


@analyze.command()
@click.argument("workload")
@click.option(
    "--device",
    default=None,
    help="Device preset: v100, a100, h100, h100-pcie, h200, b200, mi300x, mi250x, mi210, tpu-v5e, cpu (default h100, unless "
    "--peak-tflops and --mem-bw-gbps are given; given with a preset they override it).",
)
@click.option("--peak-tflops", type=float, help="Peak compute in TFLOP/s.")
@click.option("--mem-bw-gbps", type=float, help="Memory bandwidth in GB/s.")
@click.option(
    "--fp32-as",
    "fp32_as",
    type=click.Choice(["tf32", "fp32"]),
    default=None,
    help="The peak FP32 matmuls and convolutions run at. Default: PyTorch's defaults (FP32 convolutions "
    "as TF32 on NVIDIA Ampere and later, FP32 matmuls as FP32); tf32: both as TF32; fp32: both as FP32.",
)
@click.option("--top", type=click.IntRange(min=0), default=25, show_default=True, help="Op names shown in the table.")
@click.option("--ops", is_flag=True, help="With --json: every op, not only the per-name totals.")
@json_option
def roofline(workload: str, device, peak_tflops, mem_bw_gbps, fp32_as, top: int, ops: bool, as_json: bool) -> None:
    """Compute ops against a device's roofs: arithmetic intensity (FLOP/B from num_ops and
    tensor_size), achieved vs attainable FLOP/s, memory or compute bound, per op name."""
    if device is None and (peak_tflops is None or mem_bw_gbps is None):
        device = "h100"
    dev = device_spec(device, peak_tflops=peak_tflops, mem_bw_gbps=mem_bw_gbps)
    res = _analysis(workload).roofline(dev, fp32_as=fp32_as or "pytorch")
    if as_json:
        print_json(res.to_dict(ops=ops))
        return
    cols = ["name", "count", "flops", "bytes", "time_us", "intensity", "achieved", "attainable", "efficiency", "bound"]
    spec = {
        "name": _NAME,
        "flops": _scaled("GFLOP", 1e9),
        "bytes": _scaled("MB", 1e6),
        "time_us": Column(format=",.0f"),
        "intensity": Column(label="FLOP/B", format=_num),
        "achieved": _scaled("achieved TFLOP/s", 1e12),
        "attainable": _scaled("attainable TFLOP/s", 1e12),
        "efficiency": _PCT,
    }
    by_name = Table.from_records(res.by_name()[: max(top, 0)], cols, spec=spec)
    show(by_name, title=f"roofline on {dev.name} (per op name, most time first)")
    s = res.summary()
    con = console()
    con.print(
        f"device {dev.name}: peak {dev.peak_flops / 1e12:,.1f} TFLOP/s, memory {dev.mem_bw / 1e9:,.0f} GB/s, "
        f"ridge {dev.ridge:,.1f} FLOP/B"
    )
    con.print(
        f"coverage: {s['ops']:,} of {s['comp_nodes']:,} COMP nodes have FLOP and byte counts "
        f"({s['skipped']:,} skipped; {s['covered_time_us']:,} of {s['comp_time_us']:,} µs of compute time); "
        f"{s['memory_bound']:,} memory bound, {s['compute_bound']:,} compute bound"
    )
    types = [
        f"{d} {v['ops']:,} ops at the {v['peak_dtype']} peak {v['peak_flops'] / 1e12:,.1f} TFLOP/s"
        + (" (no type in the trace: the device's default)" if d == "unknown" else "")
        + (
            " (no datasheet peak for it)"
            if d not in ("unknown", v["peak_dtype"]) and " as " not in d and dev.peaks
            else ""
        )
        for d, v in s["by_dtype"].items()
    ]
    if types:
        con.print("compute types: " + "; ".join(types) + f" (TF32 rule {s['fp32_as']})", markup=False)


@analyze.command()
@click.argument("a")
@click.argument("b")
@click.option(
    "--threshold",
    type=float,
    default=0.05,
    show_default=True,
    help="Relative change of an op's total time (of A's) that still counts as the same.",
)
@click.option(
    "--min-us",
    type=float,
    default=1.0,
    show_default=True,
    help="Absolute change (µs) below which an op counts as the same.",
)
@click.option("--by-rank", is_flag=True, help="Compare each rank separately.")
@click.option("--top", type=click.IntRange(min=0), default=30, show_default=True, help="Changes shown in the table.")
@json_option
def diff(a: str, b: str, threshold: float, min_us: float, by_rank: bool, top: int, as_json: bool) -> None:
    """Compare two workloads (B against A): whole-run metrics, collectives, and the ops
    (by node type and name) that got slower or faster, appeared or went away."""
    labels = (os.path.basename(a.rstrip("/")) or a, os.path.basename(b.rstrip("/")) or b)
    res = _analysis(a).diff(open_workload(b), threshold=threshold, min_us=min_us, labels=labels, by_rank=by_rank)
    if as_json:
        print_json(res.to_dict())
        return
    con = console()
    con.print(f"A = {cell(a)}\nB = {cell(b)}")
    for m in res.summary["metrics"]:
        change = "" if m["ratio"] is None else f" ({100 * (m['ratio'] - 1):+.1f}%)"
        con.print(f"  {m['metric']}: {m['a']:,} -> {m['b']:,}{change}")
    for c in res.summary["collectives"]:
        mark = " [bold]changed[/bold]" if c["changed"] else ""
        con.print(
            f"  {cell(c['group'] or 'all')} {c['type']}: {c['count_a']:,} ({c['bytes_a']:,} B) -> "
            f"{c['count_b']:,} ({c['bytes_b']:,} B){mark}"
        )
    con.print("  ops: " + ", ".join(f"{n:,} {s}" for s, n in res.summary["status"].items()))
    t = res.to_table()
    changed = t.take(np.flatnonzero(np.asarray(t["status"], dtype=object) != "same")[: max(top, 0)])
    if not len(changed):
        con.print("no op changed beyond the threshold")
        return
    cols = ["name", "type", "count_a", "count_b", "total_us_a", "total_us_b", "delta_us", "ratio", "status"]
    show(
        changed.select((["rank"] if by_rank else []) + cols).with_spec(name=_NAME),
        title=f"top changes (B vs A, threshold {threshold:g}, min {min_us:g} µs)",
    )


@analyze.command("critical-path")
@click.argument("workload")
@comm_groups_option
@click.option("--rank", type=int, default=None, help="One rank's dependency chain instead of the whole job's.")
@simulate_one_option
@click.option(
    "--top", type=click.IntRange(min=0), default=20, show_default=True, help="Operations listed (longest first)."
)
@json_option
def critical_path_cmd(workload: str, comm_groups, rank, system, top: int, as_json: bool) -> None:
    """The chain of operations across ranks that sets the step time: which rank and which
    ops (through collectives: the last member to arrive), from recorded or simulated times."""
    a = _analysis(workload, comm_groups, system)
    if rank is not None and rank not in a.workload.traces:
        raise ChakraError(f"{workload}: no rank {rank}; the job has ranks {a.workload.ranks[:20]}")
    if rank is not None:
        cp = a.critical_path(rank)
        t = a.workload.traces[rank]
        if as_json:
            print_json({"rank": rank, "length_us": cp.length_us, "ids": cp.ids.tolist()})
            return
        console().print(f"rank {rank}: critical path {cp.length_us:,} µs over {cp.rows.size} nodes")
        nodes = cp.to_table(t)
        longest = np.argsort(-np.asarray(nodes["duration_us"], np.int64), kind="stable")[:top]
        shown = nodes.take(longest).select(["id", "name", "duration_us"]).with_spec(name=_NAME)
        show(shown, title="longest nodes on the path")
        return
    p = a.critical_path()
    if as_json:
        print_json(p.to_dict())
        return
    con = console()
    con.print(
        f"[bold]job critical path[/bold] ({p.source}): {p.length_ns / 1000:,.1f} µs of a "
        f"{p.recording_ns / 1000:,.1f} µs recording (the whole job: every step it holds); {len(p)} operations; unexplained waits "
        f"{p.wait_ns / 1000:,.1f} µs; the last operation ends on rank {p.last_rank}"
    )
    if p.start_line():  # the rest of the step, named: path + start skew + gap = step
        con.print(f"before the path: {p.start_line()}; path + these = {p.accounted_ns / 1000:,.1f} µs", highlight=False)
    length = max(p.length_ns, 1)
    con.print(
        "time on the path per rank: "
        + ", ".join(f"{r}: {v / 1000:,.1f} µs ({v / length:.0%})" for r, v in list(p.by_rank().items())[:10])
    )
    con.print("per resource: " + ", ".join(f"{k} {v / 1000:,.1f} µs" for k, v in p.by_kind().items() if v))
    if not len(p):
        return
    c = p.to_table().take(p.columns["time_ns"].argsort(kind="stable")[::-1][:top])
    gated = np.asarray(c["gated_by_rank"], np.int64)
    ops = Table(
        {
            "rank": c["rank"],
            "name": c["name"],
            "kind": c["kind"],
            "start_us": np.asarray(c["start_ns"]) / 1000,
            "time_us": np.asarray(c["time_ns"]) / 1000,
            "share": np.asarray(c["time_ns"]) / length,
            "waited for": c["via"],
            "last to arrive": [g if g >= 0 else None for g in gated.tolist()],
        },
        title="operations on the path, longest first",
        spec={"name": _NAME, "share": _PCT},
    )
    show(ops)


@analyze.command("top")
@click.argument("workload")
@comm_groups_option
@click.option("--by", type=click.Choice(["total", "exposed", "count"]), default="total", show_default=True)
@click.option("-n", "--top", "n", type=click.IntRange(min=1), default=20, show_default=True)
@simulate_one_option
@json_option
def top_cmd(workload: str, comm_groups, by: str, n: int, system, as_json: bool) -> None:
    """Operations by total time, or by exposed time (their part of the job's critical path)."""
    res = _analysis(workload, comm_groups, system).top_ops(by=by, n=n)
    if as_json:
        print_json(res.to_dict())
        return
    cols = ["name", "type", "count", "ranks", "total_us", "mean_us", "exposed_us", "exposed_share"]
    show(res.to_table().select(cols).with_spec(name=_NAME))
