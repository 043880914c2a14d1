"""Lossless JSON export and import of a `Trace`.

Two layouts, one node encoding:

* a JSON document ``{"format": "chakra-trace-json", "version": 1, "metadata": {...},
  "nodes": [...]}``;
* JSON Lines (``.jsonl``): the first line is the header object (format, version, metadata),
  then one node object per line.

Either may be gzipped. A node object is::

    {"id": 7, "name": "aten::mm", "type": "COMP_NODE", "ctrl_deps": [1], "data_deps": [5, 6],
     "start_time_micros": 0, "duration_micros": 12,
     "inputs": {"values": "...", "shapes": "...", "types": "..."},      (only if present)
     "outputs": {...},                                                   (only if present)
     "attr": [{"name": "is_cpu_op", "bool_val": true}, ...],
     "unknown_fields": "<base64>"}                                       (only if non-empty)

The mapping is lossless: uint64 values are JSON integers; an attribute keeps its protobuf
oneof member as its key (none when it has no value); ``bytes`` are base64; non-finite doubles
and floats are the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (a NaN whose bits are not
the canonical quiet NaN is written ``"NaN:0x<hex bits>"`` so that it round-trips too); a
``float`` member is written as the shortest decimal that reads back to the same 32-bit value.
Wire fields the schema does not know are kept as base64 ``unknown_fields`` on the node, the
metadata, an attribute or an inputs/outputs object; a list message with unknown fields is
written as ``{"values": [...], "unknown_fields": "..."}`` instead of a bare array. Attributes
are written in wire order, so a trace read back re-serializes byte-identically.

Both directions stream: writing encodes a bounded number of rows at a time, reading parses
JSON Lines line by line and the ``nodes`` array of a document one element at a time.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import os
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import numpy as np

from ..errors import TraceFormatError
from ..schema import proto as pb
from ..schema.codec import encode_rows
from ..schema.enums import NodeType
from ..schema.proto import ATTR_MEMBERS
from ..schema.trace import COLUMN_ATTRS, Trace
from .et import atomic_output
from .stream import Limits, open_binary

__all__ = [
    "FORMAT",
    "VERSION",
    "attr_to_json",
    "header_json",
    "is_json_lines_path",
    "iter_json_nodes",
    "metadata_to_json",
    "read_json",
    "write_json",
]

FORMAT = "chakra-trace-json"
VERSION = 1

_WRITE_CHUNK = 4096  # rows encoded (and nodes written) at a time
_WRITE_CHUNK_CHARS = 8 << 20  # ... or fewer, once their JSON text reaches this size
_READ_CHUNK = 4096  # nodes decoded into a columnar chunk at a time
_READ_CHUNK_BYTES = 32 << 20  # ... or fewer, once their messages reach this size
_TEXT_BLOCK = 1 << 20  # characters read from the input at a time

_U64_MAX = (1 << 64) - 1
_RANGES = {
    "int32": (-(1 << 31), (1 << 31) - 1),
    "sint32": (-(1 << 31), (1 << 31) - 1),
    "sfixed32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "sint64": (-(1 << 63), (1 << 63) - 1),
    "sfixed64": (-(1 << 63), (1 << 63) - 1),
    "uint32": (0, (1 << 32) - 1),
    "fixed32": (0, (1 << 32) - 1),
    "uint64": (0, _U64_MAX),
    "fixed64": (0, _U64_MAX),
}
_NODE_TYPE_NAMES = {int(t): t.name for t in NodeType}
_NODE_KEYS = (
    "id",
    "name",
    "type",
    "ctrl_deps",
    "data_deps",
    "start_time_micros",
    "duration_micros",
    "inputs",
    "outputs",
    "attr",
    "unknown_fields",
)
_CANON_NAN64 = 0x7FF8000000000000
_CANON_NAN32 = 0x7FC00000
_FLT_OVERFLOW = 2.0**128 - 2.0**103  # finite doubles from here up round to a float32 infinity


# =========================================================================== writing


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _nan_json(bits: int, canonical: int, width: int) -> str:
    return "NaN" if bits == canonical else f"NaN:0x{bits:0{width}x}"


def _double_json(x: float) -> Any:
    if math.isfinite(x):
        return x
    if x != x:
        return _nan_json(struct.unpack("<Q", struct.pack("<d", x))[0], _CANON_NAN64, 16)
    return "Infinity" if x > 0 else "-Infinity"


def _float_json(x: float) -> Any:
    """A float32 value (handed over by protobuf as a double) as the shortest exact JSON."""
    f = np.float32(x)
    if math.isfinite(x):
        short = float(str(f))
        if np.float32(short).view(np.uint32) == f.view(np.uint32):
            return short
        return x  # the exact double always narrows back to f
    if x != x:
        return _nan_json(int(f.view(np.uint32)), _CANON_NAN32, 8)
    return "Infinity" if x > 0 else "-Infinity"


def _scalars_json(kind: str, values) -> list:
    if kind == "double":
        return [_double_json(v) for v in values]
    if kind == "float":
        return [_float_json(v) for v in values]
    if kind == "bytes":
        return [_b64(v) for v in values]
    return list(values)


def _scalar_json(kind: str, v) -> Any:
    if kind == "double":
        return _double_json(v)
    if kind == "float":
        return _float_json(v)
    if kind == "bytes":
        return _b64(v)
    return v


def _has_unknown(m) -> bool:
    """Whether a message holds unknown fields anywhere (at any depth)."""
    k = type(m)()
    k.CopyFrom(m)
    k.DiscardUnknownFields()
    return k.ByteSize() != m.ByteSize()


def _own_unknown(m) -> bytes:
    """Wire bytes of the unknown fields of `m` itself (not of its sub-messages)."""
    k = type(m)()
    k.CopyFrom(m)
    for fd in k.DESCRIPTOR.fields:
        k.ClearField(fd.name)
    return k.SerializeToString()


def attr_to_json(a, unknown: bool = True) -> dict:
    """One AttributeProto as a JSON object (`unknown=False` skips looking for unknown fields)."""
    d: dict[str, Any] = {"name": a.name}
    member = a.WhichOneof("value")
    if member is not None:
        _num, kind, is_list = ATTR_MEMBERS[member]
        v = getattr(a, member)
        if is_list:
            vals: Any = _scalars_json(kind, v.values)
            if unknown:
                u = _own_unknown(v)
                if u:
                    vals = {"values": vals, "unknown_fields": _b64(u)}
            d[member] = vals
        else:
            d[member] = _scalar_json(kind, v)
    if a.doc_string:
        d["doc_string"] = a.doc_string
    _add_unknown(d, a, unknown)
    return d


def _add_unknown(d: dict, msg, unknown: bool) -> None:
    """Keep a message's own unknown wire fields (base64) in its JSON object."""
    if unknown:
        u = _own_unknown(msg)
        if u:
            d["unknown_fields"] = _b64(u)


def _io_json(x, unknown: bool) -> dict:
    d = {"values": x.values, "shapes": x.shapes, "types": x.types}
    _add_unknown(d, x, unknown)
    return d


def metadata_to_json(meta) -> dict:
    unknown = _has_unknown(meta)
    d: dict[str, Any] = {"version": meta.version, "attr": [attr_to_json(a, unknown) for a in meta.attr]}
    _add_unknown(d, meta, unknown)
    return d


def header_json(metadata) -> dict:
    """The header object: format, version and the trace's GlobalMetadata."""
    return {"format": FORMAT, "version": VERSION, "metadata": metadata_to_json(metadata)}


def iter_json_nodes(trace: Trace, chunk: int | None = None) -> Iterator[dict]:
    """The JSON object of every node, in row order, decoded `chunk` rows at a time.

    Columns go straight to JSON; only a row's other wire fields (inputs/outputs, attributes
    that are not columns, unknown fields) pass through protobuf.
    """
    chunk = chunk or _WRITE_CHUNK
    n = len(trace)
    names, groups = trace.names, trace.groups
    cols = [(c, 1 << c.bit, getattr(trace, c.name)) for c in COLUMN_ATTRS]
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        ids = trace.ids[s:e].tolist()
        types = trace.types[s:e].tolist()
        codes = trace.name_codes[s:e].tolist()
        start = trace.start[s:e].tolist()
        duration = trace.duration[s:e].tolist()
        present = trace.present[s:e].tolist()
        col_vals = [(c, bit, vals[s:e].tolist()) for c, bit, vals in cols]
        deps = []
        for ip, flat in ((trace.ctrl_indptr, trace.ctrl), (trace.data_indptr, trace.data)):
            p0 = int(ip[s])
            deps.append(((ip[s : e + 1] - p0).tolist(), flat[p0 : int(ip[e])].tolist()))
        (cptr, cflat), (dptr, dflat) = deps
        x0 = int(trace.extra_indptr[s])
        xptr = (trace.extra_indptr[s : e + 1] - x0).tolist()
        xraw = trace.extra[x0 : int(trace.extra_indptr[e])].tobytes()
        # rows whose column attributes sit among the others: take every attribute in wire order
        placed = set(np.unique(trace.placed_rows[(trace.placed_rows >= s) & (trace.placed_rows < e)]).tolist())
        for i in range(e - s):
            t = types[i]
            d: dict[str, Any] = {
                "id": ids[i],
                "name": names[codes[i]],
                "type": _NODE_TYPE_NAMES.get(t, t),
                "ctrl_deps": cflat[cptr[i] : cptr[i + 1]],
                "data_deps": dflat[dptr[i] : dptr[i + 1]],
                "start_time_micros": start[i],
                "duration_micros": duration[i],
            }
            attrs: list[dict] = []
            p = present[i]
            whole = (s + i) in placed
            if p and not whole:
                for c, bit, vals in col_vals:
                    if p & bit:
                        v = vals[i]
                        if c.member == "string_val":
                            v = groups[v]
                        elif c.member == "bool_val":
                            v = bool(v)
                        attrs.append({"name": c.name, c.member: v})
            a, b = xptr[i], xptr[i + 1]
            if a == b and not whole:
                d["attr"] = attrs
                yield d
                continue
            try:
                m = pb.Node.FromString(encode_rows(trace, np.array([s + i]))[0] if whole else xraw[a:b])
            except Exception as exc:  # protobuf's DecodeError differs per runtime
                raise TraceFormatError(None, f"node fields do not parse ({exc})", node_id=ids[i]) from None
            unknown = _has_unknown(m)
            for key in ("inputs", "outputs"):
                if m.HasField(key):
                    d[key] = _io_json(getattr(m, key), unknown)
            attrs.extend(attr_to_json(x, unknown) for x in m.attr)
            d["attr"] = attrs
            _add_unknown(d, m, unknown)
            yield d


def is_json_path(path: str) -> bool:
    """A name this module reads or writes: .json, .jsonl, either gzipped."""
    name = os.path.basename(path).lower()
    return name.endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz"))


def is_json_lines_path(path: str) -> bool:
    name = os.path.basename(path).lower()
    return name.endswith(".jsonl") or name.endswith(".jsonl.gz")


def _chunks(trace) -> tuple[Any, Iterator[Trace]]:
    """(metadata, chunks) of a Trace or of an iterable of Trace chunks."""
    if isinstance(trace, Trace):
        return trace.metadata, iter([trace])
    it = iter(trace)
    first = next(it, None)
    if first is None:
        return pb.GlobalMetadata(), iter(())

    def all_chunks():
        yield first
        yield from it

    return first.metadata, all_chunks()


def write_json(
    trace: Trace | Iterable[Trace], path: str | os.PathLike, *, lines: bool = False, indent: int | None = None
) -> int:
    """Write a trace as one JSON document, or as JSON Lines; return the number of nodes.

    JSON Lines when `lines` is set or the name ends in `.jsonl` / `.jsonl.gz`; gzip when the
    name ends in `.gz`. `trace` may also be an iterable of Trace chunks (e.g. `iter_chunks`),
    whose first chunk supplies the metadata. Rows are encoded a chunk at a time, so memory
    stays bounded; the file replaces `path` only once it is complete.
    """

    path = os.fspath(path)
    lines = lines or is_json_lines_path(path)
    if lines and indent is not None:
        raise ValueError("indent cannot be used with JSON Lines output (one object per line)")
    meta, chunks = _chunks(trace)
    header = header_json(meta)
    compact = {"ensure_ascii": False, "allow_nan": False, "separators": (",", ":")}
    if lines:
        head = json.dumps(header, **compact) + "\n"
        first_sep, sep, close, empty_close = "", "\n", "\n", ""
        dump = partial(json.dumps, **compact)
    elif indent is None:
        head = json.dumps(header, **compact)[:-1] + ',"nodes":['
        first_sep, sep, close, empty_close = "\n", ",\n", "\n]}\n", "]}\n"
        dump = partial(json.dumps, **compact)
    else:
        pad = " " * indent
        ind = pad * 2
        items = [
            f"{pad}{json.dumps(k)}: "
            + json.dumps(v, ensure_ascii=False, allow_nan=False, indent=indent).replace("\n", "\n" + pad)
            for k, v in header.items()
        ]
        head = "{\n" + ",\n".join(items) + f',\n{pad}"nodes": ['
        first_sep, sep, close, empty_close = "\n" + ind, ",\n" + ind, f"\n{pad}]\n}}\n", "]\n}\n"

        def dump(o) -> str:
            return json.dumps(o, ensure_ascii=False, allow_nan=False, indent=indent).replace("\n", "\n" + ind)

    count = 0
    with atomic_output(path) as f:
        f.write(head.encode("utf-8"))
        buf: list[str] = []
        size = 0

        def flush() -> None:
            nonlocal buf, size
            if buf:
                f.write(((first_sep if count == len(buf) else sep) + sep.join(buf)).encode("utf-8"))
            buf, size = [], 0

        for part in chunks:
            for node in iter_json_nodes(part):
                text = dump(node)
                buf.append(text)
                count += 1
                size += len(text)
                if len(buf) >= _WRITE_CHUNK or size >= _WRITE_CHUNK_CHARS:
                    flush()
        flush()
        f.write((close if count else empty_close).encode("utf-8"))
    return count


# =========================================================================== reading


class _Bad(Exception):
    """A value that does not fit the format; the message says what was expected."""


def _jtype(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"the integer {v}"
    if isinstance(v, float):
        return f"the number {v!r}"
    if isinstance(v, str):
        s = v if len(v) <= 20 else v[:17] + "..."
        return f"the string {json.dumps(s, ensure_ascii=False)}"
    if isinstance(v, list):
        return "a list"
    return "an object"


def _int(v, kind: str, what: str) -> int:
    lo, hi = _RANGES[kind]
    if type(v) is not int:
        raise _Bad(f"{what}: expected {_describe(kind)}, got {_jtype(v)}")
    if not lo <= v <= hi:
        raise _Bad(f"{what}: {v} is out of range for {_describe(kind)}")
    return v


def _describe(kind: str) -> str:
    if kind in ("uint64", "fixed64"):
        return "an unsigned 64-bit integer (0 .. 2**64-1)"
    if kind in ("uint32", "fixed32"):
        return "an unsigned 32-bit integer (0 .. 2**32-1)"
    if kind in ("int32", "sint32", "sfixed32"):
        return "a signed 32-bit integer"
    return "a signed 64-bit integer"


def _ints(v, kind: str, what: str) -> list[int]:
    if not isinstance(v, list):
        raise _Bad(f"{what}: expected a list of integers, got {_jtype(v)}")
    lo, hi = _RANGES[kind]
    for j, x in enumerate(v):
        if type(x) is not int or not lo <= x <= hi:
            _int(x, kind, f"{what}[{j}]")
    return v


def _str(v, what: str) -> str:
    if not isinstance(v, str):
        raise _Bad(f"{what}: expected a string, got {_jtype(v)}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise _Bad(f"{what}: string holds a lone surrogate (\\ud800-\\udfff), which is not valid Unicode") from None
    return v


def _bytes(v, what: str) -> bytes:
    if not isinstance(v, str):
        raise _Bad(f"{what}: expected a base64 string, got {_jtype(v)}")
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        raise _Bad(f"{what}: expected a base64 string, got {_jtype(v)}") from None


_NAN_RE = re.compile(r"NaN:0x([0-9a-fA-F]+)\Z")
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _real(v, kind: str, what: str) -> float:
    if type(v) is float:
        x = v
    elif type(v) is int:
        try:
            x = float(v)
        except OverflowError:
            raise _Bad(f"{what}: {v} is too large for a {kind}") from None
    elif isinstance(v, str):
        if v in _SPECIAL:
            return _SPECIAL[v]
        m = _NAN_RE.match(v)
        width = 8 if kind == "float" else 16
        if m and len(m.group(1)) == width:
            bits = int(m.group(1), 16)
            if kind == "float":
                x = float(np.array([bits], np.uint32).view(np.float32)[0])
            else:
                x = struct.unpack("<d", struct.pack("<Q", bits))[0]
            if x == x:
                raise _Bad(f"{what}: {v!r} is not the bit pattern of a NaN")
            return x
        raise _Bad(
            f'{what}: expected a number or "NaN", "Infinity", "-Infinity", '
            f'"NaN:0x<{width} hex digits>", got {_jtype(v)}'
        )
    else:
        raise _Bad(f"{what}: expected a number, got {_jtype(v)}")
    if kind == "float" and math.isfinite(x) and abs(x) >= _FLT_OVERFLOW:
        raise _Bad(f"{what}: {v!r} is out of range for a 32-bit float")
    return x


def _scalar(kind: str, v, what: str) -> Any:
    if kind in _RANGES:
        return _int(v, kind, what)
    if kind in ("double", "float"):
        return _real(v, kind, what)
    if kind == "bool":
        if type(v) is not bool:
            raise _Bad(f"{what}: expected true or false, got {_jtype(v)}")
        return v
    if kind == "string":
        return _str(v, what)
    return _bytes(v, what)


def _merge_unknown(msg, v, what: str) -> None:
    raw = _bytes(v, what)
    if not raw:
        return
    probe = type(msg)()
    try:
        probe.MergeFromString(raw)
    except Exception as exc:
        raise _Bad(f"{what}: not valid protobuf wire data ({exc})") from None
    if _own_unknown(probe) != probe.SerializeToString():
        raise _Bad(f"{what}: holds fields the schema knows; give them as JSON keys instead")
    msg.MergeFromString(raw)


_MEMBER_LIST = ", ".join(sorted(ATTR_MEMBERS, key=lambda m: ATTR_MEMBERS[m][0]))


def _attr_pb(d, msg, what: str) -> None:
    if not isinstance(d, dict):
        raise _Bad(f"{what}: expected an attribute object, got {_jtype(d)}")
    if isinstance(d.get("name"), str):
        what = f"{what} ({d['name']!r})"
    member = None
    unknown = None
    for k, v in d.items():
        if k == "name":
            msg.name = _str(v, f"{what}.name")
        elif k == "doc_string":
            msg.doc_string = _str(v, f"{what}.doc_string")
        elif k == "unknown_fields":
            unknown = v
        elif k in ATTR_MEMBERS:
            if member is not None:
                raise _Bad(f"{what}: has two value members, {member!r} and {k!r}; expected at most one")
            member = k
            _num, kind, is_list = ATTR_MEMBERS[k]
            w = f"{what}.{k}"
            if is_list:
                lst_unknown = None
                if isinstance(v, dict):
                    extra = set(v) - {"values", "unknown_fields"}
                    if extra or "values" not in v:
                        raise _Bad(f"{w}: expected a list (or an object with 'values' and 'unknown_fields')")
                    lst_unknown, v = v.get("unknown_fields"), v["values"]
                if not isinstance(v, list):
                    raise _Bad(f"{w}: expected a list, got {_jtype(v)}")
                lst = getattr(msg, k)
                if kind in _RANGES:
                    lst.values.extend(_ints(v, kind, w))
                else:
                    lst.values.extend([_scalar(kind, x, f"{w}[{j}]") for j, x in enumerate(v)])
                lst.SetInParent()
                if lst_unknown is not None:
                    _merge_unknown(lst, lst_unknown, f"{w}.unknown_fields")
            else:
                setattr(msg, k, _scalar(kind, v, w))
        else:
            raise _Bad(
                f"{what}: unknown key {k!r}; expected name, doc_string, unknown_fields or one value "
                f"member ({_MEMBER_LIST})"
            )
    if unknown is not None:
        _merge_unknown(msg, unknown, f"{what}.unknown_fields")


def _io_pb(d, msg, what: str) -> None:
    if not isinstance(d, dict):
        raise _Bad(f"{what}: expected an object with values, shapes, types, got {_jtype(d)}")
    msg.SetInParent()
    for k, v in d.items():
        if k in ("values", "shapes", "types"):
            setattr(msg, k, _str(v, f"{what}.{k}"))
        elif k == "unknown_fields":
            _merge_unknown(msg, v, f"{what}.unknown_fields")
        else:
            raise _Bad(f"{what}: unknown key {k!r}; expected values, shapes, types or unknown_fields")


def _node_type(v) -> int:
    if type(v) is int:
        return _int(v, "int32", "type")
    if isinstance(v, str):
        try:
            return int(NodeType[v])
        except KeyError:
            pass
        key = v.strip().upper()
        key = key if key.endswith("_NODE") else key + "_NODE"
        if key in NodeType.__members__:
            return int(NodeType[key])
        raise _Bad(
            f"type: unknown node type {v!r}; expected one of {', '.join(t.name for t in NodeType)} or an integer"
        )
    raise _Bad(f"type: expected a node type name or an integer, got {_jtype(v)}")


def _node_from_json(d) -> Any:
    """A protobuf Node message from a node JSON object (raises `_Bad` on a misfit)."""
    if not isinstance(d, dict):
        raise _Bad(f"expected a node object, got {_jtype(d)}")
    if "id" not in d:
        raise _Bad("missing 'id'")
    m = pb.Node()
    for k, v in d.items():
        if k == "id":
            m.id = _int(v, "uint64", "id")
        elif k == "name":
            m.name = _str(v, "name")
        elif k == "type":
            m.type = _node_type(v)
        elif k in ("ctrl_deps", "data_deps"):
            getattr(m, k).extend(_ints(v, "uint64", k))
        elif k in ("start_time_micros", "duration_micros"):
            setattr(m, k, _int(v, "uint64", k))
        elif k in ("inputs", "outputs"):
            if v is not None:
                _io_pb(v, getattr(m, k), k)
        elif k == "attr":
            _attrs_pb(v, m.attr, "attr")
        elif k != "unknown_fields":
            raise _Bad(f"unknown key {k!r}; expected {', '.join(_NODE_KEYS)}")
    if "unknown_fields" in d:
        _merge_unknown(m, d["unknown_fields"], "unknown_fields")
    return m


def _attrs_pb(v, container, where: str) -> None:
    if not isinstance(v, list):
        raise _Bad(f"{where}: expected a list of attribute objects, got {_jtype(v)}")
    for j, a in enumerate(v):
        _attr_pb(a, container.add(), f"{where}[{j}]")


def _metadata_from_json(d):
    if d is None:
        return pb.GlobalMetadata()
    if not isinstance(d, dict):
        raise _Bad(f"metadata: expected an object, got {_jtype(d)}")
    meta = pb.GlobalMetadata()
    for k, v in d.items():
        if k == "version":
            meta.version = _str(v, "metadata.version")
        elif k == "attr":
            _attrs_pb(v, meta.attr, "metadata.attr")
        elif k != "unknown_fields":
            raise _Bad(f"metadata: unknown key {k!r}; expected version, attr, unknown_fields")
    if "unknown_fields" in d:
        _merge_unknown(meta, d["unknown_fields"], "metadata.unknown_fields")
    return meta


def _check_header(h: dict, lines: bool, so_far: bool = False) -> None:
    """Validate the header keys; `so_far` checks only the keys seen so far."""
    allowed = {"format", "version", "metadata"} | (set() if lines else {"nodes"})
    for k in h:
        if k not in allowed:
            raise _Bad(f"header: unknown key {k!r}; expected {', '.join(sorted(allowed))}")
    if "format" not in h:
        if so_far:
            return
        raise _Bad(f'not a chakra trace JSON file: the header has no "format": "{FORMAT}"')
    if h["format"] != FORMAT:
        raise _Bad(f'not a chakra trace JSON file: format is {_jtype(h["format"])}, expected "{FORMAT}"')
    if "version" not in h and so_far:
        return
    v = h.get("version")
    if type(v) is not int:
        raise _Bad(f"header: version must be the integer {VERSION}, got {_jtype(v)}")
    if v != VERSION:
        raise _Bad(f"unsupported version {v} (this reader knows version {VERSION})")


class _Counting(io.RawIOBase):
    """Counts the bytes read through it (for progress)."""

    def __init__(self, raw, progress: Callable[[int], None] | None):
        self._raw, self._progress, self.n = raw, progress, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._raw.readinto(b)
        if n:
            self.n += n
            if self._progress is not None:
                self._progress(self.n)
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


_WS = re.compile(r"[ \t\n\r]*")


class _Text:
    """An incremental reader of JSON values from a text stream, tracking lines and columns."""

    def __init__(self, f, path: str):
        self.f, self.path = f, path
        self.buf, self.pos, self.eof = "", 0, False
        self.line0, self.col0 = 1, 0  # position of buf[0]
        self.dec = json.JSONDecoder()

    def fill(self, want: int | None = None) -> bool:
        """Read more text (dropping what was consumed); False at end of file."""
        if self.eof:
            return False
        if self.pos:
            done = self.buf[: self.pos]
            nl = done.count("\n")
            self.line0 += nl
            self.col0 = len(done) - done.rfind("\n") - 1 if nl else self.col0 + len(done)
            self.buf, self.pos = self.buf[self.pos :], 0
        try:
            s = self.f.read(want or _TEXT_BLOCK)
        except UnicodeDecodeError as e:
            raise TraceFormatError(self.path, f"not UTF-8 text ({e.reason} near line {self.where()[0]})") from None
        if not s:
            self.eof = True
            return False
        self.buf += s
        return True

    def where(self, pos: int | None = None) -> tuple[int, int]:
        pos = self.pos if pos is None else pos
        nl = self.buf.count("\n", 0, pos)
        if nl:
            return self.line0 + nl, pos - self.buf.rfind("\n", 0, pos)
        return self.line0, self.col0 + pos + 1

    def error(self, reason: str, pos: int | None = None) -> TraceFormatError:
        line, col = self.where(pos)
        return TraceFormatError(self.path, f"line {line} column {col}: {reason}")

    def peek(self) -> str:
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.peek()
        if not c or c not in chars:
            got = "end of file" if not c else repr(c)
            raise self.error(f"invalid JSON: expected {what}, got {got}")
        self.pos += 1
        return c

    def value(self, context: str = "") -> Any:
        self.peek()
        while True:
            try:
                v, end = self.dec.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                incomplete = e.pos >= len(self.buf) - 64 or e.msg.startswith("Unterminated string")
                if not self.eof and incomplete:
                    self.fill(max(_TEXT_BLOCK, len(self.buf) - self.pos))  # shifts the buffer: parse again
                    continue
                raise self.error(f"invalid JSON{context}: {e.msg}", e.pos) from None
            if not self.eof and (end >= len(self.buf) or (type(v) in (int, float) and end > len(self.buf) - 64)):
                self.fill(max(_TEXT_BLOCK, len(self.buf) - self.pos))  # a number could go on in the next block
                continue
            self.pos = end
            return v

    def line(self) -> str | None:
        """The rest of the current line (None at end of file)."""
        while True:
            nl = self.buf.find("\n", self.pos)
            if nl >= 0:
                s = self.buf[self.pos : nl]
                self.pos = nl + 1
                return s
            if not self.fill():
                if self.pos >= len(self.buf):
                    return None
                s = self.buf[self.pos :]
                self.pos = len(self.buf)
                return s


def _node_where(d, where: str) -> tuple[str, int | None]:
    node_id = d.get("id") if isinstance(d, dict) else None
    if type(node_id) is int and 0 <= node_id <= _U64_MAX:
        return f"{where} (node id {node_id})", node_id
    return where, None


def _node_error(path: str, d, where: str, reason: str) -> TraceFormatError:
    loc, node_id = _node_where(d, where)
    err = TraceFormatError(path, f"{loc}: {reason}")
    err.node_id = node_id
    return err


def _iter_json_nodes(t: _Text, path: str) -> Iterator[tuple[str, Any]]:
    """Yield ("header", dict) and ("node", (where, dict)) events of either layout."""
    if t.peek() == "":
        raise TraceFormatError(path, 'empty file: expected a JSON object with "format": "chakra-trace-json"')
    t.expect("{", "a JSON object (the chakra-trace-json header)")
    header: dict[str, Any] = {}
    seen_nodes = False
    if t.peek() == "}":
        t.pos += 1
    else:
        while True:
            key = t.value(" in the header")
            if not isinstance(key, str):
                raise t.error("invalid JSON: expected an object key")
            t.expect(":", "':'")
            if key == "nodes":
                if seen_nodes:
                    raise t.error("header: 'nodes' appears twice")
                try:
                    _check_header(header, lines=False, so_far=True)
                except _Bad as e:
                    raise TraceFormatError(path, str(e)) from None
                seen_nodes = True
                if t.peek() != "[":
                    raise t.error("'nodes': expected a list of node objects")
                t.pos += 1
                i = 0
                if t.peek() == "]":
                    t.pos += 1
                else:
                    while True:
                        node = t.value(f" in nodes[{i}]")
                        yield "node", (f"nodes[{i}]", node)
                        i += 1
                        if t.expect(",]", "',' or ']' after a node") == "]":
                            break
            else:
                header[key] = t.value(f" in the header value of {key!r}")
            if t.expect(",}", "',' or '}' in the header") == "}":
                break
    if seen_nodes:
        if t.peek() != "":
            raise t.error("extra data after the JSON document")
        try:
            _check_header(header, lines=False)
        except _Bad as e:
            raise TraceFormatError(path, str(e)) from None
        yield "header", header
        return
    # JSON Lines: the header object was the first line; one node per line follows.
    try:
        _check_header(header, lines=True)
    except _Bad as e:
        raise TraceFormatError(path, str(e)) from None
    yield "header", header
    line_no, _ = t.where()
    rest = t.line()
    if rest is not None and rest.strip():
        raise TraceFormatError(
            path, f"line {line_no}: expected a newline after the header object (JSON Lines holds one object per line)"
        )
    while True:
        line_no += 1
        s = t.line()
        if s is None:
            return
        if not s.strip():
            continue
        try:
            node = json.loads(s)
        except json.JSONDecodeError as e:
            raise TraceFormatError(path, f"line {line_no} column {e.colno}: invalid JSON: {e.msg}") from None
        except RecursionError:
            raise TraceFormatError(path, f"line {line_no}: JSON nested too deeply") from None
        yield "node", (f"line {line_no}", node)


def read_json(
    path: str | os.PathLike, *, limits: Limits | None = None, progress: Callable[[int], None] | None = None
) -> Trace:
    """Read a trace written by `write_json` (either layout; gzip sniffed by its magic bytes).

    Raises TraceFormatError naming the file, the node (line for JSON Lines, index in the
    `nodes` array for a document, plus the node id when readable) and what was expected.
    """
    path = os.fspath(path)
    raw, _gz = open_binary(path, limits)
    counting = _Counting(raw, progress)
    f = io.TextIOWrapper(io.BufferedReader(counting, 1 << 16), encoding="utf-8-sig", newline="")
    chunks: list[Trace] = []
    payloads: list[bytes] = []
    size = 0
    meta = pb.GlobalMetadata()
    with f:
        t = _Text(f, path)
        try:
            for kind, item in _iter_json_nodes(t, path):
                if kind == "header":
                    try:
                        meta = _metadata_from_json(item.get("metadata"))
                    except _Bad as e:
                        raise TraceFormatError(path, f"header: {e}") from None
                    continue
                where, d = item
                try:
                    m = _node_from_json(d)
                    payload = m.SerializeToString()
                except _Bad as e:
                    raise _node_error(path, d, where, str(e)) from None
                except (ValueError, TypeError) as e:  # protobuf refused a value we did not foresee
                    raise _node_error(path, d, where, f"{type(e).__name__}: {e}") from None
                payloads.append(payload)
                size += len(payload)
                if len(payloads) >= _READ_CHUNK or size >= _READ_CHUNK_BYTES:
                    chunks.append(Trace.from_messages(payloads))
                    payloads, size = [], 0
        except RecursionError:
            raise TraceFormatError(path, "JSON nested too deeply") from None
    if payloads or not chunks:
        chunks.append(Trace.from_messages(payloads))
    trace = chunks[0] if len(chunks) == 1 else Trace.concat(chunks)
    trace.metadata = meta
    return trace
