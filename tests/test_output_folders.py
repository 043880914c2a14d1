"""Every writer makes the folder its output goes into (issue 32, review problem 5): the one
place is `io.et.output_folder`, which `atomic_output`, `io.outputs.file_set` and a new DuckDB
file go through; `convert astra-sim -o new/dir/job` refused a missing folder while the other
writers made it. Each command below writes into folders that do not exist yet."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from chakra_trace.io.et import atomic_output, output_folder
from chakra_trace.io.outputs import file_set
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from conftest import run_cli

DATA = Path(__file__).parent / "data"


def _job(path: Path) -> Path:
    traces = {}
    for r in range(2):
        b = TraceBuilder()
        x = b.comp("mm", 100 + r, num_ops=1e6, tensor_size=1 << 12)
        y = b.collective("ALL_REDUCE", 1 << 16, name="ar", deps=[x])
        b.comp("add", 10, deps=[y])
        traces[r] = b.build()
    Workload(traces, {}).save(path / "job")
    return path / "job"


#: (command line with JOB and OUT placeholders, what appears under OUT's folder)
WRITERS = {
    "convert astra-sim": (["convert", "astra-sim", "JOB", "-o", "OUT/job"], "job.0.et"),
    "convert text": (
        ["convert", "text", str(DATA / "text" / "dlrm_hybrid.txt"), "--npus", "4", "-o", "OUT/t"],
        "t.0.et",
    ),
    "transform": (["transform", "JOB", "--speedup", "2", "-o", "OUT/fast"], "fast.0.et"),
    "merge": (["merge", "JOB", "-o", "OUT/merged.et"], "merged.et"),
    "obfuscate": (["obfuscate", "JOB", "--level", "a", "-o", "OUT/obf"], "obf.0.et"),
    "timeline": (["timeline", "JOB", "-o", "OUT/t.json.gz"], "t.json.gz"),
    "graph": (["graph", "JOB.0.et", "-o", "OUT/g.dot"], "g.dot"),
    "generate fit": (["generate", "fit", "JOB", "-o", "OUT/gen.json"], "gen.json"),
    "simulate --timeline": (["simulate", "JOB", "--system", "ring-8", "--timeline", "OUT/sim.json"], "sim.json"),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_every_writer_makes_its_folder(name, tmp_path, capsys):
    job = _job(tmp_path)
    out = tmp_path / "new" / "dir"
    argv, made = WRITERS[name]
    argv = [a.replace("JOB", str(job)).replace("OUT", str(out)) for a in argv]
    rc, o, err = run_cli(argv, capsys)
    assert rc == 0, err
    assert (out / made).is_file(), sorted(p.name for p in out.iterdir()) if out.exists() else "no folder"


def test_split_makes_its_folder(tmp_path, capsys):
    job = _job(tmp_path)
    assert run_cli(["merge", str(job), "-o", str(tmp_path / "m.et")], capsys)[0] == 0
    rc, _, err = run_cli(["split", str(tmp_path / "m.et"), "-o", str(tmp_path / "a" / "b" / "job")], capsys)
    assert rc == 0, err
    assert (tmp_path / "a" / "b" / "job.1.et").is_file()


@pytest.mark.skipif(importlib.util.find_spec("duckdb") is None, reason="needs duckdb (the catalog's database)")
def test_catalog_makes_the_folder_of_a_new_database(tmp_path, capsys):
    job = _job(tmp_path)
    rc, _, err = run_cli(["catalog", "add", str(tmp_path / "x" / "y" / "fleet.duckdb"), str(job)], capsys)
    assert rc == 0, err
    assert (tmp_path / "x" / "y" / "fleet.duckdb").is_file()


def test_the_helpers_make_the_folder_once(tmp_path):
    """`atomic_output` and `file_set` both go through `output_folder`; a file where the folder
    should be is one OSError naming that folder."""
    with atomic_output(tmp_path / "a" / "b" / "f.txt", compress=False) as f:
        f.write(b"x")
    assert (tmp_path / "a" / "b" / "f.txt").read_bytes() == b"x"
    with file_set(tmp_path / "c" / "d" / "job") as fs:
        fs.path("job.0.et").write_bytes(b"")
    assert (tmp_path / "c" / "d" / "job.0.et").is_file()
    (tmp_path / "blocker").write_text("")
    with pytest.raises(OSError, match="cannot make the folder for out.et") as e:
        output_folder(tmp_path / "blocker" / "sub" / "out.et")
    assert "blocker" in str(e.value)
