"""Building traces from Python: the base of generators and converters."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import proto as pb
from .enums import Attr, NodeType, collective_name, parse_collective, parse_node_type
from .node import Attribute, IOInfo, Node, attribute_to_pb
from .trace import Trace


class TraceBuilder:
    """Accumulate nodes, then `build()` a columnar Trace.

    >>> b = TraceBuilder()
    >>> x = b.comp("fwd", duration=120, num_ops=2e9)
    >>> ar = b.collective("ALL_REDUCE", 4 << 20, deps=[x])
    >>> trace = b.build()
    """

    def __init__(self, *, metadata: dict[str, Any] | None = None, first_id: int = 0):
        self._nodes: list[Node] = []
        self._next_id = first_id
        self.metadata = dict(metadata or {})

    def __len__(self) -> int:
        return len(self._nodes)

    def add(
        self,
        name: str = "",
        type: int | str = NodeType.COMP_NODE,
        *,
        id: int | None = None,
        data_deps: Iterable[int] = (),
        ctrl_deps: Iterable[int] = (),
        duration: int = 0,
        start: int = 0,
        inputs: IOInfo | None = None,
        outputs: IOInfo | None = None,
        attrs: Iterable[Attribute] = (),
        **named_attrs: Any,
    ) -> int:
        """Add a node; keyword arguments become attributes (None values are skipped). Returns its id."""
        if id is None:
            id = self._next_id
        self._next_id = max(self._next_id, int(id) + 1)
        all_attrs = list(attrs) + [Attribute(k, v) for k, v in named_attrs.items() if v is not None]
        self._nodes.append(
            Node(
                id=int(id),
                name=name,
                type=parse_node_type(type),
                data_deps=[int(d) for d in data_deps],
                ctrl_deps=[int(d) for d in ctrl_deps],
                duration_micros=int(duration),
                start_time_micros=int(start),
                inputs=inputs,
                outputs=outputs,
                attrs=all_attrs,
            )
        )
        return int(id)

    def comp(
        self,
        name: str,
        duration: int = 0,
        *,
        deps: Iterable[int] = (),
        num_ops: float | None = None,
        tensor_size: int | None = None,
        is_cpu_op: bool = False,
        **kw: Any,
    ) -> int:
        """A compute node (`num_ops` FLOPs and `tensor_size` bytes feed roofline models)."""
        return self.add(
            name,
            NodeType.COMP_NODE,
            data_deps=deps,
            duration=duration,
            num_ops=None if num_ops is None else int(num_ops),
            tensor_size=tensor_size,
            is_cpu_op=is_cpu_op,
            **kw,
        )

    def collective(
        self,
        comm_type: int | str,
        size: int,
        *,
        name: str | None = None,
        deps: Iterable[int] = (),
        pg_name: str | None = None,
        duration: int = 0,
        **kw: Any,
    ) -> int:
        """A collective of `size` bytes (all-gather: per-rank input size)."""
        ct = parse_collective(comm_type)

        return self.add(
            name or collective_name(ct).lower(),
            NodeType.COMM_COLL_NODE,
            data_deps=deps,
            duration=duration,
            is_cpu_op=False,
            comm_type=ct,
            comm_size=int(size),
            pg_name=pg_name,
            **kw,
        )

    def send(self, dst: int, size: int, *, tag: int = 0, name: str = "send", deps: Iterable[int] = (), **kw) -> int:
        return self.add(
            name,
            NodeType.COMM_SEND_NODE,
            data_deps=deps,
            is_cpu_op=False,
            comm_size=int(size),  # (column attributes in COLUMN_ATTRS order: nothing to place on writing)
            comm_dst=dst,
            comm_tag=tag,
            **kw,
        )

    def recv(self, src: int, size: int, *, tag: int = 0, name: str = "recv", deps: Iterable[int] = (), **kw) -> int:
        return self.add(
            name,
            NodeType.COMM_RECV_NODE,
            data_deps=deps,
            is_cpu_op=False,
            comm_size=int(size),  # (column attributes in COLUMN_ATTRS order: nothing to place on writing)
            comm_src=src,
            comm_tag=tag,
            **kw,
        )

    def build(self) -> Trace:
        return Trace.from_nodes(self._nodes, metadata=global_metadata(self.metadata))


def global_metadata(items: dict[str, Any]):
    """A GlobalMetadata message: `version` and one attribute per other item."""

    items = dict(items)
    meta = pb.GlobalMetadata(version=str(items.pop("version", "")))
    for k, v in items.items():
        attribute_to_pb(Attribute(k, v), meta.attr.add())
    return meta


__all__ = ["TraceBuilder", "Attr", "global_metadata"]
