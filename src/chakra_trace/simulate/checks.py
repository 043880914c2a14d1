"""What `validate` rejects, the simulator refuses: cross-rank checks before a run.

Without them a run finishes silently on nonsense -- collectives that differ across ranks,
sends to NPUs that do not exist, negative sizes, groups naming absent ranks. A scale-out
shares trace objects between NPUs, so each distinct trace is checked once: where no trace
sends or receives and every group spans every NPU, ranks sharing a trace cannot disagree, and
the cross-rank checks run over one representative rank per distinct trace.
"""

from __future__ import annotations

import numpy as np

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.enums import NodeType
from ..schema.groups import ALL_RANKS_GROUPS, named_groups
from ..schema.trace import Trace
from ..validate import ERROR, SAMPLE, Issue, ValidationReport, validate_workload


class WorkloadInvalid(ChakraError):
    """The workload fails validation: the run is refused (``validate=False`` to run anyway)."""

    def __init__(self, report: ValidationReport, errors: list[Issue]):
        self.report = report
        first = errors[0]
        where = f"rank {first.rank}: " if first.rank is not None else ""
        nodes = f" (nodes {', '.join(map(str, first.node_ids[:5]))})" if first.node_ids else ""
        more = f"; and {len(errors) - 1} more error(s)" if len(errors) > 1 else ""
        super().__init__(
            f"the workload fails validation: {where}[{first.code}] {first.message}{nodes}{more} "
            "(see `chakra validate`; --no-validate / validate=False runs it anyway)"
        )


def check_workload(traces: dict[int, Trace], groups: dict[str, list[int]], npus: int | None = None) -> ValidationReport:
    """`validate_workload` of the NPUs' traces and groups, each distinct trace checked once.
    ``npus``: the network's (default: as many as the traces); ranks of groups past them are errors."""
    reps: dict[int, int] = {}  # id(trace) -> first rank running it
    for r in sorted(traces):
        reps.setdefault(id(traces[r]), r)
    ranks = sorted(traces)
    spans = all(sorted(m) == ranks for g, m in groups.items() if g not in ALL_RANKS_GROUPS)
    if len(reps) < len(traces) and spans and not any(_p2p(traces[r]) for r in reps.values()):
        keep = sorted(reps.values())
        report = validate_workload(Workload({r: traces[r] for r in keep}, {g: keep for g in groups}))
    else:
        report = validate_workload(Workload(dict(traces), dict(groups)))
    report.issues.extend(_absent_members(traces, groups, reps, len(traces) if npus is None else npus))
    return report.sort()


def _absent_members(
    traces: dict[int, Trace], groups: dict[str, list[int]], reps: dict[int, int], npus: int
) -> list[Issue]:
    """Groups the traces use that list NPUs the network does not have: their collectives would
    wait for members that never come (ranks of the network without a trace are symmetric copies,
    `peers`; validation only warns of them)."""
    used: set[str] = set()
    for r in reps.values():
        used |= named_groups(traces[r])
    out = []
    for g, members in sorted(groups.items()):
        absent = sorted({int(m) for m in members if not 0 <= int(m) < npus})
        if absent and g in used:
            shown = ", ".join(map(str, absent[:10])) + (f", ... ({len(absent)})" if len(absent) > 10 else "")
            out.append(
                Issue(
                    ERROR,
                    "group-unknown-npu",
                    len(absent),
                    f"group {g!r} lists ranks {shown}, not NPUs of this network (0..{npus - 1})",
                    details={"group": g, "ranks": absent[:SAMPLE]},
                )
            )
    return out


def refuse_invalid(report: ValidationReport) -> None:
    """Raise WorkloadInvalid on errors the simulator does not repair itself (fixable ones --
    missing dependencies, control cycles -- it repairs with a warning, or reports as blocked)."""
    errors = [i for i in report.errors if not i.fixable]
    if errors:
        raise WorkloadInvalid(report, errors)


def _p2p(t: Trace) -> bool:
    return bool(np.any((t.types == NodeType.COMM_SEND_NODE) | (t.types == NodeType.COMM_RECV_NODE)))
