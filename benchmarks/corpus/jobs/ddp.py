"""Data parallel: a tiny transformer language model under DistributedDataParallel, 2 ranks.

Exercises DDP's bucketed gradient all-reduces (gloo runs them on its worker thread, overlapping
the backward pass) and the broadcast of the parameters at construction. gloo, CPU, 127.0.0.1.
"""

import torch
from _common import TinyLM, start, train_lm
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    steps, rank, world = start()
    torch.manual_seed(0)
    model = DDP(TinyLM(), bucket_cap_mb=0.1)  # small buckets: several all-reduces per step
    train_lm(model, rank, steps)


if __name__ == "__main__":
    main()
