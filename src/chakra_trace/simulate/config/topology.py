"""The network an ASTRA-sim network YAML describes: per dimension a topology, NPU count,
per-link bandwidth ("GB/s" as written) and latency (ns); NPU ids number dimension 0 fastest.
(The cost model that prices messages on it is `simulate.network`.)"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ChakraError
from ...io.documents import load_yaml, read_text
from .values import (
    ENV_MAX_NPUS,
    MAX_DIMS,
    MAX_LATENCY_NS,
    MIN_BANDWIDTH,
    ignored_keys,
    integer,
    kind,
    max_npus,
    number,
    show,
    string_keyed,
    where,
)

#: Topology building blocks of ASTRA-sim's analytical network, canonical spelling.
TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
_TOPOLOGY_BY_LOWER = {t.lower(): t for t in TOPOLOGIES}

_NETWORK_KEYS = ("topology", "npus_count", "bandwidth", "latency")


def _topology(v: Any, what: str) -> str:
    if isinstance(v, str):
        canon = _TOPOLOGY_BY_LOWER.get(v.strip().lower())
        if canon:
            return canon
    raise ChakraError(f"{what}: expected one of {', '.join(TOPOLOGIES)}, got {show(v)}")


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
        object.__setattr__(self, "npus", _npus(self.npus, "Dimension.npus"))
        object.__setattr__(self, "bandwidth", _bandwidth(self.bandwidth, "Dimension.bandwidth"))
        object.__setattr__(self, "latency", _latency(self.latency, "Dimension.latency"))


def _npus(v: Any, what: str) -> int:
    return integer(v, what, minimum=MIN_NPUS_PER_DIM, maximum=max_npus(), raise_with=ENV_MAX_NPUS)


def _bandwidth(v: Any, what: str) -> float:
    """GB/s per link: below 1 kB/s a message's time overflows the ns clock long before it is useful."""
    return number(v, what, minimum=MIN_BANDWIDTH, unit=" GB/s")


def _latency(v: Any, what: str) -> float:
    return number(v, what, maximum=MAX_LATENCY_NS, unit=" ns")


def _check_size(dims: tuple[Dimension, ...], what: str) -> None:
    """The whole network: at most MAX_DIMS dimensions and max_npus() NPUs (each NPU's state is built)."""
    if len(dims) > MAX_DIMS:
        raise ChakraError(f"{what}: {len(dims)} dimensions, more than the {MAX_DIMS} a network may have")
    total = math.prod(d.npus for d in dims)
    limit = max_npus()
    if total > limit:
        sizes = " x ".join(str(d.npus) for d in dims)
        raise ChakraError(
            f"{what}: {sizes} = {total:,} NPUs, more than the limit of {limit:,} (set {ENV_MAX_NPUS} to allow more)"
        )


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
            raise ChakraError(f"Network.dims: expected at least one Dimension, got {show(dims)}")
        for i, d in enumerate(dims):
            if not isinstance(d, Dimension):
                raise ChakraError(f"Network.dims[{i}]: expected a Dimension, got {show(d)}")
        _check_size(tuple(dims), "Network.dims")
        object.__setattr__(self, "dims", tuple(dims))
        object.__setattr__(self, "ignored", ignored_keys(self.ignored, _NETWORK_KEYS, "Network.ignored"))

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
        data, lines = load_yaml(read_text(path, "network file"), str(path))
        return cls._from_mapping(data, str(path), lines)

    @classmethod
    def from_dict(cls, d: dict, source: str = "<dict>") -> Network:
        """The same keys as the YAML file; lists may be given as a single value for one
        dimension."""
        return cls._from_mapping(d, source, None)

    @classmethod
    def _from_mapping(cls, d: Any, source: str, lines: Mapping[str, int] | None) -> Network:
        d = string_keyed(d, source, "a network description")
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
                        f"{where(source, lines, k)}: expected a list with one entry per dimension, got {show(v)}"
                    )
                v = [v]
            if not v:
                raise ChakraError(f"{where(source, lines, k)}: expected at least one dimension, got an empty list")
            cols[k] = v
        n = len(cols["topology"])
        if n > MAX_DIMS:
            raise ChakraError(f"{where(source, lines, 'topology')}: {n} dimensions, more than the {MAX_DIMS} allowed")
        for k in _NETWORK_KEYS[1:]:
            if len(cols[k]) != n:
                raise ChakraError(
                    f"{where(source, lines, k)}: has {len(cols[k])} entries but 'topology' has {n}; "
                    f"every list needs one entry per dimension"
                )
        dims = []
        for i in range(n):
            w = {k: f"{where(source, lines, k)}[{i}]" for k in _NETWORK_KEYS}
            dims.append(
                Dimension(
                    _topology(cols["topology"][i], w["topology"]),
                    _npus(cols["npus_count"][i], w["npus_count"]),
                    _bandwidth(cols["bandwidth"][i], w["bandwidth"]),
                    _latency(cols["latency"][i], w["latency"]),
                )
            )
        _check_size(tuple(dims), where(source, lines, "npus_count"))
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
        d = {k: list(v) if isinstance(v, (list, tuple)) else [v] * n for k, v in args.items()}
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
        raise ChakraError(f"{what}: expected integers, got {show(v)} ({e})") from None
    if a.dtype.kind not in "iu":
        if a.size == 0 and a.dtype.kind == "f":
            return a.astype(np.int64)
        raise ChakraError(f"{what}: expected integers, got {show(v)}")
    return a.astype(np.int64, copy=False)


# ----------------------------------------------------------------------------- JSON configs


def parse_yaml(text: str, source: str = "<string>") -> dict:
    """The mapping a YAML text holds (a network file's shape; ``{}`` when empty). Anything else,
    and every problem `load_yaml` finds, raises ChakraError naming ``source`` and the line."""
    data, _ = load_yaml(text, source)
    if not isinstance(data, dict):
        raise ChakraError(f"{source}: expected a mapping of keys to values, got {kind(data)}")
    return data
