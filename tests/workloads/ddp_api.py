"""Two-rank gloo DDP on 127.0.0.1 started with mp.spawn, recording with the Python API.

python ddp_api.py OUT_DIR [STEPS]
"""

import gc
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from chakra_trace.collect.recorder import record


def worker(rank: int, world: int, port: int, out: str, steps: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    with record(out, wait=1, warmup=1, active=2, num_threads=1) as rec:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            rec.step()
    dist.barrier()
    del model, opt  # the reducer holds the group: let it go now, not at exit (examples/train_ddp.py)
    gc.collect()
    dist.destroy_process_group()


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(2, port, out, steps), nprocs=2)
    print("ddp_api: done")


if __name__ == "__main__":
    main()
