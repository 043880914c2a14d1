"""The catalog's tables: one place that names every table and column with its SQL type, so the
DuckDB DDL, the Arrow batches the writer inserts and the docs cannot drift apart.

Units: bytes, µs. Every table carries `job_id`, the job's content hash (`digest`), so tables
join on it and fleets catalogued apart merge without clashes.
"""

from __future__ import annotations

#: table -> [(column, DuckDB type)], in insertion order
TABLES: dict[str, list[tuple[str, str]]] = {
    "jobs": [
        ("job_id", "VARCHAR"),  # content hash of the decoded traces (hex)
        ("name", "VARCHAR"),
        ("source", "VARCHAR"),  # the path it was opened from, or '' for an in-memory workload
        ("date", "DATE"),
        ("added_at", "TIMESTAMP"),
        ("ranks", "INTEGER"),
        ("nodes", "BIGINT"),  # summed over ranks
        ("comp_nodes", "BIGINT"),
        ("comm_nodes", "BIGINT"),  # collectives, sends and receives, summed over ranks
        ("collectives", "BIGINT"),  # collective instances (one per group and index, across ranks)
        ("coll_bytes", "BIGINT"),  # collective bytes summed over ranks
        ("p2p_bytes", "BIGINT"),  # send + receive bytes summed over ranks
        ("imbalanced", "BIGINT"),  # collective instances whose members move different bytes
        ("span_us", "BIGINT"),  # longest rank span from the recorded times (NULL: untimed)
    ],
    "tags": [("job_id", "VARCHAR"), ("key", "VARCHAR"), ("value", "VARCHAR")],
    "ranks": [
        ("job_id", "VARCHAR"),
        ("rank", "INTEGER"),
        ("nodes", "BIGINT"),
        ("comp_nodes", "BIGINT"),
        ("comm_nodes", "BIGINT"),
        ("coll_nodes", "BIGINT"),
        ("coll_bytes", "BIGINT"),
        ("p2p_bytes", "BIGINT"),
        ("duration_us", "BIGINT"),  # sum of node durations
    ],
    "ops": [  # nodes by (name, type), summed over the job's ranks
        ("job_id", "VARCHAR"),
        ("name", "VARCHAR"),
        ("type", "VARCHAR"),  # NodeType name
        ("count", "BIGINT"),
        ("ranks", "INTEGER"),  # ranks that run it
        ("duration_us", "BIGINT"),
        ("bytes", "BIGINT"),  # comm_size where the nodes carry one
    ],
    "collectives": [  # one row per collective instance: the k-th collective of a group on every member
        ("job_id", "VARCHAR"),
        ("pg", "VARCHAR"),  # communicator group ('' = all ranks, unnamed)
        ("idx", "INTEGER"),  # k: instance within the group
        ("type", "VARCHAR"),  # CollectiveType name (the lowest member's)
        ("group_size", "INTEGER"),
        ("members", "INTEGER"),  # ranks that issued this instance
        ("bytes_min", "BIGINT"),
        ("bytes_max", "BIGINT"),
        ("bytes_median", "DOUBLE"),
        ("bytes_total", "BIGINT"),
        ("duration_max_us", "BIGINT"),
        ("imbalanced", "BOOLEAN"),  # flagged by analyze.collectives.imbalance (tolerance 0)
        ("rank_ids", "INTEGER[]"),  # the members, ascending
        ("rank_bytes", "BIGINT[]"),  # each member's comm_size, in rank_ids order
        ("rank_durations_us", "BIGINT[]"),
    ],
    "imbalance": [  # analyze.collectives.imbalance findings, one row per (instance, member)
        ("job_id", "VARCHAR"),
        ("pg", "VARCHAR"),
        ("idx", "INTEGER"),
        ("type", "VARCHAR"),
        ("rank", "INTEGER"),
        ("bytes", "BIGINT"),
        ("median", "DOUBLE"),
        ("spread", "DOUBLE"),  # max / min over members (NULL: a member moves nothing)
        ("outlier", "BOOLEAN"),
    ],
    "breakdowns": [  # analyze.breakdown per rank, for jobs with recorded times
        ("job_id", "VARCHAR"),
        ("rank", "INTEGER"),
        ("span_us", "BIGINT"),
        ("compute_us", "BIGINT"),
        ("comm_us", "BIGINT"),
        ("overlap_us", "BIGINT"),
        ("exposed_comm_us", "BIGINT"),
        ("other_us", "BIGINT"),
        ("idle_us", "BIGINT"),
        # comm = transfer + peer wait, exposed comm = exposed transfer + exposed peer wait
        # (`analyze.arrivals`; NULL in rows of a catalog made before they were added)
        ("transfer_us", "BIGINT"),
        ("peer_wait_us", "BIGINT"),
        ("exposed_transfer_us", "BIGINT"),
        ("exposed_peer_wait_us", "BIGINT"),
    ],
}

#: columns added after a table was first released: an older catalog gets them (ALTER TABLE) when
#: opened for writing
ADDED: dict[str, list[str]] = {
    "breakdowns": ["transfer_us", "peer_wait_us", "exposed_transfer_us", "exposed_peer_wait_us"],
}


def ddl() -> list[str]:
    """CREATE TABLE statements for every table (idempotent)."""
    out = []
    for name, cols in TABLES.items():
        body = ", ".join(f'"{c}" {t}' for c, t in cols)
        key = ", PRIMARY KEY (job_id)" if name == "jobs" else ""
        out.append(f"CREATE TABLE IF NOT EXISTS {name} ({body}{key})")
    for name, added in ADDED.items():
        types = dict(TABLES[name])
        out += [f'ALTER TABLE {name} ADD COLUMN IF NOT EXISTS "{c}" {types[c]}' for c in added]
    return out


def arrow_schema(table: str):
    """The Arrow schema of a table's batches (pyarrow imported here: an optional dependency)."""
    import pyarrow as pa

    scalar = {
        "VARCHAR": pa.string(),
        "DATE": pa.date32(),
        "TIMESTAMP": pa.timestamp("us"),
        "INTEGER": pa.int32(),
        "BIGINT": pa.int64(),
        "DOUBLE": pa.float64(),
        "BOOLEAN": pa.bool_(),
    }

    def arrow(t: str):
        return pa.list_(scalar[t[:-2]]) if t.endswith("[]") else scalar[t]

    return pa.schema([(c, arrow(t)) for c, t in TABLES[table]])
