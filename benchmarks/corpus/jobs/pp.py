"""Pipeline parallel: the tiny transformer LM cut into 2 stages with torch.distributed.pipelining.

Stage 0 (rank 0) holds the embedding and the first encoder layer, stage 1 (rank 1) the second
layer and the head. Each step runs a GPipe schedule of 4 micro-batches: activations go forward
and their gradients back by point-to-point send/recv (batched isend/irecv), then each stage's
optimizer steps on its own parameters. gloo, CPU, 127.0.0.1.
"""

import torch
import torch.nn as nn
from _common import TinyLM, batch, finish, lm_loss, start
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

MICRO_BATCHES = 4


class Stage0(nn.Module):
    def __init__(self, lm: TinyLM) -> None:
        super().__init__()
        self.embed, self.pos, self.layer, self.mask = lm.embed, lm.pos, lm.encoder.layers[0], lm.mask

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        return self.layer(x, src_mask=self.mask, is_causal=True)


class Stage1(nn.Module):
    def __init__(self, lm: TinyLM) -> None:
        super().__init__()
        self.layer, self.head, self.mask = lm.encoder.layers[1], lm.head, lm.mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x, src_mask=self.mask, is_causal=True))


def main() -> None:
    steps, rank, world = start()
    assert world == 2, "this job is laid out for 2 stages"
    torch.manual_seed(0)  # both ranks build the whole model, then keep their stage
    lm = TinyLM(layers=2)
    module = Stage0(lm) if rank == 0 else Stage1(lm)
    del lm
    stage = PipelineStage(module, rank, world, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=MICRO_BATCHES, loss_fn=lm_loss)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    x, y = batch(0, size=4 * MICRO_BATCHES)  # one global batch, cut into micro-batches
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=[])
        opt.step()
    del schedule, stage, module, opt
    finish()


if __name__ == "__main__":
    main()
