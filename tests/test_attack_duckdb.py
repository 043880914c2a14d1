"""A shared sweep spec, results folder or catalog is data, never a capability (issue 34, review
defects 1, 4, 6 and the sweep/catalog rows of 11 and 15).

Each reproducer of the hostile-input review is built here and must end in a one-line
`ChakraError` naming the input, with nothing written, read or downloaded on the way; the
invariants behind them (every DuckDB connection locked, ``where`` one expression, catalogs of
base tables only, bounded specs, workers that end with their parent) are checked directly.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

from chakra_trace.catalog import Catalog  # noqa: E402
from chakra_trace.errors import ChakraError  # noqa: E402
from chakra_trace.sweep import expand, load_spec, run_sweep  # noqa: E402
from chakra_trace.synthesize.patterns import collective, training_step  # noqa: E402
from conftest import run_cli  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "chakra_trace"
HEAD = 'workloads:\n  w: {pattern: "coll:all_reduce:1048576"}\naxes:\n  topology: [Ring]\n  npus: [4]\n'


def _spec(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _one_line_error(rc: int, err: str, name: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: ") and "internal error" not in lines[0] and name in lines[0], err
    return lines[0]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A HOME of the test's own: DuckDB creates ~/.duckdb/extensions when it installs or fetches
    an extension, so its absence says none was tried."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


# ------------------------------------------------------------------------------- where: reproducers


def test_where_copy_file_writes_nothing(tmp_path, capsys):
    """Review `where_copy_file`: a `where` that closes the query and COPYs text to a path (a
    `.pth` in a virtualenv runs code at the next Python start)."""
    target = tmp_path / "site-packages" / "zz.pth"
    target.parent.mkdir()
    where = (
        f"true) ORDER BY 1; COPY (SELECT 'import os' AS l) TO '{target}' (FORMAT csv, HEADER false, QUOTE ''); "
        "SELECT __i FROM points WHERE (true"
    )
    spec = _spec(tmp_path, HEAD + f'where: "{where}"\n')
    rc, _, err = run_cli(["sweep", "run", str(spec), "-o", str(tmp_path / "out"), "--workers", "1"], capsys)
    line = _one_line_error(rc, err, str(spec))
    assert ": where: one expression expected" in line
    assert not target.exists() and not (tmp_path / "out").exists()


def test_where_attach_creates_no_database(tmp_path, capsys):
    """Review `where_attach`: ATTACH makes and writes another DuckDB file."""
    other = tmp_path / "other.duckdb"
    where = f"true) ORDER BY 1; ATTACH '{other}' AS x; CREATE TABLE x.t AS SELECT 1; SELECT __i FROM points WHERE (true"
    spec = _spec(tmp_path, HEAD + f'where: "{where}"\n')
    rc, _, err = run_cli(["sweep", "run", str(spec), "-o", str(tmp_path / "out"), "--workers", "1"], capsys)
    _one_line_error(rc, err, str(spec))
    assert not other.exists()


def test_where_install_tries_no_extension(tmp_path, home, capsys):
    """Review `where_install`: INSTALL shellfs FROM community (with a network, LOAD then runs
    shell commands). Nothing is installed, fetched or even looked up."""
    where = "true) ORDER BY 1; INSTALL shellfs FROM community; SELECT __i FROM points WHERE (true"
    spec = _spec(tmp_path, HEAD + f'where: "{where}"\n')
    rc, _, err = run_cli(["sweep", "run", str(spec), "-o", str(tmp_path / "out"), "--workers", "1"], capsys)
    line = _one_line_error(rc, err, str(spec))
    assert ": where: " in line and "download" not in line
    assert not (home / ".duckdb").exists()


@pytest.mark.parametrize(
    "where, why",
    [
        ("length(read_text('/etc/passwd')[1].content) > 0", "not allowed"),  # reads a file
        ("(SELECT count(*) FROM glob('/**')) > 0", "a subquery"),  # lists the file system (~1 GiB)
        ("(WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r) SELECT count(*) FROM r) > 0", "a subquery"),
        ("(SELECT count(*) FROM range(100000000) a, range(100000000) b) > 0", "a subquery"),
        ("true) ORDER BY 1; SET allow_community_extensions=true; SELECT __i FROM points WHERE (true", "';'"),
        ("true) ORDER BY (1", "one expression expected"),  # one statement, but not only a condition
        ("true) UNION ALL SELECT 1 FROM points WHERE (true", "one expression expected"),  # no __i: was IndexError
        ("len(repeat('A', 2000000000)) > 0", "function 'repeat' is not allowed"),
        ("npus > 1 --", "not a SQL expression"),
        ("count(*) OVER () > 0", "a window function"),
        ("list_transform([npus], x -> x) = [npus]", "function 'list_transform'"),
        ("main.lower(topology) = 'ring'", "function 'main.lower'"),
        ("nope > 1", "unknown column 'nope'"),
    ],
)
def test_where_is_one_expression_over_the_columns(tmp_path, where, why):
    spec = _spec(tmp_path, HEAD + "where: " + json.dumps(where) + "\n")
    t0 = time.monotonic()
    with pytest.raises(ChakraError) as e:
        expand(load_spec(spec))
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert msg.startswith(f"{spec}: where: ") and "\n" not in msg and why in msg, msg


def test_where_examples_of_the_docs_still_filter():
    spec = load_spec(
        {
            "workloads": {"t": {"pattern": "coll:all_reduce:1024"}},
            "axes": {
                "topology": ["Ring", "Switch"],
                "dims": [[8], [4, 2], [2, 2, 2]],
                "mode": ["default", "compat"],
                "tp": [1, 2],
            },
            "where": "NOT (mode = 'compat' AND topology = 'Switch') AND len(dims) >= 2 AND dims[1] * dims[2] <= 8 "
            "AND tp * 2 IN (2, 4) AND CASE WHEN tp > 1 THEN topology = 'Ring' ELSE true END AND lower(mode) LIKE '%t'",
        }
    )
    got = [(p.params["topology"], p.params["dims"], p.params["mode"], p.params["tp"]) for p in expand(spec)]
    want = [
        (t, d, m, tp)
        for t in ("Ring", "Switch")
        for d in ([8], [4, 2], [2, 2, 2])
        for m in ("default", "compat")
        for tp in (1, 2)
        if not (m == "compat" and t == "Switch") and len(d) >= 2 and d[0] * d[1] <= 8 and (tp == 1 or t == "Ring")
    ]
    assert got == want and got


def test_the_filter_runs_under_a_time_limit(monkeypatch):
    """A condition the allow-list passes but that is slow (a regex over long literals on many
    points) is stopped at the limit, as one line naming the key."""
    from chakra_trace.sweep import where

    monkeypatch.setattr(where, "SECONDS", 0.05)
    rows = [{"workload": "w", "npus": i} for i in range(100_000)]
    slow = " AND ".join(f"regexp_matches(concat(npus, '{'x' * 1000}'), '(x+x+)+y{i}')" for i in range(20))
    with pytest.raises(ChakraError, match=r"^s\.yaml: where: still running after 0\.05 s"):
        where.keep(rows, slow, "s.yaml")


def test_every_allowed_function_is_a_scalar_of_this_duckdb():
    """The allow-list names scalar functions (never a table function) that DuckDB has."""
    from chakra_trace.sweep.where import FUNCTIONS

    con = duckdb.connect()
    kinds: dict[str, set[str]] = {}
    for name, kind in con.execute("SELECT function_name, function_type FROM duckdb_functions()").fetchall():
        kinds.setdefault(name.lower(), set()).add(kind)
    rewritten = {"if"}  # (DuckDB 1.x's parser makes `if(c, a, b)` a CASE: no function of that name)
    for f in FUNCTIONS:
        assert f in kinds or f in rewritten, f
        assert kinds.get(f, {"scalar"}) <= {"scalar", "macro"}, (f, kinds[f])


# ------------------------------------------------------------------------------- DuckDB connections


def test_every_duckdb_connection_of_the_package_is_the_locked_one():
    """Only `io.database.connect` calls duckdb.connect; what it opens cannot touch files,
    extensions or its own settings."""
    calls = [p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if re.search(r"duckdb\.connect\(", p.read_text())]
    assert calls == ["io/database.py"], calls
    from chakra_trace.io.database import connect

    con = connect()
    for stmt in (
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM glob('/*')",
        "COPY (SELECT 1) TO '/tmp/never-written.csv'",
        "ATTACH '/tmp/never-attached.duckdb' AS x",
        "INSTALL shellfs FROM community",
        "LOAD sqlite",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
    ):
        with pytest.raises(duckdb.Error):
            con.execute(stmt)
    assert not os.path.exists("/tmp/never-written.csv") and not os.path.exists("/tmp/never-attached.duckdb")


# ------------------------------------------------------------------------------- catalogs


def _catalog(path: Path) -> Path:
    with Catalog(path) as cat:
        cat.add([("a", training_step(2, 2, 10, 64)), ("b", collective(4, "ALL_REDUCE", 1 << 20))])
    return path


def _doctor(path: Path, *sql: str) -> Path:
    con = duckdb.connect(str(path))
    for s in sql:
        con.execute(s)
    con.close()
    return path


def _jobs_view(expr: str) -> list[str]:
    """jobs made a view whose `name` column is ``expr`` (as the review's hostile catalogs)."""
    from chakra_trace.catalog.schema import TABLES

    cols = ", ".join(f"{expr} AS name" if c == "name" else c for c, _ in TABLES["jobs"])
    return [
        "CREATE TABLE jobs_real AS SELECT * FROM jobs",
        "DROP TABLE jobs",
        f"CREATE VIEW jobs AS SELECT {cols} FROM jobs_real",
    ]


def _every_command(db: Path, tmp_path: Path, capsys) -> list[str]:
    """The five catalog commands on ``db`` (add on a copy): their one-line errors."""
    lines = []
    for argv in (
        ["catalog", "query", str(db), "fleet"],
        ["catalog", "query", str(db), "SELECT name FROM jobs LIMIT 3", "--json"],
        ["catalog", "report", str(db), "-o", str(tmp_path / "r" / "fleet.html")],
        ["catalog", "export", str(db), str(tmp_path / "export")],
    ):
        rc, out, err = run_cli(argv, capsys)
        lines.append(_one_line_error(rc, err, str(db)))
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(db.read_bytes())
    rc, _, err = run_cli(["catalog", "add", str(copy), str(ROOT / "tests" / "data" / "corpus" / "ddp")], capsys)
    lines.append(_one_line_error(rc, err, str(copy)))
    assert not (tmp_path / "r" / "fleet.html").exists() and not list((tmp_path).rglob("*.parquet"))
    return lines


def test_catalog_view_reads_local_file(tmp_path, capsys):
    """Review `view_reads_local_file`: a shared catalog whose jobs is a view over read_text put
    a local file into the report, the export and query results."""
    secret = tmp_path / "secret.txt"
    secret.write_text("LOCAL-SECRET-7f3a\n")
    db = _doctor(_catalog(tmp_path / "c.duckdb"), *_jobs_view(f"(SELECT content FROM read_text('{secret}'))"))
    for line in _every_command(db, tmp_path, capsys):
        assert "jobs is a view" in line and "LOCAL-SECRET" not in line


def test_catalog_view_lists_files(tmp_path, capsys):
    """Review `view_lists_files`: glob() through a view lists folders into the outputs."""
    db = _doctor(
        _catalog(tmp_path / "c.duckdb"), *_jobs_view(f"(SELECT string_agg(file, ',') FROM glob('{tmp_path}/*'))")
    )
    for line in _every_command(db, tmp_path, capsys):
        assert "jobs is a view" in line


@pytest.mark.timeout(60)
def test_catalog_view_hang(tmp_path, capsys):
    """Review `view_hang`: a recursive view hung all five catalog commands."""
    hang = "(WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r) SELECT max(n)::VARCHAR FROM r)"
    db = _doctor(_catalog(tmp_path / "c.duckdb"), *_jobs_view(hang))
    t0 = time.monotonic()
    for line in _every_command(db, tmp_path, capsys):
        assert "jobs is a view" in line
    assert time.monotonic() - t0 < 30


@pytest.mark.timeout(60)
def test_catalog_view_memory_bomb(tmp_path, capsys):
    """Review `view_memory_bomb`: repeat('A', 2e9) in a view took 2 GiB (200 MB here)."""
    db = _doctor(_catalog(tmp_path / "c.duckdb"), *_jobs_view("repeat('A', 200000000)"))
    for line in _every_command(db, tmp_path, capsys):
        assert "jobs is a view" in line


def test_catalog_sqlite_file_fetches_nothing(tmp_path, home, capsys):
    """Review `sqlite_file`: a SQLite file given as a catalog made DuckDB download sqlite_scanner."""
    db = tmp_path / "shared.duckdb"
    db.write_bytes(b"SQLite format 3\x00" + bytes(4096))
    rc, _, err = run_cli(["catalog", "query", str(db), "fleet"], capsys)
    assert "a SQLite database" in _one_line_error(rc, err, str(db))
    assert not (home / ".duckdb").exists()


@pytest.mark.parametrize(
    "sql, why",
    [
        (["CREATE MACRO coalesce(a, b) AS 'PWNED-macro'"], "main.coalesce is a macro"),
        (["CREATE MACRO t() AS TABLE SELECT 1"], "main.t is a macro"),
        (["CREATE VIEW extra AS SELECT 1"], "main.extra is a view"),
        (["CREATE SCHEMA s", "CREATE VIEW s.v AS SELECT 1"], "s.v is a view"),
        (["CREATE TABLE notes (a INTEGER, b VARCHAR GENERATED ALWAYS AS (repeat('x', 9)))"], "b is computed"),
        (["CREATE TABLE notes (a INTEGER DEFAULT 5)"], "a is computed"),
        (["CREATE TABLE notes (a INTEGER CHECK (a > 0))"], "CHECK or FOREIGN KEY"),
        (["DROP TABLE jobs", "CREATE TABLE jobs (job_id INTEGER, name BLOB)"], "column job_id INTEGER where"),
        (["ALTER TABLE ranks ADD COLUMN extra INTEGER"], "table ranks: 10 columns where a chakra catalog has 9"),
        (["DROP TABLE breakdowns"], "no table breakdowns"),
    ],
)
def test_a_catalog_holds_base_tables_of_the_chakra_schema(tmp_path, sql, why):
    """Views, macros, computed columns and constraints run SQL of the file's author on every
    read; wrong types gave BinderException in report and add (review defect 11)."""
    db = _doctor(_catalog(tmp_path / "c.duckdb"), *sql)
    for read_only in (True, False) if "no table" not in why else (True,):  # (adding creates missing tables)
        with pytest.raises(ChakraError) as e:
            Catalog(db, read_only=read_only)
        assert str(e.value).startswith(f"{db}: ") and why in str(e.value), str(e.value)


def test_a_users_own_extra_table_is_kept(tmp_path):
    db = _doctor(_catalog(tmp_path / "c.duckdb"), "CREATE TABLE notes (job_id VARCHAR, note VARCHAR)")
    with Catalog(db, read_only=True) as cat:
        assert len(cat.query("SELECT * FROM jobs")) == 2


def test_catalog_query_reads_no_file(tmp_path):
    """The user's own SQL runs on the locked connection too: a catalog query cannot read files."""
    db = _catalog(tmp_path / "c.duckdb")
    with Catalog(db, read_only=True) as cat, pytest.raises(ChakraError, match=r"query failed: Permission Error"):
        cat.query("SELECT * FROM read_text('/etc/hostname')")


def test_catalog_add_of_64_bit_times_is_a_job_error(tmp_path, capsys):
    """Review defect 11: `catalog add` on a trace with u64 durations or 2^63 start times ended in
    OverflowError; now the job is reported by name and the others are added."""
    import numpy as np

    from chakra_trace.io.et import write_trace
    from chakra_trace.schema.builder import TraceBuilder

    for k, (start, dur) in enumerate(((0, (1 << 64) - 1), (1 << 63, 5))):
        b = TraceBuilder()
        b.comp("a", 10)
        t = b.build()
        t.start[:] = np.uint64(start)
        t.duration[:] = np.uint64(dur)
        write_trace(t, tmp_path / f"big{k}.0.et")
    db = tmp_path / "c.duckdb"
    good = ROOT / "tests" / "data" / "corpus" / "ddp"
    rc, out, err = run_cli(
        ["catalog", "add", str(db), str(tmp_path / "big0"), str(tmp_path / "big1"), str(good)], capsys
    )
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 2 and all("internal error" not in ln for ln in lines), err
    assert "big0" in lines[0] and "2^62" in lines[0] and "big1" in lines[1] and "2^62" in lines[1]
    assert "added 1 jobs" in out


# ------------------------------------------------------------------------------- sweep specs bounded


@pytest.mark.timeout(30)
def test_bomb_fixed_dict(tmp_path):
    """Review `bomb_fixed_dict`: 10^9 leaves through aliases in `fixed` (json.dumps of it ran > 60 s)."""
    bomb = ", ".join(
        ["a0: &a0 [" + ",".join(["1"] * 10) + "]"]
        + [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    )
    spec = _spec(tmp_path, HEAD + "fixed:\n  bandwidth: {" + bomb + "}\n")
    with pytest.raises(ChakraError, match=rf"^{re.escape(str(spec))}:\d+: .*alias"):
        load_spec(spec)


@pytest.mark.timeout(30)
def test_bomb_transforms(tmp_path):
    """Review `bomb_transforms`: an alias bomb under workloads.w.transforms (0.6-1.3 GiB at 60 s)."""
    text = 'workloads:\n  w: {pattern: "coll:all_reduce:1048576", transforms: [{speedup: 2, junk: &a0 [1,2,3,4,5,6,7,8,9,10]}]}\n'
    for i in range(1, 9):
        text += (
            f'  w{i}: {{pattern: "coll:all_reduce:1", transforms: [{{speedup: 2, junk: &a{i} ['
            + ",".join([f"*a{i - 1}"] * 10)
            + "]}]}\n"
        )
    spec = _spec(tmp_path, text + "axes:\n  workload: [w]\n  topology: [Ring]\n  npus: [4]\n")
    with pytest.raises(ChakraError, match=rf"^{re.escape(str(spec))}:\d+: .*alias"):
        load_spec(spec)


def test_a_transform_takes_only_its_options(tmp_path):
    spec = _spec(
        tmp_path,
        'workloads:\n  w: {pattern: "coll:all_reduce:1", transforms: [{speedup: 2, junk: [1]}]}\n'
        + HEAD.split("\n", 2)[2],
    )
    with pytest.raises(ChakraError, match=r": workloads\.w\.transforms\[0\]\.junk: unknown option of speedup"):
        load_spec(spec)


@pytest.mark.timeout(30)
def test_axes_of_10_to_the_12_points(tmp_path, monkeypatch):
    """Review: 1000^4 axes reached 1.8 GiB at 60 s; now refused before one point is made."""
    axes = "".join(
        f"  {k}: [{','.join(str(2 + i) for i in range(1000))}]\n" for k in ("npus", "bandwidth", "latency", "speedup")
    )
    spec = _spec(tmp_path, 'workloads:\n  w: {pattern: "coll:all_reduce:1048576"}\naxes:\n  topology: [Ring]\n' + axes)
    with pytest.raises(
        ChakraError, match=r": axes: 1 x 1000 x 1000 x 1000 x 1000 = 1,000,000,000,000 points, more than"
    ):
        expand(load_spec(spec))


def test_the_point_limit_is_the_users_to_move(tmp_path, monkeypatch, capsys):
    spec = _spec(
        tmp_path, 'workloads:\n  w: {pattern: "coll:all_reduce:1024"}\naxes:\n  topology: [Ring]\n  npus: [2, 4, 8]\n'
    )
    monkeypatch.setenv("CHAKRA_SWEEP_MAX_POINTS", "2")
    with pytest.raises(ChakraError, match=r"3 points, more than the limit of 2 \(CHAKRA_SWEEP_MAX_POINTS"):
        expand(load_spec(spec))
    assert len(expand(load_spec(spec), max_points=3)) == 3
    rc, _, err = run_cli(["sweep", "run", str(spec), "-o", str(tmp_path / "o"), "--max-points", "2"], capsys)
    assert "more than the limit of 2 (max_points" in _one_line_error(rc, err, str(spec))
    assert not (tmp_path / "o").exists()


def test_huge_pattern(tmp_path):
    """Review: `train:layers=1000000000` hung; now refused at load against the node limit."""
    spec = _spec(
        tmp_path,
        'workloads:\n  w: {pattern: "train:layers=1000000000:comp_us=100:size=4194304"}\n' + HEAD.split("\n", 2)[2],
    )
    with pytest.raises(ChakraError, match=r": workloads\.w\.pattern: .*3,000,000,000 nodes per NPU, over the limit"):
        expand(load_spec(spec))


def test_a_pattern_times_the_npus_passes_the_node_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("CHAKRA_TRACE_MAX_NODES", "1000")
    spec = {
        "workloads": {"w": {"pattern": "train:layers=100:comp_us=1:size=1"}},
        "axes": {"topology": ["Ring"], "npus": [2, 8]},
    }
    with pytest.raises(
        ChakraError, match=r"workloads\.w\.pattern: 2,400 nodes on 8 NPUs, more than the limit of 1,000"
    ):
        expand(load_spec(spec))


@pytest.mark.timeout(30)
def test_system_dev_zero(tmp_path):
    """Review `system_files_dev_zero`: `system: /dev/zero,/dev/zero` read /dev/zero to 3.7 GiB.
    Outside the spec's folder it is refused by name; allowed, it is refused as a device."""
    spec = _spec(tmp_path, HEAD.split("axes:")[0] + "axes:\n  system: ['/dev/zero,/dev/zero']\n")
    with pytest.raises(ChakraError, match=r": axes\.system\[0\]: '/dev/zero' is outside the spec's folder"):
        expand(load_spec(spec))
    with pytest.raises(ChakraError, match=r"/dev/zero: a device, not a network file"):
        expand(load_spec(spec, allow_paths=["/dev"]))


def test_spec_paths_stay_in_the_spec_folder(tmp_path):
    """A shared spec cannot name ~/.ssh/id_rsa (its bytes would reach errors and rows): its
    files resolve, links followed, inside its folder or an allowed one."""
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "id_rsa").write_text("-----BEGIN PRIVATE KEY-----\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "link").symlink_to(outside / "id_rsa")
    rest = HEAD.split("\n", 2)[2]
    for path in (str(outside / "id_rsa"), "../private/id_rsa", "link", "~/.ssh/id_rsa"):
        spec = _spec(shared, f"workloads:\n  w: {{path: '{path}'}}\n" + rest)
        with pytest.raises(ChakraError, match=r": workloads\.w\.path: .* is outside the spec's folder"):
            load_spec(spec)
    spec = _spec(shared, "workloads:\n  w: {path: '../private/id_rsa'}\n" + rest)
    assert load_spec(spec, allow_paths=[outside]).workloads["w"]["path"] == str(outside / "id_rsa")
    (shared / ".ssh").mkdir()  # a spec saved in a home folder: its hidden files are not the spec's
    (shared / ".ssh" / "id_rsa").write_text("-----BEGIN PRIVATE KEY-----\n")
    spec = _spec(shared, "workloads:\n  w: {path: .ssh/id_rsa}\n" + rest)
    with pytest.raises(ChakraError, match=r": workloads\.w\.path: .* is a hidden file or in a hidden folder"):
        load_spec(spec)
    job = ROOT / "tests" / "data" / "corpus" / "ddp"
    assert load_spec({"workloads": {"w": str(job)}, "axes": {"system": ["ring-8"]}}).workloads["w"]["path"] == str(job)


def test_a_spec_gets_no_local_text_quoted_back(tmp_path, capsys):
    """A spec naming a local text file as its network and system files beside it: refused by
    name, and the file's text is printed nowhere."""
    (tmp_path / "notes.txt").write_text("LOCAL-SECRET-5e1f\n")
    text = 'workloads:\n  w: {pattern: "coll:all_reduce:1024"}\naxes:\n  system: ["notes.txt,notes.txt"]\n'
    spec = _spec(tmp_path, text)
    rc, out, err = run_cli(["sweep", "run", str(spec), "-o", str(tmp_path / "o")], capsys)
    line = _one_line_error(rc, err, str(spec))
    assert "axes.system[0]: " in line and "not a YAML mapping" in line and "LOCAL-SECRET" not in out + err


@pytest.mark.parametrize(
    "text, key",
    [
        ("name: [1, 2]\n", "name: expected a short name"),
        ("prices: {npu_hour: .nan}\n", "prices.npu_hour.default: expected a non-negative number, got nan"),
        ("fixed: {bandwidth: [" + ",".join(["1"] * 100) + "]}\n", "fixed.bandwidth: expected a list of 1 to 64"),
        ("fixed: {latency: 2020-01-01}\n", "fixed.latency: expected a number or a name"),
    ],
)
def test_spec_values_are_checked_and_quoted_short(tmp_path, text, key):
    spec = _spec(tmp_path, HEAD + text)
    with pytest.raises(ChakraError) as e:
        load_spec(spec)
    assert str(e.value).startswith(f"{spec}: {key}") and len(str(e.value)) < 400, str(e.value)


# ------------------------------------------------------------------------------- sweep results


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A small results folder made by `run_sweep`."""
    out = tmp_path_factory.mktemp("sweep") / "res"
    spec = {"workloads": {"w": {"pattern": "coll:all_reduce:1048576"}}, "axes": {"topology": ["Ring"], "npus": [2, 4]}}
    run_sweep(spec, out, workers=1)
    return out


def test_a_shared_results_folder_is_read_as_data(results, tmp_path, capsys):
    """Review defect 11: non-Parquet and linked parts, a deep sweep.json and NaN or text rows
    ended in internal errors in query, pareto, sensitivity, scaling and report --sweep."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = results
    part = next(good.glob("part-*.parquet"))

    def variant(name, change):
        d = tmp_path / name
        d.mkdir()
        for f in good.iterdir():
            (d / f.name).write_bytes(f.read_bytes())
        change(d, d / part.name)
        return d

    def rows(col, value):
        def change(d, p):
            t = pq.read_table(p)
            t = t.set_column(t.column_names.index(col), col, pa.array([value] * t.num_rows))
            pq.write_table(t, p)

        return change

    cases = {
        "not_parquet": (lambda d, p: p.write_bytes(b"PAR1" + bytes(1000) + b"PAR1"), "not a readable Parquet part"),
        "link": (lambda d, p: (d / "part-link.parquet").symlink_to("/etc/passwd"), "a link"),
        "deep_meta": (
            lambda d, p: (d / "sweep.json").write_text('{"spec": ' + "[" * 100_000 + "]" * 100_000 + "}"),
            "nested too deeply",
        ),
        "text_rows": (rows("step_s", "fast"), "step_s holds values that are not numbers"),
        "nan_rows": (rows("step_s", float("nan")), None),
        "huge_npus": (rows("sim_npus", 2**62), None),
    }
    for name, (change, why) in cases.items():
        d = variant(name, change)
        for argv in (["sweep", "query", str(d), "SELECT count(*) FROM points"], ["sweep", "pareto", str(d)],
                     ["sweep", "sensitivity", str(d)], ["sweep", "scaling", str(d)]):  # fmt: skip
            rc, out, err = run_cli(argv, capsys)
            if why is None or (argv[1] == "query" and name in ("text_rows", "deep_meta")):
                assert rc == 0 and not err, (name, argv, err)
            else:
                assert why in _one_line_error(rc, err, str(d)), (name, argv)


def test_report_of_a_results_folder_missing_columns(results, tmp_path, capsys):
    """`report --sweep` on parts without cost_usd (or with text for energy) was a KeyError."""
    import pyarrow.parquet as pq

    from chakra_trace.io.et import write_trace

    d = tmp_path / "res"
    d.mkdir()
    for f in results.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    for p in d.glob("part-*.parquet"):
        pq.write_table(pq.read_table(p).drop(["cost_usd", "energy_j"]), p)
    job = collective(2, "ALL_REDUCE", 1024)
    for r in job.ranks:
        write_trace(job.traces[r], tmp_path / f"job.{r}.et")
    rc, out, err = run_cli(["report", str(tmp_path / "job"), "--sweep", str(d), "-o", str(tmp_path / "r.html")], capsys)
    assert rc == 0 and "internal error" not in err and (tmp_path / "r.html").exists(), err


def test_sweep_query_reads_no_file(results):
    from chakra_trace.sweep import query

    with pytest.raises(ChakraError, match=r"query failed: Permission Error"):
        query(results, "SELECT * FROM read_text('/etc/hostname')")


# ------------------------------------------------------------------------------- workers end with their parent


def _descendants(pid: int) -> list[int]:
    """Processes below ``pid`` that multiprocessing started (workers, forkserver, tracker)."""
    parent: dict[int, int] = {}
    cmd: dict[int, bytes] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parent[int(d)] = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
                cmd[int(d)] = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += [c for c in kids if b"multiprocessing" in cmd.get(c, b"")]
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_and_watch(argv: list[str], workers: int, err: Path, busy_s: float) -> None:
    """Start ``chakra ARGV``, SIGKILL it once ``workers`` worker processes run (plus ``busy_s``),
    then require every process it started to end within 15 s (at once, but a loaded machine may
    still be starting them), without a traceback."""
    seen: list[int] = []
    with open(err, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "chakra_trace.cli", *argv], stdout=subprocess.DEVNULL, stderr=f)
    try:
        deadline = time.monotonic() + 60
        while len([p for p in seen if b"resource_tracker" not in _cmd(p)]) < workers and time.monotonic() < deadline:
            time.sleep(0.1)
            seen = sorted(set(seen) | set(_descendants(proc.pid)))
        assert len(seen) >= workers, f"the workers did not start: {seen}"
        time.sleep(busy_s)
        seen = sorted(set(seen) | set(_descendants(proc.pid)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 15
        while any(_alive(w) for w in seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in seen if _alive(w)], "processes outlived their parent"
        time.sleep(0.3)
        assert "Traceback" not in err.read_text(errors="replace"), err.read_text(errors="replace")
    finally:
        proc.kill()
        for w in seen:
            if _alive(w):
                os.kill(w, signal.SIGKILL)


def _cmd(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(120)
def test_sweep_workers_end_with_a_killed_parent(tmp_path):
    """Review defect 15: after SIGKILL of `sweep run` its workers went on with their points,
    then printed BrokenPipeError tracebacks. Now they end at once, silently."""
    spec = _spec(
        tmp_path,
        'workloads:\n  w: {pattern: "train:layers=50000:comp_us=100:size=1048576"}\naxes:\n  topology: [Ring]\n  npus: [64, 63]\n',
    )
    argv = ["sweep", "run", str(spec), "-o", str(tmp_path / "o"), "--workers", "2"]
    _kill_and_watch(argv, 2, tmp_path / "stderr.txt", busy_s=2.0)  # (a point here takes tens of seconds)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(120)
def test_catalog_add_workers_end_with_a_killed_parent(tmp_path):
    """Review defect 15: after SIGKILL of `catalog add -j 2` its workers lived on for 90 s."""
    jobs = [str(ROOT / "tests" / "data" / "corpus" / "ddp")] * 400
    argv = ["catalog", "add", str(tmp_path / "c.duckdb"), *jobs, "-j", "2"]
    _kill_and_watch(argv, 2, tmp_path / "stderr.txt", busy_s=0.5)
