"""Lookups in a real PostgreSQL table: a lookup join in SQL (compared with DuckDB's join of the
same rows), the connector's lookup by batches of keys with and without its cache, and that the
cache saves queries."""

from __future__ import annotations

import io

import duckdb
import pyarrow as pa
import pytest

import clink
from clink.runtime.connectors.base import TableSpec
from clink.runtime.connectors.jdbc import JdbcLookup
from clink.runtime.context import RuntimeContext

ORDERS = ("CREATE TABLE orders (id BIGINT, customer INT, amount INT, proc_time AS PROCTIME()) "
          "WITH ('connector' = 'datagen', 'number-of-rows' = '400', 'fields.customer.min' = '1', "
          "'fields.customer.max' = '60', 'fields.customer.null-rate' = '0.2', 'fields.id.kind' = 'sequence', "
          "'fields.id.start' = '1', 'fields.id.end' = '400', 'batch-size' = '30', 'seed' = '3')")


@pytest.fixture(scope="module")
def crm(postgres) -> str:
    """Customers 1..50 (orders name customers up to 60: some have none), every third region NULL."""
    database = postgres.new_database()
    postgres.execute(
        database,
        "CREATE TABLE customers (id integer PRIMARY KEY, region text, tier smallint)",
        "INSERT INTO customers SELECT i, CASE WHEN i % 3 = 0 THEN NULL ELSE 'r' || (i % 4) END, i % 5 "
        "FROM generate_series(1, 50) i",
        "CREATE TABLE rates (region text, tier integer, rate double precision, PRIMARY KEY (region, tier))",
        "INSERT INTO rates SELECT 'r' || r, t, r * 10 + t FROM generate_series(0, 3) r, generate_series(0, 4) t")
    return database


def with_options(postgres, database: str, table: str, **extra: str) -> str:
    options = {"connector": "jdbc", "url": postgres.jdbc_url(database), "table-name": table,
               "username": "clink", "password": "clink-secret", **extra}
    return ", ".join(f"'{k}' = '{v}'" for k, v in options.items())


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[JdbcLookup]:
    """Every JdbcLookup a pipeline makes; a scan of the whole table fails the test."""
    from clink.runtime.connectors import jdbc

    made: list[JdbcLookup] = []
    opened = jdbc.JdbcLookup.__init__

    def recording(self, spec, keys, ctx) -> None:
        opened(self, spec, keys, ctx)
        made.append(self)

    def no_scan(self, spec, ctx) -> None:
        raise AssertionError(f"table {spec.name!r} was scanned whole, not looked up by key")

    monkeypatch.setattr(jdbc.JdbcLookup, "__init__", recording)
    monkeypatch.setattr(jdbc.JdbcSourceReader, "__init__", no_scan)
    return made


def duckdb_join(postgres, crm: str, query: str) -> list[tuple]:
    con = duckdb.connect()
    con.register("orders", clink.sql([ORDERS, "SELECT id, customer, amount FROM orders"]).to_arrow())
    con.register("customers", pa.Table.from_pylist(
        [{"id": i, "region": r, "tier": t} for i, r, t in postgres.query(crm, "SELECT id, region, tier FROM customers")],
        schema=pa.schema([("id", pa.int32()), ("region", pa.string()), ("tier", pa.int16())])))
    return sorted(con.execute(query.replace(" FOR SYSTEM_TIME AS OF o.proc_time", "")).fetchall(), key=repr)


@pytest.mark.parametrize("cache", ["NONE", "PARTIAL"])
@pytest.mark.parametrize("kind", ["JOIN", "LEFT JOIN"])
def test_a_lookup_join_in_sql_matches_duckdb(postgres, crm: str, kind: str, cache: str,
                                             lookups: list[JdbcLookup]) -> None:
    customers = (f"CREATE TABLE customers (id INT, region STRING, tier SMALLINT) "
                 f"WITH ({with_options(postgres, crm, 'customers', **{'lookup.cache': cache})})")
    query = (f"SELECT o.id, o.amount, c.region, c.tier FROM orders AS o {kind} customers "
             "FOR SYSTEM_TIME AS OF o.proc_time AS c ON o.customer = c.id AND c.tier <> 4")
    ours = sorted((tuple(r.values()) for r in clink.sql([ORDERS, customers, query]).to_arrow().to_pylist()), key=repr)
    assert ours == duckdb_join(postgres, crm, query)
    assert len(ours) >= 200 and any(r[2] is None for r in ours)
    # 400 orders in batches of 30: one query per batch without a cache, far fewer with one.
    (look,) = lookups
    queries = look.metrics["queries"]
    assert queries == 14 if cache == "NONE" else 1 <= queries < 14


def test_a_lookup_join_at_parallelism_two(postgres, crm: str, lookups: list[JdbcLookup]) -> None:
    customers = (f"CREATE TABLE customers (id INT, region STRING, tier SMALLINT) "
                 f"WITH ({with_options(postgres, crm, 'customers')})")
    query = ("SELECT o.id, c.region FROM orders AS o LEFT JOIN customers FOR SYSTEM_TIME AS OF o.proc_time AS c "
             "ON o.customer = c.id")
    result = clink.sql([ORDERS, customers, query], config={"parallelism.default": "2"}).to_arrow()
    theirs = duckdb_join(postgres, crm, query.replace("c.region", "o.amount, c.region, c.tier"))
    assert sorted((tuple(r.values()) for r in result.to_pylist()), key=repr) == sorted(
        ((i, r) for i, _, r, _ in theirs), key=repr)
    assert len(lookups) == 2


def lookup(postgres, database: str, table: str, schema: pa.Schema, keys: tuple[str, ...], now: list[int],
           **options: str) -> JdbcLookup:
    spec = TableSpec(name=table, schema=schema, table_schema=schema,
                     options={"url": postgres.uri(database), "table-name": table, **options})
    return JdbcLookup(spec, keys, RuntimeContext(config={}, stdout=io.StringIO(), clock=lambda: now[0]))


CUSTOMERS = pa.schema([("id", pa.int32()), ("region", pa.string()), ("tier", pa.int16())])
RATES = pa.schema([("region", pa.string()), ("tier", pa.int32()), ("rate", pa.float64())])


def expected_customers(postgres, database: str, ids: list) -> list[tuple]:
    wanted = sorted({i for i in ids if i is not None and i <= 50})
    rows = postgres.query(database, "SELECT id, region, tier FROM customers ORDER BY id")
    return [r for r in rows if r[0] in wanted]


@pytest.mark.parametrize("cache", ["NONE", "PARTIAL"])
def test_one_query_per_batch_of_keys(postgres, crm: str, cache: str) -> None:
    now = [0]
    look = lookup(postgres, crm, "customers", CUSTOMERS, ("id",), now, **{"lookup.cache": cache})
    batches = [[1, 2, 2, None, 55, 7], [7, 8, 1, 60], [2, 8, 7]]
    for ids in batches:
        rows = look.lookup(pa.table({"id": pa.array(ids, pa.int32())}))
        assert rows.schema == CUSTOMERS
        assert sorted(tuple(r.values()) for r in rows.to_pylist()) == expected_customers(postgres, crm, ids)
    # Without a cache every batch is a query; with one, the third batch is all hits (the 60 of
    # the second batch, a key without a row, is remembered too).
    assert look.metrics["queries"] == (3 if cache == "NONE" else 2)
    if cache == "PARTIAL":
        assert look.metrics["cache_hits"] == 2 + 3 and look.metrics["cache_misses"] == 4 + 2


def test_a_two_column_key_is_one_query(postgres, crm: str) -> None:
    look = lookup(postgres, crm, "rates", RATES, ("region", "tier"), [0])
    keys = pa.table({"region": ["r1", "r1", "r3", None, "zz"], "tier": pa.array([0, 4, 2, 1, 1], pa.int32())})
    rows = look.lookup(keys)
    assert sorted(tuple(r.values()) for r in rows.to_pylist()) == [("r1", 0, 10.0), ("r1", 4, 14.0), ("r3", 2, 32.0)]
    assert look.metrics["queries"] == 1


def test_the_cache_expires_and_is_bounded(postgres, crm: str) -> None:
    now = [0]
    look = lookup(postgres, crm, "customers", CUSTOMERS, ("id",), now, **{
        "lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "2",
        "lookup.partial-cache.expire-after-write": "10 s", "lookup.partial-cache.cache-missing-key": "false"})
    ask = lambda ids: look.lookup(pa.table({"id": pa.array(ids, pa.int32())}))  # noqa: E731
    ask([1, 2])
    ask([1, 2])
    assert look.metrics["queries"] == 1
    ask([3])  # a third key: the least recently used (1) goes
    ask([2, 3])
    assert look.metrics["queries"] == 2
    ask([1])
    assert look.metrics["queries"] == 3
    ask([99])
    ask([99])  # a missing key is not cached
    assert look.metrics["queries"] == 5
    now[0] = 10_000  # every entry written at 0 has expired
    ask([1])
    assert look.metrics["queries"] == 6


@pytest.mark.parametrize("crash_after_steps", [3, 7])
def test_a_checkpointed_lookup_join_into_a_jdbc_table_survives_a_crash(
        postgres, crm: str, tmp_path, crash_after_steps: int) -> None:
    """Orders enriched by key from PostgreSQL, written back to PostgreSQL with checkpoints; the
    job dies between steps and resumes: the output equals DuckDB's join, once per order."""
    from clink.runtime.executor import Job

    database = postgres.new_database()
    postgres.execute(database, "CREATE TABLE enriched (id bigint, region text, tier smallint)")
    customers = (f"CREATE TABLE customers (id INT, region STRING, tier SMALLINT) "
                 f"WITH ({with_options(postgres, crm, 'customers', **{'lookup.cache': 'PARTIAL'})})")
    out = f"CREATE TABLE enriched (id BIGINT, region STRING, tier SMALLINT) WITH ({with_options(postgres, database, 'enriched')})"
    query = ("SELECT o.id, c.region, c.tier FROM orders AS o LEFT JOIN customers FOR SYSTEM_TIME AS OF o.proc_time "
             "AS c ON o.customer = c.id")
    plan = clink.compile([ORDERS, customers, out, f"INSERT INTO enriched {query}"], name="enrich.sql").runtime_plan

    def job() -> Job:
        config = {"execution.checkpointing.interval-rows": "90"}
        return Job(plan, RuntimeContext(config=config, state_dir=tmp_path / "state", stdout=io.StringIO()))

    first = job()
    for _ in range(crash_after_steps):
        first.step()
    del first  # a crash
    resumed = job()
    resumed.run()
    assert resumed.metrics.restored_from is not None
    theirs = duckdb_join(postgres, crm, query.replace("c.region, c.tier", "o.amount, c.region, c.tier"))
    ours = sorted(postgres.query(database, "SELECT id, region, tier FROM enriched"), key=repr)
    assert ours == sorted(((i, r, t) for i, _, r, t in theirs), key=repr) and len(ours) == 400
