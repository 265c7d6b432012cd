"""The sqlite sink: the type mapping, upserts and deletes by primary key, appends without one,
exactly-once through the two-phase commit, and end to end from SQL.

Every test reads the SQLite table back with ``sqlite3``, the way a user would."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
import sqlite3
import tempfile
from collections import Counter
from decimal import Decimal
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clink
from clink.errors import ConnectorError, SqlError
from clink.runtime.connectors import sqlite as sqlite_sink
from clink.runtime.connectors.base import TableSpec
from clink.runtime.connectors.sqlite import META_TABLE, PENDING_TABLE, SQLITE, SqliteSinkWriter
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from clink.runtime.plan import APPEND_ONLY, ROWKIND_COLUMN, UPDATING

KV = pa.schema([("k", pa.int64()), ("v", pa.string())])
# A changelog with a two-column key, so deletes match on both.
CHANGES = pa.schema([("k", pa.int64()), ("tag", pa.string()), ("v", pa.int64()), (ROWKIND_COLUMN, pa.string())])
KEY = ("k", "tag")


def ctx() -> RuntimeContext:
    return RuntimeContext(config={}, stdout=io.StringIO())


def writer(path: Path, schema: pa.Schema, *, key: tuple[str, ...] = (), name: str = "t",
           **options: str) -> SqliteSinkWriter:
    opts = {"path": str(path), **options}
    mode = UPDATING if schema.names[-1] == ROWKIND_COLUMN else APPEND_ONLY
    spec = TableSpec(name=name, schema=schema, table_schema=schema, options=opts, changelog=mode,
                     primary_key=key)
    return SQLITE.create_sink(spec, ctx())


def batch(schema: pa.Schema, rows: list[tuple]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


def select(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def tables(path: Path) -> set[str]:
    return {name for (name,) in select(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def pending(path: Path) -> list[tuple]:
    if PENDING_TABLE not in tables(path):
        return []
    return select(path, f"SELECT tbl, checkpoint FROM {PENDING_TABLE} ORDER BY checkpoint, seq")


# ---------------------------------------------------------------- types


EVERY_TYPE = pa.schema([
    ("b", pa.bool_()), ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
    ("f32", pa.float32()), ("f64", pa.float64()), ("dec", pa.decimal128(20, 3)), ("s", pa.string()),
    ("bin", pa.binary()), ("d", pa.date32()), ("t32", pa.time32("ms")), ("t64", pa.time64("us")),
    ("ts_s", pa.timestamp("s")), ("ts_ms", pa.timestamp("ms")), ("ts_us", pa.timestamp("us")),
    ("ts_ns", pa.timestamp("ns")), ("ts_ltz", pa.timestamp("ms", tz="UTC")),
])
INSTANT = dt.datetime(2026, 1, 1, 0, 0, 1, 500_000)


def test_every_type_round_trips_as_documented(tmp_path: Path) -> None:
    values = (True, -8, -16, -32, -(2**62), 1.5, 2.25, Decimal("-12345678901234567.125"), "héllo 'x'",
              b"\x00\xff", dt.date(2026, 1, 31), dt.time(12, 0, 0, 500_000), dt.time(12, 0, 0, 250),
              INSTANT.replace(microsecond=0), INSTANT, INSTANT, INSTANT,
              INSTANT.replace(tzinfo=dt.UTC))
    w = writer(tmp_path / "db" / "types.db", EVERY_TYPE)  # the directory is created
    w.write(batch(EVERY_TYPE, [values, (None,) * len(EVERY_TYPE), (False, 0, 0, 0, 2**63 - 1, -0.0,
                                                                    float("inf"), Decimal("0.000"), "", b"",
                                                                    dt.date(1969, 12, 31), dt.time(0), dt.time(0),
                                                                    dt.datetime(1969, 12, 31, 23, 59, 59),
                                                                    dt.datetime(1969, 12, 31, 23, 59, 59, 999_000),
                                                                    INSTANT, INSTANT, INSTANT)]))
    w.close()
    path = tmp_path / "db" / "types.db"
    declared = [(name, kind) for _, name, kind, *_ in select(path, "PRAGMA table_info(t)")]
    assert declared == [
        ("b", "INTEGER"), ("i8", "INTEGER"), ("i16", "INTEGER"), ("i32", "INTEGER"), ("i64", "INTEGER"),
        ("f32", "REAL"), ("f64", "REAL"), ("dec", "TEXT"), ("s", "TEXT"), ("bin", "BLOB"), ("d", "TEXT"),
        ("t32", "TEXT"), ("t64", "TEXT"), ("ts_s", "TEXT"), ("ts_ms", "TEXT"), ("ts_us", "TEXT"),
        ("ts_ns", "TEXT"), ("ts_ltz", "TEXT")]
    rows = select(path, "SELECT * FROM t ORDER BY rowid")
    assert rows[0] == (1, -8, -16, -32, -(2**62), 1.5, 2.25, "-12345678901234567.125", "héllo 'x'", b"\x00\xff",
                       "2026-01-31", "12:00:00.500", "12:00:00.000250", "2026-01-01 00:00:01",
                       "2026-01-01 00:00:01.500", "2026-01-01 00:00:01.500000", "2026-01-01 00:00:01.500000000",
                       "2026-01-01 00:00:01.500Z")
    assert rows[1] == (None,) * len(EVERY_TYPE)
    assert rows[2] == (0, 0, 0, 0, 2**63 - 1, -0.0, float("inf"), "0.000", "", b"", "1969-12-31", "00:00:00.000",
                       "00:00:00.000000", "1969-12-31 23:59:59", "1969-12-31 23:59:59.999",
                       "2026-01-01 00:00:01.500000", "2026-01-01 00:00:01.500000000", "2026-01-01 00:00:01.500Z")
    # SQLite's own functions read the dates and timestamps (a NULL would mean they could not).
    assert select(path, "SELECT date(d), datetime(ts_ms), julianday(ts_ltz) IS NOT NULL FROM t WHERE rowid = 1") == [
        ("2026-01-31", "2026-01-01 00:00:01", 1)]
    # And the stored kinds are the declared ones: no number kept as text, no text as a number.
    assert select(path, "SELECT typeof(b), typeof(f32), typeof(dec), typeof(bin), typeof(ts_ns) FROM t "
                        "WHERE rowid = 1") == [("integer", "real", "text", "blob", "text")]
    assert w.metrics["rows_out"] == 3


def test_a_timestamp_ltz_in_another_zone_is_written_in_utc(tmp_path: Path) -> None:
    schema = pa.schema([("ts", pa.timestamp("ms", tz="Europe/Paris"))])
    w = writer(tmp_path / "z.db", schema)
    w.write(batch(schema, [(INSTANT.replace(tzinfo=dt.UTC),)]))
    w.close()
    assert select(tmp_path / "z.db", "SELECT ts FROM t") == [("2026-01-01 00:00:01.500Z",)]


# ---------------------------------------------------------------- upserts


def kinds_and_values(draw: st.DrawFn) -> list[tuple]:
    return draw(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b"]),
                                   st.none() | st.integers(-5, 5), st.sampled_from(["+I", "-U", "+U", "-D"])),
                         max_size=60))


changelogs = st.composite(kinds_and_values)()


def upsert_model(changes: list[tuple]) -> dict[tuple, int | None]:
    """What an upsert sink holds after ``changes``, applied one at a time (a ``-U`` removes its key,
    as in Flink's upsert sinks: its ``+U`` puts the key back, unless a filter kept it away)."""
    table: dict[tuple, int | None] = {}
    for k, tag, v, kind in changes:
        if kind in ("+I", "+U"):
            table[(k, tag)] = v
        elif kind in ("-D", "-U"):
            table.pop((k, tag), None)
    return table


def held(path: Path, name: str = "t") -> dict[tuple, int | None]:
    if name not in tables(path):
        return {}
    rows = select(path, f'SELECT k, tag, v FROM "{name}"')
    assert len(rows) == len({(k, tag) for k, tag, _ in rows})  # the key is unique
    return {(k, tag): v for k, tag, v in rows}


@settings(max_examples=100, deadline=None)
@given(changes=changelogs, cuts=st.lists(st.integers(0, 60), max_size=8),
       checkpoints=st.lists(st.booleans(), max_size=9), compact_at=st.sampled_from([3, 1 << 16]))
def test_upserts_end_as_applying_each_change_in_turn(changes: list[tuple], cuts: list[int],
                                                     checkpoints: list[bool], compact_at: int) -> None:
    """Random +I/-U/+U/-D changes per key in random batches, with a checkpoint after some batches
    and the buffer compacted early or never: the table equals the dict model."""
    bounds = sorted({0, len(changes), *(c for c in cuts if c < len(changes))})
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(sqlite_sink, "COMPACT_ROWS", compact_at):
        path = Path(tmp) / "u.db"
        w = writer(path, CHANGES, key=KEY)
        checkpoint = 0
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            w.write(batch(CHANGES, changes[lo:hi]))
            if i < len(checkpoints) and checkpoints[i]:
                checkpoint += 1
                handle = w.pre_commit(checkpoint)
                json.dumps(handle)  # the handle goes into job.json
                w.commit(checkpoint, handle)
                assert held(path) == upsert_model(changes[:hi])
        w.close()
        assert held(path) == upsert_model(changes)
        assert pending(path) == []


def test_upsert_changes_by_kind(tmp_path: Path) -> None:
    path = tmp_path / "u.db"
    w = writer(path, CHANGES, key=KEY)
    w.write(batch(CHANGES, [(1, "a", 10, "+I"), (2, "a", 20, "+I"), (1, "b", 30, "+I")]))
    w.write(batch(CHANGES, [(1, "a", 10, "-U"), (1, "a", 11, "+U"), (2, "a", 20, "-D"), (3, "a", 5, "-U")]))
    w.close()
    assert held(path) == {(1, "a"): 11, (1, "b"): 30}
    assert select(path, "SELECT sql FROM sqlite_master WHERE name = 't'") == [
        ('CREATE TABLE "t" ("k" INTEGER, "tag" TEXT, "v" INTEGER, PRIMARY KEY ("k", "tag"))',)]
    # A -U whose +U has not come by a commit removes the old row, as Flink's upsert sinks do: a
    # filter may have kept the +U away for good. The +U puts the key back.
    w = writer(path, CHANGES, key=KEY)
    w.write(batch(CHANGES, [(1, "b", 30, "-U")]))
    w.pre_commit(1)
    w.commit(1, None)
    assert (1, "b") not in held(path)
    w.write(batch(CHANGES, [(1, "b", 31, "+U")]))
    w.close()
    assert held(path) == {(1, "a"): 11, (1, "b"): 31}


def test_an_existing_table_keyed_by_a_unique_index_takes_upserts(tmp_path: Path) -> None:
    path = tmp_path / "u.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (K INTEGER, TAG TEXT, V INTEGER, note TEXT DEFAULT 'x')")
    con.execute("ALTER TABLE t DROP COLUMN note")
    con.execute("CREATE UNIQUE INDEX t_key ON t (k, tag)")
    con.execute("INSERT INTO t VALUES (1, 'a', 0), (9, 'z', 9)")
    con.commit()
    con.close()
    w = writer(path, CHANGES, key=KEY)
    w.write(batch(CHANGES, [(1, "a", 1, "+U"), (9, "z", 9, "-D")]))
    w.close()
    assert held(path) == {(1, "a"): 1}


# ---------------------------------------------------------------- appends


def test_without_a_key_every_row_is_appended(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    for rows in ([(1, "x"), (1, "x")], [(2, None)]):
        w = writer(path, KV)
        w.write(batch(KV, rows))
        w.write(batch(KV, []))
        w.close()
    assert select(path, "SELECT k, v FROM t ORDER BY rowid") == [(1, "x"), (1, "x"), (2, None)]
    assert select(path, "SELECT sql FROM sqlite_master WHERE name = 't'") == [
        ('CREATE TABLE "t" ("k" INTEGER, "v" TEXT)',)]
    assert tables(path) == {"t"}  # no staging tables without checkpoints


def test_a_keyed_table_takes_an_insert_only_stream_as_upserts(tmp_path: Path) -> None:
    """A window aggregate (insert-only) into a table with PRIMARY KEY ... NOT ENFORCED, as Flink
    accepts: each row upserts by the key (it used to end in a KeyError on the row kind)."""
    w = writer(tmp_path / "k.db", KV, key=("k",))
    w.write(batch(KV, [(1, "a"), (2, "b")]))
    w.write(batch(KV, [(1, "c")]))
    w.close()
    assert select(tmp_path / "k.db", "SELECT k, v FROM t ORDER BY k") == [(1, "c"), (2, "b")]
    out = tmp_path / "w.db"
    clink.sql(
        "CREATE TABLE bid (auction BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ("
        "'connector' = 'datagen', 'number-of-rows' = '2000', 'seed' = '3', 'fields.auction.min' = '1', "
        "'fields.auction.max' = '5');\n"
        "CREATE TABLE totals (auction BIGINT, window_start TIMESTAMP(3), n BIGINT, "
        f"PRIMARY KEY (auction, window_start) NOT ENFORCED) WITH ('connector' = 'sqlite', 'path' = '{out}');\n"
        "INSERT INTO totals SELECT auction, window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), "
        "INTERVAL '1' HOUR)) GROUP BY window_start, window_end, auction;").run()
    ((groups, total),) = select(out, "SELECT COUNT(*), SUM(n) FROM totals")
    assert total == 2000 and groups == len(select(out, "SELECT DISTINCT auction, window_start FROM totals"))


def test_without_a_key_inserts_in_a_changelog_are_appended_and_deletes_refused(tmp_path: Path) -> None:
    schema = KV.append(pa.field(ROWKIND_COLUMN, pa.string()))
    w = writer(tmp_path / "a.db", schema, name="out")
    w.write(batch(schema, [(1, "x", "+I")]))
    with pytest.raises(ConnectorError, match=r"table 'out': the sqlite sink got '\+U', '-D', '-U' rows "
                                             r"\(updates or deletes\), but the table declares no PRIMARY KEY"):
        w.write(batch(schema, [(1, "x", "-U"), (1, "y", "+U"), (1, "y", "-D")]))
    w.close()
    assert select(tmp_path / "a.db", "SELECT * FROM out") == [(1, "x")]


def test_table_name_option_and_an_empty_run(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    w = writer(path, KV, **{"table-name": "my table"})
    w.close()
    assert tables(path) == {"my table"}  # a successful run leaves the table, even empty
    assert select(path, 'SELECT COUNT(*) FROM "my table"') == [(0,)]


# ---------------------------------------------------------------- exactly-once


def test_recover_commits_the_checkpoint_and_drops_what_came_after(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    first = writer(path, KV)
    first.write(batch(KV, [(1, "a"), (2, "b")]))
    handle = first.pre_commit(1)
    assert handle == {"table": "t", "rows": 2}
    assert "t" not in tables(path)  # staged: durable, not visible
    first.write(batch(KV, [(3, "c")]))
    first.pre_commit(2)  # staged, but the crash comes before checkpoint 2 completes
    first.write(batch(KV, [(4, "d")]))
    del first  # a crash: nothing is committed, closed or aborted
    assert pending(path) == [("t", 1), ("t", 2)]

    second = writer(path, KV)
    second.recover(1, handle)
    assert select(path, "SELECT k, v FROM t ORDER BY k") == [(1, "a"), (2, "b")]
    assert pending(path) == []
    assert select(path, f"SELECT tbl, committed FROM {META_TABLE}") == [("t", 1)]
    second.recover(1, handle)  # again: nothing changes
    second.write(batch(KV, [(3, "c")]))
    handle = second.pre_commit(2)
    second.commit(2, handle)
    second.commit(2, handle)
    second.close()
    assert select(path, "SELECT k, v FROM t ORDER BY k") == [(1, "a"), (2, "b"), (3, "c")]


def test_a_repeated_or_replayed_commit_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    w = writer(path, KV)
    w.write(batch(KV, [(1, "a")]))
    handle = w.pre_commit(1)
    w.commit(1, handle)
    w.commit(1, handle)
    w.recover(1, handle)
    # Falling back to an older checkpoint replays checkpoint 1: staged again, committed already.
    w.write(batch(KV, [(1, "a")]))
    w.commit(1, w.pre_commit(1))
    w.close()
    assert select(path, "SELECT k, v FROM t") == [(1, "a")]
    assert pending(path) == []


def test_recover_without_a_checkpoint_discards_every_staged_row(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    other = writer(path, KV, name="other")
    other.write(batch(KV, [(7, "kept")]))
    other.pre_commit(1)
    first = writer(path, KV)
    first.write(batch(KV, [(1, "a")]))
    first.pre_commit(1)
    first.commit(1, None)
    first.write(batch(KV, [(2, "b")]))
    first.pre_commit(2)
    del first
    second = writer(path, KV)
    # A job with a new state directory (another lineage): what the old one committed is kept.
    # (With the same lineage, recovering to no checkpoint rolls it back: test_checkpoint_fallback.py.)
    second.recover(0, None, lineage="a new state directory")
    assert pending(path) == [("other", 1)]  # another table's staged rows are not this sink's to drop
    # A fresh start restarts checkpoint ids too: its checkpoint 1 is not mistaken for the old one.
    second.write(batch(KV, [(3, "c")]))
    second.commit(1, second.pre_commit(1))
    second.close()
    assert select(path, "SELECT k, v FROM t ORDER BY k") == [(1, "a"), (3, "c")]


def test_abort_leaves_the_table_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    w = writer(path, KV)
    w.write(batch(KV, [(1, "a")]))
    w.close()
    w = writer(path, KV)
    w.write(batch(KV, [(2, "b")]))
    w.abort()
    w.abort()
    w.close()  # after abort: nothing
    assert select(path, "SELECT k, v FROM t") == [(1, "a")]
    fresh = writer(tmp_path / "new.db", KV)
    fresh.write(batch(KV, [(2, "b")]))
    fresh.abort()
    assert tables(tmp_path / "new.db") == set()  # not even created


# ---------------------------------------------------------------- errors


def test_an_existing_table_with_other_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (k INTEGER, value TEXT, extra REAL)")
    con.close()
    with pytest.raises(ConnectorError) as info:
        writer(path, KV)
    message = str(info.value)
    assert "table 't': the SQLite table 't'" in message and str(path) in message
    assert "has the columns (k, value, extra), but the SQL table has (k, v)" in message


def test_an_existing_table_with_another_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, tag TEXT, v INTEGER)")
    con.close()
    with pytest.raises(ConnectorError, match=r"has the primary key \(k\), but the SQL table declares "
                                             r"PRIMARY KEY \(k, tag\)"):
        writer(path, CHANGES, key=KEY)


def test_a_file_that_is_not_a_database_is_reported(tmp_path: Path) -> None:
    (tmp_path / "x.db").write_text("not a database, but long enough to have a header" * 10)
    with pytest.raises(ConnectorError, match="cannot open the SQLite database"):
        writer(tmp_path / "x.db", KV)


@pytest.mark.parametrize(("options", "key", "message"), [
    ({}, "path", "needs a 'path'"),
    ({"path": "  "}, "path", "needs a 'path'"),
    ({"path": "x.db", "table-name": "_clink_pending"}, "table-name", "is reserved"),
])
def test_option_values_are_checked(options: dict[str, str], key: str, message: str) -> None:
    errors = SQLITE.validate(options, KV, "table")
    assert key in errors and message in errors[key]


def test_nested_types_are_refused() -> None:
    nested = pa.schema([("k", pa.int64()), ("xs", pa.list_(pa.int64()))])
    assert "column 'xs' of type ARRAY cannot be stored in SQLite" in SQLITE.validate(
        {"path": "x.db"}, nested, "table")["connector"]


def test_the_writer_refuses_a_primary_key_that_is_not_a_column(tmp_path: Path) -> None:
    with pytest.raises(ConnectorError, match="primary key column 'nope' is not a column of the table"):
        writer(tmp_path / "x.db", KV, key=("nope",))
    assert not (tmp_path / "x.db").exists()


def test_the_writer_reports_bad_options() -> None:
    spec = TableSpec(name="t", schema=KV, table_schema=KV, options={})
    with pytest.raises(ConnectorError, match="table 't': bad sqlite options: 'path'"):
        SqliteSinkWriter(spec, ctx())


def test_sql_option_errors(tmp_path: Path) -> None:
    base = "CREATE TABLE out_t (k INT, n BIGINT) WITH ('connector' = 'sqlite'{})"
    with pytest.raises(SqlError, match="connector 'sqlite' needs the option 'path'"):
        clink.compile(base.format(""))
    with pytest.raises(SqlError, match="column 'xs' of type ARRAY cannot be stored in SQLite"):
        clink.compile(f"CREATE TABLE o (k INT, xs ARRAY<INT>) WITH ('connector' = 'sqlite', 'path' = '{tmp_path}/o.db')")
    # The primary key comes from PRIMARY KEY (...) NOT ENFORCED, never from WITH.
    with pytest.raises(SqlError, match="unknown option 'primary-key'"):
        clink.compile(base.format(f", 'path' = '{tmp_path}/o.db', 'primary-key' = '[\"k\"]'"))



def test_the_primary_key_reaches_the_sink_typed_not_as_an_option(tmp_path: Path) -> None:
    source = clink.compile(
        "CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen');\n"
        f"CREATE TABLE o (k INT, n BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH ('connector' = 'sqlite', "
        f"'path' = '{tmp_path}/o.db');\n"
        "INSERT INTO o SELECT k, COUNT(*) FROM t GROUP BY k;").source
    assert "primary_key=('k',)," in source and "primary-key" not in source

# ---------------------------------------------------------------- end to end


SOURCE = ("CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '500', "
          "'fields.k.min' = '1', 'fields.k.max' = '7', 'batch-size' = '50')")
# SUM of an INT is an INT, as in Flink; the random INTs of datagen overflow it, so sum BIGINTs.
GROUPED = "INSERT INTO counts SELECT k, COUNT(*), SUM(CAST(v AS BIGINT)) FROM t GROUP BY k"


def counts_ddl(path: Path, key: bool = True) -> str:
    return (f"CREATE TABLE counts (k INT, n BIGINT, s BIGINT{', PRIMARY KEY (k) NOT ENFORCED' if key else ''}) "
            f"WITH ('connector' = 'sqlite', 'path' = '{path}')")


@pytest.fixture(scope="module")
def source_rows() -> pa.Table:
    return clink.sql([SOURCE, "SELECT k, v FROM t"]).to_arrow()


@pytest.fixture(scope="module")
def expected_counts(source_rows: pa.Table) -> list[tuple]:
    grouped = source_rows.group_by("k").aggregate([([], "count_all"), ("v", "sum")])
    return sorted(zip(*(grouped.column(c).to_pylist() for c in ("k", "count_all", "v_sum")), strict=True))


def test_group_by_into_a_keyed_table_equals_the_aggregation(tmp_path: Path, expected_counts: list[tuple]) -> None:
    path = tmp_path / "out.db"
    metrics = clink.sql([SOURCE, counts_ddl(path), GROUPED]).run()
    assert select(path, "SELECT k, n, s FROM counts ORDER BY k") == expected_counts
    assert len(expected_counts) == 7 and sum(n for _, n, _ in expected_counts) == 500
    assert metrics.records_out["counts"] > 7  # the sink saw the updates, and kept one row per key


def test_group_by_into_a_table_without_a_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SqlError) as info:
        clink.compile([SOURCE, counts_ddl(tmp_path / "out.db", key=False), GROUPED])
    assert "PRIMARY KEY" in str(info.value) + (info.value.hint or "")
    assert "takes updates only by a primary key" in str(info.value)


def test_an_append_only_insert_writes_every_row(tmp_path: Path, source_rows: pa.Table) -> None:
    path = tmp_path / "out.db"
    ddl = (f"CREATE TABLE raw (k INT, v INT) WITH ('connector' = 'sqlite', 'path' = '{path}', "
           "'table-name' = 'raw_rows')")
    clink.sql([SOURCE, ddl, "INSERT INTO raw SELECT k, v FROM t"]).run()
    theirs = list(zip(source_rows.column("k").to_pylist(), source_rows.column("v").to_pylist(), strict=True))
    assert Counter(select(path, "SELECT k, v FROM raw_rows")) == Counter(theirs)
    assert len(theirs) == 500


APPEND = ("CREATE TABLE raw (k INT, v INT) WITH ('connector' = 'sqlite', 'path' = '{path}')",
          "INSERT INTO raw SELECT k, v FROM t")


def checkpointed_job(path: Path, state: Path, mode: str = "upsert") -> Job:
    statements = [counts_ddl(path), GROUPED] if mode == "upsert" else [APPEND[0].format(path=path), APPEND[1]]
    plan = clink.compile([SOURCE, *statements], name="ckpt.sql").runtime_plan
    config = {"execution.checkpointing.interval-rows": "120"}
    return Job(plan, RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))


def final_table(path: Path, mode: str) -> list[tuple] | Counter:
    if mode == "upsert":
        return select(path, "SELECT k, n, s FROM counts ORDER BY k")
    return Counter(select(path, "SELECT k, v FROM raw"))


@pytest.fixture(scope="module")
def expected(source_rows: pa.Table, expected_counts: list[tuple]) -> dict[str, list[tuple] | Counter]:
    rows = zip(source_rows.column("k").to_pylist(), source_rows.column("v").to_pylist(), strict=True)
    return {"upsert": expected_counts, "append": Counter(rows)}


@pytest.mark.parametrize("mode", ["upsert", "append"])
@pytest.mark.parametrize("crash_after_steps", [2, 5, 8])
def test_a_crash_and_restart_with_checkpoints_ends_with_the_same_table(
        tmp_path: Path, expected: dict, crash_after_steps: int, mode: str) -> None:
    path, state = tmp_path / "out.db", tmp_path / "state"
    first = checkpointed_job(path, state, mode)
    for _ in range(crash_after_steps):
        first.step()
    del first  # a crash: nothing is closed or aborted
    resumed = checkpointed_job(path, state, mode)
    resumed.run()
    assert resumed.metrics.restored_from == {2: None, 5: 1, 8: 2}[crash_after_steps]
    assert final_table(path, mode) == expected[mode]
    assert pending(path) == []


class Crash(BaseException):
    """Stands for SIGKILL at a point of the checkpoint protocol, without killing pytest."""


@pytest.mark.parametrize("mode", ["upsert", "append"])
@pytest.mark.parametrize("point", ["after_barrier", "after_state_written_before_commit", "during_manifest_rename",
                                   "after_checkpoint_before_sink_commit", "during_sink_commit"])
def test_a_crash_at_each_point_of_the_protocol_ends_with_the_same_table(
        tmp_path: Path, expected: dict, point: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from clink.runtime.executor import _Checkpointing

    reached: Counter = Counter()

    def fault(self: _Checkpointing, name: str) -> None:
        reached[name] += 1
        if name == point and reached[name] == 2:  # in the second checkpoint
            raise Crash(name)

    path, state = tmp_path / "out.db", tmp_path / "state"
    with monkeypatch.context() as patched:
        patched.setattr(_Checkpointing, "fault", fault)
        first = checkpointed_job(path, state, mode)
        with pytest.raises(Crash):
            first.run()
    staged = pending(path)
    # Between the pre-commit and the commit, checkpoint 2's rows wait in the staging table.
    assert bool(staged) == (point in ("after_state_written_before_commit", "during_manifest_rename",
                                      "after_checkpoint_before_sink_commit"))
    assert all(checkpoint == 2 for _, checkpoint in staged)
    resumed = checkpointed_job(path, state, mode)
    resumed.run()
    assert resumed.metrics.restored_from == (2 if point in ("after_checkpoint_before_sink_commit",
                                                            "during_sink_commit") else 1)
    assert final_table(path, mode) == expected[mode]
    assert pending(path) == []


def test_an_update_whose_new_row_a_filter_dropped_removes_the_old_row(tmp_path: Path) -> None:
    """``WHERE c < 2`` over a count: when a key's count reaches 2 the filter passes the ``-U`` of
    the old row and drops the ``+U`` of the new one, so the key leaves the table (DuckDB's HAVING
    gives the same rows)."""
    import duckdb
    import pyarrow.parquet as pq

    keys = pa.table({"k": pa.array([1, 2, 1, 3, 2, 2, 4], pa.int32())})
    pq.write_table(keys, tmp_path / "t.parquet", row_group_size=1)
    clink.sql(f"""
        CREATE TABLE t (k INT) WITH ('connector' = 'filesystem', 'path' = '{tmp_path / "t.parquet"}', 'format' = 'parquet');
        CREATE TABLE out (k INT, c BIGINT, PRIMARY KEY (k) NOT ENFORCED)
        WITH ('connector' = 'sqlite', 'path' = '{tmp_path / "o.db"}');
        INSERT INTO out SELECT k, c FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) WHERE c < 2;
    """).run()
    want = duckdb.sql("SELECT k, count(*) FROM keys GROUP BY k HAVING count(*) < 2").fetchall()
    assert sorted(select(tmp_path / "o.db", "SELECT k, c FROM out")) == sorted(want) == [(3, 1), (4, 1)]
