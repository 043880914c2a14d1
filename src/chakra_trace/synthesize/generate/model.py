"""The generator model and its file: plain JSON, documented and versioned, never a pickle.

A model file is one JSON object (gzip when the name ends in ``.gz``)::

    {"format": "chakra-generator", "version": 1,
     "vocabulary": {"tokens": [[node_type, kind, op_class, comm_type, role], ...], "names": [...]},
     "programs": [<program>, ...], "jobs": [<job>, ...], "global": {...}, "fit": {...}}

- ``vocabulary``: every token (what an op is: node type, resource kind 0 accelerator / 1 CPU /
  2 communication / 3 other, the name with digits folded, collective type or -1, the
  communicator role or -1 for all ranks) and every raw op name.
- ``programs``: one per distinct rank program (`program.RankProgram`): the grammar forest
  (``tree_*`` arrays: kind 0 sequence / 1 repeat / 2 literal, count, parent, children as CSR,
  first slot and slot count of a literal, one root per lane), each repeat's count rule
  ``count = round(count_a * layers + count_b)``, the lanes (``lane_kind``; ``lane_attr`` 0 none /
  1 thread / 2 stream), each slot's token and lane, the template instances of each slot
  (``inst_ptr`` CSR; per instance its order key, collective issue key, raw name, comm size and
  its change per layer, FLOPs, bytes, send/receive peer and tag, phase), the pooled durations of each slot (``dur_ptr``/``dur``,
  µs: every value, or 64 quantiles past 64), and the dependency relations (``rel_*``, see
  `relations.Relations`).
- ``jobs``: every training job: ranks, the program of each rank, each rank's communicator names
  by role, the groups, its layer count (the count of its longest repeated block), and features
  for novelty (op mix, log-duration and log-size quantiles, ops per rank).
- ``global``: what the baselines and the batch conditioning use: ops per token, all durations'
  and comm sizes' quantiles, each token's duration-to-work elasticity, and each token's jitter
  (the spread of log durations among the instances of one slot, which sampling adds).

Reading checks the format, the version (a file of another version is refused, naming both),
that every array has the length the others imply, the element types and ranges, and the grammar
forest and relations' structure (`validity`), so a damaged or hostile file fails on read, with
one line naming the file and the field, not deep in sampling. The file itself is read as a
shared document (`io.documents`: a regular file, at most 64 MiB after gunzip,
``$CHAKRA_MAX_DOCUMENT_BYTES``, gzip bombs refused).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ChakraError
from ...io.documents import read_json, short
from ...io.et import atomic_output
from ...schema.enums import CollectiveType, NodeType
from .grammar import Tree
from .program import PHASES
from .relations import Relations
from .validity import check_relations, check_tree

FORMAT = "chakra-generator"
VERSION = 1
QUANTILES = 64  # pooled values kept per slot (beyond: this many quantiles)
FEATURE_QUANTILES = 33  # per job, of log durations and log sizes (novelty)


class ModelFormatError(ChakraError):
    """A model file that is not a generator model this version reads."""


@dataclass
class Program:
    """One distinct rank program, fitted (see the module docstring for the fields)."""

    tree: Tree
    count_a: np.ndarray
    count_b: np.ndarray
    layers: int
    lane_kind: np.ndarray
    lane_attr: np.ndarray
    slot_token: np.ndarray
    slot_lane: np.ndarray
    inst_ptr: np.ndarray
    key: np.ndarray
    seq: np.ndarray
    name: np.ndarray
    comm_size: np.ndarray
    comm_slope: np.ndarray
    num_ops: np.ndarray
    tensor_size: np.ndarray
    peer: np.ndarray
    tag: np.ndarray
    phase: np.ndarray
    dur_ptr: np.ndarray
    dur: np.ndarray
    rel: Relations
    ranks_pooled: int = 1

    @property
    def num_slots(self) -> int:
        return int(self.slot_token.size)

    @property
    def template_ops(self) -> int:
        return int(self.key.size)

    def family_key(self) -> bytes:
        """Programs with one key are one family: the same grammar, tokens and lanes at other
        repeat counts (one model at other layer counts)."""
        t = self.tree
        parts = (t.kind, t.child, t.nslots, self.slot_token, self.lane_kind)
        return b"|".join(np.ascontiguousarray(a).tobytes() for a in parts)


@dataclass
class JobFeatures:
    """What novelty compares: op mix (op class -> share), ops per rank, quantiles of log1p(µs)
    durations and of log2(1 + bytes) comm sizes."""

    op_mix: dict[str, float]
    nodes: float
    dur_q: list[float]
    size_q: list[float]

    def to_dict(self) -> dict[str, Any]:
        return {"op_mix": self.op_mix, "nodes": self.nodes, "dur_q": self.dur_q, "size_q": self.size_q}


@dataclass
class Job:
    """A training job: its ranks' programs and communicators."""

    name: str
    ranks: int
    rank_program: list[int]
    rank_roles: list[list[str]]
    groups: dict[str, list[int]]
    layers: int
    features: JobFeatures
    batch: float | None = None


@dataclass
class GeneratorModel:
    """A fitted generator: vocabulary, programs, jobs and global statistics."""

    tokens: list[tuple[int, int, str, int, int]]
    names: list[str]
    programs: list[Program]
    jobs: list[Job]
    token_ops: np.ndarray  # training ops per token
    token_elasticity: np.ndarray  # d log(duration) / d log(work) per token
    token_jitter: np.ndarray  # spread of log(duration) among one slot's instances, per token
    dur_q: np.ndarray  # quantiles of every duration (µs)
    size_q: np.ndarray  # quantiles of every comm size (bytes)
    fit_info: dict[str, Any] = field(default_factory=dict)
    source: str | None = field(default=None, compare=False)  # the file it was read from (for messages)

    def job(self, like: str | int | None) -> Job:
        """A job by name or index (None: the only job); a recorded job's name without its step
        (`ddp` for `ddp/step0`, ...) is its first step."""
        if like is None:
            if len(self.jobs) == 1:
                return self.jobs[0]
            raise ChakraError(f"the model holds {len(self.jobs)} jobs; say which one to sample like: {self._names()}")
        if isinstance(like, int):
            if 0 <= like < len(self.jobs):
                return self.jobs[like]
            raise ChakraError(f"no job #{like}; the model holds {len(self.jobs)} jobs")
        for j in self.jobs:
            if j.name == like:
                return j
        for j in self.jobs:
            if j.name.startswith(f"{like}/step"):
                return j
        raise ChakraError(f"no job named {like!r} in the model; it holds {self._names()}")

    def _names(self) -> str:
        shown = ", ".join(j.name for j in self.jobs[:12])
        return shown + (", ..." if len(self.jobs) > 12 else "")

    def summary(self) -> dict[str, Any]:
        return {
            "jobs": [j.name for j in self.jobs],
            "programs": len(self.programs),
            "tokens": len(self.tokens),
            "slots": sum(p.num_slots for p in self.programs),
            "template_ops": sum(p.template_ops for p in self.programs),
            "relations": sum(len(p.rel) for p in self.programs),
            "layers": {j.name: j.layers for j in self.jobs},
        }


# --------------------------------------------------------------------------- JSON

_TREE = {
    "kind": np.int8,
    "count": np.int64,
    "parent": np.int64,
    "child_ptr": np.int64,
    "child": np.int64,
    "slot0": np.int64,
    "nslots": np.int64,
    "roots": np.int64,
}
_REL = {
    "v": np.int64,
    "u": np.int64,
    "kind": np.int8,
    "lvl_ptr": np.int64,
    "lvl_type": np.int8,
    "lvl_ref": np.int64,
    "lvl_b": np.int64,
    "every": np.bool_,
    "app_ptr": np.int64,
    "app": np.int64,
}
_PROGRAM = {
    "count_a": np.float64,
    "count_b": np.float64,
    "lane_kind": np.int8,
    "lane_attr": np.int8,
    "slot_token": np.int64,
    "slot_lane": np.int64,
    "inst_ptr": np.int64,
    "key": np.int64,
    "seq": np.int64,
    "name": np.int64,
    "comm_size": np.int64,
    "comm_slope": np.float64,
    "num_ops": np.int64,
    "tensor_size": np.int64,
    "peer": np.int64,
    "tag": np.int64,
    "phase": np.int8,
    "dur_ptr": np.int64,
    "dur": np.int64,
}


def _arrays(obj: Any, spec: dict[str, Any], prefix: str = "") -> dict[str, list]:
    return {prefix + k: np.asarray(getattr(obj, k)).tolist() for k in spec}


def model_to_dict(m: GeneratorModel) -> dict[str, Any]:
    """The model as the JSON object of the file format (module docstring)."""
    programs = []
    for p in m.programs:
        d: dict[str, Any] = {"layers": p.layers, "ranks_pooled": p.ranks_pooled}
        d.update(_arrays(p.tree, _TREE, "tree_"))
        d.update(_arrays(p, _PROGRAM))
        d.update(_arrays(p.rel, _REL, "rel_"))
        programs.append(d)
    return {
        "format": FORMAT,
        "version": VERSION,
        "vocabulary": {"tokens": [list(t) for t in m.tokens], "names": m.names},
        "programs": programs,
        "jobs": [
            {
                "name": j.name,
                "ranks": j.ranks,
                "rank_program": j.rank_program,
                "rank_roles": j.rank_roles,
                "groups": j.groups,
                "layers": j.layers,
                "batch": j.batch,
                "features": j.features.to_dict(),
            }
            for j in m.jobs
        ],
        "global": {
            "token_ops": m.token_ops.tolist(),
            "token_elasticity": m.token_elasticity.tolist(),
            "token_jitter": m.token_jitter.tolist(),
            "dur_q": m.dur_q.tolist(),
            "size_q": m.size_q.tolist(),
        },
        "fit": m.fit_info,
    }


_INT32 = 1 << 31
# per array of a program: (smallest, largest) value it may hold (None: any); index arrays are
# checked against what they index
_RANGES: dict[str, tuple[float | None, float | None]] = {
    "lane_kind": (0, 3),
    "lane_attr": (0, 2),
    "seq": (-1, None),
    "comm_size": (0, None),
    "num_ops": (0, None),
    "tensor_size": (0, None),
    "peer": (-1, _INT32 - 1),
    "tag": (-_INT32, _INT32 - 1),
    "phase": (0, len(PHASES) - 1),
    "dur": (0, 2**53),
}


class _Reader:
    """Pulls typed values out of the JSON object, naming the file and the field on any error."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.path}: {where}: {what}")

    def get(self, d: Any, key: str, where: str, kind: type | tuple[type, ...]) -> Any:
        if not isinstance(d, dict) or key not in d:
            raise self.fail(where, f"missing {key!r}")
        v = d[key]
        if not isinstance(v, kind) or isinstance(v, bool) and kind in (int, float, (int, float)):
            raise self.fail(where, f"{key!r} should be {getattr(kind, '__name__', kind)}, got {type(v).__name__}")
        return v

    def count(self, d: Any, key: str, where: str, low: int = 1) -> int:
        """An integer >= `low` (a count, a layer number)."""
        v = self.get(d, key, where, int)
        if not low <= v < 1 << 62:
            raise self.fail(where, f"{key!r} is {short(v)}, expected an integer >= {low}")
        return v

    def number(self, v: Any, where: str, what: str) -> float:
        """A finite JSON number (not a bool, NaN or infinity)."""
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(float(v)):
            raise self.fail(where, f"{what} should be a finite number, got {short(v)}")
        return float(v)

    def array(self, d: dict, key: str, dtype: Any, where: str) -> np.ndarray:
        """A flat list of numbers of the dtype's kind (integers for an integer dtype, finite
        numbers for a float one, booleans for a bool one) that fit the dtype."""
        v = self.get(d, key, where, list)
        want = np.dtype(dtype)
        bad = self.fail(where, f"{key!r} should be a flat list of {want.name} values")
        try:
            raw = np.asarray(v)
        except (TypeError, ValueError, OverflowError):  # ragged, or not numbers
            raise bad from None
        if raw.ndim != 1:
            raise bad
        if raw.size == 0:
            return np.zeros(0, want)
        if raw.dtype.kind not in {"b": "b", "i": "i", "u": "i", "f": "if"}[want.kind]:
            raise bad
        a = raw.astype(want)
        if want.kind == "f" and not np.isfinite(a).all():
            raise self.fail(where, f"{key!r} holds {a[~np.isfinite(a)][0]}: values must be finite")
        if want.kind in "iu" and (a != raw).any():
            raise self.fail(where, f"{key!r} holds {int(raw[a != raw][0])}, out of the range of {want.name}")
        return a

    def length(self, a: np.ndarray, n: int, key: str, where: str) -> None:
        if a.size != n:
            raise self.fail(where, f"{key!r} has {a.size} entries, expected {n}")

    def csr(self, ptr: np.ndarray, flat: np.ndarray, rows: int, ptr_key: str, flat_key: str, where: str) -> None:
        self.length(ptr, rows + 1, ptr_key, where)
        if ptr.size and (ptr[0] != 0 or ptr[-1] != flat.size or (np.diff(ptr) < 0).any()):
            raise self.fail(where, f"{ptr_key!r} does not describe the {flat.size} entries of {flat_key!r}")

    def index(self, a: np.ndarray, n: int, key: str, where: str, allow: int | None = None) -> None:
        bad = (a < (0 if allow is None else allow)) | (a >= n)
        if bad.any():
            raise self.fail(where, f"{key!r} holds {int(a[bad][0])}, outside 0..{n - 1}")

    def within(self, a: np.ndarray, key: str, where: str, low: float | None, high: float | None) -> None:
        bad = np.zeros(a.size, bool)
        if low is not None:
            bad |= a < low
        if high is not None:
            bad |= a > high
        if bad.any():
            span = f"{'' if low is None else low}..{'' if high is None else high}"
            raise self.fail(where, f"{key!r} holds {a[bad][0]}, outside {span}")


def model_from_dict(d: Any, path: str = "<model>") -> GeneratorModel:
    """A model from the JSON object of the file format, every field checked (ModelFormatError)."""
    r = _Reader(path)
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        got = d.get("format") if isinstance(d, dict) else type(d).__name__
        raise ModelFormatError(f"{path}: not a chakra generator model (format {short(got)}, expected {FORMAT!r})")
    version = d.get("version")
    if type(version) is not int or version != VERSION:
        raise ModelFormatError(
            f"{path}: model file version {short(version)} is not supported: this chakra-trace reads version "
            f"{VERSION} (fit the model again with this version: chakra generate fit)"
        )
    voc = r.get(d, "vocabulary", "vocabulary", dict)
    tokens = _tokens(r, r.get(voc, "tokens", "vocabulary", list))
    names = r.get(voc, "names", "vocabulary", list)
    if not all(isinstance(s, str) for s in names):
        raise r.fail("vocabulary", "names must be strings")
    programs = [_program(r, p, i, tokens, len(names)) for i, p in enumerate(r.get(d, "programs", "model", list))]
    g = r.get(d, "global", "model", dict)
    token_ops = r.array(g, "token_ops", np.float64, "global")
    elasticity = r.array(g, "token_elasticity", np.float64, "global")
    jitter = r.array(g, "token_jitter", np.float64, "global")
    for key, a, low, high in (
        ("token_ops", token_ops, 0, None),
        ("token_elasticity", elasticity, 0, 1),
        ("token_jitter", jitter, 0, 0.5),
    ):
        r.length(a, len(tokens), key, "global")
        r.within(a, key, "global", low, high)
    jobs = [_job(r, j, i, programs, tokens) for i, j in enumerate(r.get(d, "jobs", "model", list))]
    if not jobs:
        raise r.fail("jobs", "the model holds no job")
    fit_info = d.get("fit", {})
    return GeneratorModel(
        tokens=tokens,
        names=list(names),
        programs=programs,
        jobs=jobs,
        token_ops=token_ops,
        token_elasticity=elasticity,
        token_jitter=jitter,
        dur_q=r.array(g, "dur_q", np.float64, "global"),
        size_q=r.array(g, "size_q", np.float64, "global"),
        fit_info=fit_info if isinstance(fit_info, dict) else {},
        source=path,
    )


_NODE_TYPES = frozenset(int(t) for t in NodeType)


def _tokens(r: _Reader, raw: list) -> list[tuple[int, int, str, int, int]]:
    """[node_type, kind, op_class, comm_type, role]: a Chakra node type, a resource kind 0..3, a
    name, a collective type (-1: none), a communicator role (-1: all ranks)."""
    out = []
    for i, t in enumerate(raw):
        ok = isinstance(t, list) and len(t) == 5 and isinstance(t[2], str)
        ok = ok and all(type(t[k]) is int for k in (0, 1, 3, 4))
        if (
            not ok
            or t[0] not in _NODE_TYPES
            or not 0 <= t[1] <= 3
            or not -1 <= t[3] < _INT32
            or not -1 <= t[4] < _INT32
        ):
            raise r.fail(
                f"vocabulary token {i}",
                f"expected [node_type (0..{max(_NODE_TYPES)}), kind (0..3), op_class, comm_type (-1 or "
                f"{min(CollectiveType)}..), role (-1 or more)], got {short(t)}",
            )
        out.append((t[0], t[1], t[2], t[3], t[4]))
    return out


def _program(r: _Reader, d: Any, i: int, tokens: list, n_names: int) -> Program:
    where = f"program {i}"
    tree = Tree(**{k: r.array(d, "tree_" + k, t, where) for k, t in _TREE.items()})
    a = {k: r.array(d, k, t, where) for k, t in _PROGRAM.items()}
    rel = Relations(**{k: r.array(d, "rel_" + k, t, where) for k, t in _REL.items()})
    nodes = tree.kind.size
    for k in ("count", "parent", "slot0", "nslots"):
        r.length(getattr(tree, k), nodes, "tree_" + k, where)
    r.csr(tree.child_ptr, tree.child, nodes, "tree_child_ptr", "tree_child", where)
    r.index(tree.child, nodes, "tree_child", where)
    r.index(tree.roots, nodes, "tree_roots", where)
    r.index(tree.parent, nodes, "tree_parent", where, allow=-1)
    slots = int(tree.nslots.clip(0).sum())
    shape = check_tree(tree, slots, lambda what: r.fail(where, what))
    for k in ("count_a", "count_b"):
        r.length(a[k], nodes, k, where)
    r.length(a["lane_kind"], tree.roots.size, "lane_kind", where)
    r.length(a["lane_attr"], tree.roots.size, "lane_attr", where)
    for k in ("slot_token", "slot_lane"):
        r.length(a[k], slots, k, where)
    r.index(a["slot_token"], len(tokens), "slot_token", where)
    r.index(a["slot_lane"], tree.roots.size, "slot_lane", where)
    if (a["slot_lane"] != shape.lane[shape.leaf]).any():
        raise r.fail(where, "slot_lane disagrees with the lane of the slot's grammar tree")
    r.csr(a["inst_ptr"], a["key"], slots, "inst_ptr", "key", where)
    odd = np.diff(a["inst_ptr"]) != shape.instances
    if odd.any():
        s = int(np.flatnonzero(odd)[0])
        raise r.fail(
            where,
            f"slot {s} has {int(np.diff(a['inst_ptr'])[s])} template instances (inst_ptr), but its repeats' "
            f"tree_count make {shape.instances[s]:.6g}",
        )
    ops = a["key"].size
    for k in ("seq", "name", "comm_size", "comm_slope", "num_ops", "tensor_size", "peer", "tag", "phase"):
        r.length(a[k], ops, k, where)
    r.index(a["name"], n_names, "name", where)
    r.csr(a["dur_ptr"], a["dur"], slots, "dur_ptr", "dur", where)
    for k, (low, high) in _RANGES.items():
        r.within(a[k], k, where, low, high)
    m = rel.v.size
    for k in ("u", "kind", "every"):
        r.length(getattr(rel, k), m, "rel_" + k, where)
    r.index(rel.v, slots, "rel_v", where)
    r.index(rel.u, slots, "rel_u", where)
    r.csr(rel.lvl_ptr, rel.lvl_type, m, "rel_lvl_ptr", "rel_lvl_type", where)
    r.length(rel.lvl_ref, rel.lvl_type.size, "rel_lvl_ref", where)
    r.length(rel.lvl_b, rel.lvl_type.size, "rel_lvl_b", where)
    r.csr(rel.app_ptr, rel.app, m, "rel_app_ptr", "rel_app", where)
    check_relations(rel, shape, lambda what: r.fail(where, what))
    layers = r.count(d, "layers", where)
    pooled = r.count(d, "ranks_pooled", where)
    return Program(tree=tree, layers=layers, rel=rel, ranks_pooled=pooled, **a)


def _roles_used(p: Program, tokens: list) -> int:
    """Communicator roles a rank running `p` must name (its collectives' highest role + 1)."""
    roles = [tokens[t][4] for t in np.unique(p.slot_token).tolist() if tokens[t][0] == NodeType.COMM_COLL_NODE]
    return max(roles, default=-1) + 1


def _job(r: _Reader, d: Any, i: int, programs: list[Program], tokens: list) -> Job:
    where = f"job {i}"
    name = r.get(d, "name", where, str)
    where = f"job {short(name)}"
    ranks = r.count(d, "ranks", where)
    rp = r.get(d, "rank_program", where, list)
    n_programs = len(programs)
    if len(rp) != ranks or not all(type(x) is int and 0 <= x < n_programs for x in rp):
        raise r.fail(where, f"rank_program must list a program (0..{n_programs - 1}) for each of its {ranks} ranks")
    roles = r.get(d, "rank_roles", where, list)
    if len(roles) != ranks or not all(isinstance(x, list) and all(isinstance(s, str) for s in x) for x in roles):
        raise r.fail(where, "rank_roles must list each rank's communicator names")
    need = {k: _roles_used(programs[k], tokens) for k in set(rp)}
    for rank, (k, names) in enumerate(zip(rp, roles)):
        if len(names) < need[k]:
            raise r.fail(
                where, f"rank {rank} names {len(names)} communicators; its program's collectives use {need[k]}"
            )
    for k in set(rp):
        peer = programs[k].peer
        if peer.size and int(peer.max()) >= ranks:
            raise r.fail(where, f"program {k} sends to or receives from rank {int(peer.max())}; the job has {ranks}")
    groups = r.get(d, "groups", where, dict)
    for g, members in groups.items():
        if not isinstance(members, list) or not all(type(x) is int and 0 <= x < ranks for x in members):
            raise r.fail(where, f"group {short(g)} must list ranks 0..{ranks - 1}")
    f = r.get(d, "features", where, dict)
    fw = where + " features"
    mix = r.get(f, "op_mix", fw, dict)
    batch = d.get("batch")
    if batch is not None and r.number(batch, where, "batch") <= 0:
        raise r.fail(where, f"batch should be > 0, got {short(batch)}")
    return Job(
        name=name,
        ranks=ranks,
        rank_program=list(rp),
        rank_roles=[list(x) for x in roles],
        groups={str(g): list(m) for g, m in groups.items()},
        layers=r.count(d, "layers", where),
        features=JobFeatures(
            op_mix={str(k): r.number(v, fw, f"op_mix[{short(k)}]") for k, v in mix.items()},
            nodes=r.number(r.get(f, "nodes", fw, (int, float)), fw, "nodes"),
            dur_q=[r.number(x, fw, "dur_q") for x in r.get(f, "dur_q", fw, list)],
            size_q=[r.number(x, fw, "size_q") for x in r.get(f, "size_q", fw, list)],
        ),
        batch=None if batch is None else float(batch),
    )


def write_model(model: GeneratorModel, path: str | os.PathLike) -> Path:
    """Write the model file atomically (gzip when the name ends in .gz)."""
    text = json.dumps(model_to_dict(model), separators=(",", ":"))
    with atomic_output(os.fspath(path)) as f:
        f.write(text.encode())
    return Path(path)


def read_model(path: str | os.PathLike) -> GeneratorModel:
    """Read and check a model file (ModelFormatError naming the file and the field). The file is
    a shared document (`io.documents.read_json`): a regular file of at most 64 MiB after gunzip
    ($CHAKRA_MAX_DOCUMENT_BYTES), gzip bombs, deep nesting and over-long integers refused."""
    p = os.fspath(path)
    try:
        d = read_json(p, "model file")
    except ModelFormatError:
        raise
    except ChakraError as e:
        raise ModelFormatError(str(e)) from None
    return model_from_dict(d, p)
