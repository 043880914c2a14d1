"""Protobuf wire format, decoded and encoded for many messages at once with numpy.

Decoding one message per Python call costs microseconds per node; here every step (read a
tag, read a varint, skip a payload) runs over all messages in lockstep, so the Python cost is
paid per *field position*, not per node. Errors carry the byte offset where parsing failed.
"""

from __future__ import annotations

import numpy as np

from .._native import load as load_native

_native = load_native("chakra_trace.schema._wire")  # optional C kernels; None: the numpy/Python path

U8 = np.uint8
I64 = np.int64
U64 = np.uint64

WT_VARINT, WT_I64, WT_LEN, WT_I32 = 0, 1, 2, 5
MAX_VARINT_BYTES = 10


class WireError(ValueError):
    """Malformed protobuf data at a byte offset of the buffer being decoded."""

    def __init__(self, offset: int, message: str):
        super().__init__(message)
        self.offset = int(offset)
        self.message = message


# --------------------------------------------------------------------------- decoding


def read_varints(buf: np.ndarray, pos: np.ndarray, limit: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Decode one varint at each position; return (values as uint64, byte sizes)."""
    n = pos.size
    sizes = np.zeros(n, I64)
    if n == 0:
        return np.zeros(0, U64), sizes
    limit = np.broadcast_to(np.asarray(limit, I64), (n,))
    # first byte for every lane at once (most varints end there)
    if (pos >= limit).any():
        raise WireError(int(pos[np.flatnonzero(pos >= limit)[0]]), "varint runs past the end of its message")
    b = buf[pos]
    values = (b & 0x7F).astype(U64)
    more = b >= 0x80
    sizes[~more] = 1
    lane = np.flatnonzero(more)
    if lane.size == 0:
        return values, sizes
    for k in range(1, MAX_VARINT_BYTES):
        p = pos[lane] + k
        over = p >= limit[lane]
        if over.any():
            bad = int(pos[lane[over][0]])
            raise WireError(bad, "varint runs past the end of its message")
        b = buf[p]
        values[lane] |= (b & 0x7F).astype(U64) << U64(7 * k)
        more = b >= 0x80
        sizes[lane[~more]] = k + 1
        lane = lane[more]
        if lane.size == 0:
            return values, sizes
    raise WireError(int(pos[lane[0]]), "varint longer than 10 bytes")


class Fields:
    """Fields of many messages, one row per field, grouped by message in wire order."""

    __slots__ = ("msg", "number", "wtype", "value", "start", "data", "end")

    def __init__(self, msg, number, wtype, value, start, data, end):
        self.msg = msg  # index of the owning message
        self.number = number  # field number
        self.wtype = wtype  # wire type
        self.value = value  # varint value / fixed raw bits (uint64); payload length for LEN
        self.start = start  # offset of the tag
        self.data = data  # offset of the value / payload
        self.end = end  # offset just past the field

    def __len__(self) -> int:
        return self.msg.size

    def take(self, mask_or_index) -> Fields:
        return Fields(*(getattr(self, s)[mask_or_index] for s in self.__slots__))


def _native_call(fn, *args):
    try:
        return fn(*args)
    except ValueError as e:
        if len(e.args) == 2 and isinstance(e.args[0], int):
            raise WireError(e.args[0], e.args[1]) from None
        raise


def scan_fields(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Fields:
    """Split each message buf[starts[i]:ends[i]] into its fields (wire order within a message)."""
    starts = np.ascontiguousarray(starts, I64)
    ends = np.ascontiguousarray(ends, I64)
    if _native is not None:
        out = _native_call(_native.scan_fields, np.ascontiguousarray(buf, U8), starts, ends)
        dt = (I64, I64, np.int8, U64, I64, I64, I64)
        return Fields(*(np.frombuffer(b, d) for b, d in zip(out, dt)))
    return _scan_fields_numpy(buf, starts, ends)


def _scan_fields_numpy(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Fields:
    """scan_fields in lockstep over all messages: one numpy pass per field position."""
    cols: list[tuple] = []
    lane = np.flatnonzero(ends > starts)
    pos = starts[lane]
    step = 0
    while lane.size:
        end = ends[lane]
        tag, tsize = read_varints(buf, pos, end)
        number = (tag >> U64(3)).astype(I64)
        wtype = (tag & U64(7)).astype(np.int8)
        data = pos + tsize
        value = np.zeros(lane.size, U64)
        fend = np.empty(lane.size, I64)
        bad = (number == 0) | ((wtype != WT_VARINT) & (wtype != WT_I64) & (wtype != WT_LEN) & (wtype != WT_I32))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "field number 0" if number[i] == 0 else f"unsupported wire type {int(wtype[i])}"
            raise WireError(int(pos[i]), f"invalid tag: {what}")
        for wt, width in ((WT_I64, 8), (WT_I32, 4)):
            m = wtype == wt
            if m.any():
                fend[m] = data[m] + width
                if (fend[m] > end[m]).any():
                    i = int(np.flatnonzero(m & (fend > end))[0])
                    raise WireError(int(pos[i]), "fixed-width value runs past the end of its message")
                idx = data[m][:, None] + np.arange(width)
                raw = buf[idx].astype(U64) << (U64(8) * np.arange(width, dtype=U64))
                value[m] = np.bitwise_or.reduce(raw, axis=1)
        m = (wtype == WT_VARINT) | (wtype == WT_LEN)
        if m.any():
            v, vsize = read_varints(buf, data[m], end[m])
            value[m] = v
            fend[m] = data[m] + vsize
            ln = wtype[m] == WT_LEN
            if ln.any():
                sel = np.flatnonzero(m)[ln]
                data[sel] = fend[sel]
                length = value[sel]
                room = (end[sel] - data[sel]).astype(U64)
                if (length > room).any():
                    i = int(np.flatnonzero(length > room)[0])
                    raise WireError(
                        int(pos[sel[i]]),
                        f"length-delimited field says {int(length[i])} bytes, only {int(room[i])} remain in its message",
                    )
                fend[sel] = data[sel] + length.astype(I64)
        cols.append((lane, number, wtype, value, pos, data, fend, step))
        keep = fend < end
        lane, pos = lane[keep], fend[keep]
        step += 1
    if not cols:
        e = np.zeros(0, I64)
        return Fields(e, e.copy(), np.zeros(0, np.int8), np.zeros(0, U64), e.copy(), e.copy(), e.copy())
    msg = np.concatenate([c[0] for c in cols])
    # Rows come out step-major; place them message-major (wire order inside a message).
    counts = np.bincount(msg, minlength=starts.size)
    first = np.cumsum(counts) - counts
    k = np.concatenate([np.full(c[0].size, c[7], I64) for c in cols])
    order = np.empty(msg.size, I64)
    order[first[msg] + k] = np.arange(msg.size)
    return Fields(*(np.concatenate([c[j] for c in cols])[order] for j in range(7)))


def decode_packed_varints(buf: np.ndarray, data: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode packed varint payloads buf[data[i]:end[i]]; return (values, count per payload)."""
    if _native is not None:
        v, c = _native_call(
            _native.decode_packed,
            np.ascontiguousarray(buf, U8),
            np.ascontiguousarray(data, I64),
            np.ascontiguousarray(end, I64),
        )
        return np.frombuffer(v, U64), np.frombuffer(c, I64)
    lens = end - data
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, U64), np.zeros(data.size, I64)
    b = buf[ranges(data, lens)]
    term = b < 0x80
    vid = np.cumsum(term) - term  # value index of each byte
    vstart = np.flatnonzero(np.concatenate(([True], term[:-1])))
    shift = (np.arange(total) - vstart[vid]) * 7
    last = np.cumsum(lens)[lens > 0] - 1
    if (shift >= 70).any() or not term[last].all():
        _raise_first_packed_error(buf, data, end)
    contrib = (b & 0x7F).astype(U64) << shift.astype(U64)
    values = np.bitwise_or.reduceat(contrib, vstart)
    # values per payload: terminators inside each payload
    cs = np.concatenate(([0], np.cumsum(term)))
    bstart = np.cumsum(lens) - lens
    counts = cs[bstart + lens] - cs[bstart]
    return values, counts


def _raise_first_packed_error(buf: np.ndarray, data: np.ndarray, end: np.ndarray) -> None:
    """Report the first malformed varint in payload order (slow path, only on bad input)."""
    for p, e in zip(data.tolist(), end.tolist()):
        while p < e:
            try:
                _, q = decode_varint_at(buf, p, e)
            except ValueError:
                raise WireError(p, "packed varint longer than 10 bytes") from None
            if q < 0:
                raise WireError(p, "packed varints run past the end of their field")
            p = q


def decode_varint_at(buf, pos: int, end: int) -> tuple[int, int]:
    """(value, next position); next position -1 if the varint is cut off at `end`."""
    result = shift = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")
    return 0, -1


def ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s+l) for each (s, l), as one index array."""
    lens = np.asarray(lens, I64)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, I64)
    offs = np.cumsum(lens) - lens
    return np.repeat(np.asarray(starts, I64) - offs, lens) + np.arange(total, dtype=I64)


def intern_bytes(buf: np.ndarray, data: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Number the distinct byte strings buf[data[i]:data[i]+lens[i]] in order of first appearance.

    Returns (code of each string, index of each code's first occurrence).
    """
    data = np.ascontiguousarray(data, I64)
    lens = np.ascontiguousarray(lens, I64)
    if _native is not None:
        c, f = _native_call(_native.intern, np.ascontiguousarray(buf, U8), data, lens)
        return np.frombuffer(c, np.int32), np.frombuffer(f, I64)
    try:
        return _intern_hashed(buf, data, lens)
    except _HashCollision:  # astronomically rare: fall back to exact dictionary interning
        pass
    raw = buf.tobytes() if isinstance(buf, np.ndarray) else bytes(buf)
    lookup: dict[bytes, int] = {}
    first: list[int] = []
    codes = np.empty(data.size, np.int32)
    for i, (o, n) in enumerate(zip(data.tolist(), lens.tolist())):
        key = raw[o : o + n]
        c = lookup.get(key)
        if c is None:
            c = lookup[key] = len(first)
            first.append(i)
        codes[i] = c
    return codes, np.asarray(first, I64)


class _HashCollision(Exception):
    pass


_HASH_MUL = np.uint64(0x100000001B3)  # FNV prime: odd, so every power is a unit mod 2**64


def _intern_hashed(buf: np.ndarray, data: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """intern_bytes without a Python loop: polynomial hash per string, unique, then verify bytes."""
    n = data.size
    if n == 0:
        return np.zeros(0, np.int32), np.zeros(0, I64)
    total = int(lens.sum())
    h = np.zeros(n, U64)
    if total:
        idx = ranges(data, lens)
        rel = idx - np.repeat(data, lens)  # byte position inside its string
        powers = np.cumprod(np.full(int(lens.max()), _HASH_MUL, U64))  # wraps mod 2**64
        contrib = (np.asarray(buf)[idx].astype(U64) + U64(1)) * powers[rel]
        nonempty = lens > 0
        h[nonempty] = np.add.reduceat(contrib, (np.cumsum(lens) - lens)[nonempty])
    key = h ^ (lens.astype(U64) * U64(0x9E3779B97F4A7C15))
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rep = first[inverse.ravel()]  # the first string with the same hash
    if total:
        if not np.array_equal(lens[rep], lens):
            raise _HashCollision
        same = np.asarray(buf)[np.repeat(data[rep], lens) + rel] == np.asarray(buf)[idx]
        if not same.all():
            raise _HashCollision
    # number codes by first appearance, as the C kernel does
    order = np.argsort(first, kind="stable")
    rank = np.empty(first.size, np.int32)
    rank[order] = np.arange(first.size, dtype=np.int32)
    return rank[inverse.ravel()], first[order].astype(I64)


def equals_literal(buf: np.ndarray, data: np.ndarray, lens: np.ndarray, literal: bytes) -> np.ndarray:
    """For each payload, whether its bytes equal `literal`."""
    out = lens == len(literal)
    idx = np.flatnonzero(out)
    if idx.size and literal:
        lit = np.frombuffer(literal, U8)
        out[idx] = (buf[data[idx][:, None] + np.arange(len(literal))] == lit).all(axis=1)
    return out


# --------------------------------------------------------------------------- encoding

_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=U64)


def varint_sizes(values: np.ndarray) -> np.ndarray:
    return np.searchsorted(_VARINT_LIMITS, np.asarray(values, U64), side="right").astype(I64) + 1


def encode_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint encodings of uint64 values: (bytes, size of each)."""
    values = np.asarray(values, U64)
    sizes = varint_sizes(values)
    out = np.empty(int(sizes.sum()), U8)
    pos = np.cumsum(sizes) - sizes
    lane = np.arange(values.size)
    v = values
    for k in range(MAX_VARINT_BYTES):
        if lane.size == 0:
            break
        more = sizes[lane] > k + 1
        out[pos[lane] + k] = (v & U64(0x7F)).astype(U8) | (more.astype(U8) << U8(7))
        lane, v = lane[more], v[more] >> U64(7)
    return out, sizes


def encode_key(number: int, wtype: int) -> bytes:
    return encode_varint_int((number << 3) | wtype)


def encode_varint_int(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class Rows:
    """Ragged bytes: one byte string per row, stored as a flat array plus row lengths."""

    __slots__ = ("data", "lens")

    def __init__(self, data: np.ndarray, lens: np.ndarray):
        self.data = data
        self.lens = np.asarray(lens, I64)

    @classmethod
    def empty(cls, n: int) -> Rows:
        return cls(np.zeros(0, U8), np.zeros(n, I64))

    @classmethod
    def where(cls, mask: np.ndarray, data: np.ndarray, lens_of_set: np.ndarray) -> Rows:
        lens = np.zeros(mask.size, I64)
        lens[mask] = lens_of_set
        return cls(data, lens)

    @classmethod
    def concat(cls, parts: list[Rows]) -> Rows:
        """Row-wise concatenation: row i of the result is the parts' rows i, in order."""
        n = parts[0].lens.size
        lens = np.zeros(n, I64)
        for p in parts:
            lens += p.lens
        total = int(lens.sum())
        if _native is not None and len(parts) <= 256:
            raw = _native.concat_rows(
                tuple(np.ascontiguousarray(p.data, U8) for p in parts),
                tuple(np.ascontiguousarray(p.lens, I64) for p in parts),
                total,
            )
            return cls(np.frombuffer(raw, U8), lens)
        out = np.empty(total, U8)
        row_start = np.cumsum(lens) - lens
        for p in parts:
            if p.data.size:
                out[ranges(row_start, p.lens)] = p.data
            row_start = row_start + p.lens
        return cls(out, lens)


_GATHER_BYTES = 1 << 18  # output bytes per step: the byte index of a step is 8x its size


def gather_rows(table: Rows, index: np.ndarray) -> Rows:
    """Rows of `table` picked by index (e.g. interned strings by code), in steps that bound
    the temporary byte index (op schemas repeated on every node would need gigabytes)."""
    starts = np.cumsum(table.lens) - table.lens
    lens = table.lens[index]
    ends = np.cumsum(lens)
    out = np.empty(int(ends[-1]) if ends.size else 0, U8)
    cuts = np.searchsorted(ends, np.arange(_GATHER_BYTES, out.size, _GATHER_BYTES), "right")
    a = pos = 0
    for b in [*np.unique(cuts).tolist(), index.size]:
        if b > a:
            n = int(ends[b - 1]) - pos
            out[pos : pos + n] = table.data[ranges(starts[index[a:b]], lens[a:b])]
            a, pos = b, pos + n
    return Rows(out, lens)


def rows_from_bytes(items: list[bytes]) -> Rows:
    lens = np.fromiter((len(b) for b in items), I64, len(items))
    return Rows(np.frombuffer(b"".join(items), U8).copy(), lens)


def frame(rows: Rows) -> Rows:
    """Prefix every row with its length as a varint: the `.et` framing."""
    lb, ls = encode_varints(rows.lens.astype(U64))
    return Rows.concat([Rows(lb, ls), rows])
