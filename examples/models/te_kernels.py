"""The fused kernels Megatron-Core runs with Transformer Engine (NeMo 24.07's Llama 2/3,
Nemotron-4, GPT-3), as PyTorch custom ops (`te::...`) for `gpt.py`'s `"fused": "te"`: each
kernel is ONE dispatched op, so a capture records it as one node whose bytes are what the kernel
reads and writes, and its backward is one op too.

- `rmsnorm_fwd(x, w, eps) -> (y, rstd)`, `rmsnorm_bwd(dy, x, rstd, w) -> (dx, dw)`: TE's
  `rmsnorm_fwd` / `rmsnorm_bwd` (normalization/rmsnorm): rstd is fp32, one per row; dw has the
  weight's dtype (the kernel's fp32 per-block partials, reduced by a second small kernel, are
  left out: hidden·blocks·4 bytes, independent of the tokens).
- `layernorm_fwd(x, w, b, eps) -> (y, mu, rstd)`, `layernorm_bwd(dy, x, mu, rstd, w) -> (dx, dw, db)`.
- `fused_rope_fwd(t, freqs, seq_first) -> out`, `fused_rope_bwd(dy, freqs, seq_first) -> dt`:
  TE's `fused_rope_forward` / `backward` (fused_rope.cu): one kernel per tensor (q, then k),
  reading it and the fp32 angle table (s, d) (sin and cos are computed in the kernel).
- `swiglu(gate, up) -> out`, `swiglu_bwd(dy, gate, up) -> (dgate, dup)`: Megatron-Core's
  `bias_swiglu_impl` without bias (fused_bias_swiglu.py; Megatron's fc1 writes gate and up as
  one [t, 2f] tensor, here two: same bytes).
- `squared_relu(x)`, `squared_relu_bwd(dy, x)`: Megatron-Core's jit-fused `squared_relu`
  (activations.py; TE's `srelu`), Nemotron-4's activation.
- the loss: Megatron-Core's fused vocab-parallel cross-entropy (`cross_entropy_loss_fusion`,
  fusions/fused_cross_entropy.py), its three jit-fused forward kernels and its backward kernel:
  `ce_logits_max` (the logits to fp32 and their row max), `ce_exp_sum` (minus the max, exp, the
  row sum and the target's logit), `ce_softmax_loss` (softmax = exp / sum, loss = log(sum) -
  target's logit), `ce_bwd` (softmax minus one-hot, times the loss's gradient, to the logits'
  dtype). It works in fp32: 22 bytes per bf16 logit forward and 6 backward.
- `fused_adam(grad, main, exp_avg, exp_avg_sq, ...) -> (main, exp_avg, exp_avg_sq, param)`:
  the distributed optimizer's fused Adam over a parameter's shard (Megatron-Core's
  DistributedOptimizer with TE's FusedAdam, NeMo's `distributed_fused_adam`): fp32 main weights
  and moments, one pass reading the gradient (the model's dtype), the main weight and both
  moments, writing them and the model's copy of the weight. `DistributedFusedAdam` is the
  optimizer that runs it (one op per parameter, so a parallelization places and shards each with
  its module): `capture(..., optimizer=DistributedFusedAdam)`, or on the command line
  `--optimizer examples/models/te_kernels.py:DistributedFusedAdam`.

FLOPs: `chakra_trace.convert.flops` counts these ops by name (per element of the first output,
the sum of the rules of the unfused ops each kernel replaces), so a rescaled or reloaded master
trace costs them without this module. Importing the module registers the ops once per process.
"""

from __future__ import annotations

import torch
import torch.nn as nn

NS = "te"


def _wide(t: torch.Tensor) -> torch.Tensor:
    """t in at least fp32 (the kernels compute in fp32)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _rope_tables(freqs: torch.Tensor, t: torch.Tensor, seq_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of the (s, d) angles, broadcast over t: (s, ..., d) when seq_first, else (..., s, d)."""
    shape = (freqs.shape[0],) + (1,) * (t.dim() - 2) + (freqs.shape[1],) if seq_first else freqs.shape
    return freqs.cos().reshape(shape), freqs.sin().reshape(shape)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _define() -> None:  # noqa: C901 (one registration after the other)
    lib = torch.library

    # ---- RMSNorm
    @lib.custom_op(f"{NS}::rmsnorm_fwd", mutates_args=())
    def rmsnorm_fwd(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        xf = _wide(x)
        rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
        return (xf * rstd[..., None] * w).to(x.dtype), rstd

    @rmsnorm_fwd.register_fake
    def _(x, w, eps):
        return torch.empty_like(x), x.new_empty(x.shape[:-1], dtype=torch.promote_types(x.dtype, torch.float32))

    @lib.custom_op(f"{NS}::rmsnorm_bwd", mutates_args=())
    def rmsnorm_bwd(
        dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, w: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        xhat = _wide(x) * rstd[..., None]
        g = _wide(dy) * w
        dx = rstd[..., None] * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        dw = (_wide(dy) * xhat).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(w.dtype)

    @rmsnorm_bwd.register_fake
    def _(dy, x, rstd, w):
        return torch.empty_like(x), torch.empty_like(w)

    def rms_setup(ctx, inputs, output):
        x, w, _eps = inputs
        ctx.save_for_backward(x, output[1], w)
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)

    def rms_backward(ctx, dy, _drstd):
        if dy is None:
            return None, None, None
        x, rstd, w = ctx.saved_tensors
        dx, dw = torch.ops.te.rmsnorm_bwd(dy, x, rstd, w)
        return dx, dw, None

    rmsnorm_fwd.register_autograd(rms_backward, setup_context=rms_setup)

    # ---- LayerNorm
    @lib.custom_op(f"{NS}::layernorm_fwd", mutates_args=())
    def layernorm_fwd(
        x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        xf = _wide(x)
        mu = xf.mean(-1)
        rstd = torch.rsqrt(((xf - mu[..., None]) ** 2).mean(-1) + eps)
        return ((xf - mu[..., None]) * rstd[..., None] * w + b).to(x.dtype), mu, rstd

    @layernorm_fwd.register_fake
    def _(x, w, b, eps):
        stat = x.new_empty(x.shape[:-1], dtype=torch.promote_types(x.dtype, torch.float32))
        return torch.empty_like(x), stat, torch.empty_like(stat)

    @lib.custom_op(f"{NS}::layernorm_bwd", mutates_args=())
    def layernorm_bwd(
        dy: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, rstd: torch.Tensor, w: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        xhat = (_wide(x) - mu[..., None]) * rstd[..., None]
        g = _wide(dy) * w
        dx = rstd[..., None] * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
        dw = (_wide(dy) * xhat).reshape(-1, x.shape[-1]).sum(0)
        db = _wide(dy).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(w.dtype), db.to(w.dtype)

    @layernorm_bwd.register_fake
    def _(dy, x, mu, rstd, w):
        return torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)

    def ln_setup(ctx, inputs, output):
        x, w, _b, _eps = inputs
        ctx.save_for_backward(x, output[1], output[2], w)
        ctx.mark_non_differentiable(output[1], output[2])
        ctx.set_materialize_grads(False)

    def ln_backward(ctx, dy, _dmu, _drstd):
        if dy is None:
            return None, None, None, None
        x, mu, rstd, w = ctx.saved_tensors
        dx, dw, db = torch.ops.te.layernorm_bwd(dy, x, mu, rstd, w)
        return dx, dw, db, None

    layernorm_fwd.register_autograd(ln_backward, setup_context=ln_setup)

    # ---- RoPE
    @lib.custom_op(f"{NS}::fused_rope_fwd", mutates_args=())
    def fused_rope_fwd(t: torch.Tensor, freqs: torch.Tensor, seq_first: bool) -> torch.Tensor:
        cos, sin = _rope_tables(freqs, t, seq_first)
        return (_wide(t) * cos + _rotate_half(_wide(t)) * sin).to(t.dtype)

    @fused_rope_fwd.register_fake
    def _(t, freqs, seq_first):
        return torch.empty_like(t)

    @lib.custom_op(f"{NS}::fused_rope_bwd", mutates_args=())
    def fused_rope_bwd(dy: torch.Tensor, freqs: torch.Tensor, seq_first: bool) -> torch.Tensor:
        cos, sin = _rope_tables(freqs, dy, seq_first)
        g = _wide(dy) * sin  # the adjoint of rotate_half: (a, b) -> (b, -a)
        half = g.shape[-1] // 2
        return (_wide(dy) * cos + torch.cat((g[..., half:], -g[..., :half]), dim=-1)).to(dy.dtype)

    @fused_rope_bwd.register_fake
    def _(dy, freqs, seq_first):
        return torch.empty_like(dy)

    def rope_setup(ctx, inputs, output):
        ctx.seq_first = inputs[2]
        ctx.save_for_backward(inputs[1])

    def rope_backward(ctx, dy):
        (freqs,) = ctx.saved_tensors
        return torch.ops.te.fused_rope_bwd(dy, freqs, ctx.seq_first), None, None

    fused_rope_fwd.register_autograd(rope_backward, setup_context=rope_setup)

    # ---- SwiGLU
    @lib.custom_op(f"{NS}::swiglu", mutates_args=())
    def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return (torch.nn.functional.silu(_wide(gate)) * up).to(gate.dtype)

    @swiglu.register_fake
    def _(gate, up):
        return torch.empty_like(gate)

    @lib.custom_op(f"{NS}::swiglu_bwd", mutates_args=())
    def swiglu_bwd(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g = _wide(gate)
        s = torch.sigmoid(g)
        dgate = _wide(dy) * up * s * (1 + g * (1 - s))
        return dgate.to(gate.dtype), (_wide(dy) * g * s).to(up.dtype)

    @swiglu_bwd.register_fake
    def _(dy, gate, up):
        return torch.empty_like(gate), torch.empty_like(up)

    def swiglu_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def swiglu_backward(ctx, dy):
        gate, up = ctx.saved_tensors
        return torch.ops.te.swiglu_bwd(dy, gate, up)

    swiglu.register_autograd(swiglu_backward, setup_context=swiglu_setup)

    # ---- squared ReLU
    @lib.custom_op(f"{NS}::squared_relu", mutates_args=())
    def squared_relu(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) ** 2

    @squared_relu.register_fake
    def _(x):
        return torch.empty_like(x)

    @lib.custom_op(f"{NS}::squared_relu_bwd", mutates_args=())
    def squared_relu_bwd(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return dy * 2 * torch.relu(x)

    @squared_relu_bwd.register_fake
    def _(dy, x):
        return torch.empty_like(x)

    def srelu_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def srelu_backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return torch.ops.te.squared_relu_bwd(dy, x)

    squared_relu.register_autograd(srelu_backward, setup_context=srelu_setup)

    # ---- cross-entropy (the autograd is `_CrossEntropy`'s)
    @lib.custom_op(f"{NS}::ce_logits_max", mutates_args=())
    def ce_logits_max(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wide = _wide(logits)
        return wide.clone(), wide.amax(-1)

    @ce_logits_max.register_fake
    def _(logits):
        wide = logits.new_empty(logits.shape, dtype=torch.promote_types(logits.dtype, torch.float32))
        return wide, wide.new_empty(logits.shape[:-1])

    @lib.custom_op(f"{NS}::ce_exp_sum", mutates_args=())
    def ce_exp_sum(logits: torch.Tensor, target: torch.Tensor, lmax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shifted = logits - lmax[..., None]
        picked = shifted.gather(-1, target[..., None])[..., 0]
        e = shifted.exp()
        return e, torch.cat((picked, e.sum(-1)))

    @ce_exp_sum.register_fake
    def _(logits, target, lmax):
        return torch.empty_like(logits), lmax.new_empty((2 * lmax.shape[0], *lmax.shape[1:]))

    @lib.custom_op(f"{NS}::ce_softmax_loss", mutates_args=())
    def ce_softmax_loss(e: torch.Tensor, picked_sum: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        picked, total = picked_sum.split(picked_sum.shape[0] // 2)  # (Megatron's cat along dim 0)
        return e / total[..., None], torch.log(total) - picked

    @ce_softmax_loss.register_fake
    def _(e, picked_sum):
        return torch.empty_like(e), e.new_empty(e.shape[:-1])

    @lib.custom_op(f"{NS}::ce_bwd", mutates_args=())
    def ce_bwd(softmax: torch.Tensor, target: torch.Tensor, dloss: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        onehot = torch.nn.functional.one_hot(target, softmax.shape[-1]).to(softmax.dtype)
        return ((softmax - onehot) * dloss[..., None]).to(dtype)

    @ce_bwd.register_fake
    def _(softmax, target, dloss, dtype):
        return softmax.new_empty(softmax.shape, dtype=dtype)

    # ---- the distributed optimizer's fused Adam (AdamW: decoupled weight decay)
    @lib.custom_op(f"{NS}::fused_adam", mutates_args=())
    def fused_adam(
        grad: torch.Tensor,
        main: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
        lr: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        step: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        g = grad.to(main.dtype)
        m = beta1 * exp_avg + (1 - beta1) * g
        v = beta2 * exp_avg_sq + (1 - beta2) * g * g
        denom = (v / (1 - beta2**step)).sqrt() + eps
        p = main * (1 - lr * weight_decay) - lr * (m / (1 - beta1**step)) / denom
        return p, m, v, p.to(grad.dtype, copy=True)

    @fused_adam.register_fake
    def _(grad, main, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay, step):
        return torch.empty_like(main), torch.empty_like(exp_avg), torch.empty_like(exp_avg_sq), torch.empty_like(grad)


class _CrossEntropy(torch.autograd.Function):
    """Megatron-Core's fused cross-entropy: per-token losses (fp32) of logits (..., V) and targets
    (...); the softmax kept (fp32) for the backward kernel."""

    @staticmethod
    def forward(ctx, logits, target):
        ops = torch.ops.te
        wide, lmax = ops.ce_logits_max(logits)
        e, picked_sum = ops.ce_exp_sum(wide, target, lmax)
        softmax, loss = ops.ce_softmax_loss(e, picked_sum)
        ctx.dtype = logits.dtype
        ctx.save_for_backward(softmax, target)
        ctx.mark_non_differentiable(target)
        return loss

    @staticmethod
    def backward(ctx, dloss):
        softmax, target = ctx.saved_tensors
        return torch.ops.te.ce_bwd(softmax, target, dloss, ctx.dtype), None


def ensure() -> None:
    """Register the ops unless this process already has them (a model file loaded twice)."""
    try:
        torch.ops.te.rmsnorm_fwd  # noqa: B018
    except (AttributeError, RuntimeError):
        _define()


ensure()


class RMSNorm(nn.Module):
    """TE's RMSNorm: one kernel forward, one backward."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.te.rmsnorm_fwd(x, self.weight, self.eps)[0]


class LayerNorm(nn.Module):
    """TE's LayerNorm: one kernel forward, one backward."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.te.layernorm_fwd(x, self.weight, self.bias, self.eps)[0]


def rope(t: torch.Tensor, freqs: torch.Tensor, seq_first: bool = False) -> torch.Tensor:
    """t (batch, heads, s, d), or (s, batch, heads, d) when seq_first, rotated by the fp32 (s, d) angles."""
    return torch.ops.te.fused_rope_fwd(t, freqs, seq_first)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.ops.te.swiglu(gate, up)


def squared_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.te.squared_relu(x)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The mean over tokens of Megatron-Core's fused cross-entropy."""
    return _CrossEntropy.apply(logits, target).mean()


class DistributedFusedAdam(torch.optim.Optimizer):
    """AdamW as the distributed optimizer runs it: fp32 main weights and moments, one fused kernel
    per parameter (`te::fused_adam`) that writes the model's copy of the weight too."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.95), eps: float = 1e-8, weight_decay: float = 0.1):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:  # (the main weight and the moments, in fp32)
                    state["step"] = 0
                    state["main"] = p.detach().to(torch.float32)
                    state["exp_avg"] = torch.zeros_like(state["main"])
                    state["exp_avg_sq"] = torch.zeros_like(state["main"])
                state["step"] += 1
                main, m, v, param = torch.ops.te.fused_adam(
                    p.grad,
                    state["main"],
                    state["exp_avg"],
                    state["exp_avg_sq"],
                    group["lr"],
                    beta1,
                    beta2,
                    group["eps"],
                    group["weight_decay"],
                    state["step"],
                )
                state["main"], state["exp_avg"], state["exp_avg_sq"] = main, m, v
                p.data = param  # (the kernel wrote the model's weight: no copy, no op)
        return None


__all__ = [
    "RMSNorm",
    "LayerNorm",
    "rope",
    "swiglu",
    "squared_relu",
    "cross_entropy",
    "DistributedFusedAdam",
    "ensure",
]
