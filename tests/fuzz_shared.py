"""Hostile inputs of the kinds people share besides traces (issue 34): sweep specs, fleet catalogs,
generator models, benchmark results, calibration profiles, replay configs and `chakra collect`
folders, generated at test time like `fuzz_corpus` (deterministic, small; bombs built by streaming).

Each payload that could act on the machine names a marker: a file `PWNED_*` it would create, or
the text `LOCAL-SECRET-*` of a local file it would read into an output. `fuzz_check` fails a run
that leaves either, that writes into the input's own folder, or that prints a raw escape byte.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
from pathlib import Path

from fuzz_corpus import HUGE_INT, XSS, Input, _pick, _put, deep_json, write_good_job

SWEEP = "sweep-spec"  # `chakra sweep run SPEC`
CATALOG = "catalog"  # `chakra catalog query|report|export|add DB`
MODEL = "model"  # `chakra generate sample MODEL`
BENCH = "bench-result"  # `chakra bench show|report|compare`
PROFILE = "profile"  # `chakra simulate --profile`
COLLECT = "collect-folder"  # a `chakra collect` folder given to every reading command
REPLAY_CONFIG = "replay-config"  # `chakra replay TRACE --config`

SECRET = "LOCAL-SECRET-5e1f"  # the content of a local file that no output may carry
MARK = "PWNED"  # files a payload would create start so
MODEL_JOB = "good"  # the job a good model is fitted on (`generate sample --like`)


def _secret(d: Path) -> Path:
    """A local file standing for ~/.ssh/id_rsa: its text must never reach an output."""
    d.mkdir(parents=True, exist_ok=True)
    return _put(d, "local_secret.txt", SECRET + "\n")


def _gzip_bomb(path: Path, head: bytes, fill: bytes) -> Path:
    """A JSON object whose last string is 256 MiB of `fill`: ~250 KB of gzip on disk."""
    if not path.exists():
        with gzip.open(path, "wb", compresslevel=9) as f:
            f.write(head)
            for _ in range(256):
                f.write(fill * (1 << 20))
            f.write(b'"}')
    return path


# --------------------------------------------------------------------------- sweep specs


def _spec(where: str | None = None, **extra) -> str:
    doc = {"workloads": {"w": {"pattern": "coll:all_reduce:1048576"}}, "axes": {"topology": ["Ring"], "npus": [4]}}
    if where is not None:
        doc["where"] = where
    doc.update(extra)
    return json.dumps(doc)  # JSON is YAML


def sweep_specs(d: Path, n: int, seed: int) -> list[Input]:
    """`where` as SQL injection (file write, ATTACH, extension install, local file reads, a query
    that never ends), YAML alias bombs, design spaces and patterns past any bound, and paths to
    files that are not the spec's to name."""
    rnd = random.Random(seed)
    d = d / "sweep_specs"
    d.mkdir(parents=True, exist_ok=True)
    sec = str(_secret(d / "local").resolve())
    mark = str((d / f"{MARK}_sweep").resolve())
    pth = f"COPY (SELECT 'import os; open(''{mark}_pth'', ''w'')' AS l) TO '{mark}.pth' (FORMAT csv, HEADER false)"
    laughs = "a0: &a0 [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
    )
    specs: list[tuple[str, str, bool]] = [  # name, text, bomb
        ("where_copy", _spec(f"true) ORDER BY 1; {pth}; SELECT __i FROM points WHERE (true"), True),
        (
            "where_attach",
            _spec(f"true); ATTACH '{mark}.duckdb' AS x; CREATE TABLE x.t AS SELECT 1; SELECT (true"),
            True,
        ),
        ("where_install", _spec("true); INSTALL shellfs FROM community; LOAD shellfs; SELECT (true"), True),
        ("where_read_text", _spec(f"(SELECT count(*) FROM read_text('{sec}') WHERE content LIKE 'LOCAL%') = 1"), True),
        ("where_glob", _spec("(SELECT count(*) FROM glob('/**')) > 0"), True),
        (
            "where_recursive",
            _spec("(WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r) > 0"),
            True,
        ),
        ("where_setting", _spec("current_setting('enable_external_access') OR true"), False),
        (
            "alias_bomb_fixed",
            laughs
            + "workloads: {w: {pattern: 'coll:all_reduce:1048576'}}\naxes: {npus: [4]}\nfixed: {bandwidth: *a8}\n",
            True,
        ),
        (
            "axes_1e12",
            _spec(
                axes={
                    "topology": ["Ring"],
                    "npus": list(range(2, 1002)),
                    "bandwidth": list(range(1, 1001)),
                    "latency": list(range(1, 1001)),
                    "speedup": list(range(1, 1001)),
                }
            ),
            True,
        ),  # fmt: skip
        ("pattern_1e9_layers", _spec(workloads={"w": {"pattern": "train:layers=1000000000:comp_us=1:size=8"}}), True),
        ("system_dev_zero", _spec(axes={"system": ["/dev/zero,/dev/zero"]}), True),
        ("system_local_file", _spec(axes={"system": [f"{sec},{sec}"]}), True),
        ("workload_outside", _spec(workloads={"w": sec}), False),
        ("deep", deep_json(), False),
        ("python_tag", "workloads: !!python/object/apply:os.system ['touch " + mark + "_tag']\n", False),
        ("huge_int", _spec(axes={"npus": [int(HUGE_INT[:4000])]}), False),
        ("xss_names", _spec(name=XSS, workloads={XSS: {"pattern": "coll:all_reduce:1048576"}}), False),
    ]
    out = []
    for name, text, bomb in _pick(specs, n, rnd):
        p = _put(d, f"{name}.yaml", text)
        out.append(Input("sweep_specs", name, p, SWEEP, bomb=bomb))
    return out


# --------------------------------------------------------------------------- fleet catalogs


def good_catalog(d: Path, job: Path) -> Path:
    from chakra_trace.catalog import Catalog

    d.mkdir(parents=True, exist_ok=True)
    p = d / "good.duckdb"
    if not p.exists():
        with Catalog(p) as cat:
            cat.add([job])
    return p


def catalogs(d: Path, n: int, seed: int) -> list[Input]:
    """A shared catalog whose tables are views over local files, recursive or huge queries, macros
    that shadow functions, wrong column types, and files that are not DuckDB at all."""
    import duckdb

    rnd = random.Random(seed)
    d = d / "catalogs"
    d.mkdir(parents=True, exist_ok=True)
    good = good_catalog(d / "base", write_good_job(d / "base" / "job"))
    sec = str(_secret(d / "local").resolve())
    con = duckdb.connect(str(good), read_only=True)
    cols = [r[0] for r in con.execute("DESCRIBE jobs").fetchall()]
    con.close()

    def view_over(expr: str) -> list[str]:
        sel = ", ".join(f"({expr}) AS {c}" if c == "name" else c for c in cols)
        return ["CREATE TABLE jobs_real AS SELECT * FROM jobs", "DROP TABLE jobs",
                f"CREATE VIEW jobs AS SELECT {sel} FROM jobs_real"]  # fmt: skip

    variants: dict[str, list[str]] = {
        "view_reads_local_file": view_over(f"SELECT content FROM read_text('{sec}')"),
        "view_lists_files": view_over(f"SELECT string_agg(file, ',') FROM glob('{Path(sec).parent}/*')"),
        "view_recursive": view_over(
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n)::VARCHAR FROM r"
        ),
        "view_memory_bomb": view_over("SELECT repeat('A', 2000000000)"),
        "macro_shadow": ["CREATE MACRO lower(x) AS 'PWNED-macro'", "CREATE MACRO coalesce(a, b) AS 'PWNED-macro'"],
        "wrong_types": ["DROP TABLE jobs", "CREATE TABLE jobs (job_id INTEGER, name BLOB)"],
        "xss_rows": ["UPDATE jobs SET name = ?"],
    }
    out = []
    made: list[tuple[str, Path, bool]] = []
    for name, sqls in variants.items():
        p = d / f"{name}.duckdb"
        if not p.exists():
            shutil.copy(good, p)
            con = duckdb.connect(str(p))
            for s in sqls:
                con.execute(s, [XSS] * s.count("?"))
            con.close()
        made.append((name, p, name in ("view_recursive", "view_memory_bomb")))
    made.append(("not_duckdb", _put(d, "not_duckdb.duckdb", b"DUCK" + bytes(4096)), False))
    made.append(("sqlite_file", _put(d, "sqlite_file.duckdb", b"SQLite format 3\x00" + bytes(4096)), False))
    made.append(("truncated", _put(d, "truncated.duckdb", good.read_bytes()[:20000]), False))
    for name, p, bomb in _pick(made, n, rnd):
        out.append(Input("catalogs", name, p, CATALOG, bomb=bomb))
    return out


# --------------------------------------------------------------------------- generator models


def good_model(d: Path, job: Path) -> Path:
    from chakra_trace.io.workload import Workload
    from chakra_trace.synthesize.generate import fit, write_model

    d.mkdir(parents=True, exist_ok=True)
    p = d / "good_model.json"
    if not p.exists():
        write_model(fit({MODEL_JOB: Workload.open(job)}), p)
    return p


def models(d: Path, n: int, seed: int) -> list[Input]:
    """Generator models that expand without bound (repeat counts, tree counts, ranks), gzip bombs,
    cycles, deep or huge values."""
    rnd = random.Random(seed)
    d = d / "models"
    d.mkdir(parents=True, exist_ok=True)
    base = json.loads(good_model(d / "base", write_good_job(d / "base" / "job")).read_text())

    def edit(f) -> dict:
        m = json.loads(json.dumps(base))
        f(m)
        return m

    def program(key, fn):
        return edit(lambda m: m["programs"][0].__setitem__(key, fn(m["programs"][0][key])))

    texts: list[tuple[str, str | bytes, bool]] = [
        ("count_1e5", json.dumps(program("count_a", lambda v: [1e5] * len(v))), True),
        ("tree_count_1e12", json.dumps(program("tree_count", lambda v: [10**12] * len(v))), True),
        ("count_nan", json.dumps(program("count_b", lambda v: [float("nan")] * len(v))), False),
        ("tree_parent_cycle", json.dumps(program("tree_parent", lambda v: list(range(1, len(v))) + [0])), True),
        ("version_huge", json.dumps(base).replace('"version": 1', '"version": ' + HUGE_INT, 1), False),
        ("deep", '{"format": "chakra-generator", "version": 1, "vocabulary": ' + deep_json() + "}", False),
        ("pickle", b"\x80\x04\x95" + f"cos\nsystem\n(S'touch {MARK}_pickle'\ntR.".encode(), False),
    ]
    out = []
    for name, text, bomb in _pick(texts, n, rnd):
        p = _put(d, f"{name}.json", text)
        out.append(Input("models", name, p, MODEL, bomb=bomb))
    gz = _gzip_bomb(d / "gzip_bomb.json.gz", b'{"format": "chakra-generator", "version": 1, "pad": "', b"A")
    out.append(Input("models", "gzip_bomb_256MB", gz, MODEL, bomb=True))
    return out


# --------------------------------------------------------------------------- benchmark results


def bench_results(d: Path, n: int, seed: int) -> list[Input]:
    """Replay/benchmark result files: payloads in the fields the reports show, wrong shapes, deep
    JSON, gzip bombs."""
    from conftest import DATA

    rnd = random.Random(seed)
    d = d / "bench_results"
    d.mkdir(parents=True, exist_ok=True)
    good = json.loads((DATA / "bench" / "mlp_threads1.json").read_text())

    def edit(f) -> str:
        m = json.loads(json.dumps(good))
        f(m)
        return json.dumps(m)

    def everywhere(m, value):
        for k, v in list(m.items()) if isinstance(m, dict) else []:
            if isinstance(v, str):
                m[k] = value
            elif isinstance(v, dict):
                everywhere(v, value)
            elif isinstance(v, list):
                m[k] = [value if isinstance(x, str) else x for x in v]
                for x in v:
                    everywhere(x, value)

    texts: list[tuple[str, str | bytes, bool]] = [
        ("xss_strings", edit(lambda m: everywhere(m, XSS)), False),
        ("ansi_strings", edit(lambda m: everywhere(m, "\x1b]0;PWNED\x07\x1b[2J\x1b[31mFAKE\x1b[0m")), False),
        ("bool_for_object", json.dumps(True), False),
        ("deep", deep_json(), False),
        ("huge_int", json.dumps({"samples": [1]}).replace("1", HUGE_INT, 1), False),
    ]
    out = []
    for name, text, bomb in _pick(texts, n, rnd):
        out.append(Input("bench_results", name, _put(d, f"{name}.json", text), BENCH, bomb=bomb))
    gz = _gzip_bomb(d / "gzip_bomb.json.gz", b'{"name": "', b" ")
    out.append(Input("bench_results", "gzip_bomb_256MB", gz, BENCH, bomb=True))
    return out


# --------------------------------------------------------------------------- calibration profiles


def profiles(d: Path, n: int, seed: int) -> list[Input]:
    """`chakra calibrate` profiles of the wrong shape, deep, huge, or not files at all."""
    rnd = random.Random(seed)
    d = d / "profiles"
    d.mkdir(parents=True, exist_ok=True)
    texts = [
        ("deep", deep_json()),
        ("huge_int", '{"format": "chakra-profile/1", "collectives": ' + HUGE_INT + "}"),
        ("wrong_shape", json.dumps({"format": "chakra-profile/1", "collectives": [True, None, "x"]})),
        ("not_json", "\x00\x01" * 100),
    ]
    return [Input("profiles", name, _put(d, f"{name}.json", t), PROFILE) for name, t in _pick(texts, n, rnd)]


# --------------------------------------------------------------------------- collect folders


def collect_folders(d: Path, n: int, seed: int) -> list[Input]:
    """`chakra collect` folders from a tarball: a `.chakra-cache` that links elsewhere, rank files
    that link out of the folder, a FIFO or a device as a rank file."""
    from conftest import DATA

    rnd = random.Random(seed)
    d = d / "collect_folders"
    d.mkdir(parents=True, exist_ok=True)
    src = DATA / "alltoall_list"
    victim = d / "victim"
    victim.mkdir(exist_ok=True)
    _put(victim, "rank0.notes.et", "precious\n")
    sec = _secret(d / "local")

    def folder(name: str) -> Path:
        f = d / name
        if f.exists():
            shutil.rmtree(f)
        shutil.copytree(src, f, ignore=shutil.ignore_patterns(".chakra-cache"))
        return f

    def first_host(f: Path) -> Path:
        return sorted(f.glob("rank0*.json*"))[0]

    out = []
    cases = ["cache_link", "rank_links_out", "rank_fifo", "rank_dev_zero", "manifest_deep"]
    for name in _pick(cases, n, rnd):
        f = folder(name)
        if name == "cache_link":
            os.symlink(os.path.relpath(victim, f), f / ".chakra-cache")
        elif name == "rank_links_out":
            h = first_host(f)
            h.unlink()
            os.symlink(sec.resolve(), h)
        elif name == "rank_fifo":
            h = first_host(f)
            h.unlink()
            os.mkfifo(h)
        elif name == "rank_dev_zero":
            h = first_host(f)
            h.unlink()
            os.symlink("/dev/zero", h)
        elif name == "manifest_deep":
            _put(f, "manifest.json", deep_json())
        out.append(Input("collect_folders", name, f, COLLECT, bomb=name == "rank_dev_zero",
                         companions={"victim": victim}))  # fmt: skip
    return out


# --------------------------------------------------------------------------- replay configs


def replay_configs(d: Path, n: int, seed: int) -> list[Input]:
    """`replay --config` files that name operators with effects (files, processes) or walk to
    callables, and values out of range."""
    rnd = random.Random(seed)
    d = d / "replay_configs"
    d.mkdir(parents=True, exist_ok=True)
    cfgs = [
        ("substitute_from_file", {"substitute": {"aten::add_": "aten::from_file", "aten::mm": "aten::from_file"}}),
        ("substitute_save", {"substitute": {"aten::add_": "aten::save"}}),
        ("substitute_walk", {"substitute": {"aten::mm": "load_library::__self__.import_module"}}),
        ("delay_huge", {"delay_us": {".*": 1e300}}),
        ("skip_not_regex", {"skip": ["(unclosed"]}),
    ]
    out = [
        Input("replay_configs", k, _put(d, f"{k}.json", json.dumps(v)), REPLAY_CONFIG) for k, v in _pick(cfgs, n, rnd)
    ]
    if n > len(cfgs):
        out.append(Input("replay_configs", "deep", _put(d, "deep.json", deep_json()), REPLAY_CONFIG))
    return out


CLASSES = {
    "sweep_specs": sweep_specs,
    "catalogs": catalogs,
    "models": models,
    "bench_results": bench_results,
    "profiles": profiles,
    "collect_folders": collect_folders,
    "replay_configs": replay_configs,
}
