"""The one result type for rows (`chakra_trace.table`): its JSON, pandas and Markdown forms, and
the CLI's one renderer of it (`cli.common.show`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chakra_trace.table import Column, Table, Tables, categorical


def _table() -> Table:
    codes, kinds = categorical(np.array(["comm", "comp", "comm"], dtype=object))
    return Table(
        {
            "rank": np.arange(3),
            "name": ["a|b", "x\ny", "<i>&"],
            "kind": codes,
            "us": np.array([1.5, np.nan, np.inf]),
            "n": [np.int64(7), None, 2],
        },
        title="t",
        index="rank",
        spec={"kind": Column(categories=kinds), "us": Column(label="time", unit="µs", format=".1f")},
    )


def test_records_are_json_ready():
    t = _table()
    recs = t.records()
    assert recs[0] == {"rank": 0, "name": "a|b", "kind": "comm", "us": 1.5, "n": 7}
    assert recs[1]["us"] is None and recs[2]["us"] is None and recs[1]["n"] is None  # NaN, inf, None
    assert type(recs[0]["n"]) is int and json.loads(json.dumps(recs, allow_nan=False)) == recs
    assert len(t) == 3 and t[1] == recs[1] and list(t) == recs and "kind" in t
    assert t["kind"].tolist() == ["comm", "comp", "comm"]  # decoded


def test_pandas_keeps_dtypes_index_and_categories():
    pytest.importorskip("pandas")
    df = _table().to_pandas()
    assert df.index.name == "rank" and list(df.columns) == ["name", "kind", "us", "n"]
    assert str(df["kind"].dtype) == "category" and list(df["kind"].cat.categories) == ["comm", "comp"]
    assert df["us"].dtype == np.float64 and np.isnan(df["us"].iloc[1])
    empty = Table.from_records([], ["a", "b"]).to_pandas()
    assert list(empty.columns) == ["a", "b"] and len(empty) == 0


def test_markdown_escapes_and_aligns():
    md = _table().to_markdown().splitlines()
    assert md[0] == "| rank | name | kind | time (µs) | n |"
    assert md[1] == "|---:|---|---|---:|---:|"
    assert md[2] == "| 0 | a\\|b | comm | 1.5 | 7 |"
    assert md[3] == "| 1 | x<br>y | comp | - | - |" and md[4] == "| 2 | &lt;i&gt;&amp; | comm | - | 2 |"


def test_selecting_taking_and_records_of_rows():
    t = Table.from_records([{"a": 1, "b": "x"}, {"a": 2, "c": True}])
    assert t.names == ["a", "b", "c"] and t[1] == {"a": 2, "b": None, "c": True}
    assert t.take(np.array([False, True])).records() == [{"a": 2, "b": None, "c": True}]
    assert t.select(["c", "a"]).head(1).records() == [{"c": None, "a": 1}]
    with pytest.raises(ValueError, match="differ in length"):
        Table({"a": [1], "b": [1, 2]})
    with pytest.raises(ValueError, match="no column 'z'"):
        Table({"a": [1]}, spec={"z": Column()})


def test_tables_keep_their_rows_and_json_shape():
    rows = [{"rank": 0, "busy_us": 1.0}, {"rank": 1, "busy_us": 2.0}]
    t = Tables({"ranks": rows, "none": []}, {"source": "recorded"})
    assert t["ranks"] == rows and t["none"] == []
    assert t.to_dict() == {"summary": {"source": "recorded"}, "ranks": rows, "none": []}
    assert t == Tables({"ranks": rows, "none": []}, {"source": "recorded"})
    pytest.importorskip("pandas")
    assert t.to_pandas()["busy_us"].tolist() == [1.0, 2.0] and len(t.to_pandas("none")) == 0


def test_show_prints_data_as_text(capsys):
    from chakra_trace.cli.common import show

    t = Table({"name": ["[bold]x[/bold]", "evil\x1b[2J"], "n": [1234, None]}, title="names [red]")
    show(t)
    out = capsys.readouterr().out
    assert "names [red]" in out and "[bold]x[/bold]" in out and "\x1b" not in out and "evil\\x1b[2J" in out
    assert "1,234" in out
    show(Table({"n": list(range(5))}, title="few"), limit=2, what="numbers")
    out = capsys.readouterr().out
    assert "few(first2of5numbers;--jsonlistsall)" in "".join(out.split()) and "│ 1 │" in out and "│ 2 │" not in out
