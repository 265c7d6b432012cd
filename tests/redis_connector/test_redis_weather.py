"""The redis connector when the server misbehaves: a wrong or missing password, a server that
never answers, and a server restarted in the middle of a run. Each fails the job with an error
that names the table and the server (never its password), and after a restart of the server
`clink run` again leaves the exactly-once stream as an uninterrupted run's."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

import clink
from clink.errors import ConnectorError, SqlError
from tests.redis_connector.conftest import running_redis
from tests.redis_connector.test_redis_crashes import clink_run, entries, sink_pipeline

SECRET = "s3cret-pass"


def read_k(options: str) -> list:
    return clink.sql([f"CREATE TABLE s (k BIGINT) WITH ('connector' = 'redis', {options}, 'stream' = 's', "
                      "'scan.bounded.mode' = 'latest')", "SELECT k FROM s"]).to_pylist()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory):
    """A server that asks for a password, with one entry in stream 's'."""
    with running_redis(tmp_path_factory.mktemp("guarded"), "--save", "", "--requirepass", SECRET) as server:
        client = redis.Redis.from_url(server.url, password=SECRET)
        client.xadd("s", {"k": "7"})
        client.close()
        yield server


def test_the_right_password_reads(guarded) -> None:
    assert read_k(f"'host' = '127.0.0.1', 'port' = '{guarded.port}', 'password' = '{SECRET}'") == [{"k": 7}]
    assert read_k(f"'url' = 'redis://:{SECRET}@127.0.0.1:{guarded.port}/0'") == [{"k": 7}]


@pytest.mark.parametrize("form", ["option", "url"])
def test_a_wrong_password_is_a_clear_error_that_does_not_show_it(guarded, form: str) -> None:
    options = (f"'host' = '127.0.0.1', 'port' = '{guarded.port}', 'password' = 'wrong-one'" if form == "option"
               else f"'url' = 'redis://:wrong-one@127.0.0.1:{guarded.port}/0'")
    with pytest.raises(ConnectorError) as info:
        read_k(options)
    message = str(info.value)
    assert "table 's': Redis at " in message and f"127.0.0.1:{guarded.port}" in message
    assert "refused the login" in message and "'password'" in message
    assert "wrong-one" not in message


def test_a_missing_password_says_that_one_is_needed(guarded) -> None:
    with pytest.raises(ConnectorError, match="needs a password: set the 'password' option"):
        read_k(f"'url' = 'redis://127.0.0.1:{guarded.port}'")


def test_a_server_that_never_answers_is_given_up_on_after_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections and says nothing, as a hung server would
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with pytest.raises(ConnectorError, match=f"cannot reach Redis at redis://127.0.0.1:{port}: Timeout"):
            read_k(f"'url' = 'redis://127.0.0.1:{port}', 'connection.timeout' = '1s'")


def test_a_bad_timeout_is_a_positioned_error() -> None:
    ddl = ("CREATE TABLE s (k BIGINT) WITH ('connector' = 'redis', 'stream' = 's', "
           "'connection.timeout' = 'soon')")
    with pytest.raises(SqlError) as info:
        clink.compile([ddl, "SELECT k FROM s"])
    assert ddl[info.value.span.col - 1:].startswith("'connection.timeout'")


@pytest.mark.slow
@pytest.mark.parametrize("kill", [False, True], ids=["shutdown", "kill"])
def test_a_server_restart_mid_run_fails_clearly_and_the_rerun_writes_each_row_once(tmp_path: Path,
                                                                                  kill: bool) -> None:
    # Every write reaches the disk before Redis answers it: a restart loses nothing acknowledged.
    (tmp_path / "data").mkdir()
    with running_redis(tmp_path / "data", "--appendonly", "yes", "--appendfsync", "always", "--save", "") as server:
        sql_file = sink_pipeline(tmp_path / "reference", server.url, "reference")
        done = clink_run(sql_file, sql_file.parent / "state")
        _, err = done.communicate(timeout=120)
        assert done.returncode == 0, err
        client = redis.Redis.from_url(server.url)
        expected = entries(client, "reference")
        client.close()

        sql_file = sink_pipeline(tmp_path / "run", server.url, "out", rate=" 'rows-per-second' = '6000',")
        state = sql_file.parent / "state"
        process = clink_run(sql_file, state)
        client = redis.Redis.from_url(server.url)
        deadline = time.monotonic() + 60
        while not client.exists("out"):  # until a checkpoint's rows are in the stream
            assert time.monotonic() < deadline, "the sink never committed"
            time.sleep(0.05)
        client.close()
        server.stop(kill=kill)
        try:
            _, err = process.communicate(timeout=120)  # a guard against a hang, not a measurement
        except subprocess.TimeoutExpired:
            process.kill()
            raise AssertionError("the job did not stop when Redis went away") from None
        assert process.returncode == 1, err
        assert "Traceback" not in err
        assert "table 'out'" in err and f"127.0.0.1:{server.port}" in err, err
        server.start()
        process = clink_run(sql_file, state)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert "resuming from checkpoint" in err
        client = redis.Redis.from_url(server.url)
        got = entries(client, "out")
        assert got == expected, f"{(got - expected).total()} entries too many, {(expected - got).total()} missing"
        assert not client.exists("_clink:pending:out")
        client.close()
