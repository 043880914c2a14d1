"""The matrix-multiply dimensions each rank runs, so a device model can tell a full GEMM from one
whose tiles leave SMs idle (`simulate.kernels`).

A captured matmul's dimensions (batch, M, N, K) come from its input shapes; a rank runs them for
one micro-batch and its tensor-parallel share. A batched matmul (attention's, batch x heads) has
its batch divided by both. Otherwise the dimension that holds the tokens (batch x seq: M of a
forward linear, K of a weight gradient) is divided by the micro-batches, and tensor parallelism
divides the largest other dimension (a column-parallel linear's outputs, a row-parallel one's inputs,
the vocabulary). Context parallelism divides the token dimension too (a batched matmul's M: the
queries' rows). Divisions round up; a GEMM with no such dimension keeps its own.
"""

from __future__ import annotations

import json
import math

#: Ops whose inputs give (batch, M, N, K), by where their two matrices are in the input list.
_OPERANDS = {
    "aten::mm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::bmm": (0, 1),
    "aten::baddbmm": (1, 2),
    "aten::matmul": (0, 1),
    "aten::linear": (0, 1),  # weight (N, K): transposed below
}


def master_dims(op: str, in_shapes_json: str) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a captured matmul from its recorded input shapes; None for other ops
    or shapes that are no matrices."""
    where = _OPERANDS.get(op)
    if where is None or not in_shapes_json:
        return None
    try:
        shapes = json.loads(in_shapes_json)
        a, b = shapes[where[0]], shapes[where[1]]
    except (ValueError, IndexError, TypeError):
        return None
    if not (isinstance(a, list) and isinstance(b, list) and len(a) >= 2 and len(b) >= 2):
        return None
    if not all(type(x) is int and x > 0 for x in a + b):
        return None
    if op == "aten::linear":
        b = b[::-1]
    if len(b) > 2:  # batched: (batch..., M, K) x (batch..., K, N)
        return math.prod(a[:-2]), a[-2], b[-1], a[-1]
    return 1, math.prod(a[:-1]), b[-1], a[-1]  # a linear's leading dimensions are its rows


def rank_dims(
    dims: tuple[int, int, int, int], tokens: int, micro_batches: int, tp_div: int, cp: int = 1
) -> tuple[int, int, int, int]:
    """``dims`` of the master's op as one rank runs it (module docstring)."""
    bt, m, n, k = dims
    mn = [m, n, k]

    def down(x: int, d: int) -> int:
        return max(1, -(-x // d))

    if bt > 1:  # batched (attention): batch x heads split by micro-batches and TP heads
        return down(bt, micro_batches * tp_div), down(m, cp), n, k
    tok = next((i for i, x in enumerate(mn) if x == tokens), None)
    if tok is None:
        tok = next((i for i, x in enumerate(mn) if tokens and x % tokens == 0), None)
    if micro_batches * cp > 1 and tok is not None:
        mn[tok] = down(mn[tok], micro_batches * cp)
    if tp_div > 1:
        i = max((j for j in range(3) if j != tok), key=lambda j: mn[j])
        mn[i] = down(mn[i], tp_div)
    return bt, mn[0], mn[1], mn[2]
