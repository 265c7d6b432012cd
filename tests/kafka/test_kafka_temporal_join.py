"""Event-time temporal joins against a versioned table read from a changelog topic (Debezium,
upsert-kafka), against the Tansu broker.

The versioned table is the product changelog of Flink's versioned-tables page
(docs/content/docs/dev/table/concepts/versioned_tables.md): p_001 and p_002 inserted at 00:01 and
00:02, both repriced at 12:00, p_001 deleted at 18:00; each change's time is its message's source
timestamp (METADATA FROM 'value.source.timestamp'). A differential test checks random histories
against a versioned lookup written in the test."""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest

import clink

BOUNDED = "'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset'"
DAY = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


def ms(hhmm: str) -> int:
    h, m = map(int, hhmm.split(":"))
    return int((DAY + dt.timedelta(hours=h, minutes=m)).timestamp() * 1000)


def debezium(op: str, before: dict | None, after: dict | None, at: str) -> bytes:
    return json.dumps({"before": before, "after": after, "op": op, "source": {"ts_ms": ms(at)}}).encode()


def p(product_id: str, name: str, price: float) -> dict:
    return {"product_id": product_id, "product_name": name, "product_price": price}


PRODUCT_CHANGES = [
    debezium("c", None, p("p_001", "scooter", 11.11), "00:01"),
    debezium("c", None, p("p_002", "basketball", 23.11), "00:02"),
    debezium("u", p("p_001", "scooter", 11.11), p("p_001", "scooter", 12.99), "12:00"),
    debezium("u", p("p_002", "basketball", 23.11), p("p_002", "basketball", 19.99), "12:00"),
    debezium("d", p("p_001", "scooter", 12.99), None, "18:00"),
]

PRODUCTS = ("CREATE TABLE product_changelog (product_id STRING, product_name STRING, product_price DECIMAL(10, 4), "
            "update_time TIMESTAMP(3) METADATA FROM 'value.source.timestamp' VIRTUAL, "
            "PRIMARY KEY (product_id) NOT ENFORCED, WATERMARK FOR update_time AS update_time) "
            "WITH ('connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{servers}', "
            "'value.format' = 'debezium-json', " + BOUNDED + ")")
ORDERS = ("CREATE TABLE orders (order_id STRING, product_id STRING, order_time TIMESTAMP(3), "
          "WATERMARK FOR order_time AS order_time) WITH ('connector' = 'kafka', 'topic' = '{topic}', "
          "'properties.bootstrap.servers' = '{servers}', 'format' = 'json', " + BOUNDED + ")")


def order(order_id: str, product: str, at: str) -> bytes:
    stamp = (DAY + dt.timedelta(hours=int(at[:2]), minutes=int(at[3:]))).strftime("%Y-%m-%d %H:%M:%S")
    return json.dumps({"order_id": order_id, "product_id": product, "order_time": stamp}).encode()


@pytest.mark.parametrize("join", ["JOIN", "LEFT JOIN"])
@pytest.mark.parametrize("parallelism", [1, 2])
def test_orders_meet_the_price_valid_at_their_time(broker, join: str, parallelism: int) -> None:
    products, orders = broker.topic(), broker.topic(partitions=2)
    broker.produce(products, [(None, m) for m in PRODUCT_CHANGES])
    placed = [("o1", "p_001", "10:00"), ("o2", "p_002", "10:00"), ("o3", "p_001", "13:00"),
              ("o4", "p_002", "13:00"), ("o5", "p_001", "19:00"), ("o6", "p_002", "19:00"),
              ("o7", "p_001", "00:00"), ("o8", "p_003", "13:00")]
    broker.produce(orders, [(None, order(*o)) for o in placed])
    query = (f"SELECT o.order_id, p.product_name, CAST(p.product_price AS DOUBLE) FROM orders AS o {join} "
             "product_changelog FOR SYSTEM_TIME AS OF o.order_time AS p ON o.product_id = p.product_id")
    got = clink.sql([f"SET 'parallelism.default' = '{parallelism}'",
                     PRODUCTS.format(topic=products, servers=broker.servers),
                     ORDERS.format(topic=orders, servers=broker.servers), query]).to_pylist()
    expected = {"o1": ("scooter", 11.11), "o2": ("basketball", 23.11), "o3": ("scooter", 12.99),
                "o4": ("basketball", 19.99), "o6": ("basketball", 19.99)}
    if join == "LEFT JOIN":
        # o5: p_001 was deleted at 18:00; o7: before p_001 existed; o8: no such product.
        expected |= {o: (None, None) for o in ("o5", "o7", "o8")}
    assert sorted(tuple(r.values()) for r in got) == sorted((k, *v) for k, v in expected.items())


def test_a_versioned_upsert_kafka_table(broker) -> None:
    """The same history as upserts: the key in the message key, a tombstone for the delete (its
    time is the deleted row's, as ChangelogNormalize gives the stored row for a delete, so it
    takes effect from the row's own time); the time is a column of the value."""
    rates, orders = broker.topic(), broker.topic()
    upserts = [("EUR", {"currency": "EUR", "rate": 1.14, "t": "2020-01-01 09:00:00"}),
               ("EUR", {"currency": "EUR", "rate": 1.10, "t": "2020-01-01 12:00:00"}),
               ("GBP", {"currency": "GBP", "rate": 1.31, "t": "2020-01-01 08:00:00"}),
               ("GBP", None)]
    broker.produce(rates, [(json.dumps({"currency": k}).encode(), None if v is None else json.dumps(v).encode())
                           for k, v in upserts])
    broker.produce(orders, [(None, order(o, c, t)) for o, c, t in
                            [("a", "EUR", "10:00"), ("b", "EUR", "12:30"), ("c", "EUR", "08:00"), ("d", "GBP", "10:00")]])
    ddl = ("CREATE TABLE rates (currency STRING, rate DOUBLE, t TIMESTAMP(3), PRIMARY KEY (currency) NOT ENFORCED, "
           "WATERMARK FOR t AS t) WITH ('connector' = 'upsert-kafka', 'topic' = '{topic}', "
           "'properties.bootstrap.servers' = '{servers}', 'key.format' = 'json', 'value.format' = 'json', "
           "'scan.bounded.mode' = 'latest-offset')").format(topic=rates, servers=broker.servers)
    query = ("SELECT o.order_id, r.rate FROM orders AS o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.order_time AS r "
             "ON o.product_id = r.currency")
    got = clink.sql([ddl, ORDERS.format(topic=orders, servers=broker.servers), query]).to_pylist()
    assert sorted(tuple(r.values()) for r in got) == [("a", 1.14), ("b", 1.10), ("c", None), ("d", None)]


def versioned(history: list[tuple[str, str, str, int | None]], key: str, at: int) -> int | None:
    """The value of ``key`` at time ``at`` in a history of (kind, key, ..., value, time) changes:
    the latest change at or before ``at`` (the last of equal times) that is not a -U."""
    best = None
    for kind, k, value, t in history:
        if k == key and kind != "-U" and t <= at:
            best = (t, None if kind == "-D" else value) if best is None or t >= best[0] else best
    return None if best is None else best[1]


@pytest.mark.parametrize("seed", range(3))
def test_random_histories_match_a_versioned_lookup(broker, seed: int) -> None:
    rng = random.Random(seed)
    table: dict[str, int] = {}
    messages, history = [], []
    for step in range(120):
        key = f"k{rng.randrange(6)}"
        at = step * 60_000 + DAY.timestamp() * 1000
        value = rng.randrange(1000)
        if key not in table:
            messages.append(json.dumps({"before": None, "after": {"k": key, "v": value}, "op": "c",
                                        "source": {"ts_ms": int(at)}}).encode())
            history.append(("+I", key, value, at))
            table[key] = value
        elif rng.random() < 0.25:
            messages.append(json.dumps({"before": {"k": key, "v": table[key]}, "after": None, "op": "d",
                                        "source": {"ts_ms": int(at)}}).encode())
            history.append(("-D", key, table.pop(key), at))
        else:
            messages.append(json.dumps({"before": {"k": key, "v": table[key]}, "after": {"k": key, "v": value},
                                        "op": "u", "source": {"ts_ms": int(at)}}).encode())
            history += [("-U", key, table[key], at), ("+U", key, value, at)]
            table[key] = value
    versions, probes = broker.topic(), broker.topic(partitions=3)
    broker.produce(versions, [(None, m) for m in messages])
    asks = [(f"o{i}", f"k{rng.randrange(7)}", rng.randrange(-5, 125 * 60) * 1000 + int(DAY.timestamp() * 1000))
            for i in range(200)]
    broker.produce(probes, [(None, json.dumps({"id": i, "k": k, "t": dt.datetime.fromtimestamp(t / 1000, dt.UTC)
                                               .strftime("%Y-%m-%d %H:%M:%S")}).encode()) for i, k, t in asks])
    ddl_v = ("CREATE TABLE prices (k STRING, v INT, t TIMESTAMP(3) METADATA FROM 'value.source.timestamp' VIRTUAL, "
             "PRIMARY KEY (k) NOT ENFORCED, WATERMARK FOR t AS t) WITH ('connector' = 'kafka', "
             f"'topic' = '{versions}', 'properties.bootstrap.servers' = '{broker.servers}', "
             f"'value.format' = 'debezium-json', {BOUNDED}, 'properties.max.poll.records' = '17')")
    ddl_p = ("CREATE TABLE probes (id STRING, k STRING, t TIMESTAMP(3), WATERMARK FOR t AS t) WITH ("
             f"'connector' = 'kafka', 'topic' = '{probes}', 'properties.bootstrap.servers' = '{broker.servers}', "
             f"'format' = 'json', {BOUNDED})")
    query = "SELECT p.id, x.v FROM probes AS p LEFT JOIN prices FOR SYSTEM_TIME AS OF p.t AS x ON p.k = x.k"
    got = clink.sql([ddl_v, ddl_p, query]).to_pylist()
    expected = sorted((i, versioned(history, k, t)) for i, k, t in asks)
    assert sorted((r["id"], r["v"]) for r in got) == expected
