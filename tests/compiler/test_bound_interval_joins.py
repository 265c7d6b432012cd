"""The rewrite ``bound_interval_joins`` gives a join the event-time bounds its condition puts
between two event-time attributes, and none where a side's column only looks like one."""

from __future__ import annotations

from clink.compiler import compile_text

DDL = ("CREATE TABLE a (k INT, s STRING, ts AS CAST(s AS TIMESTAMP(3)), "
       "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'datagen');\n"
       "CREATE TABLE b (k INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n")
BETWEEN = "x.k = b.k AND b.ts BETWEEN x.ts - INTERVAL '5' SECOND AND x.ts + INTERVAL '10' SECOND"


def test_a_join_between_two_watermark_columns_is_bounded_by_the_rule() -> None:
    # a.ts is a computed column: its event time comes from the table's computed-column projection.
    plan = compile_text(DDL + f"SELECT * FROM (SELECT k, ts FROM a WHERE k > 1) x JOIN b ON {BETWEEN};")
    assert [step.splitlines()[0] for step in plan.rewrite_trace][0] == "-- after bound_interval_joins"
    assert "interval=[right.ts - left.ts BETWEEN -5000 ms AND 10000 ms]" in plan.explain()


def test_a_column_computed_from_a_watermark_column_bounds_nothing() -> None:
    moved = "SELECT k, ts + INTERVAL '1' SECOND AS ts FROM a"
    plan = compile_text(DDL + f"SELECT * FROM ({moved}) x JOIN b ON {BETWEEN};")
    assert "interval=" not in plan.explain()


def test_window_time_of_a_window_table_function_is_an_event_time_attribute() -> None:
    plan = compile_text(DDL + "SELECT * FROM TABLE(TUMBLE(TABLE b, DESCRIPTOR(ts), INTERVAL '10' SECOND)) x "
                              "JOIN a ON x.k = a.k "
                              "AND a.ts BETWEEN x.window_time AND x.window_time + INTERVAL '1' SECOND;")
    assert "interval=[right.ts - left.window_time BETWEEN 0 ms AND 1000 ms]" in plan.explain()


#: The highest k of each 10-second window of b, with its window's end (one row per window).
TOP = ("SELECT MAX(k) AS top, window_end AS we FROM TABLE(TUMBLE(TABLE b, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
       "GROUP BY window_start, window_end")
WITHIN = "ON x.k = t.top AND x.ts BETWEEN t.we - INTERVAL '10' SECOND AND t.we"


def test_a_side_of_one_row_per_window_goes_to_every_subtask_and_the_other_stays() -> None:
    text = compile_text(DDL + f"SELECT x.k, x.ts FROM b x JOIN ({TOP}) t {WITHIN};").explain()
    assert "Exchange broadcast" in text
    assert ("Join INNER (interval) state=[left rows where they were made, every right row in every subtask] "
            "<- [") in text and "forward / broadcast" in text
    assert "Exchange hash(k)" not in text
    # The sides swapped: the left one is broadcast.
    text = compile_text(DDL + f"SELECT x.k FROM ({TOP}) t JOIN b x {WITHIN};").explain()
    assert "broadcast / forward" in text


def test_joins_that_need_both_sides_hashed_keep_them() -> None:
    # An outer join: a padded row of the small side would need to know no subtask matched it.
    outer = compile_text(DDL + f"SELECT x.k FROM b x RIGHT JOIN ({TOP}) t {WITHIN};").explain()
    # A window aggregation with a key besides its window: a row per key and window.
    keyed = TOP.replace("MAX(k) AS top,", "k AS top,").replace("GROUP BY", "GROUP BY k,")
    per_key = compile_text(DDL + f"SELECT x.k FROM b x JOIN ({keyed}) t {WITHIN};").explain()
    # No bound: the small side would grow in every subtask without end.
    unbounded = compile_text(DDL + f"SELECT x.k FROM b x JOIN ({TOP}) t ON x.k = t.top;").explain()
    for text in (outer, per_key, unbounded):
        assert "broadcast" not in text and "state=[both sides by key]" in text
