"""The job of tests/data/alltoall_list: the list form of all_to_all (`c10d::alltoall_`, one tensor
per peer) on gloo, one recorded step. Gloo needs every tensor of the list to be the same size.

    torchrun --nproc-per-node 2 --master-addr 127.0.0.1 tests/workloads/alltoall_list.py OUT
"""

import sys

import torch
import torch.distributed as dist

import chakra_trace.collect as cc

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
with cc.record(sys.argv[1], wait=0, warmup=1, active=1) as rec:
    for _step in range(2):
        ins = [torch.full((3, 4), float(rank)) for _ in range(world)]
        outs = [torch.empty((3, 4)) for _ in range(world)]
        dist.all_to_all(outs, ins)
        rec.step()
dist.destroy_process_group()
