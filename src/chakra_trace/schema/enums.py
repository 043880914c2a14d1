"""Named constants of the Chakra wire contract: node types, collectives, attribute vocabulary.

The numbers are the wire contract shared with the MLCommons Chakra toolkit and ASTRA-sim;
never renumber them.
"""

from __future__ import annotations

import enum


class NodeType(enum.IntEnum):
    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveType(enum.IntEnum):
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


# Node types reserved by an open upstream proposal (storage / batch / checkpoint nodes).
RESERVED_NODE_TYPES = frozenset({8, 9, 10})

COMM_NODE_TYPES = frozenset({NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE})


# global-metadata attribute: where a trace's time 0 lies on its profiler's clock (ns); ranks
# recorded on one host share that clock, so their timelines can be laid side by side
TIME_ORIGIN = "time_origin_ns"
# global-metadata attribute: the recorded steps (profiler step windows) as k + 1 cut points in µs on
# the trace's time line (step i is [b[i], b[i+1])): the converter keeps them, analyses split by them
STEP_BOUNDS = "step_bounds_us"
# global-metadata attribute: the what-if transforms that changed the trace after it was recorded
# (`synthesize.transforms`), in order: its node times or sizes are no longer the recorded ones
TRANSFORMED = "transformed"


class Attr:
    """Attribute names that carry meaning for consumers (ASTRA-sim reads these exact names)."""

    IS_CPU_OP = "is_cpu_op"
    NUM_OPS = "num_ops"
    TENSOR_SIZE = "tensor_size"
    COMM_TYPE = "comm_type"
    COMM_SIZE = "comm_size"
    COMM_PRIORITY = "comm_priority"
    COMM_SRC = "comm_src"
    COMM_DST = "comm_dst"
    COMM_TAG = "comm_tag"
    PG_NAME = "pg_name"
    INVOLVED_DIM = "involved_dim"
    # A collective's position in its group's issue order on its rank (ours): collectives meet
    # by it across ranks when workers started them out of order (gloo's threads).
    COMM_SEQ = "comm_seq"
    # Written by the reference PyTorch converter on every node.
    RF_ID = "rf_id"
    FW_PARENT = "fw_parent"
    SEQ_ID = "seq_id"
    SCOPE = "scope"
    TID = "tid"
    FW_TID = "fw_tid"
    STREAM = "stream"
    OP_SCHEMA = "op_schema"


# Oneof member that consumers read for each well-known attribute. Writing another member
# makes ASTRA-sim read 0 with no error, so our writers always use these.
ATTR_MEMBER: dict[str, str] = {
    Attr.IS_CPU_OP: "bool_val",
    Attr.NUM_OPS: "int64_val",
    Attr.TENSOR_SIZE: "uint64_val",
    Attr.COMM_TYPE: "int64_val",
    Attr.COMM_SIZE: "int64_val",
    Attr.COMM_PRIORITY: "int32_val",
    Attr.COMM_SRC: "int32_val",
    Attr.COMM_DST: "int32_val",
    Attr.COMM_TAG: "int32_val",
    Attr.PG_NAME: "string_val",
    Attr.INVOLVED_DIM: "bool_list",
    Attr.COMM_SEQ: "int64_val",
    Attr.RF_ID: "int64_val",
    Attr.FW_PARENT: "int64_val",
    Attr.SEQ_ID: "int64_val",
    Attr.SCOPE: "int64_val",
    Attr.TID: "int64_val",
    Attr.FW_TID: "int64_val",
    Attr.STREAM: "int64_val",
    Attr.OP_SCHEMA: "string_val",
}


def node_type_name(value: int) -> str:
    try:
        return NodeType(value).name
    except ValueError:
        return f"UNKNOWN_NODE_TYPE_{value}"


def collective_name(value: int) -> str:
    try:
        return CollectiveType(value).name
    except ValueError:
        return f"UNKNOWN_COLLECTIVE_{value}"


def parse_node_type(value: str | int) -> int:
    """Accept an enum name (with or without the `_NODE` suffix) or a number."""
    if isinstance(value, (int, NodeType)):
        return int(value)
    key = value.strip().upper()
    if key.isdigit():
        return int(key)
    if not key.endswith("_NODE"):
        key += "_NODE"
    try:
        return int(NodeType[key])
    except KeyError:
        raise ValueError(f"unknown node type {value!r}; expected one of {[t.name for t in NodeType]}") from None


def parse_collective(value: str | int) -> int:
    if isinstance(value, (int, CollectiveType)):
        return int(value)
    key = value.strip().upper()
    if key.isdigit():
        return int(key)
    try:
        return int(CollectiveType[key])
    except KeyError:
        raise ValueError(f"unknown collective {value!r}; expected one of {[t.name for t in CollectiveType]}") from None
