"""A GPT-2-shaped language model in plain PyTorch (token and position embeddings, causal
attention blocks, a tied LM head, cross-entropy on shifted labels), recorded as a host
execution trace for the replay tests: `python gpt2_like.py OUT.et.json`.

`--strip-ranges` drops every `tensor_range` attribute and marks the trace schema 1.1.0, as a
trace recorded by an older PyTorch looks: the replay must then find valid token ids itself.
"""

import argparse
import gzip
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPT2Like(nn.Module):
    def __init__(self, vocab=503, n_pos=64, d=64, layers=2, heads=4):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(n_pos, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids, labels):
        pos = torch.arange(ids.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.wte(ids) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # the LM head is tied to the token embedding
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


def record(path: str, steps: int = 2) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = GPT2Like()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    ids = torch.randint(0, 503, (4, 32))
    obs = torch.profiler.ExecutionTraceObserver().register_callback(path)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps),
        execution_trace_observer=obs,
    ) as prof:
        for _ in range(steps + 1):
            opt.zero_grad(set_to_none=True)
            net(ids, ids).backward()
            opt.step()
            prof.step()
    obs.unregister_callback()


def strip_ranges(path: str, out: str) -> int:
    """Write `path` without its tensor_range attributes, as schema 1.1.0; returns how many went."""
    with open(path) as f:
        d = json.load(f)
    n = 0
    for node in d["nodes"]:
        attrs = node.get("attrs", [])
        node["attrs"] = [a for a in attrs if a.get("name") != "tensor_range"]
        n += len(attrs) - len(node["attrs"])
    d["schema"] = "1.1.0-chakra.0.0.4"
    with gzip.open(out, "wt") as f:
        json.dump(d, f)
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", help="host trace to write (.et.json.gz)")
    ap.add_argument("--strip-ranges", action="store_true")
    args = ap.parse_args()
    raw = args.out + ".raw.json"
    record(raw)
    if args.strip_ranges:
        print("stripped", strip_ranges(raw, args.out), "tensor_range attributes")
    else:
        with open(raw) as f, gzip.open(args.out, "wt") as g:
            g.write(f.read())
    os.remove(raw)


if __name__ == "__main__":
    main()
