"""chakra-trace: standardized execution traces of AI training workloads (Chakra-compatible)."""
from .errors import ChakraError, TraceFormatError
from .io.et import discover, iter_chunks, iter_nodes, read_metadata, read_trace, write_trace
from .io.stream import Limits
from .schema.builder import TraceBuilder
from .schema.enums import Attr, CollectiveType, NodeType
from .schema.trace import COLUMN_ATTRS, Attribute, IOInfo, Node, Trace
from .schema.workload import Workload

__version__ = "0.1.0"

__all__ = [
    "Attr", "Attribute", "COLUMN_ATTRS", "ChakraError", "CollectiveType", "IOInfo", "Limits", "Node",
    "NodeType", "Trace", "TraceBuilder", "TraceFormatError", "Workload", "discover", "iter_chunks",
    "iter_nodes", "read_metadata", "read_trace", "write_trace",
]
