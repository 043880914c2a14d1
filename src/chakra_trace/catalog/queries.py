"""The catalog's named queries: the fleet-wide imbalance query Meta's daily analysis runs, and
the views the report shows. Plain SQL over the tables in `schema`, so the same text runs in
DuckDB here and, against the Parquet export, in Spark or Trino."""

from __future__ import annotations

#: Collective instances whose members moved different bytes (or, for all_to_allv, uneven
#: splits), fleet-wide, largest gap first, with the ranks that stood out.
IMBALANCE = """
SELECT j.name AS job, c.job_id, c.pg, c.idx, c.type, c.members, c.bytes_min, c.bytes_max,
       c.bytes_median, c.bytes_max - c.bytes_min AS bytes_gap,
       CASE WHEN c.bytes_min > 0 THEN c.bytes_max / c.bytes_min END AS spread,
       o.outliers
FROM collectives c
JOIN jobs j USING (job_id)
LEFT JOIN (
    SELECT job_id, pg, idx, list(rank ORDER BY rank) AS outliers
    FROM imbalance WHERE outlier GROUP BY ALL
) o USING (job_id, pg, idx)
WHERE c.imbalanced
ORDER BY bytes_gap DESC, job, c.pg, c.idx
"""

#: Ranks that stand out most often, per job.
OUTLIER_RANKS = """
SELECT j.name AS job, i.job_id, i.rank, count(*) AS times, sum(i.bytes - i.median) AS excess_bytes
FROM imbalance i JOIN jobs j USING (job_id)
WHERE i.outlier
GROUP BY ALL ORDER BY times DESC, job, i.rank
"""

#: The fleet in numbers.
FLEET = """
SELECT count(*) AS jobs, sum(ranks) AS ranks, sum(nodes) AS nodes, sum(collectives) AS collectives,
       sum(coll_bytes) AS coll_bytes, sum(imbalanced) AS imbalanced_collectives,
       count(*) FILTER (WHERE imbalanced > 0) AS imbalanced_jobs
FROM jobs
"""

#: Collective types by bytes moved (summed over members), fleet-wide.
TOP_TYPES = """
SELECT type, count(*) AS instances, sum(bytes_total) AS bytes, avg(members) AS avg_members,
       count(*) FILTER (WHERE imbalanced) AS imbalanced
FROM collectives GROUP BY type ORDER BY bytes DESC
"""

#: The largest collective instances.
TOP_COLLECTIVES = """
SELECT j.name AS job, c.pg, c.idx, c.type, c.members, c.bytes_total, c.bytes_max
FROM collectives c JOIN jobs j USING (job_id)
ORDER BY c.bytes_total DESC, job, c.pg, c.idx
"""

#: Jobs, bytes and imbalance per day.
BY_DATE = """
SELECT date, count(*) AS jobs, sum(coll_bytes) AS coll_bytes, sum(imbalanced) AS imbalanced_collectives,
       count(*) FILTER (WHERE imbalanced > 0) AS imbalanced_jobs
FROM jobs GROUP BY date ORDER BY date NULLS LAST
"""

#: The same per tag (key=value).
BY_TAG = """
SELECT t.key, t.value, count(*) AS jobs, sum(j.coll_bytes) AS coll_bytes,
       sum(j.imbalanced) AS imbalanced_collectives, count(*) FILTER (WHERE j.imbalanced > 0) AS imbalanced_jobs
FROM tags t JOIN jobs j USING (job_id)
GROUP BY ALL ORDER BY t.key, jobs DESC, t.value
"""

#: Ops taking the most time fleet-wide.
TOP_OPS = """
SELECT name, type, sum(count) AS count, sum(duration_us) AS duration_us, count(DISTINCT job_id) AS jobs
FROM ops GROUP BY ALL ORDER BY duration_us DESC, name
"""

NAMED = {
    "imbalance": IMBALANCE,
    "outlier-ranks": OUTLIER_RANKS,
    "fleet": FLEET,
    "top-types": TOP_TYPES,
    "top-collectives": TOP_COLLECTIVES,
    "by-date": BY_DATE,
    "by-tag": BY_TAG,
    "top-ops": TOP_OPS,
}


def limited(sql: str, limit: int | None) -> str:
    return sql if limit is None else f"SELECT * FROM ({sql}) LIMIT {int(limit)}"
