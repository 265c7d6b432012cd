"""The kafka source keeps a watermark per partition, as Flink's does: the source's watermark is the
least of its partitions', so a partition that lags holds it back, until it has had no rows for the
table's idle timeout ('scan.watermark.idle-timeout'). Driven step by step on a fixed clock against
the Tansu broker."""

from __future__ import annotations

import io
import json
import time

import pytest

import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job

S = 1000


def ts(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}"


def drain(running: Job, until_rows_read: int) -> None:
    """Step ``running`` until table t has read that many rows, then a few steps more."""
    for _ in range(2000):
        running.step()
        running.refresh_metrics()
        if running.metrics.records_in.get("t", 0) >= until_rows_read:
            break
        time.sleep(0.005)
    for _ in range(3):
        running.step()


@pytest.mark.parametrize("idle", [False, True], ids=["no-idle-timeout", "idle-timeout"])
def test_a_lagging_partition_holds_the_windows_back_until_it_is_idle(broker, idle: bool) -> None:
    topic = broker.topic(partitions=2)
    broker.produce(topic, [(None, json.dumps({"ts": ts(t)}).encode()) for t in (0, 5 * S, 20 * S)], partition=0)
    broker.produce(topic, [(None, json.dumps({"ts": ts(t)}).encode()) for t in (1 * S, 2 * S)], partition=1)
    options = {"connector": "kafka", "topic": topic, "properties.bootstrap.servers": broker.servers,
               "format": "json", "scan.startup.mode": "earliest-offset"}
    if idle:
        options["scan.watermark.idle-timeout"] = "10 s"
    sql = "\n".join([
        f"CREATE TABLE t (ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH "
        f"({', '.join(f'{k!r} = {v!r}' for k, v in options.items())});",
        "CREATE TABLE out (ts TIMESTAMP(3)) WITH ('connector' = 'blackhole');",
        "INSERT INTO out SELECT ts FROM t;"])
    now = [0]
    job = Job(clink.compile(sql).runtime_plan, RuntimeContext(clock=lambda: now[0], stdout=io.StringIO()))

    drain(job, 5)
    assert job.metrics.records_in["t"] == 5
    # Partition 0 is at 20 s, partition 1 at 2 s: the watermark is 2 s (one per subtask would
    # be 20 s).
    assert job.metrics.watermark == 2 * S
    now[0] = 11 * S  # partition 1 has had no rows for 11 s; partition 0 gets one more
    broker.produce(topic, [(None, json.dumps({"ts": ts(21 * S)}).encode())], partition=0)
    drain(job, 6)
    assert job.metrics.records_in["t"] == 6
    assert job.metrics.watermark == (21 * S if idle else 2 * S)
    job.close()


def test_each_partitions_watermark_survives_a_restore(broker, tmp_path) -> None:
    """After a restore, a partition with no new rows counts with the watermark it had: a row of the
    other partition moves the source's watermark exactly as in a run that never stopped."""
    topic = broker.topic(partitions=2)
    broker.produce(topic, [(None, json.dumps({"ts": ts(t)}).encode()) for t in (0, 20 * S)], partition=0)
    broker.produce(topic, [(None, json.dumps({"ts": ts(t)}).encode()) for t in (1 * S, 2 * S)], partition=1)
    sql = "\n".join([
        f"CREATE TABLE t (ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'kafka', 'topic' = '{topic}', "
        f"'properties.bootstrap.servers' = '{broker.servers}', 'format' = 'json', "
        "'scan.startup.mode' = 'earliest-offset');",
        "CREATE TABLE out (ts TIMESTAMP(3)) WITH ('connector' = 'blackhole');",
        "INSERT INTO out SELECT ts FROM t;"])
    plan = clink.compile(sql).runtime_plan

    def job() -> Job:
        return Job(plan, RuntimeContext(clock=lambda: 0, state_dir=tmp_path / "state", stdout=io.StringIO()))

    first = job()
    drain(first, 4)
    assert first.metrics.watermark == 2 * S
    first.checkpoint()
    del first  # a crash after the checkpoint
    resumed = job()
    assert resumed.metrics.restored_from is not None
    broker.produce(topic, [(None, json.dumps({"ts": ts(15 * S)}).encode())], partition=1)
    drain(resumed, 1)
    # Partition 0 still counts at 20 s, partition 1 is at 15 s now (without the partitions'
    # watermarks in the checkpoint, partition 0 would hold the source at 2 s until its next row).
    assert resumed.metrics.watermark == 15 * S
    resumed.close()
