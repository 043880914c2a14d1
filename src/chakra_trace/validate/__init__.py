"""Checking traces and workloads for problems that break simulators and analyzers, and repairing
the unambiguous ones.

An `Issue` says what is wrong, how often, and on which nodes (a sample); `fix_trace` repairs
only what has one right answer and says what it changed. The simulator, the converter and the
CLI all check through here.
"""

from .checks import ABSURD_BYTES, validate_trace
from .fix import fix_trace
from .report import ERROR, SAMPLE, WARNING, Issue, ValidationReport
from .workload import validate_workload

__all__ = [
    "ABSURD_BYTES",
    "ERROR",
    "SAMPLE",
    "WARNING",
    "Issue",
    "ValidationReport",
    "fix_trace",
    "validate_trace",
    "validate_workload",
]
