"""A spec's ``where``: one SQL expression over the points' columns, and nothing else.

A spec may come from someone else, so its ``where`` is checked before it runs: DuckDB's own
parser (``json_serialize_sql``, which parses and never executes) must read
``SELECT __i FROM points WHERE (<where>)`` as exactly one statement that differs from
``... WHERE (true)`` only in its condition, and that condition may hold only column names of
the points, literals, operators, CASE, casts and the scalar functions in `FUNCTIONS`. No
subquery, table function (``read_text``, ``glob``, ``range``), window, lambda or second
statement gets through. The text that was checked is the text that runs, on a locked
connection (`io.database`) holding only the points table, under a time and memory limit.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ChakraError
from ..io.database import connect, first_line, is_interrupt, time_limit
from ..io.documents import short

#: Longest ``where`` accepted (characters).
MAX_CHARS = 65_536
#: Seconds and memory (DuckDB's buffer manager) a filter may take; a few points take milliseconds.
SECONDS = 10.0
MEMORY = "512MB"

#: Scalar functions and operators a condition may call: arithmetic, comparison helpers, text
#: and list tests. Not here: anything that makes a value much larger than its inputs (repeat,
#: lpad, range, replace, format) or reads anything but its arguments.
FUNCTIONS = frozenset(
    """+ - * / // % ** ^ || ~~ !~~ ~~* !~~* ~~~
    abs ceil ceiling floor round trunc sign sqrt cbrt pow power exp ln log log2 log10 mod gcd lcm
    least greatest isnan isinf isfinite even if nullif
    lower upper lcase ucase length len strlen starts_with ends_with prefix suffix contains concat
    substring substr left right trim ltrim rtrim strpos instr position regexp_matches regexp_full_match
    list_value list_contains list_has array_contains array_has list_position list_indexof
    list_extract list_element array_extract array_length list_sum list_min list_max list_product""".split()
)
#: Expression kinds DuckDB's parser gives that may appear (TYPE: the target of a cast).
CLASSES = frozenset({"CONSTANT", "COLUMN_REF", "COMPARISON", "CONJUNCTION", "OPERATOR", "BETWEEN", "CASE", "CAST"})
CLASSES_ALSO = frozenset({"FUNCTION", "TYPE"})
OPERATORS = frozenset(
    {
        "OPERATOR_NOT",
        "OPERATOR_IS_NULL",
        "OPERATOR_IS_NOT_NULL",
        "COMPARE_IN",
        "COMPARE_NOT_IN",
        "OPERATOR_COALESCE",
        "ARRAY_EXTRACT",
        "ARRAY_SLICE",
    }
)
_LOCATION = ("query_location", "query_location_length")


def _statement(text: str) -> str:
    return f"SELECT __i FROM points WHERE ({text})"


def check(text: Any, columns: set[str] | list[str], source: str) -> str:
    """``text`` if it is one expression over ``columns`` as the module docstring says; else a
    ChakraError naming ``source`` and the ``where`` key."""

    def bad(what: str) -> ChakraError:
        return ChakraError(f"{source}: where: {what}")

    if not isinstance(text, str) or not text.strip():
        raise bad(f"expected a SQL boolean expression as a string, got {short(text)}")
    if len(text) > MAX_CHARS:
        raise bad(f"{len(text):,} characters, more than the {MAX_CHARS:,} a condition may have")
    con = connect(what="filter")
    try:
        got = _parse(con, _statement(text))
        ref = _parse(con, _statement("true"))
    finally:
        con.close()
    if got.get("error"):
        message = str(got.get("error_message", ""))
        if "Only SELECT" in message:  # (what DuckDB says of a second statement that is not a query)
            raise bad("one expression expected, and a ';' starts another statement")
        raise bad(f"not a SQL expression ({short(message)})")
    statements = got.get("statements") or []
    if len(statements) != 1:
        raise bad(f"one expression expected, and it reads as {len(statements)} statements (a ';' or a ')'?)")
    node, ref_node = dict(statements[0]), dict(ref["statements"][0])
    cond = node.get("node", {}).pop("where_clause", None) if isinstance(node.get("node"), dict) else None
    ref_node["node"] = {k: v for k, v in ref_node["node"].items() if k != "where_clause"}
    if cond is None or _strip(node) != _strip(ref_node):
        raise bad("one expression expected: it closes the parenthesis around it and adds to the query")
    _walk(cond, {c.lower() for c in columns}, bad)
    return text


def _parse(con, sql: str) -> dict:
    """DuckDB's parse of ``sql`` as JSON (parsed only, never bound or run)."""
    import duckdb

    try:
        return json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    except RecursionError:
        return {"error": True, "error_message": "nested too deeply"}
    except duckdb.Error as e:
        return {"error": True, "error_message": first_line(e)}


def _strip(o: Any) -> Any:
    """A parse without source positions (to compare two statements' shapes)."""
    if isinstance(o, dict):
        return {k: _strip(v) for k, v in o.items() if k not in _LOCATION}
    if isinstance(o, list):
        return [_strip(v) for v in o]
    return o


def _walk(root: Any, columns: set[str], bad) -> None:
    """Every expression in the parse (every dict with a "class", wherever it sits) allowed."""
    stack = [root]
    while stack:
        o = stack.pop()
        if isinstance(o, list):
            stack.extend(o)
            continue
        if not isinstance(o, dict):
            continue
        kind = o.get("class")
        if kind is not None:
            _allowed(o, kind, columns, bad)
        stack.extend(v for v in o.values() if isinstance(v, (dict, list)))


def _allowed(o: dict, kind: str, columns: set[str], bad) -> None:
    if kind not in CLASSES and kind not in CLASSES_ALSO:
        what = {"SUBQUERY": "a subquery", "WINDOW": "a window function", "LAMBDA": "a lambda", "STAR": "*"}
        raise bad(f"{what.get(kind, short(kind.lower()))} is not allowed; {_ALLOWED}")
    if kind == "COLUMN_REF":
        names = [str(n) for n in o.get("column_names") or []]
        if len(names) == 2 and names[0].lower() == "points":
            names = names[1:]
        if len(names) != 1 or names[0].lower() not in columns:
            raise bad(f"unknown column {short('.'.join(names))}; the points have {', '.join(sorted(columns))}")
    elif kind == "OPERATOR" and o.get("type") not in OPERATORS:
        raise bad(f"operator {short(str(o.get('type')).lower())} is not allowed; {_ALLOWED}")
    elif kind == "FUNCTION":
        name = str(o.get("function_name", ""))
        schema = o.get("schema")
        desugared = schema == "main" and name == "list_value"  # (DuckDB 1.x parses `[a, b]` so)
        if name.lower() not in FUNCTIONS or (schema and not desugared) or o.get("catalog"):
            qualified = ".".join(str(x) for x in (o.get("catalog"), o.get("schema"), name) if x)
            raise bad(f"function {short(qualified)} is not allowed; {_ALLOWED}")
        orders = (
            (o.get("order_bys") or {}).get("orders") if isinstance(o.get("order_bys"), dict) else o.get("order_bys")
        )
        named = any(isinstance(a, dict) and a.get("name") for a in o.get("arguments") or [])
        if o.get("filter") or orders or o.get("distinct") or o.get("export_state") or named:
            raise bad(f"function {short(name)}: only plain arguments are allowed")


_ALLOWED = (
    "a condition holds column names, literals, operators, CASE, casts and scalar functions such as len, abs, lower"
)


def keep(rows: list[dict], text: str, source: str) -> list[int]:
    """Indices (ascending) of ``rows`` for which the checked condition ``text`` is true."""
    import duckdb
    import pyarrow as pa

    cols = sorted({k for r in rows for k in r})
    check(text, cols, source)
    data: dict[str, list] = {"__i": list(range(len(rows)))}
    for c in cols:
        vals = [r.get(c) for r in rows]
        if any(isinstance(v, (list, tuple)) for v in vals):  # one type per column: scalars as 1-lists
            vals = [v if v is None or isinstance(v, (list, tuple)) else [v] for v in vals]
        data[c] = vals
    try:
        table = pa.table({c: pa.array(v) for c, v in data.items()})
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        raise ChakraError(f"{source}: axes: values of mixed types cannot be filtered ({first_line(e)})") from None
    con = connect(what="filter", memory_limit=MEMORY, threads=1)
    try:
        con.register("points", table)
        with time_limit(con, SECONDS):
            got = con.execute(_statement(text)).fetchall()
    except duckdb.Error as e:
        if is_interrupt(e):
            raise ChakraError(f"{source}: where: still running after {SECONDS:g} s (stopped)") from None
        raise ChakraError(f"{source}: where: {first_line(e)}") from None
    finally:
        con.close()
    return sorted(int(i) for (i,) in got)
