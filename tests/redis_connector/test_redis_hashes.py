"""The redis connector over hashes, against a real Redis server: upserts and deletes of updating
GROUP BYs read back with the redis client and compared with DuckDB (parallelism 1 and 4), the
keys made from the primary key, and lookup joins against hashes compared with DuckDB's join."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest
import redis

# tests/shared_duckdb.py: pytest puts tests/ on sys.path, as it holds the root conftest.py.
import shared_duckdb

import clink
from clink.errors import ConnectorError
from clink.runtime.connectors.base import TableSpec
from clink.runtime.connectors.redis import REDIS
from clink.runtime.context import RuntimeContext
from clink.runtime.plan import ROWKIND_COLUMN, UPDATING

N = 3000


def events(null_rate: float, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)

    def nulls() -> np.ndarray | None:
        return rng.random(N) < null_rate if null_rate else None

    return pa.table({
        "k": pa.array(rng.integers(0, 40, N), pa.int64(), mask=nulls()),
        "tag": pa.array(rng.choice(np.array(["a", "b", "c:d"]), N), pa.string(), mask=nulls()),
        "price": pa.array(np.round(rng.normal(50, 20, N), 4), pa.float64(), mask=nulls()),
    })


TABLES = {"dense": events(0.0, 3), "nulls": events(0.6, 4)}


def ctx() -> RuntimeContext:
    return RuntimeContext(config={}, stdout=io.StringIO())


def fill(url: str, stream: str, table: pa.Table) -> None:
    writer = REDIS.create_sink(TableSpec(name="t", schema=table.schema, table_schema=table.schema,
                                         options={"url": url, "stream": stream}), ctx())
    for batch in table.to_batches(max_chunksize=100):
        writer.write(batch)
    writer.close()


def source(url: str) -> str:
    return (f"CREATE TABLE ev (k BIGINT, tag STRING, price DOUBLE, pt AS PROCTIME()) WITH ('connector' = 'redis', "
            f"'url' = '{url}', 'stream' = 'ev', 'scan.bounded.mode' = 'latest', 'scan.fetch-size' = '50')")


def hashes(r: redis.Redis, prefix: str, columns: list[str], types: list[type]) -> list[tuple]:
    """Every hash under ``prefix`` as a row of ``columns`` (a missing field is NULL)."""
    rows = []
    for key in r.scan_iter(match=prefix + "*", count=1000):
        fields = r.hgetall(key)
        rows.append(tuple(None if fields.get(c.encode()) is None else t(fields[c.encode()].decode())
                          for c, t in zip(columns, types, strict=True)))
    return rows


UPSERTS = [
    # (sink columns, key, query, DuckDB's query, types of the columns read back)
    ("k BIGINT, n BIGINT, s DOUBLE", "k",
     "SELECT COALESCE(k, -1), COUNT(*), SUM(price) FROM ev GROUP BY COALESCE(k, -1)",
     "SELECT COALESCE(k, -1), COUNT(*), SUM(price) FROM ev GROUP BY COALESCE(k, -1)", [int, int, float]),
    ("k BIGINT, tag STRING, n BIGINT", "k, tag",
     "SELECT COALESCE(k, -1), COALESCE(tag, 'none'), COUNT(*) FROM ev GROUP BY COALESCE(k, -1), COALESCE(tag, 'none')",
     "SELECT COALESCE(k, -1), COALESCE(tag, 'none'), COUNT(*) FROM ev GROUP BY ALL", [int, str, int]),
    # A group of the outer aggregation that loses its last key is deleted (-D): its hash goes.
    ("n BIGINT, keys BIGINT", "n",
     "SELECT n, COUNT(*) FROM (SELECT COALESCE(k, -1) AS k, COUNT(*) AS n FROM ev GROUP BY COALESCE(k, -1)) GROUP BY n",
     "SELECT n, COUNT(*) FROM (SELECT COALESCE(k, -1) AS k, COUNT(*) AS n FROM ev GROUP BY ALL) GROUP BY n",
     [int, int]),
]


@pytest.mark.parametrize("parallelism", ["1", "4"])
@pytest.mark.parametrize("case", range(len(UPSERTS)))
@pytest.mark.parametrize("kind", TABLES)
def test_an_updating_group_by_upserts_hashes_as_duckdb_computes(r: redis.Redis, redis_url: str, kind: str,
                                                                case: int, parallelism: str) -> None:
    columns, key, query, theirs_query, types = UPSERTS[case]
    table = TABLES[kind]
    fill(redis_url, "ev", table)
    sink = (f"CREATE TABLE h ({columns}, PRIMARY KEY ({key}) NOT ENFORCED) WITH ('connector' = 'redis', "
            f"'url' = '{redis_url}', 'data-structure' = 'hash', 'key.prefix' = 'h|')")
    metrics = clink.sql([source(redis_url), sink, f"INSERT INTO h {query}"],
                        config={"parallelism.default": parallelism}).run()
    con = shared_duckdb.connect()
    con.register("ev", table)
    theirs = con.execute(theirs_query).fetchall()
    names = [c.split()[0] for c in columns.split(", ")]
    ours = hashes(r, "h|", names, types)
    shared_duckdb.assert_same_rows(pa.Table.from_pylist([dict(zip(names, row)) for row in ours]), theirs)
    assert metrics.records_out["h"] > len(theirs)  # the sink saw updates, and kept one hash per key


def test_keys_are_the_prefix_and_the_key_values(r: redis.Redis, redis_url: str) -> None:
    fill(redis_url, "ev", TABLES["dense"])
    sink = (f"CREATE TABLE counts (tag STRING, k BIGINT, n BIGINT, PRIMARY KEY (tag, k) NOT ENFORCED) WITH "
            f"('connector' = 'redis', 'url' = '{redis_url}', 'data-structure' = 'hash', 'key.delimiter' = '/')")
    clink.sql([source(redis_url), sink, "INSERT INTO counts SELECT tag, k, COUNT(*) FROM ev WHERE k < 2 GROUP BY tag, k"]
              ).run()
    # The default prefix is the table's name and the delimiter.
    keys = sorted(k.decode() for k in r.scan_iter(match="counts/*"))
    assert keys == ["counts/a/0", "counts/a/1", "counts/b/0", "counts/b/1", "counts/c:d/0", "counts/c:d/1"]
    fields = r.hgetall("counts/c:d/1")
    assert set(fields) == {b"tag", b"k", b"n"} and fields[b"tag"] == b"c:d" and fields[b"k"] == b"1"


SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), (ROWKIND_COLUMN, pa.string())])


def changes(rows: list[tuple]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([dict(zip(SCHEMA.names, row, strict=True)) for row in rows], schema=SCHEMA)


def test_changes_apply_by_key(r: redis.Redis, redis_url: str) -> None:
    w = REDIS.create_sink(TableSpec(name="t", schema=SCHEMA, table_schema=SCHEMA, primary_key=("k",),
                                    options={"url": redis_url, "data-structure": "hash", "key.prefix": "t:"},
                                    changelog=UPDATING), ctx())
    w.write(changes([(1, "a", "+I"), (2, "b", "+I"), (3, "c", "+I")]))
    # -U is left to the +U after it; a NULL value is a field left out; -D deletes the hash.
    w.write(changes([(1, "a", "-U"), (1, None, "+U"), (2, "b", "-D"), (3, "c", "-U"), (3, "z", "+U")]))
    assert sorted(r.keys("t:*")) == [b"t:1", b"t:3"]
    assert r.hgetall("t:1") == {b"k": b"1"}
    assert r.hgetall("t:3") == {b"k": b"3", b"v": b"z"}
    w.write(changes([(2, "again", "+I")]))
    assert r.hgetall("t:2") == {b"k": b"2", b"v": b"again"}
    w.close()


def test_a_hash_table_needs_a_primary_key(redis_url: str) -> None:
    schema = pa.schema([("k", pa.int64())])
    with pytest.raises(ConnectorError, match="needs a PRIMARY KEY"):
        REDIS.create_sink(TableSpec(name="t", schema=schema, table_schema=schema,
                                    options={"url": redis_url, "data-structure": "hash"}), ctx())


# ---------------------------------------------------------------- lookup joins


@pytest.fixture
def customers(r: redis.Redis) -> pa.Table:
    """Customers 0..29 in hashes ``cust:<id>``; orders refer to ids 0..39, so some find none."""
    rng = np.random.default_rng(5)
    table = pa.table({"id": pa.array(range(30), pa.int64()),
                      "name": pa.array([f"c{i}" for i in range(30)]),
                      "tier": pa.array(rng.integers(1, 4, 30), pa.int32(), mask=rng.random(30) < 0.3)})
    for row in table.to_pylist():
        r.hset(f"cust:{row['id']}", mapping={k: str(v) for k, v in row.items() if v is not None})
    r.hset("other:1", mapping={"id": "1", "name": "not a customer"})  # another prefix: not read
    return table


CUSTOMERS = ("CREATE TABLE cust (id BIGINT, name STRING, tier INT, PRIMARY KEY (id) NOT ENFORCED) WITH "
             "('connector' = 'redis', 'url' = '{url}', 'data-structure' = 'hash', 'key.prefix' = 'cust:', "
             "'scan.fetch-size' = '7')")


@pytest.mark.parametrize("parallelism", ["1", "4"])
@pytest.mark.parametrize("join", ["JOIN", "LEFT JOIN"])
@pytest.mark.parametrize("kind", TABLES)
def test_lookup_join_against_hashes_matches_duckdb(r: redis.Redis, redis_url: str, customers: pa.Table, kind: str,
                                                   join: str, parallelism: str) -> None:
    table = TABLES[kind]
    fill(redis_url, "ev", table)
    query = (f"SELECT e.k, e.price, c.name, c.tier FROM ev AS e {join} cust FOR SYSTEM_TIME AS OF e.pt AS c "
             "ON e.k = c.id")
    ours = clink.sql([source(redis_url), CUSTOMERS.format(url=redis_url), query],
                     config={"parallelism.default": parallelism}).to_arrow()
    con = shared_duckdb.connect()
    con.register("ev", table)
    con.register("cust", customers)
    theirs = con.execute(f"SELECT e.k, e.price, c.name, c.tier FROM ev AS e {join} cust AS c ON e.k = c.id").fetchall()
    shared_duckdb.assert_same_rows(ours, theirs)
    assert any(row[2] is None for row in theirs) == (join == "LEFT JOIN")


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every RedisHashLookup a pipeline makes, and the hash tables it reads whole (by name)."""
    from clink.runtime.connectors import redis as connector

    lookups: list = []
    scanned: list = []
    opened, reading = connector.RedisHashLookup.__init__, connector.RedisHashReader.__init__

    def recording(self, spec, keys, ctx) -> None:
        opened(self, spec, keys, ctx)
        lookups.append(self)

    def scanning(self, spec, ctx) -> None:
        reading(self, spec, ctx)
        scanned.append(spec.name)

    monkeypatch.setattr(connector.RedisHashLookup, "__init__", recording)
    monkeypatch.setattr(connector.RedisHashReader, "__init__", scanning)
    return [lookups, scanned]


@pytest.mark.parametrize("cache", ["NONE", "PARTIAL"])
def test_a_lookup_join_by_the_primary_key_asks_for_its_keys_only(r: redis.Redis, redis_url: str, customers: pa.Table,
                                                                 made: list, cache: str) -> None:
    table = TABLES["nulls"]
    fill(redis_url, "ev", table)
    options = "" if cache == "NONE" else ", 'lookup.cache' = 'PARTIAL'"
    query = "SELECT e.k, c.name FROM ev AS e LEFT JOIN cust FOR SYSTEM_TIME AS OF e.pt AS c ON e.k = c.id"
    ours = clink.sql([source(redis_url), CUSTOMERS.format(url=redis_url)[:-1] + options + ")", query]).to_arrow()
    con = shared_duckdb.connect()
    con.register("ev", table)
    con.register("cust", customers)
    shared_duckdb.assert_same_rows(ours, con.execute(
        "SELECT e.k, c.name FROM ev AS e LEFT JOIN cust AS c ON e.k = c.id").fetchall())
    lookups, scanned = made
    assert scanned == [] and len(lookups) == 1
    batches = -(-N // 50)  # the stream is read 50 entries at a time
    queries = lookups[0].metrics["queries"]
    if cache == "NONE":
        assert queries == batches  # each batch has a key that is not NULL
    else:
        # 40 distinct keys: once each is cached, later batches ask nothing.
        assert queries < batches and lookups[0].metrics["cache_misses"] == 40


def test_a_lookup_join_by_another_column_reads_the_hashes_whole(r: redis.Redis, redis_url: str, customers: pa.Table,
                                                                made: list) -> None:
    fill(redis_url, "ev", TABLES["dense"])
    query = ("SELECT e.tag, c.id FROM ev AS e JOIN cust FOR SYSTEM_TIME AS OF e.pt AS c "
             "ON e.tag = c.name")  # no customer is called a, b or c:d
    r.hset("cust:100", mapping={"id": "100", "name": "a"})
    ours = clink.sql([source(redis_url), CUSTOMERS.format(url=redis_url), query]).to_arrow()
    assert set(ours.column("id").to_pylist()) == {100}
    assert ours.num_rows == pa.compute.sum(pa.compute.equal(TABLES["dense"].column("tag"), "a")).as_py()
    lookups, scanned = made
    assert lookups == [] and scanned == ["cust"]


def hash_lookup(url: str, schema: pa.Schema, key: tuple[str, ...], now: list[int], **options: str):
    from clink.runtime.connectors.redis import RedisHashLookup

    spec = TableSpec(name="cust", schema=schema, table_schema=schema, primary_key=key,
                     options={"url": url, "data-structure": "hash", "key.prefix": "cust:", **options})
    return RedisHashLookup(spec, key, RuntimeContext(config={}, stdout=io.StringIO(), clock=lambda: now[0]))


def test_the_lookup_cache_expires_and_is_bounded(r: redis.Redis, redis_url: str, customers: pa.Table) -> None:
    now = [0]
    look = hash_lookup(redis_url, customers.schema, ("id",), now, **{
        "lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "2",
        "lookup.partial-cache.expire-after-write": "10 s", "lookup.partial-cache.cache-missing-key": "false"})
    ask = lambda ids: look.lookup(pa.table({"id": pa.array(ids, pa.int64())}))  # noqa: E731
    assert ask([1, 2, 2, None]).sort_by("id").to_pylist() == customers.take([1, 2]).to_pylist()
    ask([1, 2])
    assert look.metrics["queries"] == 1
    r.hset("cust:1", "name", "renamed")  # the cache still answers for 1 ...
    ask([3])  # ... until a third key pushes out the least recently used (1)
    assert ask([1]).column("name").to_pylist() == ["renamed"]
    assert look.metrics["queries"] == 3
    ask([99])
    ask([99])  # a missing key is not cached
    assert look.metrics["queries"] == 5
    now[0] = 10_000  # every entry written at 0 has expired
    ask([3])
    assert look.metrics["queries"] == 6


def test_a_two_column_key_whose_hashes_lack_the_key_fields(r: redis.Redis, redis_url: str) -> None:
    schema = pa.schema([("region", pa.string()), ("tier", pa.int32()), ("rate", pa.float64())])
    # The hash key joins the primary key's values in its declared order (tier, then region), and
    # a hash written by another program may hold only the value: the key comes from what was asked.
    r.hset("cust:1|eu", mapping={"rate": "9.0"})
    r.hset("cust:2|eu", mapping={"rate": "2.5", "region": "eu", "tier": "2"})
    r.hset("cust:eu|3", mapping={"rate": "7.0"})  # the other order: not the key of (3, 'eu')
    look = hash_lookup(redis_url, schema, ("tier", "region"), [0], **{"key.delimiter": "|"})
    rows = look.lookup(pa.table({"region": ["eu", "eu", "eu", None], "tier": pa.array([1, 2, 3, 4], pa.int32())}))
    assert rows.sort_by("tier").to_pylist() == [{"region": "eu", "tier": 1, "rate": 9.0},
                                                {"region": "eu", "tier": 2, "rate": 2.5}]
    assert look.metrics["queries"] == 1
