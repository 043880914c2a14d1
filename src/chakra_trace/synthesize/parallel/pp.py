"""Pipeline schedules: the order in which one stage runs its micro-batches' forward and backward.

- GPipe: every forward, then every backward (micro-batches in order).
- 1F1B (PipeDream-flush, Megatron-LM's default): stage p of P runs min(P - p - 1, M) warm-up
  forwards, then alternates one forward and one backward, then runs the remaining backwards.

Either way each stage ends with the backward of micro-batch M - 1.
"""

from __future__ import annotations

from .master import BWD, FWD


def schedule(kind: str, stage: int, stages: int, micro_batches: int) -> list[tuple[int, int]]:
    """[(FWD or BWD, micro-batch), ...] in execution order."""
    M = micro_batches
    if kind == "gpipe":
        return [(FWD, i) for i in range(M)] + [(BWD, i) for i in range(M)]
    warm = min(stages - stage - 1, M)
    order = [(FWD, i) for i in range(warm)]
    for i in range(M - warm):
        order += [(FWD, warm + i), (BWD, i)]
    order += [(BWD, i) for i in range(M - warm, M)]
    return order


__all__ = ["schedule"]
