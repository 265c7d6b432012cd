"""Crashes against a real Redis server: ``clink run`` killed with SIGKILL at each named point of
the checkpoint protocol (as tests/runtime/test_crash_harness.py does) and restarted from its state
directory. What a reader finds in Redis afterwards must equal an uninterrupted run's: the
exactly-once stream sink holds each row once, and a stream source resumes from the entry IDs in
the checkpoint, so a sink fed by it gets each entry once."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
import redis

FAULT_POINTS = ["after_barrier", "after_state_written_before_commit", "during_manifest_rename",
                "after_checkpoint_before_sink_commit", "during_sink_commit"]

ROWS = 30_000

SINK_SQL = """
SET 'execution.checkpointing.interval-rows' = '3000';
CREATE TABLE bid (auction BIGINT, price BIGINT, ts TIMESTAMP(3))
WITH ('connector' = 'datagen', 'number-of-rows' = '{rows}', 'seed' = '21', 'batch-size' = '500',{rate}
      'fields.auction.min' = '1', 'fields.auction.max' = '20', 'fields.price.min' = '1', 'fields.price.max' = '999');
CREATE TABLE out (auction BIGINT, price BIGINT, ts TIMESTAMP(3))
WITH ('connector' = 'redis', 'url' = '{url}', 'stream' = '{stream}', 'sink.delivery-guarantee' = 'exactly-once');
INSERT INTO out SELECT auction, price * 2, ts FROM bid WHERE price > 100;
"""


def clink_run(sql_file: Path, state: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "clink", "run", sql_file.name, "--state-dir", str(state), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=sql_file.parent,
                            env={**os.environ, **(env or {})})


def entries(r: redis.Redis, stream: str) -> Counter:
    """The stream's entries as a multiset of their fields."""
    return Counter(tuple(sorted(fields.items())) for _, fields in r.xrange(stream))


def sink_pipeline(folder: Path, url: str, stream: str, rate: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    sql_file = folder / "pipeline.sql"
    sql_file.write_text(SINK_SQL.format(rows=ROWS, url=url, stream=stream, rate=rate))
    return sql_file


@pytest.fixture(scope="module")
def reference(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Counter:
    """The stream an uninterrupted run writes."""
    folder = tmp_path_factory.mktemp("reference")
    sql_file = sink_pipeline(folder, redis_url, "reference")
    process = clink_run(sql_file, folder / "state")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    client = redis.Redis.from_url(redis_url)
    rows = entries(client, "reference")
    client.delete("reference")
    client.close()
    assert 20_000 < rows.total() < ROWS
    return rows


def kill_then_resume(sql_file: Path, state: Path, point: str, *args: str) -> None:
    process = clink_run(sql_file, state, *args, env={"CLINK_FAULT": f"{point}:3"})
    process.communicate(timeout=120)
    assert process.returncode == -signal.SIGKILL, f"the fault point {point} was never reached"
    process = clink_run(sql_file, state, *args)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert "resuming from checkpoint" in err


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_the_exactly_once_stream_sink_holds_each_row_once_after_a_crash(r: redis.Redis, redis_url: str,
                                                                        reference: Counter, tmp_path: Path,
                                                                        point: str) -> None:
    sql_file = sink_pipeline(tmp_path, redis_url, "out")
    kill_then_resume(sql_file, tmp_path / "state", point)
    got = entries(r, "out")
    assert got == reference, f"{(got - reference).total()} entries too many, {(reference - got).total()} missing"
    assert not r.exists("_clink:pending:out")  # nothing left staged


def test_the_exactly_once_stream_sink_at_four_subtasks(r: redis.Redis, redis_url: str, reference: Counter,
                                                       tmp_path: Path) -> None:
    sql_file = sink_pipeline(tmp_path, redis_url, "out")
    kill_then_resume(sql_file, tmp_path / "state", "after_checkpoint_before_sink_commit", "--parallelism", "4")
    assert entries(r, "out") == reference


@pytest.mark.slow  # a soak: random kill moments, several seeds
def test_random_kills_leave_each_row_once_in_the_stream(r: redis.Redis, redis_url: str, reference: Counter,
                                                        tmp_path: Path) -> None:
    kills = 0
    for seed in range(5):
        rng = random.Random(seed)
        r.delete("out", "_clink:ledger:out", "_clink:pending:out")
        # Throttled, so that the run lasts long enough for the kills to land while rows flow: 5 s
        # of rows, so that a run resumed after a kill still outlasts most kill moments (at 2 s,
        # the resumed runs often ended first, and a faster start left too few kills landing).
        sql_file = sink_pipeline(tmp_path / f"run{seed}", redis_url, "out", rate=" 'rows-per-second' = '6000',")
        state = tmp_path / f"state{seed}"
        for attempt in range(6):
            process = clink_run(sql_file, state)
            if attempt < 5:
                try:
                    process.wait(timeout=rng.uniform(0.5, 2.5))
                except subprocess.TimeoutExpired:
                    process.send_signal(signal.SIGKILL)
                    process.wait()
                    kills += 1
                    continue
            _, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
            break
        assert entries(r, "out") == reference, f"seed {seed}"
    assert kills >= 10, f"only {kills} kills landed: the test proved too little"


# ---------------------------------------------------------------- the source's positions


SOURCE_SQL = """
SET 'execution.checkpointing.interval-rows' = '2000';
CREATE TABLE ev (n BIGINT, tag STRING)
WITH ('connector' = 'redis', 'url' = '{url}', 'stream' = 'ev', 'scan.bounded.mode' = 'latest',
      'scan.fetch-size' = '500');
CREATE TABLE copy (n BIGINT, tag STRING) WITH ('connector' = 'sqlite', 'path' = 'out.db');
INSERT INTO copy SELECT n, tag FROM ev;
"""


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_stream_source_resumes_from_the_checkpointed_entry(r: redis.Redis, redis_url: str, tmp_path: Path,
                                                             point: str) -> None:
    pipe = r.pipeline(transaction=False)
    for n in range(20_000):
        pipe.xadd("ev", {"n": str(n), "tag": f"t{n % 7}"})
    pipe.execute()
    sql_file = tmp_path / "pipeline.sql"
    sql_file.write_text(SOURCE_SQL.format(url=redis_url))
    process = clink_run(sql_file, tmp_path / "state", env={"CLINK_FAULT": f"{point}:3"})
    process.communicate(timeout=120)
    assert process.returncode == -signal.SIGKILL, f"the fault point {point} was never reached"
    r.xadd("ev", {"n": "-1", "tag": "late"})  # after the job started: beyond its bound, also when resumed
    process = clink_run(sql_file, tmp_path / "state")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert "resuming from checkpoint" in err
    con = sqlite3.connect(tmp_path / "out.db")
    rows = con.execute("SELECT n, tag FROM copy").fetchall()
    con.close()
    assert Counter(rows) == Counter((n, f"t{n % 7}") for n in range(20_000))


def test_reading_a_stream_as_it_grows_keeps_up(r: redis.Redis, redis_url: str) -> None:
    """An unbounded read of a stream that another client appends to while the job runs."""
    import io

    from clink.runtime.connectors.base import TableSpec
    from clink.runtime.connectors.redis import REDIS
    from clink.runtime.context import RuntimeContext

    schema = pa.schema([("n", pa.int64())])
    reader = REDIS.create_source(TableSpec(name="ev", schema=schema, table_schema=schema,
                                           options={"url": redis_url, "stream": "ev", "scan.fetch-size": "64"}),
                                 RuntimeContext(config={}, stdout=io.StringIO()))
    seen: list[int] = []
    for round_ in range(20):
        pipe = r.pipeline(transaction=False)
        for n in range(round_ * 100, round_ * 100 + 100):
            pipe.xadd("ev", {"n": str(n)})
        pipe.execute()
        while (batch := reader.poll()) is not None:
            seen += batch.column(0).to_pylist()
    assert seen == list(range(2000))
    reader.close()
