"""Communication kernels as the collective nodes of a converted trace.

Why: the kernel is where the communication happens (its device time is the transfer, the host
call around its launch takes 50-75 µs whatever the size), and many kernels do not say which
collective they run (RCCL's ``ncclDevKernel_Generic``, NCCL's ``SendRecv`` for all-to-all, an
MSCCL kernel). Each kernel that `io.comm_kernels.RULES` names becomes the node; its type comes
from the op that launched it (``record_param_comms``'s ``Collective name``, the ``c10d::`` op,
the ``nccl:`` backend op), else from the kernel name, else it is unknown and written without
``comm_type``; its size from the launching op, else unknown and written without ``comm_size``
(`ConversionReport.collectives` says ``UNKNOWN`` / -1, ``comm_kernels`` how each was found).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..io.collective_names import CommKind, classify, is_bookkeeping
from ..io.comm_kernels import KernelMatch
from ..schema.enums import NodeType, collective_name
from .comm_choice import CommChoice

_HOPS = 4  # nccl:all_to_all -> record_param_comms -> c10d::alltoall_base_ (-> an annotation)


class KernelComm(CommChoice):
    """The kernel half of the communication methods of `GraphBuilder`, which inherits it."""

    def _kernel_collective_ops(self, hosts: set[int], comm: set[int]) -> set[int]:
        """The host ops of the collectives that kernels ran: each kernel's launching op, the ops
        up to three levels above it (record_param_comms, the c10d op), and the backend ops
        (``nccl:all_reduce``) that the same c10d op holds beside the launch. None of them is a
        node of its own: the kernel is the collective."""
        out = self._with_ancestors(hosts)
        c10d = {j for j in out if str(self.names[j]).startswith("c10d::")}
        if not c10d:
            return out
        h = self.h
        for j in comm - out:
            p = j
            for _ in range(_HOPS):
                if h.parent[p] < 0 or (p := h.row(int(h.parent[p]))) < 0:
                    break
                if p in c10d:
                    out.add(j)
                    break
        return out

    def _kernel_kind(self, i: int, issuer: int, match: KernelMatch) -> tuple[CommKind, str]:
        """The communication a kernel launched by host op i (-1: none) does, and where that was
        read: the launching op's record_param_comms, its c10d or backend op, the kernel name."""
        if i >= 0:
            rpc = self._record_param_comms(issuer if issuer >= 0 else i)
            named = self.h.attr(rpc, "collective_name") if rpc >= 0 else None
            cands = [str(named)] if named else []
            cands += [str(self.names[r]) for r in self._up(issuer) + self._up(i)]
            for name in cands:
                k = classify(name)
                if (k.collective is not None or k.p2p in ("send", "recv")) and not is_bookkeeping(name):
                    return k, "launching op"
        if match.collective is not None:
            return CommKind(match.collective, None, ""), "kernel name"
        return CommKind(), "unknown"

    def _up(self, i: int) -> list[int]:
        """Row i and the rows up to `_HOPS` levels above it ([] for -1)."""
        out: list[int] = []
        h = self.h
        while i >= 0 and len(out) <= _HOPS:
            out.append(i)
            i = h.row(int(h.parent[i])) if h.parent[i] >= 0 else -1
        return out

    def _size_source(self, i: int, issuer: int) -> str | None:
        """Where a collective's size is recorded: record_param_comms, the op's input shapes, or
        nowhere (None: the size is unknown, not 0)."""
        rpc = self._record_param_comms(issuer if issuer >= 0 else i)
        if rpc >= 0 and self.h.attr(rpc, "dtype") is not None:
            return "record_param_comms"
        src = issuer if issuer >= 0 else i
        sl = self.h.tensors.of(src)
        return "input shapes" if sl.stop > sl.start else None

    def _kernel_comm_attrs(self, i: int, match: KernelMatch, comm: set[int]) -> tuple[dict[str, Any], int]:
        """Node type and attributes of a communication kernel launched by host op i (-1: none),
        and the op that issued it (-1)."""
        issuer = self._issuer(i, comm | {i}) if i >= 0 else -1
        kind, how = self._kernel_kind(i, issuer, match)
        size_from = self._size_source(i, issuer) if i >= 0 else None
        known = kind.collective is not None or kind.p2p in ("send", "recv")
        counts = self.r.comm_kernels
        key = f"{match.library}: type from {how}, size from {size_from or 'nowhere (unknown)'}"
        counts[key] = counts.get(key, 0) + 1
        if known and i >= 0:
            attrs = self._comm_attrs(i, issuer, kind)
            if size_from is None:
                attrs.pop("comm_size", None)
                if kind.collective is not None:  # (`_comm_attrs` noted it with a size of 0)
                    self.r.collectives[-1] = (self.r.collectives[-1][0], -1)
            return attrs, issuer
        attrs = {"type": NodeType.COMM_COLL_NODE}
        if kind.collective is not None:
            attrs["comm_type"] = kind.collective
        size = self._comm_size(i, issuer, kind.collective) if size_from is not None else None
        if size is not None:
            attrs["comm_size"] = size
        if issuer >= 0:
            attrs["pg_name"] = self._pg_name(issuer)
        name = collective_name(kind.collective) if kind.collective is not None else "UNKNOWN"
        self.r.collectives.append((name, -1 if size is None else size))
        return attrs, issuer

    def _kernel_not_recorded(self, i: int, issuer: int) -> bool:
        """Whether host collective i of a trace with GPU kernels ran on the GPU (not gloo's CPU
        worker) and the trace holds no kernel of it: the node then has the host call's time, and
        says ``duration_unknown`` (counted in `ConversionReport.comm_kernels`)."""
        if self.gpu is None or not self.timed:  # type: ignore[attr-defined]
            return False
        if any(str(self.names[r]).startswith("gloo:") for r in {i, issuer} if r >= 0):
            return False
        key = "no kernel recorded: the host call's time, duration_unknown"
        self.r.comm_kernels[key] = self.r.comm_kernels.get(key, 0) + 1
        return True


def kernel_codes(names: list[str], codes: np.ndarray, match) -> dict[int, KernelMatch]:
    """{name code: its rule match} of the distinct codes that are communication kernels."""
    out = {}
    for c in np.unique(codes).tolist():
        m = match(names[int(c)])
        if m is not None:
            out[int(c)] = m
    return out
