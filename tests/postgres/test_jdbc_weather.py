"""The jdbc connector when the server misbehaves: PostgreSQL taken down in the middle of a run
(the job fails with an error naming the table and the server, and `clink run` again, once the
server is back, leaves the table as an uninterrupted run's), a column of the wrong type, and the
bound on connection attempts."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import clink
from clink.errors import ConnectorError, SqlError
from tests.postgres.conftest import running_postgres
from tests.postgres.test_jdbc_kills import clink_run, pipeline, tables


def wait_for_rows(server, database: str, deadline_s: float = 120) -> None:
    """Until the sink has committed a checkpoint's rows (so the run is in the middle)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if server.query(database, "SELECT count(*) FROM raw")[0][0] > 0:
            return
        time.sleep(0.05)
    raise AssertionError("the sink never committed rows")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_server_restart_mid_run_fails_clearly_and_the_rerun_leaves_the_table_exact(tmp_path: Path,
                                                                                   mode: str) -> None:
    with running_postgres() as server:
        rows = 40_000
        sql_file, database = pipeline(server, tmp_path / "reference", rows)
        done = clink_run(sql_file, sql_file.parent / "state")
        _, err = done.communicate(timeout=300)
        assert done.returncode == 0, err
        expected = tables(server, database)

        sql_file, database = pipeline(server, tmp_path / "run", rows, rate=8_000)
        state = sql_file.parent / "state"
        process = clink_run(sql_file, state)
        wait_for_rows(server, database)
        server.stop(mode)
        try:
            _, err = process.communicate(timeout=180)  # a guard against a hang, not a measurement
        except subprocess.TimeoutExpired:
            process.kill()
            raise AssertionError("the job did not stop when PostgreSQL went away") from None
        assert process.returncode == 1, err
        assert "Traceback" not in err
        assert "error: table 'raw'" in err or "error: table 'totals'" in err, err
        assert "PostgreSQL" in err and f"127.0.0.1:{server.port}" in err and "clink-secret" not in err
        server.start()
        process = clink_run(sql_file, state)
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        assert "resuming from checkpoint" in err
        assert tables(server, database) == expected
        staged = server.query(database, "SELECT count(*) FROM pg_tables WHERE tablename LIKE '_clink_stage_%'")
        if staged[0][0]:
            assert server.query(database, "SELECT count(*) FROM _clink_jdbc_ledger WHERE NOT committed") == [(0,)]


def jdbc(server, database: str, table: str, **extra: str) -> str:
    options = {"connector": "jdbc", "url": server.jdbc_url(database), "table-name": table,
               "username": "clink", "password": "clink-secret", **extra}
    return ", ".join(f"'{k}' = '{v}'" for k, v in options.items())


def test_a_column_of_the_wrong_type_is_an_error_naming_it(postgres, database: str) -> None:
    postgres.execute(database, "CREATE TABLE kv (k integer, d date)")
    ddl = f"CREATE TABLE kv (k INT, d BIGINT) WITH ({jdbc(postgres, database, 'kv')})"
    with pytest.raises(ConnectorError) as info:
        clink.sql([ddl, "INSERT INTO kv VALUES (1, 20260101)"]).run()
    message = str(info.value)
    assert "table 'kv'" in message and 'column "d" is of type date but expression is of type bigint' in message
    assert postgres.query(database, "SELECT count(*) FROM kv") == [(0,)]


def test_a_missing_column_is_an_error_naming_it(postgres, database: str) -> None:
    postgres.execute(database, "CREATE TABLE kv (k integer)")
    ddl = f"CREATE TABLE kv (k INT, v STRING) WITH ({jdbc(postgres, database, 'kv')})"
    with pytest.raises(ConnectorError, match="has no column 'v' \\(it has: k integer\\)"):
        clink.sql([ddl, "INSERT INTO kv VALUES (1, 'a')"]).run()


def test_a_server_that_never_answers_is_given_up_on_after_the_timeout(postgres, database: str) -> None:
    import socket

    with socket.socket() as silent:  # accepts connections and says nothing, as a hung server would
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        ddl = (f"CREATE TABLE kv (k INT) WITH ({jdbc(postgres, database, 'kv')}, "
               "'connection.max-retry-timeout' = '2s')").replace(str(postgres.port), str(port))
        with pytest.raises(ConnectorError, match=f"cannot connect to PostgreSQL at .*127.0.0.1:{port}.*timeout.*"
                                                 "\\(after 2 s, 'connection.max-retry-timeout'\\)"):
            clink.sql([ddl, "INSERT INTO kv VALUES (1)"]).run()


def test_a_timeout_below_a_second_is_a_positioned_error(postgres) -> None:
    ddl = (f"CREATE TABLE kv (k INT) WITH ({jdbc(postgres, 'x', 'kv')}, "
           "'connection.max-retry-timeout' = '200ms')")
    with pytest.raises(SqlError, match="at least 1 s") as info:
        clink.compile([ddl, "INSERT INTO kv VALUES (1)"])
    assert ddl[info.value.span.col - 1:].startswith("'connection.max-retry-timeout'")
