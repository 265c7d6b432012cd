"""The kafka source's split metrics against the Tansu broker: a row per partition with its next
offset and its consumer lag (messages on the broker it has not read yet)."""

from __future__ import annotations

import io
import json
import time

import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job


def splits_of(job: Job) -> dict[str, dict]:
    job.refresh_metrics()
    return {row["split"]: row for row in job.metrics.to_arrow("splits").to_pylist()}


def test_each_partition_reports_its_offset_and_consumer_lag(broker) -> None:
    topic = broker.topic(partitions=2)
    broker.produce(topic, [(None, json.dumps({"v": i}).encode()) for i in range(3)], partition=0)
    broker.produce(topic, [(None, json.dumps({"v": i}).encode()) for i in range(2)], partition=1)
    sql = (f"CREATE TABLE t (v BIGINT) WITH ('connector' = 'kafka', 'topic' = '{topic}', "
           f"'properties.bootstrap.servers' = '{broker.servers}', 'format' = 'json', "
           "'scan.startup.mode' = 'earliest-offset');\n"
           "CREATE TABLE out (v BIGINT) WITH ('connector' = 'blackhole');\nINSERT INTO out SELECT v FROM t;")
    job = Job(clink.compile(sql).runtime_plan, RuntimeContext(stdout=io.StringIO()))
    try:
        deadline = time.monotonic() + 30
        while job.metrics.records_in.get("t", 0) < 5 and time.monotonic() < deadline:
            job.step()
            job.refresh_metrics()
            time.sleep(0.01)
        splits = splits_of(job)
        assert set(splits) == {f"{topic}:0", f"{topic}:1"}
        assert [json.loads(splits[f"{topic}:{p}"]["position"])[f"{topic}:{p}"] for p in (0, 1)] == [3, 2]
        assert [splits[f"{topic}:{p}"]["lag"] for p in (0, 1)] == [0, 0]
        # Four more on partition 1, not read yet: the consumer's fetches bring the broker's end
        # (no step runs, so nothing is taken from them).
        broker.produce(topic, [(None, json.dumps({"v": i}).encode()) for i in range(4)], partition=1)
        deadline = time.monotonic() + 20
        while splits_of(job)[f"{topic}:1"]["lag"] != 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        splits = splits_of(job)
        assert splits[f"{topic}:1"]["lag"] == 4 and splits[f"{topic}:0"]["lag"] == 0
        deadline = time.monotonic() + 30
        while job.metrics.records_in.get("t", 0) < 9 and time.monotonic() < deadline:
            job.step()
            job.refresh_metrics()
            time.sleep(0.01)
        assert splits_of(job)[f"{topic}:1"]["lag"] == 0
    finally:
        job.cancel()
