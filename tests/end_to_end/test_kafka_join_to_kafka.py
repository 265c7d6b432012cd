"""Pipeline B, end to end under crashes: orders and payments from two Kafka topics (JSON, event
time with watermarks), joined by an interval join on the order id (a payment within 30 seconds
of its order), written to a Kafka topic with 'sink.delivery-guarantee' = 'exactly-once'.
`clink run` is killed with SIGKILL at each point of the checkpoint protocol, and in the soak test
at random moments, and restarted from its state directory until it ends: the messages committed
to the output topic (read with read_committed) are then, as a multiset, an uninterrupted run's,
which are DuckDB's rows for the same join."""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import shared_duckdb
from tests.end_to_end.harness import FAULT_POINTS, kill_at, run_to_end, soak

ORDER_PARTITIONS = 3
PAYMENT_PARTITIONS = 2

# Small fetches ('fetch.max.bytes'): the broker then hands over some thirty messages of each
# partition in turn instead of a whole partition at once, so the watermark, and the output,
# move on all through the run, and a kill at the third checkpoint finds output committed.
SQL = """
SET 'execution.checkpointing.interval-rows' = '{every}';
SET 'parallelism.default' = '{parallelism}';
CREATE TABLE orders (order_id BIGINT, customer STRING, cents BIGINT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
WITH ('connector' = 'kafka', 'topic' = '{orders}', 'properties.bootstrap.servers' = '{servers}',
  'format' = 'json', 'properties.max.poll.records' = '50', 'scan.startup.mode' = 'earliest-offset',
  'properties.fetch.max.bytes' = '2048', 'properties.message.max.bytes' = '2048',
  'scan.bounded.mode' = 'latest-offset');
CREATE TABLE payments (order_id BIGINT, method STRING, cents BIGINT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
WITH ('connector' = 'kafka', 'topic' = '{payments}', 'properties.bootstrap.servers' = '{servers}',
  'format' = 'json', 'properties.max.poll.records' = '50', 'scan.startup.mode' = 'earliest-offset',
  'properties.fetch.max.bytes' = '2048', 'properties.message.max.bytes' = '2048',
  'scan.bounded.mode' = 'latest-offset');
CREATE TABLE paid (order_id BIGINT, customer STRING, method STRING, ordered BIGINT, paid BIGINT,
  ordered_at TIMESTAMP(3), paid_at TIMESTAMP(3))
WITH ('connector' = 'kafka', 'topic' = '{sink}', 'properties.bootstrap.servers' = '{servers}', 'format' = 'json',
  'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = '{prefix}');
INSERT INTO paid
SELECT o.order_id, o.customer, p.method, o.cents, p.cents, o.ts, p.ts
FROM orders AS o JOIN payments AS p
  ON o.order_id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '30' SECOND;
"""

ORACLE = """
SELECT o.order_id, o.customer, p.method, o.cents, p.cents, o.ts, p.ts
FROM orders AS o JOIN payments AS p
  ON o.order_id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL 30 SECOND
"""


def _text(ts: dt.datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


class Input:
    """Two topics holding orders and payments, each partition in event-time order (so no row is
    late and the join's output does not depend on the batches), and both as tables for DuckDB.

    An order every 40 ms; it gets no payment, one or two, 0 to 45 s after it (so some fall
    outside the join's 30 s), a few with no method; order ids repeat now and then, so a payment
    may meet two orders."""

    def __init__(self, broker, orders: int, seed: int) -> None:
        rng = random.Random(seed)
        start = dt.datetime(2024, 5, 1, 12)
        order_rows, payment_rows = [], []
        for i in range(orders):
            ts = start + dt.timedelta(milliseconds=40 * i)
            order_id = rng.randrange(i + 1) if rng.random() < 0.05 else i
            order_rows.append({"order_id": order_id, "customer": f"c{rng.randrange(50)}",
                               "cents": rng.randrange(100, 100_000), "ts": ts})
            for _ in range(rng.choice([0, 1, 1, 1, 2])):
                payment_rows.append({"order_id": order_id, "method": rng.choice(["card", "cash", "iou", None]),
                                     "cents": rng.randrange(100, 100_000),
                                     "ts": ts + dt.timedelta(milliseconds=rng.randrange(45_000))})
        payment_rows.sort(key=lambda r: r["ts"])
        self.orders = broker.topic(partitions=ORDER_PARTITIONS)
        self.payments = broker.topic(partitions=PAYMENT_PARTITIONS)
        for topic, rows, partitions in ((self.orders, order_rows, ORDER_PARTITIONS),
                                        (self.payments, payment_rows, PAYMENT_PARTITIONS)):
            for p in range(partitions):
                broker.produce(topic, [(None, json.dumps({**r, "ts": _text(r["ts"])}).encode())
                                       for r in rows if r["order_id"] % partitions == p], partition=p)
        schema = {"order_id": pa.int64(), "cents": pa.int64(), "ts": pa.timestamp("ms")}
        self.tables = {name: pa.Table.from_pylist(rows, pa.schema([(k, schema.get(k, pa.string())) for k in rows[0]]))
                       for name, rows in (("orders", order_rows), ("payments", payment_rows))}


def pipeline(broker, source: Input, folder: Path, *, every: int, parallelism: int = 1) -> tuple[Path, str]:
    sink = broker.topic(partitions=1)
    folder.mkdir(parents=True, exist_ok=True)
    sql_file = folder / "pipeline.sql"
    sql_file.write_text(SQL.format(every=every, parallelism=parallelism, orders=source.orders,
                                   payments=source.payments, servers=broker.servers, sink=sink,
                                   prefix=f"tx-{uuid.uuid4().hex[:8]}"))
    return sql_file, sink


def committed(broker, topic: str) -> Counter:
    """The committed messages' values, as a multiset."""
    return Counter(m[3] for m in broker.read(topic, committed=True, quiet_s=0.5))


@pytest.fixture(scope="module")
def small(broker) -> Input:
    return Input(broker, orders=1000, seed=1)


@pytest.fixture(scope="module")
def reference(broker, tmp_path_factory: pytest.TempPathFactory):
    """An uninterrupted run's committed messages per input, checked against DuckDB."""
    done: dict = {}

    def of(source: Input) -> Counter:
        if source.orders not in done:
            sql_file, sink = pipeline(broker, source, tmp_path_factory.mktemp("reference"), every=100)
            run_to_end(sql_file, sql_file.parent / "state")
            done[source.orders] = committed(broker, sink)
            con = shared_duckdb.connect()
            for name, table in source.tables.items():
                con.register(name, table)
            theirs = Counter(tuple(r) for r in con.execute(ORACLE).fetchall())
            ours = Counter((v["order_id"], v["customer"], v["method"], v["ordered"], v["paid"],
                            dt.datetime.fromisoformat(v["ordered_at"]), dt.datetime.fromisoformat(v["paid_at"]))
                           for v in (json.loads(m) for m in done[source.orders].elements()))
            assert sum(theirs.values()) > 500
            assert ours == theirs
        return done[source.orders]

    return of


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_kill_at_each_point_of_the_protocol_commits_each_row_once(broker, small, reference, tmp_path: Path,
                                                                   point: str) -> None:
    sql_file, sink = pipeline(broker, small, tmp_path, every=100)
    kill_at(sql_file, tmp_path / "state", point, partial=lambda: 0 < committed(broker, sink).total() < reference(small).total())
    assert committed(broker, sink) == reference(small)


@pytest.mark.slow
@pytest.mark.parametrize("parallelism", [2, 4])
@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_kill_at_each_point_at_several_subtasks_commits_each_row_once(broker, small, reference, tmp_path: Path,
                                                                       point: str, parallelism: int) -> None:
    sql_file, sink = pipeline(broker, small, tmp_path, every=100, parallelism=parallelism)
    kill_at(sql_file, tmp_path / "state", point, partial=lambda: 0 < committed(broker, sink).total() < reference(small).total())
    assert committed(broker, sink) == reference(small)


@pytest.fixture(scope="module")
def large(broker) -> Input:
    return Input(broker, orders=8000, seed=2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_ten_random_kills_in_one_run_commit_each_row_once(broker, large, reference, tmp_path: Path,
                                                         seed: int) -> None:
    """On Tansu the committed output may hold a checkpoint's rows twice where a kill fell inside the
    sink's transaction: the restored job aborts it and commits the checkpoint's staged rows again,
    and Tansu, unlike Apache Kafka, shows the aborted transaction's messages to read_committed
    readers. So here: no row is missing, and every extra row is one of a checkpoint a restart
    committed from the staged file (on Apache Kafka the aborted copy is hidden and the output is
    exact, as at the named fault points above, which never fall inside a transaction)."""
    sql_file, sink = pipeline(broker, large, tmp_path, every=50)
    state = tmp_path / "state"
    recommitted: Counter = Counter()

    def note_staged() -> None:
        from clink.runtime.connectors.kafka_formats import encode

        for path in state.glob("kafka-sink/*/chk-*.arrow"):
            with pa.memory_map(str(path)) as source:
                recommitted.update(encode("json", pa.ipc.open_file(source).read_all()))

    landed = soak(sql_file, state, random.Random(seed), kills=10, before_run=note_staged)
    assert landed >= 10, f"only {landed} kills landed before the input ran out: the test proved less than it says"
    output, expected = committed(broker, sink), reference(large)
    assert not expected - output, "rows are missing"
    assert not (output - expected) - recommitted, "rows repeat that no restart committed from a staged checkpoint"
