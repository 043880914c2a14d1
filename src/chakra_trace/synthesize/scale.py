"""A recorded job on more NPUs than it ran on: data-parallel scale-out.

Every replica of a data-parallel job runs the same program, so NPU n runs recorded rank
n mod R, and a group that spans every recorded rank spans every NPU. The traces are shared
objects, not copies, so a 2-rank recording on 16,384 NPUs costs no more memory than on 2.
"""

from __future__ import annotations

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.groups import ALL_RANKS_GROUPS, declared_groups


def data_parallel(workload: Workload, npus: int) -> Workload:
    """`workload` scaled out to `npus` data-parallel replicas. Raises ChakraError when a
    communicator spans only some recorded ranks (a model- or pipeline-parallel group has no
    single data-parallel reading) or `npus` is not a multiple of the recorded ranks."""
    ranks = workload.ranks
    if ranks != list(range(len(ranks))):
        raise ChakraError(f"data_parallel: ranks must be 0..{len(ranks) - 1}, got {ranks}")
    if npus < len(ranks) or npus % len(ranks):
        raise ChakraError(f"data_parallel: {npus} NPUs is not a multiple of the {len(ranks)} recorded ranks")
    declared = workload.all_groups()  # named in the traces (members inferred) ...
    declared.update(declared_groups(workload.traces.values()))  # ... or declared by the recording
    declared.update(workload.groups)
    groups = {}
    for g, members in declared.items():
        if g in ALL_RANKS_GROUPS or not members or sorted(members) == ranks:
            groups[g] = list(range(npus))
        else:
            raise ChakraError(
                f"data_parallel: communicator {g!r} spans ranks {members} of {ranks}; only groups "
                "over every rank scale out as data parallelism"
            )
    return Workload({n: workload.traces[n % len(ranks)] for n in range(npus)}, groups)
