"""The rewrite ``end_ranks`` tells a Top-N when its partitions end: over an interval join only
where a partition holds a unique key of one side, with that side's last time, and over windows
at a window's end. ``unique_join_sides`` marks the join sides with one row per key, from the
same unique keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from clink.compiler import compile_text

NEXMARK = (Path(__file__).resolve().parents[2] / "bench" / "nexmark" / "ddl.sql").read_text()


def _tables(key: str = "PRIMARY KEY (id) NOT ENFORCED, ") -> str:
    return ("CREATE TABLE a (id BIGINT, ts TIMESTAMP(3), expires TIMESTAMP(3), x BIGINT, "
            f"{key}WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n"
            "CREATE TABLE b (auction BIGINT, ts TIMESTAMP(3), price BIGINT, "
            "WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n")


def _top(partition: str = "a.id", condition: str = "b.ts BETWEEN a.ts AND a.expires", join: str = "a, b WHERE",
         columns: str = "a.id, b.price") -> str:
    return (f"SELECT * FROM (SELECT {columns}, ROW_NUMBER() OVER (PARTITION BY {partition} "
            f"ORDER BY b.price DESC) AS rn FROM {join} a.id = b.auction AND {condition}) WHERE rn <= 1;")


def _ends(text: str) -> str | None:
    for line in compile_text(text).explain().splitlines():
        if "Rank(" in line:
            return line.split("partition ends=[")[1].split("]")[0] if "partition ends=" in line else None
    raise AssertionError("no Rank in the plan")


def test_nexmark_q9_forgets_each_auction_once_it_has_closed() -> None:
    q9 = (Path(__file__).resolve().parents[2] / "bench" / "nexmark" / "q9.sql").read_text()
    assert _ends(NEXMARK + q9) == "max(expires, dateTime)"


def test_a_primary_key_of_an_append_only_table_is_a_unique_key() -> None:
    # The columns the partition ends by are kept for the Top-N though nothing above reads them.
    assert _ends(_tables() + _top()) == "max(expires, ts)"
    # A wider partition holds the key too; a constant bound shifts the end.
    assert _ends(_tables() + _top(partition="a.id, a.x")) == "max(expires, ts)"
    shifted = "b.ts BETWEEN a.ts + INTERVAL '1' SECOND AND a.expires + INTERVAL '2' SECOND"
    assert _ends(_tables() + _top(condition=shifted)) == "max(expires +2000 ms, ts)"
    # A plain interval: the end is the time column plus the upper bound.
    plain = "b.ts BETWEEN a.ts - INTERVAL '1' SECOND AND a.ts + INTERVAL '5' SECOND"
    assert _ends(_tables() + _top(condition=plain)) == "ts +5000 ms"


def test_the_key_of_the_right_side_ends_by_its_own_columns() -> None:
    tables = ("CREATE TABLE a (id BIGINT, ts TIMESTAMP(3), x BIGINT, WATERMARK FOR ts AS ts) "
              "WITH ('connector' = 'datagen');\n"
              "CREATE TABLE b (auction BIGINT, ts TIMESTAMP(3), until TIMESTAMP(3), price BIGINT, "
              "PRIMARY KEY (auction) NOT ENFORCED, WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen');\n")
    text = tables + _top(partition="b.auction", condition="a.ts BETWEEN b.ts - INTERVAL '3' SECOND AND b.until")
    assert _ends(text) == "max(until, ts)"


@pytest.mark.parametrize("text", [
    # no key declared: another auction of the same id could come
    _tables(key="") + _top(),
    # the partition does not hold the key
    _tables() + _top(partition="a.x"),
    # an outer join pads rows when the auction ends
    _tables() + _top(join="a LEFT JOIN b ON"),
    # no interval: rows never end
    _tables() + _top(condition="b.price > 0"),
], ids=["no key", "not the key", "outer", "no interval"])
def test_no_end_where_a_partition_can_get_rows_later(text: str) -> None:
    assert _ends(text) is None


def test_a_connector_numbering_its_rows_declares_them_unique() -> None:
    # The Nexmark source's auction.id is unique, passed on by the view; the person's id too.
    text = NEXMARK + ("SELECT * FROM (SELECT P.id, A.seller, ROW_NUMBER() OVER (PARTITION BY P.id ORDER BY A.reserve) "
                      "AS rn FROM person P, auction A WHERE P.id = A.seller AND A.dateTime BETWEEN P.dateTime AND "
                      "P.dateTime + INTERVAL '10' SECOND) WHERE rn <= 1;")
    assert _ends(text) == "dateTime +10000 ms"
    # A bid's fields are not unique.
    text = NEXMARK + ("SELECT * FROM (SELECT B.bidder, ROW_NUMBER() OVER (PARTITION BY B.bidder ORDER BY A.reserve) "
                      "AS rn FROM bid B, auction A WHERE B.bidder = A.seller AND A.dateTime BETWEEN B.dateTime AND "
                      "B.dateTime + INTERVAL '10' SECOND) WHERE rn <= 1;")
    assert _ends(text) is None


EVENTS = ("CREATE TABLE ev (k BIGINT, ts TIMESTAMP(3), price BIGINT, WATERMARK FOR ts AS ts) "
          "WITH ('connector' = 'datagen');\n")


def _window_top(source: str, partition: str = "window_start, window_end") -> str:
    return (f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY price DESC) AS rn "
            f"FROM {source}) WHERE rn <= 3;")


TUMBLE = "TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '10' SECOND))"
PER_KEY = f"(SELECT k, window_start, window_end, SUM(price) AS price FROM {TUMBLE} GROUP BY k, window_start, window_end)"


def test_a_window_top_n_ends_with_its_window() -> None:
    assert _ends(EVENTS + _window_top(TUMBLE)) == "window_end"
    assert _ends(EVENTS + _window_top(PER_KEY)) == "window_end"
    assert _ends(EVENTS + _window_top(PER_KEY, "window_end, k")) == "window_end"
    hop = "TABLE(HOP(TABLE ev, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND))"
    assert _ends(EVENTS + _window_top(hop)) == "window_end"


@pytest.mark.parametrize("text", [
    # partitioned by the window's start alone: its end is not in the partition
    EVENTS + _window_top(TUMBLE, "window_start"),
    # sessions merge: a session's end moves as rows come
    EVENTS + _window_top("TABLE(SESSION(TABLE ev PARTITION BY k, DESCRIPTOR(ts), INTERVAL '5' SECOND))"),
    # a window fires again for late rows
    "SET 'table.exec.allowed-lateness' = '1 min';\n" + EVENTS + _window_top(PER_KEY),
    # over a TIMESTAMP_LTZ, window_end is a wall clock of the session time zone
    EVENTS.replace("ts TIMESTAMP(3)", "ts TIMESTAMP_LTZ(3)") + _window_top(TUMBLE),
], ids=["start only", "session", "allowed lateness", "ltz"])
def test_no_end_where_a_window_can_get_rows_after_its_end(text: str) -> None:
    assert _ends(text) is None


def _join_state(text: str) -> str:
    line = next(line for line in compile_text(text).explain().splitlines() if "] Join " in line)
    return line.split("state=[")[1].split("] <-")[0]


def test_a_join_on_a_unique_key_keeps_the_other_side_until_its_row_comes() -> None:
    for q, state in (("q9", "left rows by key, right rows by key until their left row comes"),
                     ("q20", "left rows by key until their right row comes, right rows by key"),
                     ("q3", "left rows by key until their right row comes, right rows by key")):
        text = NEXMARK + (Path(__file__).resolve().parents[2] / "bench" / "nexmark" / f"{q}.sql").read_text()
        assert _join_state(text) == state, q
    assert _join_state(_tables() + "SELECT * FROM a JOIN b ON a.id = b.auction;") == (
        "left rows by key, right rows by key until their left row comes")


@pytest.mark.parametrize("text", [
    _tables(key="") + "SELECT * FROM a JOIN b ON a.id = b.auction;",  # no key
    _tables() + "SELECT * FROM a JOIN b ON a.x = b.auction;",  # joined on another column
    _tables() + "SELECT * FROM a LEFT JOIN b ON a.id = b.auction;",  # padded rows wait for matches
    # an updating side: its key's row may be retracted and come again
    _tables() + "SELECT * FROM (SELECT id, COUNT(*) AS n FROM a GROUP BY id) c JOIN b ON c.id = b.auction;",
], ids=["no key", "other column", "outer", "updating"])
def test_both_sides_kept_by_key_where_a_key_may_come_again(text: str) -> None:
    assert _join_state(text) == "both sides by key"
