"""Pipeline A, end to end under crashes: page views from a 3-partition Kafka topic (JSON, event
time with a watermark), counted per page in 2-second TUMBLE windows, upserted exactly once into
a PostgreSQL table with a primary key. `clink run` is killed with SIGKILL at each point of the
checkpoint protocol, and in the soak test at random moments, and restarted from its state
directory until it ends: the table then equals an uninterrupted run's, which equals DuckDB's
answer over the same events."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

import shared_duckdb
from tests.end_to_end.harness import FAULT_POINTS, kill_at, run_to_end, soak

PARTITIONS = 3

# Small fetches ('fetch.max.bytes'): the broker then hands over some thirty messages of each
# partition in turn instead of a whole partition at once, so the watermark, and the output,
# move on all through the run, and a kill at the third checkpoint finds output committed.
SQL = """
SET 'execution.checkpointing.interval-rows' = '{every}';
SET 'parallelism.default' = '{parallelism}';
CREATE TABLE views (user_id BIGINT, page STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
WITH ('connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{servers}',
  'format' = 'json', 'properties.max.poll.records' = '50', 'scan.startup.mode' = 'earliest-offset',
  'properties.fetch.max.bytes' = '2048', 'properties.message.max.bytes' = '2048',
  'scan.bounded.mode' = 'latest-offset');
CREATE TABLE counts (window_start TIMESTAMP(3), window_end TIMESTAMP(3), page STRING, views BIGINT,
  users BIGINT, first_view TIMESTAMP(3), PRIMARY KEY (window_start, window_end, page) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = 'counts', 'username' = 'clink',
  'password' = 'clink-secret');
INSERT INTO counts
SELECT window_start, window_end, page, COUNT(*), COUNT(DISTINCT user_id), MIN(ts)
FROM TABLE(TUMBLE(TABLE views, DESCRIPTOR(ts), INTERVAL '2' SECOND))
GROUP BY window_start, window_end, page;
"""

ORACLE = """
SELECT time_bucket(INTERVAL 2 SECOND, ts) AS ws, ws + INTERVAL 2 SECOND, page, COUNT(*),
       COUNT(DISTINCT user_id), MIN(ts)
FROM views GROUP BY ws, page
"""


def views(per_partition: int, seed: int) -> list[pa.Table]:
    """Each partition's events in event-time order (so none is late: the table is exact whatever
    the batches), 50 ms apart over the same stretch of time, a sixth of them with no user."""
    rng = random.Random(seed)
    start = dt.datetime(2024, 5, 1, 12)
    return [pa.table({
        "user_id": pa.array([None if rng.random() < 1 / 6 else rng.randrange(40) for _ in range(per_partition)],
                            pa.int64()),
        "page": pa.array([rng.choice(["/", "/cart", "/search", "/item/1", "/item/2"]) for _ in range(per_partition)]),
        "ts": pa.array([start + dt.timedelta(milliseconds=50 * i + p * 7) for i in range(per_partition)],
                       pa.timestamp("ms")),
    }) for p in range(PARTITIONS)]


class Input:
    """A topic holding the events, and the events as one table for DuckDB."""

    def __init__(self, broker, per_partition: int, seed: int) -> None:
        self.topic = broker.topic(partitions=PARTITIONS)
        parts = views(per_partition, seed)
        for p, part in enumerate(parts):
            broker.produce(self.topic, [
                (None, json.dumps({"user_id": r["user_id"], "page": r["page"],
                                   "ts": r["ts"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]}).encode())
                for r in part.to_pylist()], partition=p)
        self.table = pa.concat_tables(parts)


def pipeline(broker, postgres, source: Input, folder: Path, *, every: int, parallelism: int = 1) -> tuple[Path, str]:
    database = postgres.new_database()
    postgres.execute(database, "CREATE TABLE counts (window_start timestamp(3), window_end timestamp(3), page text, "
                               "views bigint, users bigint, first_view timestamp(3), "
                               "PRIMARY KEY (window_start, window_end, page))")
    folder.mkdir(parents=True, exist_ok=True)
    sql_file = folder / "pipeline.sql"
    sql_file.write_text(SQL.format(every=every, parallelism=parallelism, topic=source.topic, servers=broker.servers,
                                   url=postgres.jdbc_url(database)))
    return sql_file, database


def table(postgres, database: str) -> list[tuple]:
    return sorted(postgres.query(database, "SELECT * FROM counts"))


def partial(rows: list[tuple], whole: list[tuple]) -> bool:
    return 0 < len(rows) < len(whole)


@pytest.fixture(scope="module")
def small(broker) -> Input:
    return Input(broker, per_partition=400, seed=1)


@pytest.fixture(scope="module")
def reference(broker, postgres, tmp_path_factory: pytest.TempPathFactory):
    """An uninterrupted run's table per input, checked against DuckDB."""
    done: dict = {}

    def of(source: Input) -> list[tuple]:
        if source.topic not in done:
            sql_file, database = pipeline(broker, postgres, source, tmp_path_factory.mktemp("reference"), every=100)
            run_to_end(sql_file, sql_file.parent / "state")
            done[source.topic] = table(postgres, database)
            con = shared_duckdb.connect()
            con.register("views", source.table)
            assert done[source.topic] == sorted(con.execute(ORACLE).fetchall())
        return done[source.topic]

    return of


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_kill_at_each_point_of_the_protocol_leaves_the_table_exact(broker, postgres, small, reference,
                                                                    tmp_path: Path, point: str) -> None:
    sql_file, database = pipeline(broker, postgres, small, tmp_path, every=100)
    # The first window closes after some 180 rows: the fifth checkpoint follows commits.
    kill_at(sql_file, tmp_path / "state", point, nth=5,
            partial=lambda: partial(table(postgres, database), reference(small)))
    assert table(postgres, database) == reference(small)


@pytest.mark.slow
@pytest.mark.parametrize("parallelism", [2, 4])
@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_kill_at_each_point_at_several_subtasks_leaves_the_table_exact(broker, postgres, small, reference,
                                                                        tmp_path: Path, point: str,
                                                                        parallelism: int) -> None:
    sql_file, database = pipeline(broker, postgres, small, tmp_path, every=100, parallelism=parallelism)
    # The first window closes after some 180 rows: the fifth checkpoint follows commits.
    kill_at(sql_file, tmp_path / "state", point, nth=5,
            partial=lambda: partial(table(postgres, database), reference(small)))
    assert table(postgres, database) == reference(small)


@pytest.fixture(scope="module")
def large(broker) -> Input:
    # Enough input for ten kills even when the time-based ones catch a fast run late.
    return Input(broker, per_partition=6000, seed=2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_ten_random_kills_in_one_run_leave_the_table_exact(broker, postgres, large, reference, tmp_path: Path,
                                                          seed: int) -> None:
    sql_file, database = pipeline(broker, postgres, large, tmp_path, every=50)
    landed = soak(sql_file, tmp_path / "state", random.Random(seed), kills=10)
    assert landed >= 10, f"only {landed} kills landed before the input ran out: the test proved less than it says"
    assert table(postgres, database) == reference(large)
