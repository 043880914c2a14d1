"""Hypothesis strategies for random Chakra traces, built the way users build them:
`Node` / `Attribute` / `IOInfo` objects through `Trace.from_nodes`.

They aim at the corners of the wire format: uint64 ids near 2**64-1, unicode and empty names,
node types outside the enum, dependencies on missing nodes, every oneof member of an
attribute (lists, empty lists, NaN / infinities / NaN payloads, float32 values), doc strings,
the column attributes with their canonical member and with another one, repeated attribute
names, and unknown wire fields on nodes and metadata.
"""

from __future__ import annotations

import math
import struct
from functools import cache

import numpy as np
from hypothesis import strategies as st

from chakra_trace.schema import proto as pb
from chakra_trace.schema.enums import ATTR_MEMBER, NodeType
from chakra_trace.schema.node import COLUMN_ATTRS, Attribute, IOInfo, Node, attribute_to_pb, infer_member
from chakra_trace.schema.proto import ATTR_MEMBERS
from chakra_trace.schema.trace import Trace
from chakra_trace.schema.wire import encode_varint_int

U64_MAX = (1 << 64) - 1

_INT_RANGES = {
    "int32": (-(1 << 31), (1 << 31) - 1),
    "sint32": (-(1 << 31), (1 << 31) - 1),
    "sfixed32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "sint64": (-(1 << 63), (1 << 63) - 1),
    "sfixed64": (-(1 << 63), (1 << 63) - 1),
    "uint32": (0, (1 << 32) - 1),
    "fixed32": (0, (1 << 32) - 1),
    "uint64": (0, U64_MAX),
    "fixed64": (0, U64_MAX),
}


def _double_from_bits(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _float32(bits: int) -> float:
    return float(np.array([bits], np.uint32).view(np.float32)[0])


# NaNs with the sign bit set or a payload, and the usual suspects.
ODD_DOUBLES = [
    math.nan,
    -math.nan,
    math.inf,
    -math.inf,
    -0.0,
    0.0,
    5e-324,
    1.7976931348623157e308,
    _double_from_bits(0xFFF8000000000000),
    _double_from_bits(0x7FF8000000000001),
    _double_from_bits(0x7FF4000000000000),
    0.1,
    1 / 3,
]
ODD_FLOATS = [
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    _float32(0x7FC00001),
    _float32(0xFFC00000),
    _float32(0x00000001),
    _float32(0x7F7FFFFF),
    _float32(0x3DCCCCCD),
    _float32(0x3EAAAAAB),
]


@cache
def ids() -> st.SearchStrategy[int]:
    return st.one_of(
        st.integers(0, 64),
        st.integers(U64_MAX - 16, U64_MAX),
        st.integers(0, U64_MAX),
        st.sampled_from([0, 1, (1 << 63) - 1, 1 << 63, (1 << 32) - 1, 1 << 32]),
    )


@cache
def texts(max_size: int = 12) -> st.SearchStrategy[str]:
    return st.one_of(
        st.just(""),
        st.text(max_size=max_size),
        st.sampled_from(["aten::mm", "ncclKernel_AllReduce", "Ünïcødé ✓ 😀", 'a\nb"c\\', "\x00", "\u2028"]),
    )


@cache
def scalars(kind: str) -> st.SearchStrategy:
    if kind in _INT_RANGES:
        lo, hi = _INT_RANGES[kind]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]))
    if kind == "double":
        return st.one_of(st.floats(), st.sampled_from(ODD_DOUBLES))
    if kind == "float":
        return st.one_of(st.floats(width=32), st.sampled_from(ODD_FLOATS))
    if kind == "bool":
        return st.booleans()
    if kind == "string":
        return texts()
    if kind == "bytes":
        return st.binary(max_size=12)
    raise ValueError(kind)


@cache
def member_values(member: str) -> st.SearchStrategy:
    _num, kind, is_list = ATTR_MEMBERS[member]
    if is_list:
        return st.lists(scalars(kind), max_size=4)  # includes the empty list
    return scalars(kind)


COLUMN_NAMES = [c.name for c in COLUMN_ATTRS]
ATTR_NAMES = COLUMN_NAMES + sorted(set(ATTR_MEMBER) - set(COLUMN_NAMES)) + ["", "foo", "schema"]


@st.composite
def attributes(draw, names=None) -> Attribute:
    if names is None:
        name = draw(st.sampled_from(ATTR_NAMES) | texts(8))
    else:
        name = draw(st.sampled_from(names))
    doc = draw(st.one_of(st.just(""), st.just(""), texts(6)))
    canonical = ATTR_MEMBER.get(name)
    choice = draw(st.integers(0, 9))
    if choice == 0:  # no value at all
        return Attribute(name, None, None, doc)
    if canonical is not None and choice <= 5:
        member = canonical  # the member consumers read (a column for the column attributes)
    else:
        member = draw(
            st.one_of(
                st.sampled_from(sorted(ATTR_MEMBERS)),
                st.sampled_from(sorted(ATTR_MEMBERS)),
                st.sampled_from(["double_val", "double_list", "float_val", "float_list"]),
            )
        )
    value = draw(member_values(member))
    explicit = member
    try:
        if infer_member(name, value) == member and draw(st.booleans()):
            explicit = None  # let the codec infer the member
    except TypeError:
        pass
    return Attribute(name, value, explicit, doc)


@st.composite
def unknown_field(draw, min_number: int) -> bytes:
    number = draw(st.one_of(st.integers(min_number, min_number + 40), st.integers(min_number, (1 << 29) - 1)))
    wtype = draw(st.sampled_from([0, 1, 2, 5]))
    key = encode_varint_int((number << 3) | wtype)
    if wtype == 0:
        return key + encode_varint_int(draw(st.integers(0, U64_MAX)))
    if wtype == 1:
        return key + draw(st.binary(min_size=8, max_size=8))
    if wtype == 5:
        return key + draw(st.binary(min_size=4, max_size=4))
    payload = draw(st.binary(max_size=10))
    return key + encode_varint_int(len(payload)) + payload


@cache
def unknown_fields(min_number: int) -> st.SearchStrategy[bytes]:
    """Wire bytes of fields the schema does not define (numbers >= min_number), or b""."""
    return st.one_of(
        st.just(b""),
        st.just(b""),
        st.just(b"\x58\x05"),  # Node field 11 (reserved upstream), varint 5
        st.lists(unknown_field(min_number), min_size=1, max_size=3).map(b"".join),
    )


@cache
def io_infos() -> st.SearchStrategy[IOInfo | None]:
    return st.one_of(st.none(), st.builds(IOInfo, texts(16), texts(16), texts(16)))


@st.composite
def attribute_lists(draw) -> list[Attribute]:
    attrs = draw(st.lists(attributes(), max_size=6))
    if attrs and draw(st.integers(0, 3)) == 0:  # the same attribute twice
        a = draw(st.sampled_from(attrs))
        attrs.insert(draw(st.integers(0, len(attrs))), Attribute(a.name, a.value, a.member, a.doc))
    if draw(st.integers(0, 3)) == 0:  # a column attribute repeated with other values / members
        name = draw(st.sampled_from(COLUMN_NAMES))
        attrs += draw(st.lists(attributes(names=[name]), min_size=1, max_size=3))
    return attrs


@st.composite
def nodes(draw, id_pool: list[int]) -> Node:
    dep = st.sampled_from(id_pool) | ids() if id_pool else ids()
    return Node(
        id=draw(st.sampled_from(id_pool)) if id_pool and draw(st.booleans()) else draw(ids()),
        name=draw(texts()),
        type=draw(
            st.one_of(
                st.sampled_from(list(NodeType)),
                st.sampled_from([8, 9, 10, 1000, -1, (1 << 31) - 1, -(1 << 31)]),
                st.integers(-(1 << 31), (1 << 31) - 1),
            )
        ),
        ctrl_deps=draw(st.lists(dep, max_size=3)),
        data_deps=draw(st.lists(dep, max_size=5)),
        start_time_micros=draw(st.one_of(st.just(0), st.integers(0, U64_MAX))),
        duration_micros=draw(st.one_of(st.just(0), st.integers(0, 10**6), st.integers(0, U64_MAX))),
        inputs=draw(io_infos()),
        outputs=draw(io_infos()),
        attrs=draw(attribute_lists()),
        unknown_fields=draw(unknown_fields(11)),
    )


@st.composite
def metadatas(draw):
    meta = pb.GlobalMetadata(version=draw(texts(8)))
    for a in draw(st.lists(attributes(), max_size=4)):
        attribute_to_pb(a, meta.attr.add())
    extra = draw(unknown_fields(3))
    if extra:
        meta.MergeFromString(extra)
    return meta


@st.composite
def node_lists(draw, max_nodes: int = 8) -> list[Node]:
    pool = draw(st.lists(ids(), max_size=max_nodes))
    return draw(st.lists(nodes(pool), max_size=max_nodes))


@st.composite
def traces(draw, max_nodes: int = 8) -> Trace:
    """A random Trace (0..max_nodes nodes) with random GlobalMetadata."""
    return Trace.from_nodes(draw(node_lists(max_nodes)), metadata=draw(metadatas()))
