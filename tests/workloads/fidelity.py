"""The three small training jobs of ../shared/traces/pytorch-cpu (collect_traces.py), for the
replay fidelity test: plain PyTorch, no chakra_trace code. `paired.py` times them.

    chakra collect -o traces -- python fidelity.py --model mlp --steps 6
    chakra collect -o traces -- torchrun --nproc-per-node 2 fidelity.py --model ddp --steps 6
"""

import argparse
import gc

import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self, d_in=64, d_hidden=256, d_out=10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_out)
        )

    def forward(self, x):
        return self.net(x)


class TinyTransformerLM(nn.Module):
    def __init__(self, vocab=128, d_model=64, nhead=4, d_ff=128):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.block = nn.TransformerEncoderLayer(
            d_model=d_model, nhead=nhead, dim_feedforward=d_ff, dropout=0.1, batch_first=True, norm_first=True
        )
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        causal = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        return self.head(self.block(self.embed(tokens), src_mask=causal, is_causal=True))


def build(model: str):
    torch.manual_seed(0)
    loss_fn = nn.CrossEntropyLoss()
    if model == "transformer":
        net = TinyTransformerLM()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        x, y = torch.randint(0, 128, (8, 16)), torch.randint(0, 128, (8, 16))

        def step():
            opt.zero_grad(set_to_none=True)
            loss_fn(net(x).reshape(-1, 128), y.reshape(-1)).backward()
            opt.step()

        return step
    net = MLP()
    if model == "ddp":
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("gloo")
        net = DDP(net, bucket_cap_mb=0.25)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        if model == "ddp":
            import torch.distributed as dist

            dist.all_reduce(loss.detach())  # "logging" collectives
            counter = torch.ones(1)
            dist.all_gather([torch.zeros(1) for _ in range(dist.get_world_size())], counter)

    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "transformer", "ddp"], required=True)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    torch.set_num_threads(1)
    step = build(args.model)
    for _ in range(args.steps):
        step()
    if args.model == "ddp":
        torch.distributed.barrier()  # nobody leaves while a peer still talks to it
        del step  # the DDP reducer holds the group: let it go now, not at exit (examples/train_ddp.py)
        gc.collect()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
