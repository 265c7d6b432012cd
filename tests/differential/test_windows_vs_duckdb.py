"""Window aggregations against DuckDB.

clink runs each query as a stream: events arrive out of order (by up to 999 ms) in many small
batches, the watermark trails the largest event time by 1 s, and every window fires on the
watermark. DuckDB computes the same GROUP BY in batch, with the window boundaries written out
in SQL. After the final watermark both must hold the same rows.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

# tests/shared_duckdb.py: pytest puts tests/ on sys.path, as it holds the root conftest.py.
import shared_duckdb

import clink
from clink.errors import SqlError
from clink.runtime.context import RuntimeContext
from clink.testing import run_select, table_ddl

N = 3000
T0 = 1_704_067_200_000  # 2024-01-01 00:00:00 UTC in ms


def _events(null_keys: bool) -> pa.Table:
    rng = np.random.default_rng(7)
    # Event times advance by up to 400 ms per row and jitter by up to 999 ms: out of order, but
    # never by more than the watermark's 1 s delay, so no event is late.
    base = T0 + np.cumsum(rng.integers(0, 400, N))
    ts = base + rng.integers(0, 1000, N)
    k1 = rng.integers(0, 4, N)
    k2 = rng.choice(np.array(["a", "b", "c"]), N)
    price = rng.integers(-50, 1000, N).astype(np.int64)
    score = np.round(rng.normal(10, 5, N), 3)

    def nulls(rate: float) -> np.ndarray:
        return rng.random(N) < rate

    return pa.table({
        "rn": pa.array(np.arange(N), pa.int64()),
        "k1": pa.array(k1, pa.int64(), mask=nulls(0.1) if null_keys else None),
        "k2": pa.array(k2, pa.string(), mask=nulls(0.1) if null_keys else None),
        "price": pa.array(price, pa.int64(), mask=nulls(0.2)),
        "score": pa.array(score, pa.float64(), mask=nulls(0.2)),
        "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("ms")),
    })


DENSE = _events(null_keys=False)
NULL_KEYS = _events(null_keys=True)
WATERMARK = "ts AS ts - INTERVAL '1' SECOND"

# Every aggregate, in clink's syntax and DuckDB's. FIRST_VALUE/LAST_VALUE are in arrival order
# and skip NULLs, so DuckDB picks by row number among the non-NULL values. AVG and VAR_POP of
# the BIGINT price are BIGINTs, as in Flink: AVG truncates toward zero (DuckDB's ``//`` does too)
# and VAR_POP is Flink's rewrite (SUM(x * x) - SUM(x) * SUM(x) / COUNT(x)) / COUNT(x) in integers.
_N = "NULLIF(COUNT(price), 0)"
AGGS = [
    ("COUNT(*)", "COUNT(*)"),
    ("COUNT(price)", "COUNT(price)"),
    ("COUNT(DISTINCT k2)", "COUNT(DISTINCT k2)"),
    ("SUM(price)", "SUM(price)"),
    ("MIN(price)", "MIN(price)"),
    ("MAX(score)", "MAX(score)"),
    ("AVG(price)", f"SUM(price) // {_N}"),
    ("FIRST_VALUE(price)", "arg_min(price, rn) FILTER (WHERE price IS NOT NULL)"),
    ("LAST_VALUE(score)", "arg_max(score, rn) FILTER (WHERE score IS NOT NULL)"),
    ("STDDEV_POP(score)", "STDDEV_POP(score)"),
    ("VAR_POP(price)", f"(SUM(price * price) - SUM(price) * SUM(price) // {_N}) // {_N}"),
    ("COUNT(*) FILTER (WHERE price > 500)", "COUNT(*) FILTER (WHERE price > 500)"),
    ("SUM(price) FILTER (WHERE k2 = 'a')", "SUM(price) FILTER (WHERE k2 = 'a')"),
]
CLINK_AGGS = ", ".join(a for a, _ in AGGS)
DUCK_AGGS = ", ".join(d for _, d in AGGS)

MS = "epoch_ms(CAST(ts AS TIMESTAMP))"


def _tumble(size: int, offset: int = 0) -> str:
    start = f"({MS} - (({MS} - {offset}) % {size}))"
    return f"SELECT *, epoch_ms({start}) AS window_start, epoch_ms({start} + {size}) AS window_end FROM t"


def _hop(slide: int, size: int) -> str:
    last = f"({MS} - ({MS} % {slide}))"
    return (f"SELECT t.*, epoch_ms({last} - k * {slide}) AS window_start, "
            f"epoch_ms({last} - k * {slide} + {size}) AS window_end "
            f"FROM t, range(0, {size // slide}) AS r(k)")


def _cumulate(step: int, size: int) -> str:
    start = f"({MS} - ({MS} % {size}))"
    return (f"SELECT t.*, epoch_ms({start}) AS window_start, epoch_ms({start} + k * {step}) AS window_end "
            f"FROM t, range(1, {size // step} + 1) AS r(k) WHERE {start} + k * {step} > {MS}")


def _session(gap: int, keys: str) -> str:
    # Gaps and islands: a new session starts when the previous event of the key is more than gap before
    # (events exactly gap apart share a session, as in Flink).
    return f"""
        WITH marked AS (
            SELECT *, CASE WHEN {MS} - lag({MS}) OVER (PARTITION BY {keys} ORDER BY ts, rn) <= {gap}
                           THEN 0 ELSE 1 END AS new_session
            FROM t),
        numbered AS (
            SELECT *, sum(new_session) OVER (PARTITION BY {keys} ORDER BY ts, rn) AS session FROM marked)
        SELECT *, min(ts) OVER (PARTITION BY {keys}, session) AS window_start,
               epoch_ms(max({MS}) OVER (PARTITION BY {keys}, session) + {gap}) AS window_end
        FROM numbered"""


CASES = [
    ("tumble_two_keys",
     "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)", _tumble(10_000), "k1, k2"),
    ("tumble_offset_no_keys",
     "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '15' SECOND)", _tumble(60_000, 15_000), ""),
    ("hop_one_key",
     "HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND)", _hop(2_000, 10_000), "k1"),
    ("cumulate_two_keys",
     "CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '30' SECOND)", _cumulate(5_000, 30_000),
     "k2, k1"),
    ("session_one_key",
     "SESSION(TABLE t PARTITION BY k1, DESCRIPTOR(ts), INTERVAL '1500' MILLISECOND)", _session(1_500, "k1"), "k1"),
    ("session_two_keys",
     "SESSION(TABLE t PARTITION BY (k1, k2), DESCRIPTOR(ts), INTERVAL '3' SECOND)", _session(3_000, "k1, k2"),
     "k1, k2"),
]


def _normalize(rows: list[tuple]) -> Counter:
    def value(v: object) -> object:
        if isinstance(v, float):
            return None if math.isnan(v) else float(f"{v:.9g}")
        if hasattr(v, "to_integral_value"):  # Decimal
            return float(v)
        return v

    return Counter(tuple(value(v) for v in row) for row in rows)


def _assert_same_rows(ours: list[tuple], theirs: list[tuple], *, one_of: frozenset[int] = frozenset()) -> None:
    """Equal as multisets; floats within a relative 1e-9 (variance from sums of squares and a
    two-pass variance differ in the last digits). Columns in ``one_of`` hold, in the reference,
    the list of values ours may be any one of."""

    def key(row: tuple) -> tuple:
        return tuple((0, "") if v is None else (1, repr(v)) for i, v in enumerate(row)
                     if not isinstance(v, float) and i not in one_of)

    ours, theirs = sorted(ours, key=key), sorted(theirs, key=key)
    assert len(ours) == len(theirs), f"{len(ours)} rows from clink, {len(theirs)} from the reference"
    for a, b in zip(ours, theirs, strict=True):
        assert key(a) == key(b), (a, b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if i in one_of:
                assert (x is None and not y) or any(x == v or (isinstance(x, float) and math.isclose(x, v))
                                                    for v in y or ()), (i, a, b)
            elif isinstance(x, float) or isinstance(y, float):
                assert x is not None and y is not None and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9), (a, b)
            elif hasattr(y, "to_integral_value"):
                assert float(x) == float(y), (a, b)


@pytest.mark.parametrize("data", [DENSE, NULL_KEYS], ids=["dense", "null_keys"])
@pytest.mark.parametrize(("case", "window", "duck_windows", "keys"), CASES, ids=[c[0] for c in CASES])
def test_window_aggregation_matches_duckdb(case: str, window: str, duck_windows: str, keys: str,
                                           data: pa.Table, path: str) -> None:
    check_against_duckdb(window, duck_windows, keys, data, path=path)


@pytest.mark.parametrize(("case", "window", "duck_windows", "keys"), CASES, ids=[c[0] for c in CASES])
def test_window_aggregation_on_sqlite_state_matches_duckdb(case: str, window: str, duck_windows: str,
                                                           keys: str, path: str) -> None:
    """The same, with the state in SQLite and a cache so small that every partial goes to disk."""
    context = RuntimeContext(config={"state.backend": "sqlite", "state.sqlite.cache-size": "1 b"})
    check_against_duckdb(window, duck_windows, keys, DENSE, context=context, path=path)


def test_where_over_a_window_table_function_matches_duckdb(path: str) -> None:
    check_against_duckdb(CASES[0][1], CASES[0][2], CASES[0][3], DENSE, where="price > 300 AND k2 <> 'b'", path=path)


def test_where_on_window_columns_before_aggregation_is_refused() -> None:
    with pytest.raises(SqlError, match="WHERE on window_start") as e:
        run_select(f"SELECT window_start, COUNT(*) FROM TABLE({CASES[0][1]}) WHERE window_start > TIMESTAMP "
                   "'2024-01-01 00:00:00' GROUP BY window_start, window_end", watermarks={"t": WATERMARK}, t=DENSE)
    assert e.value.span is not None


#: FIRST_VALUE and LAST_VALUE take the first and last row in the order rows arrive. Workers that
#: are separate processes read their shares of the file side by side, so rows of one key arrive
#: in an order no run fixes (as in Flink with parallel sources): there, the value must be one of
#: the group's non-NULL values.
UNORDERED_AGGS = {"FIRST_VALUE(price)": "list(price) FILTER (WHERE price IS NOT NULL)",
                  "LAST_VALUE(score)": "list(score) FILTER (WHERE score IS NOT NULL)"}


def check_against_duckdb(window: str, duck_windows: str, keys: str, data: pa.Table, *, where: str = "",
                         context: RuntimeContext | None = None, path: str = "local:1") -> None:
    ordered = not path.startswith("ray")
    duck_aggs = DUCK_AGGS if ordered else ", ".join(UNORDERED_AGGS.get(a, d) for a, d in AGGS)
    offset = len([k for k in keys.split(",") if k.strip()]) + 2
    one_of = frozenset() if ordered else frozenset(offset + i for i, (a, _) in enumerate(AGGS) if a in UNORDERED_AGGS)
    key_list = f"{keys}, " if keys else ""
    where = f" WHERE {where}" if where else ""
    ours = run_select(
        f"SELECT {key_list}window_start, window_end, {CLINK_AGGS} FROM TABLE({window}){where} "
        f"GROUP BY {key_list}window_start, window_end",
        watermarks={"t": WATERMARK}, row_group_size=97, context=context, t=data,
    )
    con = shared_duckdb.connect()
    con.register("t", data)
    theirs = con.execute(
        f"SELECT {key_list}window_start, window_end, {duck_aggs} FROM ({duck_windows}){where} "
        f"GROUP BY {key_list}window_start, window_end"
    ).fetchall()
    ours_rows = [tuple(r.values()) for r in ours.to_pylist()]
    assert ours_rows, "no window fired"
    _assert_same_rows(ours_rows, theirs, one_of=one_of)


def test_legacy_group_window_matches_the_table_function() -> None:
    tvf = run_select(
        "SELECT k1, window_start, window_end, COUNT(*) AS n, SUM(price) AS s FROM "
        "TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, k1",
        watermarks={"t": WATERMARK}, row_group_size=97, t=DENSE)
    legacy = run_select(
        "SELECT k1, TUMBLE_START(ts, INTERVAL '10' SECOND) AS window_start, "
        "TUMBLE_END(ts, INTERVAL '10' SECOND) AS window_end, COUNT(*) AS n, SUM(price) AS s "
        "FROM t GROUP BY TUMBLE(ts, INTERVAL '10' SECOND), k1",
        watermarks={"t": WATERMARK}, row_group_size=97, t=DENSE)
    assert Counter(map(tuple, (r.values() for r in tvf.to_pylist()))) == \
        Counter(map(tuple, (r.values() for r in legacy.to_pylist())))


def test_plain_hop_relation_matches_duckdb() -> None:
    ours = run_select(
        "SELECT rn, window_start, window_end FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND, "
        "INTERVAL '15' SECOND))", watermarks={"t": WATERMARK}, t=DENSE)
    con = shared_duckdb.connect()
    con.register("t", DENSE)
    theirs = con.execute(f"SELECT rn, window_start, window_end FROM ({_hop(5_000, 15_000)})").fetchall()
    assert _normalize([tuple(r.values()) for r in ours.to_pylist()]) == _normalize(theirs)


@pytest.mark.parametrize("data", [DENSE, NULL_KEYS], ids=["dense", "null_keys"])
@pytest.mark.parametrize(("case", "window", "duck_windows", "keys"),
                         [c for c in CASES if not c[0].startswith("session")],
                         ids=[c[0] for c in CASES if not c[0].startswith("session")])
def test_an_aggregation_by_the_windows_of_a_window_aggregation_matches_duckdb(
        case: str, window: str, duck_windows: str, keys: str, data: pa.Table, path: str) -> None:
    """GROUP BY the window_start and window_end of a window aggregation below (renamed, filtered
    on the way) is itself a window aggregation, as Flink plans it: each window's row comes out
    once, appended, when the watermark passes the window's end. It is not revised as the rows
    of the window below arrive, as a GROUP BY without a window would be."""
    key_list = f"{keys}, " if keys else ""
    inner = ("SELECT {keys}window_start AS ws, window_end AS we, COUNT(*) AS n, SUM(price) AS s "
             "FROM {source} GROUP BY {keys}window_start, window_end")
    outer = ("SELECT ws, we, COUNT(*) AS groups, MAX(n) AS top, SUM(s) AS total, MIN(s) AS low "
             "FROM ({inner}) AS w WHERE n > 1 GROUP BY we, ws")
    with tempfile.TemporaryDirectory(prefix="clink-test-") as tmp:
        parquet = Path(tmp) / "t.parquet"
        pq.write_table(data, parquet, row_group_size=97)
        script = (table_ddl("t", data, parquet, watermark=WATERMARK) + ";\n" +
                  outer.format(inner=inner.format(keys=key_list, source=f"TABLE({window})")))
        result = clink.sql(script, name="cascade.sql")
        assert "WindowAggregate(window=[windows of the input:" in result.plan.explain()
        batches = list(result.batches())
    assert all("_rowkind" not in b.schema.names for b in batches), "the windows' rows must only be appended"
    ours = [tuple(r.values()) for b in batches for r in b.to_pylist()]
    con = shared_duckdb.connect()
    con.register("t", data)
    theirs = con.execute(outer.format(inner=inner.format(keys=key_list, source=f"({duck_windows})"))).fetchall()
    assert ours, "no window fired"
    _assert_same_rows(ours, theirs)
