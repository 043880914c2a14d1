"""Leak scan: does an obfuscated job's bytes still hold a name, string or shape of the original?

The needles, from every distinct trace of the original job: node names; attribute names and
string values (string lists included) and doc strings; the global metadata's strings; group
names; the text of every input/output shape list with two or more dimensions (as the trace
stores it, e.g. ``[8,4096,8192]``) and every input/output type string. Needles shorter than
`min_len` characters (4) are left out: they occur by chance in any bytes ("mm", "[1]"). The
haystack is the raw bytes of the output files (traces and group file), searched as bytes, so a
needle counts wherever it appears, inside hashes and numbers included. The schema's own
attribute names (`comm_size`, `num_ops`, ...: `schema.enums.Attr`, and those obfuscation keeps)
are public vocabulary, not the job's, and are not searched; nor are numbers (a string that is
a JSON list of numbers, e.g. an all-to-all's split sizes, which obfuscation keeps or buckets).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..io.workload import Workload
from ..schema.codec import iter_pb
from ..schema.enums import Attr
from .obfuscate import CARRIED

#: attribute names every Chakra trace may carry: the schema's, not the job's
VOCABULARY = frozenset(v for k, v in vars(Attr).items() if k.isupper() and isinstance(v, str)) | CARRIED

KINDS = ("name", "attribute", "metadata", "group", "shape", "type")


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
            out["metadata"].update(_attr_strings(a))
        for node in iter_pb(t):
            for a in node.attr:
                if a.name not in VOCABULARY:
                    out["attribute"].add(a.name)
                out["attribute"].update(x for x in _attr_strings(a) if not _numbers(x))
            for io in (node.inputs, node.outputs):
                out["shape"].update(_shapes(io.shapes))
                out["type"].update(_texts(io.types))
    return {k: {s for s in v if len(s.strip()) >= min_len} for k, v in out.items()}


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
    except json.JSONDecodeError:
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
    except json.JSONDecodeError:
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
        blobs.setdefault(Path(f).read_bytes(), None)
    hay = b"\x00".join(blobs)
    wanted = needles(original, min_len)
    rep = LeakReport(searched={k: len(v) for k, v in wanted.items()}, haystack_bytes=len(hay))
    for kind, texts in wanted.items():
        for s in sorted(texts):
            if s.encode("utf-8") in hay:
                rep.found.append((kind, s))
    return rep


__all__ = ["leak_scan", "needles", "LeakReport", "KINDS"]
