"""Tiny DDP training loop (gloo, CPU) for the collect tests: plain PyTorch, no chakra_trace code.

Run by torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment).
"""

import argparse
import gc

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        dist.all_reduce(loss.detach())  # a "logging" collective
    dist.barrier()
    del model, opt  # the reducer holds the group: let it go now, not at exit (examples/train_ddp.py)
    gc.collect()
    dist.destroy_process_group()
    print(f"ddp rank {rank}/{world}: {args.steps} steps done")


if __name__ == "__main__":
    main()
