"""Nested projection pushdown: a source learns which fields of its ROW columns the plan reads.

``P.Source.fields`` names, for each ROW column read only through field access (``r.a``), the
fields read: by the chain on the source, its pushed-down filter and the table's watermark. A
column read whole anywhere, or a source feeding anything but a chain, gets no entry. The JSON
reader then decodes only those fields; the rows the query gives do not change.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pytest

import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from clink.runtime.plan import Source

LINES = [
    {"id": 1, "r": {"a": 10, "b": "x", "t": "2024-01-01 00:00:01.000", "c": {"x": 1}}},
    {"id": 2, "r": None, "extra": [1, 2]},
    {"id": 3, "r": {"a": 30, "t": "2024-01-01 00:00:03.000"}},
    {"id": -4, "r": {"a": 40, "b": "y", "t": "2024-01-01 00:00:04.000"}},
    {"id": 5, "r": {}},
]


def table_sql(path: Path, watermark: bool = False) -> str:
    mark = ", ts AS r.t, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND" if watermark else ""
    return (f"CREATE TABLE src (id BIGINT, r ROW<a BIGINT, b STRING, t TIMESTAMP(3), c ROW<x INT>>{mark}) "
            f"WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json');\n")


def run(tmp_path: Path, select: str, columns: str, *, watermark: bool = False) -> tuple[dict, list[dict]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    source = tmp_path / "in.json"
    source.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    out = tmp_path / "out"
    sql = (table_sql(source, watermark)
           + f"CREATE TABLE sink ({columns}) WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'json');\n"
           + f"INSERT INTO sink {select};")
    plan = clink.compile(sql, name="fields.sql").runtime_plan
    Job(plan, RuntimeContext(config={}, stdout=io.StringIO())).run()
    (source_node,) = [n for n in plan.nodes if isinstance(n, Source)]
    rows = [json.loads(line) for part in sorted(out.glob("part-*")) for line in part.read_text().splitlines()]
    return source_node.fields, rows


def test_fields_read_through_access_only_are_pushed_into_the_source(tmp_path: Path) -> None:
    fields, rows = run(tmp_path, "SELECT id, r.a, r.c.x FROM src WHERE id > 0",
                       "id BIGINT, a BIGINT, x INT")
    assert fields == {"r": ("a", "c")}
    assert rows == [{"id": 1, "a": 10, "x": 1}, {"id": 2, "a": None, "x": None},
                    {"id": 3, "a": 30, "x": None}, {"id": 5, "a": None, "x": None}]


def test_the_watermark_reads_its_field_too(tmp_path: Path) -> None:
    fields, rows = run(tmp_path, "SELECT id, r.b FROM src", "id BIGINT, b STRING", watermark=True)
    assert fields == {"r": ("b", "t")}
    assert [r["b"] for r in rows] == ["x", None, None, "y", None]


@pytest.mark.parametrize(("select", "columns"), [
    ("SELECT r, r.a FROM src", "r ROW<a BIGINT, b STRING, t TIMESTAMP(3), c ROW<x INT>>, a BIGINT"),
    ("SELECT r.a, r.b, r.t, r.c FROM src", "a BIGINT, b STRING, t TIMESTAMP(3), c ROW<x INT>"),
])
def test_a_row_read_whole_is_not_pruned(tmp_path: Path, select: str, columns: str) -> None:
    fields, rows = run(tmp_path, select, columns)
    assert fields == {}
    assert len(rows) == len(LINES)


def test_the_rows_are_those_of_the_unpruned_read(tmp_path: Path) -> None:
    _, pruned = run(tmp_path, "SELECT r.a, r.t FROM src", "a BIGINT, t TIMESTAMP(3)")
    _, whole = run(tmp_path / "whole", "SELECT r, r.a, r.t FROM src",
                   "r ROW<a BIGINT, b STRING, t TIMESTAMP(3), c ROW<x INT>>, a BIGINT, t TIMESTAMP(3)")
    assert pruned == [{"a": w["a"], "t": w["t"]} for w in whole]
    assert pa.array([w["a"] for w in whole]).to_pylist() == [10, None, 30, 40, None]
