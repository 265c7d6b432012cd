"""Exactly-once from topic to topic under crashes: ``clink run`` reads a kafka source (offsets in
its checkpoints) and writes a kafka sink with 'exactly-once' (a transaction per checkpoint). It is
killed at each point of the checkpoint protocol and restarted from its state directory; the output
topic, read with isolation.level = read_committed, must hold every input row exactly once.

What this proves on Tansu, and what it does not: the killed run never leaves an open transaction
with rows in it (rows reach Kafka only inside the commit of a completed checkpoint, from the staged
file), so read_committed is not asked to hide an aborted transaction, which Tansu would not do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import pytest

ROWS_PER_PARTITION = 400
PARTITIONS = 3
FAULT_POINTS = ["after_barrier", "after_state_written_before_commit", "during_manifest_rename",
                "after_checkpoint_before_sink_commit", "during_sink_commit"]

SQL = """
SET 'execution.checkpointing.interval-rows' = '100';
SET 'parallelism.default' = '{parallelism}';
CREATE TABLE src (n BIGINT, p INT) WITH (
  'connector' = 'kafka', 'topic' = '{source}', 'properties.bootstrap.servers' = '{servers}', 'format' = 'json',
  'properties.max.poll.records' = '50', 'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = '{ends}');
CREATE TABLE dst (n BIGINT, doubled BIGINT) WITH (
  'connector' = 'kafka', 'topic' = '{sink}', 'properties.bootstrap.servers' = '{servers}', 'format' = 'json',
  'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = '{prefix}');
INSERT INTO dst SELECT n, n * 2 FROM src;
"""


def source_topic(broker) -> str:
    topic = broker.topic(partitions=PARTITIONS)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.servers})
    for p in range(PARTITIONS):
        for i in range(ROWS_PER_PARTITION):
            n = p * ROWS_PER_PARTITION + i
            producer.produce(topic, value=json.dumps({"n": n, "p": p}).encode(), partition=p)
    producer.flush(30)
    return topic


def pipeline(folder: Path, broker, source: str, parallelism: int = 1) -> tuple[Path, str]:
    sink = broker.topic(partitions=1)
    ends = ";".join(f"partition:{p},offset:{ROWS_PER_PARTITION}" for p in range(PARTITIONS))
    folder.mkdir(parents=True, exist_ok=True)
    sql_file = folder / "pipeline.sql"
    sql_file.write_text(SQL.format(source=source, sink=sink, servers=broker.servers, ends=ends,
                                   prefix=f"tx-{sink}", parallelism=parallelism))
    return sql_file, sink


def clink_run(sql_file: Path, state: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "clink", "run", sql_file.name, "--state-dir", str(state)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=sql_file.parent,
                            env={**os.environ, **(env or {})})


def output(broker, topic: str) -> list[int]:
    return sorted(json.loads(m[3])["n"] for m in broker.read(topic, committed=True))


EXPECTED = list(range(PARTITIONS * ROWS_PER_PARTITION))


@pytest.fixture(scope="module")
def source(broker) -> str:
    return source_topic(broker)


def test_uninterrupted_run_writes_each_row_once(broker, source, tmp_path: Path) -> None:
    sql_file, sink = pipeline(tmp_path, broker, source)
    process = clink_run(sql_file, tmp_path / "state")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert output(broker, sink) == EXPECTED


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_kill_at_each_point_of_the_protocol_gives_each_row_once(broker, source, tmp_path: Path,
                                                                  point: str) -> None:
    sql_file, sink = pipeline(tmp_path, broker, source)
    state = tmp_path / "state"
    process = clink_run(sql_file, state, env={"CLINK_FAULT": f"{point}:3"})
    process.wait(timeout=120)
    assert process.returncode == -signal.SIGKILL, f"the fault point {point} was never reached"
    before = output(broker, sink)
    assert len(before) < len(EXPECTED)  # killed part way
    process = clink_run(sql_file, state)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert "resuming from checkpoint" in err
    assert output(broker, sink) == EXPECTED


@pytest.mark.parallel
@pytest.mark.parametrize("point", ["after_state_written_before_commit", "after_checkpoint_before_sink_commit"])
def test_a_kill_at_parallelism_four_gives_each_row_once(broker, source, tmp_path: Path, point: str) -> None:
    sql_file, sink = pipeline(tmp_path, broker, source, parallelism=4)
    state = tmp_path / "state"
    process = clink_run(sql_file, state, env={"CLINK_FAULT": f"{point}:3"})
    process.wait(timeout=120)
    assert process.returncode == -signal.SIGKILL
    process = clink_run(sql_file, state)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert output(broker, sink) == EXPECTED


def test_a_new_state_directory_with_the_same_prefix_writes_its_rows_too(broker, source, tmp_path: Path) -> None:
    """Checkpoint ids start at 1 again in a new state directory: the first job's ledger must not
    make the second job's commits look done."""
    sql_file, sink = pipeline(tmp_path, broker, source)
    for state in ("state-a", "state-b"):
        process = clink_run(sql_file, tmp_path / state)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    assert output(broker, sink) == sorted(EXPECTED * 2)


@pytest.mark.parametrize("crash_after_steps", [5, 13])
def test_rows_spilled_to_the_checkpoints_file_are_written_once(broker, source, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               crash_after_steps: int) -> None:
    """Every batch goes to the pending checkpoint's file at once (a tiny spill threshold): a crash
    leaves rows there that no checkpoint took; the restore drops them and the run writes them again."""
    import io

    import clink
    from clink.runtime import executor
    from clink.runtime.connectors import kafka
    from clink.runtime.context import RuntimeContext

    monkeypatch.setattr(kafka, "SPILL_BYTES", 1)
    monkeypatch.setattr(kafka, "PRODUCE_ROWS", 7)
    sql_file, sink = pipeline(tmp_path, broker, source)
    plan = clink.compile(sql_file.read_text(), name="pipeline.sql").runtime_plan

    def job() -> executor.Job:
        return executor.Job(plan, RuntimeContext(state_dir=tmp_path / "state", stdout=io.StringIO()))

    first = job()
    for _ in range(crash_after_steps):
        first.step()
    assert first.metrics.checkpoints > 0 and not first.finished
    assert (next((tmp_path / "state").rglob("pending.tmp"), None)) is not None, "nothing was spilled"
    del first  # a crash: nothing closed, the open file left behind
    resumed = job()
    assert resumed.metrics.restored_from is not None
    resumed.run()
    assert output(broker, sink) == EXPECTED
