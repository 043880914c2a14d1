"""Memory bombs (issue 13): inputs that are small on disk but would build gigabytes are refused
before they are decoded, with one line, in bounded memory -- run in a child process under an
address-space limit so a regression fails here instead of eating the machine."""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from chakra_trace import Limits
from chakra_trace.errors import TraceFormatError
from chakra_trace.io.et import iter_chunks, read_trace, write_trace
from chakra_trace.io.memory import ENV_MAX_NODES, available_bytes, node_limit
from chakra_trace.schema.builder import TraceBuilder

CAP = 1536 << 20  # address space of the child: the bombs built 1.4 GB and 4.7+ GB before


def _zeros(path, n=10 << 20):
    """A GlobalMetadata of length 0 followed by empty nodes, one byte each."""
    path.write_bytes(b"\0" * n)
    return path


def _gz_bomb(path, n=200 << 20, gap=3000):
    """Empty nodes with a sprinkle of 3-byte nodes: ~400:1, under the gzip ratio guard."""
    buf = np.zeros(n, np.uint8)
    idx = np.arange(0, n - 3, gap)
    buf[idx], buf[idx + 1], buf[idx + 2] = 2, 8, (idx // gap) % 120 + 1
    path.write_bytes(gzip.compress(buf.tobytes(), 6))
    return path


def _child(code: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """Run code with RLIMIT_AS = CAP; return the process and its peak RSS in bytes."""
    script = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({CAP}, {CAP}))
        try:
            {textwrap.indent(textwrap.dedent(code), "            ").strip()}
        finally:
            hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:")][0].split()[1]
            print("maxrss", int(hwm) * 1024, file=sys.stderr)  # ru_maxrss survives exec: not this one
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    rss = int(p.stderr.rsplit("maxrss", 1)[1].split()[0])
    return p, rss


@pytest.mark.parametrize("make", [_zeros, _gz_bomb], ids=["zeros", "gzip"])
def test_bomb_refused_in_bounded_memory(tmp_path, make):
    path = make(tmp_path / "bomb.et")
    p, rss = _child(
        f"""
        from chakra_trace.cli import main
        sys.argv = ["chakra", "info", {str(path)!r}]
        sys.exit(main())
        """
    )
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("maxrss")]
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "memory bomb" in lines[0], lines
    assert str(path) in lines[0] and "Traceback" not in p.stderr
    assert rss < 400 << 20, rss


def test_bomb_refused_by_library(tmp_path):
    path = _zeros(tmp_path / "z.et", 2 << 20)  # 2M empty nodes ~ 320 MB estimate > 64 x 2 MB
    with pytest.raises(TraceFormatError, match="max_build_ratio"):
        read_trace(path)
    with pytest.raises(TraceFormatError, match="max_build_ratio"):
        list(iter_chunks(path))
    t = read_trace(path, limits=Limits(max_build_ratio=1e9))  # overridable
    assert len(t) == (2 << 20) - 1


def _small_trace(tmp_path, n=50):
    b = TraceBuilder()
    prev = None
    for i in range(n):
        prev = b.comp(f"op{i}", duration=1, deps=[prev] if prev is not None else [])
    path = tmp_path / "t.et"
    write_trace(b.build(), path)
    return path


def test_node_limit_from_limits_and_env(tmp_path, monkeypatch):
    path = _small_trace(tmp_path)
    assert len(read_trace(path)) == 50
    with pytest.raises(TraceFormatError, match=r"more than 10 nodes.*Limits.max_nodes"):
        read_trace(path, limits=Limits(max_nodes=10))
    monkeypatch.setenv(ENV_MAX_NODES, "20")
    assert node_limit(None) == (20, ENV_MAX_NODES)
    with pytest.raises(TraceFormatError, match=f"more than 20 nodes.*{ENV_MAX_NODES}"):
        read_trace(path)
    assert len(read_trace(path, limits=Limits(max_nodes=100))) == 50  # Limits wins over the environment
    assert len(list(iter_chunks(path))) == 1  # streaming holds one chunk: no total bound
    monkeypatch.setenv(ENV_MAX_NODES, "lots")
    with pytest.raises(Exception, match=ENV_MAX_NODES):
        read_trace(path)


def test_default_node_limit_follows_memory():
    limit, source = node_limit(None) if ENV_MAX_NODES not in os.environ else (None, "")
    if limit is not None:
        assert "memory available" in source
        assert limit * 160 <= available_bytes() // 2 + 160
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    p, _ = _child(
        """
        from chakra_trace.io.memory import node_limit
        print(node_limit(None)[0])
        """,
        env={k: v for k, v in os.environ.items() if k != ENV_MAX_NODES},
    )
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) * 160 <= CAP // 2  # the address-space limit bounds it
