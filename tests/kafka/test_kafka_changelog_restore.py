"""A CDC topic through a GROUP BY into an exactly-once SQLite table, crashed and resumed.

The kafka source keeps its offsets in clink's checkpoints and the group aggregate its state; the
SQLite sink commits per checkpoint. A job stopped without closing anything (a crash between
steps), or killed at a point of the checkpoint protocol, and resumed from its state directory must
leave the table an uninterrupted run leaves: no change lost or applied twice."""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import pytest

import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job
from tests.kafka.test_kafka_changelog_formats import history

PARTITIONS = 2
CHANGES = 600

SQL = """
SET 'parallelism.default' = '{parallelism}';
CREATE TABLE src (id BIGINT, grp STRING, amount BIGINT, label STRING) WITH (
  'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{servers}',
  'format' = 'debezium-json', 'properties.max.poll.records' = '40', 'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = '{ends}');
CREATE TABLE totals (grp STRING, n BIGINT, total BIGINT, PRIMARY KEY (grp) NOT ENFORCED)
WITH ('connector' = 'sqlite', 'path' = '{out}/totals.db');
INSERT INTO totals SELECT COALESCE(grp, '-'), COUNT(*), SUM(amount) FROM src GROUP BY COALESCE(grp, '-');
"""


@pytest.fixture(scope="module")
def topic(broker) -> tuple[str, str, dict]:
    """Two partitions, each the changes of its own keys (a key's changes stay in order in one
    partition, as Debezium keys its messages), and the final rows they leave."""
    name = broker.topic(partitions=PARTITIONS)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.servers})
    final: dict = {}
    counts = []
    for p in range(PARTITIONS):
        changes, rows = history(seed=100 + p, n_ops=CHANGES // PARTITIONS, nulls=True)
        for change in changes:
            for image in ("before", "after"):
                if change[image] is not None:
                    change[image]["id"] += 1000 * p
            producer.produce(name, value=json.dumps(change).encode(), partition=p)
        counts.append(len(changes))
        final.update({k + 1000 * p: r for k, r in rows.items()})
    producer.flush(30)
    ends = ";".join(f"partition:{p},offset:{n}" for p, n in enumerate(counts))
    return name, ends, final


def expected(final: dict) -> list[tuple]:
    groups: dict = {}
    for row in final.values():
        n, total = groups.get(row["grp"] or "-", (0, None))
        amount = row["amount"]
        groups[row["grp"] or "-"] = (n + 1, total if amount is None else (total or 0) + amount)
    return sorted((g, n, t) for g, (n, t) in groups.items())


def table(out: Path) -> list[tuple]:
    with sqlite3.connect(out / "totals.db") as con:
        return sorted(con.execute("SELECT grp, n, total FROM totals"))


def sql(broker, topic, out: Path, parallelism: int) -> str:
    name, ends, _ = topic
    return SQL.format(topic=name, servers=broker.servers, ends=ends, out=out, parallelism=parallelism)


def _job(text: str, state: Path) -> Job:
    plan = clink.compile(text, name="cdc.sql").runtime_plan
    config = {"execution.checkpointing.interval-rows": "60"}
    return Job(plan, RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))


def test_uninterrupted_run_leaves_the_final_state(broker, topic, tmp_path: Path) -> None:
    _job(sql(broker, topic, tmp_path, 1), tmp_path / "state").run()
    assert table(tmp_path) == expected(topic[2])


@pytest.mark.parametrize("parallelism", [1, 4])
@pytest.mark.parametrize("crash_after_steps", [3, 6])
def test_a_crash_between_steps_resumes_exactly(broker, topic, tmp_path: Path, parallelism: int,
                                               crash_after_steps: int) -> None:
    text = sql(broker, topic, tmp_path, parallelism)
    first = _job(text, tmp_path / "state")
    for _ in range(crash_after_steps):
        first.step()
    assert first.metrics.checkpoints > 0 and not first.finished  # crashed part way, after a checkpoint
    del first  # a crash: nothing closed or committed
    resumed = _job(text, tmp_path / "state")
    assert resumed.metrics.restored_from is not None
    resumed.run()
    assert table(tmp_path) == expected(topic[2])


@pytest.mark.parametrize("point", ["after_state_written_before_commit", "after_checkpoint_before_sink_commit"])
def test_a_kill_during_the_checkpoint_protocol_resumes_exactly(broker, topic, tmp_path: Path, point: str) -> None:
    sql_file = tmp_path / "cdc.sql"
    sql_file.write_text("SET 'execution.checkpointing.interval-rows' = '60';\n" + sql(broker, topic, tmp_path, 1))

    def run(env: dict) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "clink", "run", sql_file.name, "--state-dir",
                                 str(tmp_path / "state")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, cwd=tmp_path, env={**os.environ, **env})

    process = run({"CLINK_FAULT": f"{point}:3"})
    process.wait(timeout=120)
    assert process.returncode == -signal.SIGKILL, f"the fault point {point} was never reached"
    process = run({})
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert "resuming from checkpoint" in err
    assert table(tmp_path) == expected(topic[2])
