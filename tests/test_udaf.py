"""Python aggregate functions (``clink.udaf``) and table functions (``clink.udtf``).

Aggregates are checked against DuckDB computing the same thing with built-in SQL, on a dense and
a NULL-heavy table read in small batches, at parallelism 1 and 4: in a GROUP BY (also over an
updating input, which needs ``retract``), in TUMBLE, HOP and CUMULATE windows, and across a
crash and restart. Table functions are checked against DuckDB's ``unnest``.
"""

from __future__ import annotations

import csv
import io
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import shared_duckdb

import clink
from clink.errors import PipelineError, SqlError, UsageError
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from clink.runtime.udf import FunctionRegistry
from clink.testing import run_select

# -- the functions --------------------------------------------------------------------------------


@clink.udaf(returns="DOUBLE", accumulator={"total": "DOUBLE", "weight": "DOUBLE"}, args=("DOUBLE", "DOUBLE"))
class wavg(clink.AggregateFunction):
    """SUM(x * w) / SUM(w) over the rows where both are non-NULL; NULL when there is none."""

    def create_accumulator(self):
        return {"total": 0.0, "weight": 0.0}

    def _add(self, acc, groups, x, w, sign):
        both = pc.and_(pc.is_valid(x), pc.is_valid(w)).to_numpy(zero_copy_only=False)
        xs = pc.fill_null(x, 0.0).to_numpy(zero_copy_only=False)
        ws = pc.fill_null(w, 0.0).to_numpy(zero_copy_only=False)
        n = len(acc["total"])
        return {"total": acc["total"].to_numpy() + sign * np.bincount(groups, xs * ws * both, n),
                "weight": acc["weight"].to_numpy() + sign * np.bincount(groups, ws * both, n)}

    def accumulate(self, acc, groups, x, w):
        return self._add(acc, groups, x, w, 1.0)

    def retract(self, acc, groups, x, w):
        return self._add(acc, groups, x, w, -1.0)

    def merge(self, acc, groups, other):
        n = len(acc["total"])
        return {f: acc[f].to_numpy() + np.bincount(groups, other[f].to_numpy(), n) for f in ("total", "weight")}

    def get_value(self, acc):
        weight = acc["weight"].to_numpy()
        empty = weight == 0
        return pa.array(acc["total"].to_numpy() / np.where(empty, 1.0, weight), mask=empty)


@clink.udaf(returns="DOUBLE", accumulator={"lo": "DOUBLE", "hi": "DOUBLE"}, args=("DOUBLE",))
class spread:
    """MAX(x) - MIN(x): accumulators that start NULL, kept with Arrow's grouped min and max.
    It cannot take a row away, so it has no retract."""

    def create_accumulator(self):
        return {}  # both fields NULL

    def _fold(self, acc, groups, lo, hi):
        per = pa.table({"g": groups, "lo": lo, "hi": hi}).group_by("g", use_threads=False).aggregate(
            [("lo", "min"), ("hi", "max")])
        slots = per["g"].to_numpy()
        n = len(acc["lo"])
        new_lo = np.full(n, np.nan)
        new_hi = np.full(n, np.nan)
        new_lo[slots] = pc.fill_null(per["lo_min"], np.nan).to_numpy()
        new_hi[slots] = pc.fill_null(per["hi_max"], np.nan).to_numpy()
        lo_in = pa.array(new_lo, mask=np.isnan(new_lo))
        hi_in = pa.array(new_hi, mask=np.isnan(new_hi))
        return {"lo": pc.min_element_wise(acc["lo"], lo_in), "hi": pc.max_element_wise(acc["hi"], hi_in)}

    def accumulate(self, acc, groups, x):
        return self._fold(acc, groups, x, x)

    def merge(self, acc, groups, other):
        return self._fold(acc, groups, other["lo"], other["hi"])

    def get_value(self, acc):
        return pc.subtract(acc["hi"], acc["lo"])


@clink.udtf(columns={"word": "STRING", "size": "INT"})
def words(s: str):
    """Each word of ``s`` and its length (nothing for NULL or an empty string)."""
    for w in (s or "").split(" "):
        if w:
            yield w, len(w)


@clink.udtf(columns={"i": "BIGINT"}, vectorized=True)
def upto(n):
    """1 .. n for each row (nothing for NULL or n < 1), vectorized: no loop over rows."""
    counts = pc.fill_null(n, 0).to_numpy(zero_copy_only=False).clip(0)
    rows = np.repeat(np.arange(len(counts)), counts)
    starts = np.cumsum(counts) - counts
    return rows, [np.arange(len(rows)) - starts[rows] + 1]


FUNCTIONS = [wavg, spread, words, upto]

# -- data ---------------------------------------------------------------------------------------------

N = 1500
T0 = 1_704_067_200_000  # 2024-01-01 00:00:00 UTC in ms


def _events(null_rate: float, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)

    def nulls() -> np.ndarray | None:
        return rng.random(N) < null_rate if null_rate else None

    # Whole numbers in DOUBLE columns: sums are exact in any order, so results compare exactly.
    return pa.table({
        "id": pa.array(np.arange(N), pa.int64()),
        "k": pa.array(rng.integers(0, 7, N), pa.int64(), mask=nulls()),
        "g": pa.array(rng.choice(np.array(["a", "b", "c"]), N), pa.string(), mask=nulls()),
        "x": pa.array(rng.integers(-100, 100, N).astype(np.float64), mask=nulls()),
        "w": pa.array(rng.integers(1, 6, N).astype(np.float64), mask=nulls()),
        "s": pa.array([" ".join("xyz"[: 1 + j % 3] * (1 + j % 2) for j in range(m)) for m in rng.integers(0, 4, N)],
                      pa.string(), mask=nulls()),
        "ts": pa.array(T0 + np.cumsum(rng.integers(0, 300, N)), pa.int64()).cast(pa.timestamp("ms")),
    })


DENSE = _events(0.0, 3)
SPARSE = _events(0.6, 4)  # NULL-heavy: most groups see few pairs of x and w both present
DATA = [pytest.param(DENSE, id="dense"), pytest.param(SPARSE, id="null_heavy")]
PARALLELISM = [pytest.param("1", id="p1"), pytest.param("4", id="p4", marks=pytest.mark.parallel)]
WAVG_DUCK = ("SUM(x * w) FILTER (WHERE x IS NOT NULL AND w IS NOT NULL) / "
             "SUM(w) FILTER (WHERE x IS NOT NULL AND w IS NOT NULL)")


def ours(query: str, data: pa.Table, parallelism: str = "1", *, watermark: bool = False) -> pa.Table:
    context = RuntimeContext(functions=FunctionRegistry.of(FUNCTIONS), config={"parallelism.default": parallelism})
    return run_select(query, context=context, watermarks={"t": "ts AS ts"} if watermark else None,
                      row_group_size=41, t=data)


def duck(query: str, data: pa.Table) -> list[tuple]:
    con = shared_duckdb.connect()
    con.register("t", data)
    return con.execute(query).fetchall()


# -- aggregate functions in a GROUP BY -------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", PARALLELISM)
@pytest.mark.parametrize("data", DATA)
def test_group_by_python_aggregates_match_duckdb(data: pa.Table, parallelism: str) -> None:
    got = ours("SELECT k, g, wavg(x, w) AS wa, spread(x) AS sp, COUNT(*) AS n FROM t GROUP BY k, g", data,
               parallelism)
    want = duck(f"SELECT k, g, {WAVG_DUCK}, MAX(x) - MIN(x), COUNT(*) FROM t GROUP BY k, g", data)
    assert len(want) > 15
    shared_duckdb.assert_same_rows(got, want)


@pytest.mark.parametrize("data", DATA)
def test_filter_and_a_global_python_aggregate_match_duckdb(data: pa.Table) -> None:
    got = ours("SELECT wavg(x, w) FILTER (WHERE g = 'a') AS wa, spread(w) AS sp FROM t", data)
    want = duck("SELECT SUM(x * w) FILTER (WHERE g = 'a' AND x IS NOT NULL AND w IS NOT NULL) / "
                "SUM(w) FILTER (WHERE g = 'a' AND x IS NOT NULL AND w IS NOT NULL), MAX(w) - MIN(w) FROM t", data)
    shared_duckdb.assert_same_rows(got, want)


@pytest.mark.parametrize("parallelism", PARALLELISM)
@pytest.mark.parametrize("data", DATA)
def test_python_aggregate_over_an_updating_input_retracts(data: pa.Table, parallelism: str) -> None:
    """Each (k, g) total is revised as its rows arrive: the outer wavg takes the old one away
    (retract) before it adds the new one."""
    inner = "SELECT k, g, SUM(x) AS total, CAST(COUNT(*) AS DOUBLE) AS n FROM t GROUP BY k, g"
    got = ours(f"SELECT k, wavg(total, n) AS wa FROM ({inner}) GROUP BY k", data, parallelism)
    want = duck("SELECT k, SUM(total * n) FILTER (WHERE total IS NOT NULL) / SUM(n) FILTER (WHERE total IS NOT "
                f"NULL) FROM ({inner}) GROUP BY k", data)
    shared_duckdb.assert_same_rows(got, want)


def test_a_python_aggregate_without_retract_over_an_updating_input_is_refused() -> None:
    with pytest.raises(SqlError, match="spread has no retract method") as refused:
        ours("SELECT k, spread(total) FROM (SELECT k, g, SUM(x) AS total FROM t GROUP BY k, g) GROUP BY k", DENSE)
    assert refused.value.span is not None and "retract(acc, groups" in refused.value.hint


# -- aggregate functions in windows ----------------------------------------------------------------------

MS = "epoch_ms(CAST(ts AS TIMESTAMP))"
WINDOWS = [
    ("tumble", "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)",
     f"SELECT *, {MS} - {MS} % 10000 AS ws, {MS} - {MS} % 10000 + 10000 AS we FROM t"),
    ("hop", "HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '4' SECOND, INTERVAL '12' SECOND)",
     f"SELECT t.*, {MS} - {MS} % 4000 - j * 4000 AS ws, {MS} - {MS} % 4000 - j * 4000 + 12000 AS we "
     "FROM t, range(0, 3) AS r(j)"),
    ("cumulate", "CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '20' SECOND)",
     f"SELECT t.*, {MS} - {MS} % 20000 AS ws, {MS} - {MS} % 20000 + j * 5000 AS we FROM t, range(1, 5) AS r(j) "
     f"WHERE {MS} - {MS} % 20000 + j * 5000 > {MS}"),
]


@pytest.mark.parametrize("parallelism", PARALLELISM)
@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize(("kind", "window", "duck_windows"), WINDOWS, ids=[w[0] for w in WINDOWS])
def test_window_python_aggregates_match_duckdb(kind: str, window: str, duck_windows: str, data: pa.Table,
                                               parallelism: str) -> None:
    got = ours(f"SELECT k, CAST(window_end AS BIGINT) AS we, wavg(x, w) AS wa, spread(x) AS sp FROM TABLE({window}) "
               "GROUP BY k, window_start, window_end", data, parallelism, watermark=True)
    got = got.set_column(1, "we", pc.multiply(got["we"], 1000))  # seconds to ms, as DuckDB's
    want = duck(f"SELECT k, we, {WAVG_DUCK}, MAX(x) - MIN(x) FROM ({duck_windows}) GROUP BY k, ws, we", data)
    assert len(want) > 100
    shared_duckdb.assert_same_rows(got, want)


@pytest.mark.parametrize("data", DATA)
def test_session_window_python_aggregates_equal_the_built_in_ones(data: pa.Table) -> None:
    """Sessions merge partial accumulators of different windows; the built-in aggregates, which
    the window tests check against DuckDB, give the reference in the same query."""
    got = ours("SELECT wavg(x, w) AS wa, SUM(x * w) FILTER (WHERE x IS NOT NULL AND w IS NOT NULL) / SUM(w) FILTER "
               "(WHERE x IS NOT NULL AND w IS NOT NULL) AS wa2, spread(x) AS sp, MAX(x) - MIN(x) AS sp2 "
               "FROM TABLE(SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), INTERVAL '600' MILLISECOND)) "
               "GROUP BY k, window_start, window_end", data, "1", watermark=True)
    assert got.num_rows > 50
    assert got["wa"].to_pylist() == got["wa2"].to_pylist()
    assert got["sp"].to_pylist() == got["sp2"].to_pylist()


# -- checkpoints ---------------------------------------------------------------------------------------

CHECKPOINTED = """
CREATE TABLE bid (auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' HOUR)
WITH ('connector' = 'datagen', 'number-of-rows' = '12000', 'seed' = '5', 'batch-size' = '300',
      'fields.auction.min' = '1', 'fields.auction.max' = '6', 'fields.price.min' = '1', 'fields.price.max' = '99');
CREATE TABLE windows (auction BIGINT, window_start TIMESTAMP(3), wa DOUBLE, sp DOUBLE)
WITH ('connector' = 'filesystem', 'path' = '{out}/windows/', 'format' = 'csv');
CREATE TABLE totals (auction BIGINT, wa DOUBLE, sp DOUBLE, PRIMARY KEY (auction) NOT ENFORCED)
WITH ('connector' = 'sqlite', 'path' = '{out}/totals.db');
INSERT INTO windows
SELECT auction, window_start, wavg(CAST(price AS DOUBLE), CAST(auction AS DOUBLE)), spread(CAST(price AS DOUBLE))
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' HOUR))
GROUP BY auction, window_start, window_end;
INSERT INTO totals
SELECT auction, wavg(CAST(price AS DOUBLE), CAST(price % 7 AS DOUBLE)), spread(CAST(price AS DOUBLE))
FROM bid GROUP BY auction;
"""


def _job(out: Path, state: Path) -> Job:
    registry = FunctionRegistry.of(FUNCTIONS)
    plan = clink.compile(CHECKPOINTED.format(out=out), name="udaf.sql", functions=registry).runtime_plan
    config = {"execution.checkpointing.interval-rows": "2000"}
    return Job(plan, RuntimeContext(config=config, state_dir=state, functions=registry, stdout=io.StringIO()))


def _results(out: Path) -> tuple[list[tuple], list[tuple]]:
    import sqlite3

    windows = sorted(tuple(r) for p in sorted((out / "windows").iterdir()) if not p.name.startswith((".", "_"))
                     for r in csv.reader(p.open()))
    with sqlite3.connect(out / "totals.db") as con:
        totals = sorted(con.execute("SELECT auction, wa, sp FROM totals").fetchall())
    return windows, totals


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple], list[tuple]]:
    out = tmp_path_factory.mktemp("uninterrupted")
    _job(out, out / "state").run()
    windows, totals = _results(out)
    assert len(windows) > 50 and len(totals) == 6
    return windows, totals


@pytest.mark.parametrize("crash_after_steps", [3, 11, 26])
def test_python_aggregates_resume_from_a_checkpoint_exactly(tmp_path: Path, uninterrupted, crash_after_steps: int
                                                            ) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    first = _job(out, state)
    for _ in range(crash_after_steps):
        first.step()
    taken = first.metrics.checkpoints
    assert taken > 0 or crash_after_steps < 10  # the later crashes lose state held in checkpoints
    del first  # a crash: nothing closed or committed
    resumed = _job(out, state)
    assert (resumed.metrics.restored_from is not None) == (taken > 0)
    resumed.run()
    assert _results(out) == uninterrupted


# -- table functions -------------------------------------------------------------------------------------

WORDS_DUCK = "SELECT id, wd, length(wd) FROM t, unnest(string_split(s, ' ')) AS u(wd) WHERE wd <> ''"


@pytest.mark.parametrize("parallelism", PARALLELISM)
@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("join", ["t, LATERAL TABLE", "t CROSS JOIN LATERAL TABLE"])
def test_row_wise_table_function_matches_duckdb_unnest(join: str, data: pa.Table, parallelism: str) -> None:
    got = ours(f"SELECT id, word, size FROM {join}(words(s)) AS u(word, size)", data, parallelism)
    want = duck(WORDS_DUCK, data)
    assert len(want) > N // 2
    shared_duckdb.assert_same_rows(got, want)


@pytest.mark.parametrize("data", DATA)
def test_left_join_lateral_keeps_rows_without_output(data: pa.Table) -> None:
    got = ours("SELECT id, u.wd, u.n FROM t LEFT JOIN LATERAL TABLE(words(s)) AS u(wd, n) ON TRUE", data)
    want = duck(f"SELECT t.id, u.wd, u.n FROM t LEFT JOIN ({WORDS_DUCK}) AS u(id, wd, n) ON t.id = u.id", data)
    assert any(r[1] is None for r in want)
    shared_duckdb.assert_same_rows(got, want)


@pytest.mark.parametrize("data", DATA)
def test_vectorized_table_function_feeds_an_aggregation(data: pa.Table) -> None:
    got = ours("SELECT k, COUNT(*) AS n, SUM(i) AS total FROM t, LATERAL TABLE(upto(k)) AS r(i) "
               "WHERE i > 1 GROUP BY k", data)
    want = duck("SELECT k, COUNT(*), SUM(i) FROM t, unnest(range(1, k + 1)) AS r(i) WHERE i > 1 GROUP BY k", data)
    assert want
    shared_duckdb.assert_same_rows(got, want)


@pytest.mark.parametrize("data", DATA)
def test_table_functions_over_an_updating_input_carry_each_rows_kind(data: pa.Table) -> None:
    """Over a GROUP BY's results: an update's old row takes its rows away again, its new row
    brings new ones (row-wise, vectorized, and LEFT JOIN LATERAL's padded rows alike)."""
    grouped = "(SELECT k, COUNT(*) % 4 AS n, MAX(g) AS top FROM t GROUP BY k)"
    got = ours(f"SELECT k, i FROM {grouped}, LATERAL TABLE(upto(n)) AS r(i)", data)
    shared_duckdb.assert_same_rows(got, duck(f"SELECT k, i FROM {grouped}, unnest(range(1, n + 1)) AS r(i)", data))
    got = ours(f"SELECT k, u.word FROM {grouped} LEFT JOIN LATERAL TABLE(words(top)) AS u(word, size) ON TRUE", data)
    shared_duckdb.assert_same_rows(got, duck(f"SELECT k, top FROM {grouped}", data))


def test_table_function_columns_keep_their_declared_names_without_aliases() -> None:
    got = ours("SELECT word, size FROM t, LATERAL TABLE(words(s)) WHERE id < 20", DENSE)
    assert got.column_names == ["word", "size"]
    assert got.to_pylist() == [{"word": w, "size": n} for r in DENSE.slice(0, 20).to_pylist()
                               for w, n in words(r["s"])]


# -- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "message", "where"), [
    ("SELECT wavg(x, w) OVER (PARTITION BY k ORDER BY ts) FROM t", "cannot be used with OVER", "1:19"),
    ("SELECT words(s) FROM t", "words is a table function", "1:8"),
    ("SELECT 1 FROM t JOIN LATERAL TABLE(words(s)) AS u(a, b) ON u.b > 1", "joined with a comma, CROSS JOIN",
     "1:60"),
    ("SELECT 1 FROM t, LATERAL TABLE(wavg(x, w)) AS u(a)", "wavg is a Python aggregate function, not a table",
     "1:32"),
    ("SELECT 1 FROM t, LATERAL TABLE(wrods(s)) AS u(a, b)", "not a known function", "1:32"),
    ("SELECT 1 FROM t, LATERAL TABLE(words(s)) AS u(a)", "gives 2 column\\(s\\); 1 name\\(s\\) given", "1:18"),
    ("SELECT wavg(x) FROM t", "aggregate function wavg takes 2 arguments, got 1", "1:8"),
    ("SELECT wavg(g, w) FROM t", "argument 1 of wavg must be DOUBLE, got STRING", "1:13"),
])
def test_misuse_is_a_positioned_sql_error(query: str, message: str, where: str) -> None:
    with pytest.raises(SqlError, match=message) as e:
        ours(query, DENSE, watermark=True)
    assert str(e.value.span).endswith(where), e.value.span


def test_a_misspelt_table_function_is_suggested() -> None:
    with pytest.raises(SqlError) as e:
        ours("SELECT 1 FROM t, LATERAL TABLE(wrods(s)) AS u(a, b)", DENSE)
    assert "WORDS" in e.value.hint


def test_definitions_are_checked_when_decorated() -> None:
    class incomplete:
        def accumulate(self, acc, groups, x):
            return acc

    with pytest.raises(UsageError, match="lacks create_accumulator, merge, get_value"):
        clink.udaf(incomplete, returns="BIGINT", accumulator={"n": "BIGINT"})
    with pytest.raises(UsageError, match="needs at least one column"):
        clink.udaf(spread, returns="DOUBLE", accumulator={})
    with pytest.raises(UsageError, match="needs at least one column"):
        clink.udtf(lambda s: [], columns={}, name="nothing")


def test_a_failing_or_misshapen_aggregate_fails_the_pipeline_naming_it() -> None:
    @clink.udaf(returns="BIGINT", accumulator={"n": "BIGINT"})
    class broken:
        def create_accumulator(self):
            return {"n": 0}

        def accumulate(self, acc, groups, x):
            return {"n": [1]}  # one value, whatever the number of groups

        def merge(self, acc, groups, other):
            return acc

        def get_value(self, acc):
            return acc["n"]

    context = RuntimeContext(functions=FunctionRegistry.of([broken]))
    with pytest.raises(PipelineError, match="broken: accumulate gave 1 values of field n for 7 groups") as e:
        run_select("SELECT k, broken(x) FROM t GROUP BY k", context=context, t=DENSE)
    assert e.value.span is not None and e.value.span.file == "test.sql"


def test_a_raising_table_function_names_the_row() -> None:
    @clink.udtf(columns={"v": "INT"})
    def fragile(x: float):
        if x is not None and x > 90:
            raise ValueError("too big")
        return [1]

    context = RuntimeContext(functions=FunctionRegistry.of([fragile]))
    with pytest.raises(PipelineError, match="table function fragile raised ValueError: too big \\(row"):
        run_select("SELECT v FROM t, LATERAL TABLE(fragile(x)) AS u(v)", context=context, t=DENSE)


# -- CREATE FUNCTION ----------------------------------------------------------------------------------------


@pytest.fixture
def function_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pkg = tmp_path / "aggpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "stats.py").write_text(textwrap.dedent("""
        import numpy as np
        import pyarrow.compute as pc
        import clink

        @clink.udaf(returns="BIGINT", accumulator={"n": "BIGINT"})
        class count_even:
            def create_accumulator(self):
                return {"n": 0}

            def accumulate(self, acc, groups, x):
                even = pc.fill_null(pc.equal(pc.bit_wise_and(x, 1), 0), False).to_numpy(zero_copy_only=False)
                return {"n": acc["n"].to_numpy() + np.bincount(groups[even], minlength=len(acc["n"]))}

            def merge(self, acc, groups, other):
                return {"n": acc["n"].to_numpy() + np.bincount(groups, other["n"].to_numpy(), len(acc["n"]))}

            def get_value(self, acc):
                return acc["n"]

        @clink.udtf(columns={"i": "BIGINT"})
        def upto(n: int):
            return range(1, (n or 0) + 1)

        class undecorated:
            def accumulate(self, acc, groups, x):
                return acc
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


CREATE = ("CREATE FUNCTION count_even AS 'aggpkg.stats.count_even' LANGUAGE PYTHON;\n"
          "CREATE TEMPORARY FUNCTION upto AS 'aggpkg.stats.upto' LANGUAGE PYTHON;\n")


@pytest.mark.parametrize("data", DATA)
def test_create_function_registers_aggregate_and_table_functions(function_package: Path, data: pa.Table) -> None:
    got = run_select(CREATE + "SELECT k, count_even(i) AS e, COUNT(*) AS n FROM t, LATERAL TABLE(upto(k)) AS u(i) "
                     "GROUP BY k", row_group_size=41, t=data)
    want = duck("SELECT k, COUNT(*) FILTER (WHERE i % 2 = 0), COUNT(*) FROM t, unnest(range(1, k + 1)) AS u(i) "
                "GROUP BY k", data)
    shared_duckdb.assert_same_rows(got, want)


def test_the_generated_module_imports_them_by_path(function_package: Path) -> None:
    text = CREATE + ("CREATE TABLE t (k BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n"
                     "SELECT count_even(i) FROM t, LATERAL TABLE(upto(k)) AS u(i)")
    source = clink.compile(text, name="q.sql").source
    assert "UDF_COUNT_EVEN = U.import_function('aggpkg.stats', 'count_even', name='count_even')  # q.sql:1:1" in source
    assert "batch = UA.lateral(UDF_UPTO, 'upto', batch, [1], 1, [pa.int64()])  # q.sql:4:30  LATERAL TABLE(upto(k))" \
        in source
    assert "function=UDF_COUNT_EVEN, accumulator=pa.struct([pa.field('n', pa.int64())])" in source
    explained = clink.compile(text, name="q.sql").explain()
    assert "Lateral(function=[upto($arg0)], as=[i])" in explained
    assert "aggs=[count_even(__arg0)]" in explained


def test_create_function_of_an_undecorated_aggregate_class_says_how_to_fix_it(function_package: Path) -> None:
    with pytest.raises(SqlError, match="not an aggregate function clink can type") as e:
        clink.compile("CREATE FUNCTION u AS 'aggpkg.stats.undecorated' LANGUAGE PYTHON", name="f.sql")
    assert "@clink.udaf" in e.value.hint and str(e.value.span) == "f.sql:1:22"


@pytest.mark.parametrize("language", ["JAVA", "SCALA"])
def test_create_function_in_another_language_is_refused(function_package: Path, language: str) -> None:
    with pytest.raises(SqlError, match=f"functions in {language} are not supported") as e:
        clink.compile(f"CREATE FUNCTION f AS 'com.example.Agg' LANGUAGE {language}", name="f.sql")
    assert e.value.hint == "write LANGUAGE PYTHON" and str(e.value.span).startswith("f.sql:1:")


@pytest.mark.parametrize("data", DATA)
def test_python_aggregates_in_grouping_sets_see_the_rows_of_each_set(data: pa.Table) -> None:
    """An argument that is also a grouping expression keeps its values in the sets without it."""
    got = ours("SELECT k, g, spread(k) AS sp, wavg(x, w) AS wa FROM t GROUP BY GROUPING SETS ((k, g), (g), ())", data)
    want = duck(f"SELECT k, g, MAX(k) - MIN(k), {WAVG_DUCK} FROM t GROUP BY GROUPING SETS ((k, g), (g), ())", data)
    shared_duckdb.assert_same_rows(got, want)


def test_rows_of_a_table_function_keep_their_event_time_for_windows() -> None:
    got = ours("CREATE TEMPORARY VIEW lt AS SELECT ts, word FROM t, LATERAL TABLE(words(s)) AS u(word, size);\n"
               "SELECT CAST(window_end AS BIGINT) AS we, COUNT(*) AS n, COUNT(DISTINCT word) AS d "
               "FROM TABLE(TUMBLE(TABLE lt, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end",
               DENSE, watermark=True)
    got = got.set_column(0, "we", pc.multiply(got["we"], 1000))
    want = duck(f"SELECT {MS} - {MS} % 10000 + 10000 AS we, COUNT(*), COUNT(DISTINCT wd) FROM t, "
                "unnest(string_split(s, ' ')) AS u(wd) WHERE wd <> '' GROUP BY we", DENSE)
    assert len(want) > 10
    shared_duckdb.assert_same_rows(got, want)


# -- LISTAGG over an updating input, checkpointed ---------------------------------------------------------

LISTAGG_UPDATING = """
CREATE TABLE bid (auction BIGINT, price BIGINT)
WITH ('connector' = 'datagen', 'number-of-rows' = '6000', 'seed' = '9', 'batch-size' = '200',
      'fields.auction.min' = '1', 'fields.auction.max' = '40', 'fields.price.min' = '1', 'fields.price.max' = '9');
CREATE TABLE tops (top BIGINT, auctions STRING, PRIMARY KEY (top) NOT ENFORCED)
WITH ('connector' = 'sqlite', 'path' = '{out}/tops.db');
INSERT INTO tops
SELECT top, LISTAGG(CAST(auction AS STRING), ' ') FROM (SELECT auction, MAX(price) AS top FROM bid GROUP BY auction)
GROUP BY top;
"""


def _listagg_job(out: Path, state: Path, backend: str) -> Job:
    plan = clink.compile(LISTAGG_UPDATING.format(out=out), name="listagg.sql").runtime_plan
    config = {"execution.checkpointing.interval-rows": "1000", "state.backend": backend}
    return Job(plan, RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))


def _tops(out: Path) -> dict[int, list[str]]:
    import sqlite3

    with sqlite3.connect(out / "tops.db") as con:
        return {top: sorted(text.split(" ")) for top, text in con.execute("SELECT top, auctions FROM tops")}


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("crash_after_steps", [9, 19])
def test_listagg_over_an_updating_input_resumes_from_a_checkpoint_exactly(tmp_path: Path, backend: str,
                                                                          crash_after_steps: int) -> None:
    _listagg_job(tmp_path / "whole", tmp_path / "whole-state", backend).run()
    whole = _tops(tmp_path / "whole")
    # Each auction's text sits under its largest price only: every other was taken out again.
    assert sorted(a for texts in whole.values() for a in texts) == sorted(str(a) for a in range(1, 41))
    out, state = tmp_path / "out", tmp_path / "state"
    first = _listagg_job(out, state, backend)
    for _ in range(crash_after_steps):
        first.step()
    assert first.metrics.checkpoints > 0
    del first  # a crash: nothing closed or committed
    resumed = _listagg_job(out, state, backend)
    assert resumed.metrics.restored_from is not None
    resumed.run()
    assert _tops(out) == whole
