"""Node messages <-> columnar `Trace`, many nodes per numpy operation.

Decoding sorts each field of each node into a column or, when it is anything else
(inputs/outputs, other attributes, a known attribute written with an unexpected member or a
doc string, unknown fields), keeps its exact bytes in `extra`. Encoding writes the columns
in field-number order with the extras spliced in where protobuf would put them, so a file we
write re-serializes byte-identically through the protobuf runtime.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import TraceFormatError
from . import proto as pb
from .node import COLUMN_ATTRS
from .proto import ATTR_MEMBERS
from .wire import (
    I64,
    U8,
    U64,
    WT_LEN,
    WT_VARINT,
    Rows,
    WireError,
    _native,
    _native_call,
    decode_packed_varints,
    encode_key,
    encode_varint_int,
    encode_varints,
    equals_literal,
    gather_rows,
    intern_bytes,
    ranges,
    rows_from_bytes,
    scan_fields,
)

if TYPE_CHECKING:
    from .trace import Trace


@dataclass
class Decoded:
    """Decoded Node messages as `Trace` constructor arguments (`Trace.decode` builds the trace)."""

    n: int
    columns: dict[str, np.ndarray]
    names: list[str]
    groups: list[str]
    placed: tuple | None
    metadata: Any = None


# --------------------------------------------------------------------------- decoding


def _intern(
    buf: np.ndarray, data: np.ndarray, lens: np.ndarray, table: list[str] | None = None, lookup: dict | None = None
) -> tuple[np.ndarray, list[str], dict]:
    """Codes of the UTF-8 strings buf[data[i]:data[i]+lens[i]] in a shared string table."""
    table = table if table is not None else []
    lookup = lookup if lookup is not None else {}
    local, first = intern_bytes(buf, data, lens)
    to_table = np.empty(first.size, np.int32)
    for j, (o, n) in enumerate(zip(data[first].tolist(), lens[first].tolist())):
        key = buf[o : o + n].tobytes()
        c = lookup.get(key)
        if c is None:
            try:
                table.append(key.decode("utf-8"))
            except UnicodeDecodeError:
                raise WireError(o, "string is not valid UTF-8") from None
            c = lookup[key] = len(table) - 1
        to_table[j] = c
    return to_table[local], table, lookup


def _as_int64(u: np.ndarray) -> np.ndarray:
    return u.astype(U64).view(I64)


def _deps(buf, f, key, number: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    packed = np.flatnonzero(key == (number << 3 | WT_LEN))
    vals, counts = decode_packed_varints(buf, f.data[packed], f.end[packed])
    owner = np.repeat(f.msg[packed], counts)
    unpacked = np.flatnonzero(key == (number << 3 | WT_VARINT))
    if unpacked.size:  # legal but rare: one field per element, possibly mixed with packed runs
        row = np.concatenate([np.repeat(packed, counts), unpacked])
        order = np.argsort(row, kind="stable")
        vals = np.concatenate([vals, f.value[unpacked]])[order]
        owner = np.concatenate([owner, f.msg[unpacked]])[order]
    indptr = np.zeros(n + 1, I64)
    np.cumsum(np.bincount(owner, minlength=n), out=indptr[1:])
    return indptr, vals, np.concatenate([packed, unpacked])


_MEMBER_WT = {
    m: (WT_LEN if (t in ("string", "bytes") or is_list) else WT_VARINT)
    for m, (_num, t, is_list) in ATTR_MEMBERS.items()
}


def decode_nodes(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    *,
    metadata=None,
    names: tuple[list[str], dict] | None = None,
    groups: tuple[list[str], dict] | None = None,
) -> Decoded:
    """Decode the Node messages buf[starts[i]:ends[i]] into columns.

    Raises WireError (offset into buf) on malformed data. `names`/`groups` let successive
    blocks share string tables.
    """
    n = starts.size
    buf = np.frombuffer(buf, U8) if isinstance(buf, (bytes, bytearray, memoryview)) else buf
    name_table, name_lookup = names if names is not None else ([""], {b"": 0})
    group_table, group_lookup = groups if groups is not None else ([], {})
    if _native is not None:
        return _decode_nodes_native(buf, starts, ends, metadata, (name_table, name_lookup), (group_table, group_lookup))
    f = scan_fields(buf, starts, ends)
    num = f.number
    key = (num << 3) | f.wtype  # the field's tag
    used = np.zeros(len(f), bool)
    cols: dict[str, np.ndarray] = {}

    def scalar(number: int) -> np.ndarray:
        m = np.flatnonzero(key == (number << 3 | WT_VARINT))
        used[m] = True
        out = np.zeros(n, U64)
        out[f.msg[m]] = f.value[m]
        return out

    cols["ids"] = scalar(1)
    cols["types"] = _as_int64(scalar(3)).astype(np.int32)
    cols["start"] = scalar(6)
    cols["duration"] = scalar(7)

    m = np.flatnonzero(key == (2 << 3 | WT_LEN))
    used[m] = True
    codes, name_table, _ = _intern(buf, f.data[m], f.value[m].astype(I64), name_table, name_lookup)
    cols["name_codes"] = np.zeros(n, np.int32)
    cols["name_codes"][f.msg[m]] = codes

    for number, col in ((4, "ctrl"), (5, "data")):
        indptr, vals, m = _deps(buf, f, key, number, n)
        cols[col + "_indptr"], cols[col] = indptr, vals
        used[m] = True

    present = np.zeros(n, np.uint16)
    consumed_rows, consumed_bits = [], []
    for c in COLUMN_ATTRS:
        cols[c.name] = np.zeros(n, c.dtype)
    a_rows = np.flatnonzero(key == (10 << 3 | WT_LEN))
    if a_rows.size:
        sub = scan_fields(buf, f.data[a_rows], f.end[a_rows])
        na = a_rows.size
        is_name = (sub.number == 1) & (sub.wtype == WT_LEN)
        nsub = np.bincount(sub.msg, minlength=na)
        cand = (nsub == 2) & (np.bincount(sub.msg[is_name], minlength=na) == 1)
        name_row = np.zeros(na, I64)
        name_row[sub.msg[is_name]] = np.flatnonzero(is_name)
        val_row = np.zeros(na, I64)
        val_row[sub.msg[~is_name]] = np.flatnonzero(~is_name)
        ci = np.flatnonzero(cand)
        nd, nl, vr = sub.data[name_row[ci]], sub.value[name_row[ci]].astype(I64), val_row[ci]
        name_codes, first = intern_bytes(buf, nd, nl)
        unique_names = [buf[o : o + k].tobytes() for o, k in zip(nd[first].tolist(), nl[first].tolist())]
        col_of = np.full(ci.size, -1, np.int16)
        for c in COLUMN_ATTRS:
            try:
                code = unique_names.index(c.name.encode())
            except ValueError:
                continue
            number = ATTR_MEMBERS[c.member][0]
            hit = (name_codes == code) & (sub.number[vr] == number) & (sub.wtype[vr] == _MEMBER_WT[c.member])
            col_of[hit] = c.bit
        sel = np.flatnonzero(col_of >= 0)
        if sel.size:
            node_of = f.msg[a_rows[ci[sel]]]
            _, first = np.unique(node_of * 16 + col_of[sel], return_index=True)
            sel = sel[first]  # only a node's first occurrence of an attribute becomes a column
            for c in COLUMN_ATTRS:
                s = sel[col_of[sel] == c.bit]
                if not s.size:
                    continue
                rows = f.msg[a_rows[ci[s]]]
                v = vr[s]
                if c.member == "string_val":
                    vals, group_table, _ = _intern(
                        buf, sub.data[v], sub.value[v].astype(I64), group_table, group_lookup
                    )
                elif c.member == "bool_val":
                    vals = sub.value[v] != 0
                elif c.member == "uint64_val":
                    vals = sub.value[v]
                else:  # int64 / int32: two's complement of the varint
                    vals = _as_int64(sub.value[v]).astype(c.dtype)
                cols[c.name][rows] = vals
                present[rows] |= np.uint16(1 << c.bit)
                used[a_rows[ci[s]]] = True
                consumed_rows.append(a_rows[ci[s]])
                consumed_bits.append(np.full(s.size, c.bit, U8))
    cols["present"] = present
    placed = _placements(f, used, n, consumed_rows, consumed_bits)

    ex = np.flatnonzero(~used)
    tail = num[ex] >= 10
    order = np.lexsort((ex, tail, f.msg[ex]))
    ex, tail = ex[order], tail[order]
    lens = f.end[ex] - f.start[ex]
    cols["extra"] = buf[ranges(f.start[ex], lens)]
    per_node = np.bincount(f.msg[ex], weights=lens, minlength=n).astype(I64)
    cols["extra_indptr"] = np.zeros(n + 1, I64)
    np.cumsum(per_node, out=cols["extra_indptr"][1:])
    cols["extra_split"] = np.bincount(f.msg[ex][~tail], weights=lens[~tail], minlength=n).astype(np.uint32)
    return Decoded(n, cols, name_table, group_table, placed, metadata)


def _placements(f, used: np.ndarray, n: int, consumed_rows: list, consumed_bits: list) -> tuple | None:
    """Where column attributes sat on nodes whose attribute order is not the canonical one."""
    if not consumed_rows:
        return None
    rows = np.concatenate(consumed_rows)
    bits = np.concatenate(consumed_bits)
    order = np.argsort(rows, kind="stable")  # wire order
    rows, bits = rows[order], bits[order]
    tail = np.where(~used & (f.number >= 10), f.end - f.start, 0)
    before = np.cumsum(tail) - tail  # tail bytes before each field, counted from the block start
    first_field = np.searchsorted(f.msg, np.arange(n))
    msg = f.msg[rows]
    offset = before[rows] - before[first_field[msg]]
    same_node = np.concatenate(([False], msg[1:] == msg[:-1]))
    bad = (offset > 0) | (same_node & (bits < np.concatenate(([0], bits[:-1]))))
    odd = np.isin(msg, msg[bad])
    return msg[odd], bits[odd], offset[odd].astype(np.uint32)


_COLUMN_SPEC = tuple((c.name.encode(), ATTR_MEMBERS[c.member][0], _MEMBER_WT[c.member]) for c in COLUMN_ATTRS)
_NATIVE_OUT = (
    U64,
    U64,
    U64,
    U64,
    I64,
    I64,
    U64,
    I64,
    U64,
    I64,
    np.uint16,
    I64,
    np.int8,
    U64,
    I64,
    U8,
    I64,
    np.uint32,
    I64,
    U8,
    np.uint32,
)


def _indptr(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.size + 1, I64)
    np.cumsum(counts, out=out[1:])
    return out


def _decode_nodes_native(buf, starts, ends, metadata, names, groups) -> Decoded:
    """decode_nodes through the C kernel: one pass per node, same result as the numpy path."""
    n = starts.size
    out = _native_call(
        _native.decode_nodes, buf, np.ascontiguousarray(starts, I64), np.ascontiguousarray(ends, I64), _COLUMN_SPEC
    )
    (
        ids,
        types,
        start,
        duration,
        noff,
        nlen,
        ctrl,
        ctrl_n,
        data,
        data_n,
        present,
        t_node,
        t_col,
        t_val,
        t_len,
        extra,
        extra_n,
        split,
        p_node,
        p_bit,
        p_off,
    ) = (np.frombuffer(b, d) for b, d in zip(out, _NATIVE_OUT))
    name_codes, name_table, _ = _intern(buf, noff, nlen, *names)
    cols: dict[str, np.ndarray] = {
        "ids": ids,
        "types": types.view(I64).astype(np.int32),
        "start": start,
        "duration": duration,
        "name_codes": name_codes,
        "ctrl": ctrl,
        "ctrl_indptr": _indptr(ctrl_n),
        "data": data,
        "data_indptr": _indptr(data_n),
        "present": present.copy(),
        "extra": extra,
        "extra_indptr": _indptr(extra_n),
        "extra_split": split,
    }
    group_table = groups[0]
    for c in COLUMN_ATTRS:
        col = np.zeros(n, c.dtype)
        m = np.flatnonzero(t_col == c.bit)
        if m.size:
            rows, v = t_node[m], t_val[m]
            if c.member == "string_val":
                col[rows], group_table, _ = _intern(buf, v.view(I64), t_len[m], *groups)
            elif c.member == "bool_val":
                col[rows] = v != 0
            elif c.member == "uint64_val":
                col[rows] = v
            else:
                col[rows] = _as_int64(v).astype(c.dtype)
        cols[c.name] = col
    return Decoded(n, cols, name_table, group_table, (p_node, p_bit, p_off), metadata)


def decode_messages(payloads: list[bytes], metadata=None) -> Decoded:
    """Decode a list of serialized Node messages."""
    lens = np.fromiter((len(p) for p in payloads), I64, len(payloads))
    ends = np.cumsum(lens)
    raw = b"".join(payloads)
    try:
        return decode_nodes(np.frombuffer(raw, U8), ends - lens, ends, metadata=metadata)
    except WireError as e:
        i = int(np.searchsorted(ends, e.offset, side="right"))
        raise TraceFormatError(
            None,
            e.message,
            offset=e.offset - int(ends[i] - lens[i]),
            offset_kind="byte in message",
            message_index=i + 1,
        ) from None


# --------------------------------------------------------------------------- encoding


def _str_table(strings: list[str]) -> Rows:
    return rows_from_bytes([s.encode("utf-8") for s in strings])


def _varint_field(number: int, values_u64: np.ndarray, mask: np.ndarray) -> Rows:
    key = np.frombuffer(encode_key(number, WT_VARINT), U8)
    vb, vs = encode_varints(values_u64[mask])
    return Rows.where(mask, _join_prefix(key, vb, vs), vs + key.size)


def _join_prefix(prefix: np.ndarray, data: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    k = sizes.size
    if k == 0:
        return np.zeros(0, U8)
    return Rows.concat([Rows(np.tile(prefix, k), np.full(k, prefix.size, I64)), Rows(data, sizes)]).data


def _len_field(number: int, payload: Rows, mask: np.ndarray) -> Rows:
    """`number` as a length-delimited field around each masked row of payload."""
    key = np.frombuffer(encode_key(number, WT_LEN), U8)
    lb, ls = encode_varints(payload.lens[mask].astype(U64))
    head = Rows.where(mask, _join_prefix(key, lb, ls), ls + key.size)
    return Rows.concat([head, Rows(payload.data, np.where(mask, payload.lens, 0))])


def _packed(indptr: np.ndarray, flat: np.ndarray) -> Rows:
    vb, vs = encode_varints(flat)
    cs = np.zeros(vs.size + 1, I64)
    np.cumsum(vs, out=cs[1:])
    return Rows(vb, cs[indptr[1:]] - cs[indptr[:-1]])


def _member_values(member: str, vals: np.ndarray, table: list[str] | None = None) -> Rows:
    """Encoded oneof member (tag + value) for each value; string members take codes into `table`."""
    number = ATTR_MEMBERS[member][0]
    every = np.ones(vals.size, bool)
    if member == "string_val":
        assert table is not None, "string members are codes into a table"
        return _len_field(number, rows_from_bytes([table[c].encode("utf-8") for c in vals.tolist()]), every)
    if member in ("bool_val", "uint64_val"):
        u = vals.astype(U64)
    elif member in ("int64_val", "int32_val"):
        u = vals.astype(I64).view(U64)
    else:
        raise ValueError(f"cannot encode {member} values in bulk")
    return _varint_field(number, u, every)


def attribute_rows(
    name: str, member: str, values: np.ndarray, mask: np.ndarray, table: list[str] | None = None
) -> Rows:
    """The `attr` field (AttributeProto) of every row where mask is set: {name, member: value}.

    `values` (one per row) are numbers, or codes into `table` for string members (each distinct
    string is encoded once, then its bytes are gathered: op schemas repeat on many nodes)."""
    rows = np.flatnonzero(mask)
    vals = np.asarray(values)[rows]
    if member == "string_val":
        vals, inv = np.unique(vals, return_inverse=True)
    name_field = np.frombuffer(b"\x0a" + encode_varint_int(len(name.encode())) + name.encode(), U8)
    value = _member_values(member, vals, table)
    inner = Rows.concat([Rows(np.tile(name_field, vals.size), np.full(vals.size, name_field.size, I64)), value])
    field = _len_field(10, inner, np.ones(vals.size, bool))
    if member == "string_val":
        field = gather_rows(field, inv.reshape(-1))
    return Rows.where(mask, field.data, field.lens)


def node_payloads(t: Trace) -> Rows:
    """Serialized Node message of every row."""
    parts = [_varint_field(1, t.ids, t.ids != 0)]
    names = gather_rows(_str_table(t.names), t.name_codes)
    parts.append(_len_field(2, names, names.lens > 0))
    parts.append(_varint_field(3, t.types.astype(I64).view(U64), t.types != 0))
    for number, ip, flat in ((4, t.ctrl_indptr, t.ctrl), (5, t.data_indptr, t.data)):
        parts.append(_len_field(number, _packed(ip, flat), np.diff(ip) > 0))
    parts.append(_varint_field(6, t.start, t.start != 0))
    parts.append(_varint_field(7, t.duration, t.duration != 0))
    ex_start = t.extra_indptr[:-1]
    head = t.extra_split.astype(I64)
    parts.append(Rows(t.extra[ranges(ex_start, head)], head))
    columns: dict[int, Rows] = {}
    for c in COLUMN_ATTRS:
        mask = (t.present & np.uint16(1 << c.bit)) != 0
        if not mask.any():
            continue
        columns[c.bit] = attribute_rows(c.name, c.member, getattr(t, c.name), mask, t.groups)
    tail_lens = np.diff(t.extra_indptr) - head
    tail = Rows(t.extra[ranges(ex_start + head, tail_lens)], tail_lens)
    attrs = Rows.concat(list(columns.values()) + [tail])
    if t.placed_rows.size:
        attrs = _keep_attribute_order(t, columns, tail, attrs)
    return Rows.concat(parts + [attrs])


def _row_bytes(rows: Rows, starts: np.ndarray, i: int) -> bytes:
    return rows.data[starts[i] : starts[i] + rows.lens[i]].tobytes()


def _keep_attribute_order(t: Trace, columns: dict[int, Rows], tail: Rows, attrs: Rows) -> Rows:
    """Re-splice column attributes where they sat on the nodes recorded in t.placed_*."""
    starts = {bit: np.cumsum(r.lens) - r.lens for bit, r in columns.items()}
    tail_starts = np.cumsum(tail.lens) - tail.lens
    by_row = np.argsort(t.placed_rows, kind="stable")  # (entries of a row in their order; one sort, not a mask per row)
    odd, firsts = np.unique(t.placed_rows[by_row], return_index=True)
    lasts = np.append(firsts[1:], by_row.size)
    out: list[bytes] = []
    for r, a, b in zip(odd.tolist(), firsts.tolist(), lasts.tolist()):
        sel = by_row[a:b]
        placed = {int(b): int(o) for b, o in zip(t.placed_bits[sel], t.placed_offsets[sel])}
        rest = _row_bytes(tail, tail_starts, r)
        piece = [
            _row_bytes(columns[b], starts[b], r) for b in sorted(columns) if b not in placed and columns[b].lens[r]
        ]  # added since: canonical place
        pos = 0
        for b, off in sorted(placed.items(), key=lambda kv: kv[1]):  # stable: original order on ties
            if b in columns and columns[b].lens[r]:
                off = min(off, len(rest))
                piece += [rest[pos:off], _row_bytes(columns[b], starts[b], r)]
                pos = off
        out.append(b"".join(piece) + rest[pos:])
    is_odd = np.zeros(attrs.lens.size, bool)
    is_odd[odd] = True
    a_starts = np.cumsum(attrs.lens) - attrs.lens
    normal = Rows(attrs.data[ranges(a_starts[~is_odd], attrs.lens[~is_odd])], np.where(is_odd, 0, attrs.lens))
    spliced = Rows(np.frombuffer(b"".join(out), U8), np.zeros(attrs.lens.size, I64))
    spliced.lens[odd] = [len(b) for b in out]
    return Rows.concat([normal, spliced])


def encode_rows(t: Trace, rows: np.ndarray) -> list[bytes]:
    """Serialized Node messages of some rows."""
    p = node_payloads(t.take(rows))
    raw = p.data.tobytes()
    ends = np.cumsum(p.lens)
    return [raw[e - n : e] for e, n in zip(ends.tolist(), p.lens.tolist())]


def iter_pb(t: Trace, chunk: int = 65536) -> Iterator:
    for s in range(0, len(t), chunk):
        for payload in encode_rows(t, np.arange(s, min(s + chunk, len(t)))):
            yield pb.Node.FromString(payload)


# --------------------------------------------------------------------------- extra attributes


_SCALAR_DTYPES = {
    "int64": I64,
    "uint64": U64,
    "int32": np.int32,
    "uint32": np.uint32,
    "sint32": np.int32,
    "sint64": I64,
    "bool": np.bool_,
}


def attr_fields(t: Trace):
    """The extras split into fields, and their attributes (field 10) into theirs: (fields,
    attribute rows among them, the attributes' fields; None without attributes). Not kept:
    on a 1,024-rank job the scans of every trace would hold tens of GB."""
    buf = t.extra
    f = scan_fields(buf, t.extra_indptr[:-1], t.extra_indptr[1:])
    a = np.flatnonzero((f.number == 10) & (f.wtype == WT_LEN))
    return f, a, (scan_fields(buf, f.data[a], f.end[a]) if a.size else None)


def extra_attr_array(t: Trace, name: str, dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """(values, present) of an attribute stored in the extras, decoded for all nodes at once.

    Integer and bool members decode vectorized; other members go through protobuf.
    """
    n = len(t)
    buf = t.extra
    f, a, sub = attr_fields(t)
    present = np.zeros(n, bool)
    if not a.size:
        return np.zeros(n, dtype or I64), present
    is_name = (sub.number == 1) & (sub.wtype == WT_LEN)
    hit = np.zeros(a.size, bool)
    nr = np.flatnonzero(is_name)
    hit[sub.msg[nr]] = equals_literal(buf, sub.data[nr], sub.value[nr].astype(I64), name.encode())
    val_rows = np.flatnonzero(hit[sub.msg] & ~is_name & (sub.number >= 3))
    _, first = np.unique(f.msg[a[sub.msg[val_rows]]], return_index=True)
    val_rows = val_rows[first]
    rows = f.msg[a[sub.msg[val_rows]]]
    members = {ATTR_MEMBERS_BY_NUM.get(int(x), "") for x in np.unique(sub.number[val_rows])}
    present[rows] = True
    simple = members <= {f"{k}_val" for k in _SCALAR_DTYPES} and (sub.wtype[val_rows] == WT_VARINT).all()
    # (nodes may hold the name with different members, a bool here and an int64 there: each member
    # decodes its own rows; without a dtype to put them in, mixed members take the general path)
    if simple and members and (len(members) == 1 or dtype is not None):
        numbers = sub.number[val_rows]
        vals = np.zeros(n, dtype or _SCALAR_DTYPES[ATTR_MEMBERS[next(iter(members))][1]])
        for number in np.unique(numbers).tolist():
            kind = ATTR_MEMBERS[ATTR_MEMBERS_BY_NUM[number]][1]
            these = numbers == number
            raw = sub.value[val_rows[these]]
            if kind.startswith("sint"):
                raw = (raw >> U64(1)) ^ (U64(0) - (raw & U64(1)))
            vals[rows[these]] = (raw != 0) if kind == "bool" else (_as_int64(raw) if kind != "uint64" else raw)
        return vals, present
    vals = np.empty(n, object)
    for r in rows.tolist():
        vals[r] = t.node(r).attr(name)
    if dtype is not None:  # a value that is no number of that type (a list, a string) counts as absent
        typed = np.zeros(n, dtype)
        for r in rows.tolist():
            try:
                typed[r] = vals[r]
            except (TypeError, ValueError, OverflowError):
                present[r] = False
        vals = typed
    return vals, present


ATTR_MEMBERS_BY_NUM = {num: m for m, (num, _t, _l) in ATTR_MEMBERS.items()}


def extra_attr_strings(t: Trace, name: str) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(codes, names, present) of a ``string_val`` attribute stored in the extras, for all nodes
    at once: ``names[codes[i]]`` is node i's value where ``present[i]`` (a node holding the name
    with another member counts as absent). Vectorized: `extra_attr_array` decodes strings node
    by node."""
    n = len(t)
    codes = np.zeros(n, np.int32)
    present = np.zeros(n, bool)
    f, a, sub = attr_fields(t)
    if not a.size:
        return codes, [], present
    buf = t.extra
    is_name = (sub.number == 1) & (sub.wtype == WT_LEN)
    hit = np.zeros(a.size, bool)
    nr = np.flatnonzero(is_name)
    hit[sub.msg[nr]] = equals_literal(buf, sub.data[nr], sub.value[nr].astype(I64), name.encode())
    member = ATTR_MEMBERS["string_val"][0]
    val_rows = np.flatnonzero(hit[sub.msg] & (sub.number == member) & (sub.wtype == WT_LEN))
    node = f.msg[a[sub.msg[val_rows]]]
    node, first = np.unique(node, return_index=True)
    val_rows = val_rows[first]
    if not val_rows.size:
        return codes, [], present
    c, firsts = intern_bytes(buf, sub.data[val_rows], sub.value[val_rows].astype(I64))
    names = [
        bytes(buf[int(sub.data[val_rows[k]]) : int(sub.data[val_rows[k]] + sub.value[val_rows[k]])]).decode(
            "utf-8", "replace"
        )
        for k in firsts.tolist()
    ]
    codes[node] = c
    present[node] = True
    return codes, names, present
