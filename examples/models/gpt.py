"""A Llama/GPT-style decoder-only language model for `chakra capture`, from tiny to 70B.

    chakra capture examples/models/gpt.py:build --config '{"layers": 80, "hidden": 8192, "heads": 64,
        "kv_heads": 8, "ffn": 28672, "vocab": 32000}' --batch 8 --seq 4096 --dtype bfloat16 -o gpt70b.master.et

Token embedding, `layers` pre-norm blocks (RMSNorm or LayerNorm; causal self-attention with
`heads` query heads and `kv_heads` key/value heads (grouped-query attention), rotary or learned
positions; a SwiGLU or GELU MLP), a final norm and the LM head. The blocks run in a Python loop,
so a captured step grows by the same nodes per layer. `build` follows the capture protocol: it
returns (model, inputs, loss).

Presets (`--config '{"preset": "llama2-70b"}'`, other keys override): see PRESETS.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    "tiny": dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=172, vocab=512),
    "gpt2-small": dict(
        layers=12,
        hidden=768,
        heads=12,
        ffn=3072,
        vocab=50257,
        norm="layer",
        mlp="gelu",
        positions="learned",
        bias=True,
        tie=True,
    ),
    # GPT-3 175B as Megatron-LM trains it (vocabulary padded to 51,200; sequence 2,048)
    "gpt3-175b": dict(
        layers=96,
        hidden=12288,
        heads=96,
        vocab=51200,
        norm="layer",
        mlp="gelu",
        positions="learned",
        bias=True,
        tie=True,
        max_seq=2048,
    ),
    "llama2-7b": dict(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000),
    "llama2-13b": dict(layers=40, hidden=5120, heads=40, ffn=13824, vocab=32000),
    "llama2-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000),
    "tiny-moe": dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=172, vocab=512, experts=4, top_k=2),
    "mixtral-8x7b": dict(
        layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000, experts=8, top_k=2, rope_base=1e6
    ),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of (batch, heads, seq, head_dim) by the (seq, head_dim) tables."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, bias: bool) -> None:
        super().__init__()
        if hidden % heads or heads % kv_heads:
            raise ValueError(f"hidden {hidden} must divide by heads {heads}, heads by kv_heads {kv_heads}")
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=bias)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        if self.kv_heads != self.heads:  # grouped-query attention: each K/V head serves heads/kv_heads queries
            groups = self.heads // self.kv_heads
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int, kind: str, bias: bool) -> None:
        super().__init__()
        self.kind = kind
        if kind == "swiglu":
            self.gate_proj = nn.Linear(hidden, ffn, bias=bias)
        elif kind != "gelu":
            raise ValueError(f"mlp {kind!r}: expected swiglu or gelu")
        self.up_proj = nn.Linear(hidden, ffn, bias=bias)
        self.down_proj = nn.Linear(ffn, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.gelu(self.up_proj(x)))


class ExpertLinear(nn.Module):
    """One linear layer per expert, as one (experts, in, out) weight applied by a batched matmul to
    (experts, tokens per expert, in)."""

    def __init__(self, experts: int, fan_in: int, fan_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(experts, fan_in, fan_out))
        nn.init.normal_(self.weight, std=fan_in**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, self.weight)


class Experts(nn.Module):
    """Every expert's MLP at once: the linears keep the dense MLP's names (gate/up/down_proj), so a
    parallelization splits them as it splits an MLP."""

    def __init__(self, experts: int, hidden: int, ffn: int, kind: str) -> None:
        super().__init__()
        self.kind = kind
        if kind == "swiglu":
            self.gate_proj = ExpertLinear(experts, hidden, ffn)
        elif kind != "gelu":
            raise ValueError(f"mlp {kind!r}: expected swiglu or gelu")
        self.up_proj = ExpertLinear(experts, hidden, ffn)
        self.down_proj = ExpertLinear(experts, ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.gelu(self.up_proj(x)))


class MoE(nn.Module):
    """A top-k routed mixture of experts (Mixtral, Switch) with balanced routing: every expert
    takes tokens·top_k/experts token copies (drop-and-pad at capacity factor 1, the load a
    balancing loss aims for), so the step's shapes do not depend on the router's values. The
    token copies are sorted by expert (`dispatch`), run through the experts, put back in token
    order and summed with the router's weights (`combine`)."""

    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int, kind: str) -> None:
        super().__init__()
        if not 1 <= top_k <= experts:
            raise ValueError(f"top_k {top_k} must be in 1..experts ({experts})")
        self.experts_n, self.top_k = experts, top_k
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts = Experts(experts, hidden, ffn, kind)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        tokens = x.reshape(b * s, h)
        copies = b * s * self.top_k
        if copies % self.experts_n:
            raise ValueError(f"{b * s} tokens x top_k {self.top_k} do not split evenly over {self.experts_n} experts")
        weight, chosen = self.router(tokens).softmax(dim=-1).topk(self.top_k, dim=-1)
        weight = weight / weight.sum(dim=-1, keepdim=True)
        order = chosen.reshape(-1).argsort(stable=True)  # token copies grouped by expert
        dispatched = tokens.index_select(0, order // self.top_k).view(self.experts_n, -1, h)
        out = self.experts(dispatched).reshape(copies, h)
        combined = torch.empty_like(out).index_copy(0, order, out).view(b * s, self.top_k, h)
        return (combined * weight.unsqueeze(-1).to(combined.dtype)).sum(dim=1).view(b, s, h)


def _norm(kind: str, dim: int) -> nn.Module:
    if kind == "rms":
        return RMSNorm(dim)
    if kind == "layer":
        return nn.LayerNorm(dim)
    raise ValueError(f"norm {kind!r}: expected rms or layer")


class Block(nn.Module):
    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        ffn: int,
        norm: str,
        mlp: str,
        bias: bool,
        experts: int,
        top_k: int,
    ) -> None:
        super().__init__()
        self.attn_norm = _norm(norm, hidden)
        self.attn = Attention(hidden, heads, kv_heads, bias)
        self.mlp_norm = _norm(norm, hidden)
        if experts:
            self.moe = MoE(hidden, ffn, experts, top_k, mlp)
        else:
            self.mlp = MLP(hidden, ffn, mlp, bias)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rope)
        ffn = self.moe if hasattr(self, "moe") else self.mlp
        return x + ffn(self.mlp_norm(x))


class GPT(nn.Module):
    def __init__(
        self,
        layers: int,
        hidden: int,
        heads: int,
        kv_heads: int | None = None,
        ffn: int | None = None,
        vocab: int = 32000,
        norm: str = "rms",
        mlp: str = "swiglu",
        positions: str = "rope",
        max_seq: int = 131072,
        bias: bool = False,
        tie: bool = False,
        rope_base: float = 10000.0,
        experts: int = 0,
        top_k: int = 2,
    ) -> None:
        super().__init__()
        kv_heads = kv_heads or heads
        ffn = ffn or 4 * hidden
        self.embed = nn.Embedding(vocab, hidden)
        self.positions = positions
        self.rope_base = rope_base
        self.head_dim = hidden // heads
        if positions == "learned":
            self.pos = nn.Embedding(max_seq, hidden)
        elif positions != "rope":
            raise ValueError(f"positions {positions!r}: expected rope or learned")
        self.layers = nn.ModuleList(
            Block(hidden, heads, kv_heads, ffn, norm, mlp, bias, experts, top_k) for _ in range(layers)
        )
        self.norm = _norm(norm, hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        if tie:
            self.lm_head.weight = self.embed.weight

    def _rope(self, seq: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        inv = 1.0 / self.rope_base ** (torch.arange(0, self.head_dim, 2, device=device) / self.head_dim)
        angles = torch.outer(torch.arange(seq, device=device, dtype=inv.dtype), inv)
        angles = torch.cat((angles, angles), dim=-1)
        dtype = self.embed.weight.dtype
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        rope = None
        if self.positions == "learned":
            x = x + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        else:
            rope = self._rope(tokens.shape[1], tokens.device)
        for layer in self.layers:
            x = layer(x, rope)
        return self.lm_head(self.norm(x))


def param_count(
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int | None = None,
    ffn: int | None = None,
    vocab: int = 32000,
    mlp: str = "swiglu",
    tie: bool = False,
    experts: int = 0,
    top_k: int = 2,
    active: bool = False,
    **_,
) -> int:
    """Parameters of the matrices (norms and biases aside): what the 6·N·tokens estimate uses;
    `active`: of a mixture of experts, those one token uses (top_k experts' and the router's)."""
    kv = (kv_heads or heads) * (hidden // heads)
    ffn = ffn or 4 * hidden
    mlp_params = (3 if mlp == "swiglu" else 2) * hidden * ffn
    if experts:
        mlp_params = mlp_params * (top_k if active else experts) + hidden * experts
    per_layer = 2 * hidden * hidden + 2 * hidden * kv + mlp_params
    return layers * per_layer + vocab * hidden * (1 if tie else 2)


def build(preset: str | None = None, **config) -> tuple[nn.Module, object, object]:
    """(model, inputs, loss) for `chakra capture`: next-token prediction on random tokens."""
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"preset {preset!r}: expected one of {sorted(PRESETS)}")
        config = {**PRESETS[preset], **config}
    model = GPT(**config)
    vocab = model.lm_head.out_features

    def inputs(batch: int, seq: int):
        tokens = torch.randint(0, vocab, (batch, seq + 1))
        return (tokens[:, :-1],), tokens[:, 1:]

    def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, inputs, loss


__all__ = ["GPT", "build", "param_count", "PRESETS"]
