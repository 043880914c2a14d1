"""A Vision Transformer (Dosovitskiy et al. 2021) for `chakra capture`: image classification.

    chakra capture examples/models/vit.py:build --config '{"preset": "vit-h14"}' \\
        --batch 32 --seq 224 --dtype bfloat16 -o vit.master.et

`seq` is the image side in pixels (square RGB images): the encoder sees (seq / patch)² patch
tokens and a class token. Patch embedding (a strided convolution), learned positions, `layers`
pre-norm encoder blocks (LayerNorm, bidirectional self-attention through
`F.scaled_dot_product_attention`, GELU MLP of `ffn`), a final LayerNorm and a linear classifier
on the class token. Presets: the paper's Table 1 sizes (ViT-B/16 86M, ViT-L/16 304M, ViT-H/14
632M parameters) with 1,000 classes.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    "vit-tiny": dict(layers=2, hidden=64, heads=4, ffn=256, patch=16, classes=10),
    "vit-b16": dict(layers=12, hidden=768, heads=12, ffn=3072, patch=16, classes=1000),
    "vit-l16": dict(layers=24, hidden=1024, heads=16, ffn=4096, patch=16, classes=1000),
    "vit-h14": dict(layers=32, hidden=1280, heads=16, ffn=5120, patch=14, classes=1000),
}


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.o_proj = nn.Linear(hidden, hidden)
        self.mlp_norm = nn.LayerNorm(hidden)
        self.up_proj = nn.Linear(hidden, ffn)
        self.down_proj = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, h)
        x = x + self.o_proj(a)
        return x + self.down_proj(F.gelu(self.up_proj(self.mlp_norm(x))))


class ViT(nn.Module):
    def __init__(
        self, layers: int, hidden: int, heads: int, ffn: int, patch: int, classes: int, image: int = 224
    ) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
        self.patch = patch
        self.embed = nn.Conv2d(3, hidden, kernel_size=patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, hidden))
        self.positions = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, hidden))
        self.layers = nn.ModuleList(Block(hidden, heads, ffn) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.positions[:, : x.shape[1] + 1]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x[:, 0]))


def build(preset: str | None = None, image: int = 224, **config) -> tuple[nn.Module, object, object]:
    """(model, inputs, loss) for `chakra capture`: classification of random images of side `seq`."""
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"preset {preset!r}: expected one of {sorted(PRESETS)}")
        config = {**PRESETS[preset], **config}
    model = ViT(image=image, **config)
    classes = model.head.out_features

    def inputs(batch: int, seq: int):
        if seq % model.patch or seq > image:
            raise ValueError(f"image side {seq}: expected a multiple of the patch ({model.patch}) up to {image}")
        return (torch.randn(batch, 3, seq, seq),), torch.randint(0, classes, (batch,))

    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels)

    return model, inputs, loss


__all__ = ["ViT", "build", "PRESETS"]
