"""Late events through whole pipelines: dropped and counted, sent to a table, or (within the
allowed lateness) updating a window that already fired."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa

import clink
from clink.runtime.connectors.base import Connector, ConnectorRegistry, OptionSpec, SinkWriter, SourceReader
from clink.runtime.connectors import default_registry
from clink.runtime.context import RuntimeContext

SCHEMA = pa.schema([pa.field("k", pa.int64()), pa.field("ts", pa.timestamp("ms"))])
S = 1000


class BatchesReader(SourceReader):
    """One batch per poll, in the order given: the test decides where watermarks fall."""

    def __init__(self, batches: list[list[tuple[int, int]]], schema: pa.Schema) -> None:
        super().__init__()
        self.batches = [pa.record_batch([pa.array([k for k, _ in b], pa.int64()),
                                         pa.array([t for _, t in b], pa.int64()).cast(pa.timestamp("ms"))],
                                        schema=SCHEMA).select(schema.names) for b in batches]

    def poll(self) -> pa.RecordBatch | None:
        if not self.batches:
            self.finished = True
            return None
        return self.batches.pop(0)


class Collect(SinkWriter):
    rows: list[dict] = []

    def write(self, batch: pa.RecordBatch) -> None:
        Collect.rows.extend(batch.to_pylist())


def registry_over(batches: list[list[tuple[int, int]]]) -> ConnectorRegistry:
    """Connectors for these tests: ``batches`` replays the given batches, ``collect_late``
    keeps what it is written in ``Collect.rows`` (emptied here)."""
    registry = default_registry()
    registry.register(Connector(
        name="batches", description="test batches", source_options=(OptionSpec(name="x", description=""),),
        create_source=lambda spec, ctx: BatchesReader(batches, spec.schema)))
    registry.register(Connector(name="collect_late", description="test sink",
                                sink_options=(OptionSpec(name="x", description=""),),
                                create_sink=lambda spec, ctx: Collect()))
    Collect.rows = []
    return registry


def run(batches: list[list[tuple[int, int]]], *settings: str, late_table: bool = False) -> clink.Result:
    registry = registry_over(batches)
    sql = [
        "CREATE TABLE e (k BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'batches')",
        "CREATE TABLE late_e (k BIGINT, ts TIMESTAMP(3)) WITH ('connector' = 'collect_late')",
        *settings,
        "SELECT k, window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE e, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end, k",
    ]
    return clink.sql(sql, context=RuntimeContext(connectors=registry, stdout=io.StringIO()))


def counts(table: pa.Table) -> list[tuple[int, int, int]]:
    return [(r["k"], int(r["window_start"].timestamp()), r["n"]) for r in table.to_pylist()]


# Window [0, 10 s) fires when the watermark (= the largest ts, no delay) reaches 10 s; the
# event at 3 s that arrives after that is late.
BATCHES = [[(1, 1 * S), (1, 2 * S)], [(1, 12 * S)], [(1, 3 * S)], [(1, 25 * S)]]


def test_late_events_are_dropped_and_counted() -> None:
    result = run(BATCHES)
    assert counts(result.to_arrow()) == [(1, 0, 2), (1, 10, 1), (1, 20, 1)]
    assert sum(result.metrics.late_records.values()) == 1
    assert Collect.rows == []


def test_late_events_can_go_to_a_table() -> None:
    result = run(BATCHES, "SET 'table.exec.late-events' = 'side-output'",
                 "SET 'table.exec.late-events.table' = 'late_e'")
    assert counts(result.to_arrow()) == [(1, 0, 2), (1, 10, 1), (1, 20, 1)]
    assert [(r["k"], r["ts"].second) for r in Collect.rows] == [(1, 3)]


def test_allowed_lateness_updates_a_fired_window() -> None:
    result = run(BATCHES, "SET 'table.exec.allowed-lateness' = '5 s'")
    rows = counts(result.to_arrow())
    # The first result of [0, 10 s) is 2; the late event within 5 s of lateness re-emits it as 3.
    assert rows[:2] == [(1, 0, 2), (1, 0, 3)]
    assert sorted(rows[2:]) == [(1, 10, 1), (1, 20, 1)]
    assert sum(result.metrics.late_records.values()) == 0


def test_an_event_later_than_the_allowed_lateness_is_still_dropped() -> None:
    late = [[(1, 1 * S)], [(1, 30 * S)], [(1, 2 * S)], [(1, 31 * S)]]
    result = run(late, "SET 'table.exec.allowed-lateness' = '5 s'")
    assert counts(result.to_arrow()) == [(1, 0, 1), (1, 30, 2)]
    assert sum(result.metrics.late_records.values()) == 1


def test_over_lets_go_of_late_rows_and_counts_each_once() -> None:
    """An OVER aggregation over 20,000 rows, a third of them behind the watermark: the operator
    holds no late row after any batch (on an endless input they would pile up), and the late
    count is what the data says: a row is late when its time is at or behind the largest time of
    every earlier batch (the watermark is the largest time seen, no delay)."""
    from clink.runtime.executor import Job
    from clink.runtime.operators.over import OverAggregateOperator

    rng = np.random.default_rng(7)
    n, size = 20_000, 500
    times = np.arange(n, dtype=np.int64) * 10 + 100_000
    stragglers = rng.random(n) < 0.35
    times[stragglers] -= rng.integers(1, 20_000, stragglers.sum())
    keys = rng.integers(1, 9, n)
    batches = [list(zip(keys[i:i + size].tolist(), times[i:i + size].tolist(), strict=True))
               for i in range(0, n, size)]
    batch_max = np.array([max(t for _, t in b) for b in batches])
    watermark_before = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(batch_max)[:-1]])
    expected_late = int(sum((times[i * size:(i + 1) * size] <= watermark_before[i]).sum()
                            for i in range(len(batches))))
    assert 3_000 < expected_late < n // 2

    registry = registry_over(batches)
    plan = clink.compile("""
        CREATE TABLE e (k BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'batches');
        CREATE TABLE out (k BIGINT, ts TIMESTAMP(3), n BIGINT, top BIGINT) WITH ('connector' = 'blackhole');
        INSERT INTO out
        SELECT k, ts, COUNT(*) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW),
               MAX(k) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)
        FROM e;
        """, name="over.sql", connectors=registry).runtime_plan
    job = Job(plan, RuntimeContext(connectors=registry, stdout=io.StringIO()))
    (operator,) = [op for op in job._operators.values() if isinstance(op, OverAggregateOperator)]
    seen: list[int] = []
    take = operator.process

    def process(batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]:
        assert operator.late_rows == []  # the previous batch's late rows are gone
        seen.append(batch.num_rows)
        return take(batch, index)

    operator.process = process  # type: ignore[method-assign]
    while not job.finished:
        job.step()
        assert operator.late_rows == []
    assert sum(seen) == n
    job.refresh_metrics()
    assert sum(job.metrics.late_records.values()) == expected_late
    assert job.metrics.records_out == {"out": n - expected_late}


def test_over_late_rows_can_go_to_a_table() -> None:
    """With 'side-output', the late rows of an OVER aggregation go to the late-events table,
    whole, and the rest are aggregated as without it."""
    batches = [[(1, 1 * S), (2, 2 * S)], [(1, 12 * S)], [(1, 3 * S), (2, 14 * S)], [(2, 5 * S)],
               [(1, 25 * S)]]
    registry = registry_over(batches)
    result = clink.sql([
        "CREATE TABLE e (k BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'batches')",
        "CREATE TABLE late_e (k BIGINT, ts TIMESTAMP(3)) WITH ('connector' = 'collect_late')",
        "SET 'table.exec.late-events' = 'side-output'",
        "SET 'table.exec.late-events.table' = 'late_e'",
        "SELECT k, ts, "
        "COUNT(*) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS n FROM e",
    ], context=RuntimeContext(connectors=registry, stdout=io.StringIO()))
    rows = sorted((r["k"], r["ts"].second, r["n"]) for r in result.to_arrow().to_pylist())
    assert rows == [(1, 1, 1), (1, 12, 2), (1, 25, 2), (2, 2, 1), (2, 14, 2)]
    assert sorted((r["k"], r["ts"].second) for r in Collect.rows) == [(1, 3), (2, 5)]
    assert sum(result.metrics.late_records.values()) == 2
