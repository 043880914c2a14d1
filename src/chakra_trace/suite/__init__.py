"""The Chakra trace benchmark suite: a fixed, versioned set of workloads (captured from model code
and recorded from real jobs, each pinned by a content hash), run rules (closed: the traces as
given, only the system varies; open: declared changes), a score (the geometric mean of speedups
over a reference system) and results that a second party verifies by deriving every number again.
Rules: suites/v0.1/RULES.md."""

from .board import leaderboard, write_leaderboard
from .check import CheckReport, check_result, read_result
from .contribute import add_trace
from .manifest import Entry, Suite, SuiteError, content_sha256, load_suite
from .run import SuiteResult, parse_change, run_suite, system_params

__all__ = [
    "CheckReport",
    "Entry",
    "Suite",
    "SuiteError",
    "SuiteResult",
    "add_trace",
    "check_result",
    "content_sha256",
    "leaderboard",
    "load_suite",
    "parse_change",
    "read_result",
    "run_suite",
    "system_params",
    "write_leaderboard",
]
