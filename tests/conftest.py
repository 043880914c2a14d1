from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def resnet_path() -> Path:
    return DATA / "resnet50_ddp.0.et.gz"
