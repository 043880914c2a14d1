"""The sweep spec: which workloads, which axes of the design space, which combinations to skip.

A spec is YAML (or the same mapping in Python): ``workloads`` (name -> a recorded job, a pattern,
or a captured master trace with a parallelism plan, each with optional what-if transforms),
``axes`` (parameter -> list of values: their cartesian product is the sweep), ``fixed``
(parameter -> one value for every point), ``where`` (a DuckDB SQL boolean over the parameters:
the points kept) and ``prices`` (USD per NPU-hour, for the cost column). Everything is checked
here, before any simulation, and a bad entry raises `ChakraError` naming the file and the key.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import ChakraError
from ..synthesize.parallel import Plan

#: Network and system parameters a point may set (see `systems.system_of`).
NETWORK_KEYS = ("system", "topology", "npus", "dims", "bandwidth", "latency", "algorithm")
#: Parallelism-plan parameters, applied to workloads built from a master trace.
PLAN_KEYS = tuple(f.name for f in fields(Plan))
#: What-if parameters applied to every workload of the point.
WHATIF_KEYS = ("device", "efficiency", "speedup", "comm_scale")
PARAM_KEYS = ("workload", "mode", *NETWORK_KEYS, *WHATIF_KEYS, *PLAN_KEYS)
MODES = ("default", "compat", "aware")
WORKLOAD_SOURCES = ("path", "pattern", "master")
WORKLOAD_KEYS = (*WORKLOAD_SOURCES, "plan", "device", "efficiency", "transforms", "comm_groups")
TRANSFORMS = ("speedup", "comm_scale", "remove", "fuse", "device", "dp", "batch", "seq")
TOP_KEYS = ("name", "workloads", "axes", "fixed", "where", "prices")


@dataclass(frozen=True)
class SweepSpec:
    """A checked spec. ``workloads``: name -> its definition with paths made absolute;
    ``axes``: parameter -> values (in order); ``fixed``: parameter -> value; ``source``: the
    file it came from (for error messages and the results' metadata)."""

    name: str
    workloads: dict[str, dict]
    axes: dict[str, list]
    fixed: dict[str, Any] = field(default_factory=dict)
    where: str | None = None
    prices: dict[str, float] = field(default_factory=dict)  # key ("default", a system or device) -> USD/NPU-hour
    source: str = "<spec>"

    @property
    def size(self) -> int:
        """Points of the full cartesian product (before ``where``)."""
        n = 1
        for v in self.axes.values():
            n *= len(v)
        return n

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "workloads": self.workloads,
            "axes": self.axes,
            "fixed": self.fixed,
            "where": self.where,
            "prices": self.prices,
            "source": self.source,
        }


def load_spec(spec: str | os.PathLike | dict | SweepSpec, base: str | os.PathLike | None = None) -> SweepSpec:
    """A spec from a YAML file, a mapping (relative paths against ``base``, default the current
    folder) or an already loaded `SweepSpec`."""
    if isinstance(spec, SweepSpec):
        return spec
    if isinstance(spec, dict):
        return _check(spec, "<spec>", Path(base or "."))
    import yaml

    path = Path(spec)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ChakraError(f"{path}: cannot read the sweep spec ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ChakraError(f"{path}: byte {e.start}: the sweep spec is not UTF-8 text (a YAML file)") from None
    except yaml.YAMLError as e:
        raise ChakraError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    return _check(data, str(path), path.parent if base is None else Path(base))


def _check(d: Any, src: str, base: Path) -> SweepSpec:
    def bad(key: str, what: str) -> ChakraError:
        return ChakraError(f"{src}: {key}: {what}")

    if not isinstance(d, dict):
        raise ChakraError(f"{src}: expected a mapping with {', '.join(TOP_KEYS)}, got {type(d).__name__}")
    unknown = [k for k in d if k not in TOP_KEYS]
    if unknown:
        raise bad(unknown[0], f"unknown key; a spec has {', '.join(TOP_KEYS)}")
    workloads = _workloads(d.get("workloads"), base, bad)
    axes = d.get("axes") or {}
    fixed = d.get("fixed") or {}
    for section, m in (("axes", axes), ("fixed", fixed)):
        if not isinstance(m, dict):
            raise bad(section, f"expected a mapping of parameter -> value(s), got {type(m).__name__}")
        for k, v in m.items():
            if k not in PARAM_KEYS:
                raise bad(f"{section}.{k}", f"unknown parameter; one of {', '.join(PARAM_KEYS)}")
            if section == "axes" and (not isinstance(v, list) or not v):
                raise bad(f"axes.{k}", "expected a non-empty list of values")
            if k in axes and k in fixed and section == "fixed":
                raise bad(f"fixed.{k}", "also an axis; give it in one place")
            for i, x in enumerate(v if section == "axes" else [v]):
                where = f"{section}.{k}" + (f"[{i}]" if section == "axes" else "")
                _check_value(k, x, workloads, bad, where)
    axes = {k: [_absolute_system(k, x, base) for x in v] for k, v in axes.items()}
    fixed = {k: _absolute_system(k, v, base) for k, v in fixed.items()}
    if "workload" not in axes and "workload" not in fixed:
        if len(workloads) != 1:
            raise bad("axes.workload", f"{len(workloads)} workloads defined: name the ones to run in axes.workload")
        fixed["workload"] = next(iter(workloads))
    if not any(k in axes or k in fixed for k in ("system", "topology")):
        raise bad("axes", "no system: give system (a preset or NETWORK.yml,SYSTEM.json) or topology with npus/dims")
    cond = d.get("where")
    if cond is not None and (not isinstance(cond, str) or not cond.strip()):
        raise bad("where", "expected a SQL boolean expression as a string")
    return SweepSpec(
        name=str(d.get("name") or Path(src).stem),
        workloads=workloads,
        axes=axes,
        fixed=fixed,
        where=cond,
        prices=_prices(d.get("prices"), bad),
        source=src,
    )


def _workloads(w: Any, base: Path, bad) -> dict[str, dict]:
    if not isinstance(w, dict) or not w:
        raise bad("workloads", "expected a mapping of name -> workload (a path, or {path|pattern|master: ...})")
    out = {}
    for name, v in w.items():
        key = f"workloads.{name}"
        if isinstance(v, str):
            v = {"path": v}
        if not isinstance(v, dict):
            raise bad(key, "expected a path or a mapping")
        unknown = [k for k in v if k not in WORKLOAD_KEYS]
        if unknown:
            raise bad(f"{key}.{unknown[0]}", f"unknown key; one of {', '.join(WORKLOAD_KEYS)}")
        sources = [k for k in WORKLOAD_SOURCES if k in v]
        if len(sources) != 1:
            raise bad(key, f"give exactly one of {', '.join(WORKLOAD_SOURCES)}")
        d = dict(v)
        for k in ("path", "master", "comm_groups"):
            if k in d:
                p = Path(str(d[k])).expanduser()
                d[k] = str(p if p.is_absolute() else (base / p).resolve())
        if "master" in d and not Path(d["master"]).is_file():
            raise bad(f"{key}.master", f"no such file: {d['master']}")
        if (
            "path" in d
            and not Path(d["path"]).exists()
            and not list(Path(d["path"]).parent.glob(Path(d["path"]).name + ".*"))
        ):
            raise bad(f"{key}.path", f"no such file, folder or <prefix>.<rank>.et files: {d['path']}")
        if "plan" in d:
            if "master" not in d:
                raise bad(f"{key}.plan", "a plan parallelizes a master trace: give master too")
            if not isinstance(d["plan"], dict):
                raise bad(f"{key}.plan", "expected a mapping of Plan fields (tp, pp, dp, ...)")
            for k in d["plan"]:
                if k not in PLAN_KEYS:
                    raise bad(f"{key}.plan.{k}", f"unknown plan field; one of {', '.join(PLAN_KEYS)}")
        transforms = d.get("transforms") or []
        if not isinstance(transforms, list):
            raise bad(f"{key}.transforms", "expected a list of {transform: value} mappings")
        for i, t in enumerate(transforms):
            if not isinstance(t, dict) or not t or next(iter(t)) not in TRANSFORMS:
                raise bad(
                    f"{key}.transforms[{i}]", f"expected a mapping whose first key is one of {', '.join(TRANSFORMS)}"
                )
        out[str(name)] = d
    return out


def _check_value(k: str, x: Any, workloads: dict, bad, where: str) -> None:
    if k == "workload" and x not in workloads:
        raise bad(where, f"unknown workload {x!r}; defined: {', '.join(workloads)}")
    if k == "mode" and x not in MODES:
        raise bad(where, f"unknown mode {x!r}; one of {', '.join(MODES)}")
    if isinstance(x, dict) or (
        isinstance(x, list) and k not in ("dims", "topology", "bandwidth", "latency", "algorithm")
    ):
        raise bad(where, f"expected a single value, got {json.dumps(x)}")
    if isinstance(x, list) and not all(isinstance(e, (str, int, float)) for e in x):
        raise bad(where, f"expected a list of numbers or names, got {json.dumps(x)}")


def _absolute_system(k: str, x: Any, base: Path) -> Any:
    """A ``system`` given as ASTRA-sim's files (NETWORK.yml,SYSTEM.json) with absolute paths."""
    if k != "system" or not isinstance(x, str) or "," not in x:
        return x
    return ",".join(
        str(p if p.is_absolute() else (base / p).resolve()) for p in (Path(s.strip()) for s in x.split(","))
    )


def _prices(p: Any, bad) -> dict[str, float]:
    """``prices: {npu_hour: 2.5}`` or ``prices: {npu_hour: {default: 2, dgx-8x8: 4}}`` (keys: a
    system or device value of the point; "default" for the rest)."""
    if p is None:
        return {}
    if not isinstance(p, dict) or set(p) != {"npu_hour"}:
        raise bad("prices", "expected {npu_hour: USD} or {npu_hour: {default: USD, SYSTEM_OR_DEVICE: USD}}")
    v = p["npu_hour"]
    table = v if isinstance(v, dict) else {"default": v}
    for k, x in table.items():
        if not isinstance(x, (int, float)) or isinstance(x, bool) or x < 0:
            raise bad(f"prices.npu_hour.{k}", f"expected a non-negative number of USD, got {x!r}")
    return {str(k): float(x) for k, x in table.items()}
