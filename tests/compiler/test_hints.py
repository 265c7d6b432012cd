"""Query hints: /*+ UID('name') */ after SELECT names the block's stateful operators; any other
hint, or one elsewhere, is refused at its position (a hint is never accepted and ignored)."""

from __future__ import annotations

import pytest

import clink
from clink.errors import SqlError

DDL = ("CREATE TABLE t (k BIGINT, v BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) "
       "WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n")
WINDOW = "FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) GROUP BY k, window_start, window_end"


def uids(sql: str) -> list[str]:
    plan = clink.compile(DDL + sql).runtime_plan
    return [node.uid for node in plan.nodes if node.uid]


def test_the_uid_hint_names_the_blocks_stateful_operators() -> None:
    assert uids(f"SELECT /*+ UID('totals') */ k, SUM(v) {WINDOW}") == ["window:totals"]
    # A subquery's operators keep their own (derived) names; the outer block's take the hint.
    nested = uids(f"SELECT /*+ UID('outer') */ k, COUNT(*) FROM (SELECT k, SUM(v) AS s {WINDOW}) GROUP BY k")
    assert nested[1] == "group:outer" and nested[0].startswith("window-")


def test_a_plain_comment_is_still_a_comment() -> None:
    assert uids(f"SELECT /* not a hint */ k, SUM(v) {WINDOW}")[0].startswith("window-")


@pytest.mark.parametrize(("sql", "col", "message"), [
    (f"SELECT /*+ OPTIONS('a' = 'b') */ k, SUM(v) {WINDOW}", 8, "unknown query hint /*+ OPTIONS('a' = 'b') */"),
    (f"SELECT /*+ STATE_TTL('t' = '1d') */ k, SUM(v) {WINDOW}", 8, "unknown query hint"),
    ("SELECT k FROM t /*+ OPTIONS('a' = 'b') */", 17, "a query hint is taken only right after SELECT"),
    (f"SELECT /*+ UID(totals) */ k, SUM(v) {WINDOW}", 8, "unknown query hint"),
])
def test_other_hints_are_refused_at_their_position(sql: str, col: int, message: str) -> None:
    with pytest.raises(SqlError) as info:
        clink.compile(DDL + sql)
    assert message in str(info.value)
    assert (info.value.span.line, info.value.span.col) == (2, col)
