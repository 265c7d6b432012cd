"""`clink run` of a pipeline writing PostgreSQL through the jdbc sink, killed with SIGKILL at
each point of the checkpoint protocol (and, in the soak variant, at random moments), restarted
from its state directory: the table read back from the server equals an uninterrupted run's."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

SQL = """
SET 'execution.checkpointing.interval-rows' = '2000';
CREATE TABLE bid (auction BIGINT, price BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '{rows}',
  'seed' = '5', 'batch-size' = '500',{rate} 'fields.auction.min' = '1', 'fields.auction.max' = '40',
  'fields.price.min' = '1', 'fields.price.max' = '999');
CREATE TABLE totals (auction BIGINT, n BIGINT, top BIGINT, PRIMARY KEY (auction) NOT ENFORCED)
WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = 'totals', 'username' = 'clink', 'password' = 'clink-secret');
CREATE TABLE raw (auction BIGINT, price BIGINT)
WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = 'raw', 'username' = 'clink', 'password' = 'clink-secret');
EXECUTE STATEMENT SET BEGIN
INSERT INTO totals SELECT auction, COUNT(*), MAX(price) FROM bid GROUP BY auction;
INSERT INTO raw SELECT auction, price FROM bid;
END;
"""
POINTS = ["after_barrier", "after_state_written_before_commit", "during_manifest_rename",
          "after_checkpoint_before_sink_commit", "during_sink_commit"]


def pipeline(postgres, folder: Path, rows: int = 12_000, rate: int | None = None) -> tuple[Path, str]:
    database = postgres.new_database()
    postgres.execute(database, "CREATE TABLE totals (auction bigint PRIMARY KEY, n bigint, top bigint)",
                     "CREATE TABLE raw (auction bigint, price bigint)")
    folder.mkdir(parents=True, exist_ok=True)
    sql_file = folder / "pipeline.sql"
    sql_file.write_text(SQL.format(rows=rows, url=postgres.jdbc_url(database),
                                   rate=f" 'rows-per-second' = '{rate}'," if rate else ""))
    return sql_file, database


def clink_run(sql_file: Path, state: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "clink", "run", sql_file.name, "--state-dir", str(state)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=sql_file.parent,
                            env={**os.environ, **(env or {})})


def tables(postgres, database: str) -> tuple[list[tuple], Counter]:
    return (sorted(postgres.query(database, "SELECT auction, n, top FROM totals")),
            Counter(postgres.query(database, "SELECT auction, price FROM raw")))


@pytest.fixture(scope="module")
def reference(postgres, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """An uninterrupted run's tables, per number of rows."""
    done: dict = {}

    def of(rows: int) -> tuple[list[tuple], Counter]:
        if rows not in done:
            sql_file, database = pipeline(postgres, tmp_path_factory.mktemp("reference"), rows)
            process = clink_run(sql_file, sql_file.parent / "state")
            _, err = process.communicate(timeout=300)
            assert process.returncode == 0, err
            done[rows] = tables(postgres, database)
            assert sum(done[rows][1].values()) == rows
        return done[rows]

    return of


@pytest.mark.parametrize("point", POINTS)
def test_a_kill_at_each_point_of_the_protocol_leaves_the_table_exact(postgres, tmp_path: Path, reference,
                                                                    point: str) -> None:
    sql_file, database = pipeline(postgres, tmp_path)
    state = tmp_path / "state"
    process = clink_run(sql_file, state, env={"CLINK_FAULT": f"{point}:3"})
    process.wait(timeout=300)
    assert process.returncode == -signal.SIGKILL, f"the fault point {point} was never reached"
    process = clink_run(sql_file, state)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert "resuming from checkpoint" in err
    assert tables(postgres, database) == reference(12_000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_random_kills_leave_the_table_exact(postgres, tmp_path: Path, reference, seed: int) -> None:
    rng = random.Random(seed)
    sql_file, database = pipeline(postgres, tmp_path, 40_000, rate=15_000)
    state = tmp_path / "state"
    kills = 0
    for attempt in range(8):
        process = clink_run(sql_file, state)
        if attempt < 7:
            try:
                process.wait(timeout=rng.uniform(0.8, 3.0))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.wait()
                kills += 1
                time.sleep(0.05)
                continue
        else:
            process.wait(timeout=300)
        assert process.returncode == 0, process.stderr.read()
        break
    assert kills >= 1, "no kill landed: the test proved nothing"
    assert tables(postgres, database) == reference(40_000)
