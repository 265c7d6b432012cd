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
