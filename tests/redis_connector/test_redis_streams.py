"""The redis connector over streams, against a real Redis server (tests/redis_connector/conftest.py):
rows written by the sink and read back by the source and by the redis client, GROUP BY over the
stream compared with DuckDB on a dense and a NULL-heavy table read in small batches, startup and
bounded modes, positions, the exactly-once sink's commit, its repeat and its roll back, and errors."""

from __future__ import annotations

import datetime as dt
import io
import sys
from decimal import Decimal
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
import redis

# tests/shared_duckdb.py: pytest puts tests/ on sys.path, as it holds the root conftest.py.
import shared_duckdb

import clink
from clink.errors import ClinkError, ConnectorError, RecordError, SqlError
from clink.runtime.connectors.base import TableSpec
from clink.runtime.connectors.redis import REDIS, RedisStreamWriter, StreamId
from clink.runtime.context import RuntimeContext

N = 3000
COLUMNS = "k BIGINT, tag STRING, price DOUBLE, amount DECIMAL(10, 2), day DATE, ts TIMESTAMP(3), ok BOOLEAN, raw BYTES"


def events(null_rate: float, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)

    def nulls() -> np.ndarray | None:
        return rng.random(N) < null_rate if null_rate else None

    base = np.datetime64("2026-03-01T00:00:00.000")
    return pa.table({
        "k": pa.array(rng.integers(0, 7, N), pa.int64(), mask=nulls()),
        "tag": pa.array(rng.choice(np.array(["a", "b", "", "é ü"]), N), pa.string(), mask=nulls()),
        "price": pa.array(np.round(rng.normal(50, 20, N), 4), pa.float64(), mask=nulls()),
        "amount": pa.array([Decimal(int(v)) / 100 for v in rng.integers(-99999, 99999, N)], pa.decimal128(10, 2),
                           mask=nulls()),
        "day": pa.array(rng.integers(19000, 21000, N).astype("datetime64[D]"), pa.date32(), mask=nulls()),
        "ts": pa.array(base + rng.integers(0, 86_400_000, N).astype("timedelta64[ms]"), pa.timestamp("ms"),
                       mask=nulls()),
        "ok": pa.array(rng.random(N) < 0.5, pa.bool_(), mask=nulls()),
        "raw": pa.array([bytes([i % 256, 0, 255]) for i in range(N)], pa.binary(), mask=nulls()),
    })


TABLES = {"dense": events(0.0, 1), "nulls": events(0.6, 2)}


def ctx(**config: str) -> RuntimeContext:
    return RuntimeContext(config=config, stdout=io.StringIO())


def spec(name: str, schema: pa.Schema, url: str, **options: str) -> TableSpec:
    return TableSpec(name=name, schema=schema, table_schema=schema, options={"url": url, **options})


def fill(r: redis.Redis, url: str, stream: str, table: pa.Table) -> None:
    """The rows of ``table`` appended to ``stream`` by the sink, in batches of 100."""
    writer = REDIS.create_sink(spec("t", table.schema, url, stream=stream), ctx())
    for batch in table.to_batches(max_chunksize=100):
        writer.write(batch)
    writer.close()


def ddl(name: str, url: str, stream: str, extra: str = "", **options: str) -> str:
    opts = "".join(f", '{k}' = '{v}'" for k, v in options.items())
    return (f"CREATE TABLE {name} ({COLUMNS}{extra}) WITH ('connector' = 'redis', 'url' = '{url}', "
            f"'stream' = '{stream}'{opts})")


@pytest.mark.parametrize("kind", TABLES)
def test_rows_written_read_back_whole(r: redis.Redis, redis_url: str, kind: str) -> None:
    table = TABLES[kind]
    fill(r, redis_url, "ev", table)
    assert r.xlen("ev") == N
    back = clink.sql([ddl("ev", redis_url, "ev", **{"scan.bounded.mode": "latest", "scan.fetch-size": "97"}),
                      "SELECT * FROM ev"]).to_arrow()
    assert back.to_pylist() == table.to_pylist()  # in stream order, every type and NULL as written


def test_the_stream_holds_text_as_flink_casts_it(r: redis.Redis, redis_url: str) -> None:
    fill(r, redis_url, "ev", TABLES["nulls"].slice(0, 40))
    entries = r.xrange("ev")
    first = TABLES["nulls"].slice(0, 40).to_pylist()
    for (_, fields), row in zip(entries, first, strict=True):
        # A NULL is a field left out; the rest is text.
        assert {k.decode() for k in fields} == {k for k, v in row.items() if v is not None}
        if row["ok"] is not None:
            assert fields[b"ok"] == (b"TRUE" if row["ok"] else b"FALSE")
        if row["ts"] is not None:
            assert fields[b"ts"].decode() == row["ts"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        if row["amount"] is not None:
            assert fields[b"amount"].decode() == f"{row['amount']:.2f}"
        if row["raw"] is not None:
            assert fields[b"raw"] == row["raw"]


QUERIES = [
    "SELECT k, COUNT(*) AS n, COUNT(price) AS c, SUM(amount) AS s, MIN(day) AS d, MAX(ts) AS t FROM ev GROUP BY k",
    "SELECT tag, ok, COUNT(*) AS n, AVG(price) AS a FROM ev WHERE amount > 0 GROUP BY tag, ok",
]


@pytest.mark.parametrize("parallelism", ["1", "4"])
@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("kind", TABLES)
def test_group_by_over_the_stream_matches_duckdb(r: redis.Redis, redis_url: str, kind: str, query: str,
                                                 parallelism: str) -> None:
    table = TABLES[kind]
    fill(r, redis_url, "ev", table)
    ours = clink.sql([ddl("ev", redis_url, "ev", **{"scan.bounded.mode": "latest", "scan.fetch-size": "50"}), query],
                     config={"parallelism.default": parallelism}).to_arrow()
    con = shared_duckdb.connect()
    con.register("ev", table)
    shared_duckdb.assert_same_rows(ours, con.execute(query).fetchall())
    assert ours.num_rows > 1


def test_event_time_windows_over_the_stream(r: redis.Redis, redis_url: str) -> None:
    table = TABLES["dense"].sort_by("ts")
    fill(r, redis_url, "ev", table)
    query = ("SELECT window_start, COUNT(*) AS n, SUM(price) AS p FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), "
             "INTERVAL '1' HOUR)) GROUP BY window_start, window_end")
    ours = clink.sql([ddl("ev", redis_url, "ev", ", WATERMARK FOR ts AS ts - INTERVAL '1' SECOND",
                          **{"scan.bounded.mode": "latest", "scan.fetch-size": "100"}), query]).to_arrow()
    con = shared_duckdb.connect()
    con.register("ev", table)
    theirs = con.execute("SELECT time_bucket(INTERVAL 1 HOUR, ts) AS ws, COUNT(*), SUM(price) FROM ev "
                         "GROUP BY ws").fetchall()
    shared_duckdb.assert_same_rows(ours, theirs)
    assert len(theirs) == 24


# ---------------------------------------------------------------- startup and bounded modes


def add(r: redis.Redis, stream: str, ks: range) -> list[bytes]:
    return [r.xadd(stream, {"k": str(k)}) for k in ks]


def read_k(redis_url: str, stream: str, **options: str) -> list[int]:
    opts = "".join(f", '{k}' = '{v}'" for k, v in options.items())
    table = clink.sql([f"CREATE TABLE s (k BIGINT) WITH ('connector' = 'redis', 'url' = '{redis_url}', "
                       f"'stream' = '{stream}', 'scan.bounded.mode' = 'latest'{opts})", "SELECT k FROM s"]).to_arrow()
    return table.column("k").to_pylist()


def test_startup_modes(r: redis.Redis, redis_url: str) -> None:
    ids = add(r, "s", range(10))
    assert read_k(redis_url, "s") == list(range(10))
    assert read_k(redis_url, "s", **{"scan.startup.mode": "earliest", "scan.fetch-size": "3"}) == list(range(10))
    # 'id' starts at the entry with that ID (inclusive).
    assert read_k(redis_url, "s", **{"scan.startup.mode": "id", "scan.startup.id": ids[6].decode()}) == [6, 7, 8, 9]
    # latest, bounded by latest: nothing (the entries are all there before the job starts).
    assert read_k(redis_url, "s", **{"scan.startup.mode": "latest"}) == []
    assert read_k(redis_url, "missing") == []  # a stream that does not exist yet is empty


def test_latest_reads_only_what_comes_after_the_start(r: redis.Redis, redis_url: str) -> None:
    add(r, "s", range(5))
    schema = pa.schema([("k", pa.int64())])
    reader = REDIS.create_source(spec("s", schema, redis_url, stream="s", **{"scan.startup.mode": "latest"}), ctx())
    assert not reader.bounded
    assert reader.poll() is None
    add(r, "s", range(5, 8))
    assert reader.poll().column(0).to_pylist() == [5, 6, 7]
    assert not reader.finished  # unbounded: it waits for more
    assert reader.poll() is None
    add(r, "s", range(8, 9))
    assert reader.poll().column(0).to_pylist() == [8]
    reader.close()


def test_bounded_latest_stops_at_the_last_entry_when_the_job_started(r: redis.Redis, redis_url: str) -> None:
    add(r, "s", range(5))
    schema = pa.schema([("k", pa.int64())])
    reader = REDIS.create_source(spec("s", schema, redis_url, stream="s", **{"scan.bounded.mode": "latest",
                                                                             "scan.fetch-size": "2"}), ctx())
    add(r, "s", range(5, 9))  # after the start: beyond the bound
    seen = []
    while not reader.finished:
        batch = reader.poll()
        if batch is not None:
            seen += batch.column(0).to_pylist()
    assert seen == [0, 1, 2, 3, 4]
    reader.close()


def test_positions_resume_after_the_last_entry_handed_out(r: redis.Redis, redis_url: str) -> None:
    ids = add(r, "s", range(10))
    schema = pa.schema([("k", pa.int64())])
    options = {"stream": "s", "scan.bounded.mode": "latest", "scan.fetch-size": "4"}
    reader = REDIS.create_source(spec("s", schema, redis_url, **options), ctx())
    assert reader.poll().column(0).to_pylist() == [0, 1, 2, 3]
    position = reader.position()
    assert position["next"] == str(StreamId.parse(ids[3]).next())
    assert reader.poll().column(0).to_pylist() == [4, 5, 6, 7]
    reader.close()
    add(r, "s", range(10, 12))  # after the first start: the restored run stops where the first would
    again = REDIS.create_source(spec("s", schema, redis_url, **options), ctx())
    again.seek(position)
    seen = []
    while not again.finished:
        batch = again.poll()
        if batch is not None:
            seen += batch.column(0).to_pylist()
    assert seen == [4, 5, 6, 7, 8, 9]
    again.close()


def test_stream_ids_order_and_next() -> None:
    assert StreamId.parse("5") == StreamId(5, 0)
    assert StreamId.parse(b"17-3").next() == StreamId(17, 4)
    assert StreamId(1, (1 << 64) - 1).next() == StreamId(2, 0)
    with pytest.raises(ValueError, match="not a stream entry ID"):
        StreamId.parse("12-x")


# ---------------------------------------------------------------- the sink's guarantees


KV = pa.schema([("k", pa.int64()), ("v", pa.string())])


def kv(rows: range) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"k": k, "v": f"v{k}"} for k in rows], schema=KV)


def stream_ks(r: redis.Redis, stream: str) -> list[int]:
    return [int(fields[b"k"]) for _, fields in r.xrange(stream)]


def exactly_once(url: str) -> RedisStreamWriter:
    return REDIS.create_sink(spec("t", KV, url, stream="out", **{"sink.delivery-guarantee": "exactly-once"}), ctx())


def test_exactly_once_rows_appear_at_the_commit_and_once(r: redis.Redis, redis_url: str) -> None:
    w = exactly_once(redis_url)
    w.recover(0, None, lineage="L")
    w.write(kv(range(0, 5)))
    handle = w.pre_commit(1)
    assert stream_ks(r, "out") == []  # staged, not visible
    w.commit(1, handle)
    w.commit(1, handle)  # repeated: adds nothing
    assert stream_ks(r, "out") == [0, 1, 2, 3, 4]
    w.write(kv(range(5, 8)))
    w.commit(2, w.pre_commit(2))
    assert stream_ks(r, "out") == list(range(8))
    ids = [StreamId.parse(i) for i, _ in r.xrange("out")]
    assert ids == sorted(ids, key=lambda i: (i.ms, i.seq))
    w.close()


def test_a_commit_lost_in_a_crash_is_made_at_the_restore(r: redis.Redis, redis_url: str) -> None:
    w = exactly_once(redis_url)
    w.recover(0, None, lineage="L")
    w.write(kv(range(0, 3)))
    handle = w.pre_commit(1)
    w.abort()  # the job dies after the checkpoint, before the commit
    again = exactly_once(redis_url)
    again.recover(1, handle, lineage="L")
    assert stream_ks(r, "out") == [0, 1, 2]
    again.recover(1, handle, lineage="L")  # a second restart from the same checkpoint
    assert stream_ks(r, "out") == [0, 1, 2]
    again.close()


def test_rows_staged_after_the_checkpoint_are_dropped_at_the_restore(r: redis.Redis, redis_url: str) -> None:
    w = exactly_once(redis_url)
    w.recover(0, None, lineage="L")
    w.write(kv(range(0, 3)))
    w.commit(1, w.pre_commit(1))
    w.write(kv(range(3, 6)))
    w.pre_commit(2)  # checkpoint 2 never completes
    w.abort()
    again = exactly_once(redis_url)
    again.recover(1, {"rows": 3}, lineage="L")
    again.write(kv(range(3, 6)))  # replayed
    again.commit(2, again.pre_commit(2))
    assert stream_ks(r, "out") == list(range(6))
    again.close()


def test_a_restore_from_an_older_checkpoint_deletes_what_later_commits_added(r: redis.Redis, redis_url: str) -> None:
    r.xadd("out", {"k": "-1"})  # someone else's entry stays
    w = exactly_once(redis_url)
    w.recover(0, None, lineage="L")
    for n in range(1, 4):
        w.write(kv(range(n * 10, n * 10 + 3)))
        w.commit(n, w.pre_commit(n))
    w.close()
    again = exactly_once(redis_url)
    note = again.recover(1, None, lineage="L")
    assert "checkpoint(s) 2, 3" in note
    assert stream_ks(r, "out") == [-1, 10, 11, 12]
    again.write(kv(range(20, 23)))
    again.commit(2, again.pre_commit(2))
    assert stream_ks(r, "out") == [-1, 10, 11, 12, 20, 21, 22]
    again.close()


def test_a_restore_older_than_the_undo_log_is_refused_unless_duplicates_are_accepted(r: redis.Redis,
                                                                                      redis_url: str) -> None:
    w = REDIS.create_sink(spec("t", KV, redis_url, stream="out", **{"sink.delivery-guarantee": "exactly-once"}),
                          ctx(**{"state.checkpoints.num-retained": "1"}))
    w.recover(0, None, lineage="L")
    for n in range(1, 6):
        w.write(kv(range(n, n + 1)))
        w.commit(n, w.pre_commit(n))
    w.close()
    again = exactly_once(redis_url)
    with pytest.raises(ConnectorError, match="accept-duplicates"):
        again.recover(1, None, lineage="L")
    assert stream_ks(r, "out") == [1, 2, 3, 4, 5]  # nothing touched
    lenient = REDIS.create_sink(spec("t", KV, redis_url, stream="out", **{"sink.delivery-guarantee": "exactly-once"}),
                                ctx(**{"execution.recovery.accept-duplicates": "true"}))
    assert "rows may repeat" in lenient.recover(1, None, lineage="L")
    lenient.close()


def test_another_state_directory_starts_a_new_ledger(r: redis.Redis, redis_url: str) -> None:
    w = exactly_once(redis_url)
    w.recover(0, None, lineage="first")
    w.write(kv(range(3)))
    w.commit(1, w.pre_commit(1))
    w.close()
    other = exactly_once(redis_url)
    assert other.recover(0, None, lineage="second") is None  # the first job's entries are data now
    other.write(kv(range(3, 4)))
    other.commit(1, other.pre_commit(1))
    assert stream_ks(r, "out") == [0, 1, 2, 3]
    other.close()


def test_exactly_once_without_checkpoints_writes_at_the_end(r: redis.Redis, redis_url: str) -> None:
    w = exactly_once(redis_url)
    w.write(kv(range(4)))
    assert stream_ks(r, "out") == []
    w.close()
    assert stream_ks(r, "out") == [0, 1, 2, 3]
    failed = exactly_once(redis_url)
    failed.write(kv(range(10, 14)))
    failed.abort()
    assert stream_ks(r, "out") == [0, 1, 2, 3]


def test_at_least_once_writes_as_rows_come(r: redis.Redis, redis_url: str) -> None:
    w = REDIS.create_sink(spec("t", KV, redis_url, stream="out"), ctx())
    w.write(kv(range(3)))
    assert stream_ks(r, "out") == [0, 1, 2]
    assert w.pre_commit(1) is None
    w.close()


# ---------------------------------------------------------------- errors


def test_options_are_checked_when_the_sql_is_compiled(redis_url: str) -> None:
    base = f"CREATE TABLE s (k BIGINT) WITH ('connector' = 'redis', 'url' = '{redis_url}'"
    cases = {
        ", 'stream' = 's', 'scan.startup.mode' = 'group')": "must be one of earliest, latest, id",
        ", 'stream' = 's', 'scan.startup.mode' = 'id')": "needs 'scan.startup.id'",
        ", 'stream' = 's', 'scan.startup.mode' = 'id', 'scan.startup.id' = 'abc')": "not a stream entry ID",
        ")": "needs the option 'stream'",
        ", 'stream' = 's', 'consumer.group' = 'g')": "unknown option 'consumer.group'",
        ", 'stream' = 's', 'port' = '1')": "either 'url' or 'port'",
        ", 'stream' = 's', 'lookup.cache' = 'PARTIAL')": "'lookup.cache' applies to a lookup join on 'data-structure' = 'hash'",
        ", 'data-structure' = 'hash', 'lookup.partial-cache.max-rows' = '0')": "not a whole number of at least 1",
        ", 'data-structure' = 'hash', 'stream' = 's')": "'stream' applies to 'data-structure' = 'stream'",
        ", 'stream' = 's', 'key.prefix' = 'x')": "'key.prefix' applies to 'data-structure' = 'hash'",
    }
    for options, message in cases.items():
        with pytest.raises(SqlError, match=message) as info:
            clink.compile(base + options + ";\nSELECT k FROM s", name="p.sql")
        # At the option in question; a missing one at the statement.
        assert info.value.span.line == 1 and (info.value.span.col > 1) == (options != ")"), options


def test_nested_columns_are_refused(redis_url: str) -> None:
    with pytest.raises(SqlError, match="not a ROW, ARRAY or MAP"):
        clink.compile(f"CREATE TABLE s (k ARRAY<INT>) WITH ('connector' = 'redis', 'url' = '{redis_url}', "
                      "'stream' = 's'); SELECT k FROM s")


def test_a_bad_value_names_the_entry(r: redis.Redis, redis_url: str) -> None:
    r.xadd("s", {"k": "1"})
    bad = r.xadd("s", {"k": "one"}).decode()
    with pytest.raises(RecordError, match=f"'one'.*field 'k' in entry {bad}"):
        read_k(redis_url, "s")


def test_an_unreachable_server_is_a_clear_error(redis_url: str) -> None:
    with pytest.raises(ConnectorError, match="cannot reach Redis at redis://127.0.0.1:1"):
        read_k("redis://127.0.0.1:1", "s")


def test_updates_into_a_stream_are_refused(redis_url: str) -> None:
    schema = pa.schema([("k", pa.int64()), ("_rowkind", pa.string())])
    from clink.runtime.plan import UPDATING

    with pytest.raises(ConnectorError, match="takes only inserts"):
        REDIS.create_sink(TableSpec(name="t", schema=schema, table_schema=schema, primary_key=("k",),
                                    options={"url": redis_url, "stream": "s"}, changelog=UPDATING), ctx())


def test_without_the_client_library_the_error_names_the_extra(redis_url: str) -> None:
    with mock.patch.dict(sys.modules, {"redis": None}), pytest.raises(ClinkError, match=r"pip install 'clink\[redis\]'"):
        REDIS.create_source(spec("s", KV, redis_url, stream="s"), ctx())


def test_timestamps_with_a_fraction_and_without(r: redis.Redis, redis_url: str) -> None:
    r.xadd("s", {"ts": "2026-01-02 03:04:05"})
    r.xadd("s", {"ts": "2026-01-02T03:04:05.250"})
    back = clink.sql([f"CREATE TABLE s (ts TIMESTAMP(3)) WITH ('connector' = 'redis', 'url' = '{redis_url}', "
                      "'stream' = 's', 'scan.bounded.mode' = 'latest')", "SELECT ts FROM s"]).to_arrow()
    assert back.column("ts").to_pylist() == [dt.datetime(2026, 1, 2, 3, 4, 5), dt.datetime(2026, 1, 2, 3, 4, 5, 250000)]
