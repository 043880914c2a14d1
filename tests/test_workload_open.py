"""`Workload.open`: the one way every command and API turns a path into a job."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from chakra_trace import TraceBuilder, Workload, write_json, write_trace
from chakra_trace.analyze import Analysis
from chakra_trace.cli import main
from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import locate
from chakra_trace.simulate import WorkloadInvalid, simulate
from chakra_trace.simulate.config import Network
from conftest import DATA


def _trace(size: int, name: str = "step"):
    b = TraceBuilder()
    c = b.comp(name, 100)
    b.collective("ALL_REDUCE", size, deps=[c])
    return b.build()


@pytest.fixture
def job(tmp_path):
    """job.0.et and job.1.et.gz in a folder of their own."""
    d = tmp_path / "runs"
    d.mkdir()
    write_trace(_trace(1024), d / "job.0.et")
    write_trace(_trace(2048), d / "job.1.et.gz")
    return d


def test_every_form_of_path_opens_the_same_job(job):
    by_prefix = Workload.open(job / "job")
    by_folder = Workload.open(job)
    assert by_prefix.ranks == by_folder.ranks == [0, 1]
    for r in (0, 1):
        assert by_prefix[r].equals(by_folder[r])
    assert by_folder.paths == {0: job / "job.0.et", 1: job / "job.1.et.gz"}
    one = Workload.open(job / "job.1.et.gz")  # a file is the rank its name gives
    assert one.ranks == [1] and one[1].equals(by_prefix[1])
    write_trace(_trace(64), job.parent / "lone.et")
    assert Workload.open(job.parent / "lone.et").ranks == [0]  # no rank in the name: rank 0


def test_chakra_json_opens_as_one_rank(tmp_path):
    t = _trace(512)
    write_json(t, tmp_path / "t.json")
    write_json(t, tmp_path / "t.jsonl.gz")
    for name in ("t.json", "t.jsonl.gz"):
        w = Workload.open(tmp_path / name)
        assert w.ranks == [0] and w[0].equals(t)


def test_ranks_reads_only_those(job):
    w = Workload.open(job / "job", ranks=[1])
    assert w.ranks == [1]
    with pytest.raises(ChakraError, match=r"no rank 5; the job has ranks \[0, 1\]"):
        Workload.open(job, ranks=[5])


def test_comm_groups_from_a_file_or_a_dict(job):
    (job.parent / "groups.json").write_text(json.dumps({"7": [1, 0]}))
    assert Workload.open(job, job.parent / "groups.json").groups == {"7": [1, 0]}
    assert Workload.open(job, {"7": [0, 1]}).group_ranks("7") == [0, 1]


def test_what_is_not_a_job_says_so(tmp_path, job):
    with pytest.raises(ChakraError, match="no such file, and no files named nothing.<rank>.et"):
        Workload.open(tmp_path / "nothing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ChakraError, match="a folder that holds no workload"):
        Workload.open(empty)
    (empty / "trace.et").write_bytes(b"")
    with pytest.raises(ChakraError, match=r"it has trace.et: name them <prefix>.<rank>.et"):
        Workload.open(empty)
    write_trace(_trace(8), job / "other.0.et")
    with pytest.raises(ChakraError, match=r"holds the traces of 2 jobs \(job, other\); give one prefix"):
        locate(job)


@pytest.fixture
def collect_folder(tmp_path):
    """The DDP pair's host and Kineto traces laid out as `chakra collect` writes them."""
    d = tmp_path / "collected"
    d.mkdir()
    for r in (0, 1):
        shutil.copy(DATA / f"ddp_rank{r}.et.json.gz", d / f"rank{r}.et.json.gz")
        shutil.copy(DATA / "kineto" / f"ddp_rank{r}.kineto.json.gz", d / f"rank{r}.kineto.json.gz")
    return d


def test_a_collect_folder_is_converted_on_open(collect_folder, ddp_pair):
    w = Workload.open(collect_folder)
    assert w.ranks == [0, 1]
    for r in (0, 1):
        assert w[r].equals(ddp_pair[r])  # what `chakra convert pytorch` writes
    assert Workload.open(collect_folder, ranks=[1]).ranks == [1]


def test_a_collect_folder_is_converted_once(collect_folder, ddp_pair, monkeypatch):
    import gzip

    from chakra_trace.convert import pytorch
    from chakra_trace.io.cache import cache_dir

    first = Workload.open(collect_folder)
    cached = {p.name.split(".")[0] for p in cache_dir().glob("rank*.et")}
    assert {"rank0", "rank1"} <= cached and not (collect_folder / ".chakra-cache").exists()  # not beside the sources

    def no_conversion(*_a, **_k):
        raise AssertionError("converted again")

    with monkeypatch.context() as m:
        m.setattr(pytorch, "convert_pytorch", no_conversion)
        again = Workload.open(collect_folder)  # from the cache
        for r in (0, 1):
            assert again[r].equals(first[r]) and again[r].equals(ddp_pair[r])
        m.setenv("CHAKRA_TRACE_CACHE", "0")
        with pytest.raises(AssertionError, match="converted again"):
            Workload.open(collect_folder)
        m.delenv("CHAKRA_TRACE_CACHE")
        src = collect_folder / "rank1.et.json.gz"
        src.write_bytes(gzip.compress(gzip.decompress(src.read_bytes()), compresslevel=1))  # other bytes: afresh
        with pytest.raises(AssertionError, match="converted again"):
            Workload.open(collect_folder)
    assert Workload.open(collect_folder)[1].equals(ddp_pair[1])
    assert sorted(p.name for p in collect_folder.iterdir()) == sorted(
        f"rank{r}.{k}.json.gz" for r in (0, 1) for k in ("et", "kineto")
    )


def test_a_cache_that_cannot_be_kept_still_opens(collect_folder, ddp_pair, monkeypatch):
    (collect_folder.parent / "file").write_text("a file where the cache folder would go")  # (even for root)
    monkeypatch.setenv("CHAKRA_TRACE_CACHE_DIR", str(collect_folder.parent / "file"))
    assert Workload.open(collect_folder, ranks=[0])[0].equals(ddp_pair[0])


def test_every_command_and_api_accepts_the_same_paths(job, collect_folder, capsys):
    net = Network.simple("Ring", 2, 100, 100)
    system = {"all-reduce-implementation": ["ring"]}
    for path in (job, job / "job"):
        a = Analysis.open(path)
        assert a.breakdown().rows[0]["rank"] == 0
        with pytest.raises(WorkloadInvalid, match="group-mismatch"):  # the ranks' sizes differ on purpose
            simulate(path, net, system)
        assert simulate(path, net, system, validate=False).finish_ns.shape == (2,)
    one = simulate(job / "job.1.et.gz", net, system)  # a lone trace of rank 1 runs on every NPU
    assert one.finish_ns.shape == (2,)
    for argv in (
        ["info", str(job)],
        ["analyze", "collectives", str(job)],
        ["analyze", "breakdown", str(collect_folder)],
        ["timeline", str(job), "-o", str(job / "t.json")],
    ):
        assert main(argv) == 0, argv
    capsys.readouterr()
    with pytest.raises(SystemExit, match="1"):  # the ranks' all-reduces differ in size: checked across ranks
        main(["validate", str(job), "--json"])
    assert json.loads(capsys.readouterr().out)["report"]["issues"][0]["code"] == "group-mismatch"
    assert main(["graph", str(job / "job"), "--rank", "1", "-o", str(job / "g.dot"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rank"] == 1
    assert main(["graph", str(job / "job"), "--rank", "3", "-o", str(job / "g.dot")]) == 2
    assert "no rank 3; the job has ranks [0, 1]" in capsys.readouterr().err


def test_a_lone_trace_of_any_rank_simulates_on_every_npu(job):
    res = simulate(job / "job.1.et.gz", Network.simple("Ring", 4, 100, 100), {"all-reduce-implementation": ["ring"]})
    assert res.finish_ns.shape == (4,) and np.all(res.finish_ns == res.finish_ns[0])
