"""The kafka source's changelog formats, debezium-json and canal-json, against a real broker.

Golden values are the example messages of Flink's documentation of the formats
(docs/content/docs/connectors/table/formats/debezium.md and canal.md); the differential tests
apply a random history of changes in Python to get the table's final rows, and compare what clink
computes over the changelog with what DuckDB computes over those rows."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

import clink
from tests.shared_duckdb import assert_same_rows, connect

BOUNDED = {"scan.startup.mode": "earliest-offset", "scan.bounded.mode": "latest-offset"}
PRODUCTS = "id BIGINT, name STRING, description STRING, weight DECIMAL(10, 2)"


def kafka_ddl(name: str, columns: str, topic: str, servers: str, **options: str) -> str:
    opts = {"connector": "kafka", "topic": topic, "properties.bootstrap.servers": servers, **options}
    return f"CREATE TABLE {name} ({columns}) WITH ({', '.join(f'{k!r} = {v!r}' for k, v in opts.items())})"


def changes(result) -> list[tuple]:
    """Every change a query's result carries, in order: (kind, row values...)."""
    out = []
    for batch in result.batches():
        for row in batch.to_pylist():
            kind = row.pop("_rowkind")
            out.append((kind, *row.values()))
    return out


# Flink's documented Debezium example: the weight of product 111 changes from 5.18 to 5.15.
DEBEZIUM_UPDATE = {
    "before": {"id": 111, "name": "scooter", "description": "Big 2-wheel scooter", "weight": 5.18},
    "after": {"id": 111, "name": "scooter", "description": "Big 2-wheel scooter", "weight": 5.15},
    "source": {"version": "1.1.1.Final", "connector": "mysql"}, "op": "u", "ts_ms": 1589362330904,
    "transaction": None,
}


@pytest.mark.parametrize("schema_include", [False, True])
def test_debezium_documented_update_is_a_retraction_then_an_insert(broker, schema_include: bool) -> None:
    from decimal import Decimal

    topic = broker.topic()
    message = {"schema": {"type": "struct"}, "payload": DEBEZIUM_UPDATE} if schema_include else DEBEZIUM_UPDATE
    broker.produce(topic, [(None, json.dumps(message).encode())])
    options = {"debezium-json.schema-include": "true"} if schema_include else {}
    ddl = kafka_ddl("topic_products", PRODUCTS, topic, broker.servers, format="debezium-json", **BOUNDED, **options)
    got = changes(clink.sql([ddl, "SELECT * FROM topic_products"]))
    assert got == [("-U", 111, "scooter", "Big 2-wheel scooter", Decimal("5.18")),
                   ("+U", 111, "scooter", "Big 2-wheel scooter", Decimal("5.15"))]


def test_debezium_create_read_and_delete(broker) -> None:
    topic = broker.topic()
    row = {"id": 1, "name": "a", "description": None, "weight": 1.5}
    messages = [{"before": None, "after": row, "op": "c"}, {"before": None, "after": {**row, "id": 2}, "op": "r"},
                {"before": row, "after": None, "op": "d"}]
    broker.produce(topic, [(None, json.dumps(m).encode()) for m in messages] + [(None, None)])  # and a tombstone
    ddl = kafka_ddl("t", PRODUCTS, topic, broker.servers, format="debezium-json", **BOUNDED)
    got = [(k, i) for k, i, *_ in changes(clink.sql([ddl, "SELECT * FROM t"]))]
    assert got == [("+I", 1), ("+I", 2), ("-D", 1)]
    # The final table: only product 2 is left.
    assert clink.sql([ddl, "SELECT id, name FROM t"]).to_pylist() == [{"id": 2, "name": "a"}]


# Flink's documented Canal example: an UPDATE whose "old" holds the changed field's old value.
CANAL_UPDATE = {
    "data": [{"id": "111", "name": "scooter", "description": "Big 2-wheel scooter", "weight": "5.18"}],
    "database": "inventory", "es": 1589373560000, "id": 9, "isDdl": False,
    "mysqlType": {"id": "INTEGER", "name": "VARCHAR(255)", "description": "VARCHAR(512)", "weight": "FLOAT"},
    "old": [{"weight": "5.15"}], "pkNames": ["id"], "sql": "",
    "sqlType": {"id": 4, "name": 12, "description": 12, "weight": 7}, "table": "products", "ts": 1589373560798,
    "type": "UPDATE",
}


def test_canal_documented_update(broker) -> None:
    """"data" holds the rows after the change and "old" the old values of the fields that changed
    (Flink's CanalJsonDeserializationSchema; the prose of its page names the two values the other
    way round): the row before is "data" with "old" laid over it."""
    from decimal import Decimal

    topic = broker.topic()
    ddl_message = {"data": None, "database": "inventory", "isDdl": True, "sql": "CREATE TABLE x (a INT)",
                   "table": "x", "type": "CREATE"}
    broker.produce(topic, [(None, json.dumps(ddl_message).encode()), (None, json.dumps(CANAL_UPDATE).encode())])
    ddl = kafka_ddl("topic_products", PRODUCTS, topic, broker.servers, format="canal-json", **BOUNDED)
    got = changes(clink.sql([ddl, "SELECT * FROM topic_products"]))
    assert got == [("-U", 111, "scooter", "Big 2-wheel scooter", Decimal("5.15")),
                   ("+U", 111, "scooter", "Big 2-wheel scooter", Decimal("5.18"))]


def test_canal_rows_of_one_message_and_old_null_values(broker) -> None:
    """Several rows in one message; a field "old" names with NULL was NULL before, while a field
    it does not name kept its value; database and table filters."""
    topic = broker.topic()
    insert = {"data": [{"id": "1", "name": "a", "description": None, "weight": "1"},
                       {"id": "2", "name": "b", "description": "x", "weight": "2"}],
              "old": None, "type": "INSERT", "database": "shop", "table": "products"}
    update = {"data": [{"id": "1", "name": "a2", "description": "now", "weight": "1"}],
              "old": [{"name": "a", "description": None}], "type": "UPDATE", "database": "shop", "table": "products"}
    other = {"data": [{"id": "9", "name": "z", "description": None, "weight": "9"}], "old": None,
             "type": "INSERT", "database": "shop", "table": "orders"}
    delete = {"data": [{"id": "2", "name": "b", "description": "x", "weight": "2"}], "old": None,
              "type": "DELETE", "database": "shop", "table": "products"}
    broker.produce(topic, [(None, json.dumps(m).encode()) for m in (insert, update, other, delete)])
    ddl = kafka_ddl("t", "id BIGINT, name STRING, description STRING, weight INT", topic, broker.servers,
                    format="canal-json", **BOUNDED, **{"canal-json.table.include": "prod.*"})
    got = changes(clink.sql([ddl, "SELECT * FROM t"]))
    assert got == [("+I", 1, "a", None, 1), ("+I", 2, "b", "x", 2), ("-U", 1, "a", None, 1),
                   ("+U", 1, "a2", "now", 1), ("-D", 2, "b", "x", 2)]


def test_a_bad_change_names_topic_partition_offset_and_why(broker) -> None:
    topic = broker.topic()
    good = {"before": None, "after": {"id": 1}, "op": "c"}
    broker.produce(topic, [(None, json.dumps(good).encode()), (None, b'{"before": null, "after": null, "op": "x"}')],
                   partition=0)
    ddl = kafka_ddl("t", "id BIGINT", topic, broker.servers, format="debezium-json", **BOUNDED)
    with pytest.raises(clink.ClinkError) as info:
        clink.sql([ddl, "SELECT id FROM t"]).to_pylist()
    assert f"{topic}/0:1" in str(info.value) and "unknown Debezium 'op' 'x'" in str(info.value)


@pytest.mark.parametrize(("options", "where", "message"), [
    ({"format": "debezium-json", "canal-json.table.include": "x"}, "canal-json.table.include", "value format"),
    ({"format": "debezium-json", "debezium-json.schema-include": "maybe"}, "debezium-json.schema-include",
     "must be one of"),
    ({"format": "canal-json", "debezium-json.ignore-parse-errors": "true"}, "debezium-json.ignore-parse-errors",
     "value format"),
    ({"value.format": "json", "key.format": "canal-json", "key.fields": "id"}, "key.format", "value format"),
])
def test_changelog_format_options_are_checked_at_their_position(broker, options: dict, where: str,
                                                                message: str) -> None:
    ddl = kafka_ddl("t", "id BIGINT", "x", broker.servers, **options)
    with pytest.raises(clink.SqlError, match=message) as info:
        clink.sql([ddl, "SELECT id FROM t"])
    assert info.value.span is not None
    assert ddl[info.value.span.col - 1:].startswith(repr(where))


@pytest.mark.parametrize(("options", "where", "message"), [
    ({"format": "debezium-json"}, "format", "reads the 'debezium-json' format but does not write it"),
    ({"value.format": "canal-json"}, "value.format", "reads the 'canal-json' format but does not write it"),
    ({"format": "json", "topic-pattern": "x.*"}, "topic-pattern", "writes one 'topic'"),
])
def test_what_a_kafka_sink_cannot_write_is_refused_at_its_option(broker, options: dict, where: str,
                                                                  message: str) -> None:
    ddl = kafka_ddl("o", "id BIGINT", "x", broker.servers, **options)
    if "topic-pattern" in options:
        ddl = ddl.replace("'topic' = 'x', ", "")
    with pytest.raises(clink.SqlError, match=message) as info:
        clink.compile(f"CREATE TABLE i (id BIGINT) WITH ('connector' = 'datagen');\n{ddl};\nINSERT INTO o SELECT id FROM i")
    assert info.value.span is not None and info.value.span.line == 2
    assert ddl[info.value.span.col - 1:].startswith(repr(where))


def test_a_changelog_table_cannot_feed_an_append_only_sink(broker, tmp_path) -> None:
    ddl = kafka_ddl("t", "id BIGINT", "x", broker.servers, format="debezium-json")
    with pytest.raises(clink.SqlError, match="is a changelog"):
        clink.sql([ddl, f"CREATE TABLE o (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{tmp_path}', "
                        "'format' = 'csv')", "INSERT INTO o SELECT id FROM t"])


def test_min_over_a_changelog_table_is_refused_naming_the_table(broker) -> None:
    ddl = kafka_ddl("t", "id BIGINT, name STRING", "x", broker.servers, format="debezium-json")
    with pytest.raises(clink.SqlError, match="MIN over an updating input") as info:
        clink.sql([ddl, "SELECT name, MIN(id) FROM t GROUP BY name"])
    assert "table 't'" in str(info.value) and "changelog" in str(info.value)


def test_explain_shows_the_scan_as_a_changelog(broker) -> None:
    ddl = kafka_ddl("t", "id BIGINT, name STRING", "x", broker.servers, format="debezium-json")
    text = clink.compile([ddl, "SELECT name, COUNT(*) AS n FROM t WHERE id > 2 GROUP BY name"]).explain()
    assert "Scan(table=[t], columns=[id, name], where=[id > 2], changelog=[+I, -U, +U, -D])" in text or \
        "changelog=[+I, -U, +U, -D]" in text.split("Scan(table=[t]")[1].splitlines()[0]


# --- differential: a random history of changes, DuckDB over the final rows --------------------


def history(seed: int, n_ops: int, *, nulls: bool) -> tuple[list[dict], dict[int, dict]]:
    """Debezium changes to a table of (id, grp, amount, label) and the rows they leave."""
    rng = random.Random(seed)
    table: dict[int, dict] = {}
    out = []
    for _ in range(n_ops):
        key = rng.randrange(40)
        row = {"id": key, "grp": None if nulls and rng.random() < 0.3 else f"g{rng.randrange(5)}",
               "amount": None if nulls and rng.random() < 0.3 else rng.randrange(-50, 100),
               "label": None if nulls and rng.random() < 0.5 else rng.choice(["x", "y", "z"])}
        if key not in table:
            out.append({"before": None, "after": row, "op": rng.choice("cr")})
            table[key] = row
        elif rng.random() < 0.3:
            out.append({"before": table.pop(key), "after": None, "op": "d"})
        else:
            out.append({"before": table[key], "after": row, "op": "u"})
            table[key] = row
    return out, table


def canal_of(change: dict) -> dict:
    """The same change as a Canal message, with values quoted as Canal writes them."""
    def quoted(row):
        return {k: None if v is None else str(v) for k, v in row.items()}
    if change["op"] == "u":
        old = {k: v for k, v in quoted(change["before"]).items() if change["before"][k] != change["after"][k]}
        return {"data": [quoted(change["after"])], "old": [old], "type": "UPDATE", "database": "d", "table": "t"}
    if change["op"] == "d":
        return {"data": [quoted(change["before"])], "old": None, "type": "DELETE", "database": "d", "table": "t"}
    return {"data": [quoted(change["after"])], "old": None, "type": "INSERT", "database": "d", "table": "t"}


QUERIES = [
    "SELECT grp, COUNT(*) AS n, SUM(amount) AS total, COUNT(label) AS labelled, "
    "AVG(CAST(amount AS DOUBLE)) AS mean FROM t GROUP BY grp",
    "SELECT COUNT(DISTINCT grp) AS groups, SUM(amount) AS total FROM t WHERE amount > 10",
    "SELECT t.id, t.amount, d.name FROM t JOIN dim AS d ON t.label = d.label",
]
DIM = [("x", "ex"), ("y", "why"), ("z", "zed"), ("x", "ex2")]


@pytest.mark.parametrize("fmt", ["debezium-json", "canal-json"])
@pytest.mark.parametrize("nulls", [False, True], ids=["dense", "nulls"])
@pytest.mark.parametrize("parallelism", [1, 4])
def test_queries_over_a_cdc_topic_match_duckdb_over_the_final_rows(broker, fmt: str, nulls: bool,
                                                                   parallelism: int) -> None:
    messages, final = history(seed=7 + nulls, n_ops=300, nulls=nulls)
    if fmt == "canal-json":
        messages = [canal_of(m) for m in messages]
    topic = broker.topic(partitions=1)  # a table's changes are ordered: one partition (per key, in Kafka)
    broker.produce(topic, [(None, json.dumps(m).encode()) for m in messages])
    ddl = kafka_ddl("t", "id BIGINT, grp STRING, amount BIGINT, label STRING", topic, broker.servers, format=fmt,
                    **BOUNDED, **{"properties.max.poll.records": "37"})
    dim = ("CREATE VIEW dim AS SELECT * FROM (VALUES " + ", ".join(f"('{a}', '{b}')" for a, b in DIM)
           + ") AS v(label, name)")
    rows = pa.table({c: pa.array([r[c] for r in final.values()], t) for c, t in
                     (("id", pa.int64()), ("grp", pa.string()), ("amount", pa.int64()), ("label", pa.string()))})
    duck = connect()
    duck.register("t", rows)
    duck.register("dim", pa.table({"label": [r[0] for r in DIM], "name": [r[1] for r in DIM]}))
    for query in QUERIES:
        statements = [f"SET 'parallelism.default' = '{parallelism}'", ddl]
        if "dim" in query:
            statements.append(dim)
        got = clink.sql([*statements, query]).to_arrow()
        assert_same_rows(got, duck.execute(query).fetchall())


CDC = ("CREATE TABLE t (id BIGINT, name STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) "
       "WITH ('connector' = 'kafka', 'topic' = 'x', 'properties.bootstrap.servers' = '127.0.0.1:1', "
       "'format' = 'debezium-json')")
APPENDS = ("CREATE TABLE a (id BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) "
           "WITH ('connector' = 'datagen', 'number-of-rows' = '10')")


@pytest.mark.parametrize(("query", "message", "at"), [
    ("SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) "
     "GROUP BY window_start, window_end", "TUMBLE windows over an updating table", "TABLE t"),
    ("SELECT a.id, t.name FROM (SELECT *, PROCTIME() AS pt FROM a) AS a JOIN t FOR SYSTEM_TIME AS OF a.pt "
     "ON a.id = t.id", "lookup join FOR SYSTEM_TIME AS OF a processing time needs a table of appends",
     "t FOR SYSTEM_TIME"),
    ("SELECT t.id FROM t JOIN a FOR SYSTEM_TIME AS OF t.ts ON a.id = t.id", "takes appends on the left", "t.ts"),
])
def test_what_does_not_take_a_changelog_is_refused_where_it_is_written(query: str, message: str, at: str) -> None:
    with pytest.raises(clink.SqlError, match=message) as info:
        clink.compile([CDC, APPENDS, query])
    assert info.value.span.line == 3 and query[info.value.span.col - 1:].startswith(at)
    assert "is a changelog" in str(info.value)


# --- duplicated change events ------------------------------------------------------------------


def redelivered(messages: list[dict], seed: int) -> list[dict]:
    """``messages`` as a CDC tool that restarts delivers them: now and then it goes back a few
    messages and sends them again (each change still in order after its last delivery)."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(messages):
        out.append(messages[i])
        i += 1
        if rng.random() < 0.08 and i > 1:
            i -= rng.randrange(1, min(i, 6) + 1)
    return out


@pytest.mark.parametrize("fmt", ["debezium-json", "canal-json"])
@pytest.mark.parametrize("parallelism", [1, 4])
def test_duplicated_change_events_are_dropped_by_the_primary_key(broker, fmt: str, parallelism: int) -> None:
    messages, final = history(seed=11, n_ops=300, nulls=True)
    if fmt == "canal-json":
        messages = [canal_of(m) for m in messages]
    sent = redelivered(messages, seed=3)
    assert len(sent) > len(messages) + 20
    topic = broker.topic(partitions=1)
    broker.produce(topic, [(None, json.dumps(m).encode()) for m in sent])
    ddl = kafka_ddl("t", "id BIGINT, grp STRING, amount BIGINT, label STRING, PRIMARY KEY (id) NOT ENFORCED", topic,
                    broker.servers, format=fmt, **BOUNDED, **{"properties.max.poll.records": "37"})
    rows = pa.table({c: pa.array([r[c] for r in final.values()], t) for c, t in
                     (("id", pa.int64()), ("grp", pa.string()), ("amount", pa.int64()), ("label", pa.string()))})
    duck = connect()
    duck.register("t", rows)
    query = QUERIES[0]
    setting = "SET 'table.exec.source.cdc-events-duplicate' = 'true'"
    got = clink.sql([setting, f"SET 'parallelism.default' = '{parallelism}'", ddl, query]).to_arrow()
    assert_same_rows(got, duck.execute(query).fetchall())
    # Without the setting the repeated changes count twice.
    plain = clink.sql([f"SET 'parallelism.default' = '{parallelism}'", ddl, query]).to_arrow()
    assert sorted(map(str, plain.to_pylist())) != sorted(map(str, got.to_pylist()))


def test_dropping_duplicated_changes_needs_a_primary_key(broker) -> None:
    ddl = kafka_ddl("t", "id BIGINT", "x", broker.servers, format="debezium-json")
    with pytest.raises(clink.SqlError, match="declares none") as info:
        clink.compile(f"SET 'table.exec.source.cdc-events-duplicate' = 'true';\n{ddl};\nSELECT id FROM t")
    assert info.value.span.line == 3 and info.value.span.col == len("SELECT id FROM ") + 1


# --- format metadata ---------------------------------------------------------------------------

# The source block of Flink's Debezium page's example (a MySQL change), and its ts_ms.
DEBEZIUM_SOURCE = {"version": "1.1.1.Final", "connector": "mysql", "name": "dbserver1", "ts_ms": 1589362330000,
                   "db": "inventory", "schema": None, "table": "products"}


@pytest.mark.parametrize("schema_include", [False, True])
def test_debezium_metadata_columns_carry_each_messages_source(broker, schema_include: bool) -> None:
    topic = broker.topic(partitions=1)
    insert = {"before": None, "after": {"id": 7, "name": "hammer"}, "op": "c", "ts_ms": 1589362330904,
              "source": DEBEZIUM_SOURCE}
    update = {**DEBEZIUM_UPDATE, "source": {**DEBEZIUM_SOURCE, "db": "shop", "schema": "public", "ts_ms": 17},
              "ts_ms": 18}
    update["before"], update["after"] = {"id": 7, "name": "hammer"}, {"id": 7, "name": "mallet"}
    bare = {"before": None, "after": {"id": 8, "name": "saw"}, "op": "r"}  # no source, no ts_ms: NULLs
    messages = [insert, update, bare]
    if schema_include:
        messages = [{"schema": {"type": "struct"}, "payload": m} for m in messages]
    broker.produce(topic, [(None, json.dumps(m).encode()) for m in messages])
    # As Flink's page declares them (TIMESTAMP(3) columns from the TIMESTAMP_LTZ(3) metadata).
    columns = ("origin_ts TIMESTAMP(3) METADATA FROM 'value.ingestion-timestamp' VIRTUAL, "
               "event_time TIMESTAMP_LTZ(3) METADATA FROM 'value.source.timestamp' VIRTUAL, "
               "origin_database STRING METADATA FROM 'value.source.database' VIRTUAL, "
               "origin_schema STRING METADATA FROM 'value.source.schema' VIRTUAL, "
               "origin_table STRING METADATA FROM 'value.source.table' VIRTUAL, id BIGINT, name STRING")
    ddl = kafka_ddl("t", columns, topic, broker.servers, format="debezium-json", **BOUNDED,
                    **{"debezium-json.schema-include": str(schema_include).lower()})
    got = changes(clink.sql([ddl, "SELECT id, name, CAST(origin_ts AS STRING), CAST(event_time AS STRING), "
                                  "origin_database, origin_schema, origin_table FROM t"]))
    assert got == [
        ("+I", 7, "hammer", "2020-05-13 09:32:10.904", "2020-05-13 09:32:10.000", "inventory", None, "products"),
        ("-U", 7, "hammer", "1970-01-01 00:00:00.018", "1970-01-01 00:00:00.017", "shop", "public", "products"),
        ("+U", 7, "mallet", "1970-01-01 00:00:00.018", "1970-01-01 00:00:00.017", "shop", "public", "products"),
        ("+I", 8, "saw", None, None, None, None, None),
    ]


def test_canal_metadata_columns(broker) -> None:
    topic = broker.topic(partitions=1)
    message = {"data": [{"id": "1", "name": "a"}, {"id": "2", "name": "b"}], "old": None, "type": "INSERT",
               "database": "inventory", "table": "products", "pkNames": ["id"], "ts": 1589373560798,
               "es": 1589373560000, "isDdl": False}
    broker.produce(topic, [(None, json.dumps(message).encode())])
    columns = ("origin_database STRING METADATA FROM 'value.database' VIRTUAL, "
               "origin_table STRING METADATA FROM 'value.table' VIRTUAL, "
               "origin_pk_names ARRAY<STRING> METADATA FROM 'value.pk-names' VIRTUAL, "
               "origin_ts TIMESTAMP(3) METADATA FROM 'value.ingestion-timestamp' VIRTUAL, "
               "origin_es TIMESTAMP_LTZ(3) METADATA FROM 'value.event-timestamp' VIRTUAL, id BIGINT, name STRING")
    ddl = kafka_ddl("t", columns, topic, broker.servers, format="canal-json", **BOUNDED)
    got = changes(clink.sql([ddl, "SELECT id, origin_database, origin_table, origin_pk_names, "
                                  "CAST(origin_ts AS STRING), CAST(origin_es AS STRING) FROM t"]))
    assert got == [("+I", i, "inventory", "products", ["id"], "2020-05-13 12:39:20.798", "2020-05-13 12:39:20.000")
                   for i in (1, 2)]


@pytest.mark.parametrize(("fmt", "column", "message"), [
    ("debezium-json", "m MAP<STRING, STRING> METADATA FROM 'value.source.properties'", "is not read by clink"),
    ("canal-json", "m STRING METADATA FROM 'value.source.table'", "metadata of the 'debezium-json' format"),
    ("json", "m STRING METADATA FROM 'value.table'", "metadata of the 'canal-json' format"),
    ("debezium-json", "m STRING METADATA FROM 'value.nothing'", "kafka has no metadata 'value.nothing'"),
])
def test_format_metadata_of_another_format_is_refused(broker, fmt: str, column: str, message: str) -> None:
    ddl = kafka_ddl("t", f"id BIGINT, {column}", "x", broker.servers, format=fmt)
    with pytest.raises(clink.SqlError, match=message):
        clink.compile(ddl)
