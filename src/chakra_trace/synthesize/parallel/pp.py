"""Pipeline schedules: the order in which one stage runs its micro-batches' forward and backward.

- GPipe: every forward, then every backward (micro-batches in order).
- 1F1B (PipeDream-flush, Megatron-LM's default): stage p of P runs min(P - p - 1, M) warm-up
  forwards, then alternates one forward and one backward, then runs the remaining backwards.
- Interleaved 1F1B (Megatron-LM's virtual pipeline, V chunks per stage): stage p holds the
  virtual stages p, p + P, ..., p + (V - 1)P, and runs M·V forward and M·V backward steps.
  Forward step k runs chunk (k mod PV) div P on micro-batch (k div PV)·P + k mod P (backward
  steps take the chunks in reverse); (P - p - 1)·2 + (V - 1)·P warm-up forwards (all of them when
  M = P), then one forward and one backward alternately, then the remaining backwards. M must be
  a multiple of P. The bubble shrinks V-fold at the price of V times the sends.

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


def interleaved(stage: int, stages: int, micro_batches: int, chunks: int) -> list[tuple[int, int, int]]:
    """[(FWD or BWD, micro-batch, chunk), ...] in execution order (see the module docstring)."""
    P, M, V = stages, micro_batches, chunks
    total = M * V

    def step(k: int, ph: int) -> tuple[int, int, int]:
        chunk = (k % (P * V)) // P
        return ph, (k // (P * V)) * P + k % P, chunk if ph == FWD else V - 1 - chunk

    warm = total if M == P else min((P - stage - 1) * 2 + (V - 1) * P, total)
    order = [step(k, FWD) for k in range(warm)]
    for k in range(total - warm):
        order += [step(warm + k, FWD), step(k, BWD)]
    order += [step(k, BWD) for k in range(total - warm, total)]
    return order


__all__ = ["schedule", "interleaved"]
