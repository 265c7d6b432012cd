"""Flink's page on pattern recognition (docs/dev/table/sql/queries/match_recognize.md): its Ticker
tables, its queries and the tables it prints, read one row, a few rows and all rows at a time."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from clink.errors import ClinkError, PipelineError, SqlError
from clink.testing import run_select

WATERMARK = {"Ticker": "rowtime AS rowtime - INTERVAL '1' SECOND"}


def ticker(prices: list[int], start: str = "2018-09-17 10:00:01", step: dt.timedelta = dt.timedelta(seconds=1),
           price_type: pa.DataType = pa.int64(), symbol: str = "XYZ") -> pa.Table:
    base = dt.datetime.fromisoformat(start)
    return pa.table({"symbol": [symbol] * len(prices),
                     "rowtime": pa.array([base + i * step for i in range(len(prices))], pa.timestamp("ms")),
                     "price": pa.array(prices, price_type), "tax": pa.array([1 + i % 3 for i in range(len(prices))])})


def _rows(query: str, table: pa.Table, batch: int) -> list[dict]:
    return run_select(query, watermarks=WATERMARK, row_group_size=batch, Ticker=table).to_pylist()


def _hms(value: dt.datetime) -> str:
    return value.strftime("%H:%M:%S")


BATCHES = pytest.mark.parametrize("batch", [1, 3, 100])


@BATCHES
def test_periods_of_falling_prices_are_the_pages_table(batch: int) -> None:
    table = ticker([12, 17, 19, 21, 25, 18, 15, 14, 24, 25, 19], start="2011-04-01 10:00:00", symbol="ACME")
    rows = _rows("""SELECT * FROM Ticker MATCH_RECOGNIZE (
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            START_ROW.rowtime AS start_tstamp,
            LAST(PRICE_DOWN.rowtime) AS bottom_tstamp,
            LAST(PRICE_UP.rowtime) AS end_tstamp
        ONE ROW PER MATCH
        AFTER MATCH SKIP TO LAST PRICE_UP
        PATTERN (START_ROW PRICE_DOWN+ PRICE_UP)
        DEFINE
            PRICE_DOWN AS
                (LAST(PRICE_DOWN.price, 1) IS NULL AND PRICE_DOWN.price < START_ROW.price) OR
                    PRICE_DOWN.price < LAST(PRICE_DOWN.price, 1),
            PRICE_UP AS
                PRICE_UP.price > LAST(PRICE_DOWN.price, 1)
    ) MR""", table, batch)
    assert [(r["symbol"], _hms(r["start_tstamp"]), _hms(r["bottom_tstamp"]), _hms(r["end_tstamp"])) for r in rows] \
        == [("ACME", "10:00:04", "10:00:07", "10:00:08")]


AVERAGE = """SELECT * FROM Ticker MATCH_RECOGNIZE (
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            FIRST(A.rowtime) AS start_tstamp,
            LAST(A.rowtime) AS end_tstamp,
            AVG(A.price) AS avgPrice
        ONE ROW PER MATCH
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A+ B)
        DEFINE
            A AS AVG(A.price) < 15
    ) MR"""
AVERAGE_PRICES = [12, 17, 13, 16, 25, 2, 4, 10, 15, 25, 25, 30]


@BATCHES
def test_aggregations_are_the_pages_table(batch: int) -> None:
    # The page prints averages of 14.5 and 13.5: the averages of DOUBLE prices.
    table = ticker(AVERAGE_PRICES, start="2011-04-01 10:00:00", price_type=pa.float64(), symbol="ACME")
    rows = _rows(AVERAGE, table, batch)
    assert [(r["symbol"], _hms(r["start_tstamp"]), _hms(r["end_tstamp"]), r["avgPrice"]) for r in rows] == [
        ("ACME", "10:00:00", "10:00:03", 14.5), ("ACME", "10:00:05", "10:00:10", 13.5)]


def test_the_average_of_bigint_prices_is_a_bigint_as_in_flink() -> None:
    # The page's schema says the prices are Long; AVG of a BIGINT is a BIGINT in Flink (truncated),
    # so the page's 14.5 and 13.5 come out as 14 and 13 for that schema.
    table = ticker(AVERAGE_PRICES, start="2011-04-01 10:00:00", symbol="ACME")
    assert [r["avgPrice"] for r in _rows(AVERAGE, table, 5)] == [14, 13]


GREEDY = """SELECT * FROM Ticker MATCH_RECOGNIZE(
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            C.price AS lastPrice
        ONE ROW PER MATCH
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B{quantifier} C)
        DEFINE
            A AS A.price > 10,
            B AS B.price < 15,
            C AS C.price > 12
    )"""


@BATCHES
@pytest.mark.parametrize(("quantifier", "printed"), [("*", [16]), ("*?", [13, 16])])
def test_greedy_and_reluctant_quantifiers_are_the_pages_tables(quantifier: str, printed: list[int],
                                                                batch: int) -> None:
    table = ticker([10, 11, 12, 13, 14, 16], start="2018-09-17 10:00:02")
    rows = _rows(GREEDY.replace("{quantifier}", quantifier), table, batch)
    assert [(r["symbol"], r["lastPrice"]) for r in rows] == [("XYZ", p) for p in printed]


@BATCHES
def test_a_time_constraint_is_the_pages_table(batch: int) -> None:
    # The page's DEFINE lacks the comma between B's and C's conditions; written here with it.
    table = ticker([20, 17, 18, 11, 14, 9, 15, 14, 24, 1, 19], start="2011-04-01 10:00:00",
                   step=dt.timedelta(minutes=20), symbol="ACME")
    rows = _rows("""SELECT * FROM Ticker MATCH_RECOGNIZE(
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            C.rowtime AS dropTime,
            A.price - C.price AS dropDiff
        ONE ROW PER MATCH
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B* C) WITHIN INTERVAL '1' HOUR
        DEFINE
            B AS B.price > A.price - 10,
            C AS C.price < A.price - 10
    )""", table, batch)
    assert [(r["symbol"], _hms(r["dropTime"]), r["dropDiff"]) for r in rows] == [("ACME", "13:00:00", 14)]


@BATCHES
def test_the_output_mode_example_is_the_pages_table(batch: int) -> None:
    table = ticker([10, 12, 13, 11], start="2018-09-17 10:00:02")
    rows = _rows("""SELECT * FROM Ticker MATCH_RECOGNIZE(
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            FIRST(A.price) AS startPrice,
            LAST(A.price) AS topPrice,
            B.price AS lastPrice
        ONE ROW PER MATCH
        PATTERN (A+ B)
        DEFINE
            A AS LAST(A.price, 1) IS NULL OR A.price > LAST(A.price, 1),
            B AS B.price < LAST(A.price)
    )""", table, batch)
    assert rows == [{"symbol": "XYZ", "startPrice": 10, "topPrice": 13, "lastPrice": 11}]


STRATEGY = """SELECT * FROM Ticker MATCH_RECOGNIZE(
        PARTITION BY symbol
        ORDER BY rowtime
        MEASURES
            SUM(A.price) AS sumPrice,
            FIRST(rowtime) AS startTime,
            LAST(rowtime) AS endTime
        ONE ROW PER MATCH
        {strategy}
        PATTERN (A+ C)
        DEFINE
            A AS SUM(A.price) < 30
    )"""
STRATEGY_PRICES = [7, 9, 10, 5, 10, 7, 14]


@BATCHES
@pytest.mark.parametrize(("strategy", "printed"), [
    ("AFTER MATCH SKIP PAST LAST ROW", [(26, "10:00:01", "10:00:04"), (17, "10:00:05", "10:00:07")]),
    ("AFTER MATCH SKIP TO NEXT ROW", [(26, "10:00:01", "10:00:04"), (24, "10:00:02", "10:00:05"),
                                      (25, "10:00:03", "10:00:06"), (22, "10:00:04", "10:00:07"),
                                      (17, "10:00:05", "10:00:07")]),
    ("AFTER MATCH SKIP TO LAST A", [(26, "10:00:01", "10:00:04"), (25, "10:00:03", "10:00:06"),
                                    (17, "10:00:05", "10:00:07")]),
])
def test_after_match_strategies_are_the_pages_tables(strategy: str, printed: list, batch: int) -> None:
    rows = _rows(STRATEGY.replace("{strategy}", strategy), ticker(STRATEGY_PRICES), batch)
    got = sorted((r["sumPrice"], _hms(r["startTime"]), _hms(r["endTime"])) for r in rows)
    assert got == sorted(printed)


def test_skip_to_first_of_the_first_variable_is_refused_as_the_page_says() -> None:
    with pytest.raises(SqlError, match="would start the next match where this one started") as exc:
        _rows(STRATEGY.replace("{strategy}", "AFTER MATCH SKIP TO FIRST A"), ticker(STRATEGY_PRICES), 3)
    assert exc.value.span is not None and exc.value.span.col == 9  # where AFTER MATCH is written


@BATCHES
def test_pattern_variable_referencing_is_the_pages_table(batch: int) -> None:
    # PATTERN (A B+) as the page writes it ends in a greedy quantifier, which the page itself says
    # is not allowed; C (any row B does not take) ends it here. The page's table: #1 -> A, #2..#4 ->
    # B, #5 not mapped (SUM(price) 111, SUM(B.price) 101).
    rows = _rows("""SELECT * FROM Ticker MATCH_RECOGNIZE(
        PARTITION BY symbol ORDER BY rowtime
        MEASURES A.price AS a, LAST(B.price) AS b, COUNT(B.price) AS bs, SUM(B.price) AS sum_b,
                 SUM(price) AS sum_all, C.price AS c
        PATTERN (A B+ C)
        DEFINE
          A AS A.price >= 10,
          B AS B.price > A.price AND SUM(price) < 100 AND SUM(B.price) < 80
    )""", ticker([10, 15, 20, 31, 35]), batch)
    assert rows == [{"symbol": "XYZ", "a": 10, "b": 31, "bs": 3, "sum_b": 66, "sum_all": 111, "c": 35}]


@BATCHES
def test_logical_offsets_are_the_pages_table(batch: int) -> None:
    rows = _rows("""SELECT * FROM Ticker MATCH_RECOGNIZE(
        PARTITION BY symbol ORDER BY rowtime
        MEASURES LAST(B.price) AS last_b, LAST(B.price, 1) AS b1, LAST(B.price, 2) AS b2,
                 FIRST(B.price) AS first_b, FIRST(B.price, 1) AS second_b, C.price AS c
        PATTERN (A B+ C)
        DEFINE
          A AS A.price >= 10,
          B AS (LAST(B.price, 1) IS NULL OR B.price > LAST(B.price, 1)) AND
               (LAST(B.price, 2) IS NULL OR B.price > 2 * LAST(B.price, 2))
    )""", ticker([10, 15, 20, 31, 35]), batch)
    # 35 is not mapped to B: 35 < 2 * 20.
    assert rows == [{"symbol": "XYZ", "last_b": 31, "b1": 20, "b2": 15, "first_b": 15, "second_b": 20, "c": 35}]


@BATCHES
@pytest.mark.parametrize(("prices", "printed"), [([10, 15, 20], (15, 20)), ([10, 20], (10, 20))])
def test_offsets_over_every_variable_are_the_pages_tables(prices: list[int], printed: tuple, batch: int) -> None:
    rows = _rows("""SELECT * FROM Ticker MATCH_RECOGNIZE(
        PARTITION BY symbol ORDER BY rowtime
        MEASURES C.price AS c
        PATTERN (A B? C)
        DEFINE
          B AS B.price < 20,
          C AS LAST(price, 1) < C.price
    )""".replace("MEASURES C.price AS c", "MEASURES LAST(price, 1) AS before_c, C.price AS c"), ticker(prices), batch)
    assert [(r["before_c"], r["c"]) for r in rows] == [printed]


@pytest.mark.parametrize(("clause", "message"), [
    ("PATTERN (A (B C)+)", "groups in a PATTERN are not supported"),
    ("PATTERN (A B | C)", "alternation"),
    ("PATTERN (PERMUTE (A, B))", "PERMUTE"),
    ("PATTERN (A B*)", "pattern can match no row at its end"),
    ("PATTERN (A B+)", "cannot have a greedy quantifier"),
    ("PATTERN (A B?? C)", "reluctant optional quantifier"),
    ("PATTERN (A A)", "appears twice"),
])
def test_what_flink_does_not_support_is_refused_where_it_is_written(clause: str, message: str) -> None:
    query = f"SELECT * FROM Ticker MATCH_RECOGNIZE (ORDER BY rowtime MEASURES A.price AS p {clause} " \
            "DEFINE A AS price > 1)"
    with pytest.raises(SqlError, match=message) as exc:
        _rows(query, ticker([1, 2]), 1)
    assert exc.value.span is not None


@pytest.mark.parametrize(("text", "message"), [
    ("ORDER BY price MEASURES A.price AS p PATTERN (A) DEFINE A AS price > 1", "event-time column"),
    ("ORDER BY rowtime DESC MEASURES A.price AS p PATTERN (A) DEFINE A AS price > 1", "ascending"),
    ("ORDER BY rowtime MEASURES A.price AS p ALL ROWS PER MATCH PATTERN (A) DEFINE A AS price > 1",
     "ALL ROWS PER MATCH"),
    ("ORDER BY rowtime MEASURES LAST(A.price * B.tax) AS p PATTERN (A B) DEFINE A AS price > 1",
     "reads the rows of 2 variables"),
    ("ORDER BY rowtime MEASURES A.price AS p PATTERN (A) DEFINE X AS price > 1", "not a variable"),
    ("ORDER BY rowtime MEASURES A.price AS p PATTERN (A) DEFINE A AS price", "must be a condition"),
    ("ORDER BY rowtime MEASURES NEXT(A.price) AS p PATTERN (A) DEFINE A AS price > 1", "NEXT"),
    ("ORDER BY rowtime MEASURES PREV(A.price) AS p PATTERN (A) DEFINE A AS price > 1", "DEFINE only"),
    ("ORDER BY rowtime MEASURES A.price AS p AFTER MATCH SKIP TO LAST Z PATTERN (A) DEFINE A AS price > 1",
     "not a pattern variable"),
])
def test_mistakes_are_positioned_errors(text: str, message: str) -> None:
    with pytest.raises(SqlError, match=message) as exc:
        _rows(f"SELECT * FROM Ticker MATCH_RECOGNIZE ({text})", ticker([1, 2]), 1)
    assert exc.value.span is not None


@BATCHES
def test_partitions_match_apart_and_prev_reads_the_row_before(batch: int) -> None:
    # Two symbols interleaved in time: each partition sees only its own rows; PREV is the
    # partition's previous row, matched or not. Two rises then a fall: AAA 6, 7, 1; BBB 10, 11, 4.
    a = ticker([5, 6, 7, 1, 2, 3], symbol="AAA")
    b = ticker([9, 8, 7, 6, 10, 11, 4], symbol="BBB", start="2018-09-17 10:00:01.500")
    table = pa.concat_tables([a, b]).sort_by("rowtime")
    rows = _rows("""SELECT * FROM Ticker MATCH_RECOGNIZE(
        PARTITION BY symbol ORDER BY rowtime
        MEASURES FIRST(UP.price) AS low, LAST(UP.price) AS high, COUNT(*) AS n, FALL.price AS fall
        PATTERN (UP{2} FALL)
        DEFINE UP AS PREV(price) IS NOT NULL AND price > PREV(price),
               FALL AS price < PREV(price, 1)
    )""", table, batch)
    assert sorted((r["symbol"], r["low"], r["high"], r["n"], r["fall"]) for r in rows) == [
        ("AAA", 6, 7, 3, 1), ("BBB", 10, 11, 3, 4)]


def test_a_skip_to_variable_without_rows_stops_the_job_with_a_clear_error() -> None:
    with pytest.raises(ClinkError, match="has no row mapped to B"):
        _rows("""SELECT * FROM Ticker MATCH_RECOGNIZE(
            PARTITION BY symbol ORDER BY rowtime
            MEASURES A.price AS p
            AFTER MATCH SKIP TO LAST B
            PATTERN (A B* C)
            DEFINE A AS price > 0, B AS price > 100, C AS price > 0
        )""", ticker([1, 2, 3]), 1)


def test_an_overflow_in_what_a_pattern_computes_is_a_positioned_error() -> None:
    with pytest.raises(PipelineError) as exc:
        _rows("""SELECT * FROM Ticker MATCH_RECOGNIZE (PARTITION BY symbol ORDER BY rowtime
                 MEASURES SUM(A.price * 4) AS x PATTERN (A B) DEFINE B AS B.price * 2 > A.price)""",
              ticker([2**62, 2**62, 3]), 3)
    assert "overflow" in exc.value.message
    assert exc.value.where is not None and "A.price * 4" in exc.value.where


@BATCHES
def test_match_rowtime_is_an_event_time_for_a_window_after_the_match(batch: int) -> None:
    """As Flink's page says, MATCH_ROWTIME() gives a time attribute subsequent windows can use:
    three rising prices end at :41 of three minutes, one match per one-minute window."""
    table = ticker([1, 2, 3, 1, 2, 3, 1, 2, 3, 9], step=dt.timedelta(seconds=20))
    rows = _rows("""CREATE VIEW ups AS SELECT * FROM Ticker MATCH_RECOGNIZE (PARTITION BY symbol ORDER BY rowtime
        MEASURES MATCH_ROWTIME() AS t, LAST(C.price) AS p
        PATTERN (A B C) DEFINE B AS B.price > A.price, C AS C.price > B.price);
      SELECT window_start, COUNT(*) AS n, SUM(p) AS s FROM TABLE(TUMBLE(TABLE ups, DESCRIPTOR(t), INTERVAL '1' MINUTE))
      GROUP BY window_start, window_end""", table, batch)
    assert sorted((r["window_start"].strftime("%H:%M"), r["n"], r["s"]) for r in rows) == [
        ("10:00", 1, 3), ("10:01", 1, 3), ("10:02", 1, 3)]

