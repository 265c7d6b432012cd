"""OVER aggregation over an updating input (a Top-1 or a GROUP BY below it): the final table the
changes build equals DuckDB's window functions over the input's final rows; and, operator by
operator, every batch of random inserts and retractions leaves results equal to a model that
recomputes every frame from scratch."""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

# tests/shared_duckdb.py: pytest puts tests/ on sys.path, as it holds the root conftest.py.
import shared_duckdb

import clink
from clink.errors import SqlError
from clink.runtime import plan as P
from clink.runtime.context import RuntimeContext, TaskContext
from clink.runtime.operators.over_updating import UpdatingOverOperator
from clink.testing import run_select

N = 3000


def _events() -> pa.Table:
    rng = np.random.default_rng(23)
    base = np.datetime64("2026-01-01T00:00:00", "ms")
    ms = (np.arange(N) * 97 + rng.integers(0, 3000, N)) * 10 + np.arange(N) % 10  # no two rows share a time
    a = rng.integers(0, 400, N)
    return pa.table({
        "a": pa.array(a, pa.int64()),  # an "auction": its rows compete for the Top-1
        "g": pa.array(a % 17, pa.int64()),  # its "seller"
        "v": pa.array(rng.integers(-50, 100, N), pa.int64(), mask=rng.random(N) < 0.1),
        "f": pa.array(rng.permutation(N).astype(np.float64) / 7, pa.float64()),  # unique: no ties in a Top-1
        "ts": pa.array(base + ms.astype("timedelta64[ms]"), pa.timestamp("ms")),
    })


TOP1 = "(SELECT a, g, v, f, ts, ROW_NUMBER() OVER (PARTITION BY a ORDER BY f DESC) AS rn FROM ev) AS w"
TOTALS = "(SELECT a, a % 17 AS g, MAX(ts) AS last_ts, SUM(v) AS total, COUNT(*) AS n FROM ev GROUP BY a) AS t"
QUERIES = [
    # q6's shape: each partition's last 10 winners
    (f"SELECT g, v, AVG(v) OVER (PARTITION BY g ORDER BY ts ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg_v, "
     f"COUNT(v) OVER (PARTITION BY g ORDER BY ts ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS n "
     f"FROM {TOP1} WHERE rn = 1"),
    (f"SELECT a, MIN(f) OVER (PARTITION BY g ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS lo, "
     f"MAX(v) OVER (PARTITION BY g ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS hi "
     f"FROM {TOP1} WHERE rn = 1"),
    # running totals over an aggregate's changing rows
    (f"SELECT a, total, SUM(total) OVER (PARTITION BY g ORDER BY last_ts ROWS BETWEEN UNBOUNDED PRECEDING AND "
     f"CURRENT ROW) AS running, MIN(n) OVER (PARTITION BY g ORDER BY last_ts ROWS BETWEEN UNBOUNDED PRECEDING "
     f"AND CURRENT ROW) AS fewest FROM {TOTALS}"),
    (f"SELECT a, SUM(total) OVER (PARTITION BY g ORDER BY last_ts RANGE BETWEEN INTERVAL '30' SECOND PRECEDING "
     f"AND CURRENT ROW) AS s, MAX(total) OVER (PARTITION BY g ORDER BY last_ts RANGE BETWEEN INTERVAL '30' "
     f"SECOND PRECEDING AND CURRENT ROW) AS top FROM {TOTALS}"),
    # an integer order with peers: a RANGE frame takes them all
    (f"SELECT a, COUNT(*) OVER (PARTITION BY g ORDER BY n) AS c, MAX(total) OVER (PARTITION BY g ORDER BY n) "
     f"AS top FROM {TOTALS}"),
]


def _norm(row: tuple) -> tuple:
    return tuple(round(v, 6) if isinstance(v, float) and not math.isnan(v) else v for v in row)


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_final_table_equals_duckdb(query: str, backend: str) -> None:
    table = _events()
    ours = run_select(query, context=RuntimeContext(config={"state.backend": backend}), row_group_size=97, ev=table)
    con = shared_duckdb.connect()
    con.register("ev", table)
    text = query.replace("INTERVAL '30' SECOND", "INTERVAL 30 SECOND")
    # AVG of the integer v is of v's type, truncated toward zero, as in Flink.
    text = re.sub(r"AVG\(v\) OVER (\([^)]*\))", r"CAST(trunc(SUM(v) OVER \1 / COUNT(v) OVER \1) AS BIGINT)", text)
    theirs = con.execute(text).fetchall()
    assert ours.num_rows == len(theirs) > 0
    assert Counter(_norm(tuple(r.values())) for r in ours.to_pylist()) == Counter(_norm(r) for r in theirs)


# --- the operator against a model -----------------------------------------------------------

SCHEMA = pa.schema([("p", pa.int64()), ("o", pa.int64()), ("v", pa.int64()), (P.ROWKIND_COLUMN, pa.string())])


def _operator(frame: str, preceding: int | None) -> UpdatingOverOperator:
    aggs = (P.AggSpec(fn="sum", arg=2, type=pa.int64()), P.AggSpec(fn="count_star", arg=None, type=pa.int64()),
            P.AggSpec(fn="max", arg=2, type=pa.int64()))
    out = pa.schema([*list(SCHEMA)[:3], ("s", pa.int64()), ("c", pa.int64()), ("m", pa.int64()),
                     (P.ROWKIND_COLUMN, pa.string())])
    node = P.OverAggregate(id=2, input=1, partition=(0,), time=1, frame=frame, preceding=preceding, aggs=aggs,
                           schema=out)
    return UpdatingOverOperator(node, TaskContext(runtime=RuntimeContext(), node_id=2), input_schema=SCHEMA)


def _model(live: list[tuple[tuple[int, int, int], int]], frame: str, preceding: int | None) -> Counter:
    """Every live row with SUM, COUNT(*) and MAX of v over its frame, recomputed from scratch."""
    out: Counter = Counter()
    for p in {row[0] for row, _ in live}:
        rows = sorted(((row, seq) for row, seq in live if row[0] == p), key=lambda x: (x[0][1], x[1]))
        for i, (row, _) in enumerate(rows):
            if frame == "rows":
                lo = 0 if preceding is None else max(0, i - preceding)
                frame_rows = [r for r, _ in rows[lo:i + 1]]
            else:
                frame_rows = [r for r, _ in rows if r[1] <= row[1] and (preceding is None or r[1] >= row[1] - preceding)]
            values = [r[2] for r in frame_rows]
            out[(*row, sum(values), len(values), max(values))] += 1
    return out


ROW = st.tuples(st.integers(0, 2), st.integers(0, 6), st.integers(-5, 5))


@settings(max_examples=60, deadline=None)
# A retraction removes a row inserted before it in its batch, not one inserted after it.
@example(frame=("rows", 2), steps=[[(False, (0, 0, 0), 0)], [(False, (0, 0, 0), 0)] * 7 + [(False, (0, 0, 1), 0)],
                                   [(False, (0, 0, 0), 0)] * 4 + [(True, (0, 0, 0), 0), (True, (0, 0, 1), 0)]])
@given(frame=st.sampled_from([("rows", 2), ("rows", None), ("range", 2), ("range", None)]),
       steps=st.lists(st.lists(st.tuples(st.booleans(), ROW, st.integers(0, 50)), max_size=8), max_size=8))
def test_random_changes_match_a_model(frame: tuple[str, int | None], steps: list) -> None:
    op = _operator(*frame)
    live: list[tuple[tuple[int, int, int], int]] = []
    seq = 0
    result: Counter = Counter()
    for step in steps:
        kinds, rows = [], []
        for insert, row, pick in step:
            if insert or not live:
                kinds.append(P.INSERT)
                rows.append(row)
                live.append((row, seq))
                seq += 1
            else:
                # retract an existing row: the latest of its equals goes
                victim = live[pick % len(live)][0]
                kinds.append(P.DELETE)
                rows.append(victim)
                latest = max((i for i, (r, _) in enumerate(live) if r == victim), key=lambda i: live[i][1])
                live.pop(latest)
        if not rows:
            continue
        batch = pa.RecordBatch.from_arrays([pa.array([r[i] for r in rows], pa.int64()) for i in range(3)]
                                           + [pa.array(kinds)], schema=SCHEMA)
        for out in op.process(batch):
            for r in out.to_pylist():
                sign = 1 if r[P.ROWKIND_COLUMN] in (P.INSERT, P.UPDATE_AFTER) else -1
                result[(r["p"], r["o"], r["v"], r["s"], r["c"], r["m"])] += sign
        assert +result == _model(live, *frame)
        assert all(n >= 0 for n in result.values())


def test_a_retraction_of_an_unknown_row_is_counted_and_ignored() -> None:
    op = _operator("rows", 1)
    batch = pa.RecordBatch.from_arrays([pa.array([1, 1]), pa.array([5, 6]), pa.array([2, 3]),
                                        pa.array([P.INSERT, P.DELETE])], schema=SCHEMA)
    out = [r for b in op.process(batch) for r in b.to_pylist()]
    assert [(r["o"], r["s"], r[P.ROWKIND_COLUMN]) for r in out] == [(5, 2, P.INSERT)]
    assert op.metrics["unmatched_retractions"] == 1


def test_an_update_revises_the_rows_after_it() -> None:
    op = _operator("rows", 1)

    def batch(rows: list[tuple[int, int, str]]) -> list[tuple]:
        b = pa.RecordBatch.from_arrays([pa.array([1] * len(rows)), pa.array([o for o, _, _ in rows]),
                                        pa.array([v for _, v, _ in rows]), pa.array([k for _, _, k in rows])],
                                       schema=SCHEMA)
        return [(r["o"], r["v"], r["s"], r[P.ROWKIND_COLUMN]) for out in op.process(b) for r in out.to_pylist()]

    assert batch([(1, 10, P.INSERT), (2, 20, P.INSERT), (3, 30, P.INSERT)]) == [
        (1, 10, 10, P.INSERT), (2, 20, 30, P.INSERT), (3, 30, 50, P.INSERT)]
    # the first row's value changes: its result and the next row's are revised, the third's frame misses it
    assert batch([(1, 10, P.UPDATE_BEFORE), (1, 15, P.UPDATE_AFTER)]) == [
        (1, 10, 10, P.DELETE), (2, 20, 30, P.UPDATE_BEFORE), (2, 20, 35, P.UPDATE_AFTER), (1, 15, 15, P.INSERT)]


# --- the compiler ---------------------------------------------------------------------------

DDL = ("CREATE TABLE t (k INT, v INT, s STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) "
       "WITH ('connector' = 'datagen');\n")
UPDATING = "(SELECT k, COUNT(*) AS n, MAX(s) AS s, MAX(ts) AS ts FROM t GROUP BY k)"


@pytest.mark.parametrize(("select", "message"), [
    (f"SUM(n) OVER (ORDER BY s) FROM {UPDATING}", "OVER (ORDER BY ...) of a STRING is not supported"),
    (f"SUM(n) OVER (ORDER BY n RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) FROM {UPDATING}",
     "RANGE BETWEEN INTERVAL ... PRECEDING needs ORDER BY a timestamp"),
    (f"SUM(n) OVER (ORDER BY ts DESC) FROM {UPDATING}", "needs ORDER BY one column, ascending"),
])
def test_unsupported_updating_windows_are_refused_with_a_position(select: str, message: str) -> None:
    script = DDL + f"SELECT k, {select};\n"
    with pytest.raises(SqlError) as info:
        clink.compile(script, name="p.sql")
    text = info.value.render({"p.sql": script})
    assert message in text and "p.sql:2:" in text


def test_an_updating_over_is_explained_as_producing_updates() -> None:
    explained = clink.compile(DDL + f"SELECT k, SUM(n) OVER (ORDER BY ts) FROM {UPDATING};\n").explain()
    assert "changelog=[+I, -U, +U, -D])" in explained.split("OverAggregate(", 1)[1].split("\n", 1)[0]
    assert "OverAggregate RANGE" in explained and "produces updates" in explained.split("] OverAggregate", 1)[1]


def test_state_ttl_forgets_rows_stored_longer_ago() -> None:
    now = [0]
    aggs = (P.AggSpec(fn="count_star", arg=None, type=pa.int64()),)
    out = pa.schema([*list(SCHEMA)[:3], ("c", pa.int64()), (P.ROWKIND_COLUMN, pa.string())])
    node = P.OverAggregate(id=2, input=1, partition=(0,), time=1, frame="rows", preceding=None, aggs=aggs, schema=out)
    op = UpdatingOverOperator(node, TaskContext(runtime=RuntimeContext(clock=lambda: now[0]), node_id=2),
                              input_schema=SCHEMA, ttl_ms=1000)

    def send(rows: list[tuple[int, int]]) -> list[tuple]:
        batch = pa.RecordBatch.from_arrays([pa.array([1] * len(rows), pa.int64()), pa.array([o for o, _ in rows]),
                                            pa.array([v for _, v in rows]), pa.array([P.INSERT] * len(rows))],
                                           schema=SCHEMA)
        return [(r["o"], r["c"], r[P.ROWKIND_COLUMN]) for b in op.process(batch) for r in b.to_pylist()]

    assert send([(1, 10), (2, 20)]) == [(1, 1, P.INSERT), (2, 2, P.INSERT)]
    now[0] = 1500  # both rows are older than the TTL: the partition starts afresh
    assert send([(3, 30)]) == [(3, 1, P.INSERT)]
    assert op.metrics["state_rows"] == 1
