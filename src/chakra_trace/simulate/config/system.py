"""ASTRA-sim's system-layer configuration (collective algorithms, chunking, scheduling,
roofline) and remote-memory configuration: the JSON files, their keys, defaults and checks."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ...errors import ChakraError
from ...io.documents import json_key_lines, load_json, read_text
from ...schema.compute_types import DeviceCompute
from .values import (
    ENV_MAX_CHUNKS,
    MAX_LATENCY_NS,
    choice,
    flag,
    ignored_keys,
    integer,
    max_chunks,
    number,
    show,
    string_keyed,
    where,
)

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
    }
)
#: ASTRA-sim's custom (MSCCL-style) collective implementations: files of per-chunk schedules
#: this simulator has no engine for. Refused rather than ignored: the run would cost the
#: collectives with the ``*-implementation`` algorithms instead, silently another answer.
CUSTOM_IMPLEMENTATION_KEYS = (
    "all-reduce-implementation-custom",
    "reduce-scatter-implementation-custom",
    "all-gather-implementation-custom",
    "all-to-all-implementation-custom",
    "per-node-custom-implementation",
)
#: Remote-memory-JSON keys of older ASTRA-sim memory backends (kept in ``MemoryConfig.ignored``).
ASTRA_IGNORED_MEMORY_KEYS = frozenset({"local-mem-latency", "local-mem-bw"})

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
        raise ChakraError(f"{what}: expected an algorithm name (string), got {show(name)}")
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


def _algorithms(v: Any, what: str) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, (list, tuple)):
        raise ChakraError(f"{what}: expected a list of algorithm names (one per dimension), got {show(v)}")
    if not v:
        raise ChakraError(f"{what}: expected at least one algorithm (one per dimension), got an empty list")
    for i, name in enumerate(v):
        _algorithm(name, f"{what}[{i}]")
    return tuple(v)


_C = TypeVar("_C", bound="_KeyedConfig")


def _chunks(v: Any, what: str) -> int:
    """A chunk count: each chunk is an array over the NPUs in every collective."""
    return integer(v, what, minimum=1, maximum=max_chunks(), raise_with=ENV_MAX_CHUNKS)


class _KeyedConfig:
    """A frozen config read from ASTRA-sim's JSON key names: from_json / from_dict, each field
    checked by the class's ``_check`` (naming the file, line and key), unknown keys kept."""

    _KEYS: ClassVar[dict[str, str]]  # ASTRA key -> field
    _WHAT: ClassVar[str]  # what the file holds, for messages
    ignored: dict

    if TYPE_CHECKING:  # each config is a dataclass, whose generated __init__ takes its fields

        def __init__(self, *, ignored: dict, **fields: Any) -> None: ...

    @staticmethod
    def _check(values: dict, what: Callable[[str], str], setter: Callable[[str, Any], None]) -> None:
        """Check and normalize the fields present in ``values`` (by field name): ``what(field)``
        says where a field came from, ``setter(field, value)`` stores the normalized value."""
        raise NotImplementedError

    def __post_init__(self) -> None:
        name = type(self).__name__
        self._check(vars(self), lambda f: f"{name}.{f}", setter=lambda f, v: object.__setattr__(self, f, v))
        object.__setattr__(self, "ignored", ignored_keys(self.ignored, self._KEYS, f"{name}.ignored"))

    @classmethod
    def from_json(cls: type[_C], path) -> _C:
        text = read_text(path, "system file")
        d = load_json(text, str(path))
        return cls._from_mapping(d, str(path), json_key_lines(text))

    @classmethod
    def from_dict(cls: type[_C], d: dict, source: str = "<dict>") -> _C:
        """ASTRA-sim's key names; unknown keys go to ``ignored``."""
        return cls._from_mapping(d, source, None)

    @classmethod
    def _from_mapping(cls: type[_C], d: Any, source: str, lines: Mapping[str, int] | None) -> _C:
        d = string_keyed(d, source, cls._WHAT)
        by_field = {f: d[k] for k, f in cls._KEYS.items() if k in d}
        key_of = {f: k for k, f in cls._KEYS.items()}
        cls._check(by_field, lambda f: where(source, lines, key_of[f]), setter=by_field.__setitem__)
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
    # not an ASTRA-sim key: the device ``peak_perf`` was set from (`simulate.devices.with_device`),
    # whose per-type peaks cost each compute node at its element type's (`simulate.costs`); None
    # (a system file's peak-perf): one peak for every node, as ASTRA-sim
    device_compute: DeviceCompute | None = None
    _KEYS = _SYSTEM_KEYS
    _WHAT = "a system configuration"

    @classmethod
    def _from_mapping(cls, d: Any, source: str, lines: Mapping[str, int] | None):
        if isinstance(d, Mapping):
            _refuse_custom(d, lambda k: where(source, lines, k))
        return super()._from_mapping(d, source, lines)

    @staticmethod
    def _check(values: dict, what: Callable[[str], str], setter: Callable[[str, Any], None]) -> None:
        checks: dict[str, Callable[[Any, str], Any]] = {
            "scheduling_policy": lambda v, w: choice(v, SCHEDULING_POLICIES, w),
            "endpoint_delay": lambda v, w: integer(v, w, minimum=0, maximum=int(MAX_LATENCY_NS)),
            "active_chunks_per_dimension": _chunks,
            "preferred_dataset_splits": _chunks,
            "all_reduce": _algorithms,
            "reduce_scatter": _algorithms,
            "all_gather": _algorithms,
            "all_to_all": _algorithms,
            "collective_optimization": lambda v, w: choice(v, COLLECTIVE_OPTIMIZATIONS, w),
            "local_mem_bw": lambda v, w: number(v, w),
            "roofline_enabled": flag,
            "peak_perf": lambda v, w: number(v, w),
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

    def __post_init__(self) -> None:
        _refuse_custom(self.ignored, lambda k: f"SystemConfig.ignored: {k!r}")
        super().__post_init__()


def _refuse_custom(d: Mapping, what: Callable[[str], str]) -> None:
    """ChakraError naming the first custom-collective key of a system config (`CUSTOM_IMPLEMENTATION_KEYS`)."""
    for k in CUSTOM_IMPLEMENTATION_KEYS:
        if k in d:
            raise ChakraError(
                f"{what(k)}: custom collective implementations (MSCCL-style schedules) are not simulated; "
                "remove the key to cost the collectives with the *-implementation algorithms"
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
    def _check(values: dict, what: Callable[[str], str], setter: Callable[[str, Any], None]) -> None:
        checks: dict[str, Callable[[Any, str], Any]] = {
            "memory_type": lambda v, w: choice(v, MEMORY_TYPES, w),
            "remote_mem_latency": lambda v, w: number(v, w, maximum=MAX_LATENCY_NS, unit=" ns"),
            "remote_mem_bw": lambda v, w: number(v, w),
            "num_nodes": lambda v, w: integer(v, w, minimum=0),
            "num_npus_per_node": lambda v, w: integer(v, w, minimum=0),
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
