"""JSON_OBJECTAGG and JSON_ARRAYAGG keep their accumulators in the operators' state (lists of JSON
texts, of keyed entries with counts): a job killed at any step and restarted from its
checkpoints writes exactly what a job that never stopped writes, with either state backend."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest

import clink
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job

SQL = """
CREATE TABLE bid (id BIGINT, auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' HOUR)
WITH ('connector' = 'datagen', 'number-of-rows' = '6000', 'seed' = '3', 'batch-size' = '250',
      'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '6000',
      'fields.auction.min' = '1', 'fields.auction.max' = '4', 'fields.price.min' = '1', 'fields.price.max' = '9');
CREATE TABLE windows (auction BIGINT, window_start TIMESTAMP(3), prices STRING, byid STRING)
WITH ('connector' = 'filesystem', 'path' = '{out}/windows/', 'format' = 'csv');
CREATE TABLE totals (price BIGINT, auctions STRING, counts STRING, PRIMARY KEY (price) NOT ENFORCED)
WITH ('connector' = 'sqlite', 'path' = '{out}/totals.db');
INSERT INTO windows
SELECT auction, window_start, JSON_ARRAYAGG(price), JSON_OBJECTAGG(KEY CAST(id AS STRING) VALUE price)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' HOUR))
GROUP BY auction, window_start, window_end;
INSERT INTO totals
SELECT n, JSON_ARRAYAGG(auction), JSON_OBJECTAGG(KEY CAST(auction AS STRING) || '/' || CAST(price AS STRING) VALUE n)
FROM (SELECT auction, price, COUNT(*) AS n FROM bid GROUP BY auction, price) AS q GROUP BY n;
"""


def _job(out: Path, state: Path, backend: str) -> Job:
    plan = clink.compile(SQL.format(out=out), name="json.sql").runtime_plan
    config = {"execution.checkpointing.interval-rows": "1000", "state.backend": backend}
    return Job(plan, RuntimeContext(config=config, state_dir=state, stdout=io.StringIO()))


def _results(out: Path) -> tuple[list[tuple], list[tuple]]:
    windows = sorted((a, w, sorted(json.loads(p)), json.loads(b))
                     for f in sorted((out / "windows").iterdir()) if not f.name.startswith((".", "_"))
                     for a, w, p, b in csv.reader(f.open()))
    with sqlite3.connect(out / "totals.db") as con:
        totals = sorted((n, sorted(json.loads(a)), json.loads(c))
                        for n, a, c in con.execute("SELECT price, auctions, counts FROM totals"))
    return windows, totals


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple], list[tuple]]:
    out = tmp_path_factory.mktemp("uninterrupted")
    _job(out, out / "state", "memory").run()
    windows, totals = _results(out)
    assert len(windows) > 20 and len(totals) > 3
    return windows, totals


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("crash_after_steps", [4, 13])
def test_json_aggregates_resume_from_a_checkpoint_exactly(tmp_path: Path, uninterrupted, backend: str,
                                                          crash_after_steps: int) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    first = _job(out, state, backend)
    for _ in range(crash_after_steps):
        first.step()
    assert first.metrics.checkpoints > 0
    del first  # a crash: nothing closed or committed
    resumed = _job(out, state, backend)
    assert resumed.metrics.restored_from is not None
    resumed.run()
    assert _results(out) == uninterrupted
