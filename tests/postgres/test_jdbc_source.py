"""The jdbc scan source against a real PostgreSQL: a whole table at parallelism 1 and split by a
column at 1 and 4 subtasks (compared with DuckDB reading the same rows), types read back as the
SQL table declares them, and a restore from a checkpoint taken in the middle of a range (at another
parallelism, and at the same one: each subtask from its own position, as after a kill)."""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

import clink
from clink.errors import ConnectorError, SqlError
from clink.runtime.connectors.base import TableSpec
from clink.runtime.connectors.jdbc import JDBC
from clink.runtime.context import RuntimeContext

ROWS = 3000


@pytest.fixture(scope="module")
def shop(postgres) -> str:
    """A table of 3000 orders, every fifth amount NULL and every seventh note NULL."""
    database = postgres.new_database()
    postgres.execute(
        database,
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer integer, amount numeric(10, 2), note text, "
        "placed timestamp(3))",
        f"INSERT INTO orders SELECT i, i % 37, CASE WHEN i % 5 = 0 THEN NULL ELSE (i * 7 % 1000) / 4.0 END, "
        f"CASE WHEN i % 7 = 0 THEN NULL ELSE 'n' || (i % 11) END, "
        f"TIMESTAMP '2024-01-01' + i * INTERVAL '1 minute 1.5 second' FROM generate_series(1, {ROWS}) i")
    return database


def ddl(postgres, database: str, **extra: str) -> str:
    options = {"connector": "jdbc", "url": postgres.jdbc_url(database), "table-name": "orders",
               "username": "clink", "password": "clink-secret", **extra}
    return ("CREATE TABLE orders (id BIGINT, customer INT, amount DECIMAL(10, 2), note STRING, placed TIMESTAMP(3)) "
            f"WITH ({', '.join(f'{k!r} = {v!r}' for k, v in options.items())})")


def server_rows(postgres, database: str, where: str = "TRUE") -> list[dict]:
    """The rows as PostgreSQL holds them (the driver gives NUMERIC as text: made Decimal here)."""
    rows = postgres.query(database, f"SELECT id, customer, amount, note, placed FROM orders WHERE {where}")
    return [{"id": i, "customer": c, "amount": None if a is None else Decimal(a), "note": n, "placed": p}
            for i, c, a, n, p in rows]


def test_a_whole_table_is_read_once(postgres, shop: str) -> None:
    table = clink.sql([ddl(postgres, shop, **{"scan.fetch-size": "100"}), "SELECT * FROM orders"]).to_arrow()
    assert table.schema.field("amount").type == pa.decimal128(10, 2)
    assert table.schema.field("placed").type == pa.timestamp("ms")
    theirs = Counter(tuple(r.values()) for r in server_rows(postgres, shop))
    assert Counter(tuple(r.values()) for r in table.to_pylist()) == theirs
    assert table.num_rows == ROWS


@pytest.mark.parametrize("parallelism", [1, 4])
def test_a_partitioned_scan_matches_duckdb(postgres, shop: str, parallelism: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from clink.runtime.connectors import jdbc

    shares = []
    opened = jdbc.JdbcSourceReader.__init__

    def recording(self, spec, ctx) -> None:
        shares.append((spec.subtask, spec.parallelism))
        opened(self, spec, ctx)

    monkeypatch.setattr(jdbc.JdbcSourceReader, "__init__", recording)
    options = {"scan.partition.column": "id", "scan.partition.num": "7", "scan.partition.lower-bound": "1",
               "scan.partition.upper-bound": "2500", "scan.fetch-size": "64"}
    query = ("SELECT customer, COUNT(*) AS n, SUM(amount) AS total, COUNT(note) AS notes FROM orders "
             "GROUP BY customer")
    result = clink.sql([ddl(postgres, shop, **options), query], config={"parallelism.default": str(parallelism)})
    ours = sorted(tuple(r.values()) for r in result.to_arrow().to_pylist())
    # As in Flink, the bounds filter: ids above the upper bound are not read.
    con = duckdb.connect()
    con.register("orders", pa.Table.from_pylist(server_rows(postgres, shop, "id <= 2500")))
    theirs = sorted(con.execute(query).fetchall())
    assert ours == theirs and sum(r[1] for r in ours) == 2500
    assert isinstance(ours[0][2], Decimal)  # still exact decimals
    assert sorted(shares) == [(i, parallelism) for i in range(parallelism)]


def reader(postgres, database: str, subtask: int, parallelism: int):
    schema = pa.schema([("id", pa.int64()), ("note", pa.string())])
    options = {"url": postgres.uri(database), "table-name": "orders", "scan.partition.column": "id",
               "scan.partition.num": "5", "scan.partition.lower-bound": "1",
               "scan.partition.upper-bound": str(ROWS), "scan.fetch-size": "250"}
    spec = TableSpec(name="orders", schema=schema, table_schema=schema, options=options, subtask=subtask,
                     parallelism=parallelism)
    return JDBC.create_source(spec, RuntimeContext(config={}, stdout=io.StringIO()))


def drain(r) -> list[int]:
    ids = []
    while not r.finished:
        batch = r.poll()
        if batch is not None:
            ids.extend(batch.column("id").to_pylist())
    return ids


@pytest.mark.parametrize("resume_at", [1, 2])
def test_a_restore_mid_range_at_another_parallelism_reads_the_rest_once(postgres, shop: str, resume_at: int) -> None:
    first = [reader(postgres, shop, i, 2) for i in range(2)]
    seen = []
    for r in first:
        for _ in range(3):  # 750 rows of its first range (600 rows), into its second
            seen.extend(r.poll().column("id").to_pylist())
    positions = [r.position() for r in first]
    for r in first:
        r.close()
    resumed = [reader(postgres, shop, i, resume_at) for i in range(resume_at)]
    for r in resumed:
        r.seek_shares(positions)
        seen.extend(drain(r))
    assert sorted(seen) == list(range(1, ROWS + 1))


def test_a_restore_at_the_same_parallelism_resumes_each_subtask_from_its_own_position(postgres, shop: str) -> None:
    """As the executor restores an unchanged parallelism: each reader seeks its own position."""
    first = [reader(postgres, shop, i, 2) for i in range(2)]
    seen = []
    for r in first:
        for _ in range(3):
            seen.extend(r.poll().column("id").to_pylist())
    positions = [r.position() for r in first]
    for r in first:
        r.close()
    resumed = [reader(postgres, shop, i, 2) for i in range(2)]
    for r, position in zip(resumed, positions, strict=True):
        r.seek(position)
        seen.extend(drain(r))
    assert sorted(seen) == list(range(1, ROWS + 1))


def test_a_job_killed_after_a_checkpoint_resumes_a_split_scan_at_the_same_parallelism(postgres, shop: str,
                                                                                      tmp_path) -> None:
    options = {"scan.partition.column": "id", "scan.partition.num": "4", "scan.partition.lower-bound": "1",
               "scan.partition.upper-bound": str(ROWS), "scan.fetch-size": "100"}
    (tmp_path / "pipeline.sql").write_text(
        "SET 'execution.checkpointing.interval-rows' = '500';\nSET 'parallelism.default' = '2';\n"
        f"{ddl(postgres, shop, **options)};\n"
        f"CREATE TABLE seen (id BIGINT) WITH ('connector' = 'sqlite', 'path' = '{tmp_path / 'out.db'}');\n"
        "INSERT INTO seen SELECT id FROM orders;\n")

    def run(env: dict) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "clink", "run", "pipeline.sql", "--state-dir", "state"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, **env})

    killed = run({"CLINK_FAULT": "after_checkpoint_before_sink_commit:2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run({})
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from checkpoint" in resumed.stderr
    with sqlite3.connect(tmp_path / "out.db") as conn:
        ids = sorted(row[0] for row in conn.execute("SELECT id FROM seen"))
    assert ids == list(range(1, ROWS + 1))


def test_a_missing_table_is_a_clear_error(postgres, shop: str) -> None:
    text = ddl(postgres, shop).replace("'table-name' = 'orders'", "'table-name' = 'order'")
    with pytest.raises(ConnectorError, match='PostgreSQL table "order" does not exist'):
        clink.sql([text, "SELECT * FROM orders"]).to_arrow()


def test_partition_options_come_together(postgres) -> None:
    with pytest.raises(SqlError, match="scan.partition.num"):
        clink.compile([ddl(postgres, "x", **{"scan.partition.column": "id"}), "SELECT * FROM orders"])
    with pytest.raises(SqlError, match="'note' is STRING, not a numeric"):
        clink.compile([ddl(postgres, "x", **{"scan.partition.column": "note", "scan.partition.num": "2",
                                             "scan.partition.lower-bound": "1", "scan.partition.upper-bound": "9"}),
                       "SELECT * FROM orders"])
