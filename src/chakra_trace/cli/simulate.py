"""`chakra simulate`: predict a training step on a system described in ASTRA-sim's formats."""

from __future__ import annotations

import warnings
from typing import Any

import click
import numpy as np

from ..analyze.roofline import default_device
from ..calibrate.profile import SystemProfile
from ..simulate import SimulationWarning
from ..simulate.energy import energy as step_energy
from ..simulate.presets import choose_system, simulate_on
from ..simulate.result import PER_NPU
from ..table import Column, Table
from ..visualize.timeline import timeline as build_timeline
from ..visualize.timeline import write_timeline
from .common import comm_groups_option, console, counts, echo_warning, json_option, open_workload, print_json, show
from .systems import SYSTEM_HELP, preset_names


@click.command()
@click.argument("workload", required=False)
@click.option("--workload", "workload_opt", hidden=True, help="Old spelling of the WORKLOAD argument.")
@click.option("--system", metavar="PRESET|SYSTEM.json", default=None, help=SYSTEM_HELP)
@click.option(
    "--network",
    type=click.Path(exists=True, dir_okay=False),
    help="Network YAML (ASTRA-sim's analytical format); goes with a system JSON given to --system.",
)
@click.option("--memory", type=click.Path(exists=True, dir_okay=False), help="Memory JSON (remote memory model).")
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(exists=True, dir_okay=False),
    help="A system profile from `chakra calibrate`: the job's ranks on its fitted network (instead of --system).",
)
@comm_groups_option
@click.option(
    "--compat",
    type=click.Choice(["none", "astra"]),
    default="none",
    show_default=True,
    help="astra: reproduce ASTRA-sim's numbers exactly, flaws included.",
)
@click.option(
    "--device",
    "device_name",
    metavar="NAME",
    default=None,
    help="Cost compute nodes by the roofline of a device preset (h100, h100-pcie, h200, a100, v100, b200, mi300x, mi250x, mi210, "
    "tpu-v5e, xeon-8380x2; cpu: this machine's CPU), the presets of `chakra analyze roofline`: "
    "for host-only traces of GPU jobs, whose device ops have FLOPs and bytes but no time. "
    "Without --system: the job's own ranks, communication as recorded; communication without recorded "
    "times (a host-only trace) on one switch at the device's datasheet NVLink / Infinity Fabric bandwidth.",
)
@click.option(
    "--efficiency",
    type=float,
    default=1.0,
    show_default=True,
    help="With --device: the share of the device's roofs its kernels reach (a guess; --compute-model kernels "
    "needs none).",
)
@click.option(
    "--compute-model",
    type=click.Choice(["roofline", "kernels"]),
    default=None,
    help="With --device: roofline costs each node at the device's datasheet roofs (a lower bound); kernels "
    "costs it as the device's kernels run it: achievable matmul rate with tile and wave fill, fused "
    "attention, memory-bound ops at achievable HBM bandwidth, launch gaps (docs/device-model.md). "
    "Default: kernels on a real machine's preset (selene, dgx-h100, ...), roofline elsewhere.",
)
@click.option(
    "--fp32-as",
    "fp32_as",
    type=click.Choice(["tf32", "fp32"]),
    default=None,
    help="With --device: the peak FP32 matmuls and convolutions run at. Default: PyTorch's defaults "
    "(FP32 convolutions as TF32 on NVIDIA Ampere and later, cudnn.allow_tf32; FP32 matmuls as FP32, "
    "matmul.allow_tf32 off since PyTorch 1.12); tf32: both as TF32 (PyTorch <= 1.11, or "
    "set_float32_matmul_precision('high')); fp32: both as FP32. Each node runs at its dtype's peak.",
)
@click.option(
    "--energy",
    "energy_on",
    is_flag=True,
    help="Also the step's energy (J), average power and perf/W by category, at the --device's power "
    "(without --device: this machine's CPU for a CPU-only job; a GPU job must name its device); see "
    "chakra_trace.simulate.energy for the model and its figures.",
)
@click.option("--congestion-aware", "aware", is_flag=True, help="Per-link queues instead of the unaware model.")
@click.option("--timeline", type=click.Path(dir_okay=False), help="Write the simulated timeline (Perfetto JSON).")
@click.option(
    "--no-shortcuts",
    "no_shortcuts",
    is_flag=True,
    help="Event by event for every NPU and every algorithm step (the same result; shortcuts are exact and "
    "listed when taken: one NPU for many identical ones, repeated uniform steps in closed form; and a "
    "collective whose plan and relative start times an earlier one had reuses its times, shifted).",
)
@click.option(
    "--no-validate",
    "no_validate",
    is_flag=True,
    help="Run even what `chakra validate` rejects (collectives that differ across ranks, unknown peers, ...).",
)
@json_option
def simulate(
    workload,
    workload_opt,
    system,
    network,
    memory,
    profile_path,
    comm_groups,
    compat,
    aware,
    device_name,
    efficiency,
    compute_model,
    fp32_as,
    energy_on,
    timeline,
    no_shortcuts,
    no_validate,
    as_json,
) -> None:
    """Simulate WORKLOAD on a system and print per-NPU finish and exposed communication times (ns),
    totals and the collectives.

    \b
      chakra simulate out/job --system dgx-8x8
      chakra simulate out/job --system sys.json --network net.yml
      chakra simulate host_only.0.et --device h100

    WORKLOAD is a `.et` file (run on every NPU), the prefix of `<prefix>.<rank>.et[.gz]`, a folder
    holding one job, or a `chakra collect` folder.
    """
    if workload and workload_opt and workload != workload_opt:
        raise click.UsageError("give the workload once (WORKLOAD, or the old --workload)")
    workload = workload or workload_opt
    if not workload:
        raise click.UsageError("missing WORKLOAD (a .et file, a <prefix> of <prefix>.<rank>.et, or a folder)")
    if profile_path is not None and (system or network or device_name):
        raise click.UsageError("--profile is the whole system: give no --system, --network or --device with it")
    if profile_path is None and system is None and network is None and device_name is None:
        raise click.UsageError(f"missing --system: a preset ({preset_names()}) or a system JSON with --network")
    if fp32_as is not None and device_name is None:
        raise click.UsageError("--fp32-as says at which peak a --device runs FP32 work: give --device too")
    kernels = None if compute_model is None else compute_model == "kernels"
    if compute_model is not None and device_name is None:
        raise click.UsageError("--compute-model chooses how a --device costs compute: give --device too")
    preset = (
        choose_system(system, network, device=device_name, efficiency=efficiency, fp32_as=fp32_as, kernels=kernels)
        if profile_path is None
        else None
    )
    wl = open_workload(workload, comm_groups)
    if profile_path is not None:
        preset = SystemProfile.load(profile_path).preset(len(wl))
    assert preset is not None
    kw = {"memory": memory, "compat": compat == "astra", "aware": aware, "validate": not no_validate}
    kw["shortcuts"] = not no_shortcuts
    label = preset.name
    if device_name is not None:
        label += f" with {device_name}" + (f" at {efficiency:g} of its roofline" if efficiency != 1 else "")
        dc = preset.system.device_compute
        label += " (kernel model)" if dc is not None and dc.kernels is not None else ""
    with warnings.catch_warnings(), counts(f"simulating on {label}", "nodes") as tick:
        warnings.simplefilter("ignore", SimulationWarning)  # listed once at the end (result.warnings)
        res = simulate_on(wl, preset, progress=tick, **kw)
    if timeline:
        write_timeline(build_timeline(None, res), timeline)
    report = step_energy(res, device_name or default_device(wl), preset.network) if energy_on else None
    if as_json:
        print_json({**res.to_dict(), **({"energy": report.to_dict()} if report is not None else {})})
        return
    _print(res, timeline)
    if report is not None:
        console().print(report.summary(), markup=False, highlight=False)


def comm_split_line(res) -> str:
    """The NPU that ends last: its communication as transfer and waiting for peers."""
    i = int(np.argmax(res.finish_ns))

    def ms(a) -> str:
        return f"{int(a[i]) / 1e6:,.3f} ms"

    return (
        f"NPU {i} (ends last): comm {ms(res.comm_ns)} = transfer {ms(res.transfer_ns)} + waiting for peers "
        f"{ms(res.peer_wait_ns)}; exposed comm {ms(res.exposed_comm_ns)} = transfer {ms(res.exposed_transfer_ns)} "
        f"+ waiting for peers {ms(res.exposed_peer_wait_ns)} (arrival skew: a faster network does not remove it)"
    )


def _print(res, timeline) -> None:

    con = console()
    f = res.finish_ns
    con.print(
        f"[bold]{res.span_line}[/bold] on {f.size} NPUs ({res.mode}); "
        f"simulated in {res.wall_s:.3f} s ({res.events:,} events)"
    )
    per_npu = res.to_table()
    if f.size > 16:  # the spread instead: min / median / max over the NPUs
        stats: dict[str, list[Any]] = {"npu": ["min", "median", "max"]}
        stats |= {k: [int(fn(per_npu[k])) for fn in (np.min, np.median, np.max)] for k in PER_NPU}
        spec = {**per_npu.spec, "npu": Column(label="", align="right")}
        per_npu = Table(stats, title="per NPU (ns): min / median / max", spec=spec)
    show(per_npu, limit=None)
    if f.size and int(res.comm_ns.max()) > 0:
        con.print(comm_split_line(res), markup=False)
    if res.collectives:
        cols = ["group", "index", "type", "bytes", "algorithm", "start_ns", "end_ns", "transfer_ns"]
        show(res.collectives_table().select(cols).head(20), limit=None)
        if len(res.collectives) > 20:
            con.print(f"... {len(res.collectives) - 20} more (use --json)")
    for s in res.shortcuts:
        con.print(f"shortcut: {s}", markup=False)
    if res.assumption:  # (part of the result, so on stdout)
        con.print(res.assumption, markup=False)
    if res.compute_line:
        con.print(res.compute_line, markup=False)
    for w in res.warnings:  # (on stderr: stdout holds the result; one escaped line each, at most 50)
        if w != res.assumption:
            echo_warning(w)
    if timeline:
        con.print(f"timeline: {timeline} (open in ui.perfetto.dev)", markup=False)
