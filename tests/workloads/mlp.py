"""Tiny MLP training loop for the collect tests: plain PyTorch, no chakra_trace code."""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--fail-at", type=int, default=None, help="raise at this step (tests early stops)")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)  # wraps opt.step too
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    for i in range(args.steps):
        if args.fail_at == i:
            raise SystemExit(f"stopping at step {i}")
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
    print(f"mlp: {args.steps} steps done")


if __name__ == "__main__":
    main()
