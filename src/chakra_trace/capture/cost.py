"""FLOPs and bytes of one dispatched aten op, for a roofline that costs the captured node.

FLOPs come from `torch.utils.flop_counter`'s registered formulas where PyTorch has one (matmuls,
convolutions, fused attention: the library PyTorch keeps in step with its ops), else from our own
rules (`convert.flops`: elementwise ops, reductions, norms, softmax, losses), else 0; every node
says which (`flops_source`: "torch", "chakra" or "none"). Bytes are what the op reads plus what
it writes (tensor inputs + outputs, lists included), 0 for ops that only make views or query
metadata; a GEMM that adds its input times beta = 0 (`baddbmm(buffer, a, b, beta=0)`, Megatron's
attention scores) does not read that input (cuBLAS ignores C when beta is 0). The same functions cost a recorded op from its shapes (`recorded_cost`), which is how
the capture is checked against a recording.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..convert import flops as rules

TORCH, CHAKRA, NONE = "torch", "chakra", "none"

# Fused CPU attention kernels have no formula registered in flop_counter (only the CUDA ones do):
# they do the same work as `scaled_dot_product_attention`, so they take torch's SDPA formulas.
_SDPA_FORWARD = {"aten::_scaled_dot_product_flash_attention_for_cpu"}
_SDPA_BACKWARD = {"aten::_scaled_dot_product_flash_attention_for_cpu_backward"}
# GEMMs computing beta * input + alpha * (a @ b): with beta 0 the input is not read
_BETA_GEMMS = {"aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::addmv"}


def op_name(func: Any) -> str:
    """ "aten::mm" for torch.ops.aten.mm.default (the name recorded traces use, overload dropped)."""
    ns, _, rest = func.name().partition("::")
    return f"{ns}::{rest.split('.')[0]}"


def _shape(x: Any) -> Any:
    return x.shape if hasattr(x, "shape") else x


def torch_flops(name: str, packet: Any, args: Sequence, kwargs: dict, out: Any) -> int | None:
    """FLOPs by PyTorch's own formula for this op, or None when it has none. Tensor arguments may
    be given as tensors or as their shapes (the formulas read shapes only)."""
    from torch.utils import flop_counter as fc

    formula = fc.flop_registry.get(packet) if packet is not None else None
    if formula is not None:
        return int(formula(*args, **kwargs, out_val=out))
    if name in _SDPA_FORWARD:  # (query, key, value, ...)
        return int(fc.sdpa_flop_count(_shape(args[0]), _shape(args[1]), _shape(args[2])))
    if name in _SDPA_BACKWARD:  # (grad_out, query, key, value, out, logsumexp, ...)
        return int(fc.sdpa_backward_flop_count(_shape(args[0]), _shape(args[1]), _shape(args[2]), _shape(args[3])))
    return None


def cost(
    name: str,
    packet: Any,
    args: Sequence,
    kwargs: dict,
    out: Any,
    ins: Sequence[tuple[Sequence[int], int]],
    outs: Sequence[tuple[Sequence[int], int]],
    singles: Sequence[Sequence[int]],
    values: Sequence | None = None,
    view: bool = False,
) -> tuple[int, int, str]:
    """(FLOPs, bytes, source) of one op. `ins`/`outs`: (shape, itemsize) of its tensors; `singles`:
    shapes of its top-level tensor arguments in order; `view`: the op only makes a view."""
    if view or name in rules._FREE:
        return 0, 0, NONE
    moved = rules.tensor_cost(name, ins, outs, singles, values)
    nbytes = moved.bytes
    if name in _BETA_GEMMS and kwargs.get("beta") == 0 and ins:
        shape, itemsize = ins[0]
        nbytes -= rules._numel(shape) * itemsize
    flops = torch_flops(name, packet, args, kwargs, out)
    if flops is not None:
        return flops, nbytes, TORCH
    if moved.flops is not None:
        return int(moved.flops), nbytes, CHAKRA
    return 0, nbytes, NONE


def recorded_cost(
    schema_name: str,
    in_shapes: Sequence,
    in_types: Sequence,
    in_values: Sequence,
    out_shapes: Sequence,
    out_types: Sequence,
) -> tuple[int, int, str]:
    """(FLOPs, bytes, source) of an op as a PyTorch execution trace recorded it (`schema_name` like
    "aten::add.Tensor"), by the rules `cost` applies to a captured op: a recorded step and its
    capture cost alike when their ops, shapes and dtypes are alike."""
    import torch

    ns, _, rest = schema_name.partition("::")
    base, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns), base, None)
    args = [
        torch.Size(s) if isinstance(t, str) and t.startswith("Tensor(") and rules._is_shape(s) else v
        for s, t, v in zip(in_shapes, in_types, in_values)
    ]
    outs_shapes = [
        torch.Size(s) for s, t in zip(out_shapes, out_types) if isinstance(t, str) and t.startswith("Tensor(")
    ]
    out = outs_shapes[0] if len(outs_shapes) == 1 else tuple(outs_shapes)
    view, kwargs = False, {}
    op = getattr(packet, overload or "default", None) if packet is not None else None
    if op is not None:
        view = is_view(op)
        # a trace records every argument in order; the formulas take keyword-only ones by name
        kw_only = [a.name for a in op._schema.arguments if a.kwarg_only]
        n_pos = len(op._schema.arguments) - len(kw_only)
        kwargs = dict(zip(kw_only, args[n_pos:]))
        args = args[:n_pos]
    name = f"{ns}::{base}"
    singles = [
        s for s, t in zip(in_shapes, in_types) if isinstance(t, str) and t.startswith("Tensor(") and rules._is_shape(s)
    ]
    return cost(
        name,
        packet,
        args,
        kwargs,
        out,
        rules._tensors(in_shapes, in_types),
        rules._tensors(out_shapes, out_types),
        singles,
        in_values,
        view,
    )


def is_view(func: Any) -> bool:
    """Whether an op only makes views of its inputs: each output aliases an input, none is written."""
    returns = func._schema.returns
    if not returns:
        return False
    return all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


__all__ = ["cost", "recorded_cost", "torch_flops", "is_view", "op_name", "TORCH", "CHAKRA", "NONE"]
