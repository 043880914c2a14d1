"""The sweep spec: which workloads, which axes of the design space, which combinations to skip.

A spec is YAML (or the same mapping in Python): ``workloads`` (name -> a recorded job, a pattern,
or a captured master trace with a parallelism plan, each with optional what-if transforms),
``axes`` (parameter -> list of values: their cartesian product is the sweep), ``fixed``
(parameter -> one value for every point), ``where`` (one SQL boolean expression over the
parameters: the points kept, see `where`) and ``prices`` (USD per NPU-hour, for the cost column).
Everything is checked here, before any simulation, and a bad entry raises `ChakraError` naming
the file and the key.

A spec file may come from someone else, so it is data: read as a bounded regular file
(`io.documents`: size, YAML alias and nesting limits), its values quoted in errors only in
short, its transforms and patterns checked field by field, and the files it names (workloads,
master traces, communicator groups, ASTRA-sim network and system files) must resolve, links
followed, inside the spec's own folder, or inside a folder the caller allows (``allow_paths``,
CLI ``--allow-path``), and not to a hidden file or folder there; the network and system files
must be a YAML mapping and a JSON object, else they are refused by name without quoting them. A
spec given as a mapping is the caller's own code: its paths are not confined.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import ChakraError
from ..io.documents import read_json, read_yaml, short
from ..io.memory import ENV_MAX_NODES, node_limit
from ..simulate.config.values import MAX_DIMS, max_npus
from ..synthesize.parallel import Plan
from . import where as _where

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
#: Parameters whose value may be a list (one entry per network dimension).
PER_DIM_KEYS = ("dims", "topology", "bandwidth", "latency", "algorithm")
#: The options each transform takes beside its own key, and whether its value is a number.
TRANSFORM_OPTIONS = {
    "speedup": ("match",),
    "comm_scale": ("types",),
    "remove": (),
    "fuse": (),
    "device": ("efficiency",),
    "dp": (),
    "batch": ("seq",),
    "seq": ("batch",),
}


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


def load_spec(
    spec: str | os.PathLike | dict | SweepSpec,
    base: str | os.PathLike | None = None,
    *,
    allow_paths: Iterable[str | os.PathLike] | None = None,
) -> SweepSpec:
    """A spec from a YAML file, a mapping (relative paths against ``base``, default the current
    folder) or an already loaded `SweepSpec`. A file's paths must resolve inside its folder
    (or ``base``) or one of ``allow_paths``; a mapping's are not confined unless ``allow_paths``
    is given."""
    if isinstance(spec, SweepSpec):
        return spec
    allowed = [Path(p).expanduser().resolve() for p in allow_paths or ()]
    if isinstance(spec, dict):
        root = Path(base or ".")
        return _check(spec, "<spec>", root, [root.resolve(), *allowed] if allow_paths is not None else None)
    path = Path(spec)
    data, _ = read_yaml(path, "sweep spec")
    root = path.parent if base is None else Path(base)
    return _check(data, str(path), root, [root.resolve(), *allowed])


def _check(d: Any, src: str, base: Path, roots: list[Path] | None = None) -> SweepSpec:
    def bad(key: str, what: str) -> ChakraError:
        return ChakraError(f"{src}: {key}: {what}")

    if not isinstance(d, dict):
        raise ChakraError(f"{src}: expected a mapping with {', '.join(TOP_KEYS)}, got {type(d).__name__}")
    unknown = [k for k in d if k not in TOP_KEYS]
    if unknown:
        raise bad(_name(unknown[0]), f"unknown key; a spec has {', '.join(TOP_KEYS)}")
    workloads = _workloads(d.get("workloads"), base, bad, roots)
    axes = d.get("axes") or {}
    fixed = d.get("fixed") or {}
    for section, m in (("axes", axes), ("fixed", fixed)):
        if not isinstance(m, dict):
            raise bad(section, f"expected a mapping of parameter -> value(s), got {type(m).__name__}")
        for k, v in m.items():
            if k not in PARAM_KEYS:
                raise bad(f"{section}.{_name(k)}", f"unknown parameter; one of {', '.join(PARAM_KEYS)}")
            if section == "axes" and (not isinstance(v, list) or not v):
                raise bad(f"axes.{k}", "expected a non-empty list of values")
            if k in axes and k in fixed and section == "fixed":
                raise bad(f"fixed.{k}", "also an axis; give it in one place")
            for i, x in enumerate(v if section == "axes" else [v]):
                where = f"{section}.{k}" + (f"[{i}]" if section == "axes" else "")
                _check_value(k, x, workloads, bad, where)
    axes = {
        k: [_absolute_system(k, x, base, roots, bad, f"axes.{k}[{i}]") for i, x in enumerate(v)]
        for k, v in axes.items()
    }
    fixed = {k: _absolute_system(k, v, base, roots, bad, f"fixed.{k}") for k, v in fixed.items()}
    if "workload" not in axes and "workload" not in fixed:
        if len(workloads) != 1:
            raise bad("axes.workload", f"{len(workloads)} workloads defined: name the ones to run in axes.workload")
        fixed["workload"] = next(iter(workloads))
    if not any(k in axes or k in fixed for k in ("system", "topology")):
        raise bad("axes", "no system: give system (a preset or NETWORK.yml,SYSTEM.json) or topology with npus/dims")
    cond = d.get("where")
    if cond is not None:
        _where.check(cond, {"workload", *axes, *fixed}, src)
    name = d.get("name")
    if name is not None and (not isinstance(name, (str, int, float)) or isinstance(name, bool) or len(str(name)) > 200):
        raise bad("name", f"expected a short name (at most 200 characters), got {short(name)}")
    return SweepSpec(
        name=str(name or Path(src).stem),
        workloads=workloads,
        axes=axes,
        fixed=fixed,
        where=cond,
        prices=_prices(d.get("prices"), bad),
        source=src,
    )


def _workloads(w: Any, base: Path, bad, roots: list[Path] | None) -> dict[str, dict]:
    if not isinstance(w, dict) or not w:
        raise bad("workloads", "expected a mapping of name -> workload (a path, or {path|pattern|master: ...})")
    out = {}
    for name, v in w.items():
        key = f"workloads.{_name(name)}"
        if not isinstance(name, (str, int)) or isinstance(name, bool) or len(str(name)) > 200:
            raise bad(key, "expected a short name (at most 200 characters)")
        if isinstance(v, str):
            v = {"path": v}
        if not isinstance(v, dict):
            raise bad(key, "expected a path or a mapping")
        unknown = [k for k in v if k not in WORKLOAD_KEYS]
        if unknown:
            raise bad(f"{key}.{_name(unknown[0])}", f"unknown key; one of {', '.join(WORKLOAD_KEYS)}")
        sources = [k for k in WORKLOAD_SOURCES if k in v]
        if len(sources) != 1:
            raise bad(key, f"give exactly one of {', '.join(WORKLOAD_SOURCES)}")
        d = dict(v)
        for k in ("path", "master", "comm_groups", "pattern", "device"):
            if k in d and (not isinstance(d[k], str) or not d[k] or len(d[k]) > 4096):
                raise bad(f"{key}.{k}", f"expected a non-empty string, got {short(d[k])}")
        for k in ("path", "master", "comm_groups"):
            if k in d:
                p = Path(d[k]).expanduser()
                d[k] = str(p if p.is_absolute() else (base / p).resolve())
                _inside(Path(d[k]), roots, bad, f"{key}.{k}")
        if "master" in d and not Path(d["master"]).is_file():
            raise bad(f"{key}.master", f"no such file: {d['master']}")
        if (
            "path" in d
            and not Path(d["path"]).exists()
            and not list(Path(d["path"]).parent.glob(glob_escape(Path(d["path"]).name) + ".*"))
        ):
            raise bad(f"{key}.path", f"no such file, folder or <prefix>.<rank>.et files: {d['path']}")
        if "efficiency" in d:
            _number(d["efficiency"], f"{key}.efficiency", bad, positive=True)
        if "plan" in d:
            if "master" not in d:
                raise bad(f"{key}.plan", "a plan parallelizes a master trace: give master too")
            if not isinstance(d["plan"], dict):
                raise bad(f"{key}.plan", "expected a mapping of Plan fields (tp, pp, dp, ...)")
            for k, x in d["plan"].items():
                if k not in PLAN_KEYS:
                    raise bad(f"{key}.plan.{_name(k)}", f"unknown plan field; one of {', '.join(PLAN_KEYS)}")
                if x is not None and not isinstance(x, (str, int, float, bool)):
                    raise bad(f"{key}.plan.{k}", f"expected a number or a name, got {short(x)}")
        if "pattern" in d:
            _check_pattern(d["pattern"], f"{key}.pattern", bad)
        _transforms(d.get("transforms") or [], key, bad)
        out[str(name)] = d
    return out


def _name(k: Any) -> str:
    """A key as an error message names it: as written when short, else quoted and cut."""
    text = str(k)
    return text if isinstance(k, (str, int)) and len(text) <= 80 and text.isprintable() else short(k)


def glob_escape(name: str) -> str:
    """A file name as a glob pattern matching only itself."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _inside(p: Path, roots: list[Path] | None, bad, key: str) -> None:
    """Refuse a path that resolves (links followed) outside every allowed folder, or to a hidden
    file or folder in one (a spec saved in a home folder must not reach ~/.ssh)."""
    if roots is None:
        return
    real = p.resolve()
    root = next((r for r in roots if real == r or real.is_relative_to(r)), None)
    if root is None:
        raise bad(
            key,
            f"{short(str(p))} is outside the spec's folder {roots[0]}: a spec names only files beside it "
            "(allow another folder with --allow-path / allow_paths)",
        )
    if any(part.startswith(".") for part in real.relative_to(root).parts):
        raise bad(key, f"{short(str(p))} is a hidden file or in a hidden folder: a spec names none")


def _number(x: Any, key: str, bad, positive: bool = False, integer: bool = False, maximum: float | None = None) -> None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    ok = ok and (x > 0 if positive else x >= 0) and (not integer or float(x).is_integer())
    if not ok or (maximum is not None and x > maximum):
        what = "a positive" if positive else "a non-negative"
        most = f" of at most {maximum:,g}" if maximum is not None else ""
        raise bad(key, f"expected {what} {'integer' if integer else 'number'}{most}, got {short(x)}")


def _transforms(transforms: Any, key: str, bad) -> None:
    """Each transform: its kind first, then only that kind's options, each of its type."""
    if not isinstance(transforms, list):
        raise bad(f"{key}.transforms", "expected a list of {transform: value} mappings")
    for i, t in enumerate(transforms):
        at = f"{key}.transforms[{i}]"
        if not isinstance(t, dict) or not t or next(iter(t)) not in TRANSFORMS:
            raise bad(at, f"expected a mapping whose first key is one of {', '.join(TRANSFORMS)}")
        kind = next(iter(t))
        for k, x in t.items():
            if k != kind and k not in TRANSFORM_OPTIONS[kind]:
                takes = ", ".join(TRANSFORM_OPTIONS[kind]) or "no options"
                raise bad(f"{at}.{_name(k)}", f"unknown option of {kind}; it takes {takes}")
            if k in ("speedup", "efficiency", "batch", "seq"):
                _number(x, f"{at}.{k}", bad, positive=True)
            elif k == "comm_scale":
                _number(x, f"{at}.{k}", bad)
            elif k == "dp":
                _number(x, f"{at}.{k}", bad, positive=True, integer=True, maximum=max_npus())
            elif k == "types":
                names = [x] if isinstance(x, str) else x
                if not isinstance(names, list) or not all(isinstance(n, str) and len(n) <= 64 for n in names):
                    raise bad(f"{at}.{k}", f"expected a collective type or a list of them, got {short(x)}")
                if len(names) > 64:
                    raise bad(f"{at}.{k}", f"{len(names)} collective types: expected at most 64")
            elif not isinstance(x, str) or len(x) > 4096:
                raise bad(f"{at}.{k}", f"expected a string of at most 4096 characters, got {short(x)}")


def pattern_nodes(pattern: str) -> int:
    """Nodes on each NPU a `synthesize.patterns.from_spec` pattern builds (without building it);
    ChakraError when it is not one."""
    kind, _, rest = pattern.partition(":")
    try:
        if kind in ("coll", "p2p"):
            return 1 if kind == "coll" else 2
        kv = dict(p.split("=", 1) for p in rest.split(":") if p)
        if kind == "train":
            layers = float(kv["layers"])
            if not math.isfinite(layers) or layers < 0:
                raise ValueError(f"layers={kv['layers']}")
            return 3 * int(layers)
        if kind == "roof":
            return len(kv["ops"].split("/"))
    except KeyError as e:
        raise ChakraError(f"no {e.args[0]}=... in the pattern") from None
    except ValueError as e:
        raise ChakraError(f"not a pattern ({short(str(e))})") from None
    raise ChakraError(f"unknown kind {short(kind)} (coll, train, p2p, roof)")


def _check_pattern(pattern: str, key: str, bad) -> None:
    try:
        n = pattern_nodes(pattern)
    except ChakraError as e:
        raise bad(key, f"{short(pattern)}: {e}") from None
    limit, source = node_limit(None)
    if n > limit:
        raise bad(
            key,
            f"{short(pattern)} builds {n:,} nodes per NPU, over the limit of {limit:,} ({source}; set {ENV_MAX_NODES})",
        )


def _check_value(k: str, x: Any, workloads: dict, bad, where: str) -> None:
    if k == "workload" and not (isinstance(x, str) and x in workloads):
        raise bad(where, f"unknown workload {short(x)}; defined: {', '.join(workloads)}")
    if k == "mode" and x not in MODES:
        raise bad(where, f"unknown mode {short(x)}; one of {', '.join(MODES)}")
    if isinstance(x, dict) or (isinstance(x, list) and k not in PER_DIM_KEYS):
        raise bad(where, f"expected a single value, got {short(x)}")
    if isinstance(x, list):
        if not 0 < len(x) <= MAX_DIMS or not all(_scalar(e) for e in x):
            raise bad(where, f"expected a list of 1 to {MAX_DIMS} numbers or names (one per dimension), got {short(x)}")
    elif x is not None and not _scalar(x):
        raise bad(where, f"expected a number or a name, got {short(x)}")


def _scalar(x: Any) -> bool:
    return isinstance(x, (int, float, bool)) or (isinstance(x, str) and len(x) <= 4096)


def _absolute_system(k: str, x: Any, base: Path, roots: list[Path] | None, bad, key: str) -> Any:
    """A ``system`` given as ASTRA-sim's files (NETWORK.yml,SYSTEM.json) with absolute paths,
    each inside the allowed folders."""
    if k != "system" or not isinstance(x, str) or "," not in x:
        return x
    paths = [p if p.is_absolute() else (base / p).resolve() for p in (Path(s.strip()) for s in x.split(","))]
    for p in paths:
        _inside(p, roots, bad, key)
    if roots is not None and len(paths) == 2:
        _documents_of_kind(paths[0], paths[1], bad, key)
    return ",".join(str(p) for p in paths)


def _documents_of_kind(network: Path, system: Path, bad, key: str) -> None:
    """A spec file's ASTRA-sim files read as bounded documents that must be a YAML mapping and a
    JSON object before the simulator's readers see them: a file of any other kind is refused by
    name only, so a spec cannot get a local file's text quoted back in an error."""
    for path, what in ((network, "a YAML mapping"), (system, "a JSON object")):
        try:
            doc = read_yaml(path, "network file")[0] if path is network else read_json(path, "system file")
        except ChakraError as e:
            raise bad(key, str(e)) from None
        if not isinstance(doc, dict):
            raise bad(key, f"{short(str(path))}: not {what} (ASTRA-sim's network and system files are)")


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
        _number(x, f"prices.npu_hour.{_name(k)}", bad)
    return {str(k): float(x) for k, x in table.items()}
