"""The kafka connector against a real broker: formats, startup and bounded modes, metadata,
keys, and the sink's delivery guarantees. Every test reads what clink wrote back from the broker,
or feeds clink what it wrote to the broker itself."""

from __future__ import annotations

import json
from collections import Counter

import pytest

import clink


def kafka_ddl(name: str, columns: str, topic: str, servers: str, **options: str) -> str:
    opts = {"connector": "kafka", "topic": topic, "properties.bootstrap.servers": servers, **options}
    return f"CREATE TABLE {name} ({columns}) WITH ({', '.join(f'{k!r} = {v!r}' for k, v in opts.items())})"


def test_json_round_trip(broker, tmp_path) -> None:
    topic = broker.topic(partitions=2)
    rows = [{"k": i, "s": None if i % 3 == 0 else f"s{i}"} for i in range(20)]
    broker.produce(topic, [(None, json.dumps(r).encode()) for r in rows])
    ddl = kafka_ddl("t", "k BIGINT, s STRING", topic, broker.servers, format="json",
                    **{"scan.startup.mode": "earliest-offset", "scan.bounded.mode": "latest-offset"})
    got = clink.sql([ddl, "SELECT k, s FROM t"]).to_pylist()
    assert sorted(got, key=lambda r: r["k"]) == rows


def test_metadata_columns_partition_offset_timestamp(broker) -> None:
    topic = broker.topic(partitions=2)
    broker.produce(topic, [(None, b'{"v": "a"}'), (None, b'{"v": "b"}')], partition=1, timestamps=[1000, 2500])
    broker.produce(topic, [(None, b'{"v": "c"}')], partition=0, timestamps=[4000])
    ddl = kafka_ddl("t", "v STRING, p INT METADATA FROM 'partition' VIRTUAL, `offset` BIGINT METADATA VIRTUAL, "
                         "ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp'", topic, broker.servers, format="json",
                    **{"scan.startup.mode": "earliest-offset", "scan.bounded.mode": "latest-offset"})
    got = clink.sql([ddl, "SELECT v, p, `offset`, CAST(ts AS STRING) AS ts FROM t"]).to_pylist()
    assert sorted(got, key=lambda r: r["v"]) == [
        {"v": "a", "p": 1, "offset": 0, "ts": "1970-01-01 00:00:01.000"},
        {"v": "b", "p": 1, "offset": 1, "ts": "1970-01-01 00:00:02.500"},
        {"v": "c", "p": 0, "offset": 0, "ts": "1970-01-01 00:00:04.000"},
    ]


@pytest.mark.parametrize("topics", [1, 2])
def test_metadata_of_one_partition_and_of_several_topics(broker, topics: int) -> None:
    # One topic of one partition: the source knows every message's topic and partition without
    # asking it; several topics: it asks each message.
    names = [broker.topic(partitions=1) for _ in range(topics)]
    for t, name in enumerate(names):
        broker.produce(name, [(None, json.dumps({"v": f"{t}-{i}"}).encode()) for i in range(3)])
    ddl = kafka_ddl("t", "v STRING, tp STRING METADATA FROM 'topic' VIRTUAL, p INT METADATA FROM 'partition' "
                         "VIRTUAL, `offset` BIGINT METADATA VIRTUAL", ";".join(names), broker.servers,
                    format="json", **{"scan.startup.mode": "earliest-offset", "scan.bounded.mode": "latest-offset"})
    got = clink.sql([ddl, "SELECT v, tp, p, `offset` FROM t"]).to_pylist()
    assert sorted(got, key=lambda r: r["v"]) == [
        {"v": f"{t}-{i}", "tp": name, "p": 0, "offset": i} for t, name in enumerate(names) for i in range(3)]


def test_metadata_of_an_unknown_key_is_a_positioned_error(broker) -> None:
    ddl = kafka_ddl("t", "v STRING, h STRING METADATA FROM 'nope'", "x", broker.servers, format="json")
    with pytest.raises(clink.SqlError) as info:
        clink.sql([ddl, "SELECT v FROM t"])
    assert "no metadata 'nope'" in str(info.value) and info.value.span.line == 1


def test_metadata_on_a_connector_without_any_is_refused() -> None:
    with pytest.raises(clink.SqlError, match="has no metadata"):
        clink.sql(["CREATE TABLE t (v BIGINT, o BIGINT METADATA FROM 'offset') WITH ('connector' = 'datagen')",
                   "SELECT v FROM t"])


BOUNDED = {"scan.startup.mode": "earliest-offset", "scan.bounded.mode": "latest-offset"}
COLUMNS = "id BIGINT, name STRING, price DOUBLE, ts TIMESTAMP(3), ok BOOLEAN"
ROWS = [(1, "a,b", 1.5, "2024-01-01 10:00:00.250", True), (2, None, None, None, None),
        (3, 'say "hi"', -2.0, "2024-02-29 23:59:59.000", False), (4, "", 0.0, "1999-12-31 00:00:00.000", True)]


def values_sql(rows) -> str:
    def lit(v, i):
        if v is None:
            return ["CAST(NULL AS BIGINT)", "CAST(NULL AS STRING)", "CAST(NULL AS DOUBLE)",
                    "CAST(NULL AS TIMESTAMP(3))", "CAST(NULL AS BOOLEAN)"][i]
        if i == 3:
            return f"TIMESTAMP '{v}'"
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        return str(v).upper() if isinstance(v, bool) else repr(v)
    return "VALUES " + ", ".join("(" + ", ".join(lit(v, i) for i, v in enumerate(r)) + ")" for r in rows)


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_sink_then_source_round_trip_of_each_format(broker, fmt: str) -> None:
    """clink writes the rows to a topic and reads them back; json's text is Flink's too."""
    topic = broker.topic(partitions=3)
    sink = kafka_ddl("out", COLUMNS, topic, broker.servers, format=fmt)
    clink.sql([sink, f"INSERT INTO out SELECT * FROM ({values_sql(ROWS)}) AS v(id, name, price, ts, ok)"]).run()
    messages = broker.read(topic)
    assert len(messages) == len(ROWS)
    if fmt == "json":
        decoded = sorted((json.loads(m[3]) for m in messages), key=lambda r: r["id"])
        assert decoded[0] == {"id": 1, "name": "a,b", "price": 1.5, "ts": "2024-01-01 10:00:00.250", "ok": True}
        assert decoded[1] == {"id": 2, "name": None, "price": None, "ts": None, "ok": None}
    else:
        texts = sorted(m[3] for m in messages)
        assert b'3,"say ""hi""",-2,2024-02-29 23:59:59.000,false' in texts or \
            b'3,"say ""hi""",-2.0,2024-02-29 23:59:59.000,false' in texts
    # Messages written one batch per request report their end offset loosely on Tansu: read
    # unbounded until every row came, then stop.
    source = kafka_ddl("src", COLUMNS, topic, broker.servers, format=fmt, **{"scan.startup.mode": "earliest-offset"})
    result = clink.sql([source, "SELECT id, name, price, CAST(ts AS STRING) AS ts, ok FROM src"])
    got = []
    for batch in result.batches():
        got.extend(batch.to_pylist())
        if len(got) >= len(ROWS):
            break
    got.sort(key=lambda r: r["id"])
    expected = [dict(zip(["id", "name", "price", "ts", "ok"], r, strict=True)) for r in ROWS]
    if fmt == "csv":
        # NULL is written as an empty field, which a STRING column reads as an empty string
        # (Flink's CSV format without 'csv.null-literal' does the same).
        expected[1]["name"] = ""
    assert got == expected


def test_raw_format_round_trip(broker) -> None:
    topic = broker.topic()
    broker.produce(topic, [(None, "ä line".encode()), (None, b"plain"), (None, b"")])
    ddl = kafka_ddl("t", "line STRING", topic, broker.servers, format="raw", **BOUNDED)
    assert sorted(r["line"] for r in clink.sql([ddl, "SELECT line FROM t"]).to_pylist()) == ["", "plain", "ä line"]
    out = broker.topic()
    clink.sql([kafka_ddl("o", "b BYTES", out, broker.servers, format="raw"),
               "INSERT INTO o SELECT CAST(x AS BYTES) FROM (VALUES ('p'), ('q')) AS v(x)"]).run()
    assert sorted(m[3] for m in broker.read(out)) == [b"p", b"q"]


def _partition_of_five(broker, topic: str) -> None:
    broker.produce(topic, [(None, json.dumps({"n": n}).encode()) for n in range(5)], partition=0,
                   timestamps=[1000 * (n + 1) for n in range(5)])


@pytest.mark.parametrize(("options", "expected"), [
    ({"scan.startup.mode": "earliest-offset"}, [0, 1, 2, 3, 4]),
    ({"scan.startup.mode": "specific-offsets", "scan.startup.specific-offsets": "partition:0,offset:3"}, [3, 4]),
    ({"scan.startup.mode": "timestamp", "scan.startup.timestamp-millis": "2500"}, [2, 3, 4]),
    ({"scan.startup.mode": "timestamp", "scan.startup.timestamp-millis": "3000"}, [2, 3, 4]),
])
def test_startup_modes(broker, options: dict, expected: list[int]) -> None:
    topic = broker.topic()
    _partition_of_five(broker, topic)
    ddl = kafka_ddl("t", "n BIGINT", topic, broker.servers, format="json",
                    **{"scan.bounded.mode": "latest-offset", **options})
    assert sorted(r["n"] for r in clink.sql([ddl, "SELECT n FROM t"]).to_pylist()) == expected


@pytest.mark.parametrize(("options", "expected"), [
    ({"scan.bounded.mode": "specific-offsets", "scan.bounded.specific-offsets": "partition:0,offset:2"}, [0, 1]),
    ({"scan.bounded.mode": "timestamp", "scan.bounded.timestamp-millis": "3000"}, [0, 1]),
    ({"scan.bounded.mode": "timestamp", "scan.bounded.timestamp-millis": "3001"}, [0, 1, 2]),
    ({"scan.bounded.mode": "latest-offset"}, [0, 1, 2, 3, 4]),
])
def test_bounded_modes(broker, options: dict, expected: list[int]) -> None:
    topic = broker.topic()
    _partition_of_five(broker, topic)
    ddl = kafka_ddl("t", "n BIGINT", topic, broker.servers, format="json",
                    **{"scan.startup.mode": "earliest-offset", **options})
    assert sorted(r["n"] for r in clink.sql([ddl, "SELECT n FROM t"]).to_pylist()) == expected


def test_latest_offset_startup_reads_only_what_comes_after(broker) -> None:
    topic = broker.topic()
    _partition_of_five(broker, topic)
    ddl = kafka_ddl("t", "n BIGINT", topic, broker.servers, format="json", **{"scan.startup.mode": "latest-offset"})
    result = clink.sql([ddl, "SELECT n FROM t"])
    batches = result.batches()
    broker.produce(topic, [(None, b'{"n": 99}')], partition=0)
    assert next(batches).to_pylist() == [{"n": 99}]


def test_group_offsets_start_where_the_group_committed(broker, tmp_path) -> None:
    topic = broker.topic()
    _partition_of_five(broker, topic)
    consumer = __import__("confluent_kafka").Consumer({"bootstrap.servers": broker.servers, "group.id": "g-start"})
    consumer.commit(offsets=[__import__("confluent_kafka").TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    ddl = kafka_ddl("t", "n BIGINT", topic, broker.servers, format="json",
                    **{"properties.group.id": "g-start", "scan.bounded.mode": "latest-offset"})
    assert sorted(r["n"] for r in clink.sql([ddl, "SELECT n FROM t"]).to_pylist()) == [2, 3, 4]
    ddl = kafka_ddl("u", "n BIGINT", topic, broker.servers, format="json",
                    **{"properties.group.id": "g-none", "scan.bounded.mode": "latest-offset"})
    with pytest.raises(clink.ClinkError, match="auto.offset.reset"):
        clink.sql([ddl, "SELECT n FROM u"]).to_pylist()


def test_key_fields_are_written_to_and_read_from_the_key(broker) -> None:
    topic = broker.topic(partitions=2)
    options = {"key.format": "json", "key.fields": "id", "value.format": "json", "value.fields-include": "EXCEPT_KEY"}
    clink.sql([kafka_ddl("o", "id BIGINT, v STRING", topic, broker.servers, **options),
               "INSERT INTO o VALUES (1, 'x'), (2, 'y')"]).run()
    messages = broker.read(topic)
    assert sorted(((json.loads(m[2]), json.loads(m[3])) for m in messages), key=lambda kv: kv[0]["id"]) == [
        ({"id": 1}, {"v": "x"}), ({"id": 2}, {"v": "y"})]
    ddl = kafka_ddl("t", "id BIGINT, v STRING", topic, broker.servers, **options,
                    **{"scan.startup.mode": "earliest-offset"})
    result = clink.sql([ddl, "SELECT v, id FROM t"]).batches()
    got = []
    while len(got) < 2:
        got.extend(next(result).to_pylist())
    assert sorted(got, key=lambda r: r["id"]) == [{"v": "x", "id": 1}, {"v": "y", "id": 2}]


def test_bad_record_names_topic_partition_and_offset(broker) -> None:
    topic = broker.topic()
    broker.produce(topic, [(None, b'{"n": 1}'), (None, b'{"n": oops}'), (None, b'{"n": 3}')], partition=0)
    ddl = kafka_ddl("t", "n BIGINT", topic, broker.servers, format="json", **BOUNDED)
    with pytest.raises(clink.ClinkError) as info:
        clink.sql([ddl, "SELECT n FROM t"]).to_pylist()
    assert f"{topic}/0:1" in str(info.value)


def test_an_updating_query_into_plain_kafka_points_to_upsert_kafka(broker) -> None:
    with pytest.raises(clink.SqlError, match="upsert-kafka"):
        clink.sql([kafka_ddl("o", "k BIGINT, n BIGINT", "x", broker.servers, format="json"),
                   "INSERT INTO o SELECT k, COUNT(*) FROM (VALUES (1), (1), (2)) AS v(k) GROUP BY k"])


@pytest.mark.parametrize("fmt", ["maxwell-json", "avro"])
def test_formats_not_implemented_are_refused_at_their_option(broker, fmt: str) -> None:
    with pytest.raises(clink.SqlError, match="not implemented") as info:
        clink.sql([kafka_ddl("t", "n BIGINT", "x", broker.servers, format=fmt), "SELECT n FROM t"])
    assert info.value.span is not None


def test_upsert_kafka_sink_writes_keys_and_tombstones(broker) -> None:
    topic = broker.topic()
    ddl = ("CREATE TABLE counts (k BIGINT, n BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH ("
           f"'connector' = 'upsert-kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{broker.servers}', "
           "'key.format' = 'json', 'value.format' = 'json')")
    # A Top-1 per group retracts the old leader: deletes reach the sink as tombstones.
    clink.sql([ddl, "INSERT INTO counts SELECT k, COUNT(*) FROM (VALUES (1), (1), (2)) AS v(k) GROUP BY k"]).run()
    latest = {}
    for _, _, key, value in broker.read(topic):
        latest[json.loads(key)["k"]] = None if value is None else json.loads(value)
    assert latest == {1: {"k": 1, "n": 2}, 2: {"k": 2, "n": 1}}


@pytest.mark.parametrize(("where", "want"), [
    ("", {1: [{"k": 1, "n": 1}, {"k": 1, "n": 2}], 2: [{"k": 2, "n": 1}], 3: [{"k": 3, "n": 1}]}),
    # The filter passes the -U of key 1's old count and keeps its +U away: a tombstone.
    ("WHERE n < 2", {1: [{"k": 1, "n": 1}, None], 2: [{"k": 2, "n": 1}], 3: [{"k": 3, "n": 1}]}),
])
def test_upsert_kafka_writes_a_tombstone_for_a_minus_u_that_no_plus_u_follows(broker, tmp_path, where: str,
                                                                            want: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"k": pa.array([1, 2, 1, 3], pa.int64())}), tmp_path / "k.parquet", row_group_size=1)
    topic = broker.topic()
    clink.sql([f"CREATE TABLE keys (k BIGINT) WITH ('connector' = 'filesystem', 'path' = '{tmp_path / 'k.parquet'}', "
               "'format' = 'parquet')",
               "CREATE TABLE counts (k BIGINT, n BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH ("
               f"'connector' = 'upsert-kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{broker.servers}', "
               "'key.format' = 'json', 'value.format' = 'json')",
               f"INSERT INTO counts SELECT k, n FROM (SELECT k, COUNT(*) AS n FROM keys GROUP BY k) {where}"]).run()
    messages: dict = {}
    for _, _, key, value in broker.read(topic):
        messages.setdefault(json.loads(key)["k"], []).append(None if value is None else json.loads(value))
    assert messages == want


def test_upsert_kafka_needs_a_primary_key(broker) -> None:
    with pytest.raises(clink.ClinkError, match="PRIMARY KEY"):
        clink.sql([f"CREATE TABLE o (k BIGINT, n BIGINT) WITH ('connector' = 'upsert-kafka', 'topic' = 'x', "
                   f"'properties.bootstrap.servers' = '{broker.servers}', 'key.format' = 'json', "
                   "'value.format' = 'json')",
                   "INSERT INTO o SELECT k, COUNT(*) FROM (VALUES (1)) AS v(k) GROUP BY k"]).run()


@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("partitioner", ["fixed", "round-robin", "default"])
def test_sink_partitioner(broker, partitioner: str, parallelism: int) -> None:
    topic = broker.topic(partitions=3)
    sql = [f"SET 'parallelism.default' = '{parallelism}'",
           "CREATE TABLE src (n BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '90', "
           "'fields.n.kind' = 'sequence', 'fields.n.start' = '0', 'fields.n.end' = '89', 'batch-size' = '7')",
           f"CREATE TABLE dst (n BIGINT, k STRING) WITH ('connector' = 'kafka', 'topic' = '{topic}', "
           f"'properties.bootstrap.servers' = '{broker.servers}', 'format' = 'json', 'key.format' = 'raw', "
           f"'key.fields' = 'k', 'sink.partitioner' = '{partitioner}')",
           "INSERT INTO dst SELECT n, CAST(MOD(n, 5) AS STRING) FROM src"]
    clink.sql(sql).run()
    found = broker.read(topic)
    assert sorted(json.loads(v)["n"] for _, _, _, v in found) == list(range(90))
    per_partition = Counter(p for p, _, _, _ in found)
    keys_at = {}
    for p, _, k, _ in found:
        keys_at.setdefault(k, set()).add(p)
    if partitioner == "round-robin":
        assert sorted(per_partition.values()) == [30, 30, 30]  # the sink cycles through all three
    elif partitioner == "fixed":
        assert set(per_partition) == {0}  # the one sink subtask (its rows are gathered) writes partition 0
    else:
        assert all(len(ps) == 1 for ps in keys_at.values())  # a key stays in one partition


@pytest.mark.parametrize("guarantee", ["none", "at-least-once"])
def test_a_sink_without_transactions_aborts_cleanly(broker, tmp_path, guarantee: str) -> None:
    """A failed run aborts its sinks: a kafka sink without transactions stages nothing, and its
    abort must still purge what the client holds without failing."""
    import io

    import pyarrow as pa

    from clink.runtime.connectors.base import TableSpec
    from clink.runtime.connectors.kafka import KAFKA
    from clink.runtime.context import RuntimeContext

    schema = pa.schema([("n", pa.int64())])
    topic = broker.topic()
    spec = TableSpec(name="o", schema=schema, table_schema=schema,
                     options={"topic": topic, "properties.bootstrap.servers": broker.servers, "format": "json",
                              "sink.delivery-guarantee": guarantee})
    writer = KAFKA.create_sink(spec, RuntimeContext(config={}, state_dir=tmp_path, stdout=io.StringIO()))
    writer.write(pa.record_batch([pa.array([1, 2], pa.int64())], schema=schema))
    writer.pre_commit(1)
    writer.abort()
    assert sorted(json.loads(m[3])["n"] for m in broker.read(topic)) == [1, 2]  # flushed at the checkpoint
