"""A fleet of traces in an embedded DuckDB database: jobs, ranks, ops, collectives with their
per-rank sizes, imbalance findings and breakdowns, ingested in parallel and queried in SQL
(docs/catalog.md)."""

from .catalog import Catalog
from .features import JobFeatures, extract
from .ingest import AddResult
from .queries import NAMED as QUERIES
from .schema import TABLES

__all__ = ["QUERIES", "TABLES", "AddResult", "Catalog", "JobFeatures", "extract"]
