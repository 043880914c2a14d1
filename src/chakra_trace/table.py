"""The one result type for rows: a `Table` of named columns, and `Tables`, several of them with
facts about them.

Every result that has rows produces a `Table` (`Tabular.to_table`) and gets its pandas, Markdown
and JSON forms from it, and the CLI renders any `Table` the same way, so a column is formatted,
aligned and escaped in one place. A table is columnar: a column is a numpy array (a large result
costs no dict per row) or a Python list (rows built one by one); a `Column` says how it is shown
(label, unit, format, alignment) and may hold the codes of a categorical column.

A foundation: numpy and the standard library only (pandas when `to_pandas` is called).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: What a column holds: a 1-D numpy array or a list of Python values.
Values = np.ndarray | list


@dataclass(frozen=True)
class Column:
    """How a column is shown, and how it is stored when it is categorical.

    ``label`` replaces the name in headers; ``unit`` follows it ("time (µs)"); ``format`` is a
    format spec (``",.1f"``, ``".1%"``) or a function of the value giving its text (None and NaN
    show as the table's ``missing`` text either way); ``align`` is "left" or "right" (default:
    numbers right, text left). With ``categories`` the column holds integer codes into them (a
    pandas Categorical; read back and in JSON as the categories' values)."""

    label: str | None = None
    unit: str | None = None
    format: str | Callable[[Any], str] | None = None
    align: str | None = None
    categories: Sequence[str] | None = None


_PLAIN = Column()


class Table:
    """Columns of equal length, in order, with a title and display specs (`Column`).

    ``t["name"]`` is a column (categorical ones decoded), ``t[i]`` row i as a dict, ``len(t)`` the
    row count; iterating gives the rows as dicts. `records()` is the JSON form (NaN as None),
    `to_pandas()` a DataFrame (the ``index`` columns as its index), `to_markdown()` GitHub
    Markdown. ``missing`` is the text of None and NaN in `text` and Markdown."""

    __slots__ = ("_columns", "title", "index", "spec", "missing")

    def __init__(
        self,
        columns: Mapping[str, Any],
        *,
        title: str = "",
        index: str | Sequence[str] = (),
        spec: Mapping[str, Column] | None = None,
        missing: str = "-",
    ):
        self._columns: dict[str, Values] = {
            str(k): v if isinstance(v, (np.ndarray, list)) else list(v) for k, v in columns.items()
        }
        lengths = {k: len(v) for k, v in self._columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"table columns differ in length: {lengths}")
        for k, v in self._columns.items():
            if isinstance(v, np.ndarray) and v.ndim != 1:
                raise ValueError(f"table column {k!r}: expected one dimension, got shape {v.shape}")
        self.title = title
        self.index: tuple[str, ...] = (index,) if isinstance(index, str) else tuple(index)
        self.spec: dict[str, Column] = dict(spec or {})
        unknown = [k for k in (*self.index, *self.spec) if k not in self._columns]
        if unknown:
            raise ValueError(f"table: no column {unknown[0]!r} (columns: {', '.join(self._columns)})")
        self.missing = missing

    @classmethod
    def from_records(
        cls, rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None, **kwargs: Any
    ) -> Table:
        """A table of row dicts (small results built row by row): the ``columns`` given, or every
        key in the order first seen; a row without a key has None there."""
        rows = list(rows)
        names = list(columns) if columns is not None else list(dict.fromkeys(k for r in rows for k in r))
        return cls({k: [r.get(k) for r in rows] for k in names}, **kwargs)

    @classmethod
    def from_pandas(cls, df: Any, **kwargs: Any) -> Table:
        """A DataFrame's columns (a named index becomes columns first); missing values as None."""
        if any(n is not None for n in df.index.names):
            df = df.reset_index()
        cols = {}
        for c in df.columns:
            v = df[c].to_numpy()
            if v.dtype == object or v.dtype.kind not in "biufM":  # (text, lists, nullable types)
                v = df[c].astype(object).where(df[c].notna(), None).to_numpy()
            cols[str(c)] = v
        return cls(cols, **kwargs)

    # ------------------------------------------------------------------ access
    @property
    def names(self) -> list[str]:
        return list(self._columns)

    def __len__(self) -> int:
        return len(next(iter(self._columns.values()), ()))

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, str):
            return self._decoded(key)
        n = len(self)
        i = key + n if key < 0 else key
        if not 0 <= i < n:
            raise IndexError(f"row {key} of a table of {n} rows")
        return {k: _py(v) for k, v in zip(self._columns, (self._decoded(c)[i] for c in self._columns))}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records())

    def __repr__(self) -> str:
        title = f" {self.title!r}" if self.title else ""
        return f"<Table{title}: {len(self):,} rows x {len(self._columns)} columns ({', '.join(self._columns)})>"

    def column(self, name: str) -> Column:
        """The display spec of a column (a plain one when none was given)."""
        return self.spec.get(name, _PLAIN)

    def _decoded(self, name: str) -> Values:
        v = self._columns[name]
        cats = self.column(name).categories
        if cats is None:
            return v
        return np.asarray(cats, dtype=object)[np.asarray(v, dtype=np.int64)]

    # ------------------------------------------------------------------ new tables from this one
    def _with(self, columns: dict[str, Values], **changes: Any) -> Table:
        keep = {k: s for k, s in self.spec.items() if k in columns}
        kw = {
            "title": self.title,
            "index": [i for i in self.index if i in columns],
            "spec": keep,
            "missing": self.missing,
        }
        return Table(columns, **{**kw, **changes})

    def select(self, names: Sequence[str]) -> Table:
        """These columns, in this order."""
        return self._with({k: self._columns[k] for k in names})

    def take(self, rows: slice | Sequence[int] | np.ndarray) -> Table:
        """These rows (a slice, indices or a boolean mask), in this order."""
        if isinstance(rows, slice):
            return self._with({k: v[rows] for k, v in self._columns.items()})
        idx = np.asarray(rows)
        idx = np.flatnonzero(idx) if idx.dtype == bool else idx.astype(np.int64)
        return self._with(
            {k: v[idx] if isinstance(v, np.ndarray) else [v[i] for i in idx.tolist()] for k, v in self._columns.items()}
        )

    def head(self, n: int) -> Table:
        return self.take(slice(0, max(n, 0)))

    def with_spec(self, **spec: Column) -> Table:
        """The same columns shown differently (specs given replace the column's)."""
        return self._with(dict(self._columns), spec={**self.spec, **spec})

    # ------------------------------------------------------------------ JSON
    def values(self, name: str) -> list[Any]:
        """A column as JSON-ready Python values: numpy scalars as Python's, NaN and infinities as None."""
        v = self._decoded(name)
        if isinstance(v, np.ndarray):
            if v.dtype.kind == "f":
                bad = ~np.isfinite(v)
                if bad.any():
                    out = v.astype(object)
                    out[bad] = None
                    return out.tolist()
                return v.tolist()
            if v.dtype.kind in "biuU":
                return v.tolist()
            if v.dtype.kind == "M":
                return [None if np.isnat(x) else str(x) for x in v]
        return [_py(x) for x in v]

    def records(self) -> list[dict[str, Any]]:
        """The rows as JSON-ready dicts (`values`), column order kept."""
        names = list(self._columns)
        return [dict(zip(names, row)) for row in zip(*(self.values(k) for k in names))]

    # ------------------------------------------------------------------ pandas
    def to_pandas(self):
        """A DataFrame of the columns (categorical ones as pandas Categoricals; the ``index``
        columns as its index). Needs pandas."""
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover - depends on the environment
            raise ImportError("to_pandas() needs pandas: pip install 'chakra-trace[pandas]'") from None
        data: dict[str, Any] = {}
        for k, v in self._columns.items():
            cats = self.column(k).categories
            if cats is not None and len(set(cats)) == len(cats):
                data[k] = pd.Categorical.from_codes(np.asarray(v, np.int64), categories=list(cats))
            elif isinstance(v, list) and not v:  # (no rows: no type to infer, as pandas has it for records)
                data[k] = np.empty(0, dtype=object)
            else:
                data[k] = self._decoded(k)
        df = pd.DataFrame(data)
        if self.index:
            df = df.set_index(list(self.index) if len(self.index) > 1 else self.index[0])
        return df

    # ------------------------------------------------------------------ text
    def header(self, name: str) -> str:
        """A column's header: its label (or name), then its unit in parentheses."""
        c = self.column(name)
        label = c.label if c.label is not None else name
        return f"{label} ({c.unit})" if c.unit else label

    def align(self, name: str) -> str:
        """The column's ``align``, else "right" for numbers (booleans too: shown as 1 and 0; in a
        list, its first values, None aside), "left" for anything else."""
        c = self.column(name)
        if c.align is not None:
            return c.align
        v = self._decoded(name)
        if isinstance(v, np.ndarray) and v.dtype != object:
            return "right" if v.dtype.kind in "biuf" else "left"
        return "right" if all(_number(x) for x in v[:20] if x is not None) else "left"

    def text(self, name: str) -> list[str]:
        """A column as display text: its format applied; None and NaN as ``missing``; by default
        integers with thousands separators (booleans as 1 and 0), floats with three decimals."""
        fmt = self.column(name).format
        out = []
        for x in self.values(name):
            if x is None:
                out.append(self.missing)
            elif callable(fmt):
                out.append(fmt(x))
            elif fmt is not None:
                out.append(format(x, fmt))
            elif isinstance(x, float):
                out.append(f"{x:,.3f}")
            elif isinstance(x, int):
                out.append(f"{x:,}")
            else:
                out.append(str(x))
        return out

    def to_markdown(self) -> str:
        """A GitHub Markdown table of the display text (`text`), numbers right-aligned. Cells are
        escaped: a pipe, a backslash or HTML in a name stays text, a newline becomes <br>."""
        names = list(self._columns)
        head = "| " + " | ".join(_md(self.header(k)) for k in names) + " |"
        rule = "|" + "|".join("---:" if self.align(k) == "right" else "---" for k in names) + "|"
        body = ["| " + " | ".join(_md(x) for x in row) + " |" for row in zip(*(self.text(k) for k in names))]
        return "\n".join([head, rule, *body])


def categorical(values: np.ndarray | Sequence[Any]) -> tuple[np.ndarray, list]:
    """(codes, categories) of ``values`` for a categorical column (`Column.categories`): the
    distinct values sorted, as pandas infers a Categorical's."""
    cats, codes = np.unique(np.asarray(values), return_inverse=True)
    return codes.reshape(-1).astype(np.int64), cats.tolist()


def _number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating, np.bool_))


def _py(x: Any) -> Any:
    """A value as JSON takes it: numpy scalars and arrays as Python's, NaN and infinities as
    None (in lists and dicts too), dates and times in ISO format."""
    if isinstance(x, np.generic):
        x = str(x) if isinstance(x, np.datetime64) else x.item()
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_py(v) for v in x]
    if isinstance(x, dict):
        return {k: _py(v) for k, v in x.items()}
    if isinstance(x, (dt.date, dt.time)):
        return x.isoformat()
    return x if x is None or isinstance(x, (str, int)) else str(x)  # (a Decimal, a UUID: as text)


_MD = str.maketrans({"\\": "\\\\", "|": "\\|", "&": "&amp;", "<": "&lt;", ">": "&gt;"})


def _md(text: str) -> str:
    return "<br>".join(line.translate(_MD) for line in str(text).splitlines()) if text else ""


class Tabular:
    """A result whose rows are one `Table` (`to_table`): its DataFrame and Markdown come from it."""

    def to_table(self, *args: Any, **kwargs: Any) -> Table:
        raise NotImplementedError

    def to_pandas(self, *args: Any, **kwargs: Any):
        """`to_table(...)` as a pandas DataFrame (needs pandas)."""
        return self.to_table(*args, **kwargs).to_pandas()

    def to_markdown(self, *args: Any, **kwargs: Any) -> str:
        """`to_table(...)` as a Markdown table."""
        return self.to_table(*args, **kwargs).to_markdown()


class Tables:
    """Named tables (each a `Table`, or given as a list of row dicts: what the device analyses
    return) and facts about them (``summary``). ``t["name"]`` is a table's rows as dicts; `to_pandas()` the first table as a
    DataFrame (or the one named); `to_dict()` everything, JSON-ready:
    ``{"summary": {...}, name: rows, ...}``."""

    def __init__(
        self,
        tables: Mapping[str, Table | Sequence[Mapping[str, Any]]] | None = None,
        summary: dict[str, Any] | None = None,
    ):
        self.tables: dict[str, Table] = {
            k: v if isinstance(v, Table) else Table.from_records(v) for k, v in (tables or {}).items()
        }
        self.summary: dict[str, Any] = {} if summary is None else summary

    def __getitem__(self, name: str) -> list[dict]:
        return self.tables[name].records()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tables) and self.to_dict() == other.to_dict()

    # mutable, compared by content
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Tables({', '.join(f'{k}: {len(t):,} rows' for k, t in self.tables.items())}; summary {self.summary!r})"

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, **{k: t.records() for k, t in self.tables.items()}}

    def to_pandas(self, table: str | None = None):
        name = table or next(iter(self.tables), None)
        return (self.tables[name] if name is not None else Table({})).to_pandas()


__all__ = ["Column", "Table", "Tables", "Tabular", "categorical"]
