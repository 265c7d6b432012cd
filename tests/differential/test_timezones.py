"""TIMESTAMP_LTZ and the session time zone (``table.local-time-zone``), as Flink has them.

The examples are those of Flink's "Time Zone" page (docs/dev/table/timezone.md), with their input
rows and printed results; DuckDB, with its own ``TimeZone`` setting, checks wall clocks and
window boundaries in a zone with daylight saving time.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

# tests/shared_duckdb.py: pytest puts tests/ on sys.path, as it holds the root conftest.py.
import shared_duckdb

import clink
from clink.errors import SqlError, UsageError
from clink.runtime.connectors.print import render_text
from clink.runtime.context import RuntimeContext

#: The clock of Flink's example: 2021-04-15 15:18:36.384 UTC.
CLOCK_MS = 1_618_499_916_384


def _zone(zone: str) -> str:
    return f"SET 'table.local-time-zone' = '{zone}';\n"


def _one_row(tmp_path: Path) -> str:
    pq.write_table(pa.table({"x": pa.array([1], pa.int64())}), tmp_path / "one.parquet")
    return (f"CREATE TABLE one (x BIGINT) WITH ('connector' = 'filesystem', "
            f"'path' = '{tmp_path / 'one.parquet'}', 'format' = 'parquet');\n")


def _text(table: pa.Table) -> list[dict[str, str]]:
    """The rows as Flink's SQL client shows them: every value as a string (CAST semantics)."""
    return [{k: str(v) for k, v in row.items()} for row in table.to_pylist()]


# ---------------------------------------------------------------- values and casts


@pytest.mark.parametrize(("zone", "shown"), [("UTC", "1970-01-01 00:00:04.001"),
                                             ("Asia/Shanghai", "1970-01-01 08:00:04.001")])
def test_to_timestamp_ltz_reads_in_the_session_zone(tmp_path: Path, zone: str, shown: str) -> None:
    # Flink: CREATE VIEW T1 AS SELECT TO_TIMESTAMP_LTZ(4001, 3); the same instant in both zones.
    out = clink.sql(_zone(zone) + _one_row(tmp_path) +
                    "SELECT TO_TIMESTAMP_LTZ(4001, 3) AS ltz, CAST(TO_TIMESTAMP_LTZ(4001, 3) AS STRING) AS s "
                    "FROM one;").to_arrow()
    assert out.schema.field("ltz").type == pa.timestamp("ms", tz="UTC")
    row = out.to_pylist()[0]
    assert row["ltz"] == dt.datetime(1970, 1, 1, 0, 0, 4, 1000, tzinfo=dt.UTC)
    assert row["s"] == shown


def test_to_timestamp_ltz_takes_seconds_with_precision_0(tmp_path: Path) -> None:
    out = clink.sql(_one_row(tmp_path) + "SELECT TO_TIMESTAMP_LTZ(1618495260, 0) AS s, "
                    "TO_TIMESTAMP_LTZ(1618495260000, 3) AS ms, TO_TIMESTAMP_LTZ(1618495260000) AS d, "
                    "TO_TIMESTAMP_LTZ(x * 1.5, 0) AS f FROM one;").to_arrow().to_pylist()[0]
    instant = dt.datetime(2021, 4, 15, 14, 1, tzinfo=dt.UTC)
    assert out["s"] == out["ms"] == out["d"] == instant
    assert out["f"] == dt.datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=dt.UTC)


def test_to_timestamp_ltz_refuses_another_precision(tmp_path: Path) -> None:
    with pytest.raises(SqlError, match="must be 0 .* or 3") as info:
        clink.sql(_one_row(tmp_path) + "SELECT TO_TIMESTAMP_LTZ(x, 6) AS t FROM one;")
    assert (info.value.span.line, info.value.span.col) == (2, 28)


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai"])
def test_casts_between_timestamp_and_ltz_use_the_session_zone(tmp_path: Path, zone: str) -> None:
    # Flink's MyView2 and MyView3.
    query = (_zone(zone) + _one_row(tmp_path) +
             "CREATE VIEW MyView2 AS SELECT TO_TIMESTAMP_LTZ(4001, 3) AS ltz, "
             "TIMESTAMP '1970-01-01 00:00:01.001' AS ntz FROM one;\n"
             "SELECT CAST(ltz AS STRING) AS ltz, CAST(CAST(ltz AS TIMESTAMP(3)) AS STRING) AS ltz_ts, "
             "CAST(ntz AS STRING) AS ntz, CAST(CAST(ntz AS TIMESTAMP_LTZ(3)) AS STRING) AS ntz_ltz, "
             "CAST(ntz AS TIMESTAMP_LTZ(3)) AS instant FROM MyView2;")
    out = clink.sql(query).to_arrow()
    local = "08:00:04.001" if zone == "Asia/Shanghai" else "00:00:04.001"
    row = out.to_pylist()[0]
    assert {k: v for k, v in row.items() if k != "instant"} == {
        "ltz": f"1970-01-01 {local}", "ltz_ts": f"1970-01-01 {local}",
        "ntz": "1970-01-01 00:00:01.001", "ntz_ltz": "1970-01-01 00:00:01.001"}
    # TIMESTAMP → TIMESTAMP_LTZ reads the wall clock in the session zone: 8 hours earlier in Shanghai.
    hours = 8 if zone == "Asia/Shanghai" else 0
    assert row["instant"] == dt.datetime(1970, 1, 1, 0, 0, 1, 1000, tzinfo=dt.UTC) - dt.timedelta(hours=hours)


@pytest.mark.in_process("sets the clock")
@pytest.mark.parametrize(("zone", "wall"), [("UTC", "15:18:36"), ("Asia/Shanghai", "23:18:36")])
def test_time_functions_follow_the_session_zone(tmp_path: Path, zone: str, wall: str) -> None:
    # Flink's MyView1 with its clock fixed at 2021-04-15 15:18:36.384 UTC.
    out = clink.sql(_zone(zone) + _one_row(tmp_path) +
                    "SELECT LOCALTIMESTAMP AS lts, CURRENT_DATE AS d, CURRENT_TIME AS t, LOCALTIME AS lt, "
                    "CURRENT_TIMESTAMP AS cts, "
                    "NOW() AS now, CAST(CURRENT_TIMESTAMP AS STRING) AS shown, HOUR(CURRENT_TIMESTAMP) AS h, "
                    "DATE_FORMAT(NOW(), 'yyyy-MM-dd HH:mm:ss') AS f FROM one;",
                    context=RuntimeContext(clock=lambda: CLOCK_MS)).to_arrow()
    types = {f.name: f.type for f in out.schema}
    assert types["lts"] == pa.timestamp("ms") and types["cts"] == types["now"] == pa.timestamp("ms", tz="UTC")
    # LOCALTIME is Flink's TIME(0): the same wall clock in whole seconds.
    assert types["t"] == pa.time32("ms") and types["lt"] == pa.time32("s")
    row = out.to_pylist()[0]
    assert row["cts"] == row["now"] == dt.datetime(2021, 4, 15, 15, 18, 36, 384_000, tzinfo=dt.UTC)
    assert str(row["lts"]) == f"2021-04-15 {wall}.384000"
    assert str(row["d"]) == "2021-04-15" and str(row["t"]) == f"{wall}.384000" and str(row["lt"]) == wall
    assert row["shown"] == f"2021-04-15 {wall}.384"
    assert row["h"] == int(wall[:2])
    assert row["f"] == f"2021-04-15 {wall}"


@pytest.mark.in_process("sets the clock")
def test_current_date_changes_day_with_the_zone(tmp_path: Path) -> None:
    # 2021-04-15 15:18 UTC is already the 16th in Tokyo and still the 15th in Los Angeles.
    days = {}
    for zone in ("Asia/Tokyo", "America/Los_Angeles", "GMT+10:00"):
        out = clink.sql(_zone(zone) + _one_row(tmp_path) + "SELECT CURRENT_DATE AS d FROM one;",
                        context=RuntimeContext(clock=lambda: CLOCK_MS)).to_arrow()
        days[zone] = str(out.to_pylist()[0]["d"])
    assert days == {"Asia/Tokyo": "2021-04-16", "America/Los_Angeles": "2021-04-15", "GMT+10:00": "2021-04-16"}


def test_convert_tz(tmp_path: Path) -> None:
    # Flink's documented examples of CONVERT_TZ.
    out = clink.sql(_one_row(tmp_path) +
                    "SELECT CONVERT_TZ('1970-01-01 00:00:00', 'UTC', 'America/Los_Angeles') AS a, "
                    "CONVERT_TZ('2021-07-01 12:30:15', 'Asia/Shanghai', 'Europe/Berlin') AS b, "
                    "CONVERT_TZ(CAST(NULL AS STRING), 'UTC', 'UTC') AS c FROM one;").to_arrow()
    assert out.to_pylist() == [{"a": "1969-12-31 16:00:00", "b": "2021-07-01 06:30:15", "c": None}]


def test_convert_tz_refuses_an_unknown_zone_at_the_argument(tmp_path: Path) -> None:
    with pytest.raises(SqlError, match="unknown time zone 'Mars/Olympus'") as info:
        clink.sql(_one_row(tmp_path) + "SELECT CONVERT_TZ('1970-01-01 00:00:00', 'UTC', 'Mars/Olympus') AS a "
                  "FROM one;")
    assert (info.value.span.line, info.value.span.col) == (2, 49)


# ---------------------------------------------------------------- the setting


@pytest.mark.parametrize("zone", ["Mars/Olympus", "PST", "+08:00", "asia/shanghai"])
def test_an_unknown_zone_is_refused_at_the_value(tmp_path: Path, zone: str) -> None:
    with pytest.raises(SqlError) as info:
        clink.sql(_one_row(tmp_path) + _zone(zone) + "SELECT x FROM one;")
    err = info.value
    assert f"unknown time zone {zone!r}" in str(err) and "'Asia/Shanghai'" in str(err)
    assert (err.span.line, err.span.col) == (2, 31)


def test_an_unknown_zone_given_at_run_time_is_refused(tmp_path: Path) -> None:
    plan = clink.compile(_one_row(tmp_path) + "SELECT CAST(TO_TIMESTAMP_LTZ(x, 3) AS STRING) AS s FROM one;")
    with pytest.raises(UsageError, match="unknown time zone 'Moon/Base'"):
        plan.run(config={"table.local-time-zone": "Moon/Base"}).to_arrow()
    assert plan.run(config={"table.local-time-zone": "GMT-03:00"}).to_arrow().to_pylist() == [
        {"s": "1969-12-31 21:00:00.001"}]


def test_the_result_table_shows_ltz_in_the_session_zone() -> None:
    # Flink's print sink writes the instant (Instant.toString); its SQL client shows the wall clock.
    values = pa.array([4001, None], pa.timestamp("ms", tz="UTC"))
    assert render_text(values).to_pylist() == ["1970-01-01T00:00:04.001Z", "null"]
    assert render_text(values, "Asia/Shanghai").to_pylist() == ["1970-01-01T08:00:04.001", "null"]


# ---------------------------------------------------------------- windows

#: Flink's MyTable3 rows: item, price, epoch ms (2021-04-15 14:01 .. 14:11 UTC).
ROWS = [("A", 1.1, 1618495260000), ("B", 1.2, 1618495320000), ("A", 1.8, 1618495380000),
        ("B", 2.5, 1618495440000), ("C", 3.8, 1618495500000), ("C", 3.8, 1618495860000)]


def _table3(tmp_path: Path, rows=ROWS) -> str:
    path = tmp_path / "t3.parquet"
    pq.write_table(pa.table({"item": [r[0] for r in rows], "price": [r[1] for r in rows],
                             "ts": pa.array([r[2] for r in rows], pa.int64())}), path, row_group_size=2)
    return ("CREATE TABLE MyTable3 (item STRING, price DOUBLE, ts BIGINT, ts_ltz AS TO_TIMESTAMP_LTZ(ts, 3),\n"
            "  WATERMARK FOR ts_ltz AS ts_ltz - INTERVAL '10' SECOND)\n"
            f"  WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'parquet');\n")


def _flink_table(hour: int) -> list[dict[str, str]]:
    """Flink's printed result of MyView5: the window [hour:00, hour:10) per item; the input's end
    also fires [hour:10, hour:20) for C's last row, which Flink's socket example never closes."""
    day = "2021-04-15"
    first = [{"window_start": f"{day} {hour}:00:00", "window_end": f"{day} {hour}:10:00",
              "window_rowtime": f"{day} {hour}:09:59.999000", "item": item, "max_price": price}
             for item, price in (("A", "1.8"), ("B", "2.5"), ("C", "3.8"))]
    return [*first, {"window_start": f"{day} {hour}:10:00", "window_end": f"{day} {hour}:20:00",
                     "window_rowtime": f"{day} {hour}:19:59.999000", "item": "C", "max_price": "3.8"}]


def _wall(table: pa.Table, zone: str) -> pa.Table:
    """``table`` with its TIMESTAMP_LTZ columns as wall clocks in ``zone`` (what Flink prints)."""
    cols = [pc.local_timestamp(c.cast(pa.timestamp("ms", tz=zone))) if c.type == pa.timestamp("ms", tz="UTC")
            else c for c in table.columns]
    return pa.table(cols, names=table.column_names)


@pytest.mark.parametrize(("zone", "hour"), [("UTC", 14), ("Asia/Shanghai", 22)])
def test_group_window_over_an_ltz_rowtime(tmp_path: Path, zone: str, hour: int) -> None:
    # Flink's MyView5: windows align on the session zone's wall clock.
    query = (_zone(zone) + _table3(tmp_path) +
             "SELECT TUMBLE_START(ts_ltz, INTERVAL '10' MINUTES) AS window_start,\n"
             "  TUMBLE_END(ts_ltz, INTERVAL '10' MINUTES) AS window_end,\n"
             "  TUMBLE_ROWTIME(ts_ltz, INTERVAL '10' MINUTES) AS window_rowtime, item, MAX(price) AS max_price\n"
             "FROM MyTable3 GROUP BY TUMBLE(ts_ltz, INTERVAL '10' MINUTES), item;")
    out = clink.sql(query).to_arrow()
    assert [f.type for f in out.schema][:3] == [pa.timestamp("ms"), pa.timestamp("ms"), pa.timestamp("ms", tz="UTC")]
    rows = sorted(_text(_wall(out, zone)), key=lambda r: (r["window_start"], r["item"]))
    assert rows == _flink_table(hour)


@pytest.mark.parametrize(("zone", "hour"), [("UTC", 14), ("Asia/Shanghai", 22)])
def test_window_tvf_over_an_ltz_rowtime(tmp_path: Path, zone: str, hour: int) -> None:
    # The same with the window table function, whose window_time stays an event-time attribute:
    # an outer window over it aligns the same way.
    query = (_zone(zone) + _table3(tmp_path) +
             "CREATE VIEW w AS SELECT window_start AS ws, window_end AS we, window_time AS window_rowtime, item, "
             "MAX(price) AS max_price FROM TABLE(TUMBLE(TABLE MyTable3, DESCRIPTOR(ts_ltz), INTERVAL '10' MINUTES))\n"
             "GROUP BY window_start, window_end, window_time, item;\n"
             "SELECT ws AS window_start, we AS window_end, window_rowtime, item, max_price FROM w;")
    out = clink.sql(query).to_arrow()
    assert out.schema.field("window_rowtime").type == pa.timestamp("ms", tz="UTC")
    assert sorted(_text(_wall(out, zone)), key=lambda r: (r["window_start"], r["item"])) == _flink_table(hour)
    hourly = clink.sql(query.replace(query[query.index("SELECT ws"):], "SELECT window_start, COUNT(*) AS n FROM TABLE(TUMBLE("
                                     "TABLE w, DESCRIPTOR(window_rowtime), INTERVAL '1' HOUR)) "
                                     "GROUP BY window_start, window_end;")).to_arrow()
    assert _text(hourly) == [{"window_start": f"2021-04-15 {hour}:00:00", "n": "4"}]


def test_window_rows_without_aggregation_carry_local_boundaries(tmp_path: Path) -> None:
    query = (_zone("Asia/Shanghai") + _table3(tmp_path) +
             "SELECT item, window_start, window_end, window_time FROM TABLE(TUMBLE(TABLE MyTable3, "
             "DESCRIPTOR(ts_ltz), INTERVAL '10' MINUTES)) WHERE item = 'A';")
    out = clink.sql(query).to_arrow()
    assert out.schema.field("window_time").type == pa.timestamp("ms", tz="UTC")
    assert out.to_pylist() == [
        {"item": "A", "window_start": dt.datetime(2021, 4, 15, 22, 0), "window_end": dt.datetime(2021, 4, 15, 22, 10),
         "window_time": dt.datetime(2021, 4, 15, 14, 9, 59, 999_000, tzinfo=dt.UTC)}] * 2


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai"])
def test_a_timestamp_rowtime_ignores_the_zone(tmp_path: Path, zone: str) -> None:
    # Flink's MyView4: the same windows in every zone.
    path = tmp_path / "t2.parquet"
    pq.write_table(pa.table({"item": [r[0] for r in ROWS], "price": [r[1] for r in ROWS],
                             "ts": pa.array([r[2] for r in ROWS], pa.int64()).cast(pa.timestamp("ms"))}), path)
    query = (_zone(zone) +
             "CREATE TABLE MyTable2 (item STRING, price DOUBLE, ts TIMESTAMP(3),\n"
             "  WATERMARK FOR ts AS ts - INTERVAL '10' SECOND)\n"
             f"  WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'parquet');\n"
             "SELECT TUMBLE_START(ts, INTERVAL '10' MINUTES) AS window_start,\n"
             "  TUMBLE_END(ts, INTERVAL '10' MINUTES) AS window_end,\n"
             "  TUMBLE_ROWTIME(ts, INTERVAL '10' MINUTES) AS window_rowtime, item, MAX(price) AS max_price\n"
             "FROM MyTable2 GROUP BY TUMBLE(ts, INTERVAL '10' MINUTES), item;")
    out = clink.sql(query).to_arrow()
    assert out.schema.field("window_rowtime").type == pa.timestamp("ms")
    assert sorted(_text(out), key=lambda r: (r["window_start"], r["item"])) == _flink_table(14)


def test_a_day_window_in_shanghai_starts_at_local_midnight(tmp_path: Path) -> None:
    # 2021-04-15 14:01 .. 14:11 UTC is 22:01 .. 22:11 on the 15th in Shanghai; 16:00 UTC starts the 16th.
    late = [("D", 9.0, 1618502400000)]  # 2021-04-15 16:00 UTC = 2021-04-16 00:00 Shanghai
    query = (_zone("Asia/Shanghai") + _table3(tmp_path, ROWS + late) +
             "SELECT window_start, window_end, window_time, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE MyTable3, "
             "DESCRIPTOR(ts_ltz), INTERVAL '1' DAY)) GROUP BY window_start, window_end, window_time;")
    out = sorted(clink.sql(query).to_arrow().to_pylist(), key=lambda r: r["window_start"])
    assert out == [
        {"window_start": dt.datetime(2021, 4, 15), "window_end": dt.datetime(2021, 4, 16),
         "window_time": dt.datetime(2021, 4, 15, 15, 59, 59, 999_000, tzinfo=dt.UTC), "n": 6},
        {"window_start": dt.datetime(2021, 4, 16), "window_end": dt.datetime(2021, 4, 17),
         "window_time": dt.datetime(2021, 4, 16, 15, 59, 59, 999_000, tzinfo=dt.UTC), "n": 1}]


@pytest.mark.parametrize(("zone", "counts"), [("America/Los_Angeles", [3, 1]), ("UTC", [4])])
def test_daylight_saving_time_in_los_angeles(tmp_path: Path, zone: str, counts: list[int]) -> None:
    # Flink's example: clocks in Los Angeles skip 02:00 .. 03:00 on 2021-03-14, so the window
    # [00:00, 04:00) holds 3 hours of data there and 4 in a zone without daylight saving time.
    epochs = [1615708800000, 1615712400000, 1615716000000, 1615719600000]  # 00:00, 01:00, 03:00, 04:00 local
    rows = [("x", 1.0, e) for e in epochs]
    query = (_zone(zone) + _table3(tmp_path, rows) +
             "SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE MyTable3, "
             "DESCRIPTOR(ts_ltz), INTERVAL '4' HOUR)) GROUP BY window_start, window_end;")
    out = sorted(clink.sql(query).to_arrow().to_pylist(), key=lambda r: r["window_start"])
    assert [r["n"] for r in out] == counts
    if zone != "UTC":
        assert [(str(r["window_start"]), str(r["window_end"])) for r in out] == [
            ("2021-03-14 00:00:00", "2021-03-14 04:00:00"), ("2021-03-14 04:00:00", "2021-03-14 08:00:00")]


@pytest.mark.parametrize("kind", ["TUMBLE", "HOP", "CUMULATE", "SESSION"])
def test_windows_across_daylight_saving_changes_match_duckdb(tmp_path: Path, kind: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Random instants around both of 2021's clock changes in Los Angeles, read 16 rows at a time
    so the watermark moves through them: clink's windows over a TIMESTAMP_LTZ match DuckDB's
    GROUP BY over the wall clock in that zone. No row is late, also in the hour that repeats."""
    monkeypatch.setattr("clink.runtime.connectors.filesystem.PARQUET_BATCH_ROWS", 16)
    rng = np.random.default_rng(11)
    spring, autumn = 1615712400000, 1636275600000  # 2021-03-14 09:00 UTC, 2021-11-07 09:00 UTC
    epochs = np.sort(np.concatenate([t + rng.integers(-6 * 3_600_000, 6 * 3_600_000, 400) for t in (spring, autumn)]))
    rows = [("k" if i % 3 else "j", float(i), int(e)) for i, e in enumerate(epochs)]
    window = {"TUMBLE": "INTERVAL '30' MINUTE", "HOP": "INTERVAL '15' MINUTE, INTERVAL '1' HOUR",
              "CUMULATE": "INTERVAL '20' MINUTE, INTERVAL '1' HOUR", "SESSION": "INTERVAL '5' MINUTE"}[kind]
    source = ("TABLE MyTable3 PARTITION BY item" if kind == "SESSION" else "TABLE MyTable3")
    query = (_zone("America/Los_Angeles") + _table3(tmp_path, rows) +
             f"SELECT item, window_start, window_end, COUNT(*) AS n, SUM(price) AS total FROM TABLE({kind}({source}, "
             f"DESCRIPTOR(ts_ltz), {window})) GROUP BY item, window_start, window_end;")
    result = clink.sql(query)
    got = sorted((r["item"], r["window_start"], r["window_end"], r["n"], r["total"])
                 for r in result.to_arrow().to_pylist())
    assert sum(result.metrics.late_records.values()) == 0

    con = shared_duckdb.connect()
    con.execute("SET TimeZone = 'America/Los_Angeles'")
    data = pa.table({"item": [r[0] for r in rows], "price": [r[1] for r in rows],
                     "ts": pa.array([r[2] for r in rows], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))})
    con.register("data", data)
    local = "CAST(ts AS TIMESTAMP)"  # the wall clock in the connection's time zone
    if kind == "SESSION":
        sql = (f"WITH t AS (SELECT item, price, {local} AS lt FROM data), "
               "l AS (SELECT *, lt - LAG(lt) OVER (PARTITION BY item ORDER BY lt) AS d FROM t), "
               "g AS (SELECT *, SUM(CASE WHEN d <= INTERVAL 5 MINUTE THEN 0 ELSE 1 END) "
               "OVER (PARTITION BY item ORDER BY lt) AS s FROM l) "
               "SELECT item, MIN(lt), MAX(lt) + INTERVAL 5 MINUTE, COUNT(*), SUM(price) FROM g GROUP BY item, s")
    else:
        size, slide = {"TUMBLE": (30, 30), "HOP": (60, 15), "CUMULATE": (60, 20)}[kind]
        if kind == "CUMULATE":
            ends = ("SELECT item, price, lt, time_bucket(INTERVAL 60 MINUTE, lt) AS ws, "
                    "time_bucket(INTERVAL 60 MINUTE, lt) + INTERVAL 20 MINUTE * k AS we FROM t, range(1, 4) r(k)")
            windows = f"{ends} WHERE lt < time_bucket(INTERVAL 60 MINUTE, lt) + INTERVAL 20 MINUTE * k"
        else:
            windows = (f"SELECT item, price, lt, time_bucket(INTERVAL {slide} MINUTE, lt) - INTERVAL {slide} MINUTE * k "
                       f"AS ws, time_bucket(INTERVAL {slide} MINUTE, lt) - INTERVAL {slide} MINUTE * k "
                       f"+ INTERVAL {size} MINUTE AS we FROM t, range(0, {size // slide}) r(k)")
        sql = (f"WITH t AS (SELECT item, price, {local} AS lt FROM data), w AS ({windows}) "
               "SELECT item, ws, we, COUNT(*), SUM(price) FROM w GROUP BY item, ws, we")
    want = sorted((i, s, e, n, t) for i, s, e, n, t in con.execute(sql).fetchall())
    assert got == want


def test_a_window_join_over_ltz_windows_keeps_every_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two window aggregations over an LTZ rowtime in Los Angeles, joined on their windows: the
    wall-clock boundaries of both sides meet, and each window's pair comes out once."""
    monkeypatch.setattr("clink.runtime.connectors.filesystem.PARQUET_BATCH_ROWS", 4)
    epochs = [1618495260000 + i * 600_000 for i in range(40)]  # one row every 10 minutes
    rows = [("ab"[i % 2], float(i), e) for i, e in enumerate(epochs)]
    per_window = ("SELECT window_start, window_end, window_time, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE MyTable3, "
                  "DESCRIPTOR(ts_ltz), INTERVAL '1' HOUR)) WHERE item = '{item}' "
                  "GROUP BY window_start, window_end, window_time")
    query = (_zone("America/Los_Angeles") + _table3(tmp_path, rows) +
             f"SELECT a.window_start, a.n AS na, b.n AS nb FROM ({per_window.format(item='a')}) a "
             f"JOIN ({per_window.format(item='b')}) b "
             "ON a.window_start = b.window_start AND a.window_end = b.window_end AND a.window_time = b.window_time;")
    out = sorted(clink.sql(query).to_arrow().to_pylist(), key=lambda r: r["window_start"])
    # 14:01 UTC is 07:01 in Los Angeles: six rows an hour from 07:01, three of each item; four at 13:xx.
    assert [(str(r["window_start"]), r["na"], r["nb"]) for r in out] == [
        *((f"2021-04-15 {h:02d}:00:00", 3, 3) for h in range(7, 13)), ("2021-04-15 13:00:00", 2, 2)]
