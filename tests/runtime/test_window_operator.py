"""The window aggregation operator, checked against references computed from the same rows.

Window assignment has a plain-Python reference (``windows_of``); aggregates are checked against
DuckDB running the same GROUP BY over the rows exploded into their windows.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clink.runtime import plan
from clink.runtime.connectors import ConnectorRegistry
from clink.runtime.context import RuntimeContext, TaskContext
from clink.runtime.elements import MAX_WATERMARK
from clink.runtime.operators.window import WindowAggregateOperator
from clink.runtime.state.backend import StateBackend
from clink.runtime.state.memory import MemoryStateBackend
from clink.runtime.state.sqlite import SqliteStateBackend

TS = pa.timestamp("ms")
A = plan.AggSpec

#: Input layout of every test: ts, k, v (BIGINT), f (BOOLEAN), s (STRING), x (DOUBLE), id.
INPUT = pa.schema([("ts", TS), ("k", pa.string()), ("v", pa.int64()), ("f", pa.bool_()), ("s", pa.string()),
                   ("x", pa.float64()), ("id", pa.int64())])
TS_COL, K, V, F, S, X, ID = range(7)

#: Every aggregate, with the DuckDB expression that means the same over the exploded rows.
ALL_AGGS: list[tuple[plan.AggSpec, str]] = [
    (A(fn="count_star", arg=None, type=pa.int64()), "count(*)"),
    (A(fn="count_star", arg=None, type=pa.int64(), filter=F), "count(*) FILTER (WHERE f)"),
    (A(fn="count", arg=V, type=pa.int64()), "count(v)"),
    (A(fn="count", arg=V, type=pa.int64(), filter=F), "count(v) FILTER (WHERE f)"),
    (A(fn="count_distinct", arg=V, type=pa.int64()), "count(DISTINCT v)"),
    (A(fn="count_distinct", arg=S, type=pa.int64(), filter=F), "count(DISTINCT s) FILTER (WHERE f)"),
    (A(fn="sum", arg=V, type=pa.int64()), "sum(v)"),
    (A(fn="sum", arg=X, type=pa.float64(), filter=F), "sum(x) FILTER (WHERE f)"),
    (A(fn="min", arg=V, type=pa.int64()), "min(v)"),
    (A(fn="max", arg=S, type=pa.string()), "max(s)"),
    (A(fn="min", arg=X, type=pa.float64(), filter=F), "min(x) FILTER (WHERE f)"),
    (A(fn="avg", arg=V, type=pa.float64()), "avg(v)"),
    (A(fn="avg", arg=X, type=pa.float64()), "avg(x)"),
    (A(fn="first_value", arg=V, type=pa.int64()), "arg_min(v, id) FILTER (WHERE v IS NOT NULL)"),
    (A(fn="last_value", arg=S, type=pa.string()), "arg_max(s, id) FILTER (WHERE s IS NOT NULL)"),
    (A(fn="var_pop", arg=V, type=pa.float64()), "var_pop(v)"),
    (A(fn="var_samp", arg=X, type=pa.float64()), "var_samp(x)"),
    (A(fn="stddev_pop", arg=X, type=pa.float64()), "stddev_pop(x)"),
    (A(fn="stddev_samp", arg=V, type=pa.float64(), filter=F), "stddev_samp(v) FILTER (WHERE f)"),
]


# ---------------------------------------------------------------- building blocks


def make_op(window: plan.WindowSpec, aggs: Sequence[plan.AggSpec], *, keys: tuple[int, ...] = (K,),
            lateness: int = 0, backend: StateBackend | None = None) -> WindowAggregateOperator:
    fields = [INPUT.field(k) for k in keys] + [pa.field(n, TS) for n in ("window_start", "window_end", "window_time")]
    fields += [pa.field(f"a{i}", a.type) for i, a in enumerate(aggs)]
    node = plan.WindowAggregate(id=2, input=1, window=window, time=TS_COL, keys=keys, aggs=tuple(aggs),
                                schema=pa.schema(fields), allowed_lateness=lateness)
    return WindowAggregateOperator(node, TaskContext(runtime=RuntimeContext(connectors=ConnectorRegistry()), node_id=2),
                                   input_schema=INPUT, backend=backend)


def batch(rows: Iterable[dict[str, Any]]) -> pa.RecordBatch:
    """Rows as dicts; missing columns are NULL, ``id`` defaults to the position."""
    rows = [{"id": i, **r} for i, r in enumerate(rows)]
    return pa.RecordBatch.from_pylist(rows, schema=INPUT)


def as_rows(batches: Iterable[pa.RecordBatch]) -> list[tuple]:
    """Output rows as tuples (timestamps as ms), sorted, for comparison."""
    out = []
    for b in batches:
        cols = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in b.columns]
        out += list(zip(*(c.to_pylist() for c in cols), strict=True)) if b.num_rows else []
    return sorted(out, key=_sort_key)


def _sort_key(row: tuple) -> tuple:
    return tuple((v is None, v if v is not None and not isinstance(v, float) else 0) for v in row[:4]) + (repr(row),)


def same(actual: list[tuple], expected: list[tuple]) -> bool:
    if len(actual) != len(expected):
        return False
    for a, e in zip(actual, expected, strict=True):
        for x, y in zip(a, e, strict=True):
            if isinstance(x, float) or isinstance(y, float):
                if x is None or y is None or not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9):
                    return False
            elif x != y:
                return False
    return True


def run_all(op: WindowAggregateOperator, batches: Iterable[pa.RecordBatch], watermarks: bool = False,
            bound: int = 0) -> list[pa.RecordBatch]:
    """Push batches; optionally advance the watermark to max_ts - bound after each; then end."""
    out: list[pa.RecordBatch] = []
    high = None
    for b in batches:
        out += op.process(b)
        if watermarks and b.num_rows:
            top = int(b.column(TS_COL).cast(pa.int64()).to_numpy().max())
            high = top if high is None else max(high, top)
            out += op.on_watermark(high - bound)
    out += op.on_watermark(MAX_WATERMARK)
    return out


# ---------------------------------------------------------------- references


def windows_of(window: plan.WindowSpec, ts: int) -> list[tuple[int, int]]:
    """Every [start, end) of a time window kind that contains ``ts``, by the definitions."""
    size, slide, offset = window.size, window.slide, window.offset
    if window.kind == "tumble":
        start = ts - (ts - offset) % size
        return [(start, start + size)]
    if window.kind == "hop":
        last = ts - (ts - offset) % slide
        starts = range(last - size + slide, last + 1, slide)
        return [(s, s + size) for s in starts if s <= ts < s + size]
    assert window.kind == "cumulate"
    start = ts - (ts - offset) % size
    return [(start, start + k * slide) for k in range(1, size // slide + 1) if start + k * slide > ts]


def sessions_of(gap: int, rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Per row, the session it ends up in: per key, rows at most ``gap`` apart merge (as in Flink)."""
    by_key: dict[Any, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_key[r.get("k")].append(i)
    out: list[tuple[int, int]] = [(0, 0)] * len(rows)
    for members in by_key.values():
        members.sort(key=lambda i: rows[i]["ts"])
        group: list[int] = []
        for i in [*members, None]:
            if group and (i is None or rows[i]["ts"] - rows[group[-1]]["ts"] > gap):
                span = (rows[group[0]]["ts"], rows[group[-1]]["ts"] + gap)
                for j in group:
                    out[j] = span
                group = []
            if i is not None:
                group.append(i)
    return out


def explode(window: plan.WindowSpec, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if window.kind == "session":
        spans = sessions_of(window.gap, rows)
        return [{**r, "ws": s, "we": e} for r, (s, e) in zip(rows, spans, strict=True)]
    return [{**r, "ws": s, "we": e} for r in rows for s, e in windows_of(window, r["ts"])]


def duckdb_reference(window: plan.WindowSpec, rows: list[dict[str, Any]], aggs: Sequence[str]) -> list[tuple]:
    exploded = explode(window, [{"id": i, **r} for i, r in enumerate(rows)])
    schema = pa.schema([*INPUT, ("ws", pa.int64()), ("we", pa.int64())])
    t = pa.Table.from_pylist(exploded, schema=schema).drop_columns(["ts"])  # noqa: F841 (read by DuckDB)
    sql = (f"SELECT k, ws, we, we - 1, {', '.join(aggs)} FROM t GROUP BY k, ws, we")
    return sorted(duckdb.sql(sql).fetchall(), key=_sort_key)


def python_counts(window: plan.WindowSpec, rows: list[dict[str, Any]]) -> list[tuple]:
    """(k, start, end, end - 1, COUNT(*), SUM(v)) per window, in plain Python."""
    return counts_of(explode(window, rows))


def counts_of(exploded: Iterable[dict[str, Any]]) -> list[tuple]:
    acc: dict[tuple, list] = defaultdict(lambda: [0, None])
    for r in exploded:
        entry = acc[(r.get("k"), r["ws"], r["we"], r["we"] - 1)]
        entry[0] += 1
        if r.get("v") is not None:
            entry[1] = r["v"] if entry[1] is None else entry[1] + r["v"]
    return sorted(((*key, *vals) for key, vals in acc.items()), key=_sort_key)


def random_rows(n: int, seed: int, *, span: int = 60_000, keys: str = "abc") -> list[dict[str, Any]]:
    rng = random.Random(seed)

    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.2 else value

    return [{"ts": rng.randrange(-5_000, span), "k": maybe(rng.choice(keys)), "v": maybe(rng.randrange(-50, 50)),
             "f": maybe(rng.random() < 0.5), "s": maybe(rng.choice(["p", "q", "r", "é"])),
             "x": maybe(round(rng.uniform(-10, 10), 3))} for _ in range(n)]


def in_batches(rows: list[dict[str, Any]], sizes: Iterable[int]) -> list[pa.RecordBatch]:
    out, i = [], 0
    for size in sizes:
        if i >= len(rows):
            break
        out.append(batch(rows[i:i + size]) if i == 0 else _batch_from(rows, i, size))
        i += size
    if i < len(rows):
        out.append(_batch_from(rows, i, len(rows) - i))
    return out


def _batch_from(rows: list[dict[str, Any]], start: int, size: int) -> pa.RecordBatch:
    chunk = [{"id": start + j, **r} for j, r in enumerate(rows[start:start + size])]
    return pa.RecordBatch.from_pylist(chunk, schema=INPUT)


WINDOWS = [
    plan.WindowSpec(kind="tumble", size=10_000),
    plan.WindowSpec(kind="tumble", size=10_000, offset=3_000),
    plan.WindowSpec(kind="hop", size=10_000, slide=2_500),
    plan.WindowSpec(kind="hop", size=6_000, slide=2_000, offset=500),
    plan.WindowSpec(kind="cumulate", size=12_000, slide=4_000),
    plan.WindowSpec(kind="cumulate", size=10_000, slide=2_000, offset=1_000),
    plan.WindowSpec(kind="session", gap=3_000),
]
IDS = [w.describe() for w in WINDOWS]


# ---------------------------------------------------------------- aggregates against DuckDB


@pytest.mark.parametrize("window", WINDOWS, ids=IDS)
def test_every_aggregate_matches_duckdb(window: plan.WindowSpec) -> None:
    rows = random_rows(400, seed=7)
    op = make_op(window, [a for a, _ in ALL_AGGS])
    actual = as_rows(run_all(op, in_batches(rows, [37, 1, 120, 80])))
    expected = duckdb_reference(window, rows, [sql for _, sql in ALL_AGGS])
    assert same(actual, expected), (actual[:3], expected[:3])
    assert op.metrics["state_rows"] == 0 and op.metrics["late_records"] == 0


def test_all_null_groups_and_filters_that_pass_nothing() -> None:
    rows = [{"ts": 1, "k": "a", "v": None, "x": None, "s": None, "f": None},
            {"ts": 2, "k": "a", "v": None, "x": None, "s": None, "f": False},
            {"ts": 3, "k": None, "v": 4, "x": 2.0, "s": "z", "f": True}]
    op = make_op(plan.WindowSpec(kind="tumble", size=10), [a for a, _ in ALL_AGGS])
    (a_row, null_row) = as_rows(run_all(op, [batch(rows)]))
    assert a_row[:4] == ("a", 0, 10, 9)
    # count(*), count(*) filtered, count, count filtered, count distinct x2; everything else NULL
    assert a_row[4:10] == (2, 0, 0, 0, 0, 0)
    assert all(v is None for v in a_row[10:])
    assert null_row[:8] == (None, 0, 10, 9, 1, 1, 1, 1)
    assert null_row[10] == 4 and null_row[15] == 4.0  # sum(v), avg(v)
    assert null_row[-4:-1] == (0.0, None, 0.0)  # var_pop of one value is 0, var_samp NULL


def test_result_types() -> None:
    b = pa.RecordBatch.from_pylist(
        [{"t": 5, "k": 1, "i": 2, "d": "1.50"}, {"t": 6, "k": 1, "i": 3, "d": "2.25"}],
        schema=pa.schema([("t", TS), ("k", pa.int32()), ("i", pa.int32()), ("d", pa.string())]))
    b = pa.RecordBatch.from_arrays([b.column(0), b.column(1), b.column(2), b.column(3).cast(pa.decimal128(10, 2))],
                                   names=["t", "k", "i", "d"])
    aggs = (A(fn="sum", arg=2, type=pa.int64()), A(fn="avg", arg=2, type=pa.float64()),
            A(fn="min", arg=2, type=pa.int32()), A(fn="avg", arg=2, type=pa.int32()),
            A(fn="sum", arg=3, type=pa.decimal128(38, 2)), A(fn="max", arg=3, type=pa.decimal128(10, 2)))
    schema = pa.schema([("k", pa.int32()), ("window_start", TS), ("window_end", TS), ("window_time", TS)]
                       + [(f"a{i}", a.type) for i, a in enumerate(aggs)])
    node = plan.WindowAggregate(id=2, input=1, window=plan.WindowSpec(kind="tumble", size=10), time=0, keys=(1,),
                                aggs=aggs, schema=schema)
    op = WindowAggregateOperator(node, TaskContext(runtime=RuntimeContext(connectors=ConnectorRegistry()), node_id=2),
                                 input_schema=b.schema)
    op.process(b)
    (out,) = op.on_watermark(10)
    assert out.schema == schema
    assert out.to_pylist()[0]["a0"] == 5 and out.to_pylist()[0]["a1"] == 2.5 and out.to_pylist()[0]["a3"] == 2
    assert str(out.to_pylist()[0]["a4"]) == "3.75"


# ---------------------------------------------------------------- firing


def test_windows_fire_only_when_the_watermark_passes_their_end() -> None:
    op = make_op(plan.WindowSpec(kind="tumble", size=10_000), [A(fn="count_star", arg=None, type=pa.int64())])
    assert op.process(batch([{"ts": 1_000, "k": "a"}, {"ts": 12_000, "k": "a"}, {"ts": 25_000, "k": "b"}])) == []
    assert op.on_watermark(9_999) == []
    (first,) = op.on_watermark(10_000)
    assert as_rows([first]) == [("a", 0, 10_000, 9_999, 1)]
    assert op.on_watermark(10_000) == [] and op.on_watermark(5) == []
    out = op.on_watermark(40_000)
    assert as_rows(out) == [("a", 10_000, 20_000, 19_999, 1), ("b", 20_000, 30_000, 29_999, 1)]
    ends = [e for b in out for e in b.column(2).cast(pa.int64()).to_pylist()]
    assert ends == sorted(ends)
    assert op.metrics["windows_fired"] == 3 and op.metrics["state_rows"] == 0


def test_windows_fire_in_order_of_end_across_batches() -> None:
    op = make_op(plan.WindowSpec(kind="hop", size=4_000, slide=1_000), [A(fn="count_star", arg=None, type=pa.int64())])
    op.process(batch({"ts": t, "k": k} for t in range(0, 20_000, 700) for k in "ab"))
    ends = [e for b in op.on_watermark(MAX_WATERMARK) for e in b.column(2).cast(pa.int64()).to_pylist()]
    assert ends == sorted(ends) and len(set(ends)) == 23


def test_late_events_are_dropped_counted_and_change_nothing() -> None:
    op = make_op(plan.WindowSpec(kind="tumble", size=10_000), [A(fn="count_star", arg=None, type=pa.int64()),
                                                               A(fn="sum", arg=V, type=pa.int64())])
    op.process(batch([{"ts": 1_000, "k": "a", "v": 1}, {"ts": 15_000, "k": "a", "v": 2}]))
    fired = as_rows(op.on_watermark(10_000))
    late = batch([{"ts": 9_999, "k": "a", "v": 100}, {"ts": 0, "k": "z", "v": 5}, {"ts": 10_000, "k": "a", "v": 3}])
    assert op.process(late) == []
    assert op.metrics["late_records"] == 2
    (dropped,) = op.late_rows
    assert dropped.schema == INPUT and dropped.column(V).to_pylist() == [100, 5]
    rest = as_rows(op.on_watermark(MAX_WATERMARK))
    assert fired == [("a", 0, 10_000, 9_999, 1, 1)]
    assert rest == [("a", 10_000, 20_000, 19_999, 2, 5)]


def test_a_row_whose_earlier_hop_windows_fired_still_counts_in_the_open_ones() -> None:
    op = make_op(plan.WindowSpec(kind="hop", size=10_000, slide=5_000), [A(fn="count_star", arg=None, type=pa.int64())])
    op.on_watermark(10_000)
    op.process(batch([{"ts": 7_000, "k": "a"}]))  # in [0, 10000) (fired) and [5000, 15000) (open)
    assert op.metrics["late_records"] == 0
    assert as_rows(op.on_watermark(MAX_WATERMARK)) == [("a", 5_000, 15_000, 14_999, 1)]


def test_null_event_times_are_dropped_and_counted() -> None:
    op = make_op(plan.WindowSpec(kind="tumble", size=10), [A(fn="count_star", arg=None, type=pa.int64())])
    op.process(batch([{"ts": None, "k": "a"}, {"ts": 3, "k": "a"}]))
    assert as_rows(op.on_watermark(MAX_WATERMARK)) == [("a", 0, 10, 9, 1)]
    assert op.metrics["null_time_records"] == 1 and op.metrics["late_records"] == 0


def test_time_columns_in_other_units() -> None:
    b = pa.RecordBatch.from_arrays([pa.array([1_500_000, 2_500_999, -1], pa.timestamp("us")),
                                    pa.array(["a", "a", "a"])], names=["t", "k"])
    schema = pa.schema([("k", pa.string()), ("window_start", TS), ("window_end", TS), ("window_time", TS),
                        ("n", pa.int64())])
    node = plan.WindowAggregate(id=2, input=1, window=plan.WindowSpec(kind="tumble", size=1_000), time=0, keys=(1,),
                                aggs=(A(fn="count_star", arg=None, type=pa.int64()),), schema=schema)
    op = WindowAggregateOperator(node, TaskContext(runtime=RuntimeContext(connectors=ConnectorRegistry()), node_id=2),
                                 input_schema=b.schema)
    op.process(b)
    assert as_rows(op.on_watermark(MAX_WATERMARK)) == [("a", -1_000, 0, -1, 1), ("a", 1_000, 2_000, 1_999, 1),
                                                       ("a", 2_000, 3_000, 2_999, 1)]


def test_no_keys_is_one_global_group_per_window() -> None:
    op = make_op(plan.WindowSpec(kind="tumble", size=10), [A(fn="count_star", arg=None, type=pa.int64())], keys=())
    op.process(batch([{"ts": 1, "k": "a"}, {"ts": 2, "k": "b"}, {"ts": 12}]))
    assert as_rows(op.on_watermark(MAX_WATERMARK)) == [(0, 10, 9, 2), (10, 20, 19, 1)]


def test_several_key_columns_with_nulls() -> None:
    op = make_op(plan.WindowSpec(kind="tumble", size=10), [A(fn="count_star", arg=None, type=pa.int64())],
                 keys=(K, V))
    op.process(batch([{"ts": 1, "k": "a", "v": None}, {"ts": 2, "k": "a", "v": None}, {"ts": 3, "k": None, "v": 1},
                      {"ts": 4, "k": None, "v": None}, {"ts": 5, "k": "a", "v": 1}]))
    rows = as_rows(op.on_watermark(MAX_WATERMARK))
    assert sorted((r[0] or "", r[1] or 0, r[-1]) for r in rows) == [("", 0, 1), ("", 1, 1), ("a", 0, 2), ("a", 1, 1)]


@pytest.mark.parametrize("window", [plan.WindowSpec(kind="hop", size=10, slide=3),
                                    plan.WindowSpec(kind="cumulate", size=10, slide=4),
                                    plan.WindowSpec(kind="tumble", size=0), plan.WindowSpec(kind="session"),
                                    plan.WindowSpec(kind="sliding", size=5)])
def test_bad_windows_are_rejected(window: plan.WindowSpec) -> None:
    with pytest.raises(ValueError, match="window aggregate 2"):
        make_op(window, [A(fn="count_star", arg=None, type=pa.int64())])


# ---------------------------------------------------------------- sessions


def test_sessions_are_per_key() -> None:
    op = make_op(plan.WindowSpec(kind="session", gap=1_000), [A(fn="count_star", arg=None, type=pa.int64())])
    op.process(batch([{"ts": 0, "k": "a"}, {"ts": 500, "k": "b"}, {"ts": 900, "k": "a"}, {"ts": 1_900, "k": "a"},
                      {"ts": 3_000, "k": "a"}, {"ts": 2_000, "k": "b"}]))
    assert as_rows(op.on_watermark(MAX_WATERMARK)) == [
        ("a", 0, 2_900, 2_899, 3),  # 900 -> 1900 is exactly the gap: one session
        ("a", 3_000, 4_000, 3_999, 1),  # 1900 -> 3000 is more than the gap
        ("b", 500, 1_500, 1_499, 1), ("b", 2_000, 3_000, 2_999, 1)]


def test_a_bridging_event_merges_two_sessions() -> None:
    aggs = [A(fn="count_star", arg=None, type=pa.int64()), A(fn="sum", arg=V, type=pa.int64()),
            A(fn="first_value", arg=V, type=pa.int64()), A(fn="last_value", arg=V, type=pa.int64())]
    op = make_op(plan.WindowSpec(kind="session", gap=5_000), aggs)
    op.process(batch([{"ts": 10_000, "k": "a", "v": 2}, {"ts": 1_000, "k": "b", "v": 7}]))
    op.process(batch([{"ts": 0, "k": "a", "v": 1}]))  # arrives later than the row at 10 000
    assert op.on_watermark(4_000) == []
    op.process(batch([{"ts": 5_500, "k": "a", "v": 4}]))  # 4500 from 10 000: joins that session only
    assert as_rows(op.on_watermark(4_500)) == []
    op.process(batch([{"ts": 4_999, "k": "a", "v": 8}]))  # within the gap of 0 and of 5500
    op.process(batch([{"ts": 9_000, "k": "a", "v": None}]))  # and this one bridges to 10 000
    # first/last value in arrival order: 2 came first, 8 last (NULL is skipped)
    assert as_rows(op.on_watermark(MAX_WATERMARK)) == [("a", 0, 15_000, 14_999, 5, 15, 2, 8),
                                                       ("b", 1_000, 6_000, 5_999, 1, 7, 7, 7)]


def test_a_row_exactly_the_gap_after_a_session_of_an_earlier_batch_joins_it() -> None:
    op = make_op(plan.WindowSpec(kind="session", gap=13), _COUNT_SUM)
    assert op.process(batch([{"ts": -106, "k": "a"}])) == []
    assert op.on_watermark(-107) == []
    op.process(batch([{"ts": -93, "k": "a"}]))  # the held session is [-106, -93): they touch
    assert as_rows(op.on_watermark(MAX_WATERMARK)) == [("a", -106, -80, -81, 2, None)]


def test_a_late_session_event_is_dropped() -> None:
    op = make_op(plan.WindowSpec(kind="session", gap=1_000), [A(fn="count_star", arg=None, type=pa.int64())])
    op.process(batch([{"ts": 0, "k": "a"}]))
    assert as_rows(op.on_watermark(5_000)) == [("a", 0, 1_000, 999, 1)]
    assert op.process(batch([{"ts": 3_999, "k": "a"}, {"ts": 4_500, "k": "a"}])) == []
    assert op.metrics["late_records"] == 1
    assert as_rows(op.on_watermark(MAX_WATERMARK)) == [("a", 4_500, 5_500, 5_499, 1)]


# ---------------------------------------------------------------- allowed lateness


def test_allowed_lateness_re_emits_the_full_updated_row() -> None:
    op = make_op(plan.WindowSpec(kind="tumble", size=10_000), [A(fn="count_star", arg=None, type=pa.int64()),
                                                               A(fn="max", arg=V, type=pa.int64())], lateness=5_000)
    op.process(batch([{"ts": 1_000, "k": "a", "v": 1}, {"ts": 2_000, "k": "b", "v": 1}]))
    assert as_rows(op.on_watermark(12_000)) == [("a", 0, 10_000, 9_999, 1, 1), ("b", 0, 10_000, 9_999, 1, 1)]
    # Within the lateness: only the touched key's row comes again, complete.
    updated = op.process(batch([{"ts": 3_000, "k": "a", "v": 9}, {"ts": 4_000, "k": "a", "v": 2}]))
    assert as_rows(updated) == [("a", 0, 10_000, 9_999, 3, 9)]
    assert op.metrics["late_records"] == 0
    assert op.on_watermark(14_000) == []  # already fired: nothing again
    assert op.state.windows() == [10_000]
    op.on_watermark(15_000)  # end + lateness passed: state freed, later rows are late
    assert op.state.windows() == [] and op.metrics["state_rows"] == 0
    assert op.process(batch([{"ts": 5_000, "k": "a", "v": 1}])) == []
    assert op.metrics["late_records"] == 1


def test_allowed_lateness_for_sessions() -> None:
    op = make_op(plan.WindowSpec(kind="session", gap=1_000), [A(fn="count_star", arg=None, type=pa.int64())],
                 lateness=2_000)
    op.process(batch([{"ts": 0, "k": "a"}]))
    assert as_rows(op.on_watermark(1_500)) == [("a", 0, 1_000, 999, 1)]
    assert as_rows(op.process(batch([{"ts": 500, "k": "a"}]))) == [("a", 0, 1_500, 1_499, 2)]
    assert op.process(batch([{"ts": 1_000, "k": "a"}])) == []  # extends the session past the watermark
    assert as_rows(op.on_watermark(3_000)) == [("a", 0, 2_000, 1_999, 3)]
    op.on_watermark(4_000)
    assert op.metrics["state_rows"] == 0


# ---------------------------------------------------------------- state


BACKENDS = {
    "memory": lambda d: MemoryStateBackend(),
    "sqlite": lambda d: SqliteStateBackend(d),
    "sqlite-spilling": lambda d: SqliteStateBackend(d, table_cache_bytes=1),  # every part goes to disk
}


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_snapshot_restore_and_split_by_key_group(backend: str, tmp_path: Path) -> None:
    window = plan.WindowSpec(kind="hop", size=10_000, slide=5_000)
    aggs = [a for a, _ in ALL_AGGS]
    rows = random_rows(300, seed=3, keys="abcdefgh")
    first, second = [_batch_from(rows, 0, 150)], [_batch_from(rows, 150, 150)]
    expected = as_rows(run_all(make_op(window, aggs), first + second))
    make = BACKENDS[backend]

    op = make_op(window, aggs, backend=make(tmp_path / "a"))
    for b in first:
        op.process(b)
    (tmp_path / "snap").mkdir()
    files, meta = op.snapshot(1, tmp_path / "snap")
    assert op.operator_state.committed_checkpoint == 1
    for b in second:  # changes after the snapshot are not in it
        op.process(b)

    restored = make_op(window, aggs, backend=make(tmp_path / "b"))
    restored.restore(files, meta)
    assert as_rows(run_all(restored, second)) == expected

    groups = {g for b in first for g in _groups_of(b).tolist()}
    half = set(sorted(groups)[: len(groups) // 2])
    outputs = []
    for i, part in enumerate((half, groups - half)):  # two tasks, each with half of the key groups
        task = make_op(window, aggs, backend=make(tmp_path / f"task{i}"))
        task.restore(files, meta, key_groups=part)
        mine = [b.filter(pa.array(np.isin(_groups_of(b), list(part)))) for b in second]
        outputs += run_all(task, mine)
    assert as_rows(outputs) == expected


def _groups_of(b: pa.RecordBatch) -> np.ndarray:
    from clink.runtime.state.keygroups import key_groups

    return key_groups([b.column(K)])


@pytest.mark.parametrize("window", [plan.WindowSpec(kind="hop", size=10_000, slide=5_000),
                                    plan.WindowSpec(kind="session", gap=700)])
def test_merging_in_key_group_slices_gives_the_same_result(window: plan.WindowSpec,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import clink.runtime.operators.window as module

    aggs = [a for a, _ in ALL_AGGS]
    batches = [_batch_from(random_rows(400, seed=11, keys="abcdefghijklmnop"), lo, 50) for lo in range(0, 400, 50)]
    whole = as_rows(run_all(make_op(window, aggs), batches))
    monkeypatch.setattr(module, "_MERGE_ROWS", 7)  # nearly every merge is sliced
    assert as_rows(run_all(make_op(window, aggs), batches)) == whole


def test_compaction_bounds_partials_per_window() -> None:
    op = make_op(plan.WindowSpec(kind="tumble", size=1_000_000), [A(fn="count_star", arg=None, type=pa.int64()),
                                                                  A(fn="last_value", arg=V, type=pa.int64()),
                                                                  A(fn="count_distinct", arg=V, type=pa.int64())])
    for i in range(100):
        op.process(batch([{"ts": i, "k": k, "v": i % 7} for k in "abc"]))
    assert op.metrics["state_rows"] <= 3 * 16
    assert as_rows(op.on_watermark(MAX_WATERMARK)) == [(k, 0, 1_000_000, 999_999, 100, 99 % 7, 7) for k in "abc"]


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_empty_state_snapshot_round_trips(backend: str, tmp_path: Path) -> None:
    op = make_op(plan.WindowSpec(kind="session", gap=10), [A(fn="first_value", arg=V, type=pa.int64())],
                 backend=BACKENDS[backend](tmp_path / "a"))
    (tmp_path / "snap").mkdir()
    files, meta = op.snapshot(1, tmp_path / "snap")
    assert meta == {"watermark": None, "seq": 0}
    other = make_op(plan.WindowSpec(kind="session", gap=10), [A(fn="first_value", arg=V, type=pa.int64())],
                    backend=BACKENDS[backend](tmp_path / "b"))
    other.restore(files, meta)
    assert other.state.num_rows() == 0


# ---------------------------------------------------------------- properties


def _time_window() -> st.SearchStrategy[plan.WindowSpec]:
    def hop(slide: int, n: int, offset: int) -> plan.WindowSpec:
        return plan.WindowSpec(kind="hop", size=slide * n, slide=slide, offset=offset)

    def cumulate(step: int, n: int, offset: int) -> plan.WindowSpec:
        return plan.WindowSpec(kind="cumulate", size=step * n, slide=step, offset=offset)

    small = st.integers(1, 40)
    return st.one_of(
        st.builds(lambda s, o: plan.WindowSpec(kind="tumble", size=s, offset=o), small, st.integers(-50, 50)),
        st.builds(hop, small, st.integers(1, 5), st.integers(-50, 50)),
        st.builds(cumulate, small, st.integers(1, 5), st.integers(-50, 50)),
    )


def _any_window() -> st.SearchStrategy[plan.WindowSpec]:
    return _time_window() | st.builds(lambda g: plan.WindowSpec(kind="session", gap=g), st.integers(1, 40))


_events = st.lists(st.fixed_dictionaries({"ts": st.integers(-200, 200), "k": st.sampled_from(["a", "b", None]),
                                          "v": st.none() | st.integers(-5, 5)}), min_size=1, max_size=60)
_COUNT_SUM = [A(fn="count_star", arg=None, type=pa.int64()), A(fn="sum", arg=V, type=pa.int64())]
_PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_PROPERTY
@given(window=_any_window(), rows=_events, sizes=st.lists(st.integers(1, 20), min_size=1, max_size=8),
       in_order=st.booleans())
def test_batch_boundaries_do_not_change_results(window: plan.WindowSpec, rows: list[dict], sizes: list[int],
                                                in_order: bool) -> None:
    aggs = [*_COUNT_SUM, A(fn="count_distinct", arg=V, type=pa.int64()), A(fn="max", arg=V, type=pa.int64())]
    if in_order:  # FIRST_VALUE / LAST_VALUE take the row-copying path for HOP and CUMULATE
        aggs += [A(fn="first_value", arg=V, type=pa.int64()), A(fn="last_value", arg=V, type=pa.int64())]
    whole = as_rows(run_all(make_op(window, aggs), [batch(rows)]))
    split = as_rows(run_all(make_op(window, aggs), in_batches(rows, sizes)))
    assert split == whole
    assert [r[:6] for r in whole] == python_counts(window, rows)


@_PROPERTY
@given(window=_any_window(), rows=_events, bound=st.integers(0, 50), seed=st.integers(0, 2**16),
       size=st.integers(1, 10))
def test_bounded_disorder_with_watermarks_does_not_change_results(window: plan.WindowSpec, rows: list[dict],
                                                                 bound: int, seed: int, size: int) -> None:
    rng = random.Random(seed)
    # An arrival order in which no event comes after one more than ``bound`` ms younger.
    arrival = sorted(rows, key=lambda r: r["ts"] + rng.uniform(0, bound))
    op = make_op(window, _COUNT_SUM)
    out = as_rows(run_all(op, in_batches(arrival, [size] * len(rows)), watermarks=True, bound=bound))
    assert op.metrics["late_records"] == 0
    assert out == python_counts(window, rows)


@_PROPERTY
@given(window=_time_window(), rows=_events, disorder=st.integers(0, 50), seed=st.integers(0, 2**16),
       size=st.integers(1, 10))
def test_allowed_lateness_covering_the_disorder_ends_with_the_full_results(
        window: plan.WindowSpec, rows: list[dict], disorder: int, seed: int, size: int) -> None:
    rng = random.Random(seed)
    arrival = sorted(rows, key=lambda r: r["ts"] + rng.uniform(0, disorder))
    op = make_op(window, _COUNT_SUM, lateness=disorder)
    latest: dict[tuple, tuple] = {}
    for out in run_all(op, in_batches(arrival, [size] * len(rows)), watermarks=True, bound=0):
        for row in as_rows([out]):
            latest[row[:4]] = row  # an update repeats the whole row; the last one counts
    assert op.metrics["late_records"] == 0
    assert sorted(latest.values(), key=_sort_key) == python_counts(window, rows)


@_PROPERTY
@given(window=_time_window(), ts=st.lists(st.integers(-300, 300), min_size=1, max_size=40))
def test_every_event_lands_in_exactly_the_windows_that_contain_it(window: plan.WindowSpec, ts: list[int]) -> None:
    op = make_op(window, [A(fn="count_star", arg=None, type=pa.int64())], keys=(ID,))
    out = as_rows(run_all(op, [batch({"ts": t} for t in ts)]))
    got: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for event_id, start, end, time_, count in out:
        assert count == 1 and time_ == end - 1 and start <= ts[event_id] < end
        got[event_id].add((start, end))
    assert {i: got[i] for i in range(len(ts))} == {i: set(windows_of(window, t)) for i, t in enumerate(ts)}


@_PROPERTY
@given(window=_any_window(), rows=_events, late=_events, cut=st.integers(-200, 250))
def test_late_events_never_change_emitted_results(window: plan.WindowSpec, rows: list[dict], late: list[dict],
                                                  cut: int) -> None:
    op = make_op(window, _COUNT_SUM)
    op.process(batch(rows))
    fired = as_rows(op.on_watermark(cut))
    op.process(batch(late))
    rest = as_rows(op.on_watermark(MAX_WATERMARK))
    # The late rows are exactly those whose every window had ended; they are in late_rows.
    dropped = [r for b in op.late_rows for r in b.to_pylist()]
    on_time = [r for r in late if not _is_late(window, r, cut)]
    assert op.metrics["late_records"] == len(dropped) == len(late) - len(on_time)
    assert sorted(r["id"] for r in dropped) == [i for i, r in enumerate(late) if _is_late(window, r, cut)]
    # What fired before the late rows arrived is never emitted again.
    assert not set(fired) & set(rest)
    if window.kind != "session":  # sessions may merge across the cut; windows do not
        # A row that is not late still counts only in its windows that had not ended.
        exploded = explode(window, rows) + [r for r in explode(window, on_time) if r["we"] > cut]
        assert sorted(fired + rest, key=_sort_key) == counts_of(exploded)


def _is_late(window: plan.WindowSpec, row: dict, watermark: int) -> bool:
    if window.kind == "session":
        return row["ts"] + window.gap <= watermark
    return all(end <= watermark for _, end in windows_of(window, row["ts"]))
