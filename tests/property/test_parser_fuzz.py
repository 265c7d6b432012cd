"""The compiler fails only with ``SqlError``, whatever text it is given.

Random text, SQL-ish token soup and mutations of valid pipelines go through ``compile_text``
with the default connectors. Any failure must be a ``SqlError`` (or subclass) whose span lies
inside the text, and rendering it must not raise.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clink.compiler import compile_text
from clink.errors import SqlError, SqlErrors

NAME = "fuzz.sql"

VALID = (
    """CREATE TABLE t (a INT, b STRING, c DOUBLE) WITH ('connector' = 'datagen', 'number-of-rows' = '3');
SELECT a, b FROM t WHERE a > 1;""",
    """CREATE TABLE t (a INT, ts TIMESTAMP(3)) WITH ('connector' = 'datagen', 'number-of-rows' = '3');
CREATE TABLE s (a INT, later TIMESTAMP(3)) WITH ('connector' = 'print');
INSERT INTO s SELECT a + 1, ts + INTERVAL '1' HOUR FROM t WHERE a BETWEEN 1 AND 5;""",
    """CREATE TABLE t (a INT, b STRING) WITH ('connector' = 'datagen');
CREATE VIEW v AS SELECT a, UPPER(b) AS u FROM t WHERE b LIKE 'x%';
SELECT CASE WHEN a IN (1, 2) THEN 'low' ELSE u END AS k FROM v;""",
    """SET 'pipeline.name' = 'p';
CREATE TABLE t (r ROW<x INT, y STRING>, n BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '2');
EXPLAIN SELECT r.x, CAST(n AS STRING), TRY_CAST(r.y AS INT) FROM (SELECT r, n FROM t) AS q;""",
    """CREATE TABLE t (a INT, total AS a * 2) WITH ('connector' = 'datagen', 'number-of-rows' = '1');
CREATE TABLE f (a INT) WITH ('connector' = 'filesystem', 'path' = '/tmp/x.csv', 'format' = 'csv');
INSERT INTO f SELECT COALESCE(a, 0) FROM t WHERE total IS NOT NULL AND NOT a = 3;""",
)

TOKENS = (
    "SELECT", "FROM", "WHERE", "INSERT", "INTO", "CREATE", "TABLE", "VIEW", "AS", "WITH", "SET",
    "EXPLAIN", "CASE", "WHEN", "THEN", "ELSE", "END", "CAST", "TRY_CAST", "INTERVAL", "HOUR", "DAY",
    "AND", "OR", "NOT", "IN", "BETWEEN", "LIKE", "IS", "NULL", "TRUE", "FALSE", "ROW", "INT",
    "STRING", "DOUBLE", "BIGINT", "TIMESTAMP", "DECIMAL", "GROUP", "BY", "ORDER", "OVER", "TABLE",
    "t", "a", "b", "x", "`q`", "UPPER", "ROUND", "COALESCE",
    "(", ")", ",", ";", ".", "*", "+", "-", "/", "%", "=", "<>", "<", ">", "<=", ">=", "||", "[", "]",
    "'", "''", "'x'", "'connector'", "'datagen'", "'print'", "`", "\"", "--", "/*", "*/", "\n", "\t",
    "0", "1", "42", "3.5", "1e3", ".5", "99999999999999999999999",
)


def check(text: str) -> None:
    try:
        compile_text(text, name=NAME)
    except SqlError as error:
        errors = error.errors if isinstance(error, SqlErrors) else [error]
        # Positions count lines as the lexer does: only "\n" ends a line.
        lines = text.split("\n")
        for e in errors:
            span = e.span
            assert span is not None, f"{e!r} has no span"
            assert span.file == NAME
            assert 1 <= span.line <= len(lines), (span, len(lines))
            # A column may point just past the end of its line (the end of the input).
            assert 1 <= span.col <= len(lines[span.line - 1]) + 1, (span, lines[span.line - 1])
        rendered = error.render({NAME: text})
        assert isinstance(rendered, str) and rendered
        str(error)


token_soup = st.lists(st.sampled_from(TOKENS), max_size=25).map(" ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=80))
def test_random_text(text: str) -> None:
    check(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(token_soup)
def test_token_soup(text: str) -> None:
    check(text)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(VALID))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(("delete", "duplicate", "swap", "insert_char", "insert_token",
                                   "delete_token")))
        if not text:
            text = draw(st.sampled_from(TOKENS))
            continue
        i = draw(st.integers(0, len(text) - 1))
        if op == "delete":
            j = draw(st.integers(i, min(len(text), i + 8)))
            text = text[:i] + text[j:]
        elif op == "duplicate":
            j = draw(st.integers(i, min(len(text), i + 8)))
            text = text[:j] + text[i:j] + text[j:]
        elif op == "swap":
            j = draw(st.integers(0, len(text) - 1))
            chars = list(text)
            chars[i], chars[j] = chars[j], chars[i]
            text = "".join(chars)
        elif op == "insert_char":
            text = text[:i] + draw(st.characters(codec="utf-8")) + text[i:]
        elif op == "insert_token":
            text = text[:i] + " " + draw(st.sampled_from(TOKENS)) + " " + text[i:]
        else:
            words = text.split(" ")
            k = draw(st.integers(0, len(words) - 1))
            text = " ".join(words[:k] + words[k + 1:])
    return text


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_valid_sql(text: str) -> None:
    check(text)


def test_valid_pipelines_compile() -> None:
    for text in VALID:
        compile_text(text, name=NAME)


@pytest.mark.parametrize("text", ["SELECT a\fFROM t;", "SELECT a\rFROM t;", "SELECT a\u2028FROM t;"],
                         ids=["form-feed", "lone-cr", "line-separator"])
def test_rendered_line_is_the_line_the_span_counts(text: str) -> None:
    try:
        compile_text(text, name=NAME)
    except SqlError as error:
        rendered = error.render({NAME: text}).split("\n")
        assert error.span.line == 1
        assert rendered[1] == f" 1 | {text}"
    else:
        raise AssertionError("expected an unknown table error")
