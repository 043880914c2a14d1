"""A node as plain Python objects and as a protobuf message, and the attributes kept as columns.

`Node`/`Attribute`/`IOInfo` are for building and editing traces by hand; `COLUMN_ATTRS` lists
the attributes simulators and analyzers read, which `Trace` keeps as typed columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import proto as pb
from .enums import ATTR_MEMBER, Attr, NodeType, parse_collective, parse_node_type
from .proto import ATTR_MEMBERS


@dataclass(frozen=True)
class ColumnAttr:
    name: str
    member: str  # oneof member other tools read
    dtype: Any
    bit: int


COLUMN_ATTRS: tuple[ColumnAttr, ...] = tuple(
    ColumnAttr(n, m, d, i)
    for i, (n, m, d) in enumerate(
        [
            (Attr.IS_CPU_OP, "bool_val", np.bool_),
            (Attr.NUM_OPS, "int64_val", np.int64),
            (Attr.TENSOR_SIZE, "uint64_val", np.uint64),
            (Attr.COMM_TYPE, "int64_val", np.int64),
            (Attr.COMM_SIZE, "int64_val", np.int64),
            (Attr.COMM_PRIORITY, "int32_val", np.int32),
            (Attr.COMM_SRC, "int32_val", np.int32),
            (Attr.COMM_DST, "int32_val", np.int32),
            (Attr.COMM_TAG, "int32_val", np.int32),
            (Attr.PG_NAME, "string_val", np.int32),  # code into Trace.groups
        ]
    )
)
COLUMN_BY_NAME = {c.name: c for c in COLUMN_ATTRS}


@dataclass
class Attribute:
    """One attribute as written on the wire: `member` is the protobuf oneof member."""

    name: str
    value: Any
    member: str | None = None  # inferred from the value (or the vocabulary) when None
    doc: str = ""


@dataclass
class IOInfo:
    values: str = ""
    shapes: str = ""
    types: str = ""


@dataclass
class Node:
    """A node as a plain Python object, for building and editing traces by hand."""

    id: int
    name: str = ""
    type: int = NodeType.COMP_NODE
    ctrl_deps: list[int] = field(default_factory=list)
    data_deps: list[int] = field(default_factory=list)
    start_time_micros: int = 0
    duration_micros: int = 0
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    attrs: list[Attribute] = field(default_factory=list)
    unknown_fields: bytes = b""  # wire fields this schema does not know, kept verbatim

    def attr(self, name: str, default: Any = None) -> Any:
        for a in self.attrs:
            if a.name == name:
                return a.value
        return default


def attribute_value(a) -> tuple[Any, str | None]:
    member = a.WhichOneof("value")
    if member is None:
        return None, None
    v = getattr(a, member)
    if ATTR_MEMBERS[member][2]:
        v = list(v.values)
    return v, member


def pb_to_node(m) -> Node:
    attrs = []
    for a in m.attr:
        value, member = attribute_value(a)
        attrs.append(Attribute(a.name, value, member, a.doc_string))
    io = {}
    for key in ("inputs", "outputs"):
        if m.HasField(key):
            x = getattr(m, key)
            io[key] = IOInfo(x.values, x.shapes, x.types)
    return Node(
        id=m.id,
        name=m.name,
        type=m.type,
        ctrl_deps=list(m.ctrl_deps),
        data_deps=list(m.data_deps),
        start_time_micros=m.start_time_micros,
        duration_micros=m.duration_micros,
        inputs=io.get("inputs"),
        outputs=io.get("outputs"),
        attrs=attrs,
        unknown_fields=_unknown_bytes(m),
    )


def _unknown_bytes(m) -> bytes:
    """Wire bytes of fields the schema does not know (kept through edits)."""
    known = pb.Node()
    known.CopyFrom(m)
    try:
        known.DiscardUnknownFields()
    except AttributeError:  # pragma: no cover
        return b""
    full = m.SerializeToString()
    if full == known.SerializeToString():
        return b""
    kb = known.SerializeToString()
    return full[len(kb) :] if full.startswith(kb) else b""


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def infer_member(name: str, value: Any) -> str:
    """The oneof member to write for a Python value (the vocabulary's member for known names)."""
    if name in ATTR_MEMBER:
        return ATTR_MEMBER[name]
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
        if not items:
            return "int64_list"
        scalar = infer_member("", items[0])
        if scalar == "int64_val" and any(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x > _INT64_MAX for x in items
        ):
            scalar = "uint64_val"
        return scalar[:-4] + "_list"
    if isinstance(value, (bool, np.bool_)):
        return "bool_val"
    if isinstance(value, (int, np.integer)):
        return "int64_val" if _INT64_MIN <= int(value) <= _INT64_MAX else "uint64_val"
    if isinstance(value, (float, np.floating)):
        return "double_val"
    if isinstance(value, str):
        return "string_val"
    if isinstance(value, (bytes, bytearray)):
        return "bytes_val"
    raise TypeError(f"attribute {name!r}: cannot store a value of type {type(value).__name__}")


def _coerce(name: str, value: Any, member: str | None) -> Any:
    """Accept collective names for comm_type, unless the value is explicitly stored as a string."""
    if (
        name == Attr.COMM_TYPE
        and isinstance(value, str)
        and (member is None or member.endswith("int64_val") or member.endswith("int32_val"))
    ):
        return parse_collective(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def attribute_to_pb(a: Attribute, msg=None):
    msg = msg if msg is not None else pb.AttributeProto()
    msg.name = a.name
    if a.doc:
        msg.doc_string = a.doc
    if a.value is None and a.member is None:
        return msg
    value = _coerce(a.name, a.value, a.member)
    member = a.member or infer_member(a.name, value)
    if member not in ATTR_MEMBERS:
        raise ValueError(f"attribute {a.name!r}: unknown member {member!r}")
    try:
        if ATTR_MEMBERS[member][2]:
            getattr(msg, member).values.extend(list(value))
            if not list(value):
                getattr(msg, member).SetInParent()
        else:
            setattr(msg, member, value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"attribute {a.name!r}: value {value!r} does not fit {member}: {e}") from None
    return msg


_ATTR_TAG = bytes([(10 << 3) | 2])  # Node.attr: field 10, length-delimited (the last field of a Node)
_CACHEABLE = (str, int, float, bool, type(None))


def _head_pb(node: Node):
    """A Node message of everything but the attributes (and unknown fields)."""
    m = pb.Node(
        id=int(node.id),
        name=node.name,
        type=parse_node_type(node.type),
        start_time_micros=int(node.start_time_micros),
        duration_micros=int(node.duration_micros),
    )
    m.ctrl_deps.extend(int(x) for x in node.ctrl_deps)
    m.data_deps.extend(int(x) for x in node.data_deps)
    for key in ("inputs", "outputs"):
        io = getattr(node, key)
        if io is not None:
            getattr(m, key).CopyFrom(pb.IOInfo(values=io.values, shapes=io.shapes, types=io.types))
    return m


def node_bytes(node: Node, cache: dict) -> bytes:
    """``node_to_pb(node).SerializeToString()``, each attribute serialized once per distinct
    (name, doc, member, value) in `cache`: the attributes are a Node's last field, so the node
    is its other fields' bytes then its attributes' (a builder's million nodes repeat a few
    hundred attributes: three quarters of the time went to them)."""
    if node.unknown_fields:
        return node_to_pb(node).SerializeToString()
    m = _head_pb(node)
    parts = [m.SerializeToString()]
    for a in node.attrs:
        if not isinstance(a, Attribute):
            a = Attribute(*a) if isinstance(a, tuple) else a
        v = a.value
        k = None
        if type(v) in _CACHEABLE:  # (by type: True == 1; a float by its bits: -0.0 == 0.0)
            k = (a.name, a.doc, a.member, type(v), v.hex() if type(v) is float else v)
        b = cache.get(k) if k is not None else None
        if b is None:
            body = attribute_to_pb(a).SerializeToString()
            b = _ATTR_TAG + _varint(len(body)) + body
            if k is not None:
                cache[k] = b
        parts.append(b)
    return b"".join(parts)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def node_to_pb(node: Node):
    m = _head_pb(node)
    for a in node.attrs:
        if not isinstance(a, Attribute):
            a = Attribute(*a) if isinstance(a, tuple) else a
        attribute_to_pb(a, m.attr.add())
    if node.unknown_fields:
        m.MergeFromString(node.unknown_fields)
    return m
