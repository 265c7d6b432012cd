"""The function catalogue (clink/compiler/catalogue.py) agrees with the binder and with docs/sql.md.

The docs' function reference is generated from the catalogue; after changing it, run
``python -m clink.compiler.catalogue --write docs/sql.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import clink
from clink.compiler import catalogue
from clink.compiler.functions import AGGREGATES, FUNCTIONS
from clink.errors import SqlError

#: Names the grammar reads itself (GROUPING SETS' functions, the SQL/JSON calls and their clauses).
#: Functions the parser writes as other calls or the binder handles itself: OVERLAY(s PLACING ...) is
#: CONCAT of SUBSTRINGs; GROUP_ID() a constant of each grouping set's branch.
GRAMMAR = ("GROUPING", "GROUPING_ID", "GROUP_ID", "JSON_VALUE", "JSON_QUERY", "JSON_EXISTS", "JSON_OBJECT",
           "JSON_ARRAY", "OVERLAY", "CURRENT_WATERMARK")
DOC = Path(__file__).parents[2] / "docs" / "sql.md"


def test_docs_are_generated_from_the_catalogue() -> None:
    text = DOC.read_text()
    assert catalogue.rewrite(text) == text, (
        "docs/sql.md's function reference differs from clink/compiler/catalogue.py: "
        "run `python -m clink.compiler.catalogue --write docs/sql.md`")


def test_every_named_entry_agrees_with_the_binder() -> None:
    # A supported name binds; an unsupported one does not (else the docs would refuse a working call).
    for entry in catalogue.ENTRIES:
        for name in entry.names:
            known = name in FUNCTIONS or name in AGGREGATES or name in GRAMMAR
            assert known == entry.supported, (name, entry.sql)


def test_every_builtin_is_in_the_catalogue() -> None:
    named = {n for e in catalogue.ENTRIES for n in e.names}
    # PROCTIME is Flink's computed-column function, which its function reference leaves out.
    assert set(FUNCTIONS) - named == {"PROCTIME"}


def test_categories_are_flinks() -> None:
    assert {e.category for e in catalogue.ENTRIES} <= set(catalogue.CATEGORIES)


@pytest.mark.parametrize("name", sorted({n for e in catalogue.ENTRIES if not e.supported for n in e.names
                                         if n not in AGGREGATES}))
def test_an_unsupported_function_is_refused_where_it_is_called(name: str) -> None:
    query = f"SELECT\n  {name}(s, i) FROM t"
    with pytest.raises(SqlError) as info:
        clink.compile(_with_table(query))
    error = info.value
    assert f"clink does not support {name}" in error.message
    assert (error.span.line, error.span.col) == (2, 3)
    entry = catalogue.unsupported(name)
    if entry.instead:
        assert error.hint == f"write {entry.instead} instead"


def test_a_refusal_reads_as_a_sentence() -> None:
    with pytest.raises(SqlError) as info:
        clink.compile(_with_table("SELECT UUID() FROM t"))
    assert info.value.message.startswith("clink does not support UUID: a random identifier would differ")
    assert info.value.hint == "write MD5(CAST(key AS STRING)) instead"


def test_a_python_function_may_take_a_name_clink_refuses() -> None:
    # Only Flink's name is refused: a UDF of that name is the user's function.
    def uuid(i: int) -> int:
        return i + 1

    out = clink.sql(_with_table("SELECT UUID(i) AS u FROM t"), functions=[uuid]).to_arrow()
    assert out.column("u").to_pylist() == [2]


def _with_table(query: str) -> str:
    return query.replace("FROM t", "FROM (VALUES ('a', 1)) AS t (s, i)")
