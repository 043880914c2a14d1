"""What validation finds: issues (what is wrong, how often, on which nodes) and their report."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..table import Table, Tabular

SAMPLE = 20  # node ids kept per issue
ERROR, WARNING = "error", "warning"


@dataclass
class Issue:
    """One kind of problem: how often it occurs and on which nodes (a sample of ids)."""

    severity: str  # "error" | "warning"
    code: str  # e.g. "missing-ctrl-dep"
    count: int
    message: str
    node_ids: list[int] = field(default_factory=list)  # sample, at most SAMPLE
    rank: int | None = None
    fixable: bool = False  # `fix_trace` repairs it
    details: dict[str, Any] = field(default_factory=dict)  # code-specific numbers and samples

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ValidationReport(Tabular):
    """The issues found in a trace or workload."""

    issues: list[Issue] = field(default_factory=list)
    nodes: int = 0  # nodes checked
    ranks: list[int] = field(default_factory=list)  # ranks checked (empty: one trace, rank unknown)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == ERROR]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == WARNING]

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return not self.errors

    @property
    def fixable(self) -> list[Issue]:
        return [i for i in self.issues if i.fixable]

    def codes(self) -> dict[str, int]:
        """Total count per issue code."""
        out: dict[str, int] = {}
        for i in self.issues:
            out[i.code] = out.get(i.code, 0) + i.count
        return out

    def get(self, code: str, rank: int | None = None) -> Issue | None:
        """The first issue with this code (and rank, if given)."""
        for i in self.issues:
            if i.code == code and (rank is None or i.rank == rank):
                return i
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "nodes": self.nodes,
            "ranks": list(self.ranks),
            "issues": [i.to_dict() for i in self.issues],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_table(self) -> Table:
        """The issues, one row each (``details`` aside)."""
        cols = ["severity", "code", "rank", "count", "fixable", "message", "node_ids"]
        return Table({c: [getattr(i, c) for i in self.issues] for c in cols}, title="issues")

    def summary_line(self) -> str:
        ne, nw = len(self.errors), len(self.warnings)
        where = f"{self.nodes:,} nodes" + (f" on {len(self.ranks)} ranks" if len(self.ranks) > 1 else "")
        if not self.issues:
            return f"OK: no issues in {where}"
        head = "INVALID" if ne else "OK"
        return f"{head}: {ne} error{'s' * (ne != 1)}, {nw} warning{'s' * (nw != 1)} in {where}"

    def render(self) -> str:
        """Plain-text rendering: one line per issue, then the summary line."""
        lines = []
        for i in self.issues:
            rank = "" if i.rank is None else f"[rank {i.rank}] "
            fix = " (fixable)" if i.fixable else ""
            lines.append(f"{i.severity:<7} {i.code:<24} {i.count:>10,}  {rank}{i.message}{fix}")
        lines.append(self.summary_line())
        return "\n".join(lines)

    __str__ = render

    def sort(self) -> ValidationReport:
        """Errors first; otherwise keep the order the checks ran in."""
        self.issues.sort(key=lambda i: i.severity != ERROR)
        return self


# --------------------------------------------------------------------------- wording


def sample_ids(a) -> list[int]:
    """A sorted, de-duplicated sample of node ids as plain ints."""
    a = np.unique(np.asarray(a, np.uint64))
    return [int(x) for x in a[:SAMPLE]]


def format_ids(ids: list[int], total: int | None = None) -> str:
    s = ", ".join(str(i) for i in ids[:8])
    total = len(ids) if total is None else total
    return s + (f", … ({total - 8:,} more)" if total > 8 else "")


def count_noun(k: int, noun: str, verb: str | None = None, plural: str | None = None) -> str:
    """ "1 node has" / "3 nodes have": a count with its noun and (optionally) an agreeing verb."""
    out = f"{k:,} {noun if k == 1 else (plural or noun + 's')}"
    if verb:
        out += " " + (verb if k != 1 else {"have": "has"}.get(verb, verb + "s"))
    return out
