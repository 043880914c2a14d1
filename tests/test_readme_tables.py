"""README's tables of measured figures are what the committed benchmark JSON gives
(benchmarks/results/, rendered by benchmarks/readme_tables.py); no benchmark runs here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "readme_tables.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_readme_matches_committed_results():
    out = _run("--check")
    assert out.returncode == 0, out.stdout + out.stderr


def test_check_finds_a_stale_table_and_the_rewrite_touches_only_marked_text(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- table:io_bench -->")
    row = readme.index("| `read_trace`, plain |", start)
    stale = readme[:row] + "| `read_trace`, plain | 9.99 | 1 |" + readme[readme.index("\n", row) :]
    stale = stale.replace("## Performance", "## Performance (edited by hand)")
    path = tmp_path / "README.md"
    path.write_text(stale, encoding="utf-8")

    out = _run("--check", "--readme", str(path))
    assert out.returncode == 1 and "9.99" in out.stdout and "readme_tables.py" in out.stderr
    assert path.read_text(encoding="utf-8") == stale  # --check writes nothing

    assert _run("--readme", str(path)).returncode == 0
    assert path.read_text(encoding="utf-8") == readme.replace("## Performance", "## Performance (edited by hand)")
