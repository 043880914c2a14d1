"""FLOPs and bytes of PyTorch ops from their recorded shapes, for roofline models.

A simulator that costs a COMP node on hardware that does not exist needs `num_ops` (FLOPs)
and `tensor_size` (bytes moved). Both come from the shapes and types the execution trace
records for each op. Counts follow the usual conventions: a multiply-add is 2 FLOPs;
elementwise ops cost a small constant per output element; ops that only change views or
allocate memory cost nothing and touch no data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

from ..io.collective_names import tensor_itemsize
from ..schema.compute_types import ATTENTION_OPS, CONV_BACKWARD_OPS, CONV_FORWARD_OPS, MATMUL_OPS

# Ops that create views, allocate or query: no FLOPs and no bytes touched.
_FREE = {
    "aten::view",
    "aten::_unsafe_view",
    "aten::reshape",
    "aten::_reshape_alias",
    "aten::t",
    "aten::transpose",
    "aten::permute",
    "aten::as_strided",
    "aten::expand",
    "aten::expand_as",
    "aten::slice",
    "aten::select",
    "aten::narrow",
    "aten::squeeze",
    "aten::unsqueeze",
    "aten::detach",
    "detach",
    "aten::detach_",
    "aten::alias",
    "aten::view_as",
    "aten::unbind",
    "aten::split",
    "aten::chunk",
    "aten::empty",
    "aten::empty_strided",
    "aten::empty_like",
    "aten::resolve_conj",
    "aten::resolve_neg",
    "aten::result_type",
    "aten::size",
    "aten::stride",
    "aten::is_nonzero",
    "aten::flatten",
    "aten::unflatten",
    "aten::lift_fresh",
    "aten::_local_scalar_dense",
    "aten::item",
    "aten::numpy_T",
    "aten::movedim",
    "aten::contiguous",
    "aten::set_",
    "aten::resize_",
    "aten::to",
}

# Pure data movement: bytes but no FLOPs.
_MOVE = {
    "aten::copy_",
    "aten::_to_copy",
    "aten::clone",
    "aten::cat",
    "aten::stack",
    "aten::fill_",
    "aten::zero_",
    "aten::zeros",
    "aten::ones",
    "aten::full",
    "aten::zeros_like",
    "aten::ones_like",
    "aten::full_like",
    "aten::index",
    "aten::index_select",
    "aten::gather",
    "aten::scatter",
    "aten::scatter_",
    "aten::index_put_",
    "aten::masked_select",
    "aten::flatten_dense_tensors",
    "aten::unflatten_dense_tensors",
    "aten::pad",
    "aten::constant_pad_nd",
    "aten::repeat",
    "aten::roll",
    "aten::flip",
    "aten::scalar_tensor",
    "aten::arange",
    "aten::_foreach_copy_",
    "aten::new_empty_strided",
    "aten::new_zeros",
    "aten::tril",
    "aten::triu",
    "aten::embedding",
    "aten::embedding_dense_backward",
    "aten::embedding_backward",
    "aten::_embedding_bag",
    "aten::bernoulli_",
    "aten::normal_",
    "aten::uniform_",
    "aten::random_",
}

# FLOPs per output element of elementwise ops (default 1 for the arithmetic listed).
_ELEMENTWISE = {
    "aten::add": 1,
    "aten::add_": 1,
    "aten::sub": 1,
    "aten::sub_": 1,
    "aten::mul": 1,
    "aten::mul_": 1,
    "aten::div": 1,
    "aten::div_": 1,
    "aten::neg": 1,
    "aten::neg_": 1,
    "aten::abs": 1,
    "aten::relu": 1,
    "aten::relu_": 1,
    "aten::clamp": 1,
    "aten::clamp_": 1,
    "aten::clamp_min": 1,
    "aten::clamp_min_": 1,
    "aten::clamp_max": 1,
    "aten::threshold_backward": 1,
    "aten::sqrt": 1,
    "aten::rsqrt": 1,
    "aten::pow": 1,
    "aten::exp": 1,
    "aten::log": 1,
    "aten::reciprocal": 1,
    "aten::sign": 1,
    "aten::maximum": 1,
    "aten::minimum": 1,
    "aten::where": 1,
    "aten::masked_fill": 1,
    "aten::masked_fill_": 1,
    "aten::eq": 1,
    "aten::ne": 1,
    "aten::lt": 1,
    "aten::gt": 1,
    "aten::le": 1,
    "aten::ge": 1,
    "aten::sigmoid": 4,
    "aten::tanh": 4,
    "aten::gelu": 8,
    "aten::gelu_backward": 10,
    "aten::silu": 5,
    "aten::silu_backward": 7,
    "aten::sigmoid_backward": 3,
    "aten::tanh_backward": 3,
    "aten::addcmul": 2,
    "aten::addcmul_": 2,
    "aten::addcdiv": 2,
    "aten::addcdiv_": 2,
    "aten::lerp": 2,
    "aten::lerp_": 2,
    "aten::dropout": 1,
    "aten::native_dropout": 2,
    "aten::native_dropout_backward": 1,
    "aten::hardtanh": 1,
    "aten::hardtanh_": 1,
    "aten::leaky_relu": 1,
    "aten::leaky_relu_": 1,
    "aten::_foreach_add_": 1,
    "aten::_foreach_mul_": 1,
    "aten::_foreach_div_": 1,
    "aten::_foreach_sqrt": 1,
    "aten::_foreach_addcmul_": 2,
    "aten::_foreach_addcdiv_": 2,
    "aten::_foreach_lerp_": 2,
    "aten::square": 1,
    "aten::erf": 4,
}

# Fused kernels recorded as one op (Megatron-LM's and Transformer Engine's, as
# examples/models/megatron_kernels.py and te_kernels.py define them): FLOPs per element of the FIRST output, the sum of the rules above for the
# unfused ops each one replaces (a mask output is not counted again).
_FUSED = {
    "megatron::bias_gelu": 9,  # add 1 + gelu 8
    "megatron::bias_gelu_backward": 11,  # add 1 + gelu_backward 10
    "megatron::bias_dropout_add": 4,  # add 1 + dropout 2 + add 1
    "megatron::bias_dropout_add_backward": 1,  # native_dropout_backward 1
    "megatron::scaled_upper_triang_masked_softmax": 7,  # scale 1 + mask 1 + softmax 5
    "megatron::scaled_upper_triang_masked_softmax_backward": 5,  # softmax backward 4 + scale 1
    # Megatron-Core with Transformer Engine (examples/models/te_kernels.py)
    "te::rmsnorm_fwd": 4,  # rms_norm 4
    "te::rmsnorm_bwd": 10,  # layer-norm backward 14 less its 4 for the mean
    "te::layernorm_fwd": 8,  # native_layer_norm 8
    "te::layernorm_bwd": 14,  # native_layer_norm_backward 14
    "te::fused_rope_fwd": 4,  # neg 1 + mul 1 + mul 1 + add 1 (cat moves)
    "te::fused_rope_bwd": 4,  # the same, transposed
    "te::swiglu": 6,  # silu 5 + mul 1
    "te::swiglu_bwd": 9,  # silu_backward 7 + two muls
    "te::squared_relu": 2,  # relu 1 + square 1
    "te::squared_relu_bwd": 3,  # square's backward 2 + threshold_backward 1
    "te::ce_logits_max": 1,  # max 1 (the fp32 copy moves)
    "te::ce_exp_sum": 3,  # sub 1 + exp 1 + sum 1
    "te::ce_softmax_loss": 1,  # div 1 (the log is per token)
    "te::ce_bwd": 2,  # sub 1 (at the target) + mul 1
    "te::fused_adam": 11,  # AdamW's foreach rules: lerp 2, mul 1 + addcmul 2, sqrt 1, div 1, add 1, addcdiv 2, decay 1
}

# FLOPs per INPUT element of reductions and normalizations.
_REDUCTION = {
    "aten::sum": 1,
    "aten::mean": 1,
    "aten::max": 1,
    "aten::min": 1,
    "aten::amax": 1,
    "aten::amin": 1,
    "aten::argmax": 1,
    "aten::argmin": 1,
    "aten::norm": 2,
    "aten::linalg_vector_norm": 2,
    "aten::var": 3,
    "aten::std": 3,
    "aten::var_mean": 3,
    "aten::prod": 1,
    "aten::cumsum": 1,
    "aten::softmax": 5,
    "aten::_softmax": 5,
    "aten::log_softmax": 5,
    "aten::_log_softmax": 5,
    "aten::_softmax_backward_data": 4,
    "aten::_log_softmax_backward_data": 4,
    "aten::layer_norm": 8,
    "aten::native_layer_norm": 8,
    "aten::native_layer_norm_backward": 14,
    "aten::batch_norm": 8,
    "aten::native_batch_norm": 8,
    "aten::_batch_norm_impl_index": 8,
    "aten::cudnn_batch_norm": 8,
    "aten::native_batch_norm_backward": 14,
    "aten::cudnn_batch_norm_backward": 14,
    "aten::group_norm": 8,
    "aten::native_group_norm": 8,
    "aten::nll_loss": 1,
    "aten::nll_loss_forward": 1,
    "aten::nll_loss_backward": 1,
    "aten::cross_entropy_loss": 6,
    "aten::mse_loss": 3,
    "aten::mse_loss_backward": 3,
    "aten::max_pool2d": 1,
    "aten::max_pool2d_with_indices": 1,
    "aten::max_pool2d_with_indices_backward": 1,
    "aten::avg_pool2d": 1,
    "aten::adaptive_avg_pool2d": 1,
    "aten::_adaptive_avg_pool2d": 1,
    "aten::_adaptive_avg_pool2d_backward": 1,
    "aten::rms_norm": 4,
    "aten::_fused_rms_norm": 4,
}

# the ops TF32 applies to, shared with the rooflines' peak choice (`schema.compute_types`)
_MATMUL = MATMUL_OPS
_CONV = CONV_FORWARD_OPS
_CONV_BACKWARD = CONV_BACKWARD_OPS
_ATTENTION = ATTENTION_OPS


@dataclass(frozen=True)
class Cost:
    flops: int | None  # None: the op is not in the cost model
    bytes: int


def _is_shape(s: Any) -> bool:
    return isinstance(s, list) and all(isinstance(d, int) for d in s)


def _tensors(shapes: Sequence, types: Sequence) -> list[tuple[list[int], int]]:
    """(shape, itemsize) of every tensor argument, including those inside lists."""
    out = []
    for shape, t in zip(shapes, types):
        if not isinstance(t, str):
            continue
        if t.startswith("Tensor("):
            size = tensor_itemsize(t)
            if size is not None and _is_shape(shape):
                out.append((shape, size))
        elif t.startswith(("GenericList[", "Tuple[")) and "Tensor(" in t and isinstance(shape, list):
            inner = t[t.index("[") + 1 : -1].split(",")
            for s, it in zip(shape, inner):
                size = tensor_itemsize(it.strip())
                if size is not None and _is_shape(s):
                    out.append((s, size))
    return out


def _numel(shape: Sequence[int]) -> int:
    return prod(shape) if shape else 1


def _nth(singles: Sequence[Sequence[int]], k: int) -> Sequence[int] | None:
    return singles[k] if k < len(singles) else None


def op_cost(
    name: str,
    in_shapes: Sequence,
    in_types: Sequence,
    out_shapes: Sequence = (),
    out_types: Sequence = (),
    in_values: Sequence | None = None,
) -> Cost:
    """FLOPs and bytes of one op from its recorded input/output shapes and type strings."""
    if name in _FREE:
        return Cost(0, 0)
    singles = [
        shape
        for shape, t in zip(in_shapes, in_types)
        if isinstance(t, str) and t.startswith("Tensor(") and _is_shape(shape)
    ]
    return tensor_cost(name, _tensors(in_shapes, in_types), _tensors(out_shapes, out_types), singles, in_values)


def tensor_cost(
    name: str,
    ins: Sequence[tuple[Sequence[int], int]],
    outs: Sequence[tuple[Sequence[int], int]],
    singles: Sequence[Sequence[int]],
    in_values: Sequence | None = None,
) -> Cost:
    """FLOPs and bytes from tensor lists: `ins`/`outs` as (shape, itemsize), `singles` the shapes of
    the top-level Tensor arguments in order (what matmul / conv operands are read from)."""
    if name in _FREE:
        return Cost(0, 0)
    moved = sum(_numel(s) * b for s, b in ins) + sum(_numel(s) * b for s, b in outs)
    out_elems = sum(_numel(s) for s, _ in outs)
    if name in _MOVE:
        return Cost(0, moved)
    if name in _ELEMENTWISE:
        elems = out_elems or max((_numel(s) for s, _ in ins), default=0)
        return Cost(_ELEMENTWISE[name] * elems, moved)
    if name in _FUSED:
        return Cost(_FUSED[name] * (_numel(outs[0][0]) if outs else 0), moved)
    if name in _REDUCTION:
        elems = _numel(ins[0][0]) if ins else 0
        if name.endswith("_backward") or name.endswith("_backward_data"):
            elems = max(elems, out_elems)
        return Cost(_REDUCTION[name] * elems, moved)
    if name in _MATMUL:
        return Cost(_matmul_flops(name, singles, out_elems), moved)
    if name in _CONV:
        return Cost(_conv_flops(singles, out_elems, transposed="transpose" in name), moved)
    if name in _CONV_BACKWARD:
        return Cost(_conv_backward_flops(singles, in_values), moved)
    if name in _ATTENTION:
        return Cost(_attention_flops(singles), moved)
    return Cost(None, moved)


def needs_values(name: str) -> bool:
    """Whether the cost of `name` depends on its argument values (not only shapes)."""
    return name in _CONV_BACKWARD


def _matmul_flops(name: str, singles, out_elems: int) -> int | None:
    if name in ("aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::addmv"):
        a = _nth(singles, 1)  # (bias, a, b)
        bias = out_elems
    else:
        a = _nth(singles, 0)
        bias = out_elems if name == "aten::linear" and _nth(singles, 2) is not None else 0
    if not a:
        return None
    k = a[-1]  # contracted dimension
    if name in ("aten::dot", "aten::vdot"):
        return 2 * k
    return 2 * out_elems * k + bias


def _conv_flops(singles, out_elems: int, transposed: bool) -> int | None:
    x, w, b = _nth(singles, 0), _nth(singles, 1), _nth(singles, 2)
    if x is None or w is None or len(w) < 3:
        return None
    if transposed:  # weight (Cin, Cout/groups, k...): each input element scatters into Cout/g * k outputs
        return 2 * _numel(x) * w[1] * _numel(w[2:])
    bias = out_elems if b is not None and len(b) == 1 else 0
    return 2 * out_elems * w[1] * _numel(w[2:]) + bias  # Cin/groups * kernel volume per output


def _conv_backward_flops(singles, values) -> int | None:
    grad_out, w = _nth(singles, 0), _nth(singles, 2)
    if grad_out is None or w is None or len(w) < 3:
        return None
    mask = [True, True, True]
    if values:  # the last argument is output_mask, e.g. [True, True, False]
        last = values[-1]
        if isinstance(last, list) and len(last) == 3 and all(isinstance(v, bool) for v in last):
            mask = last
    forward = 2 * _numel(grad_out) * w[1] * _numel(w[2:])
    return forward * (int(mask[0]) + int(mask[1])) + (_numel(grad_out) if mask[2] else 0)


def _attention_flops(singles) -> int | None:
    q, k = _nth(singles, 0), _nth(singles, 1)
    if q is None or k is None or len(q) < 2 or len(k) < 2:
        return None
    batch = _numel(q[:-2])
    lq, d = q[-2], q[-1]
    lk = k[-2]
    return 4 * batch * lq * lk * d + 5 * batch * lq * lk  # QK^T and PV, plus the softmax
