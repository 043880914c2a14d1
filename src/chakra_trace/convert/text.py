"""ASTRA-sim 1.0 text workloads to Chakra per-rank traces (what MLCommons' `text2chakra` does, fixed).

The text format (ASTRA-sim 1.0 `inputs/workload/*.txt`), whitespace separated:

- line 1: the parallelism type, then extra tokens for some types:
  `HYBRID_DLRM <last bottom layer>`, `HYBRID_TRANSFORMER model_parallel_NPU_group: <M>`,
  `HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: <M> checkpoints: <k> <layer>...
  checkpoint_initiates: <k> <layer>...`;
- line 2: the number of layers;
- one line per layer with 12 fields: name, a reserved field (always -1), then for the forward pass,
  the input-gradient and the weight-gradient pass a compute time and a communication type and
  size, then the update delay: ``name -1 fwd_t fwd_type fwd_bytes ig_t ig_type ig_bytes wg_t wg_type
  wg_bytes update_t``. Communication types: NONE, ALLREDUCE, ALLTOALL, ALLGATHER, REDUCESCATTER;
  sizes are bytes; times are ASTRA-sim 1.0 cycles (ticks of 1 ns).

Every rank runs the same training loop, built the way ASTRA-sim 1.0's workload state machine ran
it and the reference converter lays it out (one node per compute phase, one collective per
communication that the parallelism issues, data dependencies), so all ranks' collective sequences
agree. Which collectives a parallelism issues, and over which ranks:

=================================  =========================  ========================  ===============
parallelism                        forward                    input gradient            weight gradient
=================================  =========================  ========================  ===============
DATA, MICRO                        -                          -                         all ranks
MODEL                              all ranks                  all ranks, not layer 0    -
HYBRID_DATA_MODEL, _MODEL_DATA     model group                model group, not layer 0  data group
HYBRID_TRANSFORMER(_FWD_IN_BCKWD)  model group                model group               data group
HYBRID_DLRM(_ENHANCED)             all ranks, ALLTOALL only   all ranks, layer 0 only   all ranks
=================================  =========================  ========================  ===============

Dependencies (ids follow program order; ASTRA-sim issues ready nodes lowest id first):

- forward: layer i's compute waits for layer i-1's compute, or for its forward collective where the
  parallelism issues one (blocking), and for layer i's weight-grad collective of the previous pass
  (its weight-grad compute if it has none). The first compute of a pass also waits for layer 0's
  input-grad collective of the previous pass (transformer types).
- DATA / DLRM backward, last layer first: weight grad (after the input grad of the layer above), its
  collective, then the layer's input grad (none for layer 0).
- MODEL / hybrid backward, last layer first: input grad (after the forward's end, else after the
  layer above's weight grad and input-grad collective), its collective, weight grad, its collective.
- HYBRID_TRANSFORMER_FWD_IN_BCKWD: before the input grad of a layer i listed in
  `checkpoint_initiates`, the forward pass (compute and collective) of layers c .. i-1 is computed
  again, c being the nearest checkpoint below i.
- DLRM: the first layer after the last bottom-MLP layer also waits for the embedding's (layer 0's)
  forward all-to-all; layer 0's input-grad all-to-all follows that layer's input grad, and layer
  0's weight grad waits for it.
- MICRO: the weight-grad collectives of every layer and pass, without dependencies.

Model-parallel groups are blocks of consecutive ranks for HYBRID_DATA_MODEL and the transformer
types (model parallelism in the fastest network dimension), and strided for HYBRID_MODEL_DATA (data
parallelism in the fastest dimension). Groups get numeric names ("1", "2", ...), as ASTRA-sim needs;
a group of every rank gets no `pg_name`, and a collective in a one-rank group moves no data and is
left out. Compute times become `duration_micros` rounded to the nearest microsecond.

Deliberate differences from the reference converter (each one a bug there):
compute times are nanoseconds converted to microseconds (the reference writes the cycle count as
microseconds, 1000x too slow in any simulator: ASTRA-sim 2.0 reports 1,082,450,000 cycles for
Resnet50_DataParallel, exactly its 1,082,450 compute cycles x 1000); NONE makes no collective (the
reference writes a 0-byte all-reduce); an unknown type is an error (the reference silently makes
an all-reduce); hybrid collectives are on their groups (the reference puts them on all ranks);
node ids start at 0 in every file (the reference continues counting across ranks); the layer count
is checked; HYBRID_TRANSFORMER and HYBRID_TRANSFORMER_FWD_IN_BCKWD are supported; in DLRM the
first top-MLP layer (not the last bottom one) waits for the embedding all-to-all, as in ASTRA-sim.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from ..errors import ChakraError, TraceFormatError
from ..io.memory import ENV_MAX_NODES, NODE_BYTES, node_limit
from ..io.workload import Workload
from ..schema.builder import TraceBuilder
from ..schema.enums import Attr, CollectiveType

PARALLELISMS = (
    "DATA",
    "MODEL",
    "HYBRID_DATA_MODEL",
    "HYBRID_MODEL_DATA",
    "HYBRID_DLRM",
    "HYBRID_DLRM_ENHANCED",
    "MICRO",
    "HYBRID_TRANSFORMER",
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD",
)
_UNSUPPORTED_PARALLELISMS = {
    "HYBRID_CUSTOMIZED": "it gives every layer its own parallelism in a 13th field",
    "DISTRIBUTED_INFERENCE": "it is an inference loop with memory fields, not a training step",
}

# text name -> Chakra collective (None: no communication)
COMM_TYPES: dict[str, int | None] = {
    "NONE": None,
    "ALLREDUCE": int(CollectiveType.ALL_REDUCE),
    "ALLTOALL": int(CollectiveType.ALL_TO_ALL),
    "ALLGATHER": int(CollectiveType.ALL_GATHER),
    "REDUCESCATTER": int(CollectiveType.REDUCE_SCATTER),
}
_UNSUPPORTED_COMMS = {
    "ALLTOALLV": "a variable all-to-all",
    "ALLREDUCEALLTOALL": "ASTRA-sim's fused all-reduce + all-to-all",
}

COMPUTE_UNITS = ("ns", "us")
NUM_FIELDS = 12
_FIELDS = (
    "layer name",
    "reserved field",
    "forward compute time",
    "forward comm type",
    "forward comm size",
    "input-grad compute time",
    "input-grad comm type",
    "input-grad comm size",
    "weight-grad compute time",
    "weight-grad comm type",
    "weight-grad comm size",
    "update time",
)
_INT64_MAX = (1 << 63) - 1

_HYBRID = ("HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD")
_TRANSFORMER = ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD")
_DLRM = ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED")


class TextWorkloadError(TraceFormatError):
    """A malformed text workload: names the file, the line and what was expected."""

    def __init__(self, path: str | None, line: int | None, message: str):
        self.line = line
        super().__init__(path, message, offset=line, offset_kind="line")

    def _render(self) -> str:
        loc = f" (line {self.line})" if self.line is not None else ""
        return f"{self.path or '<input>'}{loc}: {self.reason}"


# --------------------------------------------------------------------------- parsed form


@dataclass(frozen=True)
class Comm:
    """One communication of a layer as written: type name (NONE, ALLREDUCE, ...) and bytes."""

    type: str
    size: int

    @property
    def collective(self) -> int | None:
        """The Chakra CollectiveType number, or None for NONE."""
        return COMM_TYPES[self.type]


@dataclass(frozen=True)
class TextLayer:
    """One layer line. Times are as written (ASTRA-sim 1.0 cycles); sizes in bytes."""

    name: str
    reserved: int
    fwd_compute: int
    fwd_comm: Comm
    ig_compute: int
    ig_comm: Comm
    wg_compute: int
    wg_comm: Comm
    update_time: int
    line: int = 0  # line number in the file (1-based)


@dataclass
class TextWorkload:
    """A parsed ASTRA-sim 1.0 text workload."""

    parallelism: str
    layers: list[TextLayer]
    model_parallel_size: int | None = None  # model_parallel_NPU_group (transformer types)
    last_bottom_layer: int | None = None  # DLRM types
    checkpoints: tuple[int, ...] = ()  # HYBRID_TRANSFORMER_FWD_IN_BCKWD
    checkpoint_initiates: tuple[int, ...] = ()
    path: str | None = None
    header_line: int = 1

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def recompute_ranges(self) -> dict[int, range]:
        """For each layer that initiates a forward-in-backward pass: the layers it recomputes.

        As ASTRA-sim 1.0 runs it: on reaching initiator i in the backward pass, it recomputes the
        forward pass (compute and forward collective) of layers c .. i-1, c being the nearest
        checkpoint below i, then goes on with i's input gradient.
        """
        out: dict[int, range] = {}
        ckpts = sorted(set(self.checkpoints))
        for i in sorted(set(self.checkpoint_initiates)):
            below = [c for c in ckpts if c <= i]
            out[i] = range(below[-1], i) if below else range(i, i)
        return out


# --------------------------------------------------------------------------- parsing


def read_text_workload(path: str | os.PathLike) -> TextWorkload:
    """Parse an ASTRA-sim 1.0 text workload file."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise TextWorkloadError(
            path, line, "not a text file (invalid UTF-8); expected an ASTRA-sim 1.0 text workload"
        ) from None
    return parse_text_workload(text, path)


def parse_text_workload(text: str, path: str | None = None) -> TextWorkload:
    """Parse the text of an ASTRA-sim 1.0 workload (`path` only names it in errors)."""
    lines = text.splitlines()

    def err(line: int | None, msg: str) -> TextWorkloadError:
        return TextWorkloadError(path, line, msg)

    # skip leading blank lines, as ASTRA-sim's token reader does
    pos = 0
    while pos < len(lines) and not lines[pos].split():
        pos += 1
    if pos == len(lines):
        raise err(
            1 if not lines else len(lines),
            f"empty file; expected the parallelism type ({', '.join(PARALLELISMS)}) on the first line",
        )
    header_no = pos + 1
    header = lines[pos].split()
    wl = _parse_header(header, header_no, err)
    wl.path = path
    wl.header_line = header_no
    pos += 1

    while pos < len(lines) and not lines[pos].split():
        pos += 1
    if pos == len(lines):
        raise err(len(lines), "expected the number of layers after the parallelism line; the file ends")
    count_no = pos + 1
    toks = lines[pos].split()
    n = _int(toks[0], err, count_no, "the number of layers")
    if len(toks) > 1:
        raise err(count_no, f"expected only the number of layers on this line, found extra {toks[1]!r}")
    if n < 1:
        raise err(count_no, f"expected at least 1 layer, got {n}")
    pos += 1

    layers: list[TextLayer] = []
    while pos < len(lines):
        toks = lines[pos].split()
        no = pos + 1
        pos += 1
        if not toks:
            continue
        if len(layers) == n:
            raise err(
                no,
                f"the file declares {n} layer{'s' * (n != 1)} (line {count_no}) but has more layer "
                f"lines, starting with {toks[0]!r}",
            )
        layers.append(_parse_layer(toks, no, err))
    if len(layers) < n:
        raise err(
            len(lines),
            f"the file declares {n} layers (line {count_no}) but has only {len(layers)} layer "
            f"line{'s' * (len(layers) != 1)}",
        )
    wl.layers = layers
    _check_structure(wl, err)
    return wl


_INT_RE = re.compile(r"[+-]?[0-9]+\Z")


def _int(tok: str, err, line: int, what: str, *, minimum: int | None = None) -> int:
    if not _INT_RE.match(tok):
        kind = "a non-negative integer" if minimum == 0 else "an integer"
        raise err(line, f"{what}: expected {kind}, got {tok!r}")
    if len(tok) > 40:  # beyond any count or size (and int() refuses over 4,300 digits)
        raise err(line, f"{what}: {tok[:20]}... ({len(tok)} digits) does not fit in 64 bits")
    v = int(tok)
    if minimum is not None and v < minimum:
        raise err(line, f"{what}: expected a non-negative integer, got {tok!r}")
    return v


def _parse_header(toks: list[str], line: int, err) -> TextWorkload:
    kind = toks[0]
    if kind not in PARALLELISMS:
        if kind in _UNSUPPORTED_PARALLELISMS:
            raise err(
                line,
                f"parallelism {kind} is not supported ({_UNSUPPORTED_PARALLELISMS[kind]}); "
                f"supported: {', '.join(PARALLELISMS)}",
            )
        hint = f" (did you mean {kind.upper()}?)" if kind.upper() in PARALLELISMS else ""
        raise err(line, f"unknown parallelism type {kind!r}{hint}; expected one of {', '.join(PARALLELISMS)}")
    wl = TextWorkload(kind, [])
    rest = toks[1:]
    if kind in _DLRM:
        if not rest:
            raise err(line, f"{kind}: expected the index of the last bottom-MLP layer after the type (e.g. '{kind} 4')")
        wl.last_bottom_layer = _int(rest[0], err, line, f"{kind} last bottom-MLP layer", minimum=0)
        rest = rest[1:]
    elif kind in _TRANSFORMER:
        i = 0
        seen: set[str] = set()
        allowed = {"model_parallel_NPU_group:"}
        if kind == "HYBRID_TRANSFORMER_FWD_IN_BCKWD":
            allowed |= {"checkpoints:", "checkpoint_initiates:"}
        while i < len(rest):
            key = rest[i]
            if key not in allowed:
                raise err(line, f"{kind}: unexpected {key!r} in the header; expected {' / '.join(sorted(allowed))}")
            if key in seen:
                raise err(line, f"{kind}: {key!r} appears twice in the header")
            seen.add(key)
            if i + 1 >= len(rest):
                raise err(line, f"{kind}: expected a number after {key!r}")
            if key == "model_parallel_NPU_group:":
                wl.model_parallel_size = _int(rest[i + 1], err, line, key[:-1])
                if wl.model_parallel_size < 1:
                    raise err(line, f"model_parallel_NPU_group: expected a positive integer, got {rest[i + 1]!r}")
                i += 2
                continue
            k = _int(rest[i + 1], err, line, f"{key[:-1]} count", minimum=0)
            vals = rest[i + 2 : i + 2 + k]
            if len(vals) < k:
                raise err(line, f"{key} says {k} layer{'s' * (k != 1)} but lists {len(vals)}")
            ints = tuple(_int(v, err, line, f"{key[:-1]} layer", minimum=0) for v in vals)
            if key == "checkpoints:":
                wl.checkpoints = ints
            else:
                wl.checkpoint_initiates = ints
            i += 2 + k
        rest = []
    if rest:
        raise err(line, f"unexpected {rest[0]!r} after {kind}; this parallelism takes no other header fields")
    return wl


def _parse_layer(toks: list[str], line: int, err) -> TextLayer:
    if len(toks) != NUM_FIELDS:
        raise err(
            line,
            f"layer {toks[0]!r}: expected {NUM_FIELDS} fields (name, reserved, then compute time, "
            f"comm type and comm size for forward, input-grad and weight-grad, then update time), "
            f"got {len(toks)}",
        )
    name = toks[0]

    def num(i: int, minimum: int | None = 0) -> int:
        v = _int(toks[i], err, line, f"layer {name!r}, field {i + 1} ({_FIELDS[i]})", minimum=minimum)
        if v > _INT64_MAX:
            raise err(line, f"layer {name!r}, field {i + 1} ({_FIELDS[i]}): {v} does not fit in 64 bits")
        return v

    def comm(i: int) -> Comm:
        t = toks[i]
        if t not in COMM_TYPES:
            where = f"layer {name!r}, field {i + 1} ({_FIELDS[i]})"
            if t in _UNSUPPORTED_COMMS:
                raise err(
                    line,
                    f"{where}: {t} ({_UNSUPPORTED_COMMS[t]}) has no Chakra collective; expected one "
                    f"of {', '.join(COMM_TYPES)}",
                )
            hint = f" (did you mean {t.upper()}?)" if t.upper() in COMM_TYPES else ""
            try:
                int(t)
                hint = " (a number where the type belongs: is a field missing or extra?)"
            except ValueError:
                pass
            raise err(line, f"{where}: unknown communication type {t!r}{hint}; expected one of {', '.join(COMM_TYPES)}")
        return Comm(t, num(i + 1))

    return TextLayer(
        name=name,
        reserved=num(1, minimum=None),
        fwd_compute=num(2),
        fwd_comm=comm(3),
        ig_compute=num(5),
        ig_comm=comm(6),
        wg_compute=num(8),
        wg_comm=comm(9),
        update_time=num(11),
        line=line,
    )


def _check_structure(wl: TextWorkload, err) -> None:
    n = wl.num_layers
    h = wl.header_line
    if wl.parallelism in _DLRM:
        lb = wl.last_bottom_layer
        if lb is None or not 0 <= lb <= n - 2:
            raise err(
                h,
                f"{wl.parallelism}: the last bottom-MLP layer must be a layer index from 0 to {n - 2} "
                f"(at least one top-MLP layer must follow it), got {lb}",
            )
    if wl.parallelism == "HYBRID_TRANSFORMER_FWD_IN_BCKWD":
        for what, vals in (("checkpoints", wl.checkpoints), ("checkpoint_initiates", wl.checkpoint_initiates)):
            bad = [v for v in vals if v >= n]
            if bad:
                raise err(h, f"{what}: layer {bad[0]} does not exist (layers are 0 to {n - 1})")
        ckpt = set(wl.checkpoints)
        inits = sorted(set(wl.checkpoint_initiates))
        for i in inits:
            if i in ckpt:
                raise err(
                    h,
                    f"checkpoint_initiates: layer {i} is also a checkpoint; the layer that initiates "
                    f"recomputation must lie above its checkpoint",
                )
            below = [c for c in ckpt if c < i]
            if not below:
                raise err(h, f"checkpoint_initiates: layer {i} has no checkpoint below it to recompute from")
            c = max(below)
            inside = [j for j in inits if c < j < i]
            if inside:
                raise err(
                    h,
                    f"checkpoint_initiates: layer {inside[0]} lies inside the recomputation of layers "
                    f"{c}..{i - 1} started by layer {i}; put a checkpoint between them",
                )


# --------------------------------------------------------------------------- groups


@dataclass
class ParallelGroups:
    """Where each rank's model- and data-parallel collectives go.

    `model[r]` / `data[r]` is the `pg_name` for rank r's collectives of that kind: a group name,
    None (every rank: no pg_name) or "" (a one-rank group: the collective is left out).
    """

    model_parallel_size: int
    data_parallel_size: int
    groups: dict[str, list[int]] = field(default_factory=dict)
    model: list[str | None] = field(default_factory=list)
    data: list[str | None] = field(default_factory=list)


def parallel_groups(parallelism: str, num_npus: int, model_parallel_size: int) -> ParallelGroups:
    """Model- and data-parallel groups as ASTRA-sim 1.0 lays them out (see the module docstring)."""
    m = model_parallel_size
    if m < 1 or num_npus % m:
        raise ChakraError(f"model-parallel size {m} does not divide the {num_npus} NPUs")
    d = num_npus // m
    # the kind laid out in consecutive ranks (the fastest network dimensions) and its size
    low_kind, low = ("data", d) if parallelism == "HYBRID_MODEL_DATA" else ("model", m)
    blocks = [list(range(b * low, (b + 1) * low)) for b in range(num_npus // low)]
    strided = [list(range(o, num_npus, low)) for o in range(low)]
    by_kind = {low_kind: blocks, ("model" if low_kind == "data" else "data"): strided}
    out = ParallelGroups(m, d)
    names = {}
    next_id = 1
    for kind in ("model", "data"):
        for members in by_kind[kind]:
            if len(members) == num_npus:
                name = None
            elif len(members) == 1:
                name = ""
            else:
                name = str(next_id)
                next_id += 1
                out.groups[name] = members
            for r in members:
                names[(kind, r)] = name
    out.model = [names[("model", r)] for r in range(num_npus)]
    out.data = [names[("data", r)] for r in range(num_npus)]
    return out


# --------------------------------------------------------------------------- conversion

_MP, _DP = "\x00model", "\x00data"  # placeholder pg_names in the template trace


class _Graph:
    """Builds one rank's template trace; collectives carry placeholder groups."""

    def __init__(
        self,
        wl: TextWorkload,
        roles: dict[str, str | None],
        compute_unit: str,
        update_delays: bool,
        skip: set[str],
        metadata: dict,
    ):
        self.wl = wl
        self.b = TraceBuilder(metadata=metadata)
        self.roles = roles  # phase -> placeholder group, None (all ranks), or absent (phase not issued)
        self.skip = skip  # placeholders of one-rank groups
        self.ns = compute_unit == "ns"
        self.update = update_delays

    def us(self, t: int) -> int:
        return (t + 500) // 1000 if self.ns else t

    def comp(self, layer: TextLayer, phase: str, t: int, deps: Iterable[int | None]) -> int:
        return self.b.comp(f"COMP_NODE_{layer.name}_{phase}", self.us(t), deps=_deps(deps))

    def coll(
        self, layer: TextLayer, phase: str, comm: Comm, deps: Iterable[int | None], role: str | None = "default"
    ) -> int | None:
        """The collective of a phase, if the parallelism issues it; returns the node to wait on."""
        if comm.collective is None:
            return None
        if role == "default":
            if phase not in self.roles:
                return None
            role = self.roles[phase]
        if role in self.skip:
            return None
        tag = {"FWD": "FWD", "FWD_RECOMPUTE": "FWD_RECOMPUTE", "IG": "BWD_IG", "WG": "BWD_WG"}[phase]
        node = self.b.collective(
            comm.collective,
            comm.size,
            name=f"COMM_COLL_NODE_{layer.name}_{tag}_{comm.type}",
            deps=_deps(deps),
            pg_name=role,
        )
        if self.update and layer.update_time > 0:
            node = self.b.comp(f"COMP_NODE_{layer.name}_{tag}_UPDATE", self.us(layer.update_time), deps=[node])
        return node


def _deps(deps: Iterable[int | None]) -> list[int]:
    out: list[int] = []
    for d in deps:
        if d is not None and d not in out:
            out.append(d)
    return out


def _roles(parallelism: str) -> dict[str, str | None]:
    """Which phases issue collectives, and on what (placeholder group or None = all ranks)."""
    if parallelism in ("DATA", "MICRO"):
        return {"WG": None}
    if parallelism == "MODEL":
        return {"FWD": None, "IG": None}
    if parallelism in _HYBRID:
        return {"FWD": _MP, "FWD_RECOMPUTE": _MP, "IG": _MP, "WG": _DP}
    return {"FWD": None, "IG": None, "WG": None}  # DLRM


def _build(g: _Graph, passes: int) -> None:
    wl = g.wl
    p = wl.parallelism
    if p == "MICRO":
        for _ in range(passes):
            for L in wl.layers:
                g.coll(L, "WG", L.wg_comm, ())
        return
    builder = {
        "DATA": _data_pass,
        "MODEL": _model_pass,
        "HYBRID_DLRM": _dlrm_pass,
        "HYBRID_DLRM_ENHANCED": _dlrm_pass,
    }.get(p, _model_pass)
    tail: dict[int, int] = {}  # layer -> node its next forward waits on (weight-grad comm, else compute)
    end: list[int | None] = []  # what else the next pass's first node waits on
    for _ in range(passes):
        tail, end = builder(g, tail, end)


def _data_pass(g: _Graph, tail: dict[int, int], end: list) -> tuple[dict[int, int], list]:
    """DATA: forward computes; backward per layer (last first): weight grad, its all-reduce, input grad."""
    layers = g.wl.layers
    n = len(layers)
    fwd: list[int] = []
    for i, L in enumerate(layers):
        fwd.append(g.comp(L, "FWD", L.fwd_compute, [fwd[-1] if i else None, tail.get(i), *(end if i == 0 else ())]))
    new_tail: dict[int, int] = {}
    prev = fwd[-1]
    for i in range(n - 1, -1, -1):
        L = layers[i]
        wg = g.comp(L, "BWD_WG", L.wg_compute, [prev])
        wgc = g.coll(L, "WG", L.wg_comm, [wg])
        new_tail[i] = wgc if wgc is not None else wg
        if i:
            prev = g.comp(L, "BWD_IG", L.ig_compute, [wg])
    return new_tail, []


def _model_pass(g: _Graph, tail: dict[int, int], end: list) -> tuple[dict[int, int], list]:
    """MODEL and the hybrid types: forward compute then its (blocking) collective per layer; backward per
    layer (last first): input grad and its collective, weight grad and its collective; the next layer's
    input grad waits for this layer's weight grad and input-grad collective."""
    wl = g.wl
    layers = wl.layers
    n = len(layers)
    p = wl.parallelism
    ig_first_layer = p in _TRANSFORMER  # the transformer loops issue layer 0's input-grad collective too
    recompute = wl.recompute_ranges() if p == "HYBRID_TRANSFORMER_FWD_IN_BCKWD" else {}
    out = None
    for i, L in enumerate(layers):
        f = g.comp(L, "FWD", L.fwd_compute, [out, tail.get(i), *(end if i == 0 else ())])
        fc = g.coll(L, "FWD", L.fwd_comm, [f])
        out = fc if fc is not None else f
    new_tail: dict[int, int] = {}
    waits: list[int | None] = [out]
    for i in range(n - 1, -1, -1):
        L = layers[i]
        if i in recompute:  # forward-in-backward: recompute from the checkpoint, then go on
            for j in recompute[i]:
                R = layers[j]
                f = g.comp(R, "FWD_RECOMPUTE", R.fwd_compute, waits)
                fc = g.coll(R, "FWD_RECOMPUTE", R.fwd_comm, [f])
                waits = [fc if fc is not None else f]
        ig = g.comp(L, "BWD_IG", L.ig_compute, waits)
        igc = g.coll(L, "IG", L.ig_comm, [ig]) if (i or ig_first_layer) else None
        wg = g.comp(L, "BWD_WG", L.wg_compute, [ig])
        wgc = g.coll(L, "WG", L.wg_comm, [wg])
        new_tail[i] = wgc if wgc is not None else wg
        waits = [wg, igc]
    # the loop moves to the next pass once layer 0's input-grad collective is done too (its weight grad
    # is already behind tail[0])
    return new_tail, _deps(waits[1:])


def _dlrm_pass(g: _Graph, tail: dict[int, int], end: list) -> tuple[dict[int, int], list]:
    """DLRM: forward computes, an all-to-all after each ALLTOALL layer (the embedding), awaited by the
    first top-MLP layer; backward per layer (last first): weight grad and its all-reduce, input grad;
    the embedding's backward all-to-all after the first top-MLP layer's input grad, awaited by the
    embedding's weight grad."""
    wl = g.wl
    layers = wl.layers
    n = len(layers)
    lb = cast(int, wl.last_bottom_layer)  # set for the DLRM types (`_check_structure`)
    a2a = None
    prev = None
    for i, L in enumerate(layers):
        f = g.comp(L, "FWD", L.fwd_compute, [prev, tail.get(i), *(end if i == 0 else ()), a2a if i == lb + 1 else None])
        if L.fwd_comm.type == "ALLTOALL":
            fc = g.coll(L, "FWD", L.fwd_comm, [f])
            if i == 0:
                a2a = fc
        prev = f
    new_tail: dict[int, int] = {}
    back_a2a = None
    for i in range(n - 1, -1, -1):
        L = layers[i]
        wg = g.comp(L, "BWD_WG", L.wg_compute, [prev, back_a2a if i == 0 else None])
        wgc = g.coll(L, "WG", L.wg_comm, [wg])
        new_tail[i] = wgc if wgc is not None else wg
        if i:
            prev = g.comp(L, "BWD_IG", L.ig_compute, [wg])
            if i == lb + 1:
                back_a2a = g.coll(layers[0], "IG", layers[0].ig_comm, [prev])
    return new_tail, []


def text_to_chakra(
    workload_or_path: TextWorkload | str | os.PathLike,
    num_npus: int,
    num_passes: int = 1,
    *,
    model_parallel_size: int | None = None,
    data_parallel_size: int | None = None,
    compute_unit: str = "ns",
    update_delays: bool = False,
) -> Workload:
    """Convert an ASTRA-sim 1.0 text workload into per-rank Chakra traces (ranks 0..num_npus-1).

    `model_parallel_size` / `data_parallel_size` (give at most one; the other is num_npus divided by
    it) size the groups of the hybrid parallelisms; the transformer types take it from
    `model_parallel_NPU_group:` in the file, HYBRID_DATA_MODEL and HYBRID_MODEL_DATA need it here
    (ASTRA-sim 1.0 took it from the first network dimension, which the file does not say).

    `compute_unit`: "ns" (default) reads the text times as ASTRA-sim 1.0 cycles (1 ns ticks) and
    writes `duration_micros` rounded to the nearest microsecond; "us" copies them unchanged as
    microseconds, as the reference converter does. `update_delays`: add the last field (ASTRA-sim
    1.0's delay after each of a layer's collectives) as a compute node after each collective; off by
    default, as in the reference converter (a Chakra compute node occupies the compute unit, which
    ASTRA-sim 1.0's delay did not).

    Returns a Workload whose `groups` lists the numbered communicator groups (empty when every
    collective spans all ranks); write it with `Workload.save(prefix)` and give the groups to
    ASTRA-sim as its communicator-group file.
    """
    wl = workload_or_path if isinstance(workload_or_path, TextWorkload) else read_text_workload(workload_or_path)
    if not isinstance(num_npus, int) or isinstance(num_npus, bool) or num_npus < 1:
        raise ChakraError(f"num_npus must be a positive integer, got {num_npus!r}")
    if not isinstance(num_passes, int) or isinstance(num_passes, bool) or num_passes < 1:
        raise ChakraError(f"num_passes must be a positive integer, got {num_passes!r}")
    if compute_unit not in COMPUTE_UNITS:
        raise ChakraError(f"compute_unit must be one of {', '.join(COMPUTE_UNITS)}, got {compute_unit!r}")
    where = wl.path or "<input>"
    p = wl.parallelism

    groups = None
    if p in _HYBRID:
        m = _model_parallel_size(wl, num_npus, model_parallel_size, data_parallel_size)
        groups = parallel_groups(p, num_npus, m)
    elif model_parallel_size is not None or data_parallel_size is not None:
        raise ChakraError(
            f"{where}: {p} has no model- and data-parallel groups; model_parallel_size and "
            f"data_parallel_size apply to {', '.join(_HYBRID)}"
        )

    meta = {
        "schema": "astra-sim-1.0-text",
        "source": os.path.basename(where),
        "parallelism": p,
        "num_npus": num_npus,
        "num_passes": num_passes,
        "compute_unit": compute_unit,
    }
    if groups is not None:
        meta["model_parallel_size"] = groups.model_parallel_size
        meta["data_parallel_size"] = groups.data_parallel_size
    # one-rank groups: their collectives are left out (the same on every rank, so one template serves all)
    skip = set()
    if groups is not None:
        if groups.model and groups.model[0] == "":
            skip.add(_MP)
        if groups.data and groups.data[0] == "":
            skip.add(_DP)
    g = _Graph(wl, _roles(p), compute_unit, update_delays, skip, meta)
    _build(g, num_passes)
    template = g.b.build()
    limit, source = node_limit(None)
    cost = (len(template) + _TRACE_NODES) * num_npus  # (each rank's trace is a copy of the template)
    if cost > limit:
        raise ChakraError(
            f"{where}: {num_npus:,} ranks of {len(template):,} nodes would take about {cost * NODE_BYTES / 2**30:.1f} "
            f"GiB in memory, over the limit of {source}; fewer NPUs, or set {ENV_MAX_NODES}"
        )

    traces = {}
    for r in range(num_npus):
        t = template.copy() if r < num_npus - 1 else template
        if groups is not None:
            rename = {_MP: groups.model[r], _DP: groups.data[r]}
            t.groups = cast(list[str], [rename.get(x, x) for x in t.groups])  # None until `_drop_unnamed`
            _drop_unnamed(t)
        traces[r] = t
    return Workload(traces, dict(groups.groups) if groups is not None else {})


#: What one rank's copy of the template costs besides its nodes, in nodes (~5 KB of arrays).
_TRACE_NODES = 32


def _drop_unnamed(t) -> None:
    """Collectives whose group is every rank carry no pg_name."""

    codes = [i for i, name in enumerate(t.groups) if name is None]
    if not codes:
        return
    rows = np.flatnonzero(t.has(Attr.PG_NAME) & np.isin(t.pg_name, codes))
    t.clear_attr(Attr.PG_NAME, rows)
    t.groups = [x if x is not None else "" for x in t.groups]


def _model_parallel_size(wl: TextWorkload, num_npus: int, mp: int | None, dp: int | None) -> int:
    where = wl.path or "<input>"
    if mp is not None and dp is not None:
        raise ChakraError("give model_parallel_size or data_parallel_size, not both")
    for name, v in (("model_parallel_size", mp), ("data_parallel_size", dp)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ChakraError(f"{name} must be a positive integer, got {v!r}")
    if dp is not None:
        if num_npus % dp:
            raise ChakraError(f"data-parallel size {dp} does not divide the {num_npus} NPUs")
        mp = num_npus // dp
    if wl.model_parallel_size is not None:
        if mp is not None and mp != wl.model_parallel_size:
            raise ChakraError(
                f"{where}: the file sets model_parallel_NPU_group: {wl.model_parallel_size}, "
                f"but a model-parallel size of {mp} was asked for"
            )
        mp = wl.model_parallel_size
    if mp is None:
        if wl.parallelism in _TRANSFORMER:
            raise TextWorkloadError(
                wl.path, wl.header_line, f"{wl.parallelism}: expected 'model_parallel_NPU_group: <size>' in the header"
            )
        raise ChakraError(
            f"{where}: {wl.parallelism} needs the model-parallel group size "
            f"(model_parallel_size=, or --model-parallel on the command line); ASTRA-sim 1.0 took "
            f"it from the first network dimension, which the text file does not record"
        )
    if num_npus % mp:
        raise ChakraError(f"{where}: the model-parallel group size {mp} does not divide the {num_npus} NPUs")
    return mp


__all__ = [
    "COMM_TYPES",
    "COMPUTE_UNITS",
    "Comm",
    "PARALLELISMS",
    "ParallelGroups",
    "TextLayer",
    "TextWorkload",
    "TextWorkloadError",
    "parallel_groups",
    "parse_text_workload",
    "read_text_workload",
    "text_to_chakra",
]
