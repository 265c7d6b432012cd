"""Flink's page on window table functions (docs/dev/table/sql/queries/window-tvf.md): its Bid
table, its queries (arguments in order and by name, offsets), and the tables it prints."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

import clink
from clink.errors import SqlError
from clink.testing import run_select

_BIDS = [("08:05", "4.00", "C"), ("08:07", "2.00", "A"), ("08:09", "5.00", "D"), ("08:11", "3.00", "B"),
         ("08:13", "1.00", "E"), ("08:17", "6.00", "F")]
WATERMARK = {"Bid": "bidtime AS bidtime - INTERVAL '1' SECOND"}


def _at(hhmm: str) -> dt.datetime:
    return dt.datetime.fromisoformat(f"2020-04-15 {hhmm}")


@pytest.fixture(scope="module")
def bid() -> pa.Table:
    return pa.table({"bidtime": pa.array([_at(t) for t, _, _ in _BIDS], pa.timestamp("ms")),
                     "price": pa.array([decimal.Decimal(p) for _, p, _ in _BIDS], pa.decimal128(10, 2)),
                     "item": [i for _, _, i in _BIDS]})


def _sums(query: str, bid: pa.Table) -> list[tuple[str, str, str]]:
    rows = run_select(query, watermarks=WATERMARK, row_group_size=2, Bid=bid).to_pylist()
    return sorted((r["window_start"].strftime("%H:%M"), r["window_end"].strftime("%H:%M"), str(r["price"]))
                  for r in rows)


@pytest.mark.parametrize(("call", "printed"), [
    ("TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)",
     [("08:00", "08:10", "11.00"), ("08:10", "08:20", "10.00")]),
    ("TUMBLE(DATA => TABLE Bid, TIMECOL => DESCRIPTOR(bidtime), SIZE => INTERVAL '10' MINUTES)",
     [("08:00", "08:10", "11.00"), ("08:10", "08:20", "10.00")]),
    ("HOP(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES)",
     [("08:00", "08:10", "11.00"), ("08:05", "08:15", "15.00"), ("08:10", "08:20", "10.00"),
      ("08:15", "08:25", "6.00")]),
    ("HOP(DATA => TABLE Bid, TIMECOL => DESCRIPTOR(bidtime), SLIDE => INTERVAL '5' MINUTES, "
     "SIZE => INTERVAL '10' MINUTES)",
     [("08:00", "08:10", "11.00"), ("08:05", "08:15", "15.00"), ("08:10", "08:20", "10.00"),
      ("08:15", "08:25", "6.00")]),
    ("CUMULATE(DATA => TABLE Bid, TIMECOL => DESCRIPTOR(bidtime), STEP => INTERVAL '2' MINUTES, "
     "SIZE => INTERVAL '10' MINUTES)",
     [("08:00", "08:06", "4.00"), ("08:00", "08:08", "6.00"), ("08:00", "08:10", "11.00"),
      ("08:10", "08:12", "3.00"), ("08:10", "08:14", "4.00"), ("08:10", "08:16", "4.00"),
      ("08:10", "08:18", "10.00"), ("08:10", "08:20", "10.00")]),
    ("TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES, INTERVAL '1' MINUTES)",
     [("08:01", "08:11", "11.00"), ("08:11", "08:21", "10.00")]),
    ("TUMBLE(DATA => TABLE Bid, TIMECOL => DESCRIPTOR(bidtime), SIZE => INTERVAL '10' MINUTES, "
     "OFFSET => INTERVAL '1' MINUTES)",
     [("08:01", "08:11", "11.00"), ("08:11", "08:21", "10.00")]),
    # Named arguments in any order after DATA, and some in order before the named ones.
    ("TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), OFFSET => INTERVAL '1' MINUTES, SIZE => INTERVAL '10' MINUTES)",
     [("08:01", "08:11", "11.00"), ("08:11", "08:21", "10.00")]),
])
def test_window_sums_are_the_pages_tables(call: str, printed: list, bid: pa.Table) -> None:
    query = f"SELECT window_start, window_end, SUM(price) AS price FROM TABLE({call}) GROUP BY window_start, window_end"
    assert _sums(query, bid) == printed


def test_the_tumble_rows_with_named_arguments_are_the_pages_table(bid: pa.Table) -> None:
    rows = run_select("SELECT * FROM TABLE(TUMBLE(DATA => TABLE Bid, TIMECOL => DESCRIPTOR(bidtime), "
                      "SIZE => INTERVAL '10' MINUTES))", watermarks=WATERMARK, row_group_size=2, Bid=bid).to_pylist()
    got = sorted((r["bidtime"].strftime("%H:%M"), r["item"], r["window_start"].strftime("%H:%M"),
                  r["window_end"].strftime("%H:%M"), r["window_time"].strftime("%H:%M:%S.%f")[:-3]) for r in rows)
    assert got == [("08:05", "C", "08:00", "08:10", "08:09:59.999"), ("08:07", "A", "08:00", "08:10", "08:09:59.999"),
                   ("08:09", "D", "08:00", "08:10", "08:09:59.999"), ("08:11", "B", "08:10", "08:20", "08:19:59.999"),
                   ("08:13", "E", "08:10", "08:20", "08:19:59.999"), ("08:17", "F", "08:10", "08:20", "08:19:59.999")]


@pytest.mark.parametrize(("offset", "start"), [
    ("-16", "2021-06-29 23:54"), ("-6", "2021-06-29 23:54"), ("-4", "2021-06-29 23:56"), ("0", "2021-06-30 00:00"),
    ("4", "2021-06-29 23:54"), ("6", "2021-06-29 23:56"), ("16", "2021-06-29 23:56"),
])
def test_offsets_negative_and_beyond_the_size_assign_the_pages_windows(offset: str, start: str) -> None:
    """The page's list: where a row at 2021-06-30 00:00:04 goes in ten-minute windows."""
    one = pa.table({"bidtime": pa.array([dt.datetime(2021, 6, 30, 0, 0, 4)], pa.timestamp("ms")),
                    "price": pa.array([decimal.Decimal("1.00")], pa.decimal128(10, 2)), "item": ["X"]})
    query = ("SELECT window_start, window_end, SUM(price) AS price FROM TABLE(TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), "
             f"INTERVAL '10' MINUTES, INTERVAL '{offset}' MINUTES)) GROUP BY window_start, window_end")
    rows = run_select(query, watermarks=WATERMARK, Bid=one).to_pylist()
    begin = dt.datetime.fromisoformat(start)
    assert [(r["window_start"], r["window_end"]) for r in rows] == [(begin, begin + dt.timedelta(minutes=10))]


BID_DDL = ("CREATE TABLE Bid (bidtime TIMESTAMP(3), price DECIMAL(10, 2), item STRING, "
           "WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND) WITH ('connector' = 'datagen');\n")


@pytest.mark.parametrize(("call", "message"), [
    ("TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), WIDTH => INTERVAL '1' MINUTE)", "TUMBLE has no parameter WIDTH"),
    ("TUMBLE(DATA => TABLE Bid, TIMECOL => DESCRIPTOR(bidtime), SIZE => INTERVAL '1' MINUTE, "
     "SIZE => INTERVAL '2' MINUTE)", "TUMBLE's SIZE is given twice"),
    ("TUMBLE(DATA => TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE)",
     "an argument in order cannot follow one given by name"),
    ("HOP(DATA => TABLE Bid, TIMECOL => DESCRIPTOR(bidtime), SIZE => INTERVAL '1' MINUTE)", "HOP needs its SLIDE"),
    ("TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '-1' MINUTE)", "a TUMBLE window length must be positive"),
    ("TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '1' MINUTE, 5)", "the offset of TUMBLE is an interval literal"),
])
def test_bad_window_arguments_are_refused_where_they_are(call: str, message: str) -> None:
    with pytest.raises(SqlError, match=message) as info:
        clink.compile(BID_DDL + f"SELECT window_start, COUNT(*) FROM TABLE({call}) GROUP BY window_start, window_end;")
    assert info.value.span is not None


def test_arguments_by_name_are_refused_by_other_functions() -> None:
    with pytest.raises(SqlError, match=r"arguments by name \(S => \.\.\.\) are taken by window table functions only"):
        clink.compile("SELECT UPPER(S => 'a');")


# The SESSION section of the page (Flink 1.19+): its own Bid table, out of time order.
_SESSION_BIDS = [("08:07", "4.00", "A"), ("08:06", "2.00", "A"), ("08:09", "5.00", "B"), ("08:08", "3.00", "A"),
                 ("08:17", "1.00", "B")]


@pytest.fixture(scope="module")
def session_bid() -> pa.Table:
    return pa.table({"bidtime": pa.array([_at(t) for t, _, _ in _SESSION_BIDS], pa.timestamp("ms")),
                     "price": pa.array([decimal.Decimal(p) for _, p, _ in _SESSION_BIDS], pa.decimal128(10, 2)),
                     "item": [i for _, _, i in _SESSION_BIDS]})


def _hm(value: dt.datetime) -> str:
    return value.strftime("%H:%M")


@pytest.mark.parametrize("batch", [1, 2, 5])
@pytest.mark.parametrize(("call", "printed"), [
    ("SESSION(TABLE Bid PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES)",
     [("08:06", "2.00", "A", "08:06", "08:13"), ("08:07", "4.00", "A", "08:06", "08:13"),
      ("08:08", "3.00", "A", "08:06", "08:13"), ("08:09", "5.00", "B", "08:09", "08:14"),
      ("08:17", "1.00", "B", "08:17", "08:22")]),
    ("SESSION(DATA => TABLE Bid PARTITION BY item, TIMECOL => DESCRIPTOR(bidtime), GAP => INTERVAL '5' MINUTES)",
     [("08:06", "2.00", "A", "08:06", "08:13"), ("08:07", "4.00", "A", "08:06", "08:13"),
      ("08:08", "3.00", "A", "08:06", "08:13"), ("08:09", "5.00", "B", "08:09", "08:14"),
      ("08:17", "1.00", "B", "08:17", "08:22")]),
    ("SESSION(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES)",
     [("08:06", "2.00", "A", "08:06", "08:14"), ("08:07", "4.00", "A", "08:06", "08:14"),
      ("08:08", "3.00", "A", "08:06", "08:14"), ("08:09", "5.00", "B", "08:06", "08:14"),
      ("08:17", "1.00", "B", "08:17", "08:22")]),
])
def test_session_rows_are_the_pages_tables(call: str, printed: list, batch: int, session_bid: pa.Table) -> None:
    rows = run_select(f"SELECT * FROM TABLE({call})", watermarks=WATERMARK, row_group_size=batch,
                      Bid=session_bid).to_pylist()
    assert all(r["window_time"] == r["window_end"] - dt.timedelta(milliseconds=1) for r in rows)
    assert sorted((_hm(r["bidtime"]), str(r["price"]), r["item"], _hm(r["window_start"]), _hm(r["window_end"]))
                  for r in rows) == printed


@pytest.mark.parametrize(("query", "printed"), [
    ("SELECT window_start, window_end, item, SUM(price) AS total_price FROM TABLE(SESSION(TABLE Bid PARTITION BY "
     "item, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES)) GROUP BY item, window_start, window_end",
     [("08:06", "08:13", "A", "9.00"), ("08:09", "08:14", "B", "5.00"), ("08:17", "08:22", "B", "1.00")]),
    ("SELECT window_start, window_end, SUM(price) AS total_price FROM TABLE(SESSION(TABLE Bid, DESCRIPTOR(bidtime), "
     "INTERVAL '5' MINUTES)) GROUP BY window_start, window_end",
     [("08:06", "08:14", "14.00"), ("08:17", "08:22", "1.00")]),
])
def test_session_aggregations_are_the_pages_tables(query: str, printed: list, session_bid: pa.Table) -> None:
    rows = run_select(query, watermarks=WATERMARK, row_group_size=1, Bid=session_bid).to_pylist()
    got = sorted(tuple(_hm(v) if isinstance(v, dt.datetime) else str(v) for v in r.values()) for r in rows)
    assert got == printed


def test_window_top_n_and_dedup_over_sessions(session_bid: pa.Table) -> None:
    """Window Top-N (the dearest bid of each item's session) and window deduplication (its first
    bid) over the SESSION table function, as over the other window TVFs."""
    sessions = "TABLE(SESSION(TABLE Bid PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES))"
    top = run_select(f"SELECT item, price, window_start FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, "
                     f"window_end, item ORDER BY price DESC) AS rn FROM {sessions}) WHERE rn <= 1",
                     watermarks=WATERMARK, row_group_size=1, Bid=session_bid).to_pylist()
    assert sorted((r["item"], str(r["price"]), _hm(r["window_start"])) for r in top) == [
        ("A", "4.00", "08:06"), ("B", "1.00", "08:17"), ("B", "5.00", "08:09")]
    first = run_select(f"SELECT item, bidtime FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, "
                       f"window_end, item ORDER BY bidtime) AS rn FROM {sessions}) WHERE rn = 1",
                       watermarks=WATERMARK, row_group_size=1, Bid=session_bid).to_pylist()
    assert sorted((r["item"], _hm(r["bidtime"])) for r in first) == [("A", "08:06"), ("B", "08:09"), ("B", "08:17")]
