"""A point's parameters as the system the simulator runs: a preset, or ASTRA-sim's files, with
any network field (topology, NPUs per dimension, bandwidth, latency, algorithm) overridden.

Per-dimension fields take one value for every dimension or a list with one per dimension;
``npus`` is a one-dimension network of that many NPUs, ``dims`` the NPUs of each dimension.
Without ``system``, the network is made from the fields alone (topology and npus/dims needed;
bandwidth 50 GB/s, latency 500 ns and ring algorithms unless given). The same function runs in
the parent (to refuse bad combinations before simulating) and in the workers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import ChakraError
from ..simulate.config import Network
from ..simulate.presets import SystemPreset, preset_system, resolve, with_compute

DEFAULTS = {"bandwidth": 50.0, "latency": 500.0}


def _per_dim(key: str, v: Any, n: int) -> list:
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise ChakraError(f"{key}: {len(v)} values for a network of {n} dimensions")
        return list(v)
    return [v] * n


def system_of(params: dict) -> SystemPreset:
    """The `SystemPreset` a point runs on (see the module docstring); `ChakraError` when the
    fields do not make a network."""
    base = resolve(params["system"]) if params.get("system") is not None else None
    fields_given = [k for k in ("topology", "npus", "dims", "bandwidth", "latency", "algorithm") if k in params]
    if base is not None and base.network is None:
        if fields_given:
            raise ChakraError(f"system {base.name!r} has no network model: {', '.join(fields_given)} cannot apply")
        return _device(base, params)
    if base is not None and not fields_given:
        return _device(base, params)
    if "npus" in params and "dims" in params:
        raise ChakraError("npus and dims both given: npus is a one-dimension network, dims one entry per dimension")
    net = base.network.to_dict() if base is not None and base.network is not None else {}
    if "dims" in params:
        sizes = list(params["dims"]) if isinstance(params["dims"], (list, tuple)) else [params["dims"]]
    elif "npus" in params:
        sizes = [params["npus"]]
    elif net:
        sizes = list(net["npus_count"])
    else:
        raise ChakraError("no NPU count: give npus (one dimension) or dims (NPUs per dimension)")
    n = len(sizes)
    same_shape = bool(net) and len(net["npus_count"]) == n
    cols = {"npus_count": sizes}
    for key, netkey in (("topology", "topology"), ("bandwidth", "bandwidth"), ("latency", "latency")):
        if key in params:
            cols[netkey] = _per_dim(key, params[key], n)
        elif same_shape:
            cols[netkey] = list(net[netkey])
        elif key in DEFAULTS:
            cols[netkey] = [DEFAULTS[key]] * n
        else:
            raise ChakraError(f"no topology for a network of {n} dimensions: give topology")
    network = Network.from_dict(cols, source="sweep point")
    if "algorithm" in params:
        algorithms = [str(a) for a in _per_dim("algorithm", params["algorithm"], n)]
    elif base is not None and same_shape:
        algorithms = list(base.system.all_reduce)
    else:
        algorithms = ["ring"] * n
    if base is not None:
        t = tuple(algorithms)
        system = dataclasses.replace(base.system, all_reduce=t, reduce_scatter=t, all_gather=t, all_to_all=t)
    else:
        system = preset_system(algorithms)
    name = base.name if base is not None else "x".join(map(str, sizes))
    return _device(SystemPreset(name, "sweep point", network, system), params)


def _device(p: SystemPreset, params: dict) -> SystemPreset:
    """Compute costed on ``device`` (`presets.with_compute`): by its kernel model on a real
    machine's preset, at its roofline times ``efficiency`` elsewhere, as `chakra simulate
    --device` reads it (`presets.choose_system`)."""
    if params.get("device") is None:
        return p
    return with_compute(p, params["device"], float(params.get("efficiency", 1.0)), kernels=p.cluster is not None)


def mode_kwargs(mode: str | None) -> dict:
    """`simulate` keywords of a simulator mode (default, compat: ASTRA-sim's, aware: congestion)."""
    return {"compat": mode == "compat", "aware": mode == "aware"}
