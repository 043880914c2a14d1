"""`--simulate SYSTEM` for the commands that take it (analyses and the report): the options and
running the simulations. Apart from `common` so that commands without it do not load the simulator."""

from __future__ import annotations

import click

from ..io.workload import Workload
from ..simulate import SimResult
from ..simulate.presets import PRESETS, simulate_each
from .common import steps


def preset_names() -> str:
    """The presets, as help and errors list them (from `simulate.presets.PRESETS`, never by hand)."""
    return ", ".join(PRESETS)


_SYSTEM = (
    f"a preset ({preset_names()}) or NETWORK.yaml,SYSTEM.json; a job with "
    "fewer ranks than the system's NPUs is scaled out data-parallel"
)

#: `chakra simulate --system`: the same presets, or ASTRA-sim's system JSON (with --network).
SYSTEM_HELP = (
    f"A preset ({preset_names()}), or a system JSON (ASTRA-sim's format) given with --network, or "
    "NETWORK.yaml,SYSTEM.json. A job with fewer ranks than a preset's NPUs is scaled out data-parallel."
)

#: One system whose simulated times replace the recorded ones (analyses).
simulate_one_option = click.option(
    "--simulate",
    "system",
    metavar="SYSTEM",
    default=None,
    help=f"Use the times of a simulation on SYSTEM ({_SYSTEM}) instead of the recorded ones.",
)

#: Any number of systems to simulate beside the recording (the report).
simulate_many_option = click.option(
    "--simulate",
    "systems",
    multiple=True,
    metavar="SYSTEM",
    help=f"Also simulate the job on SYSTEM ({_SYSTEM}). Repeatable.",
)


def run_simulations(workload: Workload, systems, failed: dict[str, str] | None = None) -> dict:
    """`simulate.presets.simulate_each` with a progress bar: {label: SimResult}; with ``failed``,
    a system the job cannot run on is recorded there ({label: why}) and the others still run."""
    with steps("simulating", len(systems)) as advance:
        done, why = simulate_each(workload, systems, keep_going=failed is not None, progress=advance)
    if failed is not None:
        failed.update(why)
    return done


def simulated(workload: Workload, system: str | None) -> SimResult | None:
    """The SimResult of --simulate SYSTEM, or None without one."""
    return next(iter(run_simulations(workload, [system]).values())) if system else None
