"""Fully sharded data parallel: the tiny transformer LM under FSDP2 (`fully_shard`), 2 ranks.

Every encoder layer and then the whole model are sharded over a CPU device mesh: each layer's
parameters are all-gathered before its forward and again before its backward, and its
gradients reduce-scattered after it (gloo, CPU, 127.0.0.1).
"""

import warnings

import torch
from _common import TinyLM, start, train_lm
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def main() -> None:
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module")  # the LM head's output is a view
    steps, rank, world = start()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = TinyLM()
    for layer in model.encoder.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    train_lm(model, rank, steps)


if __name__ == "__main__":
    main()
