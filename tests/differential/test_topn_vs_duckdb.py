"""ROW_NUMBER, RANK and DENSE_RANK Top-N and deduplication: the final table, over rows read in small batches, must
equal DuckDB's batch answer; the operator's changelog must only retract rows it emitted."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

# tests/shared_duckdb.py: pytest puts tests/ on sys.path, as it holds the root conftest.py.
import shared_duckdb

import clink
from clink.errors import SqlError
from clink.runtime.context import RuntimeContext
from clink.testing import run_select

N = 3000


@pytest.fixture(scope="module")
def events() -> pa.Table:
    rng = np.random.default_rng(41)
    return pa.table({
        "id": pa.array(rng.permutation(N), pa.int64()),  # unique: no ties in the orders below
        "k": pa.array(rng.integers(0, 25, N), pa.int64(), mask=rng.random(N) < 0.05),
        "g": pa.array(rng.choice(np.array(["x", "y"]), N), pa.string()),
        "price": pa.array(rng.integers(0, 500, N), pa.int64(), mask=rng.random(N) < 0.1),
    })


QUERIES = [
    # Top 3 per key, the row number kept.
    ("SELECT k, id, price, rn FROM (SELECT k, id, price, ROW_NUMBER() OVER (PARTITION BY k ORDER BY price DESC, "
     "id) AS rn FROM ev) WHERE rn <= 3"),
    # Top 5 per two keys, the row number dropped; rn < 6 is the same limit.
    ("SELECT g, k, id FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY g, k ORDER BY id) AS rn FROM ev) "
     "WHERE rn < 6"),
    # Deduplication: the last row per key by id, keeping all columns but the number.
    ("SELECT id, k, g, price FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY id DESC) AS rn "
     "FROM ev) WHERE rn = 1"),
    # A global Top-10 with a filter beside the limit.
    ("SELECT id, price, rn FROM (SELECT id, price, ROW_NUMBER() OVER (ORDER BY price, id DESC) AS rn FROM ev) "
     "WHERE rn <= 10 AND id % 2 = 0"),
    # RANK and DENSE_RANK: ties (equal prices, NULLs among them) share a number, so more than N
    # rows may be kept, and a row that ties the last one comes in.
    ("SELECT k, id, price, r FROM (SELECT k, id, price, RANK() OVER (PARTITION BY k ORDER BY price DESC) AS r "
     "FROM ev) WHERE r <= 3"),
    ("SELECT g, id, price, r FROM (SELECT g, id, price, DENSE_RANK() OVER (PARTITION BY g ORDER BY price) AS r "
     "FROM ev) WHERE r <= 4"),
    ("SELECT k, g, id FROM (SELECT *, RANK() OVER (PARTITION BY k ORDER BY g, price % 7) AS r FROM ev) WHERE r = 1"),
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_final_table_equals_duckdb(events: pa.Table, query: str, backend: str) -> None:
    ours = run_select(query, context=RuntimeContext(config={"state.backend": backend}), row_group_size=89,
                      ev=events)
    con = shared_duckdb.connect()
    con.register("ev", events)
    # clink orders NULLs last in both directions.
    duck = query.replace(" DESC", " DESC NULLS LAST").replace("id)", "id NULLS LAST)")
    theirs = con.execute(duck).fetchall()
    assert Counter(tuple(r.values()) for r in ours.to_pylist()) == Counter(theirs)
    assert ours.num_rows > 0


def _refusal(script: str) -> str:
    with pytest.raises(SqlError) as info:
        clink.compile(script, name="p.sql")
    return info.value.render({"p.sql": script})


def test_row_number_without_a_limit_is_refused() -> None:
    text = _refusal("CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen');\n"
                    "SELECT k, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) AS rn FROM t;\n")
    assert "ROW_NUMBER() OVER (...) is supported as Top-N only" in text and "p.sql:2:11" in text


GROUPED = "(SELECT k, g, COUNT(*) AS n, SUM(price) AS s FROM ev GROUP BY k, g)"


@pytest.mark.parametrize(("ours", "theirs"), [
    # A Top-N of a GROUP BY's counts: a count that grows pushes another out, and comes back.
    (f"SELECT g, k, n, rn FROM (SELECT g, k, n, ROW_NUMBER() OVER (PARTITION BY g ORDER BY n DESC, k) AS rn "
     f"FROM {GROUPED}) WHERE rn <= 3",
     f"SELECT g, k, n, rn FROM (SELECT g, k, n, ROW_NUMBER() OVER (PARTITION BY g ORDER BY n DESC, k NULLS LAST) "
     f"AS rn FROM {GROUPED}) WHERE rn <= 3"),
    (f"SELECT k, g, s FROM {GROUPED} ORDER BY s DESC, k, g LIMIT 5",
     f"SELECT k, g, s FROM {GROUPED} ORDER BY s DESC NULLS LAST, k NULLS LAST, g LIMIT 5"),
    (f"SELECT g, k, n, r FROM (SELECT g, k, n, RANK() OVER (PARTITION BY g ORDER BY n DESC) AS r FROM {GROUPED}) "
     "WHERE r <= 2",
     f"SELECT g, k, n, r FROM (SELECT g, k, n, RANK() OVER (PARTITION BY g ORDER BY n DESC) AS r FROM {GROUPED}) "
     "WHERE r <= 2"),
])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_top_n_over_an_updating_input_equals_duckdb(events: pa.Table, ours: str, theirs: str, backend: str) -> None:
    """Over an updating input every row is kept: a row retracted from the top N gives its place
    to the next one, as Flink's retractable Top-N does."""
    got = run_select(ours, context=RuntimeContext(config={"state.backend": backend}), row_group_size=89, ev=events)
    con = shared_duckdb.connect()
    con.register("ev", events)
    assert Counter(tuple(r.values()) for r in got.to_pylist()) == Counter(con.execute(theirs).fetchall())
    assert got.num_rows > 0


def test_top_n_is_explained_as_updating() -> None:
    plan = clink.compile("CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen');\n"
                         "SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn "
                         "FROM t) WHERE rn <= 2;\n")
    explained = plan.explain()
    assert "Rank(ROW_NUMBER() over partition=[k], order=[v DESC], keep=[rn <= 2], row number not kept" in explained
    assert "TopN 2 state keys=[k]" in explained and "produces updates" in explained


def _duck_ev(query: str, table: pa.Table) -> list[tuple]:
    """DuckDB's rows of ``query`` over ``table`` as ``ev``."""
    con = shared_duckdb.connect()
    con.register("ev", table)
    return con.execute(query).fetchall()


def test_window_top_n_over_a_window_aggregation() -> None:
    """The three keys with the most rows per 10-second window: a Top-N partitioned by the window
    over a TUMBLE aggregation's results."""
    rng = np.random.default_rng(3)
    n = 4000
    base = np.datetime64("2026-01-01T00:00:00", "ms")
    ms = np.sort(rng.integers(0, 120_000, n))
    table = pa.table({"k": pa.array(rng.zipf(1.5, n) % 40, pa.int64()),
                      "ts": pa.array(base + ms.astype("timedelta64[ms]"), pa.timestamp("ms"))})
    query = ("SELECT window_start, k, cnt, rn FROM (SELECT window_start, k, cnt, ROW_NUMBER() OVER "
             "(PARTITION BY window_start, window_end ORDER BY cnt DESC, k) AS rn FROM "
             "(SELECT window_start, window_end, k, COUNT(*) AS cnt FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), "
             "INTERVAL '10' SECOND)) GROUP BY window_start, window_end, k)) WHERE rn <= 3")
    ours = run_select(query, row_group_size=250, watermarks={"ev": "ts AS ts - INTERVAL '1' SECOND"}, ev=table)
    theirs = _duck_ev(
        "SELECT ws, k, cnt, rn FROM (SELECT ws, k, cnt, ROW_NUMBER() OVER (PARTITION BY ws ORDER BY cnt DESC, k) "
        "AS rn FROM (SELECT time_bucket(INTERVAL 10 SECOND, ts) AS ws, k, COUNT(*) AS cnt FROM ev "
        "GROUP BY ALL)) WHERE rn <= 3", table)
    assert Counter(tuple(r.values()) for r in ours.to_pylist()) == Counter(theirs)
    assert ours.num_rows == 36


def _priced_events(n: int, seconds: int, seed: int) -> pa.Table:
    """``n`` rows in time order over ``seconds`` s, at distinct prices."""
    rng = np.random.default_rng(seed)
    base = np.datetime64("2026-01-01T00:00:00", "ms")
    ms = np.sort(rng.integers(0, seconds * 1000, n))
    return pa.table({"k": pa.array(rng.integers(0, 40, n), pa.int64()),
                     "ts": pa.array(base + ms.astype("timedelta64[ms]"), pa.timestamp("ms")),
                     "price": pa.array(rng.permutation(n), pa.int64())})


#: The three dearest rows of each 10-second window, ranked over the window table function's rows.
TOP_PER_WINDOW = ("SELECT window_start, k, price, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, "
                  "window_end ORDER BY price DESC) AS rn FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), "
                  "INTERVAL '10' SECOND))) WHERE rn <= 3")


def test_window_top_n_over_a_window_table_function_forgets_closed_windows() -> None:
    """Partitioned by its window, a Top-N forgets each window once the watermark passes its end
    (``partition ends=[window_end]``); the rows it ranks are DuckDB's."""
    table = _priced_events(4000, 120, 5)
    ddl = "CREATE TABLE ev (k BIGINT, ts TIMESTAMP(3), price BIGINT, WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n"
    assert "partition ends=[window_end]" in clink.compile(ddl + TOP_PER_WINDOW + ";\n").explain()
    ours = run_select(TOP_PER_WINDOW, row_group_size=250, watermarks={"ev": "ts AS ts - INTERVAL '1' SECOND"}, ev=table)
    theirs = _duck_ev(
        "SELECT ws, k, price, rn FROM (SELECT time_bucket(INTERVAL 10 SECOND, ts) AS ws, k, price, ROW_NUMBER() "
        "OVER (PARTITION BY time_bucket(INTERVAL 10 SECOND, ts) ORDER BY price DESC) AS rn FROM ev) WHERE rn <= 3",
        table)
    assert Counter(tuple(r.values()) for r in ours.to_pylist()) == Counter(theirs)
    assert ours.num_rows == 36


@pytest.mark.in_process("reads the size of the Top-N's state")
def test_window_top_n_state_is_that_of_the_open_windows(top_n_peak: list[int]) -> None:
    """Ten times the windows, about the same state: a window's rows leave as it closes."""
    peak = top_n_peak
    peaks = []
    for seconds in (100, 1000):
        peak[0] = 0
        out = run_select(TOP_PER_WINDOW, row_group_size=500, watermarks={"ev": "ts AS ts - INTERVAL '1' SECOND"},
                         ev=_priced_events(seconds * 20, seconds, 6))
        assert out.num_rows == 3 * seconds // 10
        peaks.append(peak[0])
    assert 0 < peaks[1] < 2 * peaks[0], peaks


@pytest.mark.in_process("sets the clock")
def test_state_ttl_reaches_the_top_n() -> None:
    """A deduplication keeping each key's first row, with a TTL shorter than the clock's step
    between batches: every batch finds its keys forgotten and emits their first row again."""
    n = 300_000  # read in several batches
    table = pa.table({"k": pa.array(np.arange(n) % 3, pa.int64()), "v": pa.array(np.arange(n), pa.int64())})
    query = "SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) AS rn FROM t) WHERE rn = 1"
    ticks = iter(range(0, 10**9, 1000))

    def ticking(ttl: str | None) -> list[tuple[int, int]]:
        config = {"table.exec.state.ttl": ttl} if ttl else {}
        out = run_select(query, context=RuntimeContext(config=config, clock=lambda: next(ticks)),
                         row_group_size=20_000, t=table)
        return sorted((r["k"], r["v"]) for r in out.to_pylist())

    assert ticking(None) == [(0, 0), (1, 1), (2, 2)]
    forgetful = ticking("1 ms")
    firsts = [v for k, v in forgetful if k == 0]
    assert firsts[0] == 0 and len(firsts) > 1 and all(v % 3 == k for k, v in forgetful)
    assert {k for k, _ in forgetful} == {0, 1, 2} and len(forgetful) == 3 * len(firsts)
