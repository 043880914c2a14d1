"""`calibrate()`: measure this machine once (collectives, compute) and build its `SystemProfile`."""

from __future__ import annotations

from collections.abc import Callable

from ..replay.environment import environment
from .collectives import COLLECTIVES, DEFAULT_SIZES, measure_collectives, medians_ns
from .compute import ComputeModel, measure_compute
from .fit import fit_alpha_beta
from .network import fit_network
from .profile import SystemProfile


def profile_from_points(points, compute: ComputeModel, env: dict | None = None) -> SystemProfile:
    """Fit every (collective, ranks) of the measured points and the network per rank count."""
    fits = [
        fit_alpha_beta(s, t, collective=kind, ranks=r, ci_ns=ci) for (kind, r), (s, t, ci) in medians_ns(points).items()
    ]
    networks = {r: fit_network(fits, r) for r in sorted({f.ranks for f in fits})}
    backend = points[0].measurement.extra.get("backend", "") if points else ""
    return SystemProfile(backend, fits, networks, compute, env if env is not None else environment())


def calibrate(
    *,
    ranks=(2,),
    sizes=DEFAULT_SIZES,
    collectives=COLLECTIVES,
    repeats: int = 20,
    threads: int = 1,
    backend: str | None = None,
    say: Callable[[str], None] = lambda _m: None,
) -> SystemProfile:
    """Measure the collectives (spawned ranks on 127.0.0.1) and the compute model, then fit."""
    say("measuring compute")
    compute = measure_compute(threads)
    say(f"measuring {len(collectives)} collectives x {len(sizes)} sizes at {', '.join(map(str, ranks))} ranks")
    points = measure_collectives(collectives, sizes, ranks, repeats=repeats, backend=backend)
    return profile_from_points(points, compute)
