"""Chakra traces as ASTRA-sim's reference binary (HEAD) reads them.

Our traces are valid Chakra, but ASTRA-sim aborts or stops on some valid things:
- METADATA nodes (which the PyTorch converters, ours and Chakra's, write for process groups):
  its statistics abort with "Invalid node_type". They are dropped here; a node that depended on
  one depends on that node's own dependencies instead.
- Communicator groups: it reads a collective's group from ``pg_name`` as an integer (``stoi``),
  "" and "0" meaning every rank, and the members of any other group from a comm-groups JSON
  (``--comm-group-configuration``), not from ``pg_config``. Groups of every rank become "0";
  the others keep a positive integer name or get the next free one, and are written to
  ``<prefix>.comm_groups.json``.
- A collective whose size differs across its members (an uneven all-to-all: PyTorch's
  `all_to_all_single` with splits) leaves ASTRA-sim waiting for messages that never match, a
  deadlock. Such collectives are listed; ``even_sizes="max"`` gives every member the largest.
- What `chakra validate --fix` repairs (`fix_trace`), on which it aborts or stops with nodes
  never run: dependencies on nodes the trace does not hold (public PyTorch traces have them, a
  parent outside the recorded window), on the node itself or repeated, control dependencies on
  a cycle, and host-side collective nodes (``c10d::allreduce_`` on the CPU, no comm_type: "Comm
  node should not be on CPU"), made compute nodes. Each rank's repairs are listed.
`chakra simulate --compat astra` on the exported files gives what it gives on the originals
(with ``even_sizes``: on the exported files).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ChakraError
from ..io.outputs import comm_groups_path
from ..io.workload import Workload
from ..schema.edit import drop_nodes
from ..schema.enums import Attr, NodeType
from ..schema.groups import ALL_RANKS_GROUPS, collective_instances, declared_groups, rows_by_group
from ..schema.trace import Trace
from ..validate import fix_trace


@dataclass
class AstraExport:
    """What was written: the per-rank files, the comm-groups file (None: no subgroup), how
    each group was renamed, the METADATA nodes dropped per rank, and the command to run."""

    files: list[str]
    comm_groups_file: str | None
    groups: dict[str, str]  # our pg_name -> ASTRA-sim's
    members: dict[str, list[int]]  # ASTRA-sim group id -> ranks
    dropped: dict[int, int] = field(default_factory=dict)  # rank -> METADATA nodes dropped
    repairs: dict[int, list[str]] = field(default_factory=dict)  # rank -> what `fix_trace` changed (none: absent)
    prefix: str = ""
    uneven: list[dict] = field(default_factory=list)  # collectives whose size differs across members
    evened: bool = False  # whether they were given their largest size

    def command(self, binary: str = "AstraSim_Analytical_Congestion_Unaware") -> str:
        cmd = f"{binary} --workload-configuration={self.prefix} --system-configuration=SYSTEM.json "
        cmd += "--network-configuration=NETWORK.yml --remote-memory-configuration=MEMORY.json"
        return cmd + (f" --comm-group-configuration={self.comm_groups_file}" if self.comm_groups_file else "")

    def to_dict(self) -> dict:
        return asdict(self)


def astra_groups(workload: Workload) -> tuple[dict[str, str], dict[str, list[int]]]:
    """Our group names -> ASTRA-sim's ("0": every rank; a positive integer name kept; others
    numbered after the largest), and the members of each numbered group."""
    everyone = sorted(workload.traces)
    declared = declared_groups(workload.traces.values())
    found: dict[str, list[int] | None] = {}  # in order of first use; None: every rank
    inferred: dict[str, list[int]] | None = None  # (`all_groups` once: `group_ranks` per name reads every trace)
    for rank in everyone:
        t = workload.traces[rank]
        used = t.has(Attr.PG_NAME) & np.isin(
            t.types, (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
        )
        for code in dict.fromkeys(t.pg_name[used].tolist()):
            name = t.groups[code]
            if name not in found:
                ranks = workload.groups.get(name) or declared.get(name)
                if not ranks:
                    inferred = workload.all_groups() if inferred is None else inferred
                    ranks = inferred[name] if name in inferred else workload.group_ranks(name)
                whole = name in ALL_RANKS_GROUPS or sorted(ranks) == everyone
                found[name] = None if whole else list(ranks)
    keep = {n for n, r in found.items() if r is not None and n.isdigit() and n == str(int(n)) and int(n) > 0}
    nxt = max((int(n) for n in keep), default=0) + 1
    rename: dict[str, str] = {}
    members: dict[str, list[int]] = {}
    for name, ranks in found.items():
        if ranks is None:
            rename[name] = "0"
            continue
        if name in keep:
            rename[name] = name
        else:
            rename[name], nxt = str(nxt), nxt + 1
        members[rename[name]] = ranks
    return rename, members


def without_metadata(t: Trace) -> tuple[Trace, int]:
    """The trace without METADATA nodes (dependencies through them kept: `drop_nodes`), and how
    many there were."""
    gone = t.types == NodeType.METADATA_NODE
    return drop_nodes(t, gone), int(gone.sum())


def uneven_collectives(workload: Workload) -> list[dict]:
    """Collectives (matched by group and position in its issue order) whose `comm_size` differs
    across the ranks that issue them: {group, index, name, sizes: {rank: bytes}}."""
    out = []
    for (group, k), rows in collective_instances(workload.traces, workload.all_groups()).items():
        sizes = {rank: int(workload.traces[rank].comm_size[row]) for rank, row in sorted(rows.items())}
        if len(set(sizes.values())) > 1:
            t, row = workload.traces[min(rows)], rows[min(rows)]
            out.append({"group": group, "index": k, "name": t.names[t.name_codes[row]], "sizes": sizes})
    return out


def _even(original: Trace, t: Trace, rank: int, uneven: list[dict]) -> Trace:
    """`t` (the rank's `original` trace without METADATA nodes, repaired, its groups renamed)
    with each uneven collective at the largest size any member gives it. The instances are
    found in `original`, where `uneven_collectives` found them (under their own group names),
    all at once (`rows_by_group`: a pass per instance costs instances x nodes)."""
    out = t.copy()
    size = out.comm_size.copy()
    mine = [e for e in uneven if rank in e["sizes"]]
    if mine:
        by_group = rows_by_group(original)
        kept = np.cumsum(original.types != NodeType.METADATA_NODE) - 1  # row in `t` (`without_metadata`)
        for e in mine:
            size[kept[by_group[e["group"]][e["index"]]]] = max(e["sizes"].values())
    out.comm_size = size
    return out


def to_astra_sim(
    workload: Workload, prefix: str | os.PathLike, *, compress: bool = False, even_sizes: str | None = None
) -> AstraExport:
    """Write `<prefix>.<rank>.et` (and `<prefix>.comm_groups.json` when the job has subgroups)
    that ASTRA-sim's binary runs: METADATA nodes dropped, what `fix_trace` repairs repaired,
    groups named as it reads them.
    ``even_sizes="max"``: a collective whose size differs across its members gets the largest."""
    if not len(workload):
        raise ChakraError("to_astra_sim: the workload has no ranks")
    if even_sizes not in (None, "max"):
        raise ChakraError(f"to_astra_sim: even_sizes must be None or 'max', not {even_sizes!r}")
    uneven = uneven_collectives(workload)
    rename, members = astra_groups(workload)
    done: dict[int, tuple[Trace, int, list[str]]] = {}  # per trace object: ranks sharing one keep sharing it
    for t in workload.traces.values():
        if id(t) not in done:
            base, n = without_metadata(t)
            fixed, changes = fix_trace(base)
            new = fixed if changes else base
            if any(rename.get(g, g) != g for g in new.groups):
                new = new.copy() if new is t else new
                new.groups = [rename.get(g, g) for g in new.groups]
            done[id(t)] = (new, n, changes)
    out = {rank: done[id(t)][0] for rank, t in workload.traces.items()}
    if uneven and even_sizes:
        out = {rank: _even(workload.traces[rank], t, rank, uneven) for rank, t in out.items()}
    dropped = {rank: done[id(t)][1] for rank, t in workload.traces.items()}
    repairs = {rank: done[id(t)][2] for rank, t in workload.traces.items() if done[id(t)][2]}
    prefix = Path(prefix)
    files = Workload(out).save(prefix, compress=compress, groups=members or None)
    groups_file = comm_groups_path(prefix) if members else None
    return AstraExport(
        files=[str(f) for f in files],
        comm_groups_file=str(groups_file) if groups_file else None,
        groups=rename,
        members=members,
        dropped=dropped,
        repairs=repairs,
        prefix=str(prefix),
        uneven=uneven,
        evened=bool(uneven and even_sizes),
    )
