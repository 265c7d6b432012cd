"""Query forms: SELECT DISTINCT, UNION, INTERSECT, EXCEPT, WITH, VALUES and SELECT without FROM.
The final table of each must equal DuckDB's batch answer over the same rows, on a dense table
and on one mostly NULL, read in small batches; and Flink's own documented examples must print
what its pages print."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# tests/shared_duckdb.py: pytest puts tests/ on sys.path, as it holds the root conftest.py.
import shared_duckdb

import clink
from clink.errors import SqlError
from clink.testing import run_select

N = 1200


def _table(seed: int, null_rate: float) -> pa.Table:
    rng = np.random.default_rng(seed)

    def nulls() -> np.ndarray:
        return rng.random(N) < null_rate

    return pa.table({
        "k": pa.array(rng.integers(0, 12, N), pa.int64(), mask=nulls()),
        "s": pa.array(rng.choice(np.array(["a", "b", "c", "d"]), N), pa.string(), mask=nulls()),
        "v": pa.array(rng.integers(0, 30, N), pa.int32(), mask=nulls()),
    })


@pytest.fixture(scope="module", params=[0.02, 0.6], ids=["dense", "nulls"])
def tables(request: pytest.FixtureRequest) -> dict[str, pa.Table]:
    return {"l": _table(31, request.param), "r": _table(32, request.param)}


QUERIES = [
    "SELECT DISTINCT k, s FROM l",
    "SELECT DISTINCT v % 5 AS r FROM l WHERE k > 3",
    # DISTINCT over an updating input: a key whose count changes is still one row.
    "SELECT DISTINCT n FROM (SELECT k, COUNT(*) AS n FROM l GROUP BY k)",
    "SELECT k, s FROM l UNION SELECT k, s FROM r",
    "SELECT k FROM l WHERE v > 20 UNION SELECT CAST(v AS BIGINT) FROM r",
    "SELECT k, s FROM l UNION ALL SELECT k, s FROM r",
    "SELECT k, s FROM l INTERSECT SELECT k, s FROM r",
    "SELECT s FROM l WHERE k < 4 INTERSECT SELECT s FROM r WHERE k > 8",
    "SELECT k, s FROM l EXCEPT SELECT k, s FROM r WHERE v > 10",
    "SELECT v FROM l EXCEPT SELECT v FROM r",
    "SELECT k, s FROM l INTERSECT ALL SELECT k, s FROM r",
    "SELECT s FROM l EXCEPT ALL SELECT s FROM r WHERE v > 12",
    "SELECT v % 3 AS m FROM l INTERSECT ALL SELECT k % 3 FROM r EXCEPT ALL SELECT 1",
    # ... over an updating side: each count's copies come and go as the counts change.
    "SELECT COUNT(*) AS n FROM l GROUP BY k EXCEPT ALL SELECT COUNT(*) AS n FROM r GROUP BY s",
    # INTERSECT binds tighter than UNION and EXCEPT, which go left to right.
    "SELECT k FROM l UNION SELECT v FROM r INTERSECT SELECT k FROM r",
    "SELECT k FROM l EXCEPT SELECT k FROM r WHERE v > 5 UNION SELECT v FROM l WHERE s = 'a'",
    "(SELECT k FROM l EXCEPT SELECT k FROM r WHERE v > 5) EXCEPT SELECT 3",
    # An updating side: the counts of the keys of both tables.
    "SELECT k, COUNT(*) AS n FROM l GROUP BY k INTERSECT SELECT k, COUNT(*) AS n FROM r GROUP BY k",
    # WITH: several, the later reading the earlier, one used twice.
    ("WITH big AS (SELECT k, s, v FROM l WHERE v > 10), per AS (SELECT k, COUNT(*) AS n FROM big GROUP BY k) "
     "SELECT big.k, big.s, per.n FROM big JOIN per ON big.k = per.k"),
    "WITH x (a, b) AS (SELECT k, s FROM r) SELECT b, SUM(a) AS t FROM x GROUP BY b",
    # VALUES as a relation, joined with a table; SELECT without FROM in a set operation.
    ("SELECT l.k, names.label FROM l JOIN (VALUES (1, 'one'), (2, 'two'), (3, CAST(NULL AS VARCHAR))) "
     "AS names(id, label) ON l.k = names.id"),
    "SELECT k FROM l WHERE v = 3 UNION ALL SELECT 100 UNION ALL SELECT 200",
    # ORDER BY ... LIMIT: a Top-N over the whole result (every output column ordered, so that
    # ties are whole-row duplicates and any engine keeps the same rows).
    "SELECT k, s, v FROM l ORDER BY v DESC, k, s LIMIT 7",
    "SELECT k, s, v FROM l ORDER BY 3, 1 DESC, 2 FETCH FIRST 5 ROWS ONLY",
    "SELECT s, k FROM l WHERE v > 3 ORDER BY k * 2 + v, s, k, v LIMIT 4",
    "SELECT k, s FROM l UNION ALL SELECT k, s FROM r ORDER BY k, s LIMIT 6",
    "WITH x AS (SELECT k, v FROM r WHERE k > 2) SELECT k, v FROM x ORDER BY v, k LIMIT 3",
    "SELECT * FROM (SELECT k, v FROM l ORDER BY v DESC, k LIMIT 5) AS top UNION ALL SELECT 0, 0",
    "SELECT k FROM l LIMIT 0",
    # GROUPING SETS, ROLLUP and CUBE, with GROUPING().
    "SELECT k, s, COUNT(*) AS n, SUM(v) AS t FROM l GROUP BY GROUPING SETS ((k, s), (k), ())",
    "SELECT k, s, COUNT(*) AS n, GROUPING(k) AS gk, GROUPING(k, s) AS gks FROM l GROUP BY ROLLUP (k, s)",
    "SELECT k, s, v % 3 AS m, MAX(v) AS hi FROM l GROUP BY CUBE (k, s, v % 3)",
    "SELECT s, k, COUNT(*) AS n FROM l GROUP BY s, ROLLUP (k) HAVING COUNT(*) > 20",
    # IN (subquery): a semi join on the subquery's distinct values; NULLs match nothing.
    "SELECT k, s, v FROM l WHERE k IN (SELECT k FROM r WHERE v > 20)",
    "SELECT s, v FROM l WHERE v > 5 AND s IN (SELECT s FROM r) AND k IN (SELECT v FROM r)",
    "SELECT k, COUNT(*) AS n FROM l WHERE v IN (SELECT k * 2 FROM r) GROUP BY k",
    "SELECT * FROM l WHERE k IN (SELECT k FROM r GROUP BY k HAVING COUNT(*) > 40)",
    # NOT IN with SQL's NULL rules: a NULL among the values keeps no row; a NULL x is kept only
    # by an empty subquery.
    "SELECT k, s FROM l WHERE k NOT IN (SELECT k FROM r WHERE k IS NOT NULL AND v > 25)",
    "SELECT k, s FROM l WHERE k NOT IN (SELECT k FROM r WHERE v > 25)",
    "SELECT k, s FROM l WHERE v NOT IN (SELECT v FROM r WHERE v > 1000) AND s <> 'a'",
    # A subquery used as a value in WHERE: an aggregation without GROUP BY, joined to every row.
    "SELECT k, v FROM l WHERE v > (SELECT MAX(v) FROM r WHERE k = 3) - 10",
    "SELECT s, COUNT(*) AS n FROM l WHERE v < (SELECT MIN(v) FROM r) + 5 OR k = (SELECT COUNT(*) FROM r) % 7 "
    "GROUP BY s",
    # [NOT] IN tied to the outer query by equalities: per outer row, the values of its rows only
    # (NOT IN: TRUE when those are none; a NULL among them or a NULL x keeps no row).
    "SELECT k, s, v FROM l WHERE v IN (SELECT v FROM r WHERE r.k = l.k)",
    "SELECT k, s, v FROM l WHERE k IN (SELECT k FROM r WHERE r.s = l.s AND r.v > 25)",
    "SELECT k, s, v FROM l WHERE v NOT IN (SELECT v FROM r WHERE r.k = l.k)",
    "SELECT k, s, v FROM l WHERE k NOT IN (SELECT k FROM r WHERE l.s = r.s AND r.v > 25) AND v < 40",
    # Subqueries used as values in the select list: a single-row aggregation joined to every row,
    # or one per key of the outer row (a key without rows: NULL; COUNT: 0).
    "SELECT k, v, (SELECT MAX(v) FROM r) AS m FROM l",
    "SELECT k, (SELECT COUNT(*) FROM r WHERE r.k = l.k) AS n, (SELECT SUM(v) FROM r WHERE r.k = l.k AND r.v > 10) "
    "AS t FROM l",
    "SELECT k, v FROM l WHERE v > (SELECT COUNT(*) FROM r WHERE v > 1000)",
    # EXISTS not tied to the outer row: whether the subquery has a row at all.
    "SELECT k, s FROM l WHERE EXISTS (SELECT 1 FROM r WHERE v > 90)",
    "SELECT k, s FROM l WHERE NOT EXISTS (SELECT 1 FROM r WHERE v > 1000)",
    # [NOT] EXISTS correlated by equalities: a semi (anti) join; a NULL key matches nothing.
    "SELECT k, s, v FROM l WHERE EXISTS (SELECT 1 FROM r WHERE r.k = l.k AND r.v > 25)",
    "SELECT k, s, v FROM l WHERE NOT EXISTS (SELECT * FROM r WHERE r.s = l.s AND r.k = l.k) AND v < 20",
    "SELECT s, COUNT(*) AS n FROM l WHERE NOT EXISTS (SELECT 1 FROM r WHERE r.v = l.v + 1) GROUP BY s",
]


@pytest.mark.parametrize("query", QUERIES)
def test_final_table_equals_duckdb(tables: dict[str, pa.Table], query: str) -> None:
    ours = run_select(query, row_group_size=97, **tables)
    con = shared_duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    shared_duckdb.assert_same_rows(ours, con.execute(query).fetchall())


FLINK_VIEWS = ("create view t1(s) as values ('c'), ('a'), ('b'), ('b'), ('c');\n"
               "create view t2(s) as values ('d'), ('e'), ('a'), ('b'), ('b');\n")


@pytest.mark.parametrize(("query", "printed"), [
    ("(SELECT s FROM t1) UNION (SELECT s FROM t2)", ["c", "a", "b", "d", "e"]),
    # The page prints this table under the header "c"; its column is s.
    ("(SELECT s FROM t1) UNION ALL (SELECT s FROM t2)", ["c", "a", "b", "b", "c", "d", "e", "a", "b", "b"]),
    ("(SELECT s FROM t1) INTERSECT (SELECT s FROM t2)", ["a", "b"]),
    ("(SELECT s FROM t1) INTERSECT ALL (SELECT s FROM t2)", ["a", "b", "b"]),
    ("(SELECT s FROM t1) EXCEPT (SELECT s FROM t2)", ["c"]),
    ("(SELECT s FROM t1) EXCEPT ALL (SELECT s FROM t2)", ["c", "c"]),
])
def test_flinks_set_operation_examples(query: str, printed: list[str]) -> None:
    """Flink's page on set operations (docs/dev/table/sql/queries/set-ops.md), its views built
    with CREATE VIEW ... AS VALUES."""
    table = clink.sql(FLINK_VIEWS + query + ";").to_arrow()
    assert table.column_names == ["s"]
    assert Counter(table.column("s").to_pylist()) == Counter(printed)


def test_flinks_with_example() -> None:
    """Flink's WITH page: a common table expression read by a GROUP BY."""
    orders = ("CREATE VIEW Orders (order_id, price, tax) AS VALUES (1, 10.0, 1.0), (2, 5.5, 0.5), (1, 3.0, 0.25);\n")
    table = clink.sql(orders + "WITH orders_with_total AS (\n    SELECT order_id, price + tax AS total\n    FROM Orders\n)\n"
                      "SELECT order_id, SUM(total)\nFROM orders_with_total\nGROUP BY order_id;").to_arrow()
    assert sorted((r["order_id"], float(r["EXPR$1"])) for r in table.to_pylist()) == [(1, 14.25), (2, 6.0)]


def test_select_without_from_is_one_row_named_as_flink_names_it() -> None:
    """The first query of Flink's SQL client page; a column without a name is EXPR$n."""
    table = clink.sql("SELECT 'Hello World';").to_arrow()
    assert table.column_names == ["EXPR$0"] and table.to_pylist() == [{"EXPR$0": "Hello World"}]
    table = clink.sql("SELECT 1 + 1 AS two, UPPER('x'), CAST(NULL AS INT) AS n;").to_arrow()
    assert table.to_pylist() == [{"two": 2, "EXPR$1": "X", "n": None}]


def test_values_columns_take_the_common_type_of_their_rows() -> None:
    table = clink.sql("VALUES (1, 'a'), (2, CAST(NULL AS STRING)), (3.5, 'c');").to_arrow()
    assert table.column_names == ["EXPR$0", "EXPR$1"]
    assert str(table.schema.field("EXPR$0").type) == "decimal128(11, 1)"  # INT and DECIMAL(2, 1), as Flink
    assert [(float(r["EXPR$0"]), r["EXPR$1"]) for r in table.to_pylist()] == [(1.0, "a"), (2.0, None), (3.5, "c")]


@pytest.mark.parametrize(("text", "message"), [
    ("VALUES (1, 2), (3);", "every row of VALUES needs 2 value(s), as the first has; this one has 1"),
    ("VALUES (1), ('a');", "column 1 of VALUES is INT in the rows above and STRING in row 2"),
    ("SELECT *;", "SELECT * needs a FROM clause"),
    ("WITH a AS (SELECT 1 AS x), a AS (SELECT 2 AS x) SELECT * FROM a;", "WITH names 'a' twice"),
    ("CREATE VIEW v (a, b) AS SELECT 1;\nSELECT * FROM v;", "2 column name(s) for a query of 1 column(s)"),
    ("SELECT 1 AS x UNION SELECT 'a';", "column 1 of UNION is INT on the left and STRING on the right"),
    ("WITH a AS (SELECT 1 AS x) SELECT * FROM b;", "unknown table 'b'"),
    ("SELECT 1 AS x ORDER BY 2 LIMIT 1;", "ORDER BY 2: the query has 1 column"),
    ("SELECT SUM(a) OVER x FROM (VALUES (1)) AS t(a);", "unknown window 'x'"),
    ("SELECT a FROM (VALUES (1)) AS t(a) WHERE EXISTS (SELECT b FROM (VALUES (2)) AS u(b) WHERE b = a + 1 OR b = 2);",
     "a condition of EXISTS that reads the outer query must be an equality"),
    ("SELECT a, (SELECT COUNT(*) + 1 FROM (VALUES (2)) AS u(b) WHERE b = a) FROM (VALUES (1)) AS t(a);",
     "a COUNT inside an expression of a subquery that reads the outer query is not supported yet"),
    ("SELECT a FROM (VALUES (1)) AS t(a) WHERE EXISTS (SELECT b FROM (VALUES (2)) AS u(b) WHERE b > a);",
     "a condition of EXISTS that reads the outer query must be an equality"),
    ("SELECT a FROM (VALUES (1)) AS t(a) WHERE a = 2 OR EXISTS (SELECT 2);", "EXISTS (subquery) here is not supported yet"),
    ("SELECT (SELECT 2) AS b;", "a subquery used as a value needs a FROM clause around it"),
    ("SELECT a FROM (VALUES (1)) AS t(a) WHERE a > (SELECT b FROM (VALUES (2)) AS u(b));",
     "a subquery used as a value is supported as an aggregation without GROUP BY"),
    ("SELECT a FROM (VALUES (1)) AS t(a) WHERE a = 1 OR a IN (SELECT 2);", "IN (subquery) here is not supported yet"),
    ("SELECT a FROM (VALUES (1)) AS t(a) WHERE a IN (SELECT 2, 3);", "the subquery of IN must give one column, not 2"),
    ("SELECT a FROM (VALUES (1)) AS t(a) WHERE a IN (SELECT b FROM (VALUES (2)) AS u(b) WHERE b > a);",
     "a condition of IN that reads the outer query must be an equality"),
    ("SELECT a FROM (VALUES (1)) AS t(a) WINDOW x AS (ORDER BY a), x AS (ORDER BY a);", "window 'x' is defined twice"),
    ("SELECT DISTINCT 1 AS x ORDER BY 1 + 1 LIMIT 1;", "ORDER BY here names a column of the result"),
    ("CREATE VIEW c AS SELECT 1 AS x UNION SELECT 2;\nSELECT x FROM c ORDER BY x;",
     "ORDER BY without LIMIT must start with an event-time column"),
    ("SELECT 1 AS x ORDER BY x;", "ORDER BY without LIMIT must start with an event-time column"),
])
def test_bad_query_forms_are_refused_where_they_are_written(text: str, message: str) -> None:
    with pytest.raises(SqlError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")) as info:
        clink.sql(text)
    assert info.value.span is not None and info.value.span.line >= 1


def test_a_with_name_is_seen_only_by_its_query() -> None:
    with pytest.raises(SqlError, match="unknown table 'a'"):
        clink.sql("SELECT * FROM (WITH a AS (SELECT 1 AS x) SELECT x FROM a) AS t, a;")


@pytest.mark.in_process
def test_select_distinct_forgets_rows_after_the_state_ttl() -> None:
    """Keys 1, 0, 1, 0, 1, 0 in batches of one, two minutes apart on the job's clock: with a TTL
    of one minute each is forgotten before it comes again, and comes out again (Flink's TTL);
    without one, each key comes out once."""
    from clink.runtime.context import RuntimeContext

    script = ("CREATE TABLE t (id INT) WITH ('connector' = 'datagen', 'number-of-rows' = '6', 'batch-size' = '1',"
              " 'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '6');\n"
              "SELECT DISTINCT id % 2 AS odd FROM t;")
    ticks = iter(range(0, 10**9, 120_000))
    forgetting = RuntimeContext(clock=lambda: next(ticks), config={"table.exec.state.ttl": "1 min",
                                                                   "parallelism.default": "1"})
    assert Counter(clink.sql(script, context=forgetting).to_arrow().column("odd").to_pylist()) == {0: 3, 1: 3}
    assert Counter(clink.sql(script).to_arrow().column("odd").to_pylist()) == {0: 1, 1: 1}


_MODEL = {
    "UNION ALL": lambda a, b: a + b,
    "UNION": lambda a, b: Counter(set(a + b)),
    "INTERSECT ALL": lambda a, b: a & b,
    "INTERSECT": lambda a, b: Counter(set(a & b)),
    "EXCEPT ALL": lambda a, b: a - b,
    "EXCEPT": lambda a, b: Counter(set(a) - set(b)),
}


@pytest.mark.in_process
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(left=st.lists(st.one_of(st.none(), st.integers(0, 4)), max_size=12),
       right=st.lists(st.one_of(st.none(), st.integers(0, 4)), max_size=12),
       op=st.sampled_from(sorted(_MODEL)))
def test_set_operations_follow_the_multiset_laws(left: list, right: list, op: str) -> None:
    """Each set operation against a multiset model (NULL a value like any other): ALL keeps
    copies by count (the sum, the fewer, the difference), without ALL each distinct row once."""
    a, b = (pa.table({"x": pa.array(side, pa.int64())}) for side in (left, right))
    ours = run_select(f"SELECT x FROM a {op} SELECT x FROM b", row_group_size=3, a=a, b=b)
    assert Counter(ours.column("x").to_pylist()) == _MODEL[op](Counter(left), Counter(right))


def test_limit_alone_keeps_the_first_rows_to_arrive(path: str) -> None:
    """LIMIT without ORDER BY, as Flink runs it on a stream: the first n rows to arrive (in the
    file's order when one subtask reads it)."""
    t = pa.table({"i": pa.array(range(50), pa.int64())})
    got = run_select("SELECT i FROM t LIMIT 4", row_group_size=3, t=t).column("i").to_pylist()
    assert len(set(got)) == 4 and set(got) <= set(range(50))
    if path == "local:1":
        assert got == [0, 1, 2, 3]


def _events(n: int, seed: int, late: bool = False) -> pa.Table:
    """Rows whose times arrive up to 4 s out of order (the watermark waits 5 s); with ``late``,
    every 50th row 20 s behind."""
    rng = np.random.default_rng(seed)
    base = np.datetime64("2026-03-01T10:00:00", "ms")
    offsets = np.arange(n) * 200 + rng.integers(-4000, 0, n)
    if late:
        offsets[::50] -= 20_000
    return pa.table({
        "ts": pa.array(base + offsets.astype("timedelta64[ms]"), pa.timestamp("ms")),
        "k": pa.array(rng.integers(0, 5, n), pa.int64(), mask=rng.random(n) < 0.2),
        "v": pa.array(rng.integers(0, 1000, n), pa.int64()),
    })


EVENT_TIME = {"e": "ts AS ts - INTERVAL '5' SECOND"}


@pytest.mark.parametrize("query", [
    "SELECT ts, k, v FROM e ORDER BY ts, k DESC, v",
    "SELECT v, k FROM e WHERE v > 300 ORDER BY ts, v DESC, k",
    "SELECT k, v FROM e ORDER BY ts ASC, k, v",
])
def test_order_by_event_time_comes_out_in_duckdbs_order(query: str) -> None:
    """A stream sorted on its event time: rows come out as the watermark passes them, in the
    order of the whole result (NULLs last, as DuckDB puts them)."""
    events = _events(600, 5)
    ours = run_select(query, watermarks=EVENT_TIME, row_group_size=40, e=events)
    con = shared_duckdb.connect()
    con.register("e", events)
    theirs = con.execute(query.replace(", k DESC", ", k DESC NULLS LAST")).fetchall()
    assert [tuple(r.values()) for r in ours.to_pylist()] == theirs


def test_order_by_event_time_drops_late_rows(path: str) -> None:
    """A row that arrives behind the watermark would break the order: dropped (and counted),
    as in Flink; the others come out sorted. (Read by several subtasks, the watermark is the
    slowest one's, and the rows 20 s behind may not be late.)"""
    events = _events(600, 6, late=True)
    ours = run_select("SELECT ts, v FROM e ORDER BY ts", watermarks=EVENT_TIME, row_group_size=40, e=events)
    times = ours.column("ts").to_pylist()
    assert times == sorted(times)
    dropped = len(events) - ours.num_rows
    assert dropped <= 12  # at most the rows 20 s behind
    if path == "local:1":
        assert dropped > 0


@pytest.mark.parametrize(("text", "message"), [
    ("SELECT v FROM e ORDER BY v;", "ORDER BY without LIMIT must start with an event-time column"),
    ("SELECT ts FROM e ORDER BY ts DESC;", "ORDER BY an event-time column must be ascending"),
    ("SELECT k, COUNT(*) AS n FROM e GROUP BY k ORDER BY k;", "ORDER BY without LIMIT must start with an event-time"),
])
def test_a_stream_is_ordered_by_its_event_time_first(text: str, message: str) -> None:
    ddl = ("CREATE TABLE e (ts TIMESTAMP(3), k BIGINT, v BIGINT, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) "
           "WITH ('connector' = 'datagen');\n")
    with pytest.raises(SqlError, match=message) as info:
        clink.compile(ddl + text)
    assert info.value.span is not None and info.value.span.line == 2


def test_flinks_in_example() -> None:
    """Flink's set-operations page: the orders of the new products."""
    views = ("CREATE VIEW Orders (customer, product, amount) AS VALUES ('ann', 'pen', 3), ('bob', 'ink', 5), "
             "('cy', 'cap', 2), ('dee', 'pen', 1);\n"
             "CREATE VIEW NewProducts (product) AS VALUES ('pen'), ('cap'), ('pen');\n")
    table = clink.sql(views + "SELECT customer, amount FROM Orders WHERE product IN (SELECT product FROM NewProducts);")
    assert sorted(tuple(r.values()) for r in table.to_arrow().to_pylist()) == [("ann", 3), ("cy", 2), ("dee", 1)]


@pytest.mark.parametrize(("ours", "theirs"), [
    ("SELECT k, ARRAY[k, v, 7] AS a FROM l", "SELECT k, [k, v, 7] AS a FROM l"),
    ("SELECT k, CARDINALITY(ARRAY[k, v]) AS c, ARRAY[s, 'x', NULL][1] AS e FROM l",
     "SELECT k, len([k, v]) AS c, [s, 'x', NULL][1] AS e FROM l"),
    ("SELECT v, MAP[COALESCE(s, 'z'), v, 'q', 0]['a'] AS m, CARDINALITY(MAP['x', k]) AS n FROM l",
     "SELECT v, map([COALESCE(s, 'z'), 'q'], [v, 0])['a'] AS m, 1 AS n FROM l"),
    ("SELECT ROW(k, s).EXPR$1 AS s2, ROW(v).EXPR$0 + 1 AS w FROM l", "SELECT s AS s2, v + 1 AS w FROM l"),
    # UNNEST, lateral: a row per element.
    ("SELECT l.k, x FROM l CROSS JOIN UNNEST(ARRAY[l.k, l.v, 100]) AS u (x)",
     "SELECT l.k, u.x FROM l, unnest([l.k, l.v, 100]) AS u(x)"),
    ("SELECT s, x FROM l, UNNEST(ARRAY[v, v + 1]) AS u (x) WHERE x > 10",
     "SELECT s, u.x FROM l, unnest([v, v + 1]) AS u(x) WHERE u.x > 10"),
    ("SELECT x, COUNT(*) AS n FROM l CROSS JOIN UNNEST(ARRAY[k, k]) AS u (x) GROUP BY x",
     "SELECT u.x, COUNT(*) AS n FROM l, unnest([k, k]) AS u(x) GROUP BY u.x"),
    # Over an updating input: each element row carries its row's kind (an update's old elements go).
    ("SELECT k, x, pos FROM (SELECT k, ARRAY[COUNT(*), SUM(v)] AS a FROM l GROUP BY k) CROSS JOIN UNNEST(a) "
     "WITH ORDINALITY AS u (x, pos)",
     "SELECT k, u.x, u.pos FROM (SELECT k, [COUNT(*), SUM(v)] AS a FROM l GROUP BY k), "
     "unnest(a) WITH ORDINALITY AS u(x, pos)"),
])
def test_arrays_maps_rows_and_unnest_equal_duckdb(tables: dict[str, pa.Table], ours: str, theirs: str) -> None:
    got = run_select(ours, row_group_size=97, **tables)
    con = shared_duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    shared_duckdb.assert_same_rows(got, con.execute(theirs).fetchall())


@pytest.mark.parametrize(("text", "message"), [
    ("SELECT ARRAY[1, 'a'];", "ARRAY\\[...\\] mixes INT and STRING"),
    ("SELECT MAP['a'];", "MAP\\[...\\] takes keys and values in pairs, got 1 item"),
    ("SELECT CARDINALITY(3);", "CARDINALITY takes an ARRAY or a MAP, got INT"),
])
def test_bad_constructors_are_refused_where_written(text: str, message: str) -> None:
    with pytest.raises(SqlError, match=message) as info:
        clink.compile(text)
    assert info.value.span is not None


def test_unnest_of_constants_alone_in_from() -> None:
    got = clink.sql("SELECT x * 10 AS y FROM UNNEST(ARRAY[1, 2, 3]) AS u (x);").to_arrow()
    assert got.column("y").to_pylist() == [10, 20, 30]


def test_unnest_with_ordinality_and_maps() -> None:
    """Flink's UNNEST: a row per element with its position; a MAP gives a row per entry; an
    empty or NULL array gives none."""
    rows = ("VALUES (1, ARRAY['a', 'b', 'c'], MAP['x', 1]), (2, CAST(NULL AS ARRAY<STRING>), MAP['y', 2, 'z', 3]), "
            "(3, ARRAY['d'], MAP['w', 4])")
    got = clink.sql(f"SELECT id, e, pos FROM ({rows}) AS t (id, arr, m) CROSS JOIN UNNEST(arr) WITH ORDINALITY "
                    "AS u (e, pos);").to_arrow().to_pylist()
    assert [tuple(r.values()) for r in got] == [(1, "a", 1), (1, "b", 2), (1, "c", 3), (3, "d", 1)]
    got = clink.sql(f"SELECT id, k, v FROM ({rows}) AS t (id, arr, m), UNNEST(m) AS u (k, v);").to_arrow().to_pylist()
    assert [tuple(r.values()) for r in got] == [(1, "x", 1), (2, "y", 2), (2, "z", 3), (3, "w", 4)]


@pytest.mark.parametrize(("text", "message"), [
    ("SELECT * FROM (VALUES (1)) AS t (a) LEFT JOIN UNNEST(ARRAY[1]) AS u (x) ON TRUE;",
     "UNNEST\\(...\\) is joined with CROSS JOIN \\(or a comma\\), without ON"),
    ("SELECT * FROM (VALUES (1)) AS t (a) CROSS JOIN UNNEST(t.a) AS u (x);", "UNNEST takes an ARRAY or a MAP, got INT"),
    ("SELECT * FROM (VALUES (ARRAY[1])) AS t (a) CROSS JOIN UNNEST(t.a) AS u (x, y);",
     "UNNEST here gives 1 column\\(s\\); 2 name\\(s\\) given"),
])
def test_bad_unnests_are_refused_where_written(text: str, message: str) -> None:
    with pytest.raises(SqlError, match=message) as info:
        clink.compile(text)
    assert info.value.span is not None


def test_grouping_sets_of_a_window_aggregation_equal_duckdb() -> None:
    """Each grouping set keeps window_start, window_end: each is a window aggregation."""
    events = _events(600, 7)
    ours = run_select("SELECT window_start, k, COUNT(*) AS n, GROUPING(k) AS g FROM TABLE(TUMBLE(TABLE e, "
                      "DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, GROUPING SETS ((k), ())",
                      watermarks=EVENT_TIME, row_group_size=40, e=events)
    con = shared_duckdb.connect()
    con.register("e", events)
    theirs = con.execute("SELECT epoch_ms(ws) AS window_start, k, COUNT(*), GROUPING(k) FROM "
                         "(SELECT k, epoch_ms(CAST(ts AS TIMESTAMP)) // 10000 * 10000 AS ws FROM e) "
                         "GROUP BY GROUPING SETS ((ws, k), (ws))").fetchall()
    shared_duckdb.assert_same_rows(ours, theirs)
    assert "_rowkind" not in ours.column_names


_PRODUCTS = ("FROM (VALUES ('supplier1', 'product1', 4), ('supplier1', 'product2', 3), "
             "('supplier2', 'product3', 3), ('supplier2', 'product4', 4)) AS Products(supplier_id, product_id, rating)")


@pytest.mark.parametrize("group_by", ["GROUPING SETS ((supplier_id, rating), (supplier_id), ())",
                                      "ROLLUP (supplier_id, rating)"])
def test_flinks_grouping_sets_and_rollup_examples(group_by: str) -> None:
    """Flink's group aggregation page: its printed table, for GROUPING SETS and the same ROLLUP."""
    table = clink.sql(f"SELECT supplier_id, rating, COUNT(*) AS total {_PRODUCTS} GROUP BY {group_by};").to_arrow()
    assert Counter(tuple(r.values()) for r in table.to_pylist()) == Counter([
        ("supplier1", 4, 1), ("supplier1", None, 2), (None, None, 4), ("supplier1", 3, 1), ("supplier2", 3, 1),
        ("supplier2", None, 2), ("supplier2", 4, 1)])


def test_flinks_cube_is_its_eight_grouping_sets() -> None:
    cube = clink.sql(f"SELECT supplier_id, rating, product_id, COUNT(*) {_PRODUCTS} "
                     "GROUP BY CUBE (supplier_id, rating, product_id);").to_arrow()
    sets = clink.sql(f"SELECT supplier_id, rating, product_id, COUNT(*) {_PRODUCTS} GROUP BY GROUPING SETS ("
                     "(supplier_id, product_id, rating), (supplier_id, product_id), (supplier_id, rating), "
                     "(supplier_id), (product_id, rating), (product_id), (rating), ());").to_arrow()
    assert Counter(tuple(r.values()) for r in cube.to_pylist()) == Counter(tuple(r.values()) for r in sets.to_pylist())
    assert cube.num_rows == 4 + 4 + 4 + 2 + 4 + 4 + 2 + 1


# ---------------------------------------------------------------- GROUP_ID()

# DuckDB has no GROUP_ID(). The reference unites one DuckDB aggregation per grouping set and
# writes each branch's GROUP_ID by Flink's rule: how many times the same set (compared as a
# set) came before it.
# (its keys, its GROUP BY, GROUP_ID(), GROUPING_ID(k, s))
_GROUP_ID_BRANCHES = [("k, NULL", "k", 0, 1), ("k, s", "k, s", 0, 0), ("k, s", "k, s", 1, 0), ("NULL, NULL", "", 0, 3),
                      ("NULL, NULL", "", 1, 3), ("NULL, NULL", "", 2, 3)]


def test_group_id_tells_repeated_grouping_sets_apart(tables: dict[str, pa.Table]) -> None:
    ours = run_select("SELECT k, s, GROUP_ID() AS g, GROUPING_ID(k, s) AS gi, COUNT(*) AS n, SUM(v) AS t FROM l "
                      "GROUP BY GROUPING SETS ((k), (k, s), (s, k), (), (), ())", row_group_size=97, **tables)
    assert ours.schema.field("g").type == pa.int64()
    # The first set leaves s out: the column keeps its name all the same, as in Flink.
    assert ours.column_names == ["k", "s", "g", "gi", "n", "t"]
    con = shared_duckdb.connect()
    con.register("l", tables["l"])
    reference = " UNION ALL ".join(
        f"SELECT {keys}, {gid}, {gi}, COUNT(*), SUM(v) FROM l" + (f" GROUP BY {by}" if by else "")
        for keys, by, gid, gi in _GROUP_ID_BRANCHES)
    shared_duckdb.assert_same_rows(ours, con.execute(reference).fetchall())


def test_group_id_of_rollup_and_a_plain_group_by_in_having(tables: dict[str, pa.Table]) -> None:
    """``GROUP BY k, ROLLUP (k)`` is the set (k) twice; HAVING GROUP_ID() = 1 keeps the copy. A
    plain GROUP BY is one grouping set: GROUP_ID() is 0."""
    twice = run_select("SELECT k, GROUP_ID() AS g, COUNT(*) AS n FROM l GROUP BY k, ROLLUP (k) HAVING GROUP_ID() = 1",
                       row_group_size=97, **tables)
    plain = run_select("SELECT k, GROUP_ID() AS g, COUNT(*) AS n FROM l GROUP BY k", row_group_size=97, **tables)
    con = shared_duckdb.connect()
    con.register("l", tables["l"])
    shared_duckdb.assert_same_rows(twice, con.execute("SELECT k, 1, COUNT(*) FROM l GROUP BY k").fetchall())
    shared_duckdb.assert_same_rows(plain, con.execute("SELECT k, 0, COUNT(*) FROM l GROUP BY k").fetchall())


def test_group_id_in_a_window_aggregation() -> None:
    """Over a window table function each grouping set is a window aggregation; GROUP_ID() counts
    the repeats of a set there too. Hand-computed: 10-second windows of rows at 1, 2, 3 s (keys
    a, b, a) and 12 s (key b)."""
    events = pa.table({"ts": pa.array([1000, 2000, 3000, 12_000], pa.timestamp("ms")), "k": ["a", "b", "a", "b"],
                       "v": pa.array([1, 2, 3, 4], pa.int64())})
    rows = run_select("SELECT window_start, k, GROUP_ID() AS g, SUM(v) AS t FROM TABLE(TUMBLE(TABLE e, "
                      "DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, "
                      "GROUPING SETS ((k), (), (k))", watermarks={"e": "ts AS ts"}, row_group_size=1,
                      e=events).to_pylist()
    w0, w1 = dt.datetime(1970, 1, 1, 0, 0, 0), dt.datetime(1970, 1, 1, 0, 0, 10)
    assert Counter(tuple(r.values()) for r in rows) == Counter([
        (w0, "a", 0, 4), (w0, "b", 0, 2), (w0, None, 0, 6), (w0, "a", 1, 4), (w0, "b", 1, 2),
        (w1, "b", 0, 4), (w1, None, 0, 4), (w1, "b", 1, 4)])


@pytest.mark.parametrize(("text", "message"), [
    ("SELECT GROUP_ID() FROM l", "GROUP_ID belongs to a query with GROUP BY"),
    ("SELECT k FROM l WHERE GROUP_ID() = 0 GROUP BY k", "GROUP_ID is only usable in the SELECT list or HAVING"),
    ("SELECT k, GROUP_ID(k) FROM l GROUP BY k", "GROUP_ID takes no arguments: write GROUP_ID()"),
])
def test_group_id_is_refused_where_it_has_no_meaning(text: str, message: str) -> None:
    with pytest.raises(SqlError, match=re.escape(message)) as info:
        clink.compile("CREATE TABLE l (k BIGINT, s STRING, v INT) WITH ('connector' = 'push');\n" + text)
    assert info.value.span is not None and info.value.span.line == 2
