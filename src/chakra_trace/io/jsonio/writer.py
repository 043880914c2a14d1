"""The writer: a `Trace` (or its chunks) to JSON, columns straight from their arrays and only a
row's other wire fields through protobuf, a bounded number of rows at a time."""

from __future__ import annotations

import base64
import json
import math
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import numpy as np

from ...errors import TraceFormatError
from ...schema import proto as pb
from ...schema.codec import encode_rows
from ...schema.enums import NodeType
from ...schema.proto import ATTR_MEMBERS
from ...schema.trace import COLUMN_ATTRS, Trace
from ..et import atomic_output
from .spec import FORMAT, VERSION, _own_unknown, is_json_lines_path

_WRITE_CHUNK = 4096  # rows encoded (and nodes written) at a time
_WRITE_CHUNK_CHARS = 8 << 20  # ... or fewer, once their JSON text reaches this size

_NODE_TYPE_NAMES = {int(t): t.name for t in NodeType}
_CANON_NAN64 = 0x7FF8000000000000
_CANON_NAN32 = 0x7FC00000


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
        placed_rows = np.unique(trace.placed_rows[(trace.placed_rows >= s) & (trace.placed_rows < e)])
        placed = set(placed_rows.tolist())
        # their messages encoded together (one `take` of the trace per row cost rows x trace)
        whole_msgs = dict(zip(placed_rows.tolist(), encode_rows(trace, placed_rows))) if placed else {}
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
                m = pb.Node.FromString(whole_msgs[s + i] if whole else xraw[a:b])
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
    compact = partial(json.dumps, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    dump: Callable[[Any], str]
    if lines:
        head = compact(header) + "\n"
        first_sep, sep, close, empty_close = "", "\n", "\n", ""
        dump = compact
    elif indent is None:
        head = compact(header)[:-1] + ',"nodes":['
        first_sep, sep, close, empty_close = "\n", ",\n", "\n]}\n", "]}\n"
        dump = compact
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

        def dump_indented(o: Any) -> str:
            return json.dumps(o, ensure_ascii=False, allow_nan=False, indent=indent).replace("\n", "\n" + ind)

        dump = dump_indented

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
