"""Random well-typed expressions over random small tables: clink and DuckDB must agree.

Each test draws an expression in both dialects (see ``tests/strategies.py``), runs it through the
whole of clink (parse, bind, rewrite, generate, run over a Parquet source) and through DuckDB over
the same Arrow table, and compares the rows as multisets. A crash in clink fails the test as
surely as a wrong answer.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from hypothesis import HealthCheck, given, settings

# tests/shared_duckdb.py and tests/strategies.py: pytest puts tests/ on sys.path, as it holds the root
# conftest.py.
import shared_duckdb
from strategies import Sql, arithmetic_exprs, bool_exprs, int_exprs, int_tables, mixed_tables, string_exprs

from clink.testing import run_select

# Compiling and running one query takes tens of milliseconds; 60 examples a test keeps the file
# to seconds while still reaching every operator many times over.
EXAMPLES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def duckdb_column(sql: str, table: pa.Table) -> list[object]:
    con = shared_duckdb.connect()
    # Division and modulo by zero are NULL in clink (as in Flink); DuckDB agrees with this setting.
    con.execute("SET error_on_division_by_zero = false")
    con.register("t", table)
    rows = con.execute(sql).fetchall()
    con.close()
    return [r[0] for r in rows]


def check(select: Sql, where: Sql | None, table: pa.Table) -> None:
    ours_sql = f"SELECT {select.clink} AS v FROM t" + (f" WHERE {where.clink}" if where else "")
    theirs_sql = f"SELECT {select.duckdb} AS v FROM t" + (f" WHERE {where.duckdb}" if where else "")
    ours = run_select(ours_sql, t=table).column("v").to_pylist()
    theirs = duckdb_column(theirs_sql, table)
    assert Counter(ours) == Counter(theirs), f"\n  clink:  {ours_sql}\n  duckdb: {theirs_sql}"


@EXAMPLES
@given(expr=int_exprs(), table=mixed_tables())
def test_integer_expression_matches_duckdb(expr: Sql, table: pa.Table) -> None:
    check(expr, None, table)


@EXAMPLES
@given(expr=arithmetic_exprs(), table=int_tables())
def test_arithmetic_matches_duckdb(expr: Sql, table: pa.Table) -> None:
    check(expr, None, table)


@EXAMPLES
@given(predicate=bool_exprs(), table=mixed_tables())
def test_predicate_matches_duckdb(predicate: Sql, table: pa.Table) -> None:
    check(predicate, None, table)


@EXAMPLES
@given(predicate=bool_exprs(), expr=int_exprs(1), table=mixed_tables())
def test_filter_keeps_the_rows_duckdb_keeps(predicate: Sql, expr: Sql, table: pa.Table) -> None:
    # A NULL predicate drops the row, exactly as FALSE does.
    check(expr, predicate, table)


@EXAMPLES
@given(expr=string_exprs(), table=mixed_tables())
def test_string_expression_matches_duckdb(expr: Sql, table: pa.Table) -> None:
    check(expr, None, table)
