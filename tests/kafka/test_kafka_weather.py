"""The kafka connector when the brokers misbehave: a missing topic, a refused login, brokers that
go away or hang in the middle of a run. Each fails the job, within 'connection.timeout', with an
error that names the table, the brokers and what to look at; a job whose broker hung resumes,
once the broker answers again, with every row exactly once in the output.

A *restart* of the broker cannot be tested here: the Tansu binary the tests use keeps topics in
memory only (its PostgreSQL storage is not built in), so a restarted broker has no topics. A
frozen broker (SIGSTOP, then SIGCONT) is the test of "the broker is gone, and comes back"."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import confluent_kafka
import pytest

import clink
from tests.kafka.conftest import running_broker
from tests.kafka.test_kafka_exactly_once import clink_run, output

BOUNDED = {"scan.startup.mode": "earliest-offset", "scan.bounded.mode": "latest-offset"}


def kafka_ddl(name: str, columns: str, topic: str, servers: str, **options: str) -> str:
    opts = {"connector": "kafka", "topic": topic, "properties.bootstrap.servers": servers, **options}
    return f"CREATE TABLE {name} ({columns}) WITH ({', '.join(f'{k!r} = {v!r}' for k, v in opts.items())})"


def test_a_missing_topic_is_named(broker) -> None:
    ddl = kafka_ddl("t", "n BIGINT", "no-such-topic", broker.servers, format="json", **BOUNDED)
    with pytest.raises(clink.ConnectorError, match=f"table 't': no topic 'no-such-topic' in '{broker.servers}'"):
        clink.sql([ddl, "SELECT n FROM t"]).to_pylist()


def test_json_fields_absent_from_a_message_read_as_null(broker) -> None:
    topic = broker.topic()
    broker.produce(topic, [(None, b'{"n": 1, "s": "a"}'), (None, b'{"n": 2}'), (None, b'{"other": 3}')],
                   partition=0)
    ddl = kafka_ddl("t", "n BIGINT, s STRING", topic, broker.servers, format="json", **BOUNDED)
    assert clink.sql([ddl, "SELECT n, s FROM t"]).to_pylist() == [
        {"n": 1, "s": "a"}, {"n": 2, "s": None}, {"n": None, "s": None}]


def test_an_unreachable_broker_fails_within_the_timeout() -> None:
    ddl = kafka_ddl("t", "n BIGINT", "x", "127.0.0.1:1", format="json", **BOUNDED,
                    **{"connection.timeout": "2s"})
    with pytest.raises(clink.ConnectorError, match="table 't': cannot list the topics of '127.0.0.1:1' "
                                                   "\\(waited up to 2 s, 'connection.timeout'\\)"):
        clink.sql([ddl, "SELECT n FROM t"]).to_pylist()


def test_a_timeout_below_a_second_is_a_positioned_error() -> None:
    ddl = kafka_ddl("t", "n BIGINT", "x", "127.0.0.1:1", format="json", **{"connection.timeout": "10ms"})
    with pytest.raises(clink.SqlError, match="at least 1 s") as info:
        clink.compile([ddl, "SELECT n FROM t"])
    assert ddl[info.value.span.col - 1:].startswith("'connection.timeout'")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory):
    """A broker that requires SASL authentication (``--authentication``)."""
    with running_broker(tmp_path_factory.mktemp("sasl"), "--authentication") as running:
        yield running


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_a_refused_login_names_the_login_options_and_not_the_password(guarded, mechanism: str) -> None:
    # Tansu 0.6 with --authentication refuses these logins (its log: NoSharedMechanism, as no user
    # can be created on its memory storage from outside): the client sees the connection closed.
    ddl = kafka_ddl("t", "n BIGINT", "x", guarded.servers, format="json", **BOUNDED,
                    **{"connection.timeout": "3s", "properties.security.protocol": "SASL_PLAINTEXT",
                       "properties.sasl.mechanism": mechanism, "properties.sasl.username": "app",
                       "properties.sasl.password": "not-the-password"})
    with pytest.raises(clink.ConnectorError) as info:
        clink.sql([ddl, "SELECT n FROM t"]).to_pylist()
    message = str(info.value)
    assert f"table 't': cannot list the topics of '{guarded.servers}'" in message
    assert "'properties.sasl.*'" in message or "'properties.sasl.password'" in message
    assert "not-the-password" not in message


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_sink_whose_login_is_refused_stops_within_the_timeout(guarded, delivery: str) -> None:
    ddl = kafka_ddl("o", "n BIGINT", "x", guarded.servers, format="json",
                    **{"connection.timeout": "3s", "properties.security.protocol": "SASL_PLAINTEXT",
                       "properties.sasl.mechanism": "PLAIN", "properties.sasl.username": "app",
                       "properties.sasl.password": "not-the-password", "sink.delivery-guarantee": delivery,
                       "sink.transactional-id-prefix": "tx-login"})
    with pytest.raises(clink.ConnectorError) as info:
        clink.sql([ddl, "INSERT INTO o VALUES (1), (2)"]).run()
    message = str(info.value)
    assert message.startswith("table 'o': ") and "not-the-password" not in message
    if delivery == "at-least-once":
        # The client either reports the closed handshake as an authentication error (at once) or
        # only fails to deliver (after the timeout), depending on when the broker closes it.
        assert (f"2 messages were not delivered to 'x' at '{guarded.servers}' in 3 s ('connection.timeout')" in message
                or "the brokers refused the login" in message), message
        assert "'properties.sasl." in message
    else:
        assert "cannot start Kafka transactions (transactional id 'tx-login-0')" in message


def test_an_exactly_once_sink_without_checkpoints_writes_rows_of_not_null_columns(broker) -> None:
    # VALUES gives NOT NULL columns: the rows held until the end must still join into one table.
    topic = broker.topic()
    ddl = kafka_ddl("o", "n BIGINT", topic, broker.servers, format="json",
                    **{"sink.delivery-guarantee": "exactly-once", "sink.transactional-id-prefix": f"tx-{topic}"})
    clink.sql([ddl, "INSERT INTO o VALUES (1), (2)"]).run()
    assert [json.loads(m[3]) for m in broker.read(topic)] == [{"n": 1}, {"n": 2}]


def test_no_login_at_a_broker_that_requires_one_is_a_clear_error(guarded) -> None:
    ddl = kafka_ddl("t", "n BIGINT", "x", guarded.servers, format="json", **BOUNDED,
                    **{"connection.timeout": "3s"})
    with pytest.raises(clink.ConnectorError, match=f"cannot list the topics of '{guarded.servers}'"):
        clink.sql([ddl, "SELECT n FROM t"]).to_pylist()


SQL = """
SET 'execution.checkpointing.interval-rows' = '100';
CREATE TABLE src (n BIGINT) WITH (
  'connector' = 'kafka', 'topic' = '{source}', 'properties.bootstrap.servers' = '{servers}', 'format' = 'json',
  'properties.max.poll.records' = '50', 'scan.startup.mode' = 'earliest-offset', 'connection.timeout' = '3s',
  'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = 'partition:0,offset:{end}');
CREATE TABLE dst (n BIGINT, doubled BIGINT) WITH (
  'connector' = 'kafka', 'topic' = '{sink}', 'properties.bootstrap.servers' = '{servers}', 'format' = 'json',
  'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = 'tx-{sink}',
  'connection.timeout' = '3s');
INSERT INTO dst SELECT n, n * 2 FROM src;
"""
HALF = 600


def produce(broker, topic: str, numbers: range) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.servers})
    for n in numbers:
        producer.produce(topic, value=json.dumps({"n": n}).encode(), partition=0)
    producer.flush(30)


def start_half_way(broker, folder: Path) -> tuple[Path, str, subprocess.Popen]:
    """A job reading a topic bounded at 2 * HALF messages of which HALF exist: it waits for the
    rest once it has written the first half."""
    source, sink = broker.topic(), broker.topic()
    produce(broker, source, range(HALF))
    folder.mkdir(parents=True, exist_ok=True)
    sql_file = folder / "pipeline.sql"
    sql_file.write_text(SQL.format(source=source, sink=sink, servers=broker.servers, end=2 * HALF))
    process = clink_run(sql_file, folder / "state")
    deadline = time.monotonic() + 120
    while len(output(broker, sink)) < HALF - 100:  # checkpoints every 100 rows: all but the last
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "the job did not write the first half"
        time.sleep(0.2)
    return sql_file, source, process


def stopped(process: subprocess.Popen) -> str:
    try:
        _, err = process.communicate(timeout=120)  # a guard against a hang, not a measurement
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("the job did not stop when the broker went away") from None
    assert process.returncode == 1, err
    assert "Traceback" not in err
    return err


@pytest.mark.slow
def test_a_broker_that_hangs_mid_run_fails_the_job_and_the_rerun_is_exactly_once(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker:
        sql_file, source, process = start_half_way(broker, tmp_path / "job")
        broker.process.send_signal(signal.SIGSTOP)
        try:
            err = stopped(process)
        finally:
            broker.process.send_signal(signal.SIGCONT)
        assert "table 'src'" in err or "table 'dst'" in err, err
        assert broker.servers in err and "'connection.timeout'" in err, err
        produce(broker, source, range(HALF, 2 * HALF))
        process = clink_run(sql_file, sql_file.parent / "state")
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert "resuming from checkpoint" in err
        sink = sql_file.read_text().split("'topic' = '")[2].split("'")[0]
        assert output(broker, sink) == list(range(2 * HALF))


@pytest.mark.slow
def test_a_broker_that_goes_away_mid_run_fails_the_job_naming_table_and_brokers(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker:
        _, _, process = start_half_way(broker, tmp_path / "job")
        broker.process.kill()
        broker.process.wait()
        err = stopped(process)
        assert "table 'src'" in err or "table 'dst'" in err, err
        assert broker.servers in err and "'connection.timeout'" in err, err
