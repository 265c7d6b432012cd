"""A scan filter's ``column = literal`` is used in the projection above it: CASE branches it
rules out go, and the columns only they read are no longer read."""

from __future__ import annotations

import pyarrow as pa

import clink
from clink.testing import run_select

DDL = """
CREATE TABLE events (kind INT, a ROW<x BIGINT, t TIMESTAMP(3)>, b ROW<x BIGINT, t TIMESTAMP(3)>)
  WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE VIEW only_b AS
  SELECT b.x AS x, CASE WHEN kind = 1 THEN a.t ELSE b.t END AS t, kind = 2 AS is_b FROM events WHERE kind = 2;
"""


def test_a_case_ruled_out_by_the_scan_filter_is_dropped_and_its_columns_unread() -> None:
    explain = clink.compile(DDL + "SELECT x, t, is_b FROM only_b").explain()
    assert "Scan(table=[events], columns=[kind, b], where=[(kind = 2)])" in explain
    assert "CASE" not in explain and "TRUE AS is_b" in explain


def test_the_rows_are_those_of_the_unsimplified_query() -> None:
    kinds = pa.array([1, 2, 2, 3, None], pa.int32())
    rows = pa.struct([("x", pa.int64()), ("t", pa.timestamp("ms"))])
    a = pa.array([{"x": i, "t": 1000 * i} for i in range(5)], rows)
    b = pa.array([{"x": 10 + i, "t": 2000 * i} for i in range(5)], rows)
    table = pa.table({"kind": kinds, "a": a, "b": b})
    query = ("SELECT b.x AS x, CASE WHEN kind = 1 THEN a.t WHEN kind = 2 THEN b.t END AS t "
             "FROM ev WHERE kind = 2 AND b.x > 0")
    got = run_select(query, ev=table).to_pylist()
    assert [(r["x"], r["t"].timestamp()) for r in got] == [(11, 2.0), (12, 4.0)]
