"""`--simulate SYSTEM` for the commands that take it (analyses and the report): the options and
running the simulations. Apart from `common` so that commands without it do not load the simulator."""

from __future__ import annotations

import warnings

import click

from ..errors import ChakraError
from ..io.workload import Workload
from ..simulate import SimResult, SimulationWarning
from ..simulate.presets import PRESETS, resolve, simulate_on
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
    """{label: SimResult} for each --simulate value; simulation notes are kept in each result's
    `warnings` (shown once by the caller), not printed as they happen. With ``failed``, a system
    the job cannot run on is recorded there ({label: why}) and the others still run."""
    out = {}
    presets = [resolve(spec) for spec in systems]  # every name checked before the first simulation
    with steps("simulating", len(presets)) as advance:
        for p in presets:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", SimulationWarning)
                    out[p.name] = simulate_on(workload, p)
            except ChakraError as e:
                if failed is None:
                    raise
                failed[p.name] = str(e)
            if advance:
                advance(1)
    return out


def simulated(workload: Workload, system: str | None) -> SimResult | None:
    """The SimResult of --simulate SYSTEM, or None without one."""
    return next(iter(run_simulations(workload, [system]).values())) if system else None
