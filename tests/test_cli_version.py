"""`chakra --version`: the versions and the C kernels' state, one line each, in either mode."""

from __future__ import annotations

import platform

import numpy as np
from google.protobuf import __version__ as protobuf_version

from chakra_trace import _native
from chakra_trace.cli import main


def _version(capsys) -> list[str]:
    assert main(["--version"]) == 0
    return capsys.readouterr().out.splitlines()


def test_version_lines(capsys):
    lines = _version(capsys)
    assert lines[0].startswith("chakra-trace ") and str(_native.HERE) in lines[0]
    assert lines[1].startswith(f"Python {platform.python_version()} ")
    assert lines[2] == f"numpy {np.__version__}"
    assert lines[3].startswith(f"protobuf {protobuf_version} (")
    kernels = lines[4:]
    assert len(kernels) == len(_native.KERNELS)
    for line, k in zip(kernels, _native.status().values()):
        state = "active" if k.active else k.reason
        assert line.startswith(f"C kernel {k.module}: {state}"), line


def test_version_says_why_kernels_are_off(capsys, monkeypatch):
    monkeypatch.setenv("CHAKRA_TRACE_PURE", "1")
    kernels = _version(capsys)[4:]
    assert [line.split(": ", 1)[1].split(" (")[0] for line in kernels] == ["disabled by CHAKRA_TRACE_PURE"] * len(
        _native.KERNELS
    )


def test_help_lists_version(capsys):
    assert main(["--help"]) == 0
    assert "--version" in capsys.readouterr().out
