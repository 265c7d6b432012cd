"""Hypothesis strategies shared by the property tests: small tables with NULLs, and well-typed
SQL expressions over them.

An expression is drawn as a pair ``Sql(clink, duckdb)``: the same meaning in clink's dialect (which
follows Flink) and in DuckDB's, so a test runs both and compares. The two texts differ only where
the dialects do: integer ``/`` (DuckDB ``//``), ``IF`` (DuckDB ``CASE``), ``CONCAT`` (DuckDB ``||``,
which keeps NULLs), ``CHAR_LENGTH`` (DuckDB ``length``) and ``SPLIT_INDEX`` (DuckDB list indexing).

Every limit placed on the generated input says why next to it, so that a shrunk example which
crosses a limit is understood rather than "fixed".
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa
from hypothesis import strategies as st

#: Column values and the literals combined with them stay within ±100, and integer literals on
#: their own within ±10. With at most three levels of nesting (see ``int_exprs``) the largest
#: possible value is 100**8 = 1e16, inside BIGINT, and a subexpression made only of literals (which
#: are INT, as in Flink) stays within 10**8, inside INT: integer overflow fails the pipeline in
#: clink and raises in DuckDB, and has tests of its own.
COLUMN_BOUND = 100
LITERAL_BOUND = 10

#: Few distinct characters, so that equal strings, LIKE matches and split pieces are common; a
#: space for TRIM, '_' and '%' as data for LIKE, and a two-byte character so that positions are
#: counted in characters, not bytes. Backslash is left out: without ESCAPE it is an ordinary
#: character in clink and DuckDB alike, but a generator producing it adds nothing.
STRING_ALPHABET = "aAb _%é"


class Sql(NamedTuple):
    """One expression in both dialects."""

    clink: str
    duckdb: str


def _same(text: str) -> Sql:
    return Sql(text, text)


def _fmt(template: str, *args: Sql, duckdb: str | None = None) -> Sql:
    """Fill ``template`` ({0}, {1}, ...) with the clink texts, and ``duckdb`` (or ``template``) with
    the DuckDB texts."""
    return Sql(template.format(*(a.clink for a in args)),
               (duckdb or template).format(*(a.duckdb for a in args)))


# ---------------------------------------------------------------- tables


def nullable_ints(bound: int = COLUMN_BOUND) -> st.SearchStrategy[int | None]:
    return st.none() | st.integers(-bound, bound)


def nullable_strings(max_size: int = 6) -> st.SearchStrategy[str | None]:
    return st.none() | st.text(alphabet=STRING_ALPHABET, max_size=max_size)


#: Tables have up to 25 rows: enough for NULLs and ties to show up together in one batch, small
#: enough that an example costs little more than compiling its query.
MAX_ROWS = 25


def int_tables(columns: tuple[str, ...] = ("a", "b"),
               max_rows: int = MAX_ROWS) -> st.SearchStrategy[pa.Table]:
    """Tables of nullable BIGINT columns."""
    return st.lists(st.tuples(*(nullable_ints() for _ in columns)), max_size=max_rows).map(
        lambda rows: pa.table({c: pa.array([r[i] for r in rows], pa.int64()) for i, c in enumerate(columns)}))


def mixed_tables(max_rows: int = MAX_ROWS) -> st.SearchStrategy[pa.Table]:
    """Tables with nullable BIGINT columns ``a`` and ``b``, BOOLEAN ``p`` and STRING ``s`` and ``u``."""
    row = st.tuples(nullable_ints(), nullable_ints(), st.none() | st.booleans(), nullable_strings(),
                    nullable_strings())
    return st.lists(row, max_size=max_rows).map(lambda rows: pa.table({
        "a": pa.array([r[0] for r in rows], pa.int64()),
        "b": pa.array([r[1] for r in rows], pa.int64()),
        "p": pa.array([r[2] for r in rows], pa.bool_()),
        "s": pa.array([r[3] for r in rows], pa.string()),
        "u": pa.array([r[4] for r in rows], pa.string()),
    }))


# ---------------------------------------------------------------- leaves

INT_COLUMNS = ("a", "b")
BOOL_COLUMNS = ("p",)
STRING_COLUMNS = ("s", "u")


def int_literals() -> st.SearchStrategy[Sql]:
    # A negative literal is written in parentheses so that '- -3' never reads as a comment ('--').
    return st.integers(-LITERAL_BOUND, LITERAL_BOUND).map(lambda n: _same(f"({n})" if n < 0 else str(n)))


def string_literals() -> st.SearchStrategy[Sql]:
    # The alphabet has no quote, so a literal is the text between two quotes.
    return st.text(alphabet=STRING_ALPHABET, max_size=3).map(lambda s: _same(f"'{s}'"))


def _int_leaves() -> st.SearchStrategy[Sql]:
    return st.sampled_from(INT_COLUMNS).map(_same) | int_literals()


def _bool_leaves() -> st.SearchStrategy[Sql]:
    return st.sampled_from([*BOOL_COLUMNS, "TRUE", "FALSE", "CAST(NULL AS BOOLEAN)"]).map(_same)


def _string_leaves() -> st.SearchStrategy[Sql]:
    return st.sampled_from(STRING_COLUMNS).map(_same) | string_literals()


# ---------------------------------------------------------------- expressions

#: Three levels of nesting at most: deep enough for every operator to meet every other one, and
#: the bound that keeps products inside BIGINT (see COLUMN_BOUND).
MAX_DEPTH = 3


def int_exprs(depth: int = MAX_DEPTH) -> st.SearchStrategy[Sql]:
    """Well-typed BIGINT (or INT, when made of literals only) expressions over ``a`` and ``b``."""
    if depth == 0:
        return _int_leaves()
    sub = int_exprs(depth - 1)
    cond = bool_exprs(depth - 1)
    arithmetic = st.tuples(sub, st.sampled_from(["+", "-", "*"]), sub).map(
        lambda t: Sql(f"({t[0].clink} {t[1]} {t[2].clink})", f"({t[0].duckdb} {t[1]} {t[2].duckdb})"))
    # Division and modulo by zero are NULL in both (DuckDB with error_on_division_by_zero off);
    # both truncate toward zero, so the remainder takes the sign of the dividend.
    divide = st.tuples(sub, sub).map(lambda t: _fmt("({0} / {1})", *t, duckdb="({0} // {1})"))
    modulo = st.tuples(sub, sub).map(lambda t: _fmt("({0} % {1})", *t))
    mod_fn = st.tuples(sub, sub).map(lambda t: _fmt("MOD({0}, {1})", *t, duckdb="({0} % {1})"))
    return st.one_of(
        _int_leaves(),
        arithmetic,
        divide,
        modulo,
        mod_fn,
        sub.map(lambda e: _fmt("(-{0})", e)),
        sub.map(lambda e: _fmt("ABS({0})", e)),
        st.tuples(cond, sub, sub).map(lambda t: _fmt("CASE WHEN {0} THEN {1} ELSE {2} END", *t)),
        st.tuples(cond, sub).map(lambda t: _fmt("CASE WHEN {0} THEN {1} END", *t)),
        st.tuples(sub, sub, sub, sub).map(lambda t: _fmt("CASE {0} WHEN {1} THEN {2} ELSE {3} END", *t)),
        st.tuples(cond, sub, sub).map(lambda t: _fmt("IF({0}, {1}, {2})", *t,
                                                     duckdb="CASE WHEN {0} THEN {1} ELSE {2} END")),
        st.lists(sub, min_size=1, max_size=3).map(
            lambda xs: _fmt("COALESCE(" + ", ".join(f"{{{i}}}" for i in range(len(xs))) + ")", *xs)),
        st.tuples(sub, sub).map(lambda t: _fmt("NULLIF({0}, {1})", *t)),
    )


def arithmetic_exprs(max_leaves: int = 8) -> st.SearchStrategy[Sql]:
    """Integer arithmetic over ``a`` and ``b`` only, with COALESCE and NULLIF: the NULL rules of
    the operators without any conditions in between."""
    # Up to 8 leaves of at most 100: the largest product is 1e16, inside BIGINT; literals alone
    # reach at most 10**8, inside INT (see COLUMN_BOUND).
    return st.recursive(
        _int_leaves(),
        lambda sub: (
            st.tuples(sub, st.sampled_from(["+", "-", "*", "%"]), sub).map(
                lambda t: Sql(f"({t[0].clink} {t[1]} {t[2].clink})", f"({t[0].duckdb} {t[1]} {t[2].duckdb})"))
            | st.tuples(sub, sub).map(lambda t: _fmt("({0} / {1})", *t, duckdb="({0} // {1})"))
            | st.tuples(sub, sub).map(lambda t: _fmt("COALESCE({0}, {1})", *t))
            | st.tuples(sub, sub).map(lambda t: _fmt("NULLIF({0}, {1})", *t))
        ),
        max_leaves=max_leaves,
    )


def bool_exprs(depth: int = MAX_DEPTH) -> st.SearchStrategy[Sql]:
    """Well-typed BOOLEAN expressions: comparisons, three-valued AND/OR/NOT, IS [NOT] NULL / TRUE /
    FALSE, [NOT] BETWEEN and [NOT] IN (with NULL in the list now and then)."""
    if depth == 0:
        return _bool_leaves()
    ints = int_exprs(depth - 1)
    sub = bool_exprs(depth - 1)
    in_items = st.lists(int_literals() | st.just(_same("NULL")) | ints, min_size=1, max_size=4)
    return st.one_of(
        _bool_leaves(),
        st.tuples(ints, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), ints).map(
            lambda t: Sql(f"({t[0].clink} {t[1]} {t[2].clink})", f"({t[0].duckdb} {t[1]} {t[2].duckdb})")),
        st.tuples(sub, st.sampled_from(["AND", "OR"]), sub).map(
            lambda t: Sql(f"({t[0].clink} {t[1]} {t[2].clink})", f"({t[0].duckdb} {t[1]} {t[2].duckdb})")),
        sub.map(lambda e: _fmt("(NOT {0})", e)),
        st.tuples(ints, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(
            lambda t: Sql(f"({t[0].clink} {t[1]})", f"({t[0].duckdb} {t[1]})")),
        st.tuples(sub, st.sampled_from(["IS TRUE", "IS NOT TRUE", "IS FALSE", "IS NOT FALSE"])).map(
            lambda t: Sql(f"({t[0].clink} {t[1]})", f"({t[0].duckdb} {t[1]})")),
        st.tuples(ints, st.sampled_from(["BETWEEN", "NOT BETWEEN"]), ints | st.just(_same("NULL")), ints).map(
            lambda t: Sql(f"({t[0].clink} {t[1]} {t[2].clink} AND {t[3].clink})",
                          f"({t[0].duckdb} {t[1]} {t[2].duckdb} AND {t[3].duckdb})")),
        st.tuples(ints, st.sampled_from(["IN", "NOT IN"]), in_items).map(
            lambda t: Sql(f"({t[0].clink} {t[1]} ({', '.join(i.clink for i in t[2])}))",
                          f"({t[0].duckdb} {t[1]} ({', '.join(i.duckdb for i in t[2])}))")),
        cond_strings(depth - 1),
    )


def cond_strings(depth: int) -> st.SearchStrategy[Sql]:
    """BOOLEAN expressions about strings: LIKE with a constant pattern, comparisons, IN, lengths."""
    strings = string_exprs(min(depth, 1))
    patterns = st.text(alphabet="ab%_ é", max_size=4).map(lambda p: "'" + p + "'")
    return st.one_of(
        st.tuples(strings, st.sampled_from(["LIKE", "NOT LIKE"]), patterns).map(
            lambda t: Sql(f"({t[0].clink} {t[1]} {t[2]})", f"({t[0].duckdb} {t[1]} {t[2]})")),
        st.tuples(strings, st.sampled_from(["=", "<>", "<", ">="]), strings).map(
            lambda t: Sql(f"({t[0].clink} {t[1]} {t[2].clink})", f"({t[0].duckdb} {t[1]} {t[2].duckdb})")),
        st.tuples(strings, st.lists(string_literals(), min_size=1, max_size=3)).map(
            lambda t: Sql(f"({t[0].clink} IN ({', '.join(i.clink for i in t[1])}))",
                          f"({t[0].duckdb} IN ({', '.join(i.duckdb for i in t[1])}))")),
        st.tuples(strings, int_literals()).map(
            lambda t: _fmt("(CHAR_LENGTH({0}) > {1})", *t, duckdb="(length({0}) > {1})")),
        strings.map(lambda e: _fmt("({0} IS NULL)", e)),
    )


def string_exprs(depth: int = 2) -> st.SearchStrategy[Sql]:
    """Well-typed STRING expressions over ``s`` and ``u``."""
    if depth == 0:
        return _string_leaves()
    sub = string_exprs(depth - 1)
    # SUBSTRING positions start at 1: below 1 clink follows the SQL standard and DuckDB does not
    # (a negative start counts from the end there), which the differential suite covers.
    positions = st.integers(1, 4)
    lengths = st.integers(0, 4)
    # SPLIT_INDEX: one-character separators, as DuckDB's string_split splits on the literal text.
    # Its 0-based index becomes DuckDB's 1-based list index; past the end, and on the empty
    # string (which has no pieces in Flink), the result is NULL.
    split = st.tuples(sub, st.sampled_from(["_", " ", "a"]), st.integers(0, 2)).map(
        lambda t: Sql(f"SPLIT_INDEX({t[0].clink}, '{t[1]}', {t[2]})",
                      f"CASE WHEN {t[0].duckdb} <> '' "
                      f"AND len(string_split({t[0].duckdb}, '{t[1]}')) > {t[2]} "
                      f"THEN string_split({t[0].duckdb}, '{t[1]}')[{t[2] + 1}] END"))
    return st.one_of(
        _string_leaves(),
        st.tuples(st.sampled_from(["UPPER", "LOWER", "TRIM"]), sub).map(
            lambda t: Sql(f"{t[0]}({t[1].clink})", f"{t[0]}({t[1].duckdb})")),
        st.tuples(sub, positions).map(lambda t: Sql(f"SUBSTRING({t[0].clink}, {t[1]})",
                                                    f"SUBSTRING({t[0].duckdb}, {t[1]})")),
        st.tuples(sub, positions, lengths).map(lambda t: Sql(f"SUBSTR({t[0].clink}, {t[1]}, {t[2]})",
                                                             f"SUBSTRING({t[0].duckdb}, {t[1]}, {t[2]})")),
        st.tuples(sub, sub).map(lambda t: _fmt("CONCAT({0}, {1})", *t, duckdb="({0} || {1})")),
        st.tuples(sub, sub).map(lambda t: _fmt("({0} || {1})", *t)),
        # The search text is never empty: REPLACE with an empty search leaves the string as it is,
        # which is tested on its own.
        st.tuples(sub, st.sampled_from(["a", "_", " ", "é", "ab"]), st.sampled_from(["", "X", "%%"])).map(
            lambda t: Sql(f"REPLACE({t[0].clink}, '{t[1]}', '{t[2]}')",
                          f"REPLACE({t[0].duckdb}, '{t[1]}', '{t[2]}')")),
        split,
        st.tuples(sub, sub).map(lambda t: _fmt("COALESCE({0}, {1})", *t)),
        st.tuples(sub, sub).map(lambda t: _fmt("NULLIF({0}, {1})", *t)),
        st.tuples(_bool_leaves(), sub, sub).map(
            lambda t: _fmt("IF({0}, {1}, {2})", *t, duckdb="CASE WHEN {0} THEN {1} ELSE {2} END")),
    )
