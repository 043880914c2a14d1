"""Check the node fields a Trace keeps undecoded (inputs, outputs, other attributes).

`Trace.decode` reads ids, names, dependencies and the column attributes, and keeps every other
field as its raw bytes (`extra`), decoded only when asked for. Corrupt bytes there (bad UTF-8
in `inputs`, a garbage sub-message in an attribute) would then surface late, in whatever
command first decodes them, with no file or offset. Reading checks them once, in bulk: all of
a block's extra bytes parse as one protobuf message (fields of many nodes merge, and every
string and sub-message is still checked), and only a failing block is narrowed to the node,
the field and its byte offset.
"""

from __future__ import annotations

import numpy as np
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor

from ..schema import proto as pb
from ..schema.trace import Trace
from ..schema.wire import decode_varint_at

_LEN_TYPES = {FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES}
_BULK_BYTES = 1 << 20  # extra bytes parsed per call: bounds the merged message's memory


def _parses(cls, data: bytes | memoryview) -> Exception | None:
    try:
        cls.FromString(data)
    except Exception as e:  # protobuf's DecodeError is a different class per runtime
        return e
    return None


def bad_rows(chunk: Trace) -> list[tuple[int, Exception]]:
    """Rows of `chunk` whose undecoded fields do not parse (at most the first), with the error."""
    ptr, raw = chunk.extra_indptr, chunk.extra
    n = len(ptr) - 1
    if n <= 0 or ptr[-1] == ptr[0]:
        return []
    lo = 0
    while lo < n:  # groups of rows of about _BULK_BYTES
        hi = int(np.searchsorted(ptr, ptr[lo] + _BULK_BYTES, side="right")) - 1
        hi = min(max(hi, lo + 1), n)
        if _parses(pb.Node, raw[ptr[lo] : ptr[hi]].data) is not None:
            a, b = lo, hi  # narrow to one row: the first whose bytes fail
            while b - a > 1:
                mid = (a + b) // 2
                if _parses(pb.Node, raw[ptr[a] : ptr[mid]].tobytes()) is not None:
                    b = mid
                else:
                    a = mid
            err = _parses(pb.Node, raw[ptr[a] : ptr[a + 1]].tobytes())
            if err is not None:
                return [(a, err)]
        lo = hi
    return []


def _fields(data: bytes, start: int, end: int):
    """(field number, wire type, field start, payload start, field end) of each field in data[start:end]."""
    pos = start
    while pos < end:
        tag, p = decode_varint_at(data, pos, end)
        if p < 0:
            return
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            _, q = decode_varint_at(data, p, end)
            if q < 0:
                return
            yield num, wt, pos, p, q
        elif wt == 2:
            ln, q = decode_varint_at(data, p, end)
            if q < 0 or q + ln > end:
                return
            yield num, wt, pos, q, q + ln
            q += ln
        elif wt in (1, 5):
            q = p + (8 if wt == 1 else 4)
            yield num, wt, pos, p, q
        else:
            return
        pos = q


def locate(payload: bytes, cls=pb.Node) -> tuple[int, str]:
    """(offset into payload, field path) of the innermost field that does not parse."""
    counts: dict[int, int] = {}
    for num, wt, fstart, pstart, fend in _fields(payload, 0, len(payload)):
        field = cls.DESCRIPTOR.fields_by_number.get(num)
        name = field.name if field is not None else f"field {num}"
        k = counts[num] = counts.get(num, -1) + 1
        if field is not None and _repeated(field) and wt == 2 and field.type in _LEN_TYPES:  # (not packed)
            name = f"{name}[{k}]"
        if _parses(cls, payload[fstart:fend]) is None:
            continue
        sub = field.message_type if field is not None and wt == 2 else None
        if sub is not None:
            off, inner = locate(payload[pstart:fend], _message_class(sub))
            return pstart + off, f"{name}.{inner}" if inner else name
        return fstart, name
    return 0, ""


def _message_class(descriptor):
    """The message class of a descriptor: `GetMessageClass` (protobuf >= 4.22), else the factory."""
    get = getattr(message_factory, "GetMessageClass", None)
    return get(descriptor) if get is not None else message_factory.MessageFactory().GetPrototype(descriptor)


def _repeated(field) -> bool:
    rep = getattr(field, "is_repeated", None)  # protobuf >= 6; `label` before
    return bool(rep) if rep is not None else field.label == field.LABEL_REPEATED
