"""Which host op issues each collective or point-to-point transfer, on which lane, and with what
attributes (type, size, group, splits, peer): the communication half of `GraphBuilder`, which
inherits it."""

from __future__ import annotations

import bisect
import json
from typing import Any

import numpy as np

from ..io.collective_names import SCALAR_TYPE_BYTES, classify, is_backend_op_name, message_bytes
from ..schema.enums import NodeType, collective_name
from .gpu_work import _JOIN_NS
from .report import ConversionReport

# Which argument of a c10d op holds the data a collective moves (its "input"), by normalized name.
INPUT_ARG = {
    "allreduce": 0,
    "broadcast": 0,
    "reduce": 0,
    "allgather": 1,
    "reducescatter": 1,
    "alltoall": 1,
    "alltoallv": 1,
    "gather": 1,
    "scatter": 0,
    "send": 0,
    "recv": 0,
}


class CommChoice:
    """The communication methods of `GraphBuilder`; it sets what they read."""

    h: Any  # the host trace
    names: Any  # its op names per row
    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    timed: bool
    r: ConversionReport
    window: tuple[int, int]
    late_work: np.ndarray
    detached: dict[int, tuple[int, int]]
    _lane: int

    def _async_work(self, comm: set[int]) -> tuple[set[int], set[int]]:
        """Backend ops (gloo:all_reduce, gloo:send, ...) of a c10d op: (those the c10d op waited
        for, the c10d ops that only queued theirs). A c10d op that returned before its work ended
        is a CPU node and the backend op is the collective or send/recv, with the time the
        transfer took; one that returned with its work is the communication node. Where the
        backend op runs does not matter: gloo's all-reduce is recorded on its worker thread, its
        send/recv on the calling thread, from the post to the completion."""
        sync, issuers = set(), set()
        self.issued_by: dict[int, int] = {}  # backend op -> the c10d op that only queued it
        self._fifo_issuer(comm)
        for i in comm:
            if is_backend_op_name(self.names[i]):
                c = self._issuer(i, comm)
                if c >= 0 and c != i and c in comm:
                    if 0 <= self.end[c] + _JOIN_NS < self.end[i]:
                        issuers.add(c)
                        self.issued_by[i] = c
                    else:
                        sync.add(i)
        return sync, issuers

    def _with_ancestors(self, rows: set[int], hops: int = 3) -> set[int]:
        """Rows and the ops up to `hops` call levels above them: a kernel that runs a collective is
        the collective, so the op that launched it (nccl:all_reduce) is not one, nor are the
        record_param_comms and c10d op above that."""
        h, out = self.h, set(rows)
        for i in rows:
            j = i
            for _ in range(hops):
                if h.parent[j] < 0 or (j := h.row(int(h.parent[j]))) < 0:
                    break
                out.add(j)
        return out

    def _own_lanes(self, comm: set[int]) -> None:
        """Give each backend op that outlives its c10d op on the same thread a lane of its own.
        gloo records an asynchronous send/recv (isend/irecv, batch_isend_irecv in
        torch.distributed.pipelining) on the calling thread from its post to its completion, so
        it spans the ops the thread ran meanwhile; nested by time it would swallow them, and
        chained in thread order it would hold the thread until the peer took the message."""
        if not self.timed:
            return
        for i in sorted(comm):
            if self.names[i].startswith("gloo:"):
                c = self._issuer(i, comm)
                if c >= 0 and c != i and self.tid[c] == self.tid[i] and 0 <= self.end[c] + _JOIN_NS < self.end[i]:
                    self.tid[i] = self._new_lane()

    def _new_lane(self) -> int:
        self._lane -= 1
        return self._lane

    def _take_late_work(self, comm: set[int]) -> None:
        """Backend work that only Kineto recorded (`late_work`): the host trace stopped before
        gloo's worker thread began what the last c10d ops queued, so those c10d ops have no
        backend op. Each is given to the earliest c10d op queued before it and after every c10d
        op a recorded backend op claims (gloo serves its queue in order); that op, returned
        before its work ended, then stands for the collective: from its call to the work's end,
        on a lane of its own, after the op before it on its thread and joined by it as backend
        work is (`_comm_nodes`), so the thread goes on meanwhile as it did."""
        if not self.timed or not len(self.late_work):
            return
        names, start, end = self.names, self.start, self.end
        c10d = sorted(
            (c for c in comm if names[c].startswith("c10d::") and end[c] >= 0), key=lambda c: (int(start[c]), c)
        )
        claimed = {self._issuer(i, comm) for i in comm if is_backend_op_name(names[i])}
        last = max((int(start[c]) for c in claimed if c >= 0), default=-1)
        free = [c for c in c10d if c not in claimed and start[c] > last]
        k = 0
        for s, e in sorted(map(tuple, self.late_work.tolist())):
            if k < len(free) and start[free[k]] <= s and 0 <= end[free[k]] + _JOIN_NS < e:
                c = free[k]
                self.detached[c] = (int(self.tid[c]), int(end[c]))
                end[c], self.tid[c] = e, self._new_lane()
                k += 1
        lo, hi = self.window  # the trace runs until that work is done, as `cover` does for the rest
        hi = max([hi, *(int(end[c]) for c in self.detached)])
        self.window, self.r.span_us = (lo, hi), (hi - lo) / 1000

    def _fifo_issuer(self, comm: set[int]) -> None:
        """Issuers of the backend ops that `_issuer` cannot find (gloo runs a reduce-scatter as an
        all-reduce of a buffer of its own: no tensor in common, and its worker thread is no child
        of the caller): a backend runs its work in the order it was queued, so each such op is
        given the earliest c10d op queued before it that no backend op claims."""
        names = self.names
        self._issuer_fifo: dict[int, int] = {}
        backend = [i for i in comm if is_backend_op_name(names[i])]
        found = {i: self._issuer(i, comm) for i in backend}
        orphans = [i for i, c in found.items() if c < 0 or c not in comm]
        if not orphans:
            return
        when = self.start if self.timed else np.arange(len(self.h), dtype=np.int64)
        claimed = {c for c in found.values() if c >= 0}
        free = sorted(
            (c for c in comm if names[c].startswith("c10d::") and c not in claimed), key=lambda c: (int(when[c]), c)
        )
        k = 0
        for i in sorted(orphans, key=lambda i: (int(when[i]), i)):
            if k < len(free) and when[free[k]] <= when[i]:
                self._issuer_fifo[i] = free[k]
                k += 1

    def _issuer(self, i: int, comm: set[int]) -> int:
        """The c10d op that issued backend op i (gloo:/nccl:), by shared tensors, else the ET
        parent, else the order of the queue (`_fifo_issuer`)."""
        h, names = self.h, self.names
        if names[i].startswith("c10d::") or names[i] == "record_param_comms":
            return i
        fifo = getattr(self, "_issuer_fifo", {})
        if i in fifo:
            return fifo[i]
        t = h.tensors
        # the latest c10d op before it that used one of its tensors: latest by start time when
        # timed (a worker thread's op can come first in the file), else by position
        when = self.start if self.timed else np.arange(len(h), dtype=np.int64)
        if not hasattr(self, "_c10d_by_tensor"):  # tensor id -> (when, row) of c10d ops using it, sorted
            self._c10d_by_tensor: dict[int, list[tuple[int, int]]] = {}
            for j in sorted(comm, key=lambda j: (int(when[j]), j)):
                if names[j].startswith("c10d::"):
                    for tid in set(t.tensor_id[t.of(j)].tolist()):
                        self._c10d_by_tensor.setdefault(tid, []).append((int(when[j]), j))
        best, best_when = -1, None
        for tid in set(t.tensor_id[t.of(i)].tolist()):
            rows = self._c10d_by_tensor.get(tid, [])
            k = bisect.bisect_left(rows, (int(when[i]), i))
            if k and (best_when is None or rows[k - 1] > (best_when, best)):
                best_when, best = rows[k - 1]
        p, hops = i, 0
        while best < 0 and h.parent[p] >= 0 and hops < 4:  # nccl:* -> record_param_comms -> c10d::*
            p, hops = h.row(int(h.parent[p])), hops + 1
            if p < 0:
                break
            if names[p].startswith("c10d::"):
                best = p
        return best

    def _comm_size(self, i: int, issuer: int, ctype: int | None) -> int:
        """Bytes a collective moves (record_param_comms attributes, else the c10d op's tensors)."""
        h = self.h
        rpc = self._record_param_comms(issuer if issuer >= 0 else i)
        if rpc >= 0:
            nel_in = h.attr(rpc, "in_msg_nelems")
            nel_out = h.attr(rpc, "out_msg_nelems")
            item = SCALAR_TYPE_BYTES.get(str(h.attr(rpc, "dtype")), None)
            if nel_in is not None and item is not None:
                # (ctype None: point-to-point, which message_bytes sizes by its input)
                return message_bytes(ctype, int(nel_in) * item, int(nel_out or 0) * item)
        src = issuer if issuer >= 0 else i
        key = classify(self.names[src]).key
        arg = INPUT_ARG.get(key, 0)
        t = h.tensors
        sl = t.of(src)
        sel = (~t.output[sl]) & (t.arg[sl] == arg)
        if not sel.any():  # e.g. a backend op whose only tensor is its buffer
            sel = ~t.output[sl]
        return int((t.numel[sl][sel] * t.itemsize[sl][sel]).sum())

    def _record_param_comms(self, issuer: int) -> int:
        """The record_param_comms child of a c10d op that carries collective attributes, if any."""
        h = self.h
        if self.names[issuer] == "record_param_comms":
            return issuer if h.attr(issuer, "in_msg_nelems") is not None else -1
        if not hasattr(self, "_rpc_children"):  # record_param_comms rows by parent id, built once
            self._rpc_children: dict[int, list[int]] = {}
            for j in h.names_of("record_param_comms").tolist():
                self._rpc_children.setdefault(int(h.parent[j]), []).append(j)
        for j in self._rpc_children.get(int(h.ids[issuer]), []):
            if h.attr(j, "in_msg_nelems") is not None and h.attr(j, "collective_name") != "wait":
                return j
        return -1

    def _splits(self, issuer: int) -> dict[str, str]:
        """all_to_allv split sizes per peer as recorded, e.g. {"in_split_size": "[2, 6]"}: from
        record_param_comms (NCCL), else the c10d op's own arguments. Units are the recorded
        ones (elements or rows); consumers use them as proportions of comm_size."""
        rpc = self._record_param_comms(issuer) if issuer >= 0 else -1
        out = {}
        for key in ("in_split_size", "out_split_size"):
            v = self.h.attr(rpc, key) if rpc >= 0 else None
            if v not in (None, "", "[]", []):
                out[key] = v if isinstance(v, str) else json.dumps(v)
        if not out and issuer >= 0 and classify(self.names[issuer]).key in ("alltoall", "alltoallv"):
            out = self._c10d_splits(issuer)
        return out

    def _c10d_splits(self, issuer: int) -> dict[str, str]:
        """Split sizes from the arguments of the c10d op (gloo jobs have no record_param_comms to
        record them): c10d::alltoall_base_'s output_split_sizes and input_split_sizes (rows), or
        the elements of each tensor of c10d::alltoall_'s output and input lists (one per peer)."""
        inputs = self.h.io(issuer)[0]
        vals, shapes = inputs["values"], inputs["shapes"]
        out = {}
        if self.names[issuer].startswith("c10d::alltoall_base"):
            for key, k in (("out_split_size", 3), ("in_split_size", 4)):
                v = vals[k] if len(vals) > k else None
                if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                    out[key] = json.dumps(v)
            return out
        for key, k in (("out_split_size", 0), ("in_split_size", 1)):
            per_peer = shapes[k] if len(shapes) > k else None
            if isinstance(per_peer, list) and per_peer and all(isinstance(x, list) for x in per_peer):
                out[key] = json.dumps([int(np.prod(x, dtype=np.int64)) for x in per_peer])
        return out

    def _pg_name(self, issuer: int) -> str | None:
        rpc = self._record_param_comms(issuer) if issuer >= 0 else -1
        if rpc >= 0 and self.h.attr(rpc, "pg_name") is not None:
            return str(self.h.attr(rpc, "pg_name"))
        groups = self.h.process_groups
        return str(groups[0].get("pg_name", "0")) if len(groups) == 1 else None

    def _comm_attrs(self, i: int, issuer: int, kind) -> dict:
        """Type and attributes of the node of communication op i (a collective or send/recv). The
        c10d op that issued a backend op names the collective (gloo runs some reduce-scatters as
        an all-reduce of its own: the job did a reduce-scatter)."""
        if 0 <= issuer != i and kind.collective is not None:
            by_issuer = classify(self.names[issuer])
            if by_issuer.collective is not None:
                kind = by_issuer
        size = self._comm_size(i, issuer, kind.collective)
        if kind.collective is not None:
            self.r.collectives.append((collective_name(kind.collective), size))
            return dict(
                type=NodeType.COMM_COLL_NODE,
                comm_type=kind.collective,
                comm_size=size,
                pg_name=self._pg_name(issuer),
                **self._splits(issuer),
            )
        src = issuer if issuer >= 0 else i
        vals = self.h.io(src)[0]["values"]
        peer = vals[2] if len(vals) > 2 and isinstance(vals[2], int) else None
        tag = vals[3] if len(vals) > 3 and isinstance(vals[3], int) else 0
        if peer is None:
            self.r.warn(f"node id {int(self.h.ids[i])}: {self.names[i]} without a recorded peer rank")
            peer = -1
        if kind.p2p == "recv":
            return dict(type=NodeType.COMM_RECV_NODE, comm_src=peer, comm_size=size, comm_tag=tag)
        return dict(type=NodeType.COMM_SEND_NODE, comm_dst=peer, comm_size=size, comm_tag=tag)
