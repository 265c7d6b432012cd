"""Top-N: the binder leaves a filter on a ROW_NUMBER's row number above it, and the rewrite
``limit_ranks`` makes it the Rank's limit; the binder still refuses what no filter limits."""

from __future__ import annotations

import pytest

import clink
from clink.compiler import compile_text
from clink.errors import SqlError

DDL = ("CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen');\n"
       "CREATE TABLE u (k INT, w INT) WITH ('connector' = 'datagen');\n")
RANKED = "(SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) AS rn FROM t)"


def test_the_rewrite_takes_the_smallest_limit_and_keeps_the_other_conditions() -> None:
    plan = compile_text(DDL + f"SELECT k, v FROM {RANKED} WHERE v > 2 AND rn < 4 AND 2 >= rn;")
    rules = [step.splitlines()[0] for step in plan.rewrite_trace]
    assert rules[0] == "-- after limit_ranks"
    first = plan.rewrite_trace[0]
    assert "keep=[rn <= 2]" in first and "(v > 2)" in first and "rn < 4" not in first
    assert "keep=[rn <= 2]" in plan.explain()


def test_a_limit_that_keeps_no_row_is_refused_at_the_where() -> None:
    sql = DDL + f"SELECT nope FROM {RANKED} WHERE rn <= 0;"
    message = r"the row number is at least 1, so this keeps no row \(limit 0\)"
    with pytest.raises(SqlError, match=message) as info:
        clink.compile(sql, name="p.sql")
    assert str(info.value).startswith("p.sql:3:")


def test_a_filter_a_join_moves_onto_its_input_is_not_a_top_n() -> None:
    # The WHERE is placed on the join's left input, right above the ROW_NUMBER: it does not limit it.
    sql = DDL + f"SELECT * FROM {RANKED} a JOIN u ON a.k = u.k WHERE a.rn <= 3;"
    with pytest.raises(SqlError, match=r"ROW_NUMBER\(\) OVER \(...\) is supported as Top-N only") as info:
        clink.compile(sql, name="p.sql")
    assert str(info.value).startswith("p.sql:3:29")


def test_a_top_n_inside_a_join_input_is_kept() -> None:
    explain = clink.compile(DDL + f"SELECT * FROM (SELECT * FROM {RANKED} WHERE rn <= 3) a "
                                  "JOIN u ON a.k = u.k;").explain()
    assert "keep=[rn <= 3]" in explain
