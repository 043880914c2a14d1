"""A Llama/GPT-style decoder-only language model for `chakra capture`, from tiny to 70B.

    chakra capture examples/models/gpt.py:build --config '{"layers": 80, "hidden": 8192, "heads": 64,
        "kv_heads": 8, "ffn": 28672, "vocab": 32000}' --batch 8 --seq 4096 --dtype bfloat16 -o gpt70b.master.et

Token embedding, `layers` pre-norm blocks (RMSNorm or LayerNorm; causal self-attention with
`heads` query heads and `kv_heads` key/value heads (grouped-query attention), rotary or learned
positions; a SwiGLU, GELU or squared-ReLU (Nemotron-4) MLP), a final norm and the LM head. The blocks run in a Python loop,
so a captured step grows by the same nodes per layer. `build` follows the capture protocol: it
returns (model, inputs, loss).

Presets (`--config '{"preset": "llama2-70b"}'`, other keys override): see PRESETS.

Megatron-LM's GPT layer (Narayanan et al. SC21, Korthikanti et al. 2022), kernel for kernel:

- `attention`: "sdpa" (default: `F.scaled_dot_product_attention`, a fused flash-like op) or
  "unfused": Megatron's core attention, in its sequence-first [s, b, h] layout (so heads split
  by views, no copies): `baddbmm` of Q·Kᵀ (beta 0, alpha 1/sqrt(head_dim); query-key layer
  scaling changes constants, not kernels), the scale-mask-softmax, dropout of the probabilities,
  `bmm` with V, and the copy of the context back to [s, b, h]. It lives in a module named
  `core_attention` (Megatron's name), which `chakra parallelize --recompute selective` recomputes.
- `dropout`: p of the attention probabilities (unfused attention; the fused SDPA is captured
  without it: on CPU PyTorch runs SDPA with dropout as its unfused math path, on GPU flash
  attention applies it inside the kernel) and of the hidden states (after the embeddings, and
  on each residual branch), as CUDA runs `F.dropout`: one `aten::native_dropout` writing a
  one-byte mask.
- `fused`: "none" (default) or "megatron": Megatron's fused kernels, one op each
  (`megatron_kernels.py`): bias + GeLU (`bias_gelu`; the MLP's first linear skips its bias
  add), bias + dropout + residual add (`bias_dropout_add`; the attention's output linear and the
  MLP's second linear skip their bias add) and, with unfused attention, the causal
  scale-mask-softmax (`scaled_upper_triang_masked_softmax`). Needs `bias`, the GELU MLP and no
  mixture of experts.
- `fused_qkv`: one `qkv_proj` linear for Q, K and V (Megatron's `query_key_value`), needs
  kv_heads == heads.

Megatron-Core with Transformer Engine (NeMo 24.07's Llama, Nemotron, GPT-3 runs): `"fused": "te"`
runs its kernels, one op each (`te_kernels.py`): TE's RMSNorm / LayerNorm, TE's fused RoPE (one
per q and k, on fp32 angles), Megatron-Core's fused SwiGLU and squared ReLU, its fused
cross-entropy; attention stays SDPA (TE runs cuDNN's flash attention). The distributed
optimizer's fused Adam is `te_kernels.DistributedFusedAdam` (capture's `optimizer`), e.g.
`{"preset": "llama2-7b", "fused": "te"}` with `--optimizer examples/models/te_kernels.py:DistributedFusedAdam`.

The preset "megatron-sc21" is all of it (LayerNorm, GeLU, learned positions, biases, tied
embeddings, vocabulary 51,200, positions for 2,048 tokens, unfused attention, dropout 0.1, the
fused kernels, one QKV linear) at the 1.7B size of SC21's Table 1 (24 layers, hidden 2304, 24
heads); other rows override `layers`, `hidden`, `heads`.
"""

from __future__ import annotations

import math

import megatron_kernels as mk  # (this file's folder is on sys.path while `chakra capture` loads it)
import te_kernels as tk
import torch
import torch.nn as nn
import torch.nn.functional as F

#: GPT-2/3's block as Megatron-LM builds it: LayerNorm, GeLU MLP, learned positions, biases, tied embeddings.
_GPT_BLOCK = dict(norm="layer", mlp="gelu", positions="learned", bias=True, tie=True)

PRESETS = {
    "tiny": dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=172, vocab=512),
    "gpt2-small": dict(layers=12, hidden=768, heads=12, ffn=3072, vocab=50257, **_GPT_BLOCK),
    # GPT-3 175B as Megatron-LM trains it (vocabulary padded to 51,200; sequence 2,048)
    "gpt3-175b": dict(layers=96, hidden=12288, heads=96, vocab=51200, max_seq=2048, **_GPT_BLOCK),
    # Megatron-LM's GPT layer as SC21 / Korthikanti et al. ran it, at SC21 Table 1's 1.7B size
    "megatron-sc21": dict(
        layers=24,
        hidden=2304,
        heads=24,
        vocab=51200,
        max_seq=2048,
        **_GPT_BLOCK,
        attention="unfused",
        dropout=0.1,
        fused="megatron",
        fused_qkv=True,
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
    """Rotary position embedding of x by the (seq, head_dim) tables, broadcast over x's other
    dimensions (cos, sin already shaped for x's layout): cat, neg, two muls and an add."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout as CUDA runs `F.dropout`: one `aten::native_dropout` writing the output and a bool
    mask (on CPU `F.dropout` would run bernoulli, div and mul instead)."""
    if p <= 0 or not training:
        return x
    return torch.native_dropout(x, p, True)[0]


class SkipBiasLinear(nn.Linear):
    """A linear layer that leaves its bias to the caller (Megatron's `skip_bias_add`): the bias
    is added inside the fused kernel that follows."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class CoreAttention(nn.Module):
    """softmax(Q·Kᵀ / sqrt(d))·V with a causal mask: the ops between the Q/K/V projections and
    the output projection (what selective recomputation runs again).

    "sdpa": q, k, v as (batch, heads, seq, head_dim), one fused op, then the context back to
    (batch, seq, hidden). "unfused" (Megatron-LM's CoreAttention): q, k, v as (seq, batch,
    heads, head_dim); baddbmm (beta 0: the preallocated buffer is not read), the softmax (fused
    scale-mask kernel, or masked_fill + softmax), dropout, bmm, and the copy of the context to
    (seq, batch, hidden)."""

    def __init__(self, kind: str, p: float, fused: bool) -> None:
        super().__init__()
        self.kind, self.p, self.fused = kind, p, fused

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if self.kind == "sdpa":
            b, h, s, d = q.shape
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return y.transpose(1, 2).reshape(b, s, h * d)
        s, b, h, d = q.shape
        qq = q.reshape(s, b * h, d).transpose(0, 1)  # (b·heads, s, d): views of Megatron's layout
        kt = k.reshape(s, b * h, d).transpose(0, 1).transpose(1, 2)
        vv = v.reshape(s, b * h, d).transpose(0, 1)
        buffer = torch.empty(b * h, s, s, dtype=q.dtype, device=q.device)
        scores = torch.baddbmm(buffer, qq, kt, beta=0.0, alpha=1.0 / math.sqrt(d))
        if self.fused:
            probs = mk.scaled_upper_triang_masked_softmax(scores, 1.0)
        else:
            assert mask is not None
            probs = torch.softmax(scores.masked_fill_(mask, -10000.0), dim=-1)
        probs = dropout(probs, self.p, self.training)
        context = torch.bmm(probs, vv)  # (b·heads, s, d)
        return context.view(b, h, s, d).permute(2, 0, 1, 3).contiguous().view(s, b, h * d)


class Attention(nn.Module):
    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        bias: bool,
        kind: str = "sdpa",
        p: float = 0.0,
        fused: bool = False,
        fused_qkv: bool = False,
        te: bool = False,
    ) -> None:
        super().__init__()
        self.te = te
        if hidden % heads or heads % kv_heads:
            raise ValueError(f"hidden {hidden} must divide by heads {heads}, heads by kv_heads {kv_heads}")
        if kind not in ("sdpa", "unfused"):
            raise ValueError(f"attention {kind!r}: expected sdpa or unfused")
        if fused_qkv and kv_heads != heads:
            raise ValueError(f"fused_qkv needs kv_heads == heads (got {kv_heads} and {heads})")
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.seq_first = kind == "unfused"
        d = self.head_dim
        if fused_qkv:
            self.qkv_proj = nn.Linear(hidden, 3 * heads * d, bias=bias)
        else:
            self.q_proj = nn.Linear(hidden, heads * d, bias=bias)
            self.k_proj = nn.Linear(hidden, kv_heads * d, bias=bias)
            self.v_proj = nn.Linear(hidden, kv_heads * d, bias=bias)
        self.core_attention = CoreAttention(kind, p, fused and kind == "unfused")
        self.o_proj = (SkipBiasLinear if fused else nn.Linear)(heads * d, hidden, bias=bias)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, ...] | None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x: (batch, seq, hidden), or (seq, batch, hidden) for unfused attention; the output
        projection's result in the same layout (without its bias when `fused`). `rope`: the
        (cos, sin) tables, or with `te` the fp32 angles alone (TE's fused RoPE)."""
        lead, d = x.shape[:2], self.head_dim
        if hasattr(self, "qkv_proj"):  # Megatron's layout: per head [q k v]
            q, k, v = self.qkv_proj(x).view(*lead, self.heads, 3 * d).split(d, dim=-1)
        else:
            q = self.q_proj(x).view(*lead, self.heads, d)
            k = self.k_proj(x).view(*lead, self.kv_heads, d)
            v = self.v_proj(x).view(*lead, self.kv_heads, d)
        if not self.seq_first:  # (b, s, heads, d) -> (b, heads, s, d)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        head_dim = 2 if self.seq_first else 1
        if rope is not None and self.te:
            q, k = tk.rope(q, rope[0], self.seq_first), tk.rope(k, rope[0], self.seq_first)
        elif rope is not None:
            cos, sin = rope
            if self.seq_first:  # tables (s, d) over (s, b, heads, d)
                cos, sin = cos[:, None, None, :], sin[:, None, None, :]
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if self.kv_heads != self.heads:  # grouped-query attention: each K/V head serves heads/kv_heads queries
            groups = self.heads // self.kv_heads
            k = k.repeat_interleave(groups, dim=head_dim)
            v = v.repeat_interleave(groups, dim=head_dim)
        return self.o_proj(self.core_attention(q, k, v, mask))


class MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int, kind: str, bias: bool, fused: bool = False, te: bool = False) -> None:
        super().__init__()
        self.kind, self.fused, self.te = kind, fused, te
        if kind == "swiglu":
            self.gate_proj = nn.Linear(hidden, ffn, bias=bias)
        elif kind not in ("gelu", "squared_relu"):
            raise ValueError(f"mlp {kind!r}: expected swiglu, gelu or squared_relu")
        linear = SkipBiasLinear if fused else nn.Linear
        self.up_proj = linear(hidden, ffn, bias=bias)
        self.down_proj = linear(ffn, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP's output (without down_proj's bias when `fused`: Megatron adds it in the
        bias-dropout-add kernel)."""
        if self.kind == "swiglu" and self.te:
            return self.down_proj(tk.swiglu(self.gate_proj(x), self.up_proj(x)))
        if self.kind == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        if self.kind == "squared_relu" and self.te:
            return self.down_proj(tk.squared_relu(self.up_proj(x)))
        if self.kind == "squared_relu":  # Nemotron-4 (Primer's squared ReLU): two matrices, as GeLU's
            return self.down_proj(torch.square(F.relu(self.up_proj(x))))
        if self.fused:
            return self.down_proj(mk.bias_gelu(self.up_proj(x), self.up_proj.bias))
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

    def __init__(self, experts: int, hidden: int, ffn: int, kind: str, te: bool = False) -> None:
        super().__init__()
        self.kind, self.te = kind, te
        if kind == "swiglu":
            self.gate_proj = ExpertLinear(experts, hidden, ffn)
        elif kind != "gelu":
            raise ValueError(f"mlp {kind!r}: expected swiglu or gelu")
        self.up_proj = ExpertLinear(experts, hidden, ffn)
        self.down_proj = ExpertLinear(experts, ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu" and self.te:
            return self.down_proj(tk.swiglu(self.gate_proj(x), self.up_proj(x)))
        if self.kind == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.gelu(self.up_proj(x)))


class MoE(nn.Module):
    """A top-k routed mixture of experts (Mixtral, Switch) with balanced routing: every expert
    takes tokens·top_k/experts token copies (drop-and-pad at capacity factor 1, the load a
    balancing loss aims for), so the step's shapes do not depend on the router's values. The
    token copies are sorted by expert (`dispatch`), run through the experts, put back in token
    order and summed with the router's weights (`combine`)."""

    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int, kind: str, te: bool = False) -> None:
        super().__init__()
        if not 1 <= top_k <= experts:
            raise ValueError(f"top_k {top_k} must be in 1..experts ({experts})")
        self.experts_n, self.top_k = experts, top_k
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts = Experts(experts, hidden, ffn, kind, te)

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


def _norm(kind: str, dim: int, te: bool = False) -> nn.Module:
    if kind == "rms":
        return tk.RMSNorm(dim) if te else RMSNorm(dim)
    if kind == "layer":
        return tk.LayerNorm(dim) if te else nn.LayerNorm(dim)
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
        attention: str = "sdpa",
        p: float = 0.0,
        fused: bool = False,
        fused_qkv: bool = False,
        te: bool = False,
    ) -> None:
        super().__init__()
        self.p, self.fused = p, fused
        self.attn_norm = _norm(norm, hidden, te)
        self.attn = Attention(hidden, heads, kv_heads, bias, attention, p, fused, fused_qkv, te)
        self.mlp_norm = _norm(norm, hidden, te)
        if experts:
            self.moe = MoE(hidden, ffn, experts, top_k, mlp, te)
        else:
            self.mlp = MLP(hidden, ffn, mlp, bias, fused, te)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, ...] | None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self._residual(self.attn(self.attn_norm(x), rope, mask), self.attn.o_proj, x)
        if hasattr(self, "moe"):
            return x + dropout(self.moe(self.mlp_norm(x)), self.p, self.training)
        return self._residual(self.mlp(self.mlp_norm(x)), self.mlp.down_proj, x)

    def _residual(self, y: torch.Tensor, linear: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """x + dropout(y) (y with `linear`'s bias): Megatron's fused bias-dropout-add kernel, or
        dropout and an add."""
        if self.fused:
            return mk.bias_dropout_add(y, linear.bias, x, self.p if self.training else 0.0)
        return x + dropout(y, self.p, self.training)


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
        attention: str = "sdpa",
        dropout: float = 0.0,
        fused: str = "none",
        fused_qkv: bool = False,
    ) -> None:
        super().__init__()
        kv_heads = kv_heads or heads
        ffn = ffn or 4 * hidden
        if fused not in ("none", "megatron", "te"):
            raise ValueError(f"fused {fused!r}: expected none, megatron or te")
        if fused == "megatron" and (not bias or mlp != "gelu" or experts):
            raise ValueError(
                "fused megatron kernels (bias + GeLU, bias + dropout + add) need bias, the gelu MLP, no experts"
            )
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout {dropout}: expected 0 <= p < 1")
        self.embed = nn.Embedding(vocab, hidden)
        self.positions = positions
        self.rope_base = rope_base
        self.head_dim = hidden // heads
        self.p = dropout
        self.te = fused == "te"
        self.seq_first = attention == "unfused"  # Megatron's [s, b, h]: heads split by views
        self.masked = attention == "unfused" and fused != "megatron"  # a causal mask tensor for masked_fill
        if positions == "learned":
            self.pos = nn.Embedding(max_seq, hidden)
        elif positions != "rope":
            raise ValueError(f"positions {positions!r}: expected rope or learned")
        self.layers = nn.ModuleList(
            Block(
                hidden,
                heads,
                kv_heads,
                ffn,
                norm,
                mlp,
                bias,
                experts,
                top_k,
                attention,
                dropout,
                fused == "megatron",
                fused_qkv,
                self.te,
            )  # fmt: skip
            for _ in range(layers)
        )
        self.norm = _norm(norm, hidden, self.te)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        if tie:
            self.lm_head.weight = self.embed.weight

    def _rope(self, seq: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        """(cos, sin) tables (seq, head_dim) in the model's dtype, or with TE's fused RoPE the fp32
        angles alone (Megatron's rotary embedding; the kernel takes their sin and cos)."""
        inv = 1.0 / self.rope_base ** (torch.arange(0, self.head_dim, 2, device=device) / self.head_dim)
        angles = torch.outer(torch.arange(seq, device=device, dtype=inv.dtype), inv)
        angles = torch.cat((angles, angles), dim=-1)
        if self.te:
            return (angles,)
        dtype = self.embed.weight.dtype
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (batch, seq, vocab), or (seq, batch, vocab) with unfused attention (`seq_first`:
        Megatron's layout, which its loss reads with the targets transposed)."""
        seq = tokens.shape[1]
        x = self.embed(tokens)
        rope = None
        if self.positions == "learned":
            x = x + self.pos(torch.arange(seq, device=tokens.device))
        else:
            rope = self._rope(seq, tokens.device)
        if self.seq_first:  # [b, s, h] -> [s, b, h], as Megatron's embedding does
            x = x.transpose(0, 1).contiguous()
        x = dropout(x, self.p, self.training)
        mask = None
        if self.masked:
            mask = torch.ones(seq, seq, dtype=torch.bool, device=tokens.device).triu(1)
        for layer in self.layers:
            x = layer(x, rope, mask)
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
        if model.seq_first:  # logits (s, b, vocab): the targets transposed, as Megatron's loss does
            targets = targets.transpose(0, 1)
        if model.te:  # Megatron-Core's fused cross-entropy
            return tk.cross_entropy(logits, targets)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, inputs, loss


__all__ = ["GPT", "CoreAttention", "build", "param_count", "PRESETS"]
