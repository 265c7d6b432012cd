"""SIMILAR TO against DuckDB's LIKE: a pattern of ordinary characters, ``%`` and ``_`` means the
same in both (a whole-string match, ``%`` any run, ``_`` one character), so any such pattern
must give DuckDB's LIKE answer on any strings — and NOT SIMILAR TO its negation."""

from __future__ import annotations

import pyarrow as pa
import shared_duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.testing import run_select

# A small alphabet, so that random patterns and strings often match; 'é' and '日' are there to
# show that '_' is one character, not one byte. No line breaks: '_' refuses them and DuckDB's
# LIKE does not (see test_flink_function_examples for them).
_TEXT = st.text(alphabet="abé日", max_size=6)
_PATTERNS = st.text(alphabet="abé日%_", max_size=6)


@settings(max_examples=120, deadline=None)
@given(pattern=_PATTERNS, strings=st.lists(st.none() | _TEXT, min_size=1, max_size=12))
def test_a_like_shaped_pattern_matches_as_duckdbs_like(pattern: str, strings: list[str | None]) -> None:
    table = pa.table({"s": pa.array(strings, pa.string())})
    quoted = "'" + pattern + "'"
    ours = run_select(f"SELECT s SIMILAR TO {quoted} AS m, s NOT SIMILAR TO {quoted} AS n FROM t", t=table,
                      row_group_size=5)
    con = shared_duckdb.connect()
    con.register("t", table)
    theirs = con.execute(f"SELECT s LIKE {quoted}, s NOT LIKE {quoted} FROM t").fetchall()
    con.close()
    assert [(r["m"], r["n"]) for r in ours.to_pylist()] == [tuple(r) for r in theirs], pattern
