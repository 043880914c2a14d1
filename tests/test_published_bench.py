"""benchmarks/published_bench.py: published runs predicted from their configuration.

The tables are data (tests/test_published_tables.py checks them); here: every table parses and
every row resolves to a plan the framework ran (the SC21 run script's micro-batches and
interleaving), the FLOPs conventions are the sources' own, and a small row predicted end to end
keeps the invariants any prediction must: the slowest GPU's parts add up to the step, a faster
GPU is never slower, and the prediction uses no efficiency knob (the device's kernel model)."""

from __future__ import annotations

import csv
import importlib.util
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TABLES = sorted((ROOT / "benchmarks" / "tables").glob("*.csv"))


@cache
def bench():
    spec = importlib.util.spec_from_file_location("published_bench", ROOT / "benchmarks" / "published_bench.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["published_bench"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("table", TABLES, ids=lambda p: p.stem)
def test_every_row_resolves_to_a_plan(table):
    b = bench()
    rows = b.read_table(table)
    settings = b.settings_of(table)
    assert rows
    for row in rows:
        plan = b.resolve(row, settings)
        per_replica = row.global_batch // row.dp
        assert plan["micro_batch"] * plan["micro_batches"] == per_replica, row.name
        assert plan["recompute"] in ("none", "full", "selective")
        if row.pp > 1:
            assert plan["micro_batches"] % row.pp == 0 or plan["virtual_stages"] == 1, row.name
        assert b.step_flops(row, plan["recompute"]) > 0


def test_sc21_resolves_to_the_run_script():
    """NVIDIA's examples/sc21/run_table_1.sh: MBS and layers per virtual stage of each row."""
    b = bench()
    table = ROOT / "benchmarks" / "tables" / "megatron_sc21_table1.csv"
    got = {r.name: b.resolve(r, b.settings_of(table)) for r in b.read_table(table)}
    mbs = [16, 16, 16, 8, 4, 2, 2, 1, 1, 1]
    layers_per_chunk = [None, None, None, None, None, 5, 5, 3, 1, None]
    for (name, plan), m, lpc, row in zip(got.items(), mbs, layers_per_chunk, b.read_table(table)):
        assert plan["micro_batch"] == m, name
        assert plan["virtual_stages"] == (1 if lpc is None else row.layers // row.pp // lpc), name
        assert plan["recompute"] == "full"
        assert plan["model"].get("preset") == "megatron-sc21"


def test_hardware_flops_are_megatrons_formula():
    b = bench()
    table = ROOT / "benchmarks" / "tables" / "megatron_sc21_table1.csv"
    for row in b.read_table(table):
        B, s, L, h, V = row.global_batch, row.seq, row.layers, row.hidden, row.vocab
        want = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
        assert b.step_flops(row, "full") == pytest.approx(want, rel=1e-12)


def test_model_flops_reproduce_the_published_tokens_per_second():
    """NeMo prints tokens/s/GPU beside its model TFLOP/s: our count of a step's FLOPs over the
    tokens/s's step time gives the printed TFLOP/s (the sources' convention, within 0.5%)."""
    b = bench()
    table = ROOT / "benchmarks" / "tables" / "nemo_24_07_h100_fp8.csv"
    with open(table, newline="") as f:
        tokens = {r["name"]: float(r["published_tokens_per_s_per_gpu"]) for r in csv.DictReader(f)}
    for row in b.read_table(table):
        step = row.global_batch * row.seq / (tokens[row.name] * row.gpus)
        tflops = b.step_flops(row, "none") / (step * row.gpus) / 1e12
        assert tflops == pytest.approx(row.published, rel=5e-3), row.name


def test_bad_cells_name_the_file_and_line(tmp_path):
    b = bench()
    src = (ROOT / "benchmarks" / "tables" / "megatron_sc21_table1.csv").read_text().splitlines()
    src[1] = src[1].replace(",24,2304,", ",x,2304,")
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(src) + "\n")
    with pytest.raises(SystemExit, match=r"bad.csv:2:"):
        b.read_table(bad)


@pytest.mark.torch
def test_a_small_row_end_to_end_keeps_the_invariants(tmp_path):
    pytest.importorskip("torch", reason="capturing needs PyTorch")
    b = bench()
    head = (ROOT / "benchmarks" / "tables" / "megatron_sc21_table1.csv").read_text().splitlines()[0]
    rows = [
        "small-a100,a100,16,2,2,4,1,1,4,256,4,,,1024,256,32,2,full,0,1,hardware,100,gpt,gelu,0,tflops_per_gpu,100,,",
        "small-h100,h100,16,2,2,4,1,1,4,256,4,,,1024,256,32,2,full,0,1,hardware,100,gpt,gelu,0,tflops_per_gpu,100,,",
    ]
    table = tmp_path / "small.csv"
    table.write_text("\n".join([head, *rows]) + "\n")
    out = {r.name: b.predict(r, {}) for r in b.read_table(table)}
    for r in out.values():
        parts = r["compute_s"] + r["exposed_comm_s"] + r["bubble_s"] + r["other_s"]
        assert parts == pytest.approx(r["step_s"], rel=1e-9)
        assert r["predicted_tflops_per_gpu"] > 0 and r["system"] in ("selene", "dgx-h100")
        by = r["compute_by_class_s"]
        assert by["matmul"] > 0 and by["kernels"] > 0
    assert out["small-h100"]["step_s"] < out["small-a100"]["step_s"]
