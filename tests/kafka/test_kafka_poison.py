"""Messages a kafka source cannot decode, under each policy: fail naming topic/partition:offset,
skip and count (Flink's ``<format>.ignore-parse-errors``), or the dead-letter topic (clink's
``scan.dead-letter.topic``). Each test writes good and bad messages to a real broker and checks
what came through, what was counted and what reached the dead-letter topic."""

from __future__ import annotations

import json
import random

import confluent_kafka
import pytest

import clink

BOUNDED = {"scan.startup.mode": "earliest-offset", "scan.bounded.mode": "latest-offset"}


def kafka_ddl(name: str, columns: str, topic: str, servers: str, **options: str) -> str:
    opts = {"connector": "kafka", "topic": topic, "properties.bootstrap.servers": servers, **options}
    return f"CREATE TABLE {name} ({columns}) WITH ({', '.join(f'{k!r} = {v!r}' for k, v in opts.items())})"


def mixed(n: int, bad_every: int, seed: int) -> tuple[list[tuple[bytes | None, bytes]], list[int], list[int]]:
    """``n`` JSON messages, some bad in different ways; the good values and the bad positions."""
    rng = random.Random(seed)
    poison = [b'{"n": oops}', b'{"n": "twelve"}', b"not json at all", b'{"n": 1', b"[1, 2]"]
    messages, good, bad = [], [], []
    for i in range(n):
        if i % bad_every == bad_every - 1:
            messages.append((f"k{i}".encode(), rng.choice(poison)))
            bad.append(i)
        else:
            messages.append((f"k{i}".encode(), json.dumps({"n": i}).encode()))
            good.append(i)
    return messages, good, bad


def test_fail_names_topic_partition_offset_and_the_options_to_go_on(broker) -> None:
    topic = broker.topic()
    broker.produce(topic, [(None, b'{"n": 1}'), (None, b'{"n": oops}')], partition=0)
    ddl = kafka_ddl("t", "n BIGINT", topic, broker.servers, format="json", **BOUNDED)
    with pytest.raises(clink.RecordError) as info:
        clink.sql([ddl, "SELECT n FROM t"]).to_pylist()
    assert f"{topic}/0:1" in str(info.value)
    rendered = info.value.render()
    assert "'json.ignore-parse-errors' = 'true'" in rendered and "'scan.dead-letter.topic'" in rendered


@pytest.mark.parametrize("option", ["json.ignore-parse-errors", "value.json.ignore-parse-errors"])
def test_skip_and_count_reads_every_good_message(broker, option: str) -> None:
    topic = broker.topic(partitions=2)
    messages, good, bad = mixed(60, 7, seed=1)
    broker.produce(topic, messages)
    ddl = kafka_ddl("t", "n BIGINT", topic, broker.servers, format="json", **BOUNDED,
                    **{option: "true", "properties.max.poll.records": "16"})
    result = clink.sql([ddl, "SELECT n FROM t"])
    got = sorted(r["n"] for r in result.to_pylist())
    assert got == good
    assert result.metrics.skipped_records == {"t": len(bad)}


def test_skip_of_csv_messages(broker) -> None:
    topic = broker.topic()
    broker.produce(topic, [(None, b"1,a"), (None, b"x,b"), (None, b"3,c"), (None, b"4"), (None, b"5,e")])
    ddl = kafka_ddl("t", "n INT, s STRING", topic, broker.servers, format="csv", **BOUNDED,
                    **{"csv.ignore-parse-errors": "true"})
    result = clink.sql([ddl, "SELECT n, s FROM t"])
    assert result.to_pylist() == [{"n": 1, "s": "a"}, {"n": 3, "s": "c"}, {"n": 5, "s": "e"}]
    assert result.metrics.skipped_records == {"t": 2}


def test_skip_of_bad_keys_with_the_key_option(broker) -> None:
    topic = broker.topic()
    broker.produce(topic, [(b'{"k": 1}', b'{"v": "a"}'), (b"{bad", b'{"v": "b"}'), (None, b'{"v": "c"}'),
                           (b'{"k": 4}', b'{"v": "d"}')])
    ddl = kafka_ddl("t", "k BIGINT, v STRING", topic, broker.servers, **BOUNDED,
                    **{"key.format": "json", "key.fields": "k", "value.format": "json",
                       "value.fields-include": "EXCEPT_KEY", "key.json.ignore-parse-errors": "true"})
    result = clink.sql([ddl, "SELECT k, v FROM t"])
    assert result.to_pylist() == [{"k": 1, "v": "a"}, {"k": 4, "v": "d"}]
    assert result.metrics.skipped_records == {"t": 2}


@pytest.mark.parametrize("fmt", ["debezium-json", "canal-json"])
def test_skip_of_changes_that_do_not_decode(broker, fmt: str) -> None:
    topic = broker.topic()
    if fmt == "debezium-json":
        good = [{"before": None, "after": {"id": i}, "op": "c"} for i in (1, 2, 3)]
        bad = [b'{"before": null, "after": null, "op": "x"}', b'{"op": "u", "after": {"id": 9}}', b"{"]
    else:
        good = [{"data": [{"id": i}], "old": None, "type": "INSERT"} for i in (1, 2, 3)]
        bad = [b'{"data": [{"id": 9}], "type": "TRUNCATE"}', b"[]", b'{"data": [{"id": "nine"}], "type": "INSERT"}']
    broker.produce(topic, [(None, json.dumps(good[0]).encode()), (None, bad[0]), (None, json.dumps(good[1]).encode()),
                           (None, bad[1]), (None, bad[2]), (None, json.dumps(good[2]).encode())], partition=0)
    ddl = kafka_ddl("t", "id BIGINT", topic, broker.servers, format=fmt, **BOUNDED,
                    **{f"{fmt}.ignore-parse-errors": "true"})
    result = clink.sql([ddl, "SELECT id FROM t"])
    assert sorted(r["id"] for r in result.to_pylist()) == [1, 2, 3]
    assert result.metrics.skipped_records == {"t": 3}


def test_dead_letter_topic_gets_each_bad_message_raw_with_its_origin(broker) -> None:
    topic, dead = broker.topic(partitions=3), broker.topic()
    messages, good, bad = mixed(50, 6, seed=2)
    broker.produce(topic, messages)
    ddl = kafka_ddl("t", "n BIGINT", topic, broker.servers, format="json", **BOUNDED,
                    **{"scan.dead-letter.topic": dead, "properties.max.poll.records": "10"})
    result = clink.sql([ddl, "SELECT n FROM t"])
    assert sorted(r["n"] for r in result.to_pylist()) == good
    assert result.metrics.skipped_records == {"t": len(bad)}
    # Where each message landed, read from the broker, against what the dead letters say.
    placed = {}
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.servers, "group.id": "check-dl",
                                         "enable.auto.commit": "false"})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(3)]
                    + [confluent_kafka.TopicPartition(dead, 0, 0)])
    letters = []
    while len(placed) < len(messages) or len(letters) < len(bad):
        for m in consumer.consume(100, timeout=1):
            assert m.error() is None
            if m.topic() == topic:
                placed[(m.partition(), m.offset())] = (m.key(), m.value())
            else:
                letters.append(m)
    consumer.close()
    assert len(letters) == len(bad)
    sent = sorted((m.key(), m.value()) for m in letters)
    assert sent == sorted(messages[i] for i in bad)
    for m in letters:
        headers = dict(m.headers())
        where = (int(headers["clink.source.partition"]), int(headers["clink.source.offset"]))
        assert headers["clink.source.topic"] == topic.encode()
        assert headers["clink.source.table"] == b"t"
        assert placed[where] == (m.key(), m.value())
        assert headers["clink.error"].startswith(b"value: ")


def test_a_missing_dead_letter_topic_stops_the_job_at_its_start(broker) -> None:
    topic = broker.topic()
    broker.produce(topic, [(None, b'{"n": 1}')])
    ddl = kafka_ddl("t", "n BIGINT", topic, broker.servers, format="json", **BOUNDED,
                    **{"scan.dead-letter.topic": "no-such-dead-letters"})
    with pytest.raises(clink.ConnectorError, match="no dead-letter topic 'no-such-dead-letters'.*scan.dead-letter"):
        clink.sql([ddl, "SELECT n FROM t"]).to_pylist()


@pytest.mark.parametrize(("options", "option", "message"), [
    ({"format": "json", "csv.ignore-parse-errors": "true"}, "csv.ignore-parse-errors", "the value format is 'json'"),
    ({"format": "json", "key.json.ignore-parse-errors": "true"}, "key.json.ignore-parse-errors",
     "the key format is None"),
    ({"format": "json", "scan.dead-letter.topic": "dl", "json.ignore-parse-errors": "true"},
     "scan.dead-letter.topic", "not both"),
    ({"format": "json", "scan.dead-letter.topic": "in"}, "scan.dead-letter.topic", "must not be a topic"),
    ({"format": "json", "scan.dead-letter.topic": "a b"}, "scan.dead-letter.topic", "one topic name"),
    ({"format": "json", "json.ignore-parse-errors": "yes"}, "json.ignore-parse-errors", "true"),
])
def test_poison_options_are_checked_at_compile_time_at_their_position(options: dict, option: str,
                                                                      message: str) -> None:
    ddl = kafka_ddl("t", "n BIGINT", "in", "127.0.0.1:1", **options)
    with pytest.raises(clink.SqlError) as info:
        clink.compile([ddl, "SELECT n FROM t"])
    errors = getattr(info.value, "errors", [info.value])
    (error,) = [e for e in errors if message in str(e)]
    assert error.span is not None and error.span.line == 1
    assert ddl[error.span.col - 1:].startswith(repr(option))
