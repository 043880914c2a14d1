"""What the corpus jobs share: a tiny causal transformer language model and its random data.

Random weights (seeded), nothing downloaded; small enough that a recorded step stays a few
thousand host ops, so each job's traces stay small when checked in.
"""

from __future__ import annotations

import argparse
import gc

import torch
import torch.distributed as dist
import torch.nn as nn

VOCAB, D_MODEL, HEADS, FFN, LAYERS, SEQ = 512, 64, 4, 128, 2, 32


class TinyLM(nn.Module):
    """Embedding, a few nn.TransformerEncoder layers, a linear head."""

    def __init__(self, layers: int = LAYERS) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Parameter(torch.randn(SEQ, D_MODEL) * 0.02)
        layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        return self.head(self.encoder(x, mask=self.mask, is_causal=True))


def batch(rank: int, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens and their next-token targets, different on every rank."""
    g = torch.Generator().manual_seed(100 + rank)
    tokens = torch.randint(0, VOCAB, (size, SEQ + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def finish() -> None:
    """Barrier, then destroy the process group now, not at exit (the caller has dropped its model
    and optimizer first: a DDP reducer holds the group)."""
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()


def train_lm(model: nn.Module, rank: int, steps: int) -> None:
    """`steps` AdamW steps of a language model on this rank's batch, then `finish` (the caller
    keeps no other reference to the model)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = batch(rank)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        lm_loss(model(x), y).backward()
        opt.step()
    del model, opt
    finish()


def start() -> tuple[int, int, int]:
    """Parse ``--steps`` and join the gloo process group: (steps, rank, world size)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    steps = ap.parse_args().steps
    dist.init_process_group("gloo")
    return steps, dist.get_rank(), dist.get_world_size()
