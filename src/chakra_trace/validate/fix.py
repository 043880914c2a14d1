"""Repairs with one right answer: `fix_trace` changes only what is unambiguous and says what it did."""

from __future__ import annotations

import numpy as np

from ..schema.enums import Attr, NodeType
from ..schema.trace import Trace
from .attrs import extra_attrs, present
from .checks import edges, host_collectives
from .report import count_noun


def _ctrl_edges_on_cycles(trace: Trace) -> tuple[np.ndarray, int] | None:
    """Control entries that lie on a dependency cycle, when the data dependencies alone are acyclic.

    Dropping exactly these is the one repair that keeps every data dependency (what simulators
    must respect) and every control dependency not on a cycle; the result is acyclic because
    what stays inside a component is data edges only. None when there is nothing to do or
    the data dependencies are cyclic themselves (then no repair is unambiguous).
    """
    found = trace.graph().cycle()
    if found is None or trace.graph(("data",)).cycle() is not None:
        return None
    c = edges(trace, "ctrl")
    ok = ~c.missing & ~c.self_dep
    labels = trace.graph().scc
    sizes = np.bincount(labels)
    on_cycle = ok & (labels[c.src] == labels[np.maximum(c.dst, 0)]) & (sizes[labels[c.src]] > 1)
    return on_cycle, found[1]


def fix_trace(trace: Trace) -> tuple[Trace, list[str]]:
    """A repaired copy and what changed. Only unambiguous repairs:

    - drop data/control dependencies on nodes not in the trace,
    - drop dependencies of a node on itself,
    - drop exact repeats of a dependency entry within a node,
    - when the data dependencies alone are acyclic, drop the control dependencies that lie on
      a cycle (both ends in one strongly connected component): the only choice-free way out,
    - retype host-side COMM_COLL nodes (is_cpu_op, neither comm_type nor comm_size, such as
      ``c10d::allreduce_``; the GPU node carries the collective) to COMP_NODE.

    Duplicate ids, cycles through data dependencies and invalid values are left alone (they
    stay reported).
    """
    out = trace.copy()
    changes: list[str] = []
    n = len(trace)
    for kind, word in (("data", "data"), ("ctrl", "control")):
        e = edges(trace, kind)
        drop = e.missing | e.self_dep | e.duplicate
        if not drop.any():
            continue
        ip, flat = (kind + "_indptr", kind)
        counts = np.bincount(e.src[~drop], minlength=n)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        setattr(out, ip, indptr)
        setattr(out, flat, getattr(trace, flat)[~drop])
        miss = int(e.missing.sum())
        self_ = int((e.self_dep & ~e.missing).sum())
        dup = int((e.duplicate & ~e.missing & ~e.self_dep).sum())
        if miss:
            changes.append(
                f"dropped {count_noun(miss, f'{word} dependency', plural=f'{word} dependencies')} on "
                f"{count_noun(np.unique(e.ids[e.missing]).size, 'missing node')}"
            )
        if self_:
            changes.append(
                f"dropped {count_noun(self_, f'{word} self-dependency', plural=f'{word} self-dependencies')}"
            )
        if dup:
            changes.append(
                "dropped "
                + count_noun(dup, f"repeated {word} dependency entry", plural=f"repeated {word} dependency entries")
            )
    cyclic = _ctrl_edges_on_cycles(out)
    if cyclic is not None:
        on_cycle, blocked = cyclic
        out = out.with_deps("ctrl", ~on_cycle)
        changes.append(
            f"dropped {count_noun(int(on_cycle.sum()), 'control dependency', plural='control dependencies')} "
            f"that lie on dependency cycles (the data dependencies alone are acyclic; "
            f"{count_noun(blocked, 'node')} could never run)"
        )

    extra = extra_attrs(trace)
    host = host_collectives(trace, present(trace, extra, Attr.COMM_TYPE), present(trace, extra, Attr.COMM_SIZE))
    if host.any():
        out.types[host] = NodeType.COMP_NODE
        names = sorted(set(trace.name_array[host][:200].tolist()))
        changes.append(
            f"retyped {count_noun(int(host.sum()), 'host-side COMM_COLL node')} (is_cpu_op, neither "
            f"comm_type nor comm_size, e.g. {', '.join(repr(x) for x in names[:3])}) to COMP_NODE"
        )
    return out, changes
