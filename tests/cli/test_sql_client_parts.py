"""The SQL client's parts without a terminal: splitting typed text into statements, and the
table of an updating result kept as its changes arrive."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from clink.display import Changes, Materialized
from clink.runtime.changelog import materialize
from clink.runtime.plan import ChangelogMode
from clink.sqlclient import split_statements

UPDATING = ChangelogMode(frozenset({"+I", "-U", "+U", "-D"}))


def test_semicolons_inside_strings_names_and_comments_do_not_end_a_statement() -> None:
    text = ("SELECT 'a;b' AS `x;y`, \"q;\" -- not; here\n"
            "FROM t /* nor; here */ WHERE s = 'it''s;';\n"
            "  SELECT 2;  -- done\n")
    pieces, rest = split_statements(text)
    assert [p.text for p in pieces] == [
        "SELECT 'a;b' AS `x;y`, \"q;\" -- not; here\nFROM t /* nor; here */ WHERE s = 'it''s;'", "SELECT 2"]
    assert [(p.line, p.col) for p in pieces] == [(1, 1), (3, 3)]
    assert rest == ""  # only a comment follows


def test_an_unfinished_statement_is_the_rest() -> None:
    pieces, rest = split_statements("SELECT 1;\nSELECT 'open;")
    assert [p.text for p in pieces] == ["SELECT 1"]
    assert rest == "\nSELECT 'open;"
    assert split_statements("/* a comment; still open")[1] == "/* a comment; still open"


def test_execute_statement_set_is_one_statement_up_to_its_end() -> None:
    text = "EXECUTE STATEMENT SET BEGIN\nINSERT INTO a SELECT 1;\nINSERT INTO b SELECT 2;\nEND;SELECT 3;"
    pieces, rest = split_statements(text)
    assert [p.text for p in pieces] == [
        "EXECUTE STATEMENT SET BEGIN\nINSERT INTO a SELECT 1;\nINSERT INTO b SELECT 2;\nEND", "SELECT 3"]
    assert split_statements("EXECUTE STATEMENT SET BEGIN INSERT INTO a SELECT 1;")[0] == []


def test_padding_keeps_the_positions_of_the_whole_text() -> None:
    (_, second), _ = split_statements("SELECT 1;\n\n   SELECT x\n FROM t;")
    assert second.padded().split("\n")[2:] == ["   SELECT x", " FROM t"]


def test_a_retraction_removes_the_row_and_an_insert_goes_to_the_end() -> None:
    schema = pa.schema([("name", pa.string()), ("cnt", pa.int64())])
    m = Materialized(schema, UPDATING)
    m.add(pa.record_batch({"name": ["Bob", "Alice", "Greg"], "cnt": [1, 1, 1], "_rowkind": ["+I"] * 3}))
    assert m.table().to_pylist() == [{"name": "Bob", "cnt": 1}, {"name": "Alice", "cnt": 1},
                                     {"name": "Greg", "cnt": 1}]
    m.add(pa.record_batch({"name": ["Bob", "Bob", "Greg"], "cnt": [1, 2, 1], "_rowkind": ["-U", "+U", "-D"]}))
    assert m.table().to_pylist() == [{"name": "Alice", "cnt": 1}, {"name": "Bob", "cnt": 2}]


def test_changes_keeps_the_latest_and_counts_all() -> None:
    c = Changes(pa.schema([("a", pa.int64())]), None, keep=3)
    for start in range(0, 10, 2):
        c.add(pa.record_batch({"a": [start, start + 1]}))
    assert c.changes == 10
    assert c.table().to_pydict() == {"op": ["+I"] * 3, "a": [7, 8, 9]}


@st.composite
def changelogs(draw):
    """A valid changelog (nothing retracted that is not there) over (k, v) rows with NULLs,
    cut into batches at random points."""
    live: list[tuple] = []
    kinds, rows = [], []
    for _ in range(draw(st.integers(0, 40))):
        if live and draw(st.booleans()):
            row = live.pop(draw(st.integers(0, len(live) - 1)))
            if draw(st.booleans()):
                new = (row[0], draw(st.none() | st.integers(0, 3)))
                kinds += ["-U", "+U"]
                rows += [row, new]
                live.append(new)
            else:
                kinds.append("-D")
                rows.append(row)
        else:
            row = (draw(st.none() | st.sampled_from("abc")), draw(st.none() | st.integers(0, 3)))
            kinds.append("+I")
            rows.append(row)
            live.append(row)
    cuts = sorted(draw(st.lists(st.integers(0, len(rows)), max_size=5)))
    return kinds, rows, cuts


@settings(max_examples=200, deadline=None)
@given(changelogs())
def test_the_kept_table_is_what_the_changes_add_up_to(log) -> None:
    kinds, rows, cuts = log
    table = pa.table({"k": pa.array([r[0] for r in rows], pa.string()), "v": pa.array([r[1] for r in rows], pa.int64()),
                      "_rowkind": pa.array(kinds, pa.string())})
    m = Materialized(table.schema, UPDATING)
    for start, end in zip([0, *cuts], [*cuts, len(rows)], strict=True):
        for batch in table.slice(start, end - start).to_batches():
            m.add(batch)
        m.table()  # applied batch by batch, as the live view does
    expected = materialize(table, UPDATING)
    assert Counter(tuple(r.values()) for r in m.table().to_pylist()) == \
        Counter(tuple(r.values()) for r in expected.to_pylist())
