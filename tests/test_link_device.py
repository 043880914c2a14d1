"""Host-only conversion of GPU jobs: device ops are device compute, costed by a device preset."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.convert.pytorch import convert_pytorch
from chakra_trace.errors import ChakraError
from chakra_trace.io.et import write_trace
from chakra_trace.io.workload import Workload
from chakra_trace.schema.devices import DEVICES, device_spec
from chakra_trace.schema.enums import NodeType
from chakra_trace.simulate.devices import with_device
from chakra_trace.simulate.presets import preset, simulate_on, with_compute
from conftest import sample

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def resnet_host_only():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return convert_pytorch(sample("resnet_et.json.gz"))[0]


def test_ops_on_cuda_tensors_become_device_compute_with_their_cost(resnet_host_only):
    t = resnet_host_only
    comp = t.types == NodeType.COMP_NODE
    unknown = t.attr_array("duration_unknown")[1]
    dev = comp & ~t.is_cpu_op
    assert dev.sum() > 1000 and (unknown == dev).all()
    # FLOPs for the arithmetic (convolutions, matmuls, elementwise), bytes for copies; views have neither
    assert (t.num_ops[dev] > 0).sum() > 500 and ((t.num_ops[dev] > 0) | (t.tensor_size[dev] > 0)).mean() > 0.75
    assert (t.duration == 0).all()  # left to the consumer
    # a CPU job stays on the CPU
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlp = convert_pytorch(DATA / "mlp_rank0.et.json.gz")[0]
    assert mlp.is_cpu_op[mlp.types == NodeType.COMP_NODE].all() and not mlp.attr_array("duration_unknown")[1].any()


def _step(trace, name: str) -> int:
    p = with_compute(preset("recorded"), name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return int(simulate_on(Workload({0: trace}), p).step_ns)


def test_a_device_preset_gives_a_host_only_gpu_trace_a_plausible_step(resnet_host_only):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ChakraError, match="no recorded durations"):  # was a silent 0 ns
            simulate_on(Workload({0: resnet_host_only}), preset("recorded"))
    h100, a100, cpu = (_step(resnet_host_only, d) for d in ("h100", "a100", "cpu"))
    # three ResNet training steps: milliseconds on a GPU, the CPU an order of magnitude slower
    assert 1e6 < h100 < a100 < 1e8 and cpu > 5 * h100


def test_devices_are_datasheet_figures_and_unknown_names_fail():
    """One table for the simulator and the roofline analysis (`schema.devices`)."""
    assert device_spec("H100").peak_flops == 989.4e12 and DEVICES["a100"].mem_bw == 2039e9
    with pytest.raises(ChakraError, match="unknown device 'tpu9'.*h100"):
        device_spec("tpu9")
    s = with_device(preset("recorded").system, "h100")
    assert s.roofline_enabled and s.peak_perf == pytest.approx(989.4) and s.local_mem_bw == pytest.approx(3350.0)
    half = with_device(preset("recorded").system, "h100", efficiency=0.5)
    assert half.peak_perf == pytest.approx(494.7) and half.local_mem_bw == pytest.approx(1675.0)
    with pytest.raises(ChakraError, match="efficiency"):
        with_device(preset("recorded").system, "h100", efficiency=1.5)


def test_cli_simulate_device(resnet_host_only, tmp_path, capsys):
    from chakra_trace.cli import main

    write_trace(resnet_host_only, tmp_path / "r.0.et")
    assert main(["simulate", str(tmp_path / "r.0.et"), "--device", "h100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recording_ns"] == _step(resnet_host_only, "h100") > 0
    # at half the roofs a step is slower, about twice (a one-rank compute step; each op rounded to a ns)
    assert main(["simulate", str(tmp_path / "r.0.et"), "--device", "h100", "--efficiency", "0.5", "--json"]) == 0
    half = json.loads(capsys.readouterr().out)["recording_ns"]
    assert out["recording_ns"] < half and half == pytest.approx(2 * out["recording_ns"], rel=1e-4)
    assert main(["simulate", str(tmp_path / "r.0.et"), "--efficiency", "0.5"]) == 2
    capsys.readouterr()
    assert main(["simulate", str(tmp_path / "r.0.et"), "--device", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown device")
    assert np.isfinite(out["recording_ns"])
