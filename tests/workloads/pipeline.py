"""A 4-rank job of another parallelism than DDP: 2 pipeline stages x 2 data-parallel replicas.

Ranks 0 and 1 hold stage 0, ranks 2 and 3 stage 1; rank r of stage 0 feeds rank r + 2. Each step
runs two micro-batches (activations sent forward, their gradients sent back with point-to-point
send/recv), then all-reduces each stage's gradients within its data-parallel group (a subgroup,
asynchronously, waited before the optimizer step). Run by torchrun on 127.0.0.1, gloo, CPU.
"""

import argparse
import gc

import torch
import torch.distributed as dist
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 4, "this job is laid out for 4 ranks"
    stage = rank // 2
    dp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dp = dp_groups[stage]
    peer = rank + 2 if stage == 0 else rank - 2
    torch.manual_seed(stage)
    w = args.width
    if stage == 0:
        net = nn.Sequential(nn.Linear(64, w), nn.GELU(), nn.Linear(w, w), nn.GELU())
    else:
        net = nn.Sequential(nn.Linear(w, w), nn.GELU(), nn.Linear(w, 10))
    opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    micro = [torch.randn(args.batch, 64, generator=g) for _ in range(2)]
    labels = [torch.randint(0, 10, (args.batch,), generator=g) for _ in range(2)]
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        if stage == 0:
            outs = []
            for x in micro:
                y = net(x)
                dist.send(y.detach(), peer)
                outs.append(y)
            for y in outs:
                grad = torch.empty_like(y)
                dist.recv(grad, peer)
                y.backward(grad)
        else:  # GPipe order: every forward, then every backward (stage 0 sends both before it waits)
            inputs, losses = [], []
            for y_label in labels:
                x = torch.empty(args.batch, w)
                dist.recv(x, peer)
                x.requires_grad_(True)
                inputs.append(x)
                losses.append(nn.functional.cross_entropy(net(x), y_label))
            for x, loss in zip(inputs, losses):
                loss.backward()
                dist.send(x.grad, peer)
        works = [dist.all_reduce(p.grad, group=dp, async_op=True) for p in net.parameters()]
        for work in works:
            work.wait()
        opt.step()
    dist.barrier()
    del net, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
