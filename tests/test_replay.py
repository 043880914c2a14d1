"""Operator replay of PyTorch host traces: coverage on every sample trace, selection, the
config, collectives across ranks, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from chakra_trace.errors import ChakraError  # noqa: E402
from chakra_trace.replay.operators import HostReplay, ReplayConfig  # noqa: E402
from conftest import DATA, sample  # noqa: E402

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
CPU = ["mlp_rank0", "transformer_rank0", "ddp_rank0", "ddp_rank1"]


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("name", CPU)
def test_every_compute_op_of_the_cpu_traces_replays(name):
    """Must-show (coverage): 100% of the schema'd top-level ops of the CPU traces; in one
    process only the DDP collectives are left, for the multi-rank replay below."""
    r = HostReplay(DATA / f"{name}.et.json.gz")
    c = r.coverage
    missed = {k: v for k, v in c.problems().items()}
    if name.startswith("ddp"):
        assert set(missed) == {
            "failed: build: Unreplayable: a collective: replay the whole job (one process per rank) to run it"
        }
        assert all(n.startswith("c10d::") for n in next(iter(missed.values())))
    else:
        assert missed == {} and c.share == 1.0
    assert r.steps == [2, 3] and c.total > 100
    r.run_step()  # and it runs again (the timed pass)


def test_gpu_traces_replay_on_cpu():
    r = HostReplay(sample("linear_et.json.gz"))  # schema 1.0.1, recorded on cuda:0
    assert r.coverage.share == 1.0 and r.coverage.total == 320
    assert r.device == "cpu" and all("cuda" not in json.dumps(op) for op in r.plan["ops"][:50])


def test_steps_select_and_config():
    path = DATA / "mlp_rank0.et.json.gz"
    full = HostReplay(path)
    one = HostReplay(path, steps=[3])
    assert one.steps == [3] and one.coverage.total * 2 == full.coverage.total
    with pytest.raises(ChakraError, match=r"steps \[7\] are not in the trace"):
        HostReplay(path, steps=[7])
    opt = HostReplay(path, select=r"^Optimizer\.step")  # a subgraph: the optimizer's ops only
    assert 0 < opt.coverage.total < full.coverage.total
    assert {o.name for o in opt.coverage.outcomes} <= {"aten::add_", "aten::mul_", "aten::clone", "aten::detach"}
    cfg = ReplayConfig(
        skip=[r"^aten::relu$"], substitute={"aten::mm": "aten::matmul.default"}, delay_us={"aten::mul_": 5.0}
    )
    r = HostReplay(path, config=cfg)
    by = {o.name: o for o in r.coverage.outcomes}
    assert by["aten::relu"].status == "skipped"
    assert {op["kind"] for op in r.plan["ops"] if op["name"] == "aten::mul_"} == {"delay"}
    assert {op["op"] for op in r.plan["ops"] if op["name"] == "aten::mm"} == {"aten::matmul.default"}
    r.run_step()


def test_integer_inputs_stay_in_their_recorded_range():
    """Token ids feed an embedding: recreated within tensor_range, or the lookup would fail."""
    r = HostReplay(DATA / "transformer_rank0.et.json.gz")
    emb = [op for op in r.plan["ops"] if op["op"].startswith("aten::embedding")]
    assert emb and all(o.status == "replayed" for o in r.coverage.outcomes if o.name == "aten::embedding")
    ranges = [a["t"][5] for op in emb for a in op["args"] if isinstance(a, dict) and "t" in a and a["t"][5]]
    assert ranges and all(lo >= 0 and hi <= 127 for lo, hi in ranges)


def test_bad_config_is_named(tmp_path):
    p = tmp_path / "cfg.json"
    p.write_text('{"skipp": []}')
    with pytest.raises(ChakraError, match="unknown keys"):
        ReplayConfig.load(p)


@pytest.mark.timeout(300)
def test_ddp_job_replays_with_its_collectives(tmp_path):
    """Both DDP ranks in their own processes over gloo: every op, collectives included, waited
    for where the Kineto traces beside the host traces show the original did."""
    import shutil

    from chakra_trace.replay.job import replay_host

    for r in (0, 1):  # a collection folder's layout
        shutil.copy(DATA / f"ddp_rank{r}.et.json.gz", tmp_path / f"rank{r}.et.json.gz")
        shutil.copy(DATA / "kineto" / f"ddp_rank{r}.kineto.json.gz", tmp_path / f"rank{r}.kineto.json.gz")
    res = replay_host(tmp_path, budget_s=2)
    assert res.recorded_step_us > 0  # (the Kineto traces were found)
    assert all(c["waits"] == {"collectives": 8, "placed_from_kineto": 7} for c in res.coverage.values())
    assert res.world_size == 2 and res.fully_replayed
    assert all(c["share"] == 1.0 and c["total"] > 180 for c in res.coverage.values())
    assert res.step.n >= 5 and res.step.median > 0
    out = tmp_path / "r.json"
    res.save(out)
    assert json.loads(out.read_text())["fully_replayed"] is True


def test_recorded_waits_follow_the_kineto_timing():
    """The Kineto trace shows where the original waited: DDP's bucket all-reduces overlap the
    backward pass (waited for ops later), the logging all-reduce at once (the next op)."""
    from chakra_trace.io.kineto import read_kineto
    from chakra_trace.replay.waits import wait_points

    rep = HostReplay(DATA / "ddp_rank0.et.json.gz")
    names = [str(n) for n in rep.h.name_array[rep.rows]]
    waits = wait_points(rep.h, rep.rows, read_kineto(DATA / "kineto" / "ddp_rank0.kineto.json.gz"))
    colls = [i for i, n in enumerate(names) if n.startswith("c10d::")]
    assert sorted(waits) == colls[:-1]  # every one placed but the last (the end of the pass waits for it)
    assert all(j > c for c, j in waits.items())
    assert any(j == c + 1 for c, j in waits.items()) and any(j > c + 5 for c, j in waits.items())


@pytest.mark.timeout(120)
def test_replay_waits_where_the_original_did(tmp_path):
    """With a process group and the Kineto trace, the plan carries the waits: a collective's
    token in the reads of the op the original ran after it (run on 2 ranks just below)."""
    import torch.distributed as dist

    from chakra_trace.replay.launch import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        rep = HostReplay(DATA / "ddp_rank0.et.json.gz", kineto=DATA / "kineto" / "ddp_rank0.kineto.json.gz")
        ops = rep.plan["ops"]
        tokens = {f"#{k}": k for k, op in enumerate(ops) if op["kind"] == "collective"}
        assert len(tokens) == 8 and all(t in ops[k]["writes"] for t, k in tokens.items())
        waited = {t: j for j, op in enumerate(ops) for t in op["reads"] if t in tokens}
        assert len(waited) == len(tokens) - 1 and all(j > tokens[t] for t, j in waited.items())
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_one_rank_trace_of_a_two_rank_job_runs_on_two_ranks():
    """The allgather sample recorded a 2-rank NCCL group: replayed SPMD on 2 gloo ranks."""
    from chakra_trace.replay.job import recorded_world_size, replay_host

    trace = sample("allgather_host_1.0.2.json.gz")
    assert recorded_world_size(trace) == 2
    res = replay_host(trace, budget_s=1)
    assert res.world_size == 2 and res.fully_replayed


@pytest.mark.timeout(300)
def test_cli_replay_and_bench_compare(tmp_path, capsys):
    from chakra_trace.cli import main

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    trace = str(DATA / "mlp_rank0.et.json.gz")
    assert main(["replay", trace, "--budget-s", "1", "-o", str(a)]) == 0
    assert "114 of 114 replayed" in capsys.readouterr().out
    assert main(["replay", trace, "--budget-s", "1", "--steps", "2", "-o", str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["coverage"]["0"]["total"] == 57
    assert main(["bench", "compare", str(a), str(b)]) == 0
    assert "step" in capsys.readouterr().out
    # the result says how it was made, and the benchmark report shows it
    command = json.loads(a.read_text())["step"]["extra"]["command"]
    assert command == f"chakra replay {trace} --budget-s 1 -o {a}"
    md = tmp_path / "r.md"
    assert main(["bench", "report", str(a), "-o", str(md)]) == 0
    assert command in md.read_text()
    assert main(["replay", str(tmp_path / "missing.et.json")]) == 2
