"""The jdbc sink against a real PostgreSQL: appends, upserts from an updating GROUP BY (checked
against DuckDB), exactly-once under crashes at every point of the checkpoint protocol, a replayed
checkpoint that writes nothing twice, and the errors a user meets. Every test reads the table
back from the server."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import clink
from clink.errors import ConnectorError, SqlError
from clink.runtime.connectors.base import TableSpec
from clink.runtime.connectors.jdbc import JDBC, LEDGER_TABLE, connect_uri
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from clink.runtime.plan import APPEND_ONLY, ROWKIND_COLUMN

# A dense table and a NULL-heavy one, read in small batches.
SOURCES = {
    "dense": ("CREATE TABLE t (k INT, v INT, name STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '600', "
              "'fields.k.min' = '1', 'fields.k.max' = '9', 'fields.v.min' = '-50', 'fields.v.max' = '50', "
              "'fields.name.length' = '3', 'batch-size' = '40', 'seed' = '7')"),
    "nulls": ("CREATE TABLE t (k INT, v INT, name STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '600', "
              "'fields.k.min' = '1', 'fields.k.max' = '5', 'fields.v.min' = '-50', 'fields.v.max' = '50', "
              "'fields.k.null-rate' = '0.3', 'fields.v.null-rate' = '0.6', 'fields.name.null-rate' = '0.7', "
              "'fields.name.length' = '2', 'batch-size' = '25', 'seed' = '8')"),
}
GROUPED = ("SELECT k, COUNT(*) AS n, SUM(CAST(v AS BIGINT)) AS s, MAX(name) AS top FROM t "
           "WHERE k IS NOT NULL GROUP BY k")


def jdbc(postgres, database: str, table: str, **extra: str) -> str:
    options = {"connector": "jdbc", "url": postgres.jdbc_url(database), "table-name": table,
               "username": "clink", "password": "clink-secret", **extra}
    return ", ".join(f"'{k}' = '{v}'" for k, v in options.items())


def source_rows(kind: str) -> pa.Table:
    return clink.sql([SOURCES[kind], "SELECT k, v, name FROM t"]).to_arrow()


def duckdb_answer(kind: str, query: str) -> list[tuple]:
    con = duckdb.connect()
    con.register("t", source_rows(kind))
    return sorted(con.execute(query).fetchall(), key=repr)


@pytest.mark.parametrize("kind", SOURCES)
def test_an_append_only_insert_writes_every_row(postgres, database: str, kind: str) -> None:
    postgres.execute(database, "CREATE TABLE raw (k integer, v bigint, name varchar(10))")
    ddl = f"CREATE TABLE raw (k INT, v INT, name STRING) WITH ({jdbc(postgres, database, 'raw')})"
    clink.sql([SOURCES[kind], ddl, "INSERT INTO raw SELECT k, v, name FROM t"]).run()
    theirs = Counter(tuple(r.values()) for r in source_rows(kind).to_pylist())
    assert Counter(postgres.query(database, "SELECT k, v, name FROM raw")) == theirs
    assert sum(theirs.values()) == 600


@pytest.mark.parametrize("kind", SOURCES)
def test_an_updating_group_by_upserts_what_duckdb_computes(postgres, database: str, kind: str) -> None:
    postgres.execute(database, "CREATE TABLE counts (k integer PRIMARY KEY, n bigint, s bigint, top text)")
    ddl = (f"CREATE TABLE counts (k INT, n BIGINT, s BIGINT, top STRING, PRIMARY KEY (k) NOT ENFORCED) "
           f"WITH ({jdbc(postgres, database, 'counts', **{'sink.buffer-flush.max-rows': '30'})})")
    metrics = clink.sql([SOURCES[kind], ddl, f"INSERT INTO counts {GROUPED}"]).run()
    ours = sorted(postgres.query(database, "SELECT k, n, s, top FROM counts"), key=repr)
    assert ours == duckdb_answer(kind, GROUPED)
    assert metrics.records_out["counts"] > len(ours)  # the sink got revisions and kept one row per key


def test_deletes_and_updates_by_a_two_column_key(postgres, database: str) -> None:
    postgres.execute(database, "CREATE TABLE kv (k bigint, tag text, v bigint, PRIMARY KEY (k, tag))",
                     "INSERT INTO kv VALUES (9, 'old', 1)")
    schema = pa.schema([("k", pa.int64()), ("tag", pa.string()), ("v", pa.int64()), (ROWKIND_COLUMN, pa.string())])
    from clink.runtime.plan import UPDATING

    spec = TableSpec(name="kv", schema=schema, table_schema=schema, changelog=UPDATING, primary_key=("k", "tag"),
                     options={"url": postgres.uri(database), "table-name": "kv"})
    w = JDBC.create_sink(spec, RuntimeContext(config={}, stdout=io.StringIO()))
    rows = [(1, "a", 1, "+I"), (1, "b", 2, "+I"), (1, "a", 1, "-U"), (1, "a", 5, "+U"), (1, "b", 2, "-D"),
            (9, "old", 1, "-D"), (2, "a", 7, "+I")]
    w.write(pa.RecordBatch.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema))
    w.close()
    assert sorted(postgres.query(database, "SELECT k, tag, v FROM kv")) == [(1, "a", 5), (2, "a", 7)]


def test_an_update_whose_new_row_a_filter_dropped_removes_the_old_row(postgres, database: str,
                                                                     tmp_path: Path) -> None:
    """``WHERE n < 2`` over a count: when a key's count reaches 2 the filter passes the ``-U`` of
    the old row and drops the ``+U`` of the new one, so the key leaves the table (as DuckDB's
    HAVING says)."""
    import pyarrow.parquet as pq

    keys = pa.table({"k": pa.array([1, 2, 1, 3, 2, 2, 4], pa.int32())})
    pq.write_table(keys, tmp_path / "k.parquet", row_group_size=1)
    postgres.execute(database, "CREATE TABLE few (k integer PRIMARY KEY, n bigint)")
    clink.sql([f"CREATE TABLE keys (k INT) WITH ('connector' = 'filesystem', 'path' = '{tmp_path / 'k.parquet'}', "
               "'format' = 'parquet')",
               f"CREATE TABLE few (k INT, n BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH ({jdbc(postgres, database, 'few')})",
               "INSERT INTO few SELECT k, n FROM (SELECT k, COUNT(*) AS n FROM keys GROUP BY k) WHERE n < 2"]).run()
    want = duckdb.sql("SELECT k, count(*) FROM keys GROUP BY k HAVING count(*) < 2").fetchall()
    assert sorted(postgres.query(database, "SELECT k, n FROM few")) == sorted(want) == [(3, 1), (4, 1)]


def test_types_reach_the_columns_of_the_users_table(postgres, database: str) -> None:
    postgres.execute(database, "CREATE TABLE typed (i integer, b bigint, d numeric(10, 2), f double precision, "
                     "ok boolean, day date, at timestamp(3), atz timestamptz, s varchar(8), bin bytea, arr integer[])")
    ddl = ("CREATE TABLE typed (i INT, b BIGINT, d DECIMAL(10, 2), f DOUBLE, ok BOOLEAN, day DATE, at TIMESTAMP(3), "
           f"atz TIMESTAMP_LTZ(3), s STRING, bin BYTES, arr ARRAY<BIGINT>) WITH ({jdbc(postgres, database, 'typed')})")
    insert = ("INSERT INTO typed VALUES (1, 10000000000, 12.34, 0.5, TRUE, DATE '2024-02-29', "
              "TIMESTAMP '2024-02-29 12:34:56.789', TO_TIMESTAMP_LTZ(1709210096789, 3), 'abc', CAST('ab' AS BYTES), "
              "ARRAY[CAST(7 AS BIGINT), NULL]), (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
    clink.sql([ddl, insert]).run()
    got = postgres.query(database, "SELECT i, b, d::text, f, ok, day::text, at::text, "
                         "extract(epoch from atz)::numeric(20,3)::text, s, encode(bin, 'hex'), arr::text FROM typed "
                         "ORDER BY i NULLS LAST")
    assert got == [(1, 10000000000, "12.34", 0.5, True, "2024-02-29", "2024-02-29 12:34:56.789",
                    "1709210096.789", "abc", "6162", "{7,NULL}"), (None,) * 11]


# ---------------------------------------------------------------- exactly-once


def checkpointed_job(postgres, database: str, state: Path, mode: str, kind: str = "dense") -> Job:
    if mode == "upsert":
        ddl = (f"CREATE TABLE counts (k INT, n BIGINT, s BIGINT, top STRING, PRIMARY KEY (k) NOT ENFORCED) "
               f"WITH ({jdbc(postgres, database, 'counts')})")
        insert = f"INSERT INTO counts {GROUPED}"
    else:
        ddl = f"CREATE TABLE raw (k INT, v INT, name STRING) WITH ({jdbc(postgres, database, 'raw')})"
        insert = "INSERT INTO raw SELECT k, v, name FROM t"
    plan = clink.compile([SOURCES[kind], ddl, insert], name="ckpt.sql").runtime_plan
    config = {"execution.checkpointing.interval-rows": "120"}
    return Job(plan, RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))


def make_tables(postgres, database: str) -> None:
    postgres.execute(database, "CREATE TABLE counts (k integer PRIMARY KEY, n bigint, s bigint, top text)",
                     "CREATE TABLE raw (k integer, v integer, name text)")


def final_table(postgres, database: str, mode: str) -> list[tuple] | Counter:
    if mode == "upsert":
        return sorted(postgres.query(database, "SELECT k, n, s, top FROM counts"), key=repr)
    return Counter(postgres.query(database, "SELECT k, v, name FROM raw"))


def staged_rows(postgres, database: str) -> int:
    tables = postgres.query(database, "SELECT schemaname::text, tablename::text FROM pg_tables "
                            "WHERE tablename LIKE '_clink_stage_%'")
    return sum(postgres.query(database, f'SELECT COUNT(*) FROM "{s}"."{t}"')[0][0] for s, t in tables)


@pytest.fixture(scope="module")
def expected() -> dict:
    return {"upsert": duckdb_answer("dense", GROUPED),
            "append": Counter(tuple(r.values()) for r in source_rows("dense").to_pylist())}


@pytest.mark.parametrize("mode", ["upsert", "append"])
@pytest.mark.parametrize("crash_after_steps", [2, 5, 9])
def test_a_crash_and_restart_with_checkpoints_ends_with_the_same_table(
        postgres, database: str, tmp_path: Path, expected: dict, crash_after_steps: int, mode: str) -> None:
    make_tables(postgres, database)
    first = checkpointed_job(postgres, database, tmp_path / "state", mode)
    for _ in range(crash_after_steps):
        first.step()
    del first  # a crash: nothing is closed or aborted
    resumed = checkpointed_job(postgres, database, tmp_path / "state", mode)
    resumed.run()
    assert final_table(postgres, database, mode) == expected[mode]
    assert staged_rows(postgres, database) == 0


class Crash(BaseException):
    """Stands for SIGKILL at a point of the checkpoint protocol, without killing pytest."""


@pytest.mark.parametrize("mode", ["upsert", "append"])
@pytest.mark.parametrize("point", ["after_barrier", "after_state_written_before_commit", "during_manifest_rename",
                                   "after_checkpoint_before_sink_commit", "during_sink_commit"])
def test_a_crash_at_each_point_of_the_protocol_ends_with_the_same_table(
        postgres, database: str, tmp_path: Path, expected: dict, point: str, mode: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from clink.runtime.executor import _Checkpointing

    reached: Counter = Counter()

    def fault(self: _Checkpointing, name: str) -> None:
        reached[name] += 1
        if name == point and reached[name] == 2:  # in the second checkpoint
            raise Crash(name)

    make_tables(postgres, database)
    with monkeypatch.context() as patched:
        patched.setattr(_Checkpointing, "fault", fault)
        first = checkpointed_job(postgres, database, tmp_path / "state", mode)
        with pytest.raises(Crash):
            first.run()
    if point in ("after_state_written_before_commit", "after_checkpoint_before_sink_commit"):
        assert staged_rows(postgres, database) > 0  # checkpoint 2's rows wait, invisible
    resumed = checkpointed_job(postgres, database, tmp_path / "state", mode)
    resumed.run()
    assert resumed.metrics.restored_from is not None
    assert final_table(postgres, database, mode) == expected[mode]
    assert staged_rows(postgres, database) == 0


def writer(postgres, database: str) -> object:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    spec = TableSpec(name="kv", schema=schema, table_schema=schema, changelog=APPEND_ONLY,
                     options={"url": postgres.uri(database), "table-name": "kv"})
    return JDBC.create_sink(spec, RuntimeContext(config={}, stdout=io.StringIO()))


def test_a_replayed_checkpoint_writes_nothing_twice(postgres, database: str) -> None:
    """Checkpoint 1's transaction committed, and then the job died before its completion was
    recorded anywhere but in the ledger: a restore from checkpoint 1 commits it again, and a
    second ``commit`` of it too; the rows are there once."""
    postgres.execute(database, "CREATE TABLE kv (k bigint, v text)")
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    first = writer(postgres, database)
    first.recover(0, None, lineage="job-a")
    first.write(pa.RecordBatch.from_pylist([{"k": 1, "v": "x"}, {"k": 2, "v": None}], schema=schema))
    handle = first.pre_commit(1)
    assert postgres.query(database, "SELECT COUNT(*) FROM kv") == [(0,)]  # staged, not visible
    first.commit(1, handle)
    first.commit(1, handle)  # twice: a no-op
    del first
    second = writer(postgres, database)
    second.recover(1, handle, lineage="job-a")
    second.commit(1, handle)
    assert sorted(postgres.query(database, "SELECT k, v FROM kv")) == [(1, "x"), (2, None)]
    assert staged_rows(postgres, database) == 0
    assert postgres.query(database, f"SELECT checkpoint, committed FROM {LEDGER_TABLE}") == [(1, True)]


def test_rows_staged_after_the_restored_checkpoint_are_discarded(postgres, database: str) -> None:
    postgres.execute(database, "CREATE TABLE kv (k bigint, v text)")
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    first = writer(postgres, database)
    first.recover(0, None, lineage="job-b")
    first.write(pa.RecordBatch.from_pylist([{"k": 1, "v": "a"}], schema=schema))
    h1 = first.pre_commit(1)
    first.write(pa.RecordBatch.from_pylist([{"k": 2, "v": "b"}], schema=schema))
    first.pre_commit(2)  # checkpoint 2 never completes: the job dies
    del first
    second = writer(postgres, database)
    second.recover(1, h1, lineage="job-b")  # commits checkpoint 1, drops checkpoint 2's rows
    assert postgres.query(database, "SELECT k, v FROM kv") == [(1, "a")]
    assert staged_rows(postgres, database) == 0


def test_a_restore_behind_a_committed_checkpoint_is_refused(postgres, database: str) -> None:
    postgres.execute(database, "CREATE TABLE kv (k bigint, v text)")
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    first = writer(postgres, database)
    first.recover(0, None, lineage="job-c")
    for n in (1, 2):
        first.write(pa.RecordBatch.from_pylist([{"k": n, "v": "a"}], schema=schema))
        first.commit(n, first.pre_commit(n))
    with pytest.raises(ConnectorError, match="checkpoint.s. 2, committed after checkpoint 1.*accept-duplicates"):
        writer(postgres, database).recover(1, None, lineage="job-c")


# ---------------------------------------------------------------- errors


def test_a_missing_table_is_a_clear_error_with_the_create_statement(postgres, database: str) -> None:
    ddl = f"CREATE TABLE nowhere (k INT, v STRING) WITH ({jdbc(postgres, database, 'nowhere')})"
    with pytest.raises(ConnectorError) as info:
        clink.sql([ddl, "INSERT INTO nowhere VALUES (1, 'a')"]).run()
    message = str(info.value)
    assert 'PostgreSQL table "nowhere" does not exist' in message
    assert 'CREATE TABLE "nowhere" ("k" INTEGER, "v" TEXT)' in message
    assert "clink-secret" not in message


def test_a_wrong_password_is_a_clear_error(postgres, database: str) -> None:
    postgres.execute(database, "CREATE TABLE kv (k integer)")
    ddl = (f"CREATE TABLE kv (k INT) WITH ({jdbc(postgres, database, 'kv')})").replace("clink-secret", "wrong")
    with pytest.raises(ConnectorError) as info:
        clink.sql([ddl, "INSERT INTO kv VALUES (1)"]).run()
    message = str(info.value)
    assert "cannot connect to PostgreSQL" in message and "password authentication failed" in message
    assert "wrong" not in message  # the password is never shown


def test_an_unreachable_server_is_a_clear_error(postgres, database: str) -> None:
    ddl = f"CREATE TABLE kv (k INT) WITH ({jdbc(postgres, database, 'kv')})".replace(str(postgres.port), "1")
    with pytest.raises(ConnectorError, match="cannot connect to PostgreSQL at postgresql://clink:\\*\\*\\*@"):
        clink.sql([ddl, "INSERT INTO kv VALUES (1)"]).run()


def test_a_bad_url_is_a_positioned_error() -> None:
    ddl = ("CREATE TABLE kv (k INT) WITH ('connector' = 'jdbc', 'url' = 'jdbc:mysql://h:3306/db', "
           "'table-name' = 'kv')")
    with pytest.raises(SqlError) as info:
        clink.compile([ddl, "INSERT INTO kv VALUES (1)"])
    assert "not a PostgreSQL url" in str(info.value) and "jdbc:postgresql://host:port/database" in str(info.value)
    assert info.value.span.line == 1


def test_an_unknown_option_is_a_positioned_error(postgres) -> None:
    ddl = (f"CREATE TABLE kv (k INT) WITH ('connector' = 'jdbc', 'url' = '{postgres.jdbc_url('x')}', "
           "'table-name' = 'kv', 'sink.semantic' = 'exactly-once')")
    with pytest.raises(SqlError, match="sink.semantic"):
        clink.compile([ddl, "INSERT INTO kv VALUES (1)"])


def test_upserts_need_the_key_on_the_server(postgres, database: str) -> None:
    postgres.execute(database, "CREATE TABLE counts (k integer, n bigint)")
    ddl = (f"CREATE TABLE counts (k INT, n BIGINT, PRIMARY KEY (k) NOT ENFORCED) "
           f"WITH ({jdbc(postgres, database, 'counts')})")
    with pytest.raises(ConnectorError, match='ALTER TABLE "counts" ADD PRIMARY KEY \\("k"\\)'):
        clink.sql([SOURCES["dense"], ddl, "INSERT INTO counts SELECT k, COUNT(*) FROM t GROUP BY k"]).run()


def test_the_url_takes_flinks_form_and_a_plain_uri() -> None:
    assert connect_uri({"url": "jdbc:postgresql://h:5/db?user=u&password=p%40w&sslmode=disable"}) == (
        "postgresql://u:p%40w@h:5/db?sslmode=disable", "postgresql://u:***@h:5/db?sslmode=disable")
    assert connect_uri({"url": "postgresql://h/db", "username": "a b"})[0] == "postgresql://a%20b@h/db"


def test_without_the_driver_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "adbc_driver_postgresql" else found(name, *a))
    ddl = "CREATE TABLE kv (k INT) WITH ('connector' = 'jdbc', 'url' = 'jdbc:postgresql://h/db', 'table-name' = 'kv')"
    with pytest.raises(SqlError, match=r"pip install 'clink\[postgres\]'"):
        clink.compile([ddl, "INSERT INTO kv VALUES (1)"])


def test_a_table_in_a_schema_with_a_quoted_name(postgres, database: str, tmp_path: Path) -> None:
    postgres.execute(database, 'CREATE SCHEMA app', 'CREATE TABLE app."Counts" (k integer PRIMARY KEY, n bigint)')
    options = jdbc(postgres, database, 'app."Counts"')
    ddl = f"CREATE TABLE counts (k INT, n BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH ({options})"
    insert = "INSERT INTO counts SELECT k, COUNT(*) FROM t WHERE k IS NOT NULL GROUP BY k"
    plan = clink.compile([SOURCES["dense"], ddl, insert], name="schema.sql").runtime_plan
    config = {"execution.checkpointing.interval-rows": "200"}
    Job(plan, RuntimeContext(config=config, state_dir=tmp_path / "state", stdout=io.StringIO())).run()
    theirs = duckdb_answer("dense", "SELECT k, COUNT(*) FROM t WHERE k IS NOT NULL GROUP BY k")
    assert sorted(postgres.query(database, 'SELECT k, n FROM app."Counts"')) == theirs
    assert postgres.query(database, "SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'app' AND "
                          "tablename LIKE '_clink_stage_%'") == [(1,)]  # staged beside the table
    assert staged_rows(postgres, database) == 0
