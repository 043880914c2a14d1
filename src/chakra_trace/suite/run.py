"""`run_suite`: every workload of a suite simulated on one system and on the reference system, into
one result: per workload what the run rules measure, the score, and what makes it verifiable
(input hashes, system description, versions, the command).

The points run on the sweep's executors (a pool of local processes, or Ray) and each is the
sweep's own evaluation (`sweep.evaluate.evaluate`), so a suite run and a sweep of the same
workload and system give the same numbers.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ChakraError
from ..io.documents import read_json
from ..io.et import atomic_output
from ..sweep.evaluate import evaluate
from ..sweep.executors import run_pool, run_ray
from ..sweep.points import canonical
from ..sweep.spec import NETWORK_KEYS, PLAN_KEYS, TRANSFORMS
from ..sweep.systems import system_of
from .inputs import materialize, versions
from .manifest import Entry, Suite, SuiteError, load_suite
from .score import division_score, speedup

RESULT_SCHEMA = "chakra-suite-result/1"
RESULT_FILE = "result.json"
DIVISIONS = ("closed", "open")
SYSTEM_KEYS = (*NETWORK_KEYS, "device", "efficiency", "mode")
#: what a point's simulation gives (its row, `sweep.evaluate`) that a result keeps and a check compares
RAW = (
    "recording_ns", "steps", "sim_npus", "compute_s", "comm_s", "exposed_comm_s", "idle_s", "energy_j", "avg_power_w",
    "events",
)  # fmt: skip


def system_params(system: str | os.PathLike | dict) -> dict:
    """A system description: a preset name (`chakra systems`), a JSON file or a mapping of the
    sweep's system fields (``system``, ``topology``, ``npus``/``dims``, ``bandwidth``, ``latency``,
    ``algorithm``, ``device``, ``efficiency``, ``mode``); checked by building it."""
    if isinstance(system, dict):
        params, src = dict(system), "system description"
    elif str(system).endswith(".json"):
        params, src = read_json(system, "system description"), str(system)
        if not isinstance(params, dict):
            raise SuiteError(f"{system}: expected a JSON object of system fields")
    else:
        params, src = {"system": str(system)}, "system"
    bad = sorted(set(params) - set(SYSTEM_KEYS))
    if bad:
        raise SuiteError(f"{src}: unknown system fields {', '.join(bad)} (expected: {', '.join(SYSTEM_KEYS)})")
    try:
        system_of(params)
    except ChakraError as e:
        raise SuiteError(f"{src}: {e}") from None
    return params


def describe_system(params: dict) -> dict:
    p = system_of(params)
    name = f"{p.name} ({params['device']})" if params.get("device") else p.name
    return {"params": params, "name": name, "description": p.description, "npus": p.npus}


def parse_change(text: str) -> dict:
    """``WORKLOAD:KEY=VALUE`` (an open-division change) as {"workload", "key", "value"}: a plan
    field of a pre-execution workload (``llama2-70b-64:virtual_stages=10``) or a transform
    (``ddp:speedup=1.5``)."""
    name, sep, rest = text.partition(":")
    key, eq, value = rest.partition("=")
    if not sep or not eq or not name or not key:
        raise SuiteError(f"change {text!r}: expected WORKLOAD:KEY=VALUE")
    if key not in PLAN_KEYS and key not in TRANSFORMS:
        raise SuiteError(f"change {text!r}: {key!r} is neither a plan field nor a transform ({', '.join(TRANSFORMS)})")
    try:
        v: Any = json.loads(value)
    except json.JSONDecodeError:
        v = value
    return {"workload": name, "key": key, "value": v}


def apply_changes(definition: dict, changes: Iterable[dict]) -> dict:
    d = {**definition, "plan": dict(definition.get("plan", {})), "transforms": list(definition.get("transforms", []))}
    for c in changes:
        if c["key"] in PLAN_KEYS:
            if "master" not in d:
                raise SuiteError(f"workload {c['workload']!r}: {c['key']} is a plan field; it has no plan (recorded)")
            d["plan"][c["key"]] = c["value"]
        else:
            d["transforms"].append({c["key"]: c["value"]})
    if not d["plan"]:
        d.pop("plan")
    if not d["transforms"]:
        d.pop("transforms")
    return d


@dataclass
class SuiteResult:
    """One run of a suite on one system (`to_dict` is `result.json`)."""

    suite: str
    version: str
    suite_sha256: str
    division: str
    system: dict
    reference_system: dict
    workloads: list[dict]
    score: dict
    changes: list[dict] = field(default_factory=list)
    scaling: list[dict] = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    command: list[str] | None = None
    created: str = ""
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        return {"schema": RESULT_SCHEMA, **{k: getattr(self, k) for k in self.__dataclass_fields__}}

    def to_pandas(self):
        import pandas as pd  # noqa: PLC0415

        return pd.DataFrame(self.workloads)

    def write(self, folder: str | os.PathLike) -> Path:
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        path = out / RESULT_FILE
        with atomic_output(path, compress=False) as f:
            f.write(json.dumps(self.to_dict(), indent=1, sort_keys=False, allow_nan=False).encode() + b"\n")
        return path


def definitions(suite: Suite, entries: Sequence[Entry], changes: Sequence[dict], progress=None) -> dict[str, dict]:
    out = {}
    for e in entries:
        out[e.name] = apply_changes(materialize(suite, e), [c for c in changes if c["workload"] == e.name])
        if progress:
            progress(1)
    return out


def simulate_points(
    definitions_: dict[str, dict],
    systems: dict[str, dict],
    *,
    ids: dict[str, str],
    workers: int | None = None,
    ray: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[tuple[str, str], dict]:
    """Every workload on every system (label -> params): {(workload, label): the sweep's row}."""
    ctx = {"name": "suite", "workloads": definitions_, "prices": {}}
    points = [
        {"id": f"{name}@{label}", "params": {"workload": name, **params}, "workload_id": ids[name]}
        for name in definitions_
        for label, params in systems.items()
    ]
    rows: dict[tuple[str, str], dict] = {}

    def on_row(row: dict) -> None:
        name, _, label = row["point_id"].partition("@")
        rows[(name, label)] = row
        if progress:
            progress(1)

    n = max(1, workers or os.cpu_count() or 1)
    if n == 1 and not ray:  # in this process (tests, notebooks): the same function the workers run
        for p in points:
            on_row(evaluate(ctx, p))
    elif ray:
        run_ray(ctx, points, n, on_row, address=ray)
    else:
        run_pool(ctx, points, n, on_row)
    return rows


def raw_of(row: dict | None) -> dict:
    if row is None or row.get("status") != "ok":
        return {"status": "error", "error": (row or {}).get("error") or "lost (its worker died on every try)"}
    return {"status": "ok", **{k: row.get(k) for k in RAW}}


def derive(e: Entry, raw: dict, ref: dict, division: str, changed: bool) -> dict:
    """A workload's result from its raw simulation and the reference's: per step, per token or
    sample, energy per step, speedup, and whether it is valid under the run rules."""
    out: dict[str, Any] = {
        "name": e.name,
        "kind": e.kind,
        "npus": e.npus,
        "steps": e.steps,
        "input_sha256": e.sha256,
        "changed": changed,
        "raw": raw,
        "reference_raw": ref,
    }
    why = None
    if raw["status"] != "ok":
        why = f"simulation failed: {raw['error']}"
    elif raw["sim_npus"] != e.npus:
        why = f"the system ran it on {raw['sim_npus']} NPUs; the workload is {e.npus}"
    elif division == "closed" and changed:
        why = "changed: a closed result simulates the suite's traces as given"
    out["valid"] = why is None
    out["why"] = why
    # the suite's own count of steps per trace divides the simulated recording (the sweep's
    # per-step columns divide by what the job says, which a trace may not say)
    step = raw["recording_ns"] / 1e9 / e.steps if raw["status"] == "ok" else None
    ref_step = ref["recording_ns"] / 1e9 / e.steps if ref.get("status") == "ok" else None
    out["recording_s"] = raw["recording_ns"] / 1e9 if raw["status"] == "ok" else None
    out["step_s"] = step
    out["per_token_s"] = step / e.tokens_per_step if step and e.tokens_per_step else None
    out["per_sample_s"] = step / e.samples_per_step if step and e.samples_per_step else None
    energy = raw.get("energy_j") if raw["status"] == "ok" else None  # (per the job's own step, or recording)
    out["energy_j_per_step"] = energy * (raw.get("steps") or 1) / e.steps if energy is not None else None
    out["reference_step_s"] = ref_step
    out["speedup"] = speedup(ref_step, step) if why is None else None
    return out


def scaling(entries: Sequence[Entry], rows: Sequence[dict]) -> list[dict]:
    """Scaling efficiency within each scaling group: the smallest member's NPU-seconds per token
    over each member's (1: perfect; weak or strong scaling alike)."""
    by = {r["name"]: r for r in rows}
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        if e.scaling_group and e.tokens_per_step:
            groups.setdefault(e.scaling_group, []).append(e)
    out = []
    for g, members in groups.items():
        members.sort(key=lambda e: e.npus)
        base = members[0]
        b = by.get(base.name, {}).get("per_token_s")
        for e in members[1:]:
            t = by.get(e.name, {}).get("per_token_s")
            eff = (b * base.npus) / (t * e.npus) if b and t else None
            out.append({"group": g, "from": base.name, "to": e.name, "npus": [base.npus, e.npus], "efficiency": eff})
    return out


def run_suite(
    system: str | os.PathLike | dict,
    out: str | os.PathLike | None = None,
    *,
    suite: str | os.PathLike | Suite | None = None,
    division: str = "closed",
    changes: Sequence[dict | str] = (),
    only: Sequence[str] | None = None,
    workers: int | None = None,
    ray: str | None = None,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    command: Sequence[str] | None = None,
) -> SuiteResult:
    """Run ``suite`` (the bundled one by default) on ``system`` in ``division``; write
    ``out/result.json`` when ``out`` is given. ``only``: a subset of workloads (the score is then
    incomplete). ``changes`` (open division): `parse_change` strings or their dicts."""
    t0 = time.perf_counter()
    if division not in DIVISIONS:
        raise SuiteError(f"division {division!r}: expected one of {', '.join(DIVISIONS)}")
    s = suite if isinstance(suite, Suite) else load_suite(suite)
    ch = [parse_change(c) if isinstance(c, str) else dict(c) for c in changes]
    if ch and division == "closed":
        raise SuiteError("the closed division simulates the suite's traces as given: changes need --division open")
    for c in ch:
        s.entry(c["workload"])  # (names a workload of the suite)
    entries = [s.entry(n) for n in only] if only else list(s.workloads)
    params = system_params(system)
    ref_params = system_params(s.reference_system)
    systems = {"system": params} if params == ref_params else {"system": params, "reference": ref_params}
    if on_total:
        on_total(len(entries) * (1 + len(systems)))
    defs = definitions(s, entries, ch, progress)
    ids = {n: identity(s.entry(n), d) for n, d in defs.items()}
    rows = simulate_points(defs, systems, ids=ids, workers=workers, ray=ray, progress=progress)
    results = []
    for e in entries:
        raw = raw_of(rows.get((e.name, "system")))
        ref = raw_of(rows.get((e.name, "reference" if "reference" in systems else "system")))
        results.append(derive(e, raw, ref, division, any(c["workload"] == e.name for c in ch)))
    score = division_score([r["speedup"] for r in results], [e.name for e in entries], s.names)
    res = SuiteResult(
        suite=s.name,
        version=s.version,
        suite_sha256=s.sha256,
        division=division,
        system=describe_system(params),
        reference_system=describe_system(ref_params),
        workloads=results,
        score=score,
        changes=ch,
        scaling=scaling(entries, results),
        versions=versions(),
        command=list(command) if command else None,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    res.wall_s = round(time.perf_counter() - t0, 3)
    if out is not None:
        res.write(out)
    return res


def identity(e: Entry, definition: dict) -> str:
    """What a point simulates, for the workers' workload cache: the input's hash and its options."""
    rest = {k: v for k, v in definition.items() if k not in ("path", "master")}
    return f"{e.sha256[:24]}-{canonical(rest)}"


__all__ = ["SuiteResult", "run_suite", "system_params", "parse_change"]
