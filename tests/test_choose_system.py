"""One reading of "simulate on this system" (`simulate.presets.choose_system`): every way a user
names a system gives the same one, so `chakra simulate`, the report and the analyses agree."""

from __future__ import annotations

import pytest

from chakra_trace.errors import ChakraError
from chakra_trace.simulate.presets import choose_system, resolve


def _files(tmp_path):
    net = tmp_path / "net.yml"
    net.write_text("topology: [Ring]\nnpus_count: [4]\nbandwidth: [50]\nlatency: [500]\n")
    sys_ = tmp_path / "sys.json"
    sys_.write_text('{"all-reduce-implementation": ["ring"], "preferred-dataset-splits": 2}')
    return str(net), str(sys_)


def test_two_files_are_one_system_however_they_are_named(tmp_path):
    net, sys_ = _files(tmp_path)
    pair = choose_system(sys_, net)
    assert pair == choose_system(f"{net},{sys_}") == resolve(f"{net},{sys_}")
    assert pair.network is not None and pair.network.npus == 4


def test_a_device_costs_compute_on_the_named_system_or_on_the_recording(tmp_path):
    on_dgx = choose_system("dgx-8x8", device="h100", efficiency=0.5)
    assert on_dgx.network == resolve("dgx-8x8").network and on_dgx.system.roofline_enabled
    alone = choose_system(None, device="h100")
    assert alone.name == "recorded" and alone.system.roofline_enabled
    assert alone.system.peak_perf == pytest.approx(2 * on_dgx.system.peak_perf)


def test_what_names_no_system_is_refused_with_the_reason(tmp_path):
    net, sys_ = _files(tmp_path)
    for args, kw, why in [
        ((None,), {}, "no system"),
        (("dgx-8x8",), {"efficiency": 0.5}, "give the device too"),
        ((sys_,), {}, "give its network too"),
        (("dgx-8x8", net), {}, "not a file"),
        (("nope",), {}, "presets: ring-8"),
    ]:
        with pytest.raises(ChakraError, match=why):
            choose_system(*args, **kw)
