"""benchmarks/kernel_check.py: the kernel model beside kernels measured in public traces, read from
the raw Kineto JSON. Checked on the shared H100/MI300X traces: every operator it keeps launched
kernels and has work; the model's time is positive; a GPU without a kernel model and an unreadable
file are named and skipped, never silently dropped or a traceback."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path

import pytest

from conftest import SHARED

ROOT = Path(__file__).resolve().parent.parent
WILD = SHARED / "gpu-wild"


@cache
def kc():
    spec = importlib.util.spec_from_file_location("kernel_check", ROOT / "benchmarks" / "kernel_check.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kernel_check"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["h100_vit_inference.json.gz", "mi300x_qwen_inference.json.gz"])
def test_rows_of_a_public_trace(name):
    path = WILD / name
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/traces)")
    rows = kc().check(path, None)
    assert rows
    assert {r["device"] for r in rows} == {"h100" if name.startswith("h100") else "mi300x"}
    for r in rows:
        assert r["measured_us"] > 0 and r["model_us"] > 0 and r["bytes"] > 0
        assert (r["flops"] > 0) == (r["class"] == "matmul")
    table = kc().summarize(rows)
    assert {t["class"] for t in table} <= {"matmul", "memory-bound"}
    assert all(t["model_over_measured"] > 0 for t in table)


def test_unmodelled_gpus_and_bad_files_are_named(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"cat": "kernel"')
    v100 = tmp_path / "v100.json"
    v100.write_text('{"deviceProperties": [{"name": "Tesla V100-SXM2-16GB"}], "traceEvents": []}')
    assert kc().main([str(bad), str(v100)]) == 0
    err = capsys.readouterr().err
    assert f"{bad}: skipped, not a readable Kineto trace" in err
    assert "v100.json: skipped, its GPU (Tesla V100-SXM2-16GB) has no kernel model" in err
