#!/usr/bin/env python3
"""README.md's measured figures, generated from the benchmarks' JSON rather than copied by hand.

    python benchmarks/readme_tables.py [--results DIR] [--readme README.md] [--check]

A table sits between `<!-- table:NAME -->` and `<!-- /table:NAME -->` (each on a line of its
own, blank lines around the table), a figure quoted in a sentence between `<!-- fig:NAME -->`
and `<!-- /fig:NAME -->`. Both are rewritten from DIR/<benchmark>.json (default
benchmarks/results/; each benchmark writes its file with `--json`), and every other byte of the
README stays as it is. `--check` writes nothing and exits 1 when the README differs from what
the JSON gives: a stale table.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
README = os.path.join(os.path.dirname(HERE), "README.md")
MARKER = re.compile(r"<!-- (table|fig):([\w-]+) -->(.*?)<!-- /\1:\2 -->", re.S)
MIB = 2**20


def sig(x: float, digits: int = 2) -> str:
    """`digits` significant figures, at least two decimals: 1.64, 0.13, 0.010, 0.0023."""
    if x <= 0:
        return "0.00"
    return f"{x:.{max(2, digits - 1 - math.floor(math.log10(x)))}f}"


def table(head: list[str], align: str, rows: list[list[str]]) -> str:
    """A Markdown table; `align` has one letter per column: l(eft) or r(ight)."""
    rule = "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"
    return "\n".join([f"| {' | '.join(head)} |", rule, *(f"| {' | '.join(r)} |" for r in rows)])


# --------------------------------------------------------------------------- io_bench.json


def io_table(r: dict) -> str:
    rate = r["rates_nodes_per_s"]
    head = (
        f"step ({r['nodes']:,} nodes, {r['data_deps'] / 1e6:.1f}M data deps, "
        f"{r['file_bytes'] / MIB:,.0f} MiB plain / {r['gzip_bytes'] / MIB:,.1f} MiB gzip)"
    )
    steps = [
        ("`read_trace`, plain", "load_plain"),
        ("`read_trace`, gzip", "load_gzip"),
        ("naive load loop (plain)", "naive_load"),
        ("`write_trace`, plain", "write_plain"),
        ("`write_trace`, gzip (level 1)", "write_gzip"),
        ("naive write loop (`pb.Node` + `SerializeToString` per node)", "naive_write"),
        ("`iter_nodes` (streaming protobuf messages)", "iter_nodes"),
    ]
    rows = [[label, f"{r[k + '_s']:.2f}", f"{round(rate[k], -3):,.0f}"] for label, k in steps]
    return table([head, "seconds", "nodes/s"], "lrr", rows)


def minor(version: str) -> str:
    """ "3.11.7" -> "3.11"; "7.36.2 (upb)" -> "7.36"."""
    return ".".join(version.split()[0].split(".")[:2])


def io_env(r: dict) -> str:
    impl = r["protobuf"].split("(")[-1].rstrip(")")
    return (
        f"{r['cpus']}-core development machine (Python {minor(r['python'])}, numpy {minor(r['numpy'])}, "
        f"protobuf {minor(r['protobuf'])} {impl})"
    )


# --------------------------------------------------------------------------- convert_bench.json


def convert_table(r: dict) -> str:
    b = r["baseline_json_load"]
    head = f"{r['host_nodes']:,} host nodes ({r['json_bytes'] / MIB:,.0f} MiB of JSON) → {r['chakra_nodes']:,} Chakra nodes"
    rows = [
        ["`convert_pytorch` (read, link, convert)", r["seconds"], r["nodes_per_s"], r["peak_bytes_per_node"]],
        ["baseline: `json.load` of the two files only", b["seconds"], b["nodes_per_s"], b["peak_bytes_per_node"]],
    ]
    return table(
        [head, "seconds", "host nodes/s", "peak bytes/node"],
        "lrrr",
        [[label, f"{t:.2f}", f"{rate:,.0f}", f"{mem:,.0f}"] for label, t, rate, mem in rows],
    )


# --------------------------------------------------------------------------- host_reader_bench.json


def host_table(r: dict) -> str:
    g, steps = r["generate"], r["steps"]
    head = f"{g['nodes']:,} host nodes ({g['bytes'] / MIB:,.0f} MiB of JSON)"
    labels = {
        "read_host_trace (plain)": "`read_host_trace`, plain",
        "read_host_trace (gzip)": "`read_host_trace`, gzip (level 1)",
        "json.load (plain)": "baseline: `json.load` of the plain file",
    }  # in this order; the gzip step is left out with --no-gzip
    rows = [
        [label, f"{s['seconds']:.2f}", f"{s['nodes_per_s']:,.0f}", f"{s['peak_per_node']:,.0f}"]
        for key, label in labels.items()
        if (s := steps.get(key))
    ]
    return table([head, "seconds", "nodes/s", "peak bytes/node"], "lrrr", rows)


# --------------------------------------------------------------------------- obfuscate_bench.json


def obfuscate_table(r: dict) -> str:
    jobs: dict[str, list[dict]] = {}
    for x in r["rows"]:
        jobs.setdefault(x["job"], []).append(x)
    rows = []
    for name, xs in jobs.items():
        searched = xs[0]["searched"]
        what = ", ".join(f"{v:,} {k}s" for k, v in searched.items() if v)
        found = sum(x["found"] for x in xs)

        def changes(system: str, xs: list[dict] = xs) -> str:
            out = []
            for x in xs:
                c = [s["change"] for s in x["steps"] if s["system"] == system]
                out.append(f"{c[0]:+.2%}" if c else "-")
            return " / ".join(out)

        rows.append([name, str(xs[0]["ranks"]), what, str(found), changes("recorded"), changes("switch")])
    return table(
        [
            "job",
            "ranks",
            "searched (names, strings, shapes)",
            "found",
            "step on recorded a / b / c / d",
            "on switch a / b / c / d",
        ],
        "lrlrrr",
        rows,
    )


# --------------------------------------------------------------------------- sweep.json, catalog.json


def sweep_table(r: dict) -> str:
    rows = [
        [
            name,
            str(x["workers"]),
            f"{x['points']:,}",
            f"{x['wall_s']:.1f} s",
            f"{x['points_per_s']:.1f}",
            f"{x['steady_points_per_s']:.1f}",
            f"{x['startup_s']:.1f} s",
        ]
        for name, x in r["runs"].items()
    ]
    return table(
        ["executor", "workers", "points", "wall", "points/s", "points/s after start-up", "start-up"], "lrrrrrr", rows
    )


def suite_table(r: dict) -> str:
    systems = list(r["runs"])
    first = r["runs"][systems[0]]["workloads"]
    rows = []
    for i, w in enumerate(first):
        cells = [w["name"], w["kind"], f"{w['npus']:,}", f"{w['reference_step_s']:.4g} s"]
        for s in systems:
            x = r["runs"][s]["workloads"][i]
            cells.append(f"{x['step_s']:.4g} s ({x['speedup']:.2f}x)" if x["speedup"] else f"invalid: {x['why']}")
        rows.append(cells)
    score = ["**score** (geometric mean of speedups)", "", "", "1 (reference)"]
    score += [f"**{r['runs'][s]['score']['score']:.3f}**" for s in systems]
    wall = ["wall time, this 2-core machine", "", "", ""]
    wall += [
        f"{r['runs'][s]['wall_s']:.0f} s" + (" (captures included)" if r["runs"][s]["captured_recipes"] else "")
        for s in systems
    ]
    head = [
        "workload",
        "kind",
        "NPUs",
        "selene (reference), s per step",
        *(f"{s}: s per step (speedup)" for s in systems),
    ]
    return table(head, "llrr" + "r" * len(systems), rows + [score, wall])


def catalog_table(r: dict) -> str:
    q = r["queries"]
    rows = [
        [
            "jobs ingested (synthetic fleet)",
            f"{r['jobs']:,} jobs, {r['ranks']:,} ranks, {r['nodes'] / 1e6:.1f} M nodes",
        ],
        ["ingest, generation included", f"{r['ingest_s']:.1f} s ({r['ingest_jobs_per_s']:.0f} jobs/s)"],
        ["ingest, net of generation", f"{r['ingest_net_of_generation_jobs_per_s']:.0f} jobs/s"],
        ["re-adding 1,000 jobs (all skipped)", f"{r['readd_1000_s']:.1f} s"],
        ["database", f"{r['db_mb']:.1f} MB ({r['db_mb_per_job'] * 1024:.1f} KB per job)"],
        ["Parquet export", f"{r['parquet_mb']:.1f} MB in {r['export_s']:.1f} s"],
        ["imbalance query (fleet-wide, top 50)", f"{q['imbalance']['seconds'] * 1e3:.0f} ms"],
        [
            "slowest named query",
            "{1:.0f} ms ({0})".format(*max(((k, v["seconds"] * 1e3) for k, v in q.items()), key=lambda kv: kv[1])),
        ],
        ["HTML report", f"{r['report_s']:.2f} s"],
    ]
    return table(["measure", "result"], "lr", rows)


def predict_table(r: dict) -> str:
    rows = []
    for j in r["jobs"]:
        lo, hi = j["measured_ci_ms"]
        blo, bhi = j["band_ms"]
        proj = f" (recorded at {j['recorded_ranks']})" if j.get("recorded_ranks", j["ranks"]) != j["ranks"] else ""
        rows.append(
            [
                j["job"] + proj,
                str(j["ranks"]),
                f"{j['measured_ms']:.2f} [{lo:.2f}, {hi:.2f}]",
                f"{j['predicted_ms']:.2f} [{blo:.2f}, {bhi:.2f}]",
                f"{j['error']:+.1%}",
            ]
        )
    return table(["job", "ranks", "measured ms [95% CI]", "predicted ms [band]", "error"], "lrrrr", rows)


# --------------------------------------------------------------------------- device_bench.json


def _answers(e: dict, tool: str) -> int:
    return sum(a[tool] == "yes" for a in e["analyses"])


def device_sets(r: dict) -> str:
    rows = []
    for name, e in r["sets"].items():
        compared = [a for a in e["analyses"] if a.get("agree") is not None]
        hta_s = e.get("hta_process_s")
        rows.append(
            [
                f"{name}: {e['what']}",
                f"{_answers(e, 'hta')} / {_answers(e, 'ours')}",
                f"{sum(bool(a['agree']) for a in compared)} of {len(compared)}",
                f"{hta_s:.1f} / {e['ours_process_s']:.1f}" if hta_s else "-",
                f"{hta_s / e['ours_process_s']:.1f}x" if hta_s else "-",
                f"{e.get('hta_max_rss_mb', 0):,.0f} / {e['ours_max_rss_mb']:,.0f}",
            ]
        )
    return table(
        [
            "traces",
            "analyses answered: HTA / ours",
            "figures equal",
            "wall s: HTA / ours",
            "ratio",
            "peak MB: HTA / ours",
        ],
        "lrrrrr",
        rows,
    )


def _value(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    if isinstance(v, float):
        return f"{v:,.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def device_figures(r: dict) -> str:
    rows = []
    for name, e in r["sets"].items():
        for a in e["analyses"]:
            if "figure" not in a or (a["ours_value"] is None and a["hta_value"] is None):
                continue
            same = {True: "equal", False: "differ", None: "-"}[a["agree"]]
            rows.append([name, a["analysis"], a["figure"], _value(a["hta_value"]), _value(a["ours_value"]), same])
    return table(["traces", "analysis", "figure", "HTA 0.5", "ours", ""], "lllrrl", rows)


# --------------------------------------------------------------------------- published_bench.json


def _plan_words(x: dict) -> str:
    p = x["plan"]
    words = [f"mb {p['micro_batch']}"]
    if p.get("virtual_stages", 1) > 1:
        words.append(f"{p['virtual_stages']} chunks")
    if p.get("recompute", "none") != "none":
        words.append(p["recompute"])
    if p.get("zero"):
        words.append("dist. opt.")
    return ", ".join(words)


def published_table(r: dict) -> str:
    rows = []
    for x in r["rows"]:
        if "error" not in x:
            rows.append(
                [x["table"].removesuffix(".csv"), x["name"], "", "", "", "", "", "", "", "", "skipped: " + x["skipped"]]
            )
            continue
        t = x["compute_s"] + x["exposed_comm_s"] + x["bubble_s"] + x["other_s"]
        rows.append(
            [
                x["table"].removesuffix(".csv"),
                x["name"],
                f"{x['gpus']:,}",
                _plan_words(x),
                f"{x['published_tflops_per_gpu']:.0f}",
                f"{x['predicted_tflops_per_gpu']:.0f}",
                f"{x['error']:+.1%}",
                f"{x['step_s']:.2f}",
                f"{x['compute_s'] / t:.0%} / {x['exposed_comm_s'] / t:.0%} / {(x['bubble_s'] + x['other_s']) / t:.0%}",
                f"{x['wall_s']:.0f} s, {x['peak_rss_gb']:.1f} GB",
                x["system"],
            ]
        )
    return table(
        ["table", "row", "GPUs", "plan", "published TFLOP/s", "predicted", "error", "step s",
         "compute / exposed comm / idle", "wall, memory", "system"],
        "llrlrrrrrll",
        rows,
    )  # fmt: skip


def published_errors(r: dict) -> str:
    return (
        f"median |error| {r['median_abs_error']:.1%}, worst {r['max_abs_error']:.1%}, "
        f"{r['within_10pct']} of {r['predicted']} rows within 10%"
    )


# --------------------------------------------------------------------------- sim_bench.json


def sim_secs(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def sim_table(r: dict) -> str:
    rows = []
    for c in r["cases"]:
        _topos, _sizes, bws, lats = c["network"]
        label = c["case"]
        if len(set(bws)) > 1 or len(set(lats)) > 1:  # unlike links: the name alone does not say them
            label += f" ({'/'.join(map(str, bws))} GB/s, {'/'.join(map(str, lats))} ns)"
        equal = c["finish_equal_to_astra"]
        rows.append(
            [
                label,
                sim_secs(c["ours_seconds"]),
                sim_secs(c["astra_seconds"]) + ("" if c["astra_source"] == "measured now" else " (recorded)"),
                f"{c['ratio']:.1f}x",
                "-" if equal is None else "yes" if equal else "NO",
            ]
        )
    head = ["1,024 NPUs, end to end", "ours (s)", "ASTRA-sim (s)", "ratio", "per-NPU finish equal"]
    return table(head, "lrrrl", rows)


def sim_growth(r: dict) -> str:
    rows = []
    for g in r["growth"]:
        fast, full = g["fast"], g["full"]
        rows.append(
            [
                g["case"],
                f"{g['npus']:,}",
                sim_secs(fast["seconds"]),
                f"{fast['peak_bytes'] / MIB:.0f}",
                sim_secs(full["seconds"]) if full else "-",
                f"{full['peak_bytes'] / MIB:.0f}" if full else "-",
                ", ".join(fast["shortcuts"]) or "-",
            ]
        )
    head = ["case", "NPUs", "seconds", "peak MiB", "no shortcuts (s)", "peak MiB", "shortcuts taken"]
    return table(head, "lrrrrrl", rows)


def sim_speedups(r: dict) -> str:
    """The ratio range over the cases where ASTRA-sim takes 10 s or more (start-up dominates below)."""
    s = [c["ratio"] for c in r["cases"] if c["astra_seconds"] >= 10] or [c["ratio"] for c in r["cases"]]
    return f"{min(s):.0f}-{max(s):.0f}x"


def sim_equal(r: dict) -> str:
    checked = [c for c in r["cases"] if c["finish_equal_to_astra"] is not None]
    same = sum(c["finish_equal_to_astra"] for c in checked)
    return f"{same} of {len(checked)}"


# --------------------------------------------------------------------------- analyze_bench.json


def analysis_table(part: dict, head: str, rows: list[tuple[str, list[str]]]) -> str:
    """One row per label: the median seconds of its steps and their share of the baseline."""
    steps, base = part["steps"], part["baseline_s"]
    out = [
        [label, " / ".join(sig(steps[k]) for k in keys), " / ".join(sig(steps[k] / base) for k in keys)]
        for label, keys in rows
    ]
    return table([head, "seconds", f"x `{part['baseline']}` ({base:.2f} s)"], "lrr", out)


def analyze_recorded(r: list) -> str:
    rec = r[0]
    head = f"recorded: {rec['nodes']:,} nodes (the convert benchmark's {rec['host_nodes']:,}-node recording)"
    rows = [
        ("breakdown", ["breakdown"]),
        ("critical path of the rank", ["critical path (rank)"]),
        (f"job critical path ({rec['path_ops']:,} ops on the path)", ["job critical path"]),
        ("top ops by total and exposed time", ["top ops (total + exposed)"]),
        (f"collective statistics + imbalance ({rec['collectives']:,} collectives)", ["collective stats + imbalance"]),
        ("roofline / diff", ["roofline", "diff (trace vs itself)"]),
        ("timeline (Perfetto JSON), every event", ["timeline (all events)"]),
        ("the whole report document / its HTML", ["report document", "report HTML (render_html)"]),
    ]
    return analysis_table(rec, head, rows)


def analyze_simulated(r: list) -> str:
    sim = r[1]
    head = f"simulated: the DDP pair on `{sim['preset']}` ({sim['npus']:,} NPUs, {sim['node_runs']:,} node runs)"
    rows = [
        ("breakdown / job critical path / top ops", ["breakdown", "job critical path", "top ops (total + exposed)"]),
        ("timeline (Perfetto JSON, 60,000 longest events)", ["timeline (60,000 longest)"]),
        ("the whole report document / its HTML", ["report document", "report HTML (render_html)"]),
    ]
    return analysis_table(sim, head, rows)


# --------------------------------------------------------------------------- replay_coverage.json


def replay_table(r: dict) -> str:
    rows = [[c["trace"], f"{c['replayed']:,} of {c['total']:,}"] for c in r["cases"]]
    return table(["trace", "ops replayed"], "lr", rows)


# --------------------------------------------------------------------------- tests/data/corpus/index.json


def corpus_table(r: dict) -> str:
    """The corpus of real parallel jobs (benchmarks/corpus/regenerate.py writes the index)."""
    rows = []
    for j in r["jobs"]:
        comm = {**j["collectives"], **j["p2p"]}
        rows.append(
            [
                f"`{j['name']}`",
                str(j["ranks"]),
                j["parallelism"],
                f"{sum(j['nodes'].values()):,}",
                ", ".join(f"{k} {v}" for k, v in comm.items()) or "none",
                f"{j['step_ms']:.1f}",
                f"{j['trace_bytes'] / 1e3:,.0f}",
            ]
        )
    head = ["job", "ranks", "parallelism", "nodes (all ranks)", "collectives, send/recv", "step ms", "kB (gzip)"]
    return table(head, "lrlrlrr", rows)


def link_table(rows: list) -> str:
    """Every host/Kineto pair: how it linked and that no collective was lost (benchmarks/link_table.py)."""
    out = []
    for r in rows:
        verdict = "" if r["same_job"] else " (refused: not one job)"
        kept = f"{r['kept_collectives']}" + ("" if r["collectives_equal"] else " (DIFFERENT)")
        out.append(
            [
                r["pair"] + verdict,
                r["methods"],
                f"{r['linked_fraction']:.1%}",
                f"{r['similarity']:.1%}",
                f"{r['align_alone']:.1%}",
                f"{r['host_ops']:,}",
                f"{r['estimated']:,}",
                str(r["host_collectives"]),
                kept,
                str(r["p2p"]),
                str(r["kept_p2p"]),
            ]
        )
    head = [
        "pair",
        "method(s)",
        "linked",
        "similarity",
        "by order alone",
        "host ops",
        "estimated",
        "host collectives",
        "kept",
        "host send/recv",
        "kept",
    ]
    return table(head, "llrrrrrrrrr", out)


#: where a "benchmark" that is not in the results folder keeps its JSON
INPUTS = {"corpus": os.path.join(os.path.dirname(HERE), "tests", "data", "corpus", "index.json")}

#: marker name -> (the benchmark whose JSON it reads, what it writes there)
GENERATED = {
    "io_bench": ("io_bench", io_table),
    "io_env": ("io_bench", io_env),
    "io_load_ratio": ("io_bench", lambda r: f"{r['ratios']['load_vs_naive']:.1f}x"),
    "io_gzip_ratio": ("io_bench", lambda r: f"{r['ratios']['load_gzip_vs_naive']:.1f}x"),
    "io_write_ratio": ("io_bench", lambda r: f"{r['ratios']['write_vs_naive']:.1f}x"),
    "io_nbytes": ("io_bench", lambda r: f"{r['bytes_per_node']['nbytes']:.1f}"),
    "io_rss": ("io_bench", lambda r: f"{r['bytes_per_node']['rss_growth']:.0f}"),
    "io_peak": ("io_bench", lambda r: f"{r['bytes_per_node']['peak_during_load']:.0f}"),
    "convert_bench": ("convert_bench", convert_table),
    "corpus": ("corpus", corpus_table),
    "link_table": ("link_table", link_table),
    "host_reader_bench": ("host_reader_bench", host_table),
    "host_reader_ratio": ("host_reader_bench", lambda r: f"{r['speedup_vs_json_load']:.1f}x"),
    "sim_bench": ("sim_bench", sim_table),
    "sim_growth": ("sim_bench", sim_growth),
    "sim_speedups": ("sim_bench", sim_speedups),
    "sim_equal": ("sim_bench", sim_equal),
    "analyze_recorded": ("analyze_bench", analyze_recorded),
    "analyze_simulated": ("analyze_bench", analyze_simulated),
    "replay_coverage": ("replay_coverage", replay_table),
    "published": ("published_bench", published_table),
    "published_errors": ("published_bench", published_errors),
    "obfuscate": ("obfuscate_bench", obfuscate_table),
    "sweep": ("sweep", sweep_table),
    "sweep_kill": (
        "sweep",
        lambda r: (
            "{rows:,} rows for {distinct_points:,} distinct points, {retried} retried, {lost} lost, "
            "and the rerun found {rerun_ran} left to run".format(**r["killed_worker"])
        ),
    ),
    "catalog": ("catalog", catalog_table),
    "suite": ("suite", suite_table),
    "suite_check": (
        "suite",
        lambda r: (
            f"`suite check` re-derived every number of the {r['check']['system']} result in "
            f"{r['check']['wall_s']:.0f} s ({'OK' if r['check']['ok'] else 'FAILED'}); a copy with "
            f"{r['tampered']['edit']} failed it: {r['tampered']['problems'][0] if r['tampered']['problems'] else '-'}"
        ),
    ),
    "device_sets": ("device_bench", device_sets),
    "device_figures": ("device_bench", device_figures),
    "predict": ("predict_bench", predict_table),
    "predict_errors": (
        "predict_bench",
        lambda r: f"median |error| {r['median_abs_error']:.1%}, worst {r['max_abs_error']:.1%}",
    ),
}


def render(readme: str, results: str) -> str:
    """The README with every marked table and figure rewritten from the JSON in `results`."""
    loaded: dict[str, object] = {}

    def data(bench: str):
        if bench not in loaded:
            path = INPUTS.get(bench) or os.path.join(results, f"{bench}.json")
            if not os.path.exists(path):
                raise SystemExit(f"{path} is missing: run `python benchmarks/{bench}.py --json {path}`")
            with open(path) as f:
                loaded[bench] = json.load(f)
        return loaded[bench]

    seen = set()

    def sub(m: re.Match) -> str:
        kind, name = m.group(1), m.group(2)
        if name not in GENERATED:
            raise SystemExit(f"README marker {kind}:{name} names nothing readme_tables.py generates")
        seen.add(name)
        bench, make = GENERATED[name]
        text = make(data(bench))
        if kind == "fig":
            return f"<!-- fig:{name} -->{text}<!-- /fig:{name} -->"
        line_start = m.string.rfind("\n", 0, m.start()) + 1
        indent = m.string[line_start : m.start()]
        # blank lines around the table: GitHub reads a line right after a table as one more row
        body = "".join(f"\n{indent}{line}" if line else "\n" for line in ["", *text.splitlines(), ""])
        return f"<!-- table:{name} -->{body}\n{indent}<!-- /table:{name} -->"

    out = MARKER.sub(sub, readme)
    if missing := set(GENERATED) - seen:
        raise SystemExit(f"README has no marker for {', '.join(sorted(missing))}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=RESULTS, help="folder of the benchmarks' JSON (default benchmarks/results)")
    ap.add_argument("--readme", default=README, help="the README to rewrite (default the project's)")
    ap.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the README is not what the JSON gives"
    )
    args = ap.parse_args(argv)
    with open(args.readme, encoding="utf-8", newline="") as f:
        old = f.read()
    new = render(old, args.results)
    if args.check:
        if new == old:
            return 0
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), "README.md", "from the JSON", lineterm="")
        print("\n".join(diff))
        print(f"{args.readme} differs from {args.results}: run `python benchmarks/readme_tables.py`", file=sys.stderr)
        return 1
    if new != old:
        with open(args.readme, "w", encoding="utf-8", newline="") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
