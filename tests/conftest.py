from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


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
    return DATA / "resnet50_ddp.0.et.gz"


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
