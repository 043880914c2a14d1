"""chakra-trace: standardized execution traces of AI training workloads (Chakra-compatible).

The public facade: the names a notebook needs first. Each lives in the package the layer map
(CONTRIBUTING.md) puts it in; importing the facade also registers every way `Workload.open`
can read a job (Chakra files and merged jobs here, `chakra collect` folders through the PyTorch converter).
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
