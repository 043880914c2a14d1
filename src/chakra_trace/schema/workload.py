"""A job's per-rank traces and its communicator groups."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ChakraError, TraceFormatError
from .enums import Attr
from .trace import Trace

ALL_RANKS_GROUPS = ("", "0")  # pg_name values that mean "every rank"


@dataclass
class Workload:
    """Per-rank traces of one job. `groups` maps a communicator (pg_name) to its ranks."""

    traces: dict[int, Trace]
    groups: dict[str, list[int]] = field(default_factory=dict)
    paths: dict[int, Path] = field(default_factory=dict)

    @property
    def ranks(self) -> list[int]:
        return sorted(self.traces)

    def __len__(self) -> int:
        return len(self.traces)

    def __getitem__(self, rank: int) -> Trace:
        return self.traces[rank]

    def group_ranks(self, pg_name: str) -> list[int]:
        """Members of a communicator; unnamed ("" or "0") and unknown groups infer from the traces."""
        if pg_name in self.groups:
            return self.groups[pg_name]
        if pg_name in ALL_RANKS_GROUPS:
            return self.ranks
        return [r for r, t in self.traces.items() if pg_name in t.groups and
                np.any(t.has(Attr.PG_NAME) & (t.pg_name == t.groups.index(pg_name)))]

    def all_groups(self) -> dict[str, list[int]]:
        names: set[str] = set(self.groups)
        for t in self.traces.values():
            coll = t.has(Attr.PG_NAME)
            names.update(t.groups[c] for c in np.unique(t.pg_name[coll]))
            if (~coll & (t.types == 7)).any():
                names.add("")
        return {g: self.group_ranks(g) for g in sorted(names)}

    @classmethod
    def load(cls, prefix: str | os.PathLike, comm_groups: str | os.PathLike | None = None, **kw) -> "Workload":
        """Load `<prefix>.<rank>.et` for every rank, plus an optional ASTRA-sim comm-group JSON."""
        from ..io.et import discover, read_trace

        paths = discover(prefix)
        if not paths:
            raise ChakraError(f"{prefix}: no files named {Path(prefix).name}.<rank>.et[.gz]")
        traces = {r: read_trace(p, **kw) for r, p in paths.items()}
        groups = read_comm_groups(comm_groups) if comm_groups else {}
        return cls(traces, groups, paths)

    def save(self, prefix: str | os.PathLike, *, compress: bool = False) -> list[Path]:
        from ..io.et import write_trace

        out = []
        for r, t in self.traces.items():
            p = Path(f"{prefix}.{r}.et" + (".gz" if compress else ""))
            write_trace(t, p, compress=compress)
            out.append(p)
        return out


def read_comm_groups(path: str | os.PathLike) -> dict[str, list[int]]:
    """ASTRA-sim's communicator-group file: {"<group id>": [rank, ...], ...}."""
    path = os.fspath(path)
    try:
        with open(path) as f:
            raw = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise TraceFormatError(path, f"cannot read communicator groups: {e}") from None
    if not isinstance(raw, dict):
        raise TraceFormatError(path, "expected an object mapping group id to a list of ranks")
    groups = {}
    for k, v in raw.items():
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            raise TraceFormatError(path, f"group {k!r}: expected a list of integer ranks, got {v!r}")
        if len(set(v)) != len(v):
            raise TraceFormatError(path, f"group {k!r}: a rank is listed twice in {v!r}")
        groups[str(k)] = list(v)  # listed order: a group collective runs its ring in this order
    return groups
