"""Leak scan: does an obfuscated job's bytes still hold a name, string or shape of the original?

The needles, from every distinct trace of the original job: node names; attribute names and
string values (string lists included) and doc strings; the global metadata's strings and the
names of its attributes (numeric ones included: a name such as ``PROJECT_X_70B_layers`` says as
much as a string); group names; the text of every input/output shape list with two or more
dimensions (as the trace stores it, e.g. ``[8,4096,8192]``) and every input/output type string.
Needles shorter than `min_len` characters (4) are left out: they occur by chance in any bytes
("mm", "[1]"). The haystack is the raw bytes of the output files (traces and group file;
gunzipped when compressed), searched as bytes, so a needle counts wherever it appears, inside
hashes and numbers included. The schema's own attribute names (`comm_size`, `num_ops`, ...:
`schema.enums.Attr`, and those obfuscation keeps: `obfuscate.CARRIED`, `obfuscate.METADATA_KEPT`)
are public vocabulary, not the job's, and are not searched; nor are numbers (a string that is a
JSON list of numbers, e.g. an all-to-all's split sizes, which obfuscation keeps or buckets).

The search takes time linear in the haystack plus the number of needles (each needle is looked
up by its rarest 4-byte piece in an index of the haystack), so 200,000 distinct names scan in
seconds.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..io.documents import open_regular
from ..io.workload import Workload
from ..schema import proto as pb
from ..schema.enums import Attr
from ..schema.wire import intern_bytes
from .obfuscate import CARRIED, METADATA_KEPT

#: attribute names every Chakra trace may carry: the schema's, not the job's
VOCABULARY = frozenset(v for k, v in vars(Attr).items() if k.isupper() and isinstance(v, str)) | CARRIED

KINDS = ("name", "attribute", "metadata", "group", "shape", "type")
_PIECES = 8  # 4-byte pieces of a needle looked up (evenly spread, first and last included)
_VERIFY = 64  # candidate places checked one by one per needle; beyond that a plain search


@dataclass
class LeakReport:
    searched: dict[str, int]  # kind -> distinct needles searched
    found: list[tuple[str, str]] = field(default_factory=list)  # (kind, needle) found in the output
    haystack_bytes: int = 0

    @property
    def clean(self) -> bool:
        return not self.found

    def to_dict(self) -> dict:
        return {
            "clean": self.clean,
            "searched": self.searched,
            "found": [{"kind": k, "text": s} for k, s in self.found[:100]],
            "found_count": len(self.found),
            "haystack_bytes": self.haystack_bytes,
        }


def needles(w: Workload, min_len: int = 4) -> dict[str, set[str]]:
    """What must not appear in an obfuscated copy of `w`, by kind (see the module docstring)."""
    out: dict[str, set[str]] = {k: set() for k in KINDS}
    seen: set[int] = set()
    out["group"].update(str(g) for g in w.groups)
    for t in w.traces.values():
        if id(t) in seen:
            continue
        seen.add(id(t))
        out["name"].update(t.names)
        out["group"].update(t.groups)
        out["metadata"].add(t.metadata.version)
        for a in t.metadata.attr:
            if a.name not in METADATA_KEPT:
                out["metadata"].add(a.name)
            out["metadata"].update(_attr_strings(a))
        for node in _extras(t):
            for a in node.attr:
                if a.name not in VOCABULARY:
                    out["attribute"].add(a.name)
                out["attribute"].update(x for x in _attr_strings(a) if not _numbers(x))
            for io in (node.inputs, node.outputs):
                out["shape"].update(_shapes(io.shapes))
                out["type"].update(_texts(io.types))
    return {k: {s for s in v if len(s.strip()) >= min_len} for k, v in out.items()}


def _extras(t) -> Iterable:
    """The fields a trace keeps as raw bytes (attributes, inputs/outputs, doc strings), as one
    `Node` message per distinct byte string (column attributes are numbers or groups)."""
    starts, lens = t.extra_indptr[:-1], np.diff(t.extra_indptr)
    rows = np.flatnonzero(lens > 0)
    if not rows.size:
        return
    _, first = intern_bytes(t.extra, starts[rows], lens[rows])
    raw = t.extra.tobytes()
    for r in rows[first].tolist():
        yield pb.Node.FromString(raw[starts[r] : starts[r] + lens[r]])


def _numbers(text: str) -> bool:
    try:
        v = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(v, list) and all(isinstance(x, (int, float)) for x in v)


def _attr_strings(a) -> Iterable[str]:
    yield a.doc_string
    yield a.string_val
    yield from a.string_list.values


def _texts(field_text: str) -> Iterable[str]:
    """The strings inside an input/output field (a JSON list of them, or one string)."""
    try:
        v = json.loads(field_text) if field_text else []
    except (ValueError, RecursionError):
        yield field_text
        return
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, str):
            yield x


def _shapes(field_text: str) -> Iterable[str]:
    """Every shape list of two or more dimensions in a shapes field, as compact JSON, and the
    field itself."""
    try:
        v = json.loads(field_text) if field_text else []
    except (ValueError, RecursionError):
        return
    yield field_text
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, list):
            if len(x) >= 2 and all(isinstance(d, int) for d in x):
                yield json.dumps(x, separators=(",", ":"))
                yield json.dumps(x)
            else:
                stack.extend(x)


def leak_scan(original: Workload, files: Iterable[str | Path], min_len: int = 4) -> LeakReport:
    """Search the bytes of `files` (an obfuscated copy of `original`) for `needles(original)`."""
    blobs: dict[bytes, None] = {}
    for f in files:
        blobs.setdefault(_output_bytes(f), None)
    hay = b"\x00".join(blobs)
    wanted = needles(original, min_len)
    rep = LeakReport(searched={k: len(v) for k, v in wanted.items()}, haystack_bytes=len(hay))
    for kind, texts in wanted.items():
        ordered = sorted(texts)
        for s, hit in zip(ordered, find_all(hay, [s.encode("utf-8") for s in ordered])):
            if hit:
                rep.found.append((kind, s))
    return rep


def _output_bytes(path: str | Path) -> bytes:
    """An output file's bytes, gunzipped when compressed (a regular file: the files are the
    obfuscation's own, so no document limit)."""
    with open_regular(path, "obfuscated file") as f:
        data = f.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _grams(buf: np.ndarray) -> np.ndarray:
    """Every 4-byte piece of `buf` as a number (position i: bytes i..i+3)."""
    b = buf.astype(np.uint32)
    return b[:-3] | (b[1:-2] << 8) | (b[2:-1] << 16) | (b[3:] << 24)


def find_all(hay: bytes, texts: list[bytes]) -> list[bool]:
    """Whether each of `texts` occurs in `hay`. Each text of 4 bytes or more is looked up by the
    rarest in `hay` of up to `_PIECES` of its 4-byte pieces (one not there: absent) and checked
    at that piece's places only, so the time grows with len(hay) + the number of texts, not
    their product."""
    out = [False] * len(texts)
    long = [i for i, s in enumerate(texts) if len(s) >= 4]
    for i in set(range(len(texts))) - set(long):
        out[i] = texts[i] in hay
    if not long or len(hay) < 4:
        return out
    index = _grams(np.frombuffer(hay, np.uint8))
    ordered = np.sort(index)
    lens = np.array([len(texts[i]) for i in long], np.int64)
    starts = np.cumsum(lens) - lens
    buf = np.frombuffer(b"".join(texts[i] for i in long), np.uint8).astype(np.uint32)
    offs = (np.linspace(0, 1, _PIECES)[None, :] * (lens - 4)[:, None]).astype(np.int64)  # (texts, pieces)
    at = starts[:, None] + offs
    g = buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16) | (buf[at + 3] << 24)
    count = np.searchsorted(ordered, g, "right") - np.searchsorted(ordered, g, "left")
    best = np.argmin(count, axis=1)  # per text, its rarest piece
    rows = np.arange(len(long))
    least, off, piece = count[rows, best], offs[rows, best], g[rows, best]
    check = np.flatnonzero(least > 0)
    by_gram = np.argsort(index, kind="stable") if check.size > 16 else None  # (else: one scan each)
    for j in check.tolist():
        s = texts[long[j]]
        if least[j] > _VERIFY:
            out[long[j]] = s in hay
            continue
        if by_gram is None:
            places = np.flatnonzero(index == piece[j])
        else:
            lo = int(np.searchsorted(ordered, piece[j], "left"))
            places = by_gram[lo : lo + least[j]]
        out[long[j]] = any(q >= 0 and hay[q : q + len(s)] == s for q in (places - off[j]).tolist())
    return out


__all__ = ["leak_scan", "needles", "find_all", "LeakReport", "KINDS"]
