"""A window aggregation split in two phases gives what one phase gives.

Before the exchange each subtask turns its rows into partial aggregates per key and pane
(``WindowPreAggregation``); the window aggregation merges them. For every window kind that splits
(tumble, hop, cumulate), keyed and not, with FILTER, AVG, MIN/MAX over timestamps and sums of
floats, over rows out of order and watermarks that make some late: the same windows, the same
values, and the same state layout (a checkpoint of either restores into the other)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import clink
from clink.runtime import plan as P
from clink.runtime.context import RuntimeContext, TaskContext
from clink.runtime.operators import kind_of
from clink.runtime.operators.window import WindowAggregateOperator, window_partial_schema

SCHEMA = pa.schema([("k", pa.int64()), ("ts", pa.timestamp("ms")), ("price", pa.int64()), ("cheap", pa.bool_()),
                    ("score", pa.float64())])
AGGS = (
    P.AggSpec(fn="count_star", arg=None, type=pa.int64(), name="n"),
    P.AggSpec(fn="max", arg=2, type=pa.int64(), name="top"),
    P.AggSpec(fn="avg", arg=2, type=pa.int64(), name="mean"),
    P.AggSpec(fn="count_star", arg=None, type=pa.int64(), filter=3, name="cheap_n"),
    P.AggSpec(fn="min", arg=1, type=pa.timestamp("ms"), name="first_ts"),
    P.AggSpec(fn="sum", arg=4, type=pa.float64(), name="score_sum"),
    P.AggSpec(fn="count", arg=4, type=pa.int64(), name="scored"),
)
WINDOWS = {
    "tumble": P.WindowSpec(kind="tumble", size=10),
    "hop": P.WindowSpec(kind="hop", size=12, slide=4, offset=-2),
    "cumulate": P.WindowSpec(kind="cumulate", size=12, slide=3),
}


def _batches(seed: int, count: int, keys: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    out = []
    for b in range(count):
        n = int(rng.integers(1, 300))
        ts = rng.integers(b * 20 - 25, b * 20 + 30, n)  # out of order, some behind the watermark
        score = rng.random(n)
        out.append(pa.record_batch([
            pa.array(rng.integers(0, keys, n)),
            pa.array(ts, mask=rng.random(n) < 0.02).cast(pa.timestamp("ms")),  # a few without a time
            pa.array(rng.integers(0, 100, n), mask=rng.random(n) < 0.1),
            pa.array(rng.random(n) < 0.5),
            pa.array(score, mask=rng.random(n) < 0.2)], schema=SCHEMA))
    return out


def _sorted(batches: list[pa.RecordBatch], keyed: bool) -> pa.Table:
    table = pa.Table.from_batches(batches, schema=batches[0].schema) if batches else None
    order = ([("k", "ascending")] if keyed else []) + [("window_start", "ascending"), ("window_end", "ascending")]
    return table.sort_by(order)


@pytest.mark.parametrize("kind", list(WINDOWS))
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@given(seed=st.integers(0, 2**32 - 1), lateness=st.sampled_from([0, 7]))
def test_two_phases_give_the_windows_of_one(kind: str, keyed: bool, seed: int, lateness: int) -> None:
    keys = (0,) if keyed else ()
    spec = WINDOWS[kind]
    out_schema = P._window_output_schema(SCHEMA, 1, keys, AGGS)
    node = P.WindowAggregate(id=1, input=0, window=spec, time=1, keys=keys, aggs=AGGS, schema=out_schema,
                             allowed_lateness=lateness)
    partials = window_partial_schema(node, SCHEMA)
    first = P.preaggregate_window(window=spec, time=1, keys=keys, aggs=AGGS, input_schema=SCHEMA, schema=partials)
    merged = P.WindowAggregate(id=1, input=0, window=spec, time=1, keys=keys, aggs=AGGS, schema=out_schema,
                               allowed_lateness=lateness, raw_schema=SCHEMA)

    def task() -> TaskContext:
        return TaskContext(runtime=RuntimeContext(), node_id=1)

    one = WindowAggregateOperator(node, task(), input_schema=SCHEMA)
    two = WindowAggregateOperator(merged, task(), input_schema=partials)
    # Two subtasks before the exchange, each with its own first phase.
    senders = [task(), TaskContext(runtime=RuntimeContext(), node_id=1, subtask=1, parallelism=2)]
    got_one: list[pa.RecordBatch] = []
    got_two: list[pa.RecordBatch] = []
    for i, batch in enumerate(_batches(seed, 12, 5 if keyed else 1)):
        got_one += one.process(batch)
        got_two += two.process(first(batch, senders[i % 2]))
        if i % 3 == 2:
            got_one += one.on_watermark(i * 20)
            got_two += two.on_watermark(i * 20)
    got_one += one.on_watermark(2**62)
    got_two += two.on_watermark(2**62)
    assert got_one, "no window fired"
    assert _sorted(got_two, keyed).equals(_sorted(got_one, keyed))
    assert two.metrics["late_records"] == one.metrics["late_records"]
    # The same state, meaning the same: a checkpoint of either restores into the other.
    assert two.descriptor.signature() == one.descriptor.signature()
    assert kind_of(merged).describe(merged, (partials,), two) == kind_of(node).describe(node, (SCHEMA,), one)


@pytest.mark.parametrize(("select", "splits"), [
    ("COUNT(*), MAX(price), AVG(price), MIN(ts)", True),
    ("COUNT(*) FILTER (WHERE price > 10), SUM(price)", True),
    ("COUNT(DISTINCT price)", False),  # distinct values do not merge per pane
    ("FIRST_VALUE(price)", False),  # nor does arrival order
    ("STDDEV_POP(price)", False),
])
def test_the_plan_splits_what_merges(select: str, splits: bool) -> None:
    sql = ("CREATE TABLE bid (k BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) "
           "WITH ('connector' = 'datagen', 'number-of-rows' = '10');\n"
           f"SELECT k, window_start, {select} FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' SECOND)) "
           "GROUP BY k, window_start, window_end;")
    explain = clink.compile(sql).explain()
    assert ("PreAggregate TUMBLE" in explain) == splits, explain
    assert ("Exchange hash(k) <- [3]" in explain) == splits


def test_session_windows_and_late_rows_kept_in_a_table_do_not_split() -> None:
    ddl = ("CREATE TABLE bid (k BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) "
           "WITH ('connector' = 'datagen', 'number-of-rows' = '10');\n")
    session = ("SELECT k, window_start, COUNT(*) FROM TABLE(SESSION(TABLE bid PARTITION BY k, DESCRIPTOR(ts), "
               "INTERVAL '1' SECOND)) GROUP BY k, window_start, window_end;")
    assert "PreAggregate" not in clink.compile(ddl + session).explain()
    kept = ("SET 'table.exec.late-events' = 'side-output';\nSET 'table.exec.late-events.table' = 'late_bids';\n"
            "CREATE TABLE late_bids (k BIGINT, price BIGINT, ts TIMESTAMP(3)) WITH ('connector' = 'blackhole');\n"
            "SELECT k, window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' SECOND)) "
            "GROUP BY k, window_start, window_end;")
    assert "PreAggregate" not in clink.compile(ddl + kept).explain()  # late rows leave whole
