"""`check_result`: a result folder verified by deriving every number in it again.

A result is data someone else made, so nothing in it is taken on trust: the suite's manifest
must be the one it names (its sha256), each workload's input must hash to the manifest's value,
every workload is simulated again on the result's system and reference system, and every stored
number (the raw simulation, the per-step figures, speedups, the score, scaling efficiencies) must
equal the re-derived one. Simulations are deterministic, so "equal" is exact for integers and
within a relative 1e-9 for floats (their JSON round trip).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ChakraError
from ..io.documents import read_json
from .manifest import Suite, SuiteError, load_suite
from .run import RESULT_FILE, RESULT_SCHEMA, definitions, derive, identity, raw_of, scaling, simulate_points
from .score import division_score

REL_TOL = 1e-9


@dataclass
class CheckReport:
    folder: str
    workloads: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"folder": self.folder, "ok": self.ok, "workloads": self.workloads, "problems": self.problems}


def read_result(folder: str | os.PathLike) -> dict:
    path = Path(folder) / RESULT_FILE if Path(folder).is_dir() else Path(folder)
    d = read_json(path, "suite result")
    if not isinstance(d, dict) or d.get("schema") != RESULT_SCHEMA:
        raise SuiteError(f"{path}: not a suite result (expected schema {RESULT_SCHEMA!r})")
    for key, kind in (("workloads", list), ("system", dict), ("reference_system", dict), ("score", dict)):
        if not isinstance(d.get(key), kind):
            raise SuiteError(f"{path}: {key!r} must be a {kind.__name__}")
    for i, w in enumerate(d["workloads"]):
        if not isinstance(w, dict) or not isinstance(w.get("name"), str):
            raise SuiteError(f"{path}: workloads[{i}] must be an object with a name")
    return d


def same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def _diff(where: str, stored: dict, derived: dict, problems: list[str]) -> None:
    for k in sorted(set(stored) | set(derived)):
        if not same(stored.get(k), derived.get(k)):
            problems.append(f"{where}: {k} is {stored.get(k)!r} in the result, re-derived {derived.get(k)!r}")


def check_result(
    folder: str | os.PathLike,
    *,
    suite: str | os.PathLike | Suite | None = None,
    workers: int | None = None,
    ray: str | None = None,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> CheckReport:
    """Verify a result folder (see the module docstring); every difference is a problem naming
    the workload and the number."""
    d = read_result(folder)
    rep = CheckReport(str(folder), workloads=len(d["workloads"]))
    s = suite if isinstance(suite, Suite) else load_suite(suite)
    if d.get("suite_sha256") != s.sha256:
        rep.problems.append(
            f"suite: the result was made with a manifest hashing to {str(d.get('suite_sha256'))[:16]}..., "
            f"this suite's ({s.label}) is {s.sha256[:16]}..."
        )
        return rep
    entries = []
    for w in d["workloads"]:
        try:
            e = s.entry(w["name"])
        except SuiteError as err:
            rep.problems.append(str(err))
            continue
        if w.get("input_sha256") != e.sha256:
            rep.problems.append(f"workload {e.name!r}: input_sha256 in the result is not the suite's")
        entries.append(e)
    changes = [c for c in d.get("changes") or [] if isinstance(c, dict)]
    if on_total:
        on_total(len(entries) * 3)
    defs = {}
    for e in entries:  # each input proved against the manifest (a bad one is a problem, not the end)
        try:
            defs.update(definitions(s, [e], changes, progress))
        except ChakraError as err:
            rep.problems.append(str(err))
    systems = {"system": d["system"].get("params"), "reference": d["reference_system"].get("params")}
    if not all(isinstance(p, dict) for p in systems.values()):
        rep.problems.append("system: the result does not describe its systems' parameters")
        return rep
    ids = {n: identity(s.entry(n), df) for n, df in defs.items()}
    rows = simulate_points(defs, systems, ids=ids, workers=workers, ray=ray, progress=progress)
    stored = {w["name"]: w for w in d["workloads"]}
    derived_rows = []
    for e in entries:
        if e.name not in defs:
            continue
        raw, ref = raw_of(rows.get((e.name, "system"))), raw_of(rows.get((e.name, "reference")))
        changed = any(c.get("workload") == e.name for c in changes)
        new = derive(e, raw, ref, str(d.get("division")), changed)
        derived_rows.append(new)
        _diff(f"workload {e.name!r}", stored[e.name], new, rep.problems)
    names = [w["name"] for w in d["workloads"]]
    if len(derived_rows) == len(names):
        score = division_score([r["speedup"] for r in derived_rows], names, s.names)
        _diff("score", d["score"], score, rep.problems)
        stored_scaling = {(x.get("from"), x.get("to")): x for x in d.get("scaling") or [] if isinstance(x, dict)}
        for x in scaling(entries, derived_rows):
            _diff(f"scaling {x['from']} -> {x['to']}", stored_scaling.pop((x["from"], x["to"]), {}), x, rep.problems)
        for k in stored_scaling:
            rep.problems.append(f"scaling {k[0]} -> {k[1]}: in the result, not re-derived")
    return rep
