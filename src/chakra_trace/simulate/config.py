"""The simulator's inputs, parsed and checked: ASTRA-sim's network YAML, system JSON and
remote-memory JSON.

The files are read the way ASTRA-sim (2.x, analytical backends) reads them, with its
defaults, but every value is checked up front: a wrong type, an unknown name or an
out-of-range number raises :class:`~chakra_trace.errors.ChakraError` with a one-line message
that names the file (and line where known), the key, and what was expected -- where
ASTRA-sim would exit, assert, or run on with a garbage value.

Units are kept as written: bandwidths in the network file are "GB/s" (ASTRA-sim's analytical
network reads them as GiB/s: bytes per ns = bw * 2**30 / 1e9; that conversion belongs to the
network model), latencies in ns, ``local-mem-bw`` in decimal GB/s (= bytes per ns),
``peak-perf`` in TFLOPS.

Keys that ASTRA-sim reads but that have no effect here (``boost-mode``, ``replay-only``, ...),
and keys it does not know at all, are kept in ``ignored`` so reports can list them;
:meth:`SystemConfig.unknown_keys` separates likely typos from known-but-ignored keys.

The network file is YAML, but only a small subset of it is used by these files, and the
project does not depend on a YAML library: :func:`parse_yaml` reads ``key: value`` scalars,
``key: [ a, b ]`` flow lists (which may span lines), block lists (``key:`` then ``- a``
lines), single- or double-quoted strings and ``#`` comments, and rejects anything else with
the file and line.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chakra_trace.errors import ChakraError

__all__ = [
    "TOPOLOGIES",
    "ALGORITHMS",
    "SCHEDULING_POLICIES",
    "COLLECTIVE_OPTIMIZATIONS",
    "MEMORY_TYPES",
    "ASTRA_IGNORED_SYSTEM_KEYS",
    "ASTRA_IGNORED_MEMORY_KEYS",
    "Dimension",
    "Network",
    "SystemConfig",
    "MemoryConfig",
    "parse_algorithm",
    "parse_yaml",
]

# ----------------------------------------------------------------------------- vocabulary

#: Topology building blocks of ASTRA-sim's analytical network, canonical spelling.
TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
_TOPOLOGY_BY_LOWER = {t.lower(): t for t in TOPOLOGIES}

#: Collective algorithms ASTRA-sim accepts in ``*-implementation`` (exact, case-sensitive
#: spellings). ``direct`` and ``oneDirect`` may carry a window: ``direct8`` lets at most
#: 8 messages of one step be in flight (see :func:`parse_algorithm`).
ALGORITHMS = ("ring", "direct", "halvingDoubling", "doubleBinaryTree", "oneRing", "oneDirect", "oneHalvingDoubling")

SCHEDULING_POLICIES = ("LIFO", "FIFO", "EXPLICIT")
COLLECTIVE_OPTIMIZATIONS = ("baseline", "localBWAware")
MEMORY_TYPES = ("NO_MEMORY_EXPANSION", "PER_NODE_MEMORY_EXPANSION", "PER_NPU_MEMORY_EXPANSION", "MEMORY_POOL")

#: System-JSON keys that some ASTRA-sim version reads but that have no effect in this
#: simulator (kept in ``SystemConfig.ignored``).
ASTRA_IGNORED_SYSTEM_KEYS = frozenset(
    {
        "boost-mode",  # ASTRA-sim 1.x; not read by 2.x
        "intra-dimension-scheduling",  # ASTRA-sim 1.x; 2.x always FIFO
        "inter-dimension-scheduling",  # ASTRA-sim 1.x; 2.x always ascending
        "local-reduction-delay",
        "L",
        "o",
        "g",
        "G",
        "model-shared-bus",  # LogGP memory bus
        "trace-enabled",
        "replay-only",
        "track-local-mem",
        "local-mem-trace-filename",
        "all-reduce-implementation-custom",
        "reduce-scatter-implementation-custom",
        "all-gather-implementation-custom",
        "all-to-all-implementation-custom",
        "per-node-custom-implementation",
    }
)
#: Remote-memory-JSON keys of older ASTRA-sim memory backends (kept in ``MemoryConfig.ignored``).
ASTRA_IGNORED_MEMORY_KEYS = frozenset({"local-mem-latency", "local-mem-bw"})

_NETWORK_KEYS = ("topology", "npus_count", "bandwidth", "latency")

_IMPL_KEYS = {
    "all-reduce-implementation": "all_reduce",
    "reduce-scatter-implementation": "reduce_scatter",
    "all-gather-implementation": "all_gather",
    "all-to-all-implementation": "all_to_all",
}
_SYSTEM_KEYS = {  # ASTRA key -> field
    "scheduling-policy": "scheduling_policy",
    "endpoint-delay": "endpoint_delay",
    "active-chunks-per-dimension": "active_chunks_per_dimension",
    "preferred-dataset-splits": "preferred_dataset_splits",
    **_IMPL_KEYS,
    "collective-optimization": "collective_optimization",
    "local-mem-bw": "local_mem_bw",
    "roofline-enabled": "roofline_enabled",
    "peak-perf": "peak_perf",
}
_MEMORY_KEYS = {
    "memory-type": "memory_type",
    "remote-mem-latency": "remote_mem_latency",
    "remote-mem-bw": "remote_mem_bw",
    "num-nodes": "num_nodes",
    "num-npus-per-node": "num_npus_per_node",
}

_DIRECT_RE = re.compile(r"(direct|oneDirect)([0-9]+)")


def parse_algorithm(name: str) -> tuple[str, int | None]:
    """Split an implementation string into its algorithm and its window.

    ``"ring"`` -> ``("ring", None)``; ``"direct8"`` -> ``("direct", 8)``. Raises
    :class:`ChakraError` for names ASTRA-sim does not accept.
    """
    return _algorithm(name, "algorithm")


def _algorithm(name: Any, what: str) -> tuple[str, int | None]:
    if not isinstance(name, str):
        raise ChakraError(f"{what}: expected an algorithm name (string), got {_show(name)}")
    if name in ALGORITHMS:
        return name, None
    m = _DIRECT_RE.fullmatch(name)
    if m:
        window = int(m.group(2))
        if window < 1:
            raise ChakraError(f"{what}: the window of {name!r} must be at least 1")
        return m.group(1), window
    hint = ""
    for a in ALGORITHMS:
        if a.lower() == name.lower():
            hint = f" (did you mean {a!r}? names are case-sensitive, as in ASTRA-sim)"
            break
    raise ChakraError(
        f"{what}: unknown algorithm {name!r}; expected one of "
        f"{', '.join(ALGORITHMS)} (direct and oneDirect may end in a window, e.g. direct8){hint}"
    )


# ----------------------------------------------------------------------------- value checks


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return f"{v} (a boolean)"
    if isinstance(v, str):
        return f"{v!r} (a string)"
    if isinstance(v, (list, tuple)):
        return f"a list {list(v)!r}"[:120]
    if isinstance(v, Mapping):
        return "a mapping"
    if v is None:
        return "nothing"
    return repr(v)[:80]


def _is_bool(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_))


def _number(v: Any, what: str, *, minimum: float = 0.0, strict: bool = False) -> float:
    """A finite real >= minimum (> minimum when strict)."""
    if _is_bool(v) or not isinstance(v, numbers.Real):
        raise ChakraError(f"{what}: expected a number, got {_show(v)}")
    x = float(v)
    if not math.isfinite(x):
        raise ChakraError(f"{what}: expected a finite number, got {v!r}")
    if x < minimum or (strict and x == minimum):
        cmp = ">" if strict else ">="
        raise ChakraError(f"{what}: expected a number {cmp} {minimum:g}, got {v!r}")
    return x


def _integer(v: Any, what: str, *, minimum: int = 0) -> int:
    """An integer >= minimum; floats with an integral value (4.0) are accepted."""
    if _is_bool(v):
        raise ChakraError(f"{what}: expected an integer, got {_show(v)}")
    if isinstance(v, numbers.Integral):
        n = int(v)
    elif isinstance(v, numbers.Real) and math.isfinite(float(v)) and float(v).is_integer():
        n = int(v)
    else:
        raise ChakraError(f"{what}: expected an integer, got {_show(v)}")
    if n < minimum:
        raise ChakraError(f"{what}: expected an integer >= {minimum}, got {v!r}")
    return n


def _flag(v: Any, what: str) -> bool:
    """A boolean or a number (non-zero is true, as ASTRA-sim's ``!= 0`` test)."""
    if _is_bool(v):
        return bool(v)
    if isinstance(v, numbers.Real) and math.isfinite(float(v)):
        return float(v) != 0
    raise ChakraError(f"{what}: expected 0 or 1 (or true/false), got {_show(v)}")


def _choice(v: Any, choices: tuple[str, ...], what: str) -> str:
    if isinstance(v, str) and v in choices:
        return v
    hint = ""
    if isinstance(v, str):
        for c in choices:
            if c.lower() == v.lower():
                hint = f" (did you mean {c!r}? names are case-sensitive, as in ASTRA-sim)"
    raise ChakraError(f"{what}: expected one of {', '.join(choices)}, got {_show(v)}{hint}")


def _algorithms(v: Any, what: str) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, (list, tuple)):
        raise ChakraError(f"{what}: expected a list of algorithm names (one per dimension), got {_show(v)}")
    if not v:
        raise ChakraError(f"{what}: expected at least one algorithm (one per dimension), got an empty list")
    for i, name in enumerate(v):
        _algorithm(name, f"{what}[{i}]")
    return tuple(v)


def _ignored(v: Any, known: Mapping[str, str], what: str) -> dict:
    if not isinstance(v, Mapping):
        raise ChakraError(f"{what}: expected a dict of ignored keys, got {_show(v)}")
    for k in v:
        if not isinstance(k, str):
            raise ChakraError(f"{what}: keys must be strings, got {k!r}")
        if k in known:
            raise ChakraError(f"{what}: {k!r} is a key with an effect, not an ignored one")
    return dict(v)


def _where(source: str, lines: Mapping[str, int] | None, key: str) -> str:
    line = lines.get(key) if lines else None
    return f"{source}:{line}: {key!r}" if line else f"{source}: {key!r}"


def _mapping(d: Any, source: str, what: str) -> Mapping:
    if not isinstance(d, Mapping):
        raise ChakraError(f"{source}: expected {what} (a mapping of keys to values), got {_show(d)}")
    for k in d:
        if not isinstance(k, str):
            raise ChakraError(f"{source}: keys must be strings, got {k!r}")
    return d


# ----------------------------------------------------------------------------- network


def _topology(v: Any, what: str) -> str:
    if isinstance(v, str):
        canon = _TOPOLOGY_BY_LOWER.get(v.strip().lower())
        if canon:
            return canon
    raise ChakraError(f"{what}: expected one of {', '.join(TOPOLOGIES)}, got {_show(v)}")


# ASTRA-sim's analytical network rejects npus_count <= 1; a dimension of one NPU carries no
# traffic (ASTRA-sim's system layer skips such dimensions) and lets one-NPU traces run.
MIN_NPUS_PER_DIM = 1


@dataclass(frozen=True)
class Dimension:
    """One dimension of the network: its topology, size, per-link bandwidth and latency."""

    topology: str  # one of TOPOLOGIES (any letter case on input, canonical stored)
    npus: int  # NPUs along this dimension
    bandwidth: float  # per link and direction, "GB/s" as written
    latency: float  # ns per hop

    def __post_init__(self):
        object.__setattr__(self, "topology", _topology(self.topology, "Dimension.topology"))
        object.__setattr__(self, "npus", _integer(self.npus, "Dimension.npus", minimum=MIN_NPUS_PER_DIM))
        object.__setattr__(self, "bandwidth", _number(self.bandwidth, "Dimension.bandwidth", strict=True))
        object.__setattr__(self, "latency", _number(self.latency, "Dimension.latency"))


@dataclass(frozen=True)
class Network:
    """A multi-dimensional network; NPU ids number dimension 0 fastest.

    ``ignored`` holds top-level keys of the file other than the four ASTRA-sim reads (not
    part of equality).
    """

    dims: tuple[Dimension, ...]
    ignored: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        dims = self.dims
        if isinstance(dims, Dimension):
            dims = (dims,)
        if not isinstance(dims, (list, tuple)) or not dims:
            raise ChakraError(f"Network.dims: expected at least one Dimension, got {_show(dims)}")
        for i, d in enumerate(dims):
            if not isinstance(d, Dimension):
                raise ChakraError(f"Network.dims[{i}]: expected a Dimension, got {_show(d)}")
        object.__setattr__(self, "dims", tuple(dims))
        object.__setattr__(self, "ignored", _ignored(self.ignored, dict.fromkeys(_NETWORK_KEYS), "Network.ignored"))

    # ------------------------------------------------------------------ geometry
    @property
    def npus(self) -> int:
        """Total NPUs: the product of the dimensions' sizes."""
        return math.prod(d.npus for d in self.dims)

    @property
    def shape(self) -> tuple[int, ...]:
        """NPUs per dimension, dimension 0 first."""
        return tuple(d.npus for d in self.dims)

    def _strides(self) -> tuple[np.ndarray, np.ndarray]:
        sizes = np.array(self.shape, np.int64)
        strides = np.concatenate(([1], np.cumprod(sizes)[:-1])).astype(np.int64)
        return sizes, strides

    def coords(self, npu) -> np.ndarray:
        """Coordinates of NPU id(s): shape ``npu.shape + (ndims,)``; dimension 0 varies fastest.

        In a 4x4 network NPU 5 is at (1, 1) and NPU 4 at (0, 1).
        """
        a = _int_array(npu, "npu id")
        n = self.npus
        if a.size and (int(a.min()) < 0 or int(a.max()) >= n):
            bad = a[(a < 0) | (a >= n)].ravel()[0]
            raise ChakraError(f"npu id {int(bad)} is out of range for a network of {n} NPUs (0..{n - 1})")
        sizes, strides = self._strides()
        return (a[..., None] // strides) % sizes

    def npu_of(self, coords) -> np.ndarray:
        """NPU id(s) of coordinates whose last axis has one entry per dimension (inverse of
        :meth:`coords`); a single coordinate gives a numpy integer."""
        c = _int_array(coords, "coordinates")
        nd = len(self.dims)
        if c.ndim == 0 or c.shape[-1] != nd:
            raise ChakraError(f"coordinates: expected a last axis of {nd} (one per dimension), got shape {c.shape}")
        sizes, strides = self._strides()
        bad = (c < 0) | (c >= sizes)
        if bad.any():
            idx = np.argwhere(bad)[0]
            k = int(idx[-1])
            raise ChakraError(
                f"coordinates: {int(c[tuple(idx)])} is out of range for dimension {k} of {int(sizes[k])} NPUs"
            )
        return (c * strides).sum(axis=-1)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_yaml(cls, path) -> Network:
        """Read an ASTRA-sim analytical network file (``topology``, ``npus_count``,
        ``bandwidth``, ``latency``: one list entry per dimension)."""
        text = _read_text(path)
        data, lines = _parse_yaml(text, str(path))
        return cls._from_mapping(data, str(path), lines)

    @classmethod
    def from_dict(cls, d: dict, source: str = "<dict>") -> Network:
        """The same keys as the YAML file; lists may be given as a single value for one
        dimension."""
        return cls._from_mapping(d, source, None)

    @classmethod
    def _from_mapping(cls, d: Any, source: str, lines: Mapping[str, int] | None) -> Network:
        d = _mapping(d, source, "a network description")
        missing = [k for k in _NETWORK_KEYS if k not in d]
        if missing:
            raise ChakraError(
                f"{source}: missing {', '.join(repr(k) for k in missing)}; a network needs "
                f"{', '.join(_NETWORK_KEYS)} (one list entry per dimension)"
            )
        cols = {}
        for k in _NETWORK_KEYS:
            v = d[k]
            if isinstance(v, tuple):
                v = list(v)
            elif not isinstance(v, list):
                if v is None or isinstance(v, Mapping) or (isinstance(v, str) and "," in v):
                    raise ChakraError(
                        f"{_where(source, lines, k)}: expected a list with one entry per dimension, got {_show(v)}"
                    )
                v = [v]
            if not v:
                raise ChakraError(f"{_where(source, lines, k)}: expected at least one dimension, got an empty list")
            cols[k] = v
        n = len(cols["topology"])
        for k in _NETWORK_KEYS[1:]:
            if len(cols[k]) != n:
                raise ChakraError(
                    f"{_where(source, lines, k)}: has {len(cols[k])} entries but 'topology' has {n}; "
                    f"every list needs one entry per dimension"
                )
        dims = []
        for i in range(n):
            w = {k: f"{_where(source, lines, k)}[{i}]" for k in _NETWORK_KEYS}
            dims.append(
                Dimension(
                    _topology(cols["topology"][i], w["topology"]),
                    _integer(cols["npus_count"][i], w["npus_count"], minimum=MIN_NPUS_PER_DIM),
                    _number(cols["bandwidth"][i], w["bandwidth"], strict=True),
                    _number(cols["latency"][i], w["latency"]),
                )
            )
        ignored = {k: v for k, v in d.items() if k not in _NETWORK_KEYS}
        return cls(tuple(dims), ignored)

    @classmethod
    def simple(cls, topology: str | list, npus: int | list, bandwidth: float | list, latency: float | list) -> Network:
        """A network from per-dimension values; a single value applies to every dimension
        (``simple("Ring", [4, 4], 50, 500)`` is a 4x4 torus)."""
        args = {"topology": topology, "npus_count": npus, "bandwidth": bandwidth, "latency": latency}
        lengths = {k: len(v) for k, v in args.items() if isinstance(v, (list, tuple))}
        if len(set(lengths.values())) > 1:
            raise ChakraError(
                "Network.simple: the lists have different lengths ("
                + ", ".join(f"{k}: {n}" for k, n in lengths.items())
                + ")"
            )
        n = next(iter(lengths.values()), 1)
        d = {k: (list(v) if k in lengths else [v] * n) for k, v in args.items()}
        return cls._from_mapping(d, "Network.simple", None)

    def to_dict(self) -> dict:
        """ASTRA-sim's keys, one list entry per dimension (then any ignored keys)."""
        d = {
            "topology": [x.topology for x in self.dims],
            "npus_count": [x.npus for x in self.dims],
            "bandwidth": [x.bandwidth for x in self.dims],
            "latency": [x.latency for x in self.dims],
        }
        d.update(self.ignored)
        return d

    def to_yaml(self) -> str:
        """The network as an ASTRA-sim network file (ignored keys are not written)."""
        d = self.to_dict()
        return "".join(f"{k}: [ {', '.join(_yaml_scalar(x) for x in d[k])} ]\n" for k in _NETWORK_KEYS)


def _yaml_scalar(x: Any) -> str:
    if isinstance(x, float):
        return repr(x)
    return str(x)


def _int_array(v: Any, what: str) -> np.ndarray:
    try:
        a = np.asarray(v)
    except Exception as e:  # ragged input and the like
        raise ChakraError(f"{what}: expected integers, got {_show(v)} ({e})") from None
    if a.dtype.kind not in "iu":
        if a.size == 0 and a.dtype.kind == "f":
            return a.astype(np.int64)
        raise ChakraError(f"{what}: expected integers, got {_show(v)}")
    return a.astype(np.int64, copy=False)


# ----------------------------------------------------------------------------- JSON configs


class _KeyedConfig:
    """A frozen config read from ASTRA-sim's JSON key names: from_json / from_dict, each field
    checked by the class's ``_check`` (naming the file, line and key), unknown keys kept."""

    _KEYS: dict = {}  # ASTRA key -> field
    _WHAT = "a configuration"

    def __post_init__(self):
        name = type(self).__name__
        type(self)._check(vars(self), lambda f: f"{name}.{f}", setter=lambda f, v: object.__setattr__(self, f, v))
        object.__setattr__(self, "ignored", _ignored(self.ignored, self._KEYS, f"{name}.ignored"))

    @classmethod
    def from_json(cls, path):
        text = _read_text(path)
        d = _load_json(text, str(path))
        return cls._from_mapping(d, str(path), _json_key_lines(text))

    @classmethod
    def from_dict(cls, d: dict, source: str = "<dict>"):
        """ASTRA-sim's key names; unknown keys go to ``ignored``."""
        return cls._from_mapping(d, source, None)

    @classmethod
    def _from_mapping(cls, d: Any, source: str, lines: Mapping[str, int] | None):
        d = _mapping(d, source, cls._WHAT)
        by_field = {f: d[k] for k, f in cls._KEYS.items() if k in d}
        key_of = {f: k for k, f in cls._KEYS.items()}
        cls._check(by_field, lambda f: _where(source, lines, key_of[f]), setter=by_field.__setitem__)
        ignored = {k: v for k, v in d.items() if k not in cls._KEYS}
        return cls(**by_field, ignored=ignored)


# ----------------------------------------------------------------------------- system


@dataclass(frozen=True)
class SystemConfig(_KeyedConfig):
    """ASTRA-sim's system-layer configuration (``--system-configuration`` JSON).

    Defaults are ASTRA-sim's (``Sys`` constructor) except where it has no usable one:
    ASTRA-sim leaves ``preferred-dataset-splits`` at 0 (a division by zero when a collective
    is cut into chunks) and the algorithm lists empty (no collective can run); here they are 1
    and ``("ring",)``. ``local_mem_bw`` and ``peak_perf`` default to ASTRA-sim's 0, meaning
    "not given": the roofline model refuses them, and ASTRA-sim's reduction cost
    (``size / local_mem_bw``) is undefined with them. ``ignored`` is not part of equality.
    """

    scheduling_policy: str = "LIFO"  # LIFO | FIFO | EXPLICIT
    endpoint_delay: int = 10  # ns per algorithm step
    active_chunks_per_dimension: int = 1
    preferred_dataset_splits: int = 1
    all_reduce: tuple[str, ...] = ("ring",)  # one per dimension
    reduce_scatter: tuple[str, ...] = ("ring",)
    all_gather: tuple[str, ...] = ("ring",)
    all_to_all: tuple[str, ...] = ("ring",)
    collective_optimization: str = "baseline"  # baseline | localBWAware
    local_mem_bw: float = 0.0  # decimal GB/s (= bytes/ns); 0 = not given
    roofline_enabled: bool = False
    peak_perf: float = 0.0  # TFLOPS; 0 = not given
    ignored: dict = field(default_factory=dict, compare=False)
    _KEYS = _SYSTEM_KEYS
    _WHAT = "a system configuration"

    @staticmethod
    def _check(values: dict, what, setter) -> None:
        _system_fields(values, what, setter)

    def to_dict(self) -> dict:
        """ASTRA-sim's key names; flags as 0/1 (ASTRA-sim tests ``!= 0``, so a JSON
        ``false`` would read as on); then the ignored keys."""
        d = {
            "scheduling-policy": self.scheduling_policy,
            "endpoint-delay": self.endpoint_delay,
            "active-chunks-per-dimension": self.active_chunks_per_dimension,
            "preferred-dataset-splits": self.preferred_dataset_splits,
            "all-reduce-implementation": list(self.all_reduce),
            "reduce-scatter-implementation": list(self.reduce_scatter),
            "all-gather-implementation": list(self.all_gather),
            "all-to-all-implementation": list(self.all_to_all),
            "collective-optimization": self.collective_optimization,
            "local-mem-bw": self.local_mem_bw,
            "roofline-enabled": int(self.roofline_enabled),
            "peak-perf": self.peak_perf,
        }
        d.update(self.ignored)
        return d

    def unknown_keys(self) -> tuple[str, ...]:
        """Ignored keys that no ASTRA-sim version reads either (likely typos)."""
        return tuple(k for k in self.ignored if k not in ASTRA_IGNORED_SYSTEM_KEYS)


def _system_fields(values: dict, what: Callable[[str], str], setter: Callable[[str, Any], None]) -> None:
    """Check and normalize the fields present in ``values`` (by field name)."""
    checks: dict[str, Callable[[Any, str], Any]] = {
        "scheduling_policy": lambda v, w: _choice(v, SCHEDULING_POLICIES, w),
        "endpoint_delay": lambda v, w: _integer(v, w, minimum=0),
        "active_chunks_per_dimension": lambda v, w: _integer(v, w, minimum=1),
        "preferred_dataset_splits": lambda v, w: _integer(v, w, minimum=1),
        "all_reduce": _algorithms,
        "reduce_scatter": _algorithms,
        "all_gather": _algorithms,
        "all_to_all": _algorithms,
        "collective_optimization": lambda v, w: _choice(v, COLLECTIVE_OPTIMIZATIONS, w),
        "local_mem_bw": lambda v, w: _number(v, w),
        "roofline_enabled": _flag,
        "peak_perf": lambda v, w: _number(v, w),
    }
    for f, check in checks.items():
        if f in values:
            setter(f, check(values[f], what(f)))
    if values.get("roofline_enabled"):
        # ASTRA-sim would divide by zero here and run on with a garbage compute time
        for f, unit in (("peak_perf", "TFLOPS"), ("local_mem_bw", "GB/s")):
            if not values.get(f):
                raise ChakraError(
                    f"{what('roofline_enabled')}: the roofline model needs a positive "
                    f"{f.replace('_', '-')} ({unit}), got {values.get(f, 0)!r}"
                )


# ----------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class MemoryConfig(_KeyedConfig):
    """ASTRA-sim's remote-memory configuration (``--remote-memory-configuration`` JSON).

    Every default is ASTRA-sim's. ``num_nodes`` and ``num_npus_per_node`` describe the nodes
    of ``PER_NODE_MEMORY_EXPANSION``; ``ignored`` is not part of equality.
    """

    memory_type: str = "NO_MEMORY_EXPANSION"
    remote_mem_latency: float = 0.0  # ns per access
    remote_mem_bw: float = 0.0  # decimal GB/s (ASTRA-sim multiplies by 1e9)
    num_nodes: int = 0
    num_npus_per_node: int = 0
    ignored: dict = field(default_factory=dict, compare=False)
    _KEYS = _MEMORY_KEYS
    _WHAT = "a remote-memory configuration"

    @staticmethod
    def _check(values: dict, what, setter) -> None:
        _memory_fields(values, what, setter)

    def to_dict(self) -> dict:
        d = {
            "memory-type": self.memory_type,
            "remote-mem-latency": self.remote_mem_latency,
            "remote-mem-bw": self.remote_mem_bw,
            "num-nodes": self.num_nodes,
            "num-npus-per-node": self.num_npus_per_node,
        }
        d.update(self.ignored)
        return d


def _memory_fields(values: dict, what: Callable[[str], str], setter: Callable[[str, Any], None]) -> None:
    checks: dict[str, Callable[[Any, str], Any]] = {
        "memory_type": lambda v, w: _choice(v, MEMORY_TYPES, w),
        "remote_mem_latency": lambda v, w: _number(v, w),
        "remote_mem_bw": lambda v, w: _number(v, w),
        "num_nodes": lambda v, w: _integer(v, w, minimum=0),
        "num_npus_per_node": lambda v, w: _integer(v, w, minimum=0),
    }
    for f, check in checks.items():
        if f in values:
            setter(f, check(values[f], what(f)))
    mtype = values.get("memory_type", "NO_MEMORY_EXPANSION")
    if mtype != "NO_MEMORY_EXPANSION" and not values.get("remote_mem_bw"):
        raise ChakraError(
            f"{what('remote_mem_bw')}: {mtype} needs a positive remote-mem-bw (GB/s), "
            f"got {values.get('remote_mem_bw', 0)!r}"
        )
    if mtype == "PER_NODE_MEMORY_EXPANSION":
        for f in ("num_nodes", "num_npus_per_node"):
            if not values.get(f):
                raise ChakraError(
                    f"{what(f)}: PER_NODE_MEMORY_EXPANSION needs a positive "
                    f"{f.replace('_', '-')}, got {values.get(f, 0)!r}"
                )


# ----------------------------------------------------------------------------- files


def _read_text(path) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ChakraError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ChakraError(f"{path}: not UTF-8 text (byte offset {e.start})") from None
    return text[1:] if text.startswith("\ufeff") else text


def _load_json(text: str, source: str) -> Any:
    def no_duplicates(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise ChakraError(f"{source}: key {k!r} appears twice")
            out[k] = v
        return out

    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise ChakraError(f"{source}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None


_JSON_KEY_RE = re.compile(r'"((?:[^"\\\n]|\\.)*)"\s*:')


def _json_key_lines(text: str) -> dict[str, int]:
    """Line of the first occurrence of each key (for error messages only)."""
    lines: dict[str, int] = {}
    for m in _JSON_KEY_RE.finditer(text):
        try:
            key = json.loads(f'"{m.group(1)}"')
        except ValueError:
            continue
        lines.setdefault(key, text.count("\n", 0, m.start()) + 1)
    return lines


# ----------------------------------------------------------------------------- YAML subset

_PLAIN_KEY_RE = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.\-]*)\s*:(?=\s|$)")
_INT_RE = re.compile(r"[-+]?[0-9]+")
_HEX_RE = re.compile(r"0x[0-9a-fA-F]+")
_FLOAT_RE = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_UNSUPPORTED_START = {
    "{": "flow mappings",
    "&": "anchors",
    "*": "aliases",
    "!": "tags",
    "|": "block scalars",
    ">": "block scalars",
    "%": "directives",
    "@": "reserved characters",
    "`": "reserved characters",
}


def parse_yaml(text: str, source: str = "<string>") -> dict:
    """Parse the YAML subset of ASTRA-sim's network files into a dict.

    Supported: top-level ``key: value`` lines; scalars (integers, floats, ``true``/``false``,
    ``null``, plain or quoted strings); flow lists ``key: [ a, b ]`` (possibly over several
    lines); block lists (``key:`` followed by ``- item`` lines); ``#`` comments; a leading
    ``---``. Anything else raises :class:`ChakraError` naming ``source`` and the line.
    """
    return _parse_yaml(text, source)[0]


class _YamlError(Exception):
    """A syntax problem; :func:`_parse_yaml` adds the file and line."""


def _parse_yaml(text: str, source: str) -> tuple[dict, dict[str, int]]:
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.splitlines()
    out: dict[str, Any] = {}
    where: dict[str, int] = {}
    open_key: str | None = None  # a "key:" with no value yet: block list items may follow
    list_indent: int | None = None  # indentation of the block list's items
    seen_content = False

    def err(lineno: int, msg: str) -> ChakraError:
        return ChakraError(f"{source}:{lineno}: {msg}")

    i = 0
    while i < len(lines):
        lineno = i + 1
        raw = lines[i]
        i += 1
        try:
            body = _strip_comment(raw)
        except _YamlError as e:
            raise err(lineno, str(e)) from None
        if not body.strip():
            continue
        lead = body[: len(body) - len(body.lstrip(" \t"))]
        if "\t" in lead:
            raise err(lineno, "tab in indentation (YAML allows spaces only)")
        indent = len(lead)
        s = body.strip()

        if s == "---" and indent == 0 and not seen_content:
            seen_content = True
            continue
        if s in ("---", "...") and indent == 0:
            raise err(lineno, "several YAML documents in one file are not supported")
        seen_content = True

        # ---- block list item
        if s == "-" or s.startswith("- "):
            if open_key is None:
                raise err(lineno, "list item '- ...' without a 'key:' line above it")
            if list_indent is None:
                list_indent = indent
            elif indent != list_indent:
                raise err(lineno, f"list item indented by {indent} spaces, the ones above by {list_indent}")
            item = s[1:].strip()
            if not item:
                raise err(lineno, "empty list item")
            try:
                value = _scalar(item)
            except _YamlError as e:
                raise err(lineno, str(e)) from None
            if out[open_key] is None:
                out[open_key] = []
            out[open_key].append(value)
            continue

        # ---- key: value
        if indent > 0:
            if open_key is not None and list_indent is None:
                raise err(
                    lineno,
                    f"nested mappings are not supported (under {open_key!r}); expected '- item' lines or a flow list",
                )
            raise err(lineno, "unexpected indentation (only top-level 'key: value' lines and list items are supported)")
        open_key, list_indent = None, None
        try:
            key, rest = _split_key(s)
        except _YamlError as e:
            raise err(lineno, str(e)) from None
        if key in out:
            raise err(lineno, f"duplicate key {key!r} (first on line {where[key]})")
        where[key] = lineno

        if not rest:
            out[key] = None
            open_key = key
            continue
        if rest.startswith("["):
            start = lineno
            flow = rest
            try:
                end = _flow_end(flow)
                while end < 0:
                    if i >= len(lines):
                        raise err(start, f"flow list of {key!r} is not closed with ']'")
                    nxt = _strip_comment(lines[i])
                    i += 1
                    flow = flow + " " + nxt.strip()
                    end = _flow_end(flow)
                if flow[end + 1 :].strip():
                    raise _YamlError(f"unexpected text after the closing ']' of {key!r}: {flow[end + 1 :].strip()!r}")
                out[key] = _flow_items(flow[1:end])
            except _YamlError as e:
                raise err(i if i > start else start, str(e)) from None
            continue
        try:
            out[key] = _scalar(rest)
        except _YamlError as e:
            raise err(lineno, str(e)) from None
    return out, where


def _unquoted(s: str, j: int):
    """Yield (index, character) of each character of s from j on that is outside quotes
    ('' doubles a quote in single-quoted strings; backslash escapes in double-quoted ones).
    Returns (as StopIteration.value) whether a quote is still open at the end."""
    quote = None
    n = len(s)
    while j < n:
        c = s[j]
        if quote == "'":
            if c == "'":
                if j + 1 < n and s[j + 1] == "'":
                    j += 2
                    continue
                quote = None
        elif quote == '"':
            if c == "\\":
                j += 2
                continue
            if c == '"':
                quote = None
        elif c in "'\"" and _opens_quote(s, j):
            quote = c
        else:
            yield j, c
        j += 1
    return quote is not None


def _strip_comment(line: str) -> str:
    """The line without its ``#`` comment (a ``#`` starts one at the line start or after a
    space, outside quotes), trailing spaces removed."""
    scan = _unquoted(line, 0)
    while True:
        try:
            j, c = next(scan)
        except StopIteration as end:
            if end.value:
                raise _YamlError("quoted string is not closed on this line") from None
            return line.rstrip()
        if c == "#" and (j == 0 or line[j - 1] in " \t"):
            return line[:j].rstrip()


def _opens_quote(s: str, j: int) -> bool:
    """Whether the quote at ``s[j]`` starts a quoted scalar (rather than sitting inside a
    plain one, as in ``it's``): it must come first, or after ``key:``, ``- ``, ``[`` or ``,``."""
    prev = s[:j].rstrip(" \t")
    return not prev or prev[-1] in ":[," or prev.strip() == "-"


def _split_key(s: str) -> tuple[str, str]:
    if s[0] in "'\"":
        key, end = _quoted(s, 0)
        rest = s[end:].lstrip()
        if not rest.startswith(":") or (len(rest) > 1 and rest[1] not in " \t"):
            raise _YamlError(f"expected ':' after the key {key!r}")
        return key, rest[1:].strip()
    m = _PLAIN_KEY_RE.match(s)
    if not m:
        raise _YamlError(f"expected 'key: value', got {s!r}")
    return m.group(1), s[m.end() :].strip()


def _quoted(s: str, start: int) -> tuple[str, int]:
    """A quoted scalar starting at ``s[start]``: its value and the index after it."""
    q = s[start]
    out = []
    j = start + 1
    while j < len(s):
        c = s[j]
        if q == "'":
            if c == "'":
                if j + 1 < len(s) and s[j + 1] == "'":
                    out.append("'")
                    j += 2
                    continue
                return "".join(out), j + 1
            out.append(c)
        else:
            if c == "\\":
                if j + 1 >= len(s):
                    break
                e = s[j + 1]
                esc = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", '"': '"', "\\": "\\", "/": "/", " ": " "}
                if e in esc:
                    out.append(esc[e])
                    j += 2
                    continue
                if e in "xuU":
                    width = {"x": 2, "u": 4, "U": 8}[e]
                    digits = s[j + 2 : j + 2 + width]
                    if len(digits) == width and all(ch in "0123456789abcdefABCDEF" for ch in digits):
                        out.append(chr(int(digits, 16)))
                        j += 2 + width
                        continue
                raise _YamlError(f"unsupported escape '\\{e}' in a double-quoted string")
            if c == '"':
                return "".join(out), j + 1
            out.append(c)
        j += 1
    raise _YamlError("quoted string is not closed")


def _scalar(text: str) -> Any:
    t = text.strip()
    if not t:
        raise _YamlError("missing value")
    if t[0] in "'\"":
        value, end = _quoted(t, 0)
        if t[end:].strip():
            raise _YamlError(f"unexpected text after a quoted string: {t[end:].strip()!r}")
        return value
    if t[0] in "[]}":
        raise _YamlError("nested lists and mappings are not supported")
    if t[0] in _UNSUPPORTED_START:
        raise _YamlError(f"YAML {_UNSUPPORTED_START[t[0]]} are not supported (value {t!r})")
    if t.startswith("- ") or t == "-":
        raise _YamlError("a block list must start on its own line after 'key:'")
    if ": " in t or t.endswith(":"):
        raise _YamlError(f"nested mappings are not supported (value {t!r})")
    if t in ("true", "True", "TRUE"):
        return True
    if t in ("false", "False", "FALSE"):
        return False
    if t in ("null", "Null", "NULL", "~"):
        return None
    if _INT_RE.fullmatch(t):
        return int(t)
    if _HEX_RE.fullmatch(t):
        return int(t, 16)
    if _FLOAT_RE.fullmatch(t):
        return float(t)
    low = t.lower()
    if low in (".inf", "+.inf"):
        return math.inf
    if low == "-.inf":
        return -math.inf
    if low == ".nan":
        return math.nan
    return t


def _flow_end(s: str) -> int:
    """Index of the ']' closing the flow list that ``s`` starts with, or -1 if not on it."""
    for j, c in _unquoted(s, 1):
        if c == "[" or c == "{":
            raise _YamlError("nested lists and mappings are not supported")
        if c == "]":
            return j
    return -1


def _flow_items(inner: str) -> list:
    """The items of a flow list (the text between its brackets)."""
    items: list[str] = []
    cur: list[str] = []
    quote = None
    j = 0
    while j < len(inner):
        c = inner[j]
        if quote == "'":
            cur.append(c)
            if c == "'":
                if j + 1 < len(inner) and inner[j + 1] == "'":
                    cur.append("'")
                    j += 2
                    continue
                quote = None
        elif quote == '"':
            cur.append(c)
            if c == "\\" and j + 1 < len(inner):
                cur.append(inner[j + 1])
                j += 2
                continue
            if c == '"':
                quote = None
        elif c in "'\"" and not "".join(cur).strip():
            quote = c
            cur.append(c)
        elif c == ",":
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        j += 1
    items.append("".join(cur))
    if len(items) == 1 and not items[0].strip():
        return []  # []
    if not items[-1].strip():
        items.pop()  # a trailing comma
    values = []
    for k, item in enumerate(items):
        if not item.strip():
            raise _YamlError(f"empty item #{k + 1} in a flow list")
        values.append(_scalar(item))
    return values
