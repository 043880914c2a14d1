"""Valid values for the integer tensors an op uses as indices, found from the op's schema.

A trace records an integer tensor's shape but not its values, and older schemas have no
`tensor_range` either. Zeros would be in bounds, but a recreated tensor is a view of a storage
that other ops of the pass may write: a GPU trace's storage ids follow the caching allocator,
so token ids can share a storage with floats an optimizer updates in place, and the lookup
then reads float bits as indices (`IndexError: index out of range in self` in the warm-up).

So an integer tensor in an index role gets memory of its own (never written by another op)
and values within the dimension it indexes, read from the op's other recorded inputs. The
role is the schema argument's name, as ATen names them (`torch._C` schemas): ``index`` of
``self`` along ``dim`` (or of its elements: take, put), ``indices`` of an embedding's
``weight`` rows / ``num_weights``, of ``self``'s leading dims (index, index_put), of a pooled
plane (max_unpool, pooling backward), class ``target``s of a loss, ``offsets`` (non-decreasing,
within the bag's indices), ``offset2bag``, one_hot's ``self``. A recorded `tensor_range` is kept,
cut to those bounds.
"""

from __future__ import annotations

import math
from typing import cast

_INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")


def _tensor(spec) -> list | None:
    """The plan entry's tensor fields of an integer tensor spec, None otherwise."""
    if isinstance(spec, dict) and "t" in spec and spec["t"][4] in _INT_DTYPES:
        return spec["t"]
    return None


def _shape(spec) -> list[int] | None:
    return list(spec["t"][1]) if isinstance(spec, dict) and "t" in spec else None


def _numel(shape) -> int:
    return math.prod(shape) if shape is not None else 0


def _set_range(t: list, lo: int, hi: int) -> None:
    """Values from lo to hi (inclusive), in the tensor's own memory; a recorded range is cut to them."""
    rec = t[5]
    if isinstance(rec, list) and len(rec) == 2 and all(isinstance(x, int) for x in rec):
        a, b = max(rec[0], lo), min(rec[1], hi)
        if a <= b:
            lo, hi = a, b
    t[5] = [lo, hi] if hi >= lo else [0, 0]
    t[6] = True


def _set_spread(t: list, n: int, to_end: bool = False) -> None:
    """Non-decreasing values spread evenly from 0 to below n (bag numbers), or to n itself with
    `to_end` (offsets whose last entry closes the last bag)."""
    t[5] = ["spread_to" if to_end else "spread", max(int(n), 0)]
    t[6] = True


def _bound(t: list | None, n: int | None) -> None:
    if t is not None and n is not None and n > 0:
        _set_range(t, 0, int(n) - 1)


def _dim(shape: list[int] | None, dim) -> int | None:
    """Size of `shape` along `dim` (negative dims count from the end; a 0-d tensor has size 1)."""
    if shape is None or not isinstance(dim, int):
        return None
    if not shape:
        return 1 if dim in (0, -1) else None
    d = dim + len(shape) if dim < 0 else dim
    return shape[d] if 0 <= d < len(shape) else None


def _classes(shape: list[int] | None) -> int | None:
    """Classes of a loss input: dim 1 of a batch (N, C, ...), dim 0 of a single sample (C)."""
    if not shape:
        return None
    return shape[1] if len(shape) >= 2 else shape[0]


def bound_indices(name: str, named: dict) -> None:
    """Give the integer index arguments of op `name` (``named``: schema argument name -> plan
    spec, as `HostReplay` builds them) valid values in place."""
    base = name.split("::")[-1].split(".")[0].rstrip("_")
    self_shape = _shape(named.get("self")) or _shape(named.get("input"))

    t = _tensor(named.get("index"))
    if t is not None:
        dim = named.get("dim")
        if isinstance(named.get("self_sizes"), list) or isinstance(named.get("sizes"), list):  # *_backward
            sizes = named.get("self_sizes") or named.get("sizes")
            _bound(t, _dim(list(cast("list[int]", sizes)), dim))
        elif dim is not None:
            _bound(t, _dim(self_shape, dim))
        else:  # take, put: flat positions of self
            _bound(t, _numel(self_shape))

    idx = named.get("indices")
    if isinstance(idx, list) and self_shape is not None:  # index, index_put(_), _unsafe_index: dim by dim
        for k, spec in enumerate(idx):
            if k < len(self_shape):
                _bound(_tensor(spec), self_shape[k])
    t = _tensor(idx)
    if t is not None:
        if "embedding" in base:
            rows = named.get("num_weights")
            rows = rows if isinstance(rows, int) else _dim(_shape(named.get("weight")), 0)
            _bound(t, rows)
        elif base.startswith("max_unpool") and isinstance(named.get("output_size"), list):
            _bound(t, _numel(named["output_size"]))
        elif "pool" in base and self_shape:  # flat positions within each pooled plane of the input
            planes = 3 if "3d" in base else 2
            _bound(t, _numel(self_shape[-planes:]))
        elif base.startswith("_sparse_coo_tensor") and isinstance(named.get("size"), list) and t[1]:
            _bound(t, min(named["size"][: t[1][0]] or [0]))  # every sparse dim at once: the smallest

    n_idx = _numel(_shape(named.get("indices")))
    t = _tensor(named.get("offsets"))
    if t is not None and "embedding" in base:
        _set_spread(t, n_idx, named.get("include_last_offset") is True)
    if _shape(named.get("offsets")) is not None:
        bags = _numel(_shape(named.get("offsets"))) - (named.get("include_last_offset") is True)
    else:  # the backward ops: one gradient row per bag
        bags = _dim(_shape(named.get("grad")), 0) or 0
    t = _tensor(named.get("offset2bag"))
    if t is not None:
        _set_spread(t, bags)
    t = _tensor(named.get("maximum_indices"))
    if t is not None:
        _bound(t, named.get("num_weights") if isinstance(named.get("num_weights"), int) else None)
    t = _tensor(named.get("bag_size"))
    if t is not None:
        _set_range(t, 1, 1)

    t = _tensor(named.get("target"))
    if t is not None:
        _bound(t, (self_shape or cast("list[int | None]", [None]))[-1] if "margin" in base else _classes(self_shape))

    if base == "one_hot":
        t = _tensor(named.get("self"))
        n = named.get("num_classes")
        if t is not None:
            _bound(t, n if isinstance(n, int) and n > 0 else 2)

    for key in ("crow_indices", "ccol_indices", "compressed_indices"):
        t = _tensor(named.get(key))
        if t is not None:
            plain = named.get("col_indices") or named.get("row_indices") or named.get("plain_indices")
            _set_spread(t, _numel(_shape(plain)), True)
