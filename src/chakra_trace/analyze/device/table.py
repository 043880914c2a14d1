"""The result type every device analysis returns: named tables of rows, to pandas or JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Tables:
    """One or more tables (name -> list of row dicts, all rows of a table with the same keys),
    plus facts about them (``summary``). `to_pandas()` gives the first table as a DataFrame (or
    the one named); `to_dict()` everything, JSON-ready: ``{"summary": {...}, table: rows, ...}``."""

    tables: dict[str, list[dict]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> list[dict]:
        return self.tables[name]

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, **self.tables}

    def to_pandas(self, table: str | None = None):
        import pandas as pd

        name = table or next(iter(self.tables), None)
        if name is None:
            return pd.DataFrame()
        return pd.DataFrame(self.tables[name])
