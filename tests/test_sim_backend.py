"""The simulator's backend seam: the network models behind `backend.NetworkModel`, and the rules.

What every network model must satisfy (a new backend joins `MODELS`): it offers what the
simulator asks of it, a faster network is never slower on it, and where no two messages share
a link and each takes one hop it gives the congestion-unaware model's times to the nanosecond.
``compat`` and ``aware`` are the rules object and the model class, chosen once.
"""

from __future__ import annotations

import warnings

import pytest

from chakra_trace.errors import ChakraError
from chakra_trace.simulate import simulate
from chakra_trace.simulate.aware import Aware
from chakra_trace.simulate.backend import ContendedModel, NetworkModel
from chakra_trace.simulate.config import Network, SystemConfig
from chakra_trace.simulate.rules import ASTRA_SIM, DEFAULT
from chakra_trace.simulate.unaware import Unaware
from chakra_trace.synthesize import from_spec

MODELS = [Unaware, Aware]
RULES = [DEFAULT, ASTRA_SIM]
SPECS = ["coll:all_reduce:1048576", "coll:all_gather:1000003", "train:layers=3:comp_us=20:size=65536", "p2p:size=65536"]


def _system(algorithm: str = "ring", **kw) -> SystemConfig:
    cfg = {
        "scheduling-policy": "LIFO",
        "endpoint-delay": 10,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 4,
        "collective-optimization": "baseline",
        "local-mem-bw": 1600,
        **{f"{c}-implementation": [algorithm] for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
    }
    cfg.update(kw)
    return SystemConfig.from_dict(cfg)


def _run(spec: str, net: Network, system: SystemConfig, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate(from_spec(spec, net.npus), net, system, **kw)


@pytest.mark.parametrize("model", MODELS)
def test_a_model_offers_what_the_simulator_asks(model):
    fabric = model(Network.simple(["Ring", "Switch"], [4, 2], [50, 25], [500, 700]), DEFAULT)
    wanted = ContendedModel if model.contended else NetworkModel
    members = [n for n in [*dir(wanted), "name", "contended", "npus", "sizes"] if not n.startswith("_")]
    assert "send" in members and [n for n in members if not hasattr(fabric, n)] == []
    assert fabric.npus == 8 and fabric.sizes.tolist() == [4, 2]
    assert (fabric.link_busy is not None) == model.contended


@pytest.mark.parametrize("rules", RULES, ids=lambda r: r.name)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("spec", SPECS)
def test_a_faster_network_is_never_slower(model, rules, spec):
    for topology, algorithm in (("Ring", "ring"), ("Switch", "ring"), ("FullyConnected", "direct")):
        system = _system(algorithm)
        times = [
            _run(spec, Network.simple(topology, 8, bw, lat), system, rules=rules, network_model=model).step_ns
            for bw, lat in ((50, 500), (100, 500), (100, 50))
        ]
        assert times == sorted(times, reverse=True), (topology, times)


@pytest.mark.parametrize("rules", RULES, ids=lambda r: r.name)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("spec", SPECS)
def test_without_contention_a_model_gives_the_unaware_times(model, rules, spec):
    """Ring steps on a ring, direct ones on a fully connected network, one chunk at a time:
    every message takes one hop, on a link no other message in flight takes."""
    for topology, algorithm in (("Ring", "ring"), ("FullyConnected", "direct"), ("FullyConnected", "ring")):
        net, system = Network.simple(topology, 8, 50, 500), _system(algorithm)
        ours = _run(spec, net, system, rules=rules, network_model=model)
        unaware = _run(spec, net, system, rules=rules, network_model=Unaware)
        assert ours.finish_ns.tolist() == unaware.finish_ns.tolist(), topology
        assert ours.mode == f"{rules.name}/{model.name}"


def test_compat_and_aware_are_the_rules_and_the_model():
    net, system = Network.simple("Switch", 8, 50, 500), _system("direct")
    for compat, aware in ((False, False), (True, False), (False, True), (True, True)):
        named = _run(SPECS[0], net, system, compat=compat, aware=aware)
        given = _run(
            SPECS[0], net, system, rules=ASTRA_SIM if compat else DEFAULT, network_model=Aware if aware else Unaware
        )
        assert named.finish_ns.tolist() == given.finish_ns.tolist() and named.mode == given.mode
    with pytest.raises(ChakraError, match="compat or rules"):
        _run(SPECS[0], net, system, compat=True, rules=ASTRA_SIM)
    with pytest.raises(ChakraError, match="aware or network_model"):
        _run(SPECS[0], net, system, aware=True, network_model=Aware)
