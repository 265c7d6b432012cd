"""The parser loaded from the cached tables is the parser ``lark.Lark`` builds from the grammar:
the same trees, token types and positions on every SQL file the project holds, and the same
errors on bad input (what clink's syntax errors are made from)."""

from __future__ import annotations

from pathlib import Path

import lark
import pytest
from lark import Token, Tree

from clink.grammar import _OPTIONS, GRAMMAR_PATH, parser

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*ROOT.glob("tests/golden/*/input.sql"), *ROOT.glob("bench/nexmark/*.sql"),
                *ROOT.glob("examples/**/*.sql")])

BAD = [
    "SELECT FROM t;",
    "SELECT a, FROM t;",
    "SELECT a FROM t WHERE",
    "SELECT 'abc FROM t;",
    "SELECT `abc FROM t;",
    'SELECT "a" FROM t;',
    "SELECT a FROM t;;",
    "SELECT ą FROM t;",
    "SELECT a FROM t WHERE b = = 1;",
    "CREATE TABLE t (a BIGINT WITH ('connector' = 'datagen');",
    "SELECT /*+ UID('x') */ a FROM t /*+ OPTIONS('a'='b') */;",
    "INSERT INTO SELECT 1;",
]

# Keywords in odd cases, names that start or end like keywords, and a keyword written as a
# name with a non-ASCII letter (which the name terminal does not take).
CASES = [
    "sElEcT a AS selected, b AS \"from\" FrOm t WHERE c <> 1;",
    "SELECT selectx, xselect, _from, from_ FROM t;",
    "select current_timestamp, CURRENT_DATE, localtimestamp, Timestamp_Ltz(1) FROM t;",
    "SELECT interval_ FROM t GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE);",
]


@pytest.fixture(scope="module")
def reference() -> lark.Lark:
    """The parser built by Lark from the grammar, with no cache (takes seconds)."""
    return lark.Lark(GRAMMAR_PATH.read_text(encoding="utf-8"), **_OPTIONS)


def _shape(node: object) -> object:
    """A tree as nested tuples: rule names, positions, and every token's type, text and place."""
    if isinstance(node, Tree):
        meta = node.meta
        where = (meta.line, meta.column, meta.end_line, meta.end_column) if not meta.empty else None
        return (node.data, where, tuple(_shape(c) for c in node.children))
    if isinstance(node, Token):
        return (node.type, str(node), node.start_pos, node.line, node.column, node.end_line, node.end_column)
    return node


def _outcome(p: lark.Lark, text: str) -> object:
    try:
        return ("tree", _shape(p.parse(text)))
    except lark.exceptions.UnexpectedInput as exc:
        token = getattr(exc, "token", None)
        return ("error", type(exc).__name__, getattr(exc, "line", None), getattr(exc, "column", None),
                sorted(getattr(exc, "expected", None) or ()), sorted(getattr(exc, "allowed", None) or ()),
                None if token is None else (token.type, str(token), token.start_pos))


def test_the_corpus_is_not_empty() -> None:
    assert len(FILES) >= 30


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_sql_file_parses_the_same(reference: lark.Lark, path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    ours = _outcome(parser(), text)
    assert ours[0] == "tree"
    assert ours == _outcome(reference, text)


@pytest.mark.parametrize("text", CASES + BAD)
def test_keywords_names_and_errors_come_out_the_same(reference: lark.Lark, text: str) -> None:
    assert _outcome(parser(), text) == _outcome(reference, text)


def test_errors_after_many_states_were_reached_are_still_the_same(reference: lark.Lark) -> None:
    """The action rows are unpacked as states are reached; an error's expected terminals come from
    the row of the state it stopped in, whether or not that row was unpacked before."""
    for path in FILES:
        parser().parse(path.read_text(encoding="utf-8"))
    for text in BAD:
        assert _outcome(parser(), text) == _outcome(reference, text)
