"""chakra-trace: standardized execution traces of AI training workloads (Chakra-compatible).

The public facade: the names a notebook needs first. Each lives in the package the layer map
(CONTRIBUTING.md) puts it in and is imported when first used; the facade also names every way
`Workload.open` can read a job (Chakra files, merged jobs, `chakra collect` and Kineto folders),
imported at the first open.
"""

import os as _os
import signal as _signal
import sys as _sys

if _os.path.basename(_sys.argv[0] if _sys.argv else "") in ("chakra", "chakra.exe") and (
    _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
):  # the `chakra` command starting: Ctrl-C before `cli.main` takes over ends it quietly (status 130)

    def _quiet_start(signum, frame):
        raise SystemExit(130)

    _signal.signal(_signal.SIGINT, _quiet_start)

import importlib as _importlib
from typing import TYPE_CHECKING

from .io.workload import register_source_module as _source

# the ways `Workload.open` reads a job besides Chakra files, imported at the first open
for _module in ("convert.pytorch", "convert.profiler", "io.merged_file"):
    _source(f"{__name__}.{_module}")

#: the facade's names and the module each lives in, imported when first used (`chakra --help`
#: and `import chakra_trace` stay cheap)
_NAMES = {
    "Analysis": "analyze",
    "TraceSummary": "analyze.summary",
    "summarize": "analyze.summary",
    "convert_pytorch": "convert.pytorch",
    "ChakraError": "errors",
    "TraceFormatError": "errors",
    "iter_chunks": "io.et",
    "iter_nodes": "io.et",
    "read_metadata": "io.et",
    "read_trace": "io.et",
    "write_trace": "io.et",
    "read_json": "io.jsonio",
    "write_json": "io.jsonio",
    "merge": "io.merge",
    "split": "io.merge",
    "merge_job": "io.merged_file",
    "split_job": "io.merged_file",
    "Limits": "io.stream",
    "Workload": "io.workload",
    "discover": "io.workload",
    "read_comm_groups": "io.workload",
    "TraceBuilder": "schema.builder",
    "Attr": "schema.enums",
    "CollectiveType": "schema.enums",
    "NodeType": "schema.enums",
    "COLUMN_ATTRS": "schema.node",
    "Attribute": "schema.node",
    "IOInfo": "schema.node",
    "Node": "schema.node",
    "Trace": "schema.trace",
    "Issue": "validate",
    "ValidationReport": "validate",
    "fix_trace": "validate",
    "validate_trace": "validate",
    "validate_workload": "validate",
}


def __getattr__(name: str):
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_NAMES})


if TYPE_CHECKING:
    from .analyze import Analysis
    from .analyze.summary import TraceSummary, summarize
    from .convert.pytorch import convert_pytorch
    from .errors import ChakraError, TraceFormatError
    from .io.et import iter_chunks, iter_nodes, read_metadata, read_trace, write_trace
    from .io.jsonio import read_json, write_json
    from .io.merge import merge, split
    from .io.merged_file import merge_job, split_job
    from .io.stream import Limits
    from .io.workload import Workload, discover, read_comm_groups
    from .schema.builder import TraceBuilder
    from .schema.enums import Attr, CollectiveType, NodeType
    from .schema.node import COLUMN_ATTRS, Attribute, IOInfo, Node
    from .schema.trace import Trace
    from .validate import Issue, ValidationReport, fix_trace, validate_trace, validate_workload

__version__ = "0.1.0"

__all__ = [
    "Analysis",
    "Attr",
    "Attribute",
    "COLUMN_ATTRS",
    "ChakraError",
    "CollectiveType",
    "IOInfo",
    "Issue",
    "Limits",
    "Node",
    "NodeType",
    "Trace",
    "TraceBuilder",
    "TraceFormatError",
    "TraceSummary",
    "ValidationReport",
    "Workload",
    "convert_pytorch",
    "discover",
    "fix_trace",
    "iter_chunks",
    "iter_nodes",
    "merge",
    "merge_job",
    "read_comm_groups",
    "read_json",
    "read_metadata",
    "read_trace",
    "split",
    "split_job",
    "summarize",
    "validate_trace",
    "validate_workload",
    "write_json",
    "write_trace",
]
