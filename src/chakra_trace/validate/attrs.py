"""Attributes of the Chakra vocabulary stored outside the columns (in a node's extras): where they
are, and whether they use the member other tools read."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schema.codec import attr_fields
from ..schema.enums import ATTR_MEMBER
from ..schema.proto import ATTR_MEMBERS
from ..schema.trace import Trace
from ..schema.wire import I64, WT_LEN, WT_VARINT, equals_literal

KNOWN = list(ATTR_MEMBER)


@dataclass
class ExtraAttrs:
    """Known attributes found in a trace's extras: row, vocabulary index, member field number."""

    rows: np.ndarray
    name: np.ndarray  # index into KNOWN
    canonical: np.ndarray  # written with the member other tools read
    member: np.ndarray  # field number of the value member (0: no value)

    def present(self, attr: str) -> np.ndarray:
        return self.rows[self.name == KNOWN.index(attr)]


def extra_attrs(trace: Trace) -> ExtraAttrs:
    """Scan the extras (vectorized, as `extra_attr_array` does) for the attribute vocabulary."""
    e = np.zeros(0, np.int64)
    empty = ExtraAttrs(e, e, np.zeros(0, bool), e)
    if trace.extra.size == 0:
        return empty
    buf = trace.extra
    f, a, sub = attr_fields(trace)
    if not a.size:
        return empty
    nr = np.flatnonzero((sub.number == 1) & (sub.wtype == WT_LEN))
    name_idx = np.full(a.size, -1, np.int64)
    nd, nl = sub.data[nr], sub.value[nr].astype(I64)
    for k, name in enumerate(KNOWN):
        hit = equals_literal(buf, nd, nl, name.encode())
        name_idx[sub.msg[nr[hit]]] = k
    known = np.flatnonzero(name_idx >= 0)
    if not known.size:
        return empty
    # the oneof member: the last value field of the attribute (protobuf semantics); 0 = no value
    vr = np.flatnonzero(sub.number >= 3)
    member_num = np.zeros(a.size, np.int64)
    member_wt = np.zeros(a.size, np.int8)
    member_num[sub.msg[vr]] = sub.number[vr]
    member_wt[sub.msg[vr]] = sub.wtype[vr]
    want_num = np.array([ATTR_MEMBERS[ATTR_MEMBER[n]][0] for n in KNOWN], np.int64)
    want_wt = np.array(
        [
            WT_LEN
            if (ATTR_MEMBERS[ATTR_MEMBER[n]][2] or ATTR_MEMBERS[ATTR_MEMBER[n]][1] in ("string", "bytes"))
            else WT_VARINT
            for n in KNOWN
        ],
        np.int8,
    )
    nk = name_idx[known]
    canonical = (member_num[known] == want_num[nk]) & (member_wt[known] == want_wt[nk])
    return ExtraAttrs(f.msg[a[known]].astype(np.int64), nk, canonical, member_num[known])


def present(t: Trace, extra: ExtraAttrs, attr: str) -> np.ndarray:
    """Nodes carrying a known attribute, as a column or in the extras (any member)."""
    m = t.has(attr)
    rows = extra.present(attr)
    if rows.size:
        m = m.copy()
        m[rows] = True
    return m
