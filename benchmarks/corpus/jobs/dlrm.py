"""Embedding (model) parallel + data parallel: a DLRM-like recommendation model on 4 ranks.

Each rank holds one EmbeddingBag table (table-wise sharding) and pools it for the whole global
batch; an all_to_all_single hands every rank the pooled rows of its own samples (forward) and
sends their gradients back to the table owners (backward). The dense bottom and top MLPs are
data parallel: their gradients are all-reduced as one flat bucket.

The local batches are uneven: rank 2's data shard is 8x larger. So every rank sends the SAME
split list (input_split_sizes identical on every rank, the split for rank 2 eight times the
others) and sends the same bytes, while rank 2 receives 8x more than each other rank: a hot
receiver, visible only from the receiving side. In the backward all-to-all the roles swap
(rank 2 sends 8x more). gloo, CPU, 127.0.0.1.
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from _common import finish, start

TABLE_ROWS, DIM, BAG, DENSE_IN = 1000, 16, 4, 13
LOCAL_BATCH = [16, 16, 128, 16]  # rank 2's shard is 8x the others'


class AllToAll(torch.autograd.Function):
    """all_to_all_single with explicit splits (rows); its backward is the reverse exchange."""

    @staticmethod
    def forward(ctx, x, send_rows, recv_rows):
        ctx.splits = (send_rows, recv_rows)
        out = x.new_empty(sum(recv_rows), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), recv_rows, send_rows)
        return out

    @staticmethod
    def backward(ctx, grad):
        send_rows, recv_rows = ctx.splits
        back = grad.new_empty(sum(send_rows), *grad.shape[1:])
        dist.all_to_all_single(back, grad.contiguous(), send_rows, recv_rows)
        return back, None, None


def mlp(*widths: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def main() -> None:
    steps, rank, world = start()
    assert world == len(LOCAL_BATCH), f"this job is laid out for {len(LOCAL_BATCH)} ranks"
    torch.manual_seed(0)  # the dense MLPs start alike on every rank
    bottom, top = mlp(DENSE_IN, 32, DIM), mlp(DIM * (world + 1), 64, 32, 1)
    dense = list(bottom.parameters()) + list(top.parameters())
    torch.manual_seed(1 + rank)
    table = nn.EmbeddingBag(TABLE_ROWS, DIM, mode="sum")  # this rank's table
    opt = torch.optim.SGD(dense + list(table.parameters()), lr=1e-2)
    b = LOCAL_BATCH[rank]
    total = sum(LOCAL_BATCH)
    # this rank's table lookups for the whole global batch (samples in rank order); in a real
    # job an input all-to-all would bring them, here every rank draws them from the same seed
    g = torch.Generator().manual_seed(1000 + rank)
    ids = torch.randint(0, TABLE_ROWS, (total, BAG), generator=g)
    gl = torch.Generator().manual_seed(2000 + rank)
    dense_x = torch.randn(b, DENSE_IN, generator=gl)
    labels = torch.randint(0, 2, (b, 1), generator=gl).float()
    send_rows = LOCAL_BATCH  # the same on every rank: rank j gets its own samples' rows
    recv_rows = [b] * world  # one block of this rank's samples from every table owner
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        pooled = table(ids)  # (total, DIM)
        mine = AllToAll.apply(pooled, send_rows, recv_rows)  # (world * b, DIM), table-major
        sparse = mine.view(world, b, DIM).transpose(0, 1).reshape(b, world * DIM)
        z = torch.cat([bottom(dense_x), sparse], dim=1)
        loss = nn.functional.binary_cross_entropy_with_logits(top(z), labels)
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in dense])
        dist.all_reduce(flat)  # the dense MLPs' gradients, one bucket
        flat /= world
        off = 0
        for p in dense:
            p.grad.copy_(flat[off : off + p.numel()].view_as(p))
            off += p.numel()
        opt.step()
    del opt, table, bottom, top
    finish()


if __name__ == "__main__":
    main()
