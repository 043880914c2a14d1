"""One rank, no parallelism: a GPT-2-style model from the `transformers` package.

GPT2LMHeadModel built from a small GPT2Config (2 layers, 64-wide, 2 heads, a 1,000-token
vocabulary): random weights, nothing downloaded. A host trace of a model as users write it,
with transformers' own op mix (its attention, Conv1D projections, tied embeddings). Plain
python, CPU, no process group.
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SEQ = 32


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=64)
    model = GPT2LMHeadModel(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(100)
    tokens = torch.randint(0, cfg.vocab_size, (4, SEQ), generator=g)
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        model(input_ids=tokens, labels=tokens).loss.backward()
        opt.step()
    print(f"gpt2: {args.steps} steps done")


if __name__ == "__main__":
    main()
