"""The suite's manifest: which workloads, where their traces come from, and their content hashes.

A suite is a folder holding ``suite.json`` (schema ``chakra-suite/1``)::

    {"schema": "chakra-suite/1", "name": "chakra-suite", "version": "0.1",
     "reference_system": {"system": "selene"},
     "workloads": [{"name": ..., "kind": "pre-execution" | "post-execution", "npus": N,
                    "description": ..., "steps": S, "tokens_per_step": T | null,
                    "samples_per_step": B | null, "sha256": "<hex>",
                    "recipe": {...}  (pre-execution)  |  "path": "traces/x"  (post-execution),
                    "provenance": {...}}]}

A manifest may come from someone else, so it is data: read bounded (`io.documents`), every field
checked here, and it can name no code: a recipe names a model from `MODELS` (the models this
tool ships), never a file; a path must resolve, links followed, inside the suite's folder (or,
for the bundled suite only, the repository's own recorded corpus, `BUNDLED_DATA`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ChakraError
from ..io.documents import read_json
from ..sweep.points import files_of
from ..synthesize.parallel import Plan

SCHEMA = "chakra-suite/1"
MANIFEST = "suite.json"
KINDS = ("pre-execution", "post-execution")
REPO = Path(__file__).resolve().parents[3]
#: the suite this checkout ships, and the recorded corpus its post-execution workloads read in place
BUNDLED = REPO / "suites" / "v0.1"
BUNDLED_DATA = REPO / "tests" / "data" / "corpus"
#: the models a recipe may name (capture's ``FILE.py:FUNCTION``, in this checkout)
MODELS = {"gpt": REPO / "examples" / "models" / "gpt.py", "vit": REPO / "examples" / "models" / "vit.py"}
RECIPE_KEYS = {"model", "config", "batch", "seq", "dtype", "optimizer", "plan"}
ENTRY_KEYS = {
    "name", "kind", "npus", "description", "steps", "tokens_per_step", "samples_per_step", "sha256",
    "recipe", "path", "provenance", "scaling_group",
}  # fmt: skip
PLAN_FIELDS = set(Plan.__dataclass_fields__)


class SuiteError(ChakraError):
    """A suite, a result folder or an input that is not what it must be."""


@dataclass(frozen=True)
class Entry:
    """One workload of the suite."""

    name: str
    kind: str
    npus: int
    description: str
    sha256: str
    steps: int = 1
    tokens_per_step: int | None = None
    samples_per_step: int | None = None
    recipe: dict | None = None
    path: str | None = None
    provenance: dict = field(default_factory=dict)
    scaling_group: str | None = None

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "npus": self.npus,
            "description": self.description,
            "steps": self.steps,
            "tokens_per_step": self.tokens_per_step,
            "samples_per_step": self.samples_per_step,
            "sha256": self.sha256,
        }
        if self.recipe is not None:
            d["recipe"] = self.recipe
        if self.path is not None:
            d["path"] = self.path
        if self.scaling_group:
            d["scaling_group"] = self.scaling_group
        d["provenance"] = self.provenance
        return d


@dataclass(frozen=True)
class Suite:
    name: str
    version: str
    folder: Path
    reference_system: dict
    workloads: tuple[Entry, ...]
    sha256: str  # of suite.json's bytes

    def entry(self, name: str) -> Entry:
        for e in self.workloads:
            if e.name == name:
                return e
        raise SuiteError(f"{self.folder / MANIFEST}: no workload {name!r} (have: {', '.join(self.names)})")

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.workloads]

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}"

    def roots(self) -> list[Path]:
        """Folders the manifest's paths may resolve inside."""
        own = self.folder.resolve()
        return [own, BUNDLED_DATA.resolve()] if own == BUNDLED.resolve() else [own]

    def resolve(self, e: Entry) -> Path:
        """A post-execution entry's files, confined to `roots`."""
        assert e.path is not None
        p = (self.folder / e.path).resolve()
        if not any(p == r or r in p.parents for r in self.roots()):
            raise SuiteError(
                f"{self.folder / MANIFEST}: workload {e.name!r}: path {e.path!r} leaves the suite's folder"
            )
        if any(part.startswith(".") for part in Path(e.path).parts if part not in (".", "..")):
            raise SuiteError(f"{self.folder / MANIFEST}: workload {e.name!r}: path {e.path!r} names a hidden file")
        if not p.exists():
            raise SuiteError(f"{self.folder / MANIFEST}: workload {e.name!r}: {p} does not exist")
        return p

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "name": self.name,
            "version": self.version,
            "reference_system": self.reference_system,
            "workloads": [e.to_dict() for e in self.workloads],
        }


def manifest_path(suite: str | os.PathLike | None) -> Path:
    p = Path(suite) if suite is not None else BUNDLED
    return p / MANIFEST if p.is_dir() or p.suffix != ".json" else p


def load_suite(suite: str | os.PathLike | None = None) -> Suite:
    """A suite from its folder (or its ``suite.json``); the bundled one by default."""
    path = manifest_path(suite)
    if not path.is_file():
        where = "the bundled suite ships with the source checkout" if suite is None else "no such suite"
        raise SuiteError(f"{path}: not found ({where}; give a suite folder holding {MANIFEST})")
    raw = path.read_bytes() if path.stat().st_size < (8 << 20) else None
    if raw is None:
        raise SuiteError(f"{path}: larger than 8 MiB: not a suite manifest")
    d = read_json(path, "suite manifest")
    src = str(path)
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise SuiteError(f"{src}: expected a JSON object with schema {SCHEMA!r}")
    for key in ("name", "version"):
        if not isinstance(d.get(key), str) or not d[key]:
            raise SuiteError(f"{src}: {key!r} must be a non-empty string")
    ref = d.get("reference_system")
    if not isinstance(ref, dict) or not ref:
        raise SuiteError(f"{src}: 'reference_system' must be a system description (e.g. {{'system': 'selene'}})")
    items = d.get("workloads")
    if not isinstance(items, list):
        raise SuiteError(f"{src}: 'workloads' must be a list")
    entries = tuple(_entry(w, i, src) for i, w in enumerate(items))
    names = [e.name for e in entries]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SuiteError(f"{src}: workload names used twice: {', '.join(dup)}")
    return Suite(d["name"], d["version"], path.parent, ref, entries, hashlib.sha256(raw).hexdigest())


def _entry(w: Any, i: int, src: str) -> Entry:
    where = f"{src}: workloads[{i}]"
    if not isinstance(w, dict):
        raise SuiteError(f"{where}: expected an object")
    name = w.get("name")
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise SuiteError(f"{where}: 'name' must be a non-empty string of letters, digits, '-', '_', '.'")
    where = f"{src}: workload {name!r}"
    unknown = sorted(set(w) - ENTRY_KEYS)
    if unknown:
        raise SuiteError(f"{where}: unknown keys {', '.join(unknown)}")
    if w.get("kind") not in KINDS:
        raise SuiteError(f"{where}: 'kind' must be one of {', '.join(KINDS)}")
    for key in ("npus", "steps"):
        v = w.get(key, 1)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SuiteError(f"{where}: {key!r} must be a positive integer")
    for key in ("tokens_per_step", "samples_per_step"):
        v = w.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise SuiteError(f"{where}: {key!r} must be a positive integer or null")
    sha = w.get("sha256")
    if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise SuiteError(f"{where}: 'sha256' must be 64 lowercase hex digits")
    recipe, path = w.get("recipe"), w.get("path")
    if (recipe is None) == (path is None):
        raise SuiteError(f"{where}: give exactly one of 'recipe' (a model captured) or 'path' (trace files)")
    if recipe is not None:
        _check_recipe(recipe, where)
    if path is not None and (not isinstance(path, str) or not path or os.path.isabs(path)):
        raise SuiteError(f"{where}: 'path' must be a relative path inside the suite's folder")
    if (w["kind"] == "pre-execution") != (recipe is not None):
        raise SuiteError(f"{where}: a pre-execution workload is a recipe, a post-execution one a path")
    prov = w.get("provenance", {})
    if not isinstance(prov, dict):
        raise SuiteError(f"{where}: 'provenance' must be an object")
    return Entry(
        name=name,
        kind=w["kind"],
        npus=w["npus"],
        description=str(w.get("description", "")),
        sha256=sha,
        steps=w.get("steps", 1),
        tokens_per_step=w.get("tokens_per_step"),
        samples_per_step=w.get("samples_per_step"),
        recipe=recipe,
        path=path,
        provenance=prov,
        scaling_group=w.get("scaling_group"),
    )


def _check_recipe(r: Any, where: str) -> None:
    if not isinstance(r, dict):
        raise SuiteError(f"{where}: 'recipe' must be an object")
    unknown = sorted(set(r) - RECIPE_KEYS)
    if unknown:
        raise SuiteError(f"{where}: recipe: unknown keys {', '.join(unknown)}")
    if r.get("model") not in MODELS:
        raise SuiteError(f"{where}: recipe: 'model' must be one of {', '.join(MODELS)} (a suite names no code)")
    if not isinstance(r.get("config", {}), dict):
        raise SuiteError(f"{where}: recipe: 'config' must be an object")
    for key in ("batch", "seq"):
        v = r.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SuiteError(f"{where}: recipe: {key!r} must be a positive integer")
    if r.get("optimizer", "adamw") not in ("adamw", "adam", "sgd"):
        raise SuiteError(f"{where}: recipe: 'optimizer' must be adamw, adam or sgd")
    plan = r.get("plan", {})
    if not isinstance(plan, dict) or set(plan) - PLAN_FIELDS:
        raise SuiteError(f"{where}: recipe: 'plan' must be an object of plan fields ({', '.join(sorted(PLAN_FIELDS))})")
    try:
        Plan(**plan)
    except (TypeError, ValueError, ChakraError) as e:
        raise SuiteError(f"{where}: recipe: plan: {e}") from None


def content_sha256(path: Path) -> str:
    """The sha256 of a trace's files: a file's bytes (and a NUL), or a folder's visible files in
    name order, each as its relative name, a NUL, its bytes, a NUL (so moving bytes between files
    shows)."""
    path = Path(path)
    files = files_of(path) if path.exists() else []
    if not files:
        raise SuiteError(f"{path}: no files")
    h = hashlib.sha256()
    for f in files:
        if f != path:  # (a single file's name is not part of it: a cached copy hashes alike)
            h.update(f.relative_to(path).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()
