"""Flink's page on window joins (docs/dev/table/sql/queries/window-join.md): its LeftTable and
RightTable, its queries (the FULL JOIN, semi joins by IN and EXISTS, anti joins by NOT IN and NOT
EXISTS, each correlated by the window's bounds) and the tables it prints."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from clink.testing import run_select


def _at(hhmm: str) -> dt.datetime:
    return dt.datetime.fromisoformat(f"2020-04-15 {hhmm}")


def _table(rows: list[tuple[str, int, str]]) -> pa.Table:
    return pa.table({"row_time": pa.array([_at(t) for t, _, _ in rows], pa.timestamp("ms")),
                     "num": pa.array([n for _, n, _ in rows], pa.int32()), "id": [i for _, _, i in rows]})


LEFT = _table([("12:02", 1, "L1"), ("12:06", 2, "L2"), ("12:03", 3, "L3")])
RIGHT = _table([("12:01", 2, "R2"), ("12:04", 3, "R3"), ("12:05", 4, "R4")])
WATERMARKS = {"LeftTable": "row_time AS row_time - INTERVAL '1' SECOND",
              "RightTable": "row_time AS row_time - INTERVAL '1' SECOND"}
L = "SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))"
R = "SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))"
SAME_WINDOW = "L.window_start = R.window_start AND L.window_end = R.window_end"


def _rows(query: str, batch: int) -> list[dict]:
    return run_select(query, watermarks=WATERMARKS, row_group_size=batch, LeftTable=LEFT, RightTable=RIGHT).to_pylist()


@pytest.mark.parametrize("batch", [1, 3])
def test_the_full_window_join_is_the_pages_table(batch: int) -> None:
    rows = _rows(f"SELECT L.num as L_Num, L.id as L_Id, R.num as R_Num, R.id as R_Id, L.window_start, L.window_end "
                 f"FROM ({L}) L FULL JOIN ({R}) R ON L.num = R.num AND {SAME_WINDOW}", batch)
    # The page prints L.window_start for every row, which is NULL where L has none: the rows
    # for R2 and R4 carry no window here (the page shows R's window for them).
    got = sorted(((r["L_Num"], r["L_Id"], r["R_Num"], r["R_Id"]) for r in rows), key=repr)
    assert got == sorted([(1, "L1", None, None), (None, None, 2, "R2"), (3, "L3", 3, "R3"), (2, "L2", None, None),
                          (None, None, 4, "R4")], key=repr)


SEMI = [(3, "L3", "12:00", "12:05", "12:04:59.999")]
ANTI = [(1, "L1", "12:00", "12:05", "12:04:59.999"), (2, "L2", "12:05", "12:10", "12:09:59.999")]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(("where", "printed"), [
    (f"L.num IN (SELECT num FROM ({R}) R WHERE {SAME_WINDOW})", SEMI),
    (f"EXISTS (SELECT * FROM ({R}) R WHERE L.num = R.num AND {SAME_WINDOW})", SEMI),
    (f"L.num NOT IN (SELECT num FROM ({R}) R WHERE {SAME_WINDOW})", ANTI),
    (f"NOT EXISTS (SELECT * FROM ({R}) R WHERE L.num = R.num AND {SAME_WINDOW})", ANTI),
])
def test_semi_and_anti_window_joins_are_the_pages_tables(where: str, printed: list, batch: int) -> None:
    rows = _rows(f"SELECT * FROM ({L}) L WHERE {where}", batch)
    assert list(rows[0]) == ["row_time", "num", "id", "window_start", "window_end", "window_time"] if rows else True
    got = sorted((r["num"], r["id"], r["window_start"].strftime("%H:%M"), r["window_end"].strftime("%H:%M"),
                  r["window_time"].strftime("%H:%M:%S.%f")[:-3]) for r in rows)
    assert got == printed
