#!/usr/bin/env python3
"""Fleet catalog at scale: ingest a synthetic fleet (`synthesize.fleet.synthetic_fleet`, jobs of
up to 64 ranks, 2% of them with one rank's collective skewed so the imbalance query has
something to find) into a DuckDB file, then time the fleet queries on it.

The baseline measured in the same run is generating the same fleet alone: ingestion's rate is
given both with generation (what a caller holding a generator sees) and net of it. Figures:
jobs/s, database MB per job, re-adding (a no-op by content hash) and each named query's median
time over 5 runs. These machines are noisy: compare ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

from chakra_trace import Workload
from chakra_trace.catalog import QUERIES, TABLES, Catalog
from chakra_trace.catalog.queries import limited
from chakra_trace.schema.enums import NodeType
from chakra_trace.synthesize.fleet import synthetic_fleet

SKEW_EVERY = 50  # one job in 50 has an imbalanced collective


def fleet(n: int, seed: int):
    """(name, workload, tags) per job; every SKEW_EVERY-th job with its last rank's first
    collective moving twice the bytes."""
    days = [f"2024-05-{d:02d}" for d in range(1, 8)]
    for i, job in enumerate(synthetic_fleet(n, seed)):
        w = job.workload
        tags = {"family": job.family, "date": days[i % len(days)]}
        if i % SKEW_EVERY == 0 and len(w) > 1:
            traces = dict(w.traces)
            t = traces[max(w.ranks)].copy()
            rows = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
            if rows.size:
                size = t.comm_size.copy()
                size[rows[0]] = size[rows[0]] * 2
                t.comm_size = size
                traces[max(w.ranks)] = t
                w = Workload(traces, dict(w.groups))
        yield job.name, w, tags


def timed_query(cat: Catalog, sql: str, repeats: int = 5) -> tuple[float, int]:
    times, rows = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        rows = len(cat.con.execute(sql).fetchall())
        times.append(time.perf_counter() - t)
    return statistics.median(times), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--jobs-count", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-j", "--workers", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    n = args.jobs_count

    t = time.perf_counter()
    ranks = nodes = 0
    for _, w, _ in fleet(n, args.seed):
        ranks += len(w)
        nodes += sum(len(x) for x in w.traces.values())
    gen_s = time.perf_counter() - t
    print(f"generate {n:,} jobs ({ranks:,} ranks, {nodes:,} nodes): {gen_s:.1f} s, {n / gen_s:,.0f} jobs/s")

    out: dict = {"jobs": n, "ranks": ranks, "nodes": nodes, "workers": args.workers, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "fleet.duckdb")
        with Catalog(db) as cat:
            r = cat.add(fleet(n, args.seed), jobs=args.workers)
            assert len(r.added) + r.skipped == n and not r.errors
            t = time.perf_counter()
            again = cat.add(fleet(min(n, 1000), args.seed), jobs=args.workers)
            readd_s = time.perf_counter() - t
            assert not again.added
            cat.con.execute("CHECKPOINT")
            counts = {tb: cat.con.execute(f"SELECT count(*) FROM {tb}").fetchone()[0] for tb in TABLES}
            some = cat.con.execute("SELECT name FROM jobs ORDER BY name LIMIT 1 OFFSET 42").fetchone()[0]
            lookup = f"SELECT * FROM jobs WHERE name = '{some}'"
            per_rank = (
                "SELECT job_id, pg, idx, unnest(rank_ids) AS rank, unnest(rank_bytes) AS bytes FROM collectives "
                f"WHERE job_id = (SELECT job_id FROM jobs WHERE name = '{some}')"
            )
            sizes_differ = "SELECT count(*) FROM collectives WHERE bytes_min <> bytes_max"
            # the ranked queries as the report runs them (top 50)
            named = {
                **{k: limited(q, 50) for k, q in QUERIES.items()},
                "job by name": lookup,
                "one job's per-rank sizes": per_rank,
                "sizes differ (count)": sizes_differ,
            }
            queries = {}
            for name, sql in named.items():
                secs, rows = timed_query(cat, sql)
                queries[name] = {"seconds": secs, "rows": rows}
                print(f"query {name:28s} {secs * 1000:8.1f} ms  {rows:,} rows")
            t = time.perf_counter()
            cat.report(os.path.join(tmp, "fleet.html"))
            report_s = time.perf_counter() - t
            t = time.perf_counter()
            cat.export(os.path.join(tmp, "parquet"))
            export_s = time.perf_counter() - t
        mb = os.path.getsize(db) / 2**20
        pq_mb = (
            sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(tmp, "parquet")) for f in fs)
            / 2**20
        )
    net = r.seconds - gen_s
    out |= {
        "generate_s": gen_s,
        "generate_jobs_per_s": n / gen_s,
        "ingest_s": r.seconds,
        "ingest_jobs_per_s": n / r.seconds,
        "ingest_net_of_generation_jobs_per_s": n / net if net > 0 else None,
        "readd_1000_s": readd_s,
        "rows": counts,
        "db_mb": mb,
        "db_mb_per_job": mb / n,
        "parquet_mb": pq_mb,
        "report_s": report_s,
        "export_s": export_s,
        "queries": queries,
    }
    print(
        f"ingest {n:,} jobs with {args.workers} worker(s): {r.seconds:.1f} s, {n / r.seconds:,.0f} jobs/s "
        f"({out['ingest_net_of_generation_jobs_per_s'] or 0:,.0f} net of generation); re-add 1,000: {readd_s:.2f} s"
    )
    print(f"database {mb:,.1f} MB ({mb / n * 1024:,.1f} KB/job); Parquet {pq_mb:,.1f} MB; rows {counts}")
    print(f"report {report_s:.2f} s, export {export_s:.2f} s")
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
