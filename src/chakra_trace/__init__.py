"""chakra-trace: standardized execution traces of AI training workloads (Chakra-compatible)."""
from .analyze.summary import TraceSummary, summarize
from .analyze.validate import Issue, Report, fix_trace, validate_trace, validate_workload
from .errors import ChakraError, TraceFormatError
from .io.et import discover, iter_chunks, iter_nodes, read_metadata, read_trace, write_trace
from .io.jsonio import read_json, write_json
from .io.stream import Limits
from .schema.builder import TraceBuilder
from .schema.enums import Attr, CollectiveType, NodeType
from .schema.trace import COLUMN_ATTRS, Attribute, IOInfo, Node, Trace
from .schema.workload import Workload

__version__ = "0.1.0"

__all__ = [
    "Attr", "Attribute", "COLUMN_ATTRS", "ChakraError", "CollectiveType", "IOInfo", "Issue", "Limits", "Node",
    "NodeType", "Report", "Trace", "TraceBuilder", "TraceFormatError", "TraceSummary", "Workload", "discover",
    "fix_trace", "iter_chunks", "iter_nodes", "read_json", "read_metadata", "read_trace", "summarize",
    "validate_trace", "validate_workload", "write_json", "write_trace",
]
