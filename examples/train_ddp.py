"""A small data-parallel training job for the demo: plain PyTorch, no chakra_trace code.

Two MLP blocks and a classifier trained with DistributedDataParallel over gloo (CPU). Small
gradient buckets make DDP all-reduce while backward still runs, so the trace shows
communication both hidden behind compute and exposed. Run by torchrun (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT from the environment).
"""

import argparse
import gc

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def model(width: int, classes: int) -> nn.Module:
    def block():
        return nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    return nn.Sequential(nn.Linear(64, width), block(), block(), nn.LayerNorm(width), nn.Linear(width, classes))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = DDP(model(args.width, 10), bucket_cap_mb=1)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own shard of data
    x, y = torch.randn(args.batch, 64, generator=g), torch.randint(0, 10, (args.batch,), generator=g)
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()  # DDP all-reduces gradient buckets as they fill
        opt.step()
        dist.all_reduce(loss.detach())  # a "logging" collective
    dist.barrier()
    # DDP's reducer holds the process group: left to the interpreter's exit, gloo's threads are
    # torn down mid-finalization and the process can abort ("terminate called without an
    # active exception"). Drop it first, so the group really goes here.
    del net, opt
    gc.collect()
    dist.destroy_process_group()
    if rank == 0:
        print(f"rank 0: trained {args.steps} steps")


if __name__ == "__main__":
    main()
