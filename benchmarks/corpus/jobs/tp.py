"""Tensor parallel: a transformer block (attention + MLP) split over 2 ranks with DTensor.

`parallelize_module` shards the query/key/value and first MLP projections column-wise and the
attention output and second MLP projections row-wise (Megatron style) over a CPU device mesh:
each rank computes half of the heads and half of the hidden units, and every row-wise layer
ends in an all-reduce (forward), as does the gradient of every column-wise layer's input
(backward). gloo, CPU, 127.0.0.1.
"""

import torch
import torch.nn as nn
from _common import D_MODEL, FFN, HEADS, SEQ, finish, start
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

LAYERS = 2


class Block(nn.Module):
    """Pre-norm causal self-attention and MLP; head count read from the (local) projection width."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.q, self.k, self.v = (nn.Linear(D_MODEL, D_MODEL) for _ in range(3))
        self.o = nn.Linear(D_MODEL, D_MODEL)
        self.fc1, self.fc2 = nn.Linear(D_MODEL, FFN), nn.Linear(FFN, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        # (batch, heads on this rank, seq, head dim): a column-wise shard holds whole heads
        q, k, v = (p(h).view(b, s, -1, D_MODEL // HEADS).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm2(x))))


def main() -> None:
    steps, rank, world = start()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)  # every rank builds the same full block, then keeps its shards
    model = nn.Sequential(*(Block() for _ in range(LAYERS)))
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel()}
    plan |= {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    for block in model:
        parallelize_module(block, mesh, plan)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(100)  # tensor parallel ranks see the same batch
    x, target = torch.randn(8, SEQ, D_MODEL, generator=g), torch.randn(8, SEQ, D_MODEL, generator=g)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), target).backward()
        opt.step()
    del model, opt
    finish()


if __name__ == "__main__":
    main()
