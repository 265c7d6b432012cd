"""Regular joins: the final table of every join kind, over append-only and updating inputs read
in small interleaved batches, must equal DuckDB's batch answer over the same rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

# tests/shared_duckdb.py: pytest puts tests/ on sys.path, as it holds the root conftest.py.
import shared_duckdb

import clink
from clink.errors import SqlError
from clink.runtime.context import RuntimeContext
from clink.testing import run_select

N_LEFT = 1500
N_RIGHT = 700


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    rng = np.random.default_rng(23)

    def nulls(n: int, rate: float) -> np.ndarray:
        return rng.random(n) < rate

    left = pa.table({
        "k": pa.array(rng.integers(0, 40, N_LEFT), pa.int64(), mask=nulls(N_LEFT, 0.05)),
        "s": pa.array(rng.choice(np.array(["a", "b", "c", "d"]), N_LEFT), pa.string(), mask=nulls(N_LEFT, 0.05)),
        "v": pa.array(rng.integers(0, 100, N_LEFT), pa.int32(), mask=nulls(N_LEFT, 0.1)),
    })
    right = pa.table({
        "k": pa.array(rng.integers(20, 70, N_RIGHT), pa.int32(), mask=nulls(N_RIGHT, 0.05)),
        "s": pa.array(rng.choice(np.array(["a", "b", "c", "e"]), N_RIGHT), pa.string()),
        "w": pa.array(rng.integers(0, 100, N_RIGHT), pa.int64(), mask=nulls(N_RIGHT, 0.1)),
    })
    return {"l": left, "r": right}


QUERIES = [
    "SELECT l.k, l.s, l.v, r.w FROM l JOIN r ON l.k = r.k",
    "SELECT l.k, l.v, r.k AS rk, r.w FROM l LEFT JOIN r ON l.k = r.k AND l.s = r.s",
    "SELECT l.v, r.k, r.s, r.w FROM l RIGHT OUTER JOIN r ON l.k = r.k AND l.v < r.w",
    "SELECT l.k, l.s, r.k AS rk, r.s AS rs FROM l FULL OUTER JOIN r ON l.k = r.k AND r.w > 50",
    # Keys that are expressions, and a condition on one side only in ON and in WHERE.
    "SELECT l.k, r.w FROM l INNER JOIN r ON l.k + 1 = r.k AND l.s = 'a' WHERE r.w % 2 = 0",
    # A comma join: the WHERE equality is its key, the rest filters below or stays residual.
    "SELECT l.k, l.v, r.w FROM l, r WHERE l.k = r.k AND l.s = r.s AND l.v > r.w - 20",
    # Three inputs, and a WHERE above an outer join.
    ("SELECT a.k, a.v, b.w, c.v AS cv FROM l a JOIN r b ON a.k = b.k LEFT JOIN l c ON b.w = c.v "
     "WHERE a.v IS NOT NULL"),
    # An updating input: join the counts per key (revised as rows arrive) with the other side.
    "SELECT g.k, g.n, r.w FROM (SELECT k, COUNT(*) AS n FROM l GROUP BY k) g JOIN r ON g.k = r.k",
    # Retractions through an outer join and a second aggregation.
    ("SELECT rs, COUNT(*) AS n, SUM(v) AS total, COUNT(rk) AS matched FROM "
     "(SELECT l.v, r.s AS rs, r.k AS rk FROM l LEFT JOIN r ON l.k = r.k AND l.s = r.s) GROUP BY rs"),
    # Both inputs updating, full outer.
    ("SELECT a.k, a.n, b.m FROM (SELECT k, COUNT(*) AS n FROM l GROUP BY k) a FULL JOIN "
     "(SELECT k, SUM(w) AS m FROM r GROUP BY k) b ON a.k = b.k AND a.n > 30"),
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_final_table_equals_duckdb(tables: dict[str, pa.Table], query: str, backend: str) -> None:
    context = RuntimeContext(config={"state.backend": backend})
    ours = run_select(query, context=context, row_group_size=61, **tables)
    shared_duckdb.assert_same_rows(ours, _duck(query, tables))


def _duck(query: str, tables: dict[str, pa.Table]) -> list[tuple]:
    con = shared_duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    return con.execute(query).fetchall()


def _refusal(script: str) -> str:
    with pytest.raises(SqlError) as info:
        clink.compile(script, name="p.sql")
    return info.value.render({"p.sql": script})


def test_a_join_without_an_equality_is_refused_with_its_position() -> None:
    script = ("CREATE TABLE a (k INT) WITH ('connector' = 'datagen');\n"
              "CREATE TABLE b (k INT) WITH ('connector' = 'datagen');\n"
              "SELECT * FROM a JOIN b ON a.k < b.k;\n")
    text = _refusal(script)
    assert "an INNER JOIN needs at least one equality between the two sides" in text
    assert "p.sql:3:15" in text and "add ON a.key = b.key" in text


def test_outer_join_into_an_append_only_sink_is_refused() -> None:
    script = ("CREATE TABLE a (k INT, v INT) WITH ('connector' = 'datagen');\n"
              "CREATE TABLE b (k INT, w INT) WITH ('connector' = 'datagen');\n"
              "CREATE TABLE f (k INT, v INT, w INT) WITH ('connector' = 'filesystem', 'path' = '/tmp/x', "
              "'format' = 'csv');\n"
              "INSERT INTO f SELECT a.k, a.v, b.w FROM a LEFT JOIN b ON a.k = b.k;\n")
    text = _refusal(script)
    assert "takes only inserts, but the query produces updates: its LEFT JOIN (at p.sql:4:" in text


def test_inner_join_of_append_only_inputs_is_append_only(tmp_path) -> None:
    script = ("CREATE TABLE a (k INT, v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '100');\n"
              "CREATE TABLE b (k INT, w INT) WITH ('connector' = 'datagen', 'number-of-rows' = '100');\n"
              f"CREATE TABLE f (k INT, v INT, w INT) WITH ('connector' = 'filesystem', 'path' = '{tmp_path}', "
              "'format' = 'csv');\n"
              "INSERT INTO f SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k;\n")
    plan = clink.compile(script)
    explained = plan.explain()
    assert "Join INNER" in explained and "produces updates" not in explained


def test_ambiguous_column_in_a_join_asks_for_a_qualifier() -> None:
    script = ("CREATE TABLE a (k INT, v INT) WITH ('connector' = 'datagen');\n"
              "CREATE TABLE b (k INT, w INT) WITH ('connector' = 'datagen');\n"
              "SELECT k FROM a JOIN b ON a.k = b.k;\n")
    text = _refusal(script)
    assert "column 'k' is ambiguous" in text and "p.sql:3:8" in text


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_interval_join_equals_duckdb_and_is_planned_as_one(backend: str) -> None:
    rng = np.random.default_rng(5)
    n = 2000
    base = np.datetime64("2026-01-01T00:00:00", "ms")

    def side(key_name: str) -> pa.Table:
        # Roughly ordered times (jitter of up to 2 s against a 4 s watermark delay).
        ms = np.arange(n) * 250 + rng.integers(0, 2000, n)
        return pa.table({key_name: pa.array(rng.integers(0, 12, n), pa.int64()),
                         "ts": pa.array(base + ms.astype("timedelta64[ms]"), pa.timestamp("ms")),
                         "x": pa.array(rng.integers(0, 1000, n), pa.int64())})

    tables = {"l": side("k"), "r": side("k")}
    query = ("SELECT l.k, l.x, r.x AS rx, r.ts FROM l, r WHERE l.k = r.k "
             "AND r.ts BETWEEN l.ts - INTERVAL '3' SECOND AND l.ts + INTERVAL '1' SECOND")
    context = RuntimeContext(config={"state.backend": backend})
    watermark = "ts AS ts - INTERVAL '4' SECOND"
    ours = run_select(query, context=context, row_group_size=100, watermarks={"l": watermark, "r": watermark},
                      **tables)
    duck_query = query.replace("INTERVAL '3' SECOND", "INTERVAL 3 SECOND").replace("INTERVAL '1' SECOND",
                                                                                    "INTERVAL 1 SECOND")
    shared_duckdb.assert_same_rows(ours, _duck(duck_query, tables))
    assert ours.num_rows > 1000


def test_interval_join_is_explained_with_its_bounds() -> None:
    script = ("CREATE TABLE a (k INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n"
              "CREATE TABLE b (k INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n"
              "SELECT a.k FROM a JOIN b ON a.k = b.k AND a.ts BETWEEN b.ts - INTERVAL '5' SECOND AND b.ts;\n")
    explained = clink.compile(script).explain()
    # a.ts in [b.ts - 5 s, b.ts]  <=>  b.ts - a.ts in [0, 5000] ms
    assert "interval=[right.ts - left.ts BETWEEN 0 ms AND 5000 ms]" in explained
    assert "Join INNER (interval)" in explained


@pytest.mark.parametrize("kind", ["JOIN", "LEFT JOIN"])
def test_lookup_join_equals_duckdb(tables: dict[str, pa.Table], kind: str) -> None:
    """FOR SYSTEM_TIME AS OF a processing time: the right side is read whole, then every left row
    is looked up in it (the rows that came before it waited)."""
    query = (f"SELECT L.k, L.v, R.w FROM (SELECT *, PROCTIME() AS p FROM l) L {kind} r FOR SYSTEM_TIME AS OF L.p "
             "AS R ON L.k = R.k AND R.w > 10")
    ours = run_select(query, row_group_size=61, **tables)
    shared_duckdb.assert_same_rows(ours, _duck(f"SELECT L.k, L.v, R.w FROM l L {kind} r R ON L.k = R.k AND R.w > 10", tables))


def test_lookup_join_is_append_only_and_explained() -> None:
    script = ("CREATE TABLE a (k INT, v INT) WITH ('connector' = 'datagen');\n"
              "CREATE TABLE side (k INT, name STRING) WITH ('connector' = 'filesystem', 'path' = '/tmp/s.csv', "
              "'format' = 'csv');\n"
              "CREATE TABLE f (k INT, name STRING) WITH ('connector' = 'filesystem', 'path' = '/tmp/x', "
              "'format' = 'csv');\n"
              "INSERT INTO f SELECT A.k, S.name FROM (SELECT *, PROCTIME() AS p FROM a) A LEFT JOIN side "
              "FOR SYSTEM_TIME AS OF A.p AS S ON A.k = S.k;\n")
    explained = clink.compile(script).explain()
    assert "LookupJoin LEFT state=[right side by key]" in explained and "produces updates" not in explained


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT * FROM a JOIN b FOR SYSTEM_TIME AS OF a.ts AS B ON a.k = B.k",
     "a temporal join by event time needs a versioned table on the right: 'b' must be a table with a PRIMARY KEY"),
    ("SELECT * FROM a JOIN b FOR SYSTEM_TIME AS OF a.k AS B ON a.k = B.k",
     "FOR SYSTEM_TIME AS OF needs a time attribute of the left side"),
    ("SELECT * FROM b FOR SYSTEM_TIME AS OF CURRENT_TIMESTAMP", "belongs to the right side of a JOIN"),
    ("SELECT * FROM (SELECT *, PROCTIME() AS p FROM a) A FULL JOIN b FOR SYSTEM_TIME AS OF A.p AS B ON A.k = B.k",
     "a join FOR SYSTEM_TIME AS OF is INNER or LEFT, not FULL"),
])
def test_joins_for_system_time_that_cannot_run_are_refused(sql: str, message: str) -> None:
    text = _refusal("CREATE TABLE a (k INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n"
                    "CREATE TABLE b (k INT) WITH ('connector' = 'datagen');\n" + sql + ";\n")
    assert message in text and "p.sql:3:" in text


@pytest.mark.parametrize("kind", ["JOIN", "LEFT JOIN"])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("versioned", ["table", "view"])
def test_temporal_join_equals_duckdb_asof_join(tmp_path, kind: str, backend: str, versioned: str) -> None:
    """Each order meets the rate of its currency valid at the order's time (the latest rate at
    or before it): DuckDB's ASOF JOIN over the same rows. The versioned side is a table with a
    PRIMARY KEY, or Flink's versioned view: the latest row per key of an append-only table."""
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    base = np.datetime64("2026-01-01T00:00:00", "ms")
    n, m = 3000, 400
    orders = pa.table({
        "cur": pa.array(rng.choice(np.array(["EUR", "USD", "GBP", "JPY"]), n)),
        "amount": pa.array(rng.integers(1, 100, n), pa.int64()),
        "ts": pa.array(base + (np.sort(rng.integers(0, 600_000, n)) + rng.integers(0, 2000, n)).astype(
            "timedelta64[ms]"), pa.timestamp("ms"))})
    rates = pa.table({
        "cur": pa.array(rng.choice(np.array(["EUR", "USD", "GBP"]), m)),
        "rate": pa.array(rng.integers(1, 50, m), pa.int64()),
        "rts": pa.array(base + np.sort(rng.choice(600_000, m, replace=False)).astype("timedelta64[ms]"),
                        pa.timestamp("ms"))})
    pq.write_table(orders, tmp_path / "orders.parquet", row_group_size=97)
    pq.write_table(rates, tmp_path / "rates.parquet", row_group_size=13)
    script = (
        f"SET 'state.backend' = '{backend}';\n"
        "CREATE TABLE orders (cur STRING, amount BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '3' "
        f"SECOND) WITH ('connector' = 'filesystem', 'path' = '{tmp_path / 'orders.parquet'}', 'format' = 'parquet');\n"
        f"CREATE TABLE rates (cur STRING, rate BIGINT, rts TIMESTAMP(3), "
        f"{'PRIMARY KEY (cur) NOT ENFORCED, ' if versioned == 'table' else ''}"
        f"WATERMARK FOR rts AS rts) WITH ('connector' = 'filesystem', 'path' = '{tmp_path / 'rates.parquet'}', "
        "'format' = 'parquet');\n"
        "CREATE VIEW latest AS SELECT cur, rate, rts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY cur "
        "ORDER BY rts DESC) AS rownum FROM rates) WHERE rownum = 1;\n"
        f"SELECT o.cur, o.amount, o.ts, r.rate FROM orders o {kind} {'rates' if versioned == 'table' else 'latest'} "
        "FOR SYSTEM_TIME AS OF o.ts AS r ON o.cur = r.cur;\n")
    ours = clink.sql(script).to_arrow()
    con = shared_duckdb.connect()
    con.register("orders", orders)
    con.register("rates", rates)
    asof = "ASOF JOIN" if kind == "JOIN" else "ASOF LEFT JOIN"
    theirs = con.execute(f"SELECT o.cur, o.amount, o.ts, r.rate FROM orders o {asof} rates r "
                         "ON o.cur = r.cur AND o.ts >= r.rts").fetchall()
    shared_duckdb.assert_same_rows(ours, theirs)
    assert ours.num_rows > 2000
    explained = clink.compile(script).explain()
    assert "TemporalJoin" in explained and "produces updates" not in explained


def test_temporal_join_needs_a_versioned_table_and_its_key() -> None:
    ddl = ("CREATE TABLE o (k INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n"
           "CREATE TABLE v (k INT, j INT, x INT, t TIMESTAMP(3), PRIMARY KEY (k, j) NOT ENFORCED, "
           "WATERMARK FOR t AS t) WITH ('connector' = 'datagen');\n"
           "CREATE TABLE w (k INT, t TIMESTAMP(3), WATERMARK FOR t AS t) WITH ('connector' = 'datagen');\n")
    text = _refusal(ddl + "SELECT * FROM o JOIN v FOR SYSTEM_TIME AS OF o.ts ON o.k = v.k;\n")
    assert "must match the versioned table's whole primary key; j is not compared" in text
    text = _refusal(ddl + "SELECT * FROM o JOIN w FOR SYSTEM_TIME AS OF o.ts ON o.k = w.k;\n")
    assert "'w' must be a table with a PRIMARY KEY and a WATERMARK" in text
    # A view is versioned when it keeps the latest row per key by event time (rownum = 1).
    for view in ("SELECT k, t FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY t) AS rn FROM w) "
                 "WHERE rn = 1",  # the first row, not the latest
                 "SELECT k, t FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY t DESC) AS rn FROM w) "
                 "WHERE rn <= 2",
                 "SELECT k, t FROM w"):
        text = _refusal(ddl + f"CREATE VIEW u AS {view};\nSELECT * FROM o JOIN u FOR SYSTEM_TIME AS OF o.ts "
                              "ON o.k = u.k;\n")
        assert "or a view that keeps the latest row per key by event time" in text, view


def test_a_table_read_twice_by_one_query_is_read_once(tables: dict[str, pa.Table]) -> None:
    """A self-join, and a join of two views of one table, read the table through one source."""
    query = "SELECT a.k, a.v, b.v AS bv FROM l a JOIN l b ON a.k = b.k AND a.v < b.v"
    ours = run_select(query, row_group_size=61, **tables)
    shared_duckdb.assert_same_rows(ours, _duck(query, tables))
    other = ("SELECT x.k, x.n, y.s FROM (SELECT k, COUNT(*) AS n FROM l GROUP BY k) x "
             "JOIN (SELECT k, s FROM l WHERE v > 50) y ON x.k = y.k")
    shared_duckdb.assert_same_rows(run_select(other, row_group_size=61, **tables), _duck(other, tables))
    script = ("CREATE TABLE t (k INT, v INT, w INT) WITH ('connector' = 'datagen');\n"
              "SELECT a.k, b.w FROM t a JOIN t b ON a.k = b.v;\n")
    physical = clink.compile(script).explain().split("== Physical plan ==")[1]
    assert physical.count("Source table=[t]") == 1


def _windowed(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    base = np.datetime64("2026-01-01T00:00:00", "ms")
    ms = np.sort(rng.integers(0, n * 100, n))
    return pa.table({"k": pa.array(rng.integers(0, 30, n), pa.int64()),
                     "ts": pa.array(base + ms.astype("timedelta64[ms]"), pa.timestamp("ms"))})


WINDOW_JOIN = (
    "SELECT a.k, a.ws, a.n, b.n AS m FROM "
    "(SELECT k, window_start AS ws, window_end AS we, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE l, DESCRIPTOR(ts), "
    "INTERVAL '10' SECOND)) GROUP BY k, window_start, window_end) a JOIN "
    "(SELECT k, window_start AS ws, window_end AS we, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE r, DESCRIPTOR(ts), "
    "INTERVAL '10' SECOND)) GROUP BY k, window_start, window_end) b "
    "ON a.k = b.k AND a.ws = b.ws AND a.we = b.we")


def _peak_state(query: str, tables: dict[str, pa.Table], watermark: str) -> int:
    import tempfile
    from pathlib import Path

    import pyarrow.parquet as pq

    from clink.testing import table_ddl

    with tempfile.TemporaryDirectory() as tmp:
        ddl = []
        for name, table in tables.items():
            path = Path(tmp) / f"{name}.parquet"
            pq.write_table(table, path, row_group_size=500)
            ddl.append(table_ddl(name, table, path, watermark=watermark))
        return clink.sql(";\n".join([*ddl, query])).run().peak_state_bytes


@pytest.mark.in_process("reads the size of the join's state")
def test_window_join_equals_duckdb_and_frees_closed_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two TUMBLE aggregations joined on their windows: rows of a window the watermark has
    closed can meet no more rows, so the join's state stays that of the open windows."""
    # Small batches, so that the watermark moves many times during the run.
    monkeypatch.setattr("clink.runtime.connectors.filesystem.PARQUET_BATCH_ROWS", 500)
    peaks = []
    for n in (5_000, 50_000):
        tables = {"l": _windowed(n, 1), "r": _windowed(n, 2)}
        watermark = "ts AS ts - INTERVAL '1' SECOND"
        context = RuntimeContext()
        ours = run_select(WINDOW_JOIN, context=context, row_group_size=500,
                          watermarks={"l": watermark, "r": watermark}, **tables)
        duck = WINDOW_JOIN.replace("TABLE(TUMBLE(TABLE l, DESCRIPTOR(ts), INTERVAL '10' SECOND))",
                                   "(SELECT *, time_bucket(INTERVAL 10 SECOND, ts) AS window_start, "
                                   "time_bucket(INTERVAL 10 SECOND, ts) + INTERVAL 10 SECOND AS window_end FROM l)")
        duck = duck.replace("TABLE(TUMBLE(TABLE r, DESCRIPTOR(ts), INTERVAL '10' SECOND))",
                            "(SELECT *, time_bucket(INTERVAL 10 SECOND, ts) AS window_start, "
                            "time_bucket(INTERVAL 10 SECOND, ts) + INTERVAL 10 SECOND AS window_end FROM r)")
        shared_duckdb.assert_same_rows(ours, _duck(duck, tables))
        plan = clink.compile("CREATE TABLE l (k BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH "
                             "('connector' = 'datagen');\nCREATE TABLE r (k BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts "
                             "AS ts) WITH ('connector' = 'datagen');\n" + WINDOW_JOIN + ";\n")
        assert "interval=[right.we - left.we BETWEEN 0 ms AND 0 ms]" in plan.explain()
        peaks.append(_peak_state(WINDOW_JOIN, tables, watermark))
    # Ten times the windows, about the same state.
    assert 0 < peaks[1] < 2 * peaks[0], peaks


def _auctions_and_bids(n: int, seed: int, bids_per_auction: int = 10) -> dict[str, pa.Table]:
    """``n`` auctions (a key of 40, a time every 400 ms, open for -2 to 15 s, a few with no end)
    and ``bids_per_auction`` times as many bids over the same span, both up to 2 s out of order
    (against a watermark 4 s behind: none is late). Bids also carry an end of their own
    (``until``)."""
    rng = np.random.default_rng(seed)
    base = np.datetime64("2026-01-01T00:00:00", "ms")
    m = bids_per_auction * n
    a_ms = np.arange(n) * 400 + rng.integers(0, 2000, n)
    open_ms = rng.integers(-2000, 15_000, n)
    b_ms = np.arange(m) * 400 // bids_per_auction + rng.integers(0, 2000, m)
    stamp = pa.timestamp("ms")
    auction = pa.table({
        "id": pa.array(rng.integers(0, 40, n), pa.int64()),
        "ts": pa.array(base + a_ms.astype("timedelta64[ms]"), stamp),
        "expires": pa.array(base + (a_ms + open_ms).astype("timedelta64[ms]"), stamp, mask=rng.random(n) < 0.03),
        "x": pa.array(rng.integers(0, 1000, n), pa.int64()),
    })
    bid = pa.table({
        "auction": pa.array(rng.integers(0, 40, m), pa.int64()),
        "ts": pa.array(base + b_ms.astype("timedelta64[ms]"), stamp),
        "until": pa.array(base + (b_ms + rng.integers(0, 3000, m)).astype("timedelta64[ms]"), stamp),
        "price": pa.array(rng.integers(0, 10_000, m), pa.int64()),
    })
    return {"a": auction, "b": bid}


BOUNDED_BY_A_COLUMN = [
    # Nexmark q4/q6/q9's condition: a bid meets the auction it was made for while it was open.
    ("SELECT a.id, a.x, b.price, b.ts FROM a, b WHERE a.id = b.auction AND b.ts BETWEEN a.ts AND a.expires",
     "interval=[right.ts - left.ts >= 0 ms AND right.ts - left.expires <= 0 ms]"),
    # The same with the bids on the left: the right side's rows leave by their expires.
    ("SELECT a.id, a.x, b.price, b.ts FROM b JOIN a ON a.id = b.auction AND b.ts BETWEEN a.ts AND a.expires",
     "interval=[right.expires - left.ts >= 0 ms AND right.ts - left.ts <= 0 ms]"),
    # Constants on both bounds, a strict one among them.
    (("SELECT a.id, a.x, b.price FROM a JOIN b ON a.id = b.auction AND b.ts >= a.ts + INTERVAL '1' SECOND "
      "AND b.ts < a.expires - INTERVAL '2' SECOND"),
     "interval=[right.ts - left.ts >= 1000 ms AND right.ts - left.expires <= -2000 ms]"),
    # Two spans that overlap: each side's rows leave by their own end.
    ("SELECT a.id, a.x, b.price, b.ts FROM a JOIN b ON a.id = b.auction AND a.ts <= b.until AND b.ts <= a.expires",
     "interval=[right.until - left.ts >= 0 ms AND right.ts - left.expires <= 0 ms]"),
    # Outer joins: an auction without a bid while it was open, a bid without its open auction,
    # padded with NULLs (retracted when a match arrives, which it can only do before the row goes).
    ("SELECT a.id, a.x, b.price FROM a LEFT JOIN b ON a.id = b.auction AND b.ts BETWEEN a.ts AND a.expires",
     "interval=[right.ts - left.ts >= 0 ms AND right.ts - left.expires <= 0 ms]"),
    ("SELECT a.id, a.x, b.auction, b.price FROM a FULL JOIN b ON a.id = b.auction AND b.ts BETWEEN a.ts AND a.expires",
     "interval=[right.ts - left.ts >= 0 ms AND right.ts - left.expires <= 0 ms]"),
]


@pytest.mark.parametrize(("query", "bounds"), BOUNDED_BY_A_COLUMN)
def test_join_bounded_by_another_column_equals_duckdb(query: str, bounds: str) -> None:
    tables = _auctions_and_bids(1500, 11)
    watermark = "ts AS ts - INTERVAL '4' SECOND"
    ours = run_select(query, row_group_size=97, watermarks={"a": watermark, "b": watermark}, **tables)
    duck = query.replace("INTERVAL '1' SECOND", "INTERVAL 1 SECOND").replace("INTERVAL '2' SECOND",
                                                                              "INTERVAL 2 SECOND")
    shared_duckdb.assert_same_rows(ours, _duck(duck, tables))
    assert ours.num_rows > 1000
    ddl = ("CREATE TABLE a (id BIGINT, ts TIMESTAMP(3), expires TIMESTAMP(3), x BIGINT, WATERMARK FOR ts AS ts) "
           "WITH ('connector' = 'datagen');\nCREATE TABLE b (auction BIGINT, ts TIMESTAMP(3), until TIMESTAMP(3), "
           "price BIGINT, WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n")
    explained = clink.compile(ddl + query + ";\n").explain()
    assert bounds in explained and " (interval) state=[both sides by key]" in explained


@pytest.mark.in_process("reproduces in one process what the outer joins above found on Ray; seven-row batches "
                        "take a Ray job most of a minute")
@pytest.mark.parametrize("query", [q for q, _ in BOUNDED_BY_A_COLUMN if " LEFT JOIN " in q or " FULL JOIN " in q])
def test_an_outer_interval_join_retracts_a_padded_row_once_after_its_first_match_expired(query: str) -> None:
    """Seven rows at a time, so that the watermark moves often: an auction's first bid may expire
    from the join's state while the auction stays open. A later bid must not retract the auction's
    padded row a second time (a changelog that retracts a row it never inserted)."""
    for seed in (11, 12):
        tables = _auctions_and_bids(1500, seed)
        watermark = "ts AS ts - INTERVAL '4' SECOND"
        ours = run_select(query, row_group_size=7, watermarks={"a": watermark, "b": watermark}, **tables)
        shared_duckdb.assert_same_rows(ours, _duck(query, tables))


@pytest.mark.in_process("the order in which rows arrive is the point: one subtask reads each table")
def test_an_outer_interval_join_row_that_met_a_match_on_arrival_is_not_padded_later() -> None:
    """Auction 1 arrives after its first bid (and matches it), the watermark passes that bid (it
    leaves the join's state) while the auction stays open, and a second bid arrives: that is not
    the auction's first match, so there is no padded row to retract."""
    import datetime as dt

    def at(seconds: int) -> dt.datetime:
        return dt.datetime(2024, 1, 1) + dt.timedelta(seconds=seconds)

    auctions = [(3, 0, 1), (1, 0, 100), (2, 50, 51), (4, 55, 56), (5, 58, 59)]  # id, ts, expires
    bids = [(1, 1), *((9, s) for s in range(2, 60)), (1, 60)]  # auction, ts
    tables = {"a": pa.table({"id": [r[0] for r in auctions], "ts": pa.array([at(r[1]) for r in auctions], pa.timestamp("ms")),
                             "expires": pa.array([at(r[2]) for r in auctions], pa.timestamp("ms")),
                             "x": list(range(len(auctions)))}),
              "b": pa.table({"auction": [r[0] for r in bids], "ts": pa.array([at(r[1]) for r in bids], pa.timestamp("ms")),
                             "price": list(range(len(bids)))})}
    query = "SELECT a.id, a.x, b.price FROM a LEFT JOIN b ON a.id = b.auction AND b.ts BETWEEN a.ts AND a.expires"
    watermark = "ts AS ts - INTERVAL '0' SECOND"
    ours = run_select(query, row_group_size=1, watermarks={"a": watermark, "b": watermark}, **tables)
    shared_duckdb.assert_same_rows(ours, _duck(query, tables))


@pytest.mark.in_process("reads the size of the join's state")
def test_join_bounded_by_another_column_keeps_the_state_of_open_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten times the auctions and bids, about the same state: the join holds the open auctions
    and the bids the watermark has not passed, not every row it has seen. (As many bids as
    auctions, so that the two sources, read a batch of rows at a time each, keep the same pace
    in event time: a source read ahead of the other is held in state until the watermark, the
    lesser of the two, catches up.)"""
    monkeypatch.setattr("clink.runtime.connectors.filesystem.PARQUET_BATCH_ROWS", 500)
    query = BOUNDED_BY_A_COLUMN[0][0]
    watermark = "ts AS ts - INTERVAL '4' SECOND"
    peaks = [_peak_state(query, _auctions_and_bids(n, 3, bids_per_auction=1), watermark) for n in (5000, 50_000)]
    assert 0 < peaks[1] < 2 * peaks[0], peaks


def test_join_of_an_updating_input_is_not_bounded_by_another_column() -> None:
    """A bound by a column other than the time attributes is taken between append-only inputs
    only: a retraction must meet the rows its pairs were made with."""
    table = "(k BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n"
    # Per window end and key, the latest time: a GROUP BY over a window aggregation, updating.
    latest = ("SELECT we, k, MAX(last) AS last FROM (SELECT window_end AS we, k, MAX(ts) AS last FROM "
              "TABLE(TUMBLE(TABLE l, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY k, window_start, window_end) "
              "GROUP BY we, k")
    script = (f"CREATE TABLE l {table}CREATE TABLE r {table}SELECT g.k, r.ts FROM ({latest}) g JOIN r "
              "ON g.k = r.k AND r.ts BETWEEN g.we AND g.last + INTERVAL '1' MINUTE;\n")
    explained = clink.compile(script).explain()
    assert "Join INNER state=[both sides by key]" in explained and "interval=" not in explained
    # Bounded by the window end alone, the same join is an interval join.
    explained = clink.compile(script.replace("g.last + INTERVAL '1' MINUTE", "g.we + INTERVAL '1' MINUTE")).explain()
    assert "Join INNER (interval)" in explained


def test_flinks_versioned_view_example() -> None:
    """Flink's versioned tables page: currency_rates is append-only (no key can be declared), the
    deduplication view over it is a versioned table; orders meet the rate valid at their time
    (the page's changelog of the view: Euro 114 at 09:00, 116 at 10:45, 119 at 11:15)."""
    import datetime as dt

    def at(hhmm: str) -> dt.datetime:
        return dt.datetime.fromisoformat(f"2026-01-01 {hhmm}")

    rates = pa.table({"currency": ["Yen", "Euro", "USD", "Euro", "Euro", "Pounds"],
                      "rate": pa.array([102, 114, 1, 116, 119, 108], pa.int64()),
                      "update_time": pa.array([at(t) for t in ("09:00", "09:00", "09:00", "10:45", "11:15", "11:49")],
                                              pa.timestamp("ms"))})
    orders = pa.table({"amount": pa.array([2, 1, 2, 3, 5], pa.int64()),
                       "currency": ["Euro", "USD", "Euro", "Pounds", "Pounds"],
                       "order_time": pa.array([at(t) for t in ("10:15", "10:30", "10:52", "11:50", "11:40")],
                                              pa.timestamp("ms"))})
    query = ("CREATE VIEW versioned_rates AS SELECT currency, rate, update_time FROM (SELECT *, ROW_NUMBER() OVER "
             "(PARTITION BY currency ORDER BY update_time DESC) AS rownum FROM currency_rates) WHERE rownum = 1;\n"
             "SELECT o.amount, o.currency, r.rate, o.amount * r.rate AS total FROM orders AS o "
             "LEFT JOIN versioned_rates FOR SYSTEM_TIME AS OF o.order_time AS r ON r.currency = o.currency")
    rows = run_select(query, watermarks={"orders": "order_time AS order_time - INTERVAL '15' MINUTE",
                                         "currency_rates": "update_time AS update_time"},
                      row_group_size=2, orders=orders, currency_rates=rates).to_pylist()
    assert sorted((r["amount"], r["currency"], r["rate"], r["total"]) for r in rows) == sorted([
        (2, "Euro", 114, 228), (1, "USD", 1, 1), (2, "Euro", 116, 232), (3, "Pounds", 108, 324),
        (5, "Pounds", None, None)])


# -- a Top-N over an interval join, whose partitions end --------------------------------------

#: Each auction's highest bid while it was open (Nexmark q9's shape), over auctions keyed by id.
WINNING_BIDS = ("SELECT id, x, price, bts FROM (SELECT a.id, a.x, b.price, b.ts AS bts, ROW_NUMBER() OVER "
                "(PARTITION BY a.id ORDER BY b.price DESC, b.ts ASC) AS rn FROM a, b WHERE a.id = b.auction "
                "AND b.ts BETWEEN a.ts AND a.expires) WHERE rn <= 1")


def _open_auctions(n: int, seed: int) -> dict[str, pa.Table]:
    """``n`` auctions with ids 0 … n-1 (in time order, a time every 400 ms, open 0 to 15 s, a few
    with no end), and 10 bids each over the same span for one of the 40 newest auctions or up to
    2 ahead, at distinct prices; both up to 2 s out of order (against a watermark 4 s behind)."""
    rng = np.random.default_rng(seed)
    base = np.datetime64("2026-01-01T00:00:00", "ms")
    m = 10 * n
    a_ms = np.arange(n) * 400 + rng.integers(0, 2000, n)
    b_ms = np.arange(m) * 40 + rng.integers(0, 2000, m)
    stamp = pa.timestamp("ms")
    newest = np.arange(m) // 10
    auction = pa.table({
        "id": pa.array(np.arange(n), pa.int64()),
        "ts": pa.array(base + a_ms.astype("timedelta64[ms]"), stamp),
        "expires": pa.array(base + (a_ms + rng.integers(0, 15_000, n)).astype("timedelta64[ms]"), stamp,
                            mask=rng.random(n) < 0.03),
        "x": pa.array(rng.integers(0, 1000, n), pa.int64()),
    })
    bid = pa.table({
        "auction": pa.array(np.clip(newest + rng.integers(-40, 3, m), 0, n - 1), pa.int64()),
        "ts": pa.array(base + b_ms.astype("timedelta64[ms]"), stamp),
        "price": pa.array(rng.permutation(m), pa.int64()),
    })
    return {"a": auction, "b": bid}


def _keyed_script(query: str, tables: dict[str, pa.Table], tmp: Path) -> str:
    """The tables as parquet files, ``a`` declaring its key, each with a watermark 4 s behind."""
    import pyarrow.parquet as pq

    ddl = []
    for name, table in tables.items():
        path = tmp / f"{name}.parquet"
        pq.write_table(table, path, row_group_size=500)
        columns = [f"`{f.name}` {'BIGINT' if pa.types.is_integer(f.type) else 'TIMESTAMP(3)'}" for f in table.schema]
        if name == "a":
            columns.append("PRIMARY KEY (id) NOT ENFORCED")
        columns.append("WATERMARK FOR ts AS ts - INTERVAL '4' SECOND")
        ddl.append(f"CREATE TABLE {name} ({', '.join(columns)}) WITH ('connector' = 'filesystem', "
                   f"'path' = '{path}', 'format' = 'parquet')")
    return ";\n".join([*ddl, query]) + ";\n"


def test_top_n_over_an_interval_join_whose_partitions_end_equals_duckdb(tmp_path: Path) -> None:
    tables = _open_auctions(1500, 3)
    script = _keyed_script(WINNING_BIDS, tables, tmp_path)
    assert "partition ends=[max(expires, ts)]" in clink.compile(script).explain()
    ours = clink.sql(script).to_arrow()
    shared_duckdb.assert_same_rows(ours, _duck(WINNING_BIDS, tables))
    assert ours.num_rows > 1000


@pytest.mark.in_process("reads the size of the Top-N's state")
def test_nexmark_q9_forgets_closed_auctions_and_wins_the_same(monkeypatch: pytest.MonkeyPatch,
                                                              top_n_peak: list[int]) -> None:
    """Nexmark's auction ids are unique: q9's Top-N forgets each auction once it has closed.
    Twice the events, about the same state; the winning bids are those of a Top-N that keeps
    every auction."""
    from clink import compiler
    from clink.compiler.rewrite import RULES

    bench = Path(__file__).resolve().parents[2] / "bench" / "nexmark"
    q9 = ("SELECT id, bidder, price FROM (SELECT A.id, B.bidder, B.price, ROW_NUMBER() OVER (PARTITION BY A.id "
          "ORDER BY B.price DESC, B.dateTime ASC) AS rownum FROM auction A, bid B WHERE A.id = B.auction "
          "AND B.dateTime BETWEEN A.dateTime AND A.expires) WHERE rownum <= 1;")
    peak = top_n_peak

    def run(events: int) -> tuple[list[tuple], int]:
        peak[0] = 0
        ddl = (bench / "ddl.sql").read_text().replace("'events.num' = '10000000'", f"'events.num' = '{events}'")
        rows = clink.sql(ddl + q9 + "\n").to_arrow()
        return sorted(zip(*(rows.column(i).to_pylist() for i in range(3)), strict=True)), peak[0]

    # About 6,000 auctions are open at once, from about 200,000 events on (at 4 subtasks, whose
    # watermarks move in larger steps, a subtask's peak settles by 1,000,000 events).
    _, small_peak = run(1_000_000)
    large, large_peak = run(2_000_000)
    assert 0 < large_peak < 1.2 * small_peak, (small_peak, large_peak)
    # The same without the rule (another text, so no plan of the first is reused).
    every_rule = compiler.run_rewrites
    monkeypatch.setattr(compiler, "run_rewrites", lambda plan, **kw: every_rule(
        plan, tuple(r for r in RULES if r.name != "end_ranks"), **kw))
    q9 += " -- every auction kept"
    kept, kept_peak = run(2_000_000)
    assert kept == large and len(large) > 1000
    assert kept_peak > 3 * large_peak
