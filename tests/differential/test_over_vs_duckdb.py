"""OVER aggregation: every row with its aggregates over ROWS and RANGE frames, in event-time order,
against DuckDB's window functions over the same rows."""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

# tests/shared_duckdb.py: pytest puts tests/ on sys.path, as it holds the root conftest.py.
import shared_duckdb

import clink
from clink.errors import SqlError
from clink.runtime import plan as P
from clink.runtime.context import RuntimeContext, TaskContext
from clink.runtime.operators.over import OverAggregateOperator
from clink.testing import run_select

N = 3000
WATERMARK = {"ev": "ts AS ts - INTERVAL '5' SECOND"}


def _events(unique_times: bool) -> pa.Table:
    rng = np.random.default_rng(17 if unique_times else 19)
    base = np.datetime64("2026-01-01T00:00:00", "ms")
    # Roughly ordered: each row at most 3 s behind the newest, within the 5 s watermark delay.
    if unique_times:
        # No two rows share a time: rows ten apart differ by 9.7 s, more than the spread.
        ms = np.arange(N) * 970 + rng.integers(0, 300, N) * 10 + np.arange(N) % 10
    else:
        ms = np.arange(N) * 97 + rng.integers(0, 3000, N)
        ms = ms // 500 * 500  # many rows share a time: peers in a RANGE frame
    return pa.table({
        "k": pa.array(rng.integers(0, 7, N), pa.int64()),
        "v": pa.array(rng.integers(-50, 100, N), pa.int64(), mask=rng.random(N) < 0.1),
        "f": pa.array(rng.normal(0, 10, N), pa.float64()),
        "ts": pa.array(base + ms.astype("timedelta64[ms]"), pa.timestamp("ms")),
    })


def _same(ours: pa.Table, theirs: list[tuple]) -> None:
    def norm(row: tuple) -> tuple:
        return tuple(round(v, 6) if isinstance(v, float) and not math.isnan(v) else v for v in row)

    assert Counter(norm(tuple(r.values())) for r in ours.to_pylist()) == Counter(norm(r) for r in theirs)


ROWS_QUERIES = [
    "SELECT k, v, ts, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s FROM ev",
    ("SELECT k, ts, COUNT(*) OVER w AS n, COUNT(v) OVER w AS c, AVG(f) OVER w AS a, MIN(v) OVER w AS lo, "
     "MAX(f) OVER w AS hi FROM ev"),
    "SELECT k, ts, SUM(v) OVER (ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running FROM ev",
    ("SELECT ts, v - AVG(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) "
     "AS diff, MAX(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS top "
     "FROM ev"),
    # LAG: the value 1 (or 3, else -1) rows before in the partition; beside a ROWS window reaching that far.
    ("SELECT k, ts, v, LAG(v) OVER (PARTITION BY k ORDER BY ts) AS p1, LAG(f, 3, -1.0) OVER (PARTITION BY k "
     "ORDER BY ts) AS p3 FROM ev"),
    "SELECT k, ts, LAG(v, 2) OVER w AS p, SUM(v) OVER w AS s FROM ev",
]
RANGE_QUERIES = [
    ("SELECT k, ts, SUM(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '3' SECOND PRECEDING AND "
     "CURRENT ROW) AS s, MIN(f) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '3' SECOND PRECEDING "
     "AND CURRENT ROW) AS lo FROM ev"),
    "SELECT k, ts, COUNT(*) OVER (PARTITION BY k ORDER BY ts) AS n, MAX(v) OVER (PARTITION BY k ORDER BY ts) AS hi FROM ev",
]
W = "(PARTITION BY k ORDER BY ts ROWS BETWEEN 4 PRECEDING AND CURRENT ROW)"


def _duck(query: str, table: pa.Table) -> list[tuple]:
    con = shared_duckdb.connect()
    con.register("ev", table)
    text = query.replace("OVER w", f"OVER {W}").replace("INTERVAL '3' SECOND", "INTERVAL 3 SECOND")
    # AVG of the BIGINT v is a BIGINT, truncated toward zero, as in Flink.
    text = re.sub(r"AVG\(v\) OVER (\([^)]*\))", r"CAST(trunc(SUM(v) OVER \1 / COUNT(v) OVER \1) AS BIGINT)", text)
    return con.execute(text).fetchall()


@pytest.mark.parametrize("query", ROWS_QUERIES + RANGE_QUERIES)
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_rows_equal_duckdb(query: str, backend: str) -> None:
    table = _events(unique_times=query in ROWS_QUERIES)
    ours = run_select(query.replace("OVER w", f"OVER {W}"), context=RuntimeContext(config={"state.backend": backend}),
                      row_group_size=113, watermarks=WATERMARK, ev=table)
    assert ours.num_rows == N
    _same(ours, _duck(query, table))


def test_late_rows_are_dropped_and_counted() -> None:
    ts = pa.timestamp("ms")
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("ts", ts)])
    out_schema = pa.schema([*schema, pa.field("s", pa.int64())])
    node = P.OverAggregate(id=2, input=1, partition=(0,), time=2, frame="rows", preceding=1,
                           aggs=(P.AggSpec(fn="sum", arg=1, type=pa.int64()),), schema=out_schema)
    op = OverAggregateOperator(node, TaskContext(runtime=RuntimeContext(), node_id=2), input_schema=schema)

    def batch(rows: list[tuple[int, int]]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([pa.array([1] * len(rows), pa.int64()), pa.array([v for v, _ in rows]),
                                           pa.array([t for _, t in rows], ts)], schema=schema)

    assert op.process(batch([(1, 0), (2, 1000), (3, 9000)])) == []
    first = op.on_watermark(4000)  # 0 and 1000 are ready; 9000 waits
    assert op.process(batch([(4, 2000), (5, 9500)])) == []  # 2000 is behind the watermark: late
    rest = op.on_watermark(2**62)
    rows = [(r["v"], r["s"]) for b in first + rest for r in b.to_pylist()]
    assert rows == [(1, 1), (2, 3), (3, 5), (5, 8)]
    assert op.metrics["late_records"] == 1 and op.late_rows[0].column(1).to_pylist() == [4]
    assert op.metrics["state_rows"] <= 2  # what is left: the partition's last row (its history)


def _refusal(script: str) -> str:
    with pytest.raises(SqlError) as info:
        clink.compile(script, name="p.sql")
    return info.value.render({"p.sql": script})


DDL = ("CREATE TABLE t (k INT, v INT, ts TIMESTAMP(3), p TIMESTAMP(3), WATERMARK FOR ts AS ts) "
       "WITH ('connector' = 'datagen');\n")


@pytest.mark.parametrize(("select", "message"), [
    ("SUM(v) OVER (PARTITION BY k ORDER BY p)", "OVER (ORDER BY ...) needs an event-time attribute"),
    ("SUM(v) OVER (PARTITION BY k ORDER BY ts DESC)", "needs ORDER BY one event-time column, ascending"),
    ("SUM(v) OVER (ORDER BY ts), COUNT(*) OVER (PARTITION BY k ORDER BY ts)", "the same OVER (...) window"),
    ("LAG(v) OVER w, SUM(v) OVER w FROM t WINDOW w AS (ORDER BY ts) --", "LAG beside other OVER aggregates needs"),
    ("LAG(v, 3) OVER w, SUM(v) OVER w FROM t WINDOW w AS (ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) --",
     "n at least LAG's offset (3)"),
    ("LAG(v, k) OVER (ORDER BY ts)", "the offset of LAG must be a constant integer"),
    ("LEAD(v) OVER (ORDER BY ts)", "LEAD"),
    ("SUM(v) OVER (ORDER BY ts ROWS BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW)", "a whole number"),
    ("SUM(v) OVER (ORDER BY ts RANGE BETWEEN 3 PRECEDING AND CURRENT ROW)", "needs an interval"),
    ("COUNT(DISTINCT v) OVER (ORDER BY ts)", "COUNT(DISTINCT ...) OVER (...) is not supported yet"),
])
def test_unsupported_windows_are_refused_with_a_position(select: str, message: str) -> None:
    text = _refusal(DDL + f"SELECT k, {select} FROM t;\n")
    assert message in text and "p.sql:2:" in text


def test_over_is_explained() -> None:
    explained = clink.compile(DDL + "SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN "
                                    "INTERVAL '10' SECOND PRECEDING AND CURRENT ROW) FROM t;\n").explain()
    assert ("OverAggregate(partition=[k], order=[ts], frame=[RANGE BETWEEN 10000 ms PRECEDING AND CURRENT ROW], "
            "aggs=[SUM(v)])") in explained
    assert "OverAggregate RANGE BETWEEN 10000 ms PRECEDING AND CURRENT ROW state keys=[k]" in explained


def test_a_window_clause_names_the_window_of_several_aggregates() -> None:
    """Flink's WINDOW clause (its OVER page's example, on these rows): the aggregates OVER w share
    the window it defines, as DuckDB's do."""
    query = (f"SELECT k, ts, SUM(v) OVER w AS s, COUNT(*) OVER w AS n, MAX(f) OVER w AS hi FROM ev WINDOW w AS {W}")
    table = _events(unique_times=True)
    ours = run_select(query, row_group_size=113, watermarks=WATERMARK, ev=table)
    con = shared_duckdb.connect()
    con.register("ev", table)
    _same(ours, con.execute(query).fetchall())
