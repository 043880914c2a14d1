import csv
import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
"""What this project recorded or generated."""
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
"""Real traces of other projects, read in place and never copied into the repository (CI has
../shared beside its clone; ../shared/traces/README.md)."""

#: sample file name -> its folder in ../shared/traces (the others are in tests/data)
PUBLIC = {
    "linear_et.json.gz": "param",
    "resnet_et.json.gz": "param",
    "resnet_1gpu_et_1.0.3.json.gz": "param",
    "resnet50_ddp.0.et.gz": "chakra",
    "allgather_host_1.0.2.json.gz": "chakra",
}
#: small heads of PARAM's GPU Kineto traces (1.2 and 1.6 MB gzipped): (whole file, External id)
#: -> every ``M`` event and every event with ``ts`` <= (ts of the CPU op with that External id)
#: + 10 ms, written with ``json.dumps(indent=1)``. The head of linear holds every Kineto op with
#: External id <= 1000, so its ET <-> Kineto match is the same as with the whole file.
HEADS = {
    "linear_kineto_head.json.gz": ("linear_kineto.json.gz", 1000),
    "resnet_kineto_head.json.gz": ("resnet_kineto.json.gz", 1500),
}
HEAD_DIR = Path(__file__).resolve().parents[1] / "out" / "test-data"


def sample(name: str) -> Path:
    """A sample by file name (``kineto/...`` for Kineto traces): ours from tests/data, another
    project's from ../shared/traces; a test (or module) that needs one skips where ../shared is
    absent."""
    base = Path(name).name
    if base in HEADS:
        return _kineto_head(base)
    if base not in PUBLIC:
        return DATA / name
    path = SHARED / PUBLIC[base] / base
    if not path.is_file():
        pytest.skip(f"needs {path}: ../shared/traces beside the checkout (CI has it)", allow_module_level=True)
    return path


def _kineto_head(name: str) -> Path:
    out = HEAD_DIR / name
    if out.is_file():
        return out
    whole, external_id = HEADS[name]
    src = SHARED / "param" / whole
    if not src.is_file():
        pytest.skip(f"needs {src}: ../shared/traces beside the checkout (CI has it)", allow_module_level=True)
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = doc["traceEvents"]
    t0 = next(
        e["ts"] for e in events if e.get("cat") == "cpu_op" and (e.get("args") or {}).get("External id") == external_id
    )
    doc["traceEvents"] = [e for e in events if e.get("ph") == "M" or ("ts" in e and e["ts"] <= t0 + 10_000)]
    HEAD_DIR.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{name}.{os.getpid()}.tmp")  # (xdist workers may build it at once)
    tmp.write_bytes(gzip.compress(json.dumps(doc, indent=1).encode(), mtime=0))
    os.replace(tmp, out)
    return out


ASTRA_SHARED = Path(__file__).resolve().parents[2] / "shared" / "reference" / "astra-sim"
"""ASTRA-sim's reference cases and its network/system files (../shared/reference), read in place."""


def astra_reference(required: bool = True) -> Path:
    """One folder of ASTRA-sim's reference files (`ASTRA_SHARED`) and the differential runs this
    project recorded on the binary (tests/data/astra-sim: its CSVs, the configs and groups they
    add): links to both, in out/test-data, so each file is read where it lives. Where ../shared is
    absent a module that requires it skips; otherwise the folder holds ours alone (`astra_cases`)."""
    if required and not (ASTRA_SHARED / "cases.csv").is_file():
        pytest.skip(f"needs {ASTRA_SHARED}: ../shared beside the checkout (CI has it)", allow_module_level=True)
    out = HEAD_DIR / "astra-sim"
    files = {
        f.relative_to(base): f
        for base in (ASTRA_SHARED, DATA / "astra-sim")
        for f in sorted(base.rglob("*"))
        if f.is_file() and f.suffix in (".csv", ".json", ".jsonl", ".yml", ".yaml")
    }
    if all((out / rel).resolve() == src.resolve() for rel, src in files.items()):
        return out
    tmp = out.with_name(f".astra-sim.{os.getpid()}.tmp")  # (xdist workers may build it at once)
    for rel, src in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).symlink_to(src.resolve())
    try:
        if out.is_dir():
            shutil.rmtree(out)
        os.rename(tmp, out)
    except OSError:  # another worker's folder won the race: it holds the same links
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def astra_cases(name: str) -> list[dict]:
    """The rows of a case table of `astra_reference` (their configs are ASTRA-sim's); none where
    ../shared is absent, so the tests over them are skipped."""
    if not (ASTRA_SHARED / "cases.csv").is_file():
        return []
    with open(astra_reference() / name, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="session", autouse=True)
def _own_cache_dir(tmp_path_factory):
    """Converted copies (`io.cache`) go to a folder of this session, never the user's own cache:
    set in the environment, so commands run as subprocesses use it too."""
    import os

    before = os.environ.get("CHAKRA_TRACE_CACHE_DIR")
    os.environ["CHAKRA_TRACE_CACHE_DIR"] = str(tmp_path_factory.mktemp("chakra-trace-cache"))
    yield
    if before is None:
        os.environ.pop("CHAKRA_TRACE_CACHE_DIR", None)
    else:
        os.environ["CHAKRA_TRACE_CACHE_DIR"] = before


@pytest.fixture
def resnet_path() -> Path:
    return sample("resnet50_ddp.0.et.gz")


@pytest.fixture(scope="session")
def ddp_pair():
    """The converted 2-rank gloo DDP recording (tests/data), as a Workload."""
    import warnings

    from chakra_trace.convert.pytorch import convert_pytorch
    from chakra_trace.io.workload import Workload

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Workload(
            {
                r: convert_pytorch(
                    DATA / f"ddp_rank{r}.et.json.gz", DATA / "kineto" / f"ddp_rank{r}.kineto.json.gz", rank=r
                )[0]
                for r in (0, 1)
            }
        )


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """`chakra ARGV` in this process: (exit status, stdout, stderr); a command's own exit status
    (validate: 1 on errors) is returned, not raised."""
    from chakra_trace.cli import main

    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    out = capsys.readouterr()
    return rc, out.out, out.err
