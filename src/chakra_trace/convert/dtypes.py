"""The compute type of each host op, from the element types its execution trace records for
its tensors, so that a roofline costs FP32 work at the FP32 peak and BF16 work at the BF16 one.

An op computes in the type of its floating-point inputs (an embedding's indices are int64, its
weight and the work fp32; an autocast matmul's inputs are already bf16): the first floating
input tensor decides, else the first input tensor, else the first output. Names are those of
`schema.devices.DTYPES` for the types datasheets give peaks for (fp64, fp32, bf16, fp16, fp8,
int8) and plain names for the others (int64, bool, ...). TF32 is not a tensor type: FP32 work
that ran on TF32 tensor cores (``torch.backends.cuda.matmul.allow_tf32``) is not in the trace.

A node that folds other ops (`convert.rank_graph`: an op and its descendants in the host trace
become one node, whose FLOPs are theirs) computes in its ops' type, not only its own: a backward
node (``autograd::engine::evaluate_function: ConvolutionBackward0``) records no tensors at all,
its ``aten::convolution_backward`` child does. `node_dtypes` takes, in this order: the node's own
type when floating; else the first floating type among the ops folded into it (first in
execution order: lowest id); else its own non-floating type; else the first folded op's
non-floating type. A node none of whose ops records a typed tensor has no type.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ELEMENT_DTYPES", "FLOATING_DTYPES", "element_dtype", "node_dtypes", "op_dtypes"]

#: The trace's element type names (``Tensor(<name>)``; Kineto's "Input type") as dtype names.
ELEMENT_DTYPES = {
    "double": "fp64",
    "float": "fp32",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
    "c10::complex<double>": "fp64",
    "c10::complex<float>": "fp32",
    "c10::complex<c10::Half>": "fp16",
    "signed char": "int8",
    "c10::qint8": "int8",
    "c10::quint8": "uint8",
    "unsigned char": "uint8",
    "short int": "int16",
    "short": "int16",
    "int": "int32",
    "c10::qint32": "int32",
    "long int": "int64",
    "long": "int64",
    "unsigned short": "uint16",
    "unsigned int": "uint32",
    "unsigned long": "uint64",
    "bool": "bool",
}
FLOATING_DTYPES = _FLOATING = frozenset({"fp64", "fp32", "fp16", "bf16", "fp8"})


def element_dtype(type_string: str) -> str | None:
    """``"Tensor(c10::BFloat16)"`` (or ``"c10::BFloat16"``) as ``"bf16"``; None if not known."""
    s = type_string.strip()
    if s.startswith("Tensor(") and s.endswith(")"):
        s = s[7:-1]
    return ELEMENT_DTYPES.get(s)


def op_dtypes(tensors, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The compute type of each host row of ``rows`` (a `HostTensors` CSR by row): codes into
    the returned names, -1 where the row has no tensor of a known type."""
    rows = np.asarray(rows, np.int64)
    names = sorted(set(ELEMENT_DTYPES.values()))
    code_of = {n: i for i, n in enumerate(names)}
    per_type = np.array([code_of.get(element_dtype(t) or "", -1) for t in tensors.types] or [-1], np.int64)
    floating = np.array([n in _FLOATING for n in names], bool)
    out = np.full(rows.size, -1, np.int64)
    if not rows.size:
        return out, names
    counts = tensors.indptr[rows + 1] - tensors.indptr[rows]
    owner = np.repeat(np.arange(rows.size), counts)
    ks = np.repeat(tensors.indptr[rows] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
    code = per_type[tensors.type[ks]] if ks.size else np.zeros(0, np.int64)
    ok = (code >= 0) & (tensors.itemsize[ks] > 0)
    # 0: a floating input, 1: another input, 2: an output; the first of the best kind decides
    rank = np.where(tensors.output[ks], 2, np.where(floating[np.maximum(code, 0)], 0, 1))
    owner, ks, code, rank = owner[ok], ks[ok], code[ok], rank[ok]
    order = np.lexsort((ks, rank, owner))
    first = np.unique(owner[order], return_index=True)[1]
    out[owner[order][first]] = code[order][first]
    return out, names


def node_dtypes(tensors, folded_into: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The compute type of each node row (a row r with ``folded_into[r] == r``) from the ops folded
    into it (rows with ``folded_into`` equal to it; -1: in no node), by the rule of the module
    docstring; ``order`` ranks rows in execution order (the host trace's ids). Codes into the
    returned names per row, -1 where the row is no node or nothing in it has a type."""
    folded_into = np.asarray(folded_into, np.int64)
    out = np.full(folded_into.size, -1, np.int64)
    rows = np.flatnonzero(folded_into >= 0)
    dt, names = op_dtypes(tensors, rows)
    typed = dt >= 0
    rows, dt = rows[typed], dt[typed]
    if not rows.size:
        return out, names
    floating = np.array([n in _FLOATING for n in names], bool)[dt]
    node = folded_into[rows]
    own = rows == node
    # 0: its own floating type, 1: a folded op's floating one, 2: its own other, 3: a folded op's other
    prio = np.where(floating, 0, 2) + ~own
    pick = np.lexsort((np.asarray(order)[rows], prio, node))
    first = np.unique(node[pick], return_index=True)[1]
    out[node[pick][first]] = dt[pick][first]
    return out, names
