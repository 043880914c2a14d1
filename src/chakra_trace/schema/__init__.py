"""The Chakra trace schema: wire messages, named constants and the columnar trace model."""

from .enums import (
    ATTR_MEMBER,
    COMM_NODE_TYPES,
    Attr,
    CollectiveType,
    NodeType,
    collective_name,
    node_type_name,
    parse_collective,
    parse_node_type,
)

__all__ = [
    "ATTR_MEMBER",
    "COMM_NODE_TYPES",
    "Attr",
    "CollectiveType",
    "NodeType",
    "collective_name",
    "node_type_name",
    "parse_collective",
    "parse_node_type",
]
