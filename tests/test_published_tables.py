"""The published training tables under benchmarks/tables (issue 31) parse and are self-consistent.

Cheap checks only, no simulation: the parallel layout multiplies out to the GPU count, the shapes
divide, and where a source gives tokens/s or a step time next to its model TFLOP/s the two agree
through Megatron's model-FLOPs count (written out here, independent of the code under test), so a
mistyped column shows up. Every value and its source is in benchmarks/tables/SOURCES.md.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

TABLES = Path(__file__).resolve().parent.parent / "benchmarks" / "tables"
FILES = sorted(TABLES.glob("*.csv"))
BASE = (
    "name,gpu,gpus,tp,pp,dp,cp,ep,layers,hidden,heads,kv_heads,ffn,vocab,seq,global_batch,"
    "micro_batch,recompute,sp,virtual_stages,flops,published_tflops_per_gpu"
).split(",")
INTS = ("gpus", "tp", "pp", "dp", "cp", "ep", "layers", "hidden", "heads", "vocab", "seq", "global_batch")
GPUS = {"a100", "h100", "h200", "b200", "gb200"}


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def auto_or_int(value: str) -> int | None:
    return None if value == "auto" else int(value)


def model_tflops(r: dict[str, str], tokens_per_s_per_gpu: float) -> float:
    """Megatron/NeMo model FLOPs per token (no recomputation): 6 x layer weights, 12·l·s·h for
    the attention scores and context (no causal halving), 6·V·h for the logits."""
    layers, h, heads = int(r["layers"]), int(r["hidden"]), int(r["heads"])
    kv = int(r["kv_heads"] or heads)
    ffn = int(r["ffn"] or 4 * h)
    attn = 2 * h * h + 2 * h * kv * (h // heads)
    mlp = (3 if r.get("mlp") == "swiglu" else 2) * h * ffn
    per_token = 6 * layers * (attn + mlp) + 12 * layers * int(r["seq"]) * h + 6 * int(r["vocab"]) * h
    return per_token * tokens_per_s_per_gpu / 1e12


def test_tables_exist():
    assert {p.name for p in FILES} >= {"megatron_sc21_table1.csv", "llama3_405b_table4.csv"}
    assert (TABLES / "SOURCES.md").is_file()
    for p in FILES:
        assert p.name in (TABLES / "SOURCES.md").read_text(), f"{p.name} has no entry in SOURCES.md"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_columns_and_values(path: Path):
    with path.open(newline="") as f:
        header = next(csv.reader(f))
    assert header[: len(BASE)] == BASE, f"{path.name}: the base columns, in order, then extras"
    table = rows(path)
    assert table, f"{path.name}: no rows"
    for r in table:
        where = f"{path.name}:{r['name']}"
        assert r["gpu"] in GPUS, where
        v = {k: int(r[k]) for k in INTS}
        kv = int(r["kv_heads"] or v["heads"])
        assert v["gpus"] == v["tp"] * v["pp"] * v["dp"] * v["cp"], where
        assert v["dp"] % v["ep"] == 0, where
        assert v["hidden"] % v["heads"] == 0 and v["heads"] % kv == 0, where
        assert v["cp"] == 1 or v["seq"] % (2 * v["cp"]) == 0, where
        mbs = auto_or_int(r["micro_batch"])
        assert v["global_batch"] % (v["dp"] * (mbs or 1)) == 0, where
        vs = auto_or_int(r["virtual_stages"])
        if vs and vs > 1:
            assert v["pp"] > 1 and v["layers"] % (v["pp"] * vs) == 0, where
        if r["ffn"]:
            assert int(r["ffn"]) > 0, where
        assert r["recompute"] in {"full", "selective", "none", "auto"}, where
        assert r["sp"] in {"0", "1", "auto"}, where
        assert r["sp"] != "1" or v["tp"] > 1, where
        assert r["flops"] in {"hardware", "model"}, where
        assert float(r["published_tflops_per_gpu"]) > 0, where


def test_names_unique():
    names = [r["name"] for p in FILES for r in rows(p)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_published_metrics_agree(path: Path):
    """Tokens/s or step time next to model TFLOP/s: both through the same FLOPs count; an MFU
    converted at the source's own peak (989 TFLOP/s for the Nemotron reports)."""
    for r in rows(path):
        where = f"{path.name}:{r['name']}"
        tflops = float(r["published_tflops_per_gpu"])
        if r.get("published_metric") == "mfu_percent":
            assert tflops == pytest.approx(float(r["published_value"]) * 9.89, abs=0.06), where
        if r["flops"] != "model":
            continue
        if r.get("published_tokens_per_s_per_gpu"):
            tokens = float(r["published_tokens_per_s_per_gpu"])
        elif r.get("published_step_s"):
            tokens = int(r["global_batch"]) * int(r["seq"]) / (float(r["published_step_s"]) * int(r["gpus"]))
        else:
            continue
        # 1%: the sources round step times to two or three digits
        assert model_tflops(r, tokens) == pytest.approx(tflops, rel=0.01), where
