"""`add_trace`: a contributor's recorded job registered in a suite, checked the way the suite's
own traces are: it must validate across ranks, it is obfuscated (when asked) and leak-scanned,
written into the suite's folder, hashed, and entered in the manifest with its provenance.

Nothing is registered when any check fails: the manifest is rewritten only at the end, atomically,
and the trace folder of a refused job is removed.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from pathlib import Path

from ..io.et import atomic_output
from ..io.workload import Workload
from ..simulate.peers import job_groups, job_npus
from ..synthesize.leaks import leak_scan
from ..synthesize.obfuscate import LEVELS, check_secret, obfuscate
from ..validate import validate_workload
from .inputs import versions
from .manifest import MANIFEST, SCHEMA, Entry, SuiteError, content_sha256, load_suite, manifest_path

TRACES = "traces"


def _new_suite(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": SCHEMA,
        "name": "chakra-suite-local",
        "version": "0.1",
        "reference_system": {"system": "selene"},
        "workloads": [],
    }
    _write(folder / MANIFEST, doc)


def _write(path: Path, doc: dict) -> None:
    with atomic_output(path, compress=False) as f:
        f.write(json.dumps(doc, indent=1).encode() + b"\n")


def add_trace(
    trace: str | os.PathLike,
    name: str,
    suite: str | os.PathLike,
    *,
    obfuscate_level: str | None = None,
    secret: bytes | str | None = None,
    description: str = "",
    steps: int = 1,
    samples_per_step: int | None = None,
    tokens_per_step: int | None = None,
    comm_groups: str | os.PathLike | None = None,
) -> Entry:
    """Register the recorded job ``trace`` (any `Workload.open` source) as workload ``name`` of the
    suite in folder ``suite`` (made, with a new manifest, when it has none). Returns the entry."""
    folder = Path(suite)
    if obfuscate_level is not None and obfuscate_level not in LEVELS:
        raise SuiteError(f"obfuscation level {obfuscate_level!r}: expected one of {', '.join(LEVELS)}")
    if manifest_path(folder).is_file() and name in load_suite(folder).names:
        raise SuiteError(f"{folder / MANIFEST}: a workload named {name!r} is registered already")
    w = Workload.open(trace, comm_groups)  # (the job is read and checked before the suite is touched)
    report = validate_workload(w)
    errors = report.errors
    if errors:
        raise SuiteError(f"{trace}: does not validate ({len(errors)} errors; first: {errors[0]}): not registered")
    if not manifest_path(folder).is_file():
        _new_suite(folder)
    s = load_suite(folder)
    out = w
    obf = None
    if obfuscate_level is not None:
        key = check_secret(secret) if secret is not None else secrets.token_bytes(32)
        res = obfuscate(w, obfuscate_level, key)
        out, obf = res.workload, res.report.to_dict()
    dest = folder / TRACES / name
    if dest.exists():
        raise SuiteError(f"{dest}: exists already (remove it or choose another name)")
    dest.mkdir(parents=True)
    try:
        files = out.save(dest / name, groups=out.groups or None)
        if out.groups:
            files = sorted(dest.iterdir())
        leaks = leak_scan(w, files) if obfuscate_level is not None else None
        if leaks is not None and not leaks.clean:
            found = ", ".join(f"{k} {t!r}" for k, t in leaks.found[:3])
            raise SuiteError(f"{trace}: the obfuscated copy still holds the original's {found}: not registered")
        entry = Entry(
            name=name,
            kind="post-execution",
            npus=job_npus(out.traces, job_groups(out)),  # (a rank of a bigger job: the NPUs its groups name)
            description=description or f"contributed recorded job ({len(out.ranks)} ranks)",
            sha256=content_sha256(dest),
            steps=steps,
            tokens_per_step=tokens_per_step,
            samples_per_step=samples_per_step,
            path=f"{TRACES}/{name}",
            provenance={
                "source": Path(trace).name,
                "added": time.strftime("%Y-%m-%d", time.gmtime()),
                "validated": {"nodes": report.nodes, "warnings": len(report.issues) - len(errors)},
                "obfuscation": None if obf is None else {"level": obfuscate_level, "report": obf},
                "leak_scan": None if leaks is None else leaks.to_dict(),
                "versions": versions(),
            },
        )
        doc = s.to_dict()
        doc["workloads"].append(entry.to_dict())
        _write(folder / MANIFEST, doc)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return entry
