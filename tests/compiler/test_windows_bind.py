"""Binding window table functions and window aggregations: plans and positioned errors."""

from __future__ import annotations

import pytest

from clink.compiler import compile_text
from clink.errors import SqlError

BID = """CREATE TABLE bid (auction BIGINT, price BIGINT, channel STRING, date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE plain (a BIGINT, ts TIMESTAMP(3)) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
"""


def explain(sql: str) -> str:
    return compile_text(BID + sql, name="w.sql").explain()


def error(sql: str) -> SqlError:
    with pytest.raises(SqlError) as info:
        compile_text(BID + sql, name="w.sql")
    return info.value


def test_tumble_aggregation_plan() -> None:
    text = explain("SELECT auction, window_start, COUNT(*) AS n, MAX(price) AS top "
                   "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) "
                   "GROUP BY window_start, window_end, auction")
    assert ("WindowAggregate(window=[TUMBLE(size=10 s)], time=[__time], keys=[auction], "
            "aggs=[COUNT(*), MAX(__arg0)])") in text
    assert "WindowAggregate TUMBLE(size=10 s) state keys=[auction]" in text
    assert "hash(auction)" in text


def test_legacy_group_window_is_the_same_operator() -> None:
    text = explain("SELECT auction, TUMBLE_START(date_time, INTERVAL '10' SECOND) AS ws, COUNT(*) "
                   "FROM bid GROUP BY TUMBLE(date_time, INTERVAL '10' SECOND), auction")
    assert "WindowAggregate(window=[TUMBLE(size=10 s)]" in text


def test_hop_cumulate_and_session_specs() -> None:
    assert "HOP(slide=2 s, size=10 s)" in explain(
        "SELECT window_start, COUNT(*) FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, "
        "INTERVAL '10' SECOND)) GROUP BY window_start, window_end")
    assert "CUMULATE(step=1 min, max_size=1 h)" in explain(
        "SELECT window_start, SUM(price) FROM TABLE(CUMULATE(TABLE bid, DESCRIPTOR(date_time), "
        "INTERVAL '1' MINUTE, INTERVAL '1' HOUR)) GROUP BY window_start, window_end")
    assert "SESSION(gap=5 min)" in explain(
        "SELECT auction, window_start, COUNT(*) FROM TABLE(SESSION(TABLE bid PARTITION BY auction, "
        "DESCRIPTOR(date_time), INTERVAL '5' MINUTE)) GROUP BY window_start, window_end, auction")


def test_a_window_as_a_plain_relation_assigns_windows_in_the_chain() -> None:
    text = explain("SELECT auction, window_start, window_end FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), "
                   "INTERVAL '5' SECOND, INTERVAL '10' SECOND))")
    assert "Windows HOP(slide=5 s, size=10 s)" in text


@pytest.mark.parametrize(("sql", "message", "hint"), [
    ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE plain, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) "
     "GROUP BY window_start, window_end",
     "column 'ts' of 'plain' is not an event-time attribute", "has no event time: declare WATERMARK FOR ts"),
    ("SELECT COUNT(*) FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '3' SECOND, INTERVAL '10' SECOND)) "
     "GROUP BY window_start, window_end",
     "a HOP window's size must be a whole multiple of its slide", None),
    ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' MINUTE)) "
     "GROUP BY window_start",
     "a window aggregation must GROUP BY window_start and window_end", "add window_start, window_end"),
    ("SELECT price, COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' MINUTE)) "
     "GROUP BY window_start, window_end, auction",
     "column 'price' must be in GROUP BY or inside an aggregate function", "MAX(price)"),
    ("SELECT MAX(COUNT(*)) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' MINUTE)) "
     "GROUP BY window_start, window_end",
     "aggregate function COUNT inside another aggregate", None),
    ("SELECT auction FROM bid WHERE COUNT(*) > 1",
     "aggregate function COUNT is not allowed here", "SELECT list or HAVING"),
    ("SELECT auction, FIRST_VALUE(price) FROM bid GROUP BY auction",
     "FIRST_VALUE(...) is not supported in a GROUP BY without a window yet", "supported: COUNT(*)"),
    ("SELECT COUNT(*) FROM TABLE(SESSION(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' MINUTE)) "
     "GROUP BY window_start, window_end, auction",
     "a SESSION window needs PARTITION BY the same columns the query groups by", None),
    ("SELECT SUM(channel) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' MINUTE)) "
     "GROUP BY window_start, window_end",
     "SUM needs a number, got STRING", None),
    ("SELECT * FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time)))",
     "TUMBLE takes 3 or 4 arguments, got 2", "write TUMBLE(TABLE t, DESCRIPTOR(ts)"),
])
def test_window_errors_are_positioned(sql: str, message: str, hint: str | None) -> None:
    exc = error(sql)
    assert message in exc.message
    if hint is not None:
        assert hint in (exc.hint or "")
    assert exc.span is not None and exc.span.file == "w.sql" and exc.span.line == 5
    rendered = exc.render({"w.sql": BID + sql})
    assert rendered.splitlines()[0].startswith("w.sql:5:")


def test_allowed_lateness_setting_is_read() -> None:
    text = explain("SET 'table.exec.allowed-lateness' = '5 s';\n"
                   "SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' MINUTE)) "
                   "GROUP BY window_start, window_end")
    assert "allowed_lateness=[5000 ms]" in text


WINDOW_COUNTS = ("SELECT auction, COUNT(*) AS n, window_start AS ws, window_end AS we FROM TABLE({window}) "
                 "GROUP BY auction, window_start, window_end")
HOP = "HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)"


def test_a_group_by_the_windows_of_a_window_aggregation_is_a_window_aggregation() -> None:
    text = explain(f"SELECT ws, we, MAX(n) FROM ({WINDOW_COUNTS.format(window=HOP)}) GROUP BY ws, we")
    assert ("WindowAggregate(window=[windows of the input: HOP(slide=2 s, size=10 s)], time=[__time], "
            "keys=[ws], aggs=[MAX(__arg0)])") in text
    assert "(window_end - INTERVAL '0.001' SECOND) AS __time" in text
    assert "GroupAggregate" not in text and "produces updates" not in text
    # Rows of a window table function carry their windows too.
    text = explain(f"SELECT window_start, window_end, COUNT(*) FROM (SELECT auction, window_start, window_end "
                   f"FROM TABLE({HOP}) WHERE price > 10) GROUP BY window_start, window_end")
    assert "WindowAggregate(window=[windows of the input: HOP(slide=2 s, size=10 s)]" in text


@pytest.mark.parametrize("query", [
    # Not both of window_start and window_end: every row so far, revised as rows arrive.
    f"SELECT we, MAX(n) FROM ({WINDOW_COUNTS.format(window=HOP)}) GROUP BY we",
    # Session windows merge: a window_end below is not where a window closes.
    "SELECT ws, we, MAX(n) FROM (" + WINDOW_COUNTS.format(
        window="SESSION(TABLE bid PARTITION BY auction, DESCRIPTOR(date_time), INTERVAL '5' SECOND)") +
    ") GROUP BY ws, we",
    # A column computed from window_end is not the window's end.
    f"SELECT ws, e, MAX(n) FROM (SELECT ws, we + INTERVAL '1' SECOND AS e, n FROM "
    f"({WINDOW_COUNTS.format(window=HOP)})) GROUP BY ws, e",
])
def test_other_group_bys_over_window_results_stay_updating(query: str) -> None:
    text = explain(query)
    assert "GroupAggregate(keys=" in text and "windows of the input" not in text
