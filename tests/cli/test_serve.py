"""``clink run q.sql --serve PORT``: each SELECT's live output as an Arrow Flight stream.

The run is a real subprocess on a free port; the tests read it with ``pyarrow.flight`` clients,
as any Flight client would, and compare the rows with DuckDB's answer over the same data.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

from clink.cli import main
from clink.runtime.changelog import materialize
from clink.runtime.plan import UPDATING
from tests.shared_duckdb import assert_same_rows, connect

TOKEN = "serve-test-token-1234"


class Run:
    """A ``clink run --serve 0`` subprocess, its port and what it says on standard error."""

    def __init__(self, sql_file: Path, *args: str, token: str | None = TOKEN) -> None:
        env = dict(os.environ)
        env.pop("CLINK_SERVE_TOKEN", None)
        if token is not None:
            env["CLINK_SERVE_TOKEN"] = token
        self.proc = subprocess.Popen([sys.executable, "-m", "clink", "run", str(sql_file), "--serve", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     cwd=sql_file.parent)
        self.lines: list[str] = []
        self._closed = False
        self._said = threading.Condition()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        serving = self.wait_for("serving ")
        self.port = int(serving.rsplit(":", 1)[1])

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            with self._said:
                self.lines.append(line.rstrip("\n"))
                self._said.notify_all()
        with self._said:
            self._closed = True
            self._said.notify_all()

    def wait_for(self, start: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        with self._said:
            while True:
                for line in self.lines:
                    if line.startswith(start):
                        return line
                assert not self._closed, f"the run ended without a line starting {start!r}:\n" + "\n".join(self.lines)
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"no line starting {start!r} in:\n" + "\n".join(self.lines)
                self._said.wait(min(remaining, 0.5))

    def client(self, token: str | None = TOKEN) -> tuple[flight.FlightClient, flight.FlightCallOptions]:
        headers = [(b"authorization", f"Bearer {token}".encode())] if token is not None else []
        return flight.connect(f"grpc://127.0.0.1:{self.port}"), flight.FlightCallOptions(headers=headers)

    def finish(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def runs():
    started: list[Run] = []

    def start(*args, **kwargs) -> Run:
        started.append(Run(*args, **kwargs))
        return started[-1]

    yield start
    for run in started:
        run.kill()


def _table(nulls: bool) -> pa.Table:
    rng = random.Random(23)

    def maybe(value):
        return None if nulls and rng.random() < 0.5 else value

    rows = [{"k": maybe(rng.randint(1, 7)), "v": maybe(rng.randint(-400, 400) / 8), "s": maybe(rng.choice("abcd"))}
            for _ in range(700)]
    return pa.Table.from_pylist(rows, schema=pa.schema([("k", pa.int64()), ("v", pa.float64()), ("s", pa.string())]))


def _read(client: flight.FlightClient, options: flight.FlightCallOptions, query: str) -> tuple[pa.Table, list[int]]:
    """Every batch of ``query`` to the end, and the first-row number each one came with."""
    reader = client.do_get(flight.Ticket(query.encode()), options=options)
    batches, first_rows = [], []
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        batches.append(chunk.data)
        first_rows.append(json.loads(chunk.app_metadata.to_pybytes())["first_row"])
    return pa.Table.from_batches(batches, schema=reader.schema), first_rows


APPEND = "SELECT k, v * 2 AS v2, s FROM t WHERE v > 0 OR s = 'a'"
UPDATE = "SELECT s, COUNT(*) AS n, SUM(v) AS total FROM t GROUP BY s"


@pytest.mark.parametrize("nulls", [False, True], ids=["dense", "nulls"])
def test_a_bounded_pipeline_serves_its_queries_as_duckdb_computes_them(tmp_path: Path, runs, nulls: bool) -> None:
    table = _table(nulls)
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=50)  # read in small batches
    sql = tmp_path / "q.sql"
    sql.write_text(f"CREATE TABLE t (k BIGINT, v DOUBLE, s STRING) WITH ('connector' = 'filesystem', "
                   f"'path' = 't.parquet', 'format' = 'parquet');\n{APPEND};\n{UPDATE};\n")
    run = runs(sql)
    client, options = run.client()
    infos = {info.descriptor.path[0].decode(): info for info in client.list_flights(options=options)}
    assert sorted(infos) == ["query_1", "query_2"]
    assert infos["query_2"].schema.names == ["s", "n", "total", "_rowkind"]
    schema = client.get_schema(flight.FlightDescriptor.for_path("query_1"), options=options).schema
    assert schema.names == ["k", "v2", "s"]
    with pytest.raises(flight.FlightServerError, match="no query named 'query_3'; this run serves query_1, query_2"):
        client.do_get(flight.Ticket(b"query_3"), options=options).read_all()

    con = connect()
    con.register("t", table)
    appended, first_rows = _read(client, options, "query_1")
    assert len(first_rows) > 1 and first_rows[0] == 0  # batch by batch, from the start of the run
    assert_same_rows(appended, con.execute(APPEND).fetchall())
    changes, _ = _read(client, options, "query_2")
    assert "-U" in changes.column("_rowkind").to_pylist()  # the changes themselves, with their kinds
    assert_same_rows(materialize(changes, UPDATING), con.execute(UPDATE).fetchall())
    # Both queries have been read to their ends: the run ends by itself.
    assert run.finish() == 0, "\n".join(run.lines)


SLOW = ("CREATE TABLE seq (a BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '400', "
        "'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '1000000000');\n"
        "SELECT a, a * a % 7 AS r FROM seq WHERE a % 3 <> 0;\n")


def _take(reader: flight.FlightStreamReader, rows: int) -> tuple[pa.Table, int]:
    batches, first = [], None
    while sum(b.num_rows for b in batches) < rows:
        chunk = reader.read_chunk()
        if first is None:
            first = json.loads(chunk.app_metadata.to_pybytes())["first_row"]
        batches.append(chunk.data)
    return pa.Table.from_batches(batches).slice(0, rows), first


def test_two_clients_read_a_slow_endless_source_live_until_ctrl_c(tmp_path: Path, runs) -> None:
    sql = tmp_path / "slow.sql"
    sql.write_text(SLOW)
    run = runs(sql)
    (one, options), (two, _) = run.client(), run.client()
    first_reader = one.do_get(flight.Ticket(b"query_1"), options=options)
    second_reader = two.do_get(flight.Ticket(b"query_1"), options=options)
    got_one, start_one = _take(first_reader, 200)
    got_two, start_two = _take(second_reader, 200)
    assert start_one == start_two == 0  # both from the start of the run: nothing was dropped
    want = connect().execute("SELECT i AS a, i * i % 7 AS r FROM range(1, 400) t(i) WHERE i % 3 <> 0 "
                             "ORDER BY i LIMIT 200").fetchall()
    assert [tuple(r.values()) for r in got_one.to_pylist()] == want  # in order, as produced
    assert got_two.equals(got_one)
    info = one.get_flight_info(flight.FlightDescriptor.for_path("query_1"), options=options)
    assert info.total_records == -1  # still running: no end in sight

    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130
    with pytest.raises(flight.FlightCancelledError, match="stopped before query_1 ended"):
        while True:
            first_reader.read_chunk()


def test_a_wrong_or_missing_token_is_refused(tmp_path: Path, runs) -> None:
    sql = tmp_path / "slow.sql"
    sql.write_text(SLOW)
    run = runs(sql)
    for token in (None, "not-the-token", TOKEN + "x"):
        client, options = run.client(token)
        with pytest.raises(flight.FlightUnauthenticatedError, match="holders of its token"):
            list(client.list_flights(options=options))
        with pytest.raises(flight.FlightUnauthenticatedError):
            client.do_get(flight.Ticket(b"query_1"), options=options).read_chunk()
    # Flight's basic-auth handshake takes the token as the password and answers with the bearer header.
    client = flight.connect(f"grpc://127.0.0.1:{run.port}")
    with pytest.raises(flight.FlightUnauthenticatedError):
        client.authenticate_basic_token(b"me", b"wrong")
    header = client.authenticate_basic_token(b"me", TOKEN.encode())
    assert header == (b"authorization", f"Bearer {TOKEN}".encode())
    options = flight.FlightCallOptions(headers=[header])
    assert [i.descriptor.path for i in client.list_flights(options=options)] == [[b"query_1"]]


def test_without_the_variable_a_random_token_is_printed(tmp_path: Path, runs) -> None:
    sql = tmp_path / "slow.sql"
    sql.write_text(SLOW)
    run = runs(sql, token=None)
    token = run.wait_for("token: ").removeprefix("token: ")
    assert len(token) >= 24 and token != TOKEN
    client, options = run.client(token)
    assert [i.descriptor.path for i in client.list_flights(options=options)] == [[b"query_1"]]
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(client.list_flights(options=run.client(TOKEN)[1]))


SEQUENCE = ("CREATE TABLE seq (a BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '{n}', "
            "'batch-size' = '{batch}', {rate}"
            "'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '{n}');\n"
            "SELECT a, a * 10 AS b FROM seq;\n")


def test_a_late_client_gets_what_the_bounded_buffer_kept_and_is_told_where_it_starts(tmp_path: Path, runs) -> None:
    sql = tmp_path / "late.sql"
    sql.write_text(SEQUENCE.format(n=5000, batch=100, rate=""))
    run = runs(sql, "--serve-buffer", "16 kb")
    run.wait_for("serve: the pipeline has ended")  # nobody has connected yet
    dropped = run.wait_for("serve: query_1 keeps its newest 16 kB")
    client, options = run.client()
    table, first_rows = _read(client, options, "query_1")
    start = first_rows[0]
    assert 0 < start < 5000
    assert int(dropped.split("its first ")[1].split(" ")[0]) <= start  # said when the first rows went
    # What it gets is the tail of the output, without a gap: rows start+1 .. 5000.
    want = connect().execute(f"SELECT i AS a, i * 10 AS b FROM range({start + 1}, 5001) t(i)").fetchall()
    assert [tuple(r.values()) for r in table.to_pylist()] == want
    assert table.nbytes <= 16384 + 100 * 16  # the bound, give or take the batch that crossed it
    assert run.finish() == 0


def test_a_slow_client_holds_the_pipeline_back_instead_of_losing_rows(tmp_path: Path, runs) -> None:
    sql = tmp_path / "slow.sql"
    # 40,000 rows of about 210 bytes: far more than the buffer and than gRPC's own send window.
    sql.write_text("CREATE TABLE seq (a BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '40000', "
                   "'batch-size' = '400', 'fields.a.kind' = 'sequence', 'fields.a.start' = '1', "
                   "'fields.a.end' = '40000');\n"
                   "SELECT a, CONCAT(CAST(a AS STRING), REPEAT('x', 200)) AS pad FROM seq;\n")
    run = runs(sql, "--serve-buffer", "256 kb")
    client, options = run.client()
    reader = client.do_get(flight.Ticket(b"query_1"), options=options)
    batches, first_rows = [], []
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        batches.append(chunk.data.select(["a"]))
        first_rows.append(json.loads(chunk.app_metadata.to_pybytes())["first_row"])
        time.sleep(0.01)  # a slow reader
    start = first_rows[0]
    # From where it started, every row, in order: the pipeline waited for this client.
    assert first_rows == [start + sum(b.num_rows for b in batches[:i]) for i in range(len(batches))]
    assert pa.Table.from_batches(batches).column("a").to_pylist() == list(range(start + 1, 40001))
    assert start < 20000
    assert run.finish() == 0
    run.wait_for("serve: a client of query_1 is more than 256 kB behind: the pipeline waits for it")


def test_serving_options_clink_does_not_take_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = tmp_path / "q.sql"
    sql.write_text(SEQUENCE.format(n=10, batch=5, rate=""))
    assert main(["run", str(sql), "--serve-host", "0.0.0.0"]) == 2
    assert "--serve-host applies to --serve PORT" in capsys.readouterr().err
    assert main(["run", str(sql), "--serve", "0", "--serve-buffer", "lots"]) == 2
    assert "--serve-buffer: cannot read the size 'lots'" in capsys.readouterr().err
    assert main(["run", str(sql), "--serve", "70000"]) == 2
    assert "--serve takes a port from 0" in capsys.readouterr().err
    assert main(["run", str(sql), "--serve", "0", "--target", "ray"]) == 2
    assert "a job on Ray cannot be served" in capsys.readouterr().err
    insert = tmp_path / "insert.sql"
    insert.write_text("CREATE TABLE seq (a BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '3');\n"
                      "CREATE TABLE out (a BIGINT) WITH ('connector' = 'blackhole');\n"
                      "INSERT INTO out SELECT a FROM seq;\n")
    assert main(["run", str(insert), "--serve", "0"]) == 2
    assert "it has none" in capsys.readouterr().err
    setting = tmp_path / "set.sql"
    setting.write_text("SET 'serve.port' = '8815';\n" + SEQUENCE.format(n=10, batch=5, rate=""))
    assert main(["run", str(setting)]) == 2
    err = capsys.readouterr().err
    assert "unknown setting 'serve.port'" in err and "set.sql:1:" in err


def test_ctrl_c_ends_the_run_even_while_a_client_has_stopped_reading(tmp_path: Path, runs) -> None:
    sql = tmp_path / "big.sql"
    sql.write_text("CREATE TABLE seq (a BIGINT) WITH ('connector' = 'datagen', 'batch-size' = '400', "
                   "'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '100000000');\n"
                   "SELECT a, CONCAT(CAST(a AS STRING), REPEAT('x', 200)) AS pad FROM seq;\n")
    run = runs(sql, "--serve-buffer", "1 mb")
    client, options = run.client()
    reader = client.do_get(flight.Ticket(b"query_1"), options=options)
    reader.read_chunk()  # then nothing more: its stream stays blocked inside gRPC
    run.wait_for("serve: a client of query_1 is more than 1 MB behind")
    time.sleep(2)  # gRPC's windows fill up: the server's write of the next batch blocks
    run.proc.send_signal(signal.SIGINT)
    assert run.finish(timeout=30) == 130
    run.wait_for("serve: a client stopped reading without closing its stream; not waiting for it after 5 s")


def test_ctrl_c_with_a_state_directory_stops_with_a_checkpoint_and_cuts_the_streams(tmp_path: Path, runs) -> None:
    sql = tmp_path / "slow.sql"
    sql.write_text(SLOW)
    run = runs(sql, "--state-dir", str(tmp_path / "state"))
    client, options = run.client()
    reader = client.do_get(flight.Ticket(b"query_1"), options=options)
    got, start = _take(reader, 50)
    assert start == 0 and got.column("a").to_pylist()[:3] == [1, 2, 4]
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 0
    run.wait_for("stopped with checkpoint 1; run again with --state-dir")
    with pytest.raises(flight.FlightCancelledError, match="stopped before query_1 ended"):
        while True:
            reader.read_chunk()


def test_a_pipeline_failure_ends_the_streams_with_its_error(tmp_path: Path, runs) -> None:
    sql = tmp_path / "bad.sql"
    sql.write_text("CREATE TABLE seq (a BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '400', "
                   "'batch-size' = '20', 'fields.a.kind' = 'sequence', 'fields.a.start' = '1', "
                   "'fields.a.end' = '1000000000');\n"
                   "SELECT CAST(CASE WHEN a = 150 THEN 'x' ELSE CAST(a AS STRING) END AS INT) AS v FROM seq;\n")
    run = runs(sql)
    client, options = run.client()
    reader = client.do_get(flight.Ticket(b"query_1"), options=options)
    rows = []
    with pytest.raises(flight.FlightServerError, match="the pipeline failed, so query_1 ends here: .*'x'"):
        while True:
            rows.extend(reader.read_chunk().data.column("v").to_pylist())
    assert rows == list(range(1, len(rows) + 1)) and len(rows) < 150
    assert run.finish() == 1
    run.wait_for("bad.sql:2:8: error: pipeline failed")
