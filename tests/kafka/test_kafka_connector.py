"""The kafka connector against a real broker: formats, startup and bounded modes, metadata,
keys, and the sink's delivery guarantees. Every test reads what clink wrote back from the broker,
or feeds clink what it wrote to the broker itself."""

from __future__ import annotations

import json

import pytest

import clink


def kafka_ddl(name: str, columns: str, topic: str, servers: str, **options: str) -> str:
    opts = {"connector": "kafka", "topic": topic, "properties.bootstrap.servers": servers, **options}
    return f"CREATE TABLE {name} ({columns}) WITH ({', '.join(f'{k!r} = {v!r}' for k, v in opts.items())})"


def test_json_round_trip(broker, tmp_path) -> None:
    topic = broker.topic(partitions=2)
    clink.sql([
        "CREATE TABLE src (k BIGINT, s STRING) WITH ('connector' = 'values', 'rows' = '[[1, \"a\"], [2, null], [3, \"c\"]]')",
    ]) if False else None
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


def test_metadata_of_an_unknown_key_is_a_positioned_error(broker) -> None:
    ddl = kafka_ddl("t", "v STRING, h STRING METADATA FROM 'nope'", "x", broker.servers, format="json")
    with pytest.raises(clink.SqlError) as info:
        clink.sql([ddl, "SELECT v FROM t"])
    assert "no metadata 'nope'" in str(info.value) and info.value.span.line == 1


def test_metadata_on_a_connector_without_any_is_refused() -> None:
    with pytest.raises(clink.SqlError, match="has no metadata"):
        clink.sql(["CREATE TABLE t (v BIGINT, o BIGINT METADATA FROM 'offset') WITH ('connector' = 'datagen')",
                   "SELECT v FROM t"])
