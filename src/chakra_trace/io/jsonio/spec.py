"""What the writer and the reader share: the format's name and version, the file names that
select it, and how a message's own unknown wire fields are isolated (the writer keeps them as
base64; the reader checks that base64 holds only fields the schema does not know)."""

from __future__ import annotations

import os

FORMAT = "chakra-trace-json"
VERSION = 1


def is_json_path(path: str) -> bool:
    """A name this package reads or writes: .json, .jsonl, either gzipped."""
    name = os.path.basename(path).lower()
    return name.endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz"))


def is_json_lines_path(path: str) -> bool:
    name = os.path.basename(path).lower()
    return name.endswith(".jsonl") or name.endswith(".jsonl.gz")


def _own_unknown(m) -> bytes:
    """Wire bytes of the unknown fields of `m` itself (not of its sub-messages)."""
    k = type(m)()
    k.CopyFrom(m)
    for fd in k.DESCRIPTOR.fields:
        k.ClearField(fd.name)
    return k.SerializeToString()
