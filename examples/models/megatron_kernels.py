"""Megatron-LM's fused kernels as PyTorch custom ops (`megatron::...`), for `gpt.py`'s
`"fused": "megatron"`: each kernel is ONE dispatched op, so a capture records it as one node whose
bytes are what the kernel reads and writes, and its backward is one op too.

- `bias_gelu(x, bias)`: Megatron's `bias_gelu_impl` (fused_bias_gelu.py, TorchScript-fused tanh
  GeLU of x + bias); backward `bias_gelu_backward(grad, x, bias)` (its `bias_gelu_back`), the bias
  gradient then a sum over tokens, as autograd reduces Megatron's expanded bias gradient.
- `bias_dropout_add(x, bias, residual, p)` -> (out, mask): `bias_dropout_add_fused_train`
  (transformer.py): residual + dropout(x + bias), the mask kept as one byte per element (bool);
  backward `bias_dropout_add_backward(grad, mask, p)`: the masked, rescaled gradient of x (the
  residual's gradient is the incoming one, no kernel), the bias gradient a sum over tokens.
- `scaled_upper_triang_masked_softmax(x, scale)`: the causal fused softmax (fused_softmax.py,
  `ScaledUpperTriangMaskedSoftmax`): one read and one write of the (batch·heads, s, s) scores;
  backward `scaled_upper_triang_masked_softmax_backward(grad, y, scale)`: reads the gradient and
  the saved probabilities, writes the scores' gradient.

FLOPs: `chakra_trace.convert.flops` counts these ops by name (per element of the first output,
the sum of the rules of the unfused ops each kernel replaces), so a rescaled or reloaded master
trace costs them without this module. Importing the module registers the ops once per process.
"""

from __future__ import annotations

import math

import torch

NS = "megatron"


def _define() -> None:
    lib = torch.library

    @lib.custom_op(f"{NS}::bias_gelu", mutates_args=())
    def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        y = x + bias
        return y * 0.5 * (1.0 + torch.tanh(0.79788456 * y * (1 + 0.044715 * y * y)))

    @bias_gelu.register_fake
    def _(x, bias):
        return torch.empty_like(x)

    @lib.custom_op(f"{NS}::bias_gelu_backward", mutates_args=())
    def bias_gelu_backward(grad: torch.Tensor, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        y = x + bias
        t = torch.tanh(0.79788456 * y * (1 + 0.044715 * y * y))
        ff = 0.5 * y * ((1 - t * t) * (0.79788456 + 0.1070322243 * y * y)) + 0.5 * (1 + t)
        return ff * grad

    @bias_gelu_backward.register_fake
    def _(grad, x, bias):
        return torch.empty_like(x)

    def gelu_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def gelu_backward(ctx, grad):
        x, bias = ctx.saved_tensors
        gx = torch.ops.megatron.bias_gelu_backward(grad, x, bias)
        return gx, _sum_to(gx, bias)

    bias_gelu.register_autograd(gelu_backward, setup_context=gelu_setup)

    @lib.custom_op(f"{NS}::bias_dropout_add", mutates_args=())
    def bias_dropout_add(
        x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, p: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mask = torch.rand_like(x, dtype=torch.float32) >= p
        return residual + (x + bias) * mask / (1.0 - p), mask

    @bias_dropout_add.register_fake
    def _(x, bias, residual, p):
        return torch.empty_like(x), torch.empty_like(x, dtype=torch.bool)

    @lib.custom_op(f"{NS}::bias_dropout_add_backward", mutates_args=())
    def bias_dropout_add_backward(grad: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
        return grad * mask / (1.0 - p)

    @bias_dropout_add_backward.register_fake
    def _(grad, mask, p):
        return torch.empty_like(grad)

    def bda_setup(ctx, inputs, output):
        x, bias, residual, p = inputs
        ctx.p = p
        ctx.bias_shape = bias.shape
        ctx.save_for_backward(output[1], bias)
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)  # (no zeros for the mask's gradient)

    def bda_backward(ctx, grad, _mask_grad):
        if grad is None:  # (only the mask was used)
            return None, None, None, None
        mask, bias = ctx.saved_tensors
        gx = torch.ops.megatron.bias_dropout_add_backward(grad, mask, ctx.p)
        return gx, _sum_to(gx, bias), grad, None

    bias_dropout_add.register_autograd(bda_backward, setup_context=bda_setup)

    @lib.custom_op(f"{NS}::scaled_upper_triang_masked_softmax", mutates_args=())
    def softmax(x: torch.Tensor, scale: float) -> torch.Tensor:
        s = x.shape[-1]
        causal = torch.ones(x.shape[-2], s, dtype=torch.bool, device=x.device).triu(1)
        wide = x.to(torch.promote_types(x.dtype, torch.float32))  # (the kernel computes in fp32)
        return torch.softmax((wide * scale).masked_fill(causal, -math.inf), dim=-1).to(x.dtype)

    @softmax.register_fake
    def _(x, scale):
        return torch.empty_like(x)

    @lib.custom_op(f"{NS}::scaled_upper_triang_masked_softmax_backward", mutates_args=())
    def softmax_backward(grad: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
        wide = torch.promote_types(grad.dtype, torch.float32)
        g, p = grad.to(wide), y.to(wide)
        return (scale * p * (g - (g * p).sum(-1, keepdim=True))).to(grad.dtype)

    @softmax_backward.register_fake
    def _(grad, y, scale):
        return torch.empty_like(grad)

    def sm_setup(ctx, inputs, output):
        ctx.scale = inputs[1]
        ctx.save_for_backward(output)

    def sm_backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return torch.ops.megatron.scaled_upper_triang_masked_softmax_backward(grad, y, ctx.scale), None

    softmax.register_autograd(sm_backward, setup_context=sm_setup)


def _sum_to(grad: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The bias's gradient: the per-token gradient summed over every token (what autograd does
    with Megatron's gradient of the expanded bias)."""
    return grad.sum(dim=tuple(range(grad.dim() - bias.dim())))


def ensure() -> None:
    """Register the ops unless this process already has them (a model file loaded twice)."""
    try:
        torch.ops.megatron.bias_gelu  # noqa: B018
    except (AttributeError, RuntimeError):
        _define()


ensure()


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.ops.megatron.bias_gelu(x, bias)


def bias_dropout_add(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, p: float) -> torch.Tensor:
    return torch.ops.megatron.bias_dropout_add(x, bias, residual, p)[0]


def scaled_upper_triang_masked_softmax(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.ops.megatron.scaled_upper_triang_masked_softmax(x, scale)


__all__ = ["bias_gelu", "bias_dropout_add", "scaled_upper_triang_masked_softmax", "ensure"]
