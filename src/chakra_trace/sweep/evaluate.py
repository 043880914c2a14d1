"""One point simulated into one flat row: what every executor runs in its workers.

A row holds the point's inputs (each parameter as given: a list as its JSON text), the network
it resolved to, and what the simulation says, per training step (``step_s``: the simulated
recording, ``recording_ns``, over the ``steps`` it holds; a capture or a pattern is one step, a
recorded job whose steps are unknown counts as one): the step, mean compute / communication /
exposed communication per NPU, link utilization per dimension, collective time by type, the cost
(NPU-seconds per step, USD where the spec has prices), the energy of the step
(`simulate.energy`: joules by category, average power, perf/W, at the point's ``device``'s power,
`ENERGY_DEVICE` when it has none), wall times and versions. A point whose
simulation fails gives a row with ``status`` "error" and why, so one bad combination does not
stop a sweep. Workloads are built once per worker process and kept in a small cache.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import time
import warnings
from collections import OrderedDict
from typing import Any

import numpy as np

from ..analyze.roofline import default_device
from ..errors import ChakraError
from ..io.et import read_trace
from ..io.workload import Workload
from ..simulate import SimulationWarning
from ..simulate.energy import energy
from ..simulate.presets import simulate_on
from ..simulate.utilization import dimension_utilization
from ..synthesize import transforms as tf
from ..synthesize.parallel import Plan, parallelize
from ..synthesize.patterns import from_spec
from ..synthesize.scale import data_parallel
from .spec import PLAN_KEYS
from .systems import mode_kwargs, system_of

SCHEMA = "chakra-trace sweep 1"
COLLECTIVE_TYPES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
WALL_COLUMNS = ("wall_s", "sim_wall_s")  # the columns that differ between runs of one point
#: The device whose power prices a point's energy when the point names none (a datasheet H100 SXM).
ENERGY_DEVICE = "h100"
ENERGY_COLUMNS = (
    "energy_j",
    "energy_compute_j",
    "energy_comm_j",
    "energy_idle_j",
    "avg_power_w",
    "perf_per_w",
    "flop_per_j",
)
_CACHE: OrderedDict[str, Workload] = OrderedDict()
_CACHE_SIZE = 4


def _version() -> str:
    try:
        return importlib.metadata.version("chakra-trace")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _transform(w: Workload, t: dict) -> Workload:
    """One entry of a workload's ``transforms`` list (as `chakra transform`'s options)."""
    kind, value = next(iter(t.items()))
    if kind == "speedup":
        return tf.speed_up_compute(w, float(value), t.get("match"))
    if kind == "comm_scale":
        return tf.scale_collectives(w, float(value), t.get("types"))
    if kind == "remove":
        return tf.remove_ops(w, str(value))
    if kind == "fuse":
        return tf.fuse_ops(w, str(value))
    if kind == "device":
        return tf.on_device(w, str(value), float(t.get("efficiency", 1.0)))
    if kind == "dp":
        return data_parallel(w, int(value))
    return tf.rescale(w, value if kind == "batch" else t.get("batch"), value if kind == "seq" else t.get("seq"))


def build_workload(definition: dict, params: dict, npus: int | None) -> Workload:
    """The workload a point simulates: opened, made from a pattern (on the point's NPUs), or a
    master trace parallelized by its plan with the point's plan parameters; then its transforms
    and the point's what-ifs (speedup, comm_scale)."""
    if "path" in definition:
        w = Workload.open(definition["path"], definition.get("comm_groups"))
    elif "pattern" in definition:
        w = from_spec(str(definition["pattern"]), npus or 1)
    else:
        plan = {**definition.get("plan", {}), **{k: params[k] for k in PLAN_KEYS if k in params}}
        w = parallelize(read_trace(definition["master"]), Plan(**plan))
    for t in definition.get("transforms") or []:
        w = _transform(w, t)
    if params.get("speedup") is not None:
        w = tf.speed_up_compute(w, float(params["speedup"]))
    if params.get("comm_scale") is not None:
        w = tf.scale_collectives(w, float(params["comm_scale"]))
    return w


def _cached_workload(ctx: dict, point: dict, npus: int | None) -> Workload:
    params = point["params"]
    definition = ctx["workloads"][params["workload"]]
    key = json.dumps(
        [
            point["workload_id"],
            npus if "pattern" in definition else None,
            {k: params.get(k) for k in ("speedup", "comm_scale", *PLAN_KEYS)},
        ],
        sort_keys=True,
    )
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    w = build_workload(definition, params, npus)
    _CACHE[key] = w
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return w


def input_columns(params: dict) -> dict[str, Any]:
    """The point's parameters as columns: scalars as they are, lists as their JSON text."""
    return {k: json.dumps(v) if isinstance(v, (list, tuple)) else v for k, v in params.items()}


def price_of(prices: dict[str, float], params: dict) -> float | None:
    for key in ("system", "device"):
        v = params.get(key)
        if isinstance(v, str) and v in prices:
            return prices[v]
    return prices.get("default")


def evaluate(ctx: dict, point: dict) -> dict:
    """Simulate one point (``{"id", "params", "workload_id"}``) in the sweep context ``ctx``
    (``{"name", "workloads", "prices"}``) and return its row."""
    t0 = time.perf_counter()
    params = point["params"]
    row: dict[str, Any] = {
        "point_id": point["id"],
        "sweep": ctx["name"],
        "status": "ok",
        "error": None,
        **input_columns(params),
        "workload_id": point["workload_id"],
    }
    try:
        system = system_of(params)
        w = _cached_workload(ctx, point, system.npus)
        with warnings.catch_warnings():  # (kept in the result: counted in sim_warnings)
            warnings.simplefilter("ignore", SimulationWarning)
            res = simulate_on(w, system, **mode_kwargs(params.get("mode")))
    except Exception as e:  # a failed point is a row, not the end of the sweep
        row.update(status="error", error=f"{type(e).__name__}: {e}"[:2000])
        row.update(_versions(), wall_s=time.perf_counter() - t0)
        return row
    row.update(_measures(res, system, price_of(ctx.get("prices") or {}, params)))
    row.update(_energy(res, system, params.get("device"), w))
    row.update(_versions(), wall_s=time.perf_counter() - t0)
    return row


def _measures(res, system, price: float | None) -> dict[str, Any]:
    npus = int(res.finish_ns.size)
    # one training step: the recording over its steps where the job says how many it holds (a
    # capture or a pattern is one step; a recorded job of unknown steps counts as one)
    per = res.per_step_ns
    step_ns = float(per) if per is not None else float(res.recording_ns)
    step_s = step_ns / 1e9
    k = 1e9 * (res.steps or 1)  # ns of the recording -> s per step
    out: dict[str, Any] = {"sim_npus": npus, "sim_mode": res.mode}
    net = system.network
    if net is not None:
        out.update(
            net_topology=[d.topology for d in net.dims],
            net_dims=[int(d.npus) for d in net.dims],
            net_bandwidth=[float(d.bandwidth) for d in net.dims],
            net_latency=[float(d.latency) for d in net.dims],
            net_algorithms=list(system.system.all_reduce),
        )
    out.update(
        step_ns=int(round(step_ns)),
        step_s=step_s,
        recording_ns=int(res.recording_ns),
        steps=res.steps,
        compute_s=float(np.mean(res.compute_ns)) / k if npus else 0.0,
        comm_s=float(np.mean(res.comm_ns)) / k if npus else 0.0,
        exposed_comm_s=float(np.mean(res.exposed_comm_ns)) / k if npus else 0.0,
        overlap_s=float(np.mean(res.overlap_ns)) / k if npus else 0.0,
        idle_s=float(np.mean(res.idle_ns)) / k if npus else 0.0,
    )
    util = [u["utilization"] for u in dimension_utilization(res, net)] if net is not None else []
    out["dim_utilization"] = util
    out["max_dim_utilization"] = max(util) if util else None
    links = res.links(top=1)
    out["max_link_utilization"] = links[0]["utilization"] if links else None
    by_type = dict.fromkeys(COLLECTIVE_TYPES, 0)
    other = 0
    for c in res.collectives:
        t = c.type.lower()
        if t in by_type:
            by_type[t] += c.end_ns - c.start_ns
        else:
            other += c.end_ns - c.start_ns
    out["collectives"] = len(res.collectives)
    out.update({f"coll_{t}_s": v / k for t, v in by_type.items()}, coll_other_s=other / k)
    npu_s = npus * step_s
    out.update(
        npu_s=npu_s,
        price_npu_hour=price,
        cost_usd=npu_s * price / 3600 if price is not None else None,
        cost=npu_s * price / 3600 if price is not None else npu_s,
        events=int(res.events),
        sim_warnings=len(res.warnings),
        sim_wall_s=float(res.wall_s),
    )
    return out


def _energy(res, system, device: str | None, workload: Workload) -> dict[str, Any]:
    """Energy columns at the point's device's power; without one, this machine's CPU for a
    CPU-only job and `ENERGY_DEVICE` for one with accelerator kernels (it names no device).
    None where that device has no published power."""
    if device is not None:
        dev: Any = str(device)
    else:
        try:
            dev = default_device(workload)
        except ChakraError:  # accelerator kernels on an unnamed accelerator
            dev = ENERGY_DEVICE
    out: dict[str, Any] = dict.fromkeys(ENERGY_COLUMNS)
    out["energy_device"] = dev if isinstance(dev, str) else dev.name
    try:
        e = energy(res, dev, system.network)
    except ChakraError:  # (no power figure for this device)
        return out
    cat = e.by_category
    per = 1 / e.steps if e.steps else 1.0  # (per training step, as step_s)
    out.update(
        energy_j=e.total_j * per,
        energy_compute_j=cat["compute"] * per,
        energy_comm_j=cat["communication"] * per,
        energy_idle_j=cat["idle"] * per,
        avg_power_w=e.avg_power_w,
        perf_per_w=e.steps_per_j,
        flop_per_j=e.flop_per_j,
    )
    return out


def _versions() -> dict[str, str]:
    return {"chakra_version": _version(), "python_version": platform.python_version(), "schema": SCHEMA}
