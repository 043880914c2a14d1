"""The reader: JSON values to protobuf Node messages and columnar chunks, every field checked
against its type and range, a misfit reported with the node (or header key) it is in."""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import os
import re
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import TraceFormatError
from ...schema import proto as pb
from ...schema.enums import NodeType
from ...schema.proto import ATTR_MEMBERS
from ...schema.trace import Trace
from ..stream import Limits, open_binary
from .scanner import _Counting, _events, _Text
from .spec import FORMAT, VERSION, _own_unknown

_READ_CHUNK = 4096  # nodes decoded into a columnar chunk at a time
_READ_CHUNK_BYTES = 32 << 20  # ... or fewer, once their messages reach this size

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
_FLT_OVERFLOW = 2.0**128 - 2.0**103  # finite doubles from here up round to a float32 infinity


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


def _check_header(h: dict, lines: bool, so_far: bool) -> None:
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
            for kind, item in _events(t, path):
                if kind != "node":  # the header: checked as soon as each part of it is seen
                    try:
                        _check_header(item, lines=kind == "lines-header", so_far=kind == "before-nodes")
                    except _Bad as e:
                        raise TraceFormatError(path, str(e)) from None
                    if kind != "before-nodes":
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
