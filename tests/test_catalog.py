"""The fleet catalog: re-adding is a no-op, the stored per-rank sizes, imbalance findings and
breakdowns equal the project's analyses of the same job, parallel ingestion equals sequential,
and the Parquet export reads back as the same rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

from browser import Browser, require_chromium  # noqa: E402
from chakra_trace import Workload  # noqa: E402
from chakra_trace.analyze.breakdown import breakdown  # noqa: E402
from chakra_trace.analyze.collectives import collective_stats, imbalance  # noqa: E402
from chakra_trace.catalog import TABLES, Catalog, queries, report  # noqa: E402
from chakra_trace.errors import ChakraError  # noqa: E402
from chakra_trace.schema.enums import NodeType  # noqa: E402
from chakra_trace.synthesize.fleet import synthetic_fleet  # noqa: E402
from conftest import run_cli  # noqa: E402

DATA = Path(__file__).parent / "data"
REAL = [DATA / "corpus" / "ddp", DATA / "corpus" / "fsdp", DATA / "alltoall_list"]


def _skewed(name: str, w: Workload, k: int) -> tuple[str, Workload]:
    """The job with one rank's k-th collective moving twice the bytes: what the daily job flags."""
    traces = dict(w.traces)
    r = max(w.ranks)
    t = traces[r].copy()
    rows = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
    size = t.comm_size.copy()
    size[rows[k % rows.size]] = size[rows[k % rows.size]] * 2 + 1
    t.comm_size = size
    traces[r] = t
    return f"{name}-skew", Workload(traces, dict(w.groups))


@pytest.fixture(scope="module")
def fleet() -> dict[str, Workload]:
    jobs = {j.name: j.workload for j in synthetic_fleet(50, seed=3)}
    skews = dict(_skewed(n, w, i) for i, (n, w) in enumerate(list(jobs.items())[:6]) if len(w) > 1)
    real = {p.name: Workload.open(p) for p in REAL}
    return {**jobs, **skews, **real}


@pytest.fixture(scope="module")
def cat(fleet) -> Catalog:
    c = Catalog()
    synthetic = [(n, w) for n, w in fleet.items() if n not in {p.name for p in REAL}]
    r = c.add(synthetic, tags={"src": "synthetic"}, date="2024-05-01")
    assert len(r.added) == len(synthetic) and not r.errors
    r = c.add(REAL, tags={"src": "corpus"}, date="2024-05-02")
    assert len(r.added) == len(REAL) and not r.errors
    return c


def _job_id(cat: Catalog, name: str) -> str:
    return cat.query("SELECT job_id FROM jobs WHERE name = ?", [name]).job_id.item()


def test_every_job_once_with_its_counts(cat, fleet):
    jobs = cat.query("SELECT * FROM jobs ORDER BY name").set_index("name")
    assert sorted(jobs.index) == sorted(fleet)
    for name, w in fleet.items():
        assert jobs.loc[name, "ranks"] == len(w)
        assert jobs.loc[name, "nodes"] == sum(len(t) for t in w.traces.values())
    # ops by name add up to the nodes; ranks rows to the job
    ops = cat.query("SELECT job_id, sum(count) AS n FROM ops GROUP BY job_id").set_index("job_id").n
    ranks = cat.query("SELECT job_id, sum(nodes) AS n FROM ranks GROUP BY job_id").set_index("job_id").n
    by_id = jobs.reset_index().set_index("job_id").nodes
    assert (ops.reindex(by_id.index) == by_id).all() and (ranks.reindex(by_id.index) == by_id).all()


def test_readding_is_a_noop(cat, fleet):
    before = {t: cat.query(f"SELECT count(*) AS n FROM {t}").n.item() for t in TABLES}
    r = cat.add([(f"renamed-{n}", w) for n, w in fleet.items()])
    assert (len(r.added), r.skipped) == (0, len(fleet)), cat.query("SELECT name FROM jobs").name.tolist()[-3:]
    # the same content from its files (another encoding path) is the same job too
    assert cat.add(REAL[:1]).skipped == 1
    assert {t: cat.query(f"SELECT count(*) AS n FROM {t}").n.item() for t in TABLES} == before


@pytest.mark.parametrize("name", ["ddp", "fsdp", "alltoall_list", "ddp-00000-skew"])
def test_per_rank_sizes_equal_collective_stats(cat, fleet, name):
    name = name if name in fleet else next(n for n in fleet if n.endswith("-skew"))
    got = cat.query(
        "SELECT pg AS group, idx AS index, type, unnest(rank_ids) AS rank, unnest(rank_bytes) AS bytes, "
        "unnest(rank_durations_us) AS duration_us, group_size FROM collectives WHERE job_id = ? "
        "ORDER BY pg, idx, rank",
        [_job_id(cat, name)],
    )
    ref = collective_stats(fleet[name]).to_pandas()
    assert len(ref) > 0
    cols = ["group", "index", "rank", "bytes", "duration_us", "group_size"]
    ref = ref.sort_values(["group", "index", "rank"])[cols + ["type"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(got[cols + ["type"]], ref, check_dtype=False)


def test_imbalance_equals_analyze(cat, fleet):
    flagged = 0
    for name, w in fleet.items():
        ref = imbalance(w)
        jid = _job_id(cat, name)
        job = cat.query("SELECT collectives, imbalanced FROM jobs WHERE job_id = ?", [jid]).iloc[0]
        assert (job.collectives, job.imbalanced) == (ref.checked, len(ref.imbalanced)), name
        got = cat.query(
            'SELECT pg AS "group", idx AS "index", type, rank, bytes, median, outlier FROM imbalance '
            "WHERE job_id = ? ORDER BY pg, idx, rank",
            [jid],
        )
        want = ref.to_pandas()
        if want.empty:
            assert got.empty, name
            continue
        flagged += 1
        want = want.sort_values(["group", "index", "rank"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want[got.columns], check_dtype=False)
    assert flagged >= 5  # the skewed jobs (and all_to_allv splits) were found


def test_fleet_imbalance_query(cat):
    df = cat.imbalance()
    assert len(df) == cat.query("SELECT sum(imbalanced) AS n FROM jobs").n.item() > 0
    skew = df[df.job.str.endswith("-skew")]
    assert len(skew) >= 5 and (skew.bytes_max > skew.bytes_min).all()
    assert all(len(o) >= 1 for o in skew.outliers)


def test_breakdowns_equal_analyze(cat, fleet):
    for p in REAL:
        got = cat.query(
            "SELECT * EXCLUDE (job_id) FROM breakdowns WHERE job_id = ? ORDER BY rank", [_job_id(cat, p.name)]
        )
        want = breakdown(fleet[p.name]).to_pandas().reset_index().round()  # (the catalog holds whole µs)
        pd.testing.assert_frame_equal(got, want[got.columns], check_dtype=False)


@pytest.mark.timeout(120)
def test_parallel_equals_sequential(fleet):
    items = [(n, w) for n, w in list(fleet.items())[:24]]
    tables = []
    for jobs in (1, 2):
        with Catalog() as c:
            r = c.add(items, jobs=jobs, batch=7)
            assert len(r.added) == len(items)
            tables.append(
                {
                    t: c.query(
                        f"SELECT * EXCLUDE (added_at) FROM {t} ORDER BY ALL"
                        if t == "jobs"
                        else f"SELECT * FROM {t} ORDER BY ALL"
                    )
                    for t in TABLES
                }
            )
    for t in TABLES:
        pd.testing.assert_frame_equal(tables[0][t], tables[1][t])


def test_export_reads_back(cat, tmp_path):
    files = cat.export(tmp_path / "fleet")
    assert [f.parent.name for f in files] == list(TABLES)
    for t in TABLES:
        # (read with a DuckDB of the test's own: the catalog's connection reads no file)
        got = (
            duckdb.connect().execute(f"SELECT * FROM read_parquet('{tmp_path}/fleet/{t}/*.parquet') ORDER BY ALL").df()
        )
        want = cat.query(f"SELECT * FROM {t} ORDER BY ALL")
        assert len(want) > 0 or t == "tags"
        pd.testing.assert_frame_equal(got, want)
    assert not list((tmp_path / "fleet").rglob("*.tmp"))


def test_report(cat, tmp_path):
    out = cat.report(tmp_path / "fleet.html")
    text = out.read_text()
    assert "Imbalanced collectives" in text and "-skew" in text and "2024-05-02" in text and "src" in text
    # a document of the one renderer: the queries' rows as they are, the verdict a warning, bars on the sizes
    blocks = {s["id"]: s["blocks"] for s in report.document(cat.con)["sections"]}
    fleet = dict(blocks["fleet"][0]["items"])
    cur = cat.con.execute(queries.FLEET)
    assert fleet == dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert fleet["imbalanced_collectives"] > 0 and blocks["fleet"][1]["warn"] is True
    imb = blocks["imbalance"][1]
    want = cat.imbalance(50)
    assert [r["bytes_gap"] for r in imb["rows"]] == want["bytes_gap"].tolist()
    assert [c["key"] for c in imb["columns"] if c.get("bar")] == ["bytes_gap"]
    assert [r["outliers"] for r in imb["rows"]] == [
        ", ".join(map(str, o)) if o is not None else None for o in want["outliers"]
    ]
    dates = blocks["by-date"][0]["rows"]
    assert [r["date"] for r in dates] == ["2024-05-01", "2024-05-02"]
    assert sum(r["jobs"] for r in dates) == fleet["jobs"]


@pytest.mark.browser
def test_report_renders_in_headless_chromium(cat, tmp_path):
    require_chromium()
    path = cat.report(tmp_path / "fleet.html")
    html = path.read_text()
    assert not re.search(r"https?:|//cdn|\bsrc\s*=|@import|(?<![A-Za-z])url\(", html, re.IGNORECASE)  # nothing fetched
    doc = report.document(cat.con)
    n_tables = sum(b["type"] == "table" for s in doc["sections"] for b in s["blocks"])
    with Browser() as b:
        page = b.open(path)
        assert page.errors == [] and page.evaluate("document.querySelectorAll('.block-error').length") == 0
        assert page.evaluate("document.querySelectorAll('table.data').length") == n_tables == 7
        assert page.evaluate("document.querySelectorAll('p.text.warn').length") == 1
        assert page.evaluate("document.querySelectorAll('.cell-bar').length") > 0
        assert "Imbalanced collectives" in page.evaluate("document.body.innerText")


def test_bad_input(tmp_path):
    with Catalog() as c:
        r = c.add([tmp_path / "missing"])
        assert not r.added and "missing" in r.errors[0][1]
        bad = tmp_path / "bad.0.et"
        bad.write_bytes(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
        (err,) = c.add([bad]).errors
        assert "bad.0.et" in err[1]
        with pytest.raises(ChakraError, match="needs a name"):
            c.add([Workload.open(REAL[0])])
        with pytest.raises(ChakraError, match="YYYY-MM-DD"):
            c.add([], date="May 1")
    (tmp_path / "not.duckdb").write_text("hello")
    with pytest.raises(ChakraError, match="not.duckdb"):
        Catalog(tmp_path / "not.duckdb")


@pytest.mark.timeout(120)
def test_cli(tmp_path, capsys):
    db = str(tmp_path / "f.duckdb")

    def run(*argv: str) -> tuple[int, str]:
        rc, out, _ = run_cli(["catalog", *argv], capsys)
        return rc, out

    rc, out = run("add", db, *map(str, REAL[:2]), "--tag", "team=a", "--date", "2024-05-03", "-j", "2", "--json")
    assert rc == 0 and json.loads(out)["added"] == 2, out
    rc, out = run("add", db, str(REAL[0]))
    assert rc == 0 and "skipped 1" in out
    rc, out = run("query", db, "SELECT name, ranks FROM jobs ORDER BY name", "--json")
    assert json.loads(out) == [{"name": "ddp", "ranks": 2}, {"name": "fsdp", "ranks": 2}]
    rc, out = run("query", db, "by-tag", "--csv")
    assert out.splitlines()[1].startswith("team,a,2,")
    assert run("report", db, "-o", str(tmp_path / "r.html"))[0] == 0
    assert run("export", db, str(tmp_path / "pq"))[0] == 0
    assert (tmp_path / "pq" / "collectives" / "collectives.parquet").exists()
    assert run("add", db, str(tmp_path / "nope"))[0] == 2
    assert run("add", db, str(REAL[0]), "--tag", "oops")[0] == 2
