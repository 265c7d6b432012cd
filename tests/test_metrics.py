"""A job's metrics: the Arrow tables of ``job.metrics()`` checked against DuckDB over the same
rows, and the Prometheus endpoint's scrape (parsed with prometheus_client's own parser)
checked against the table."""

from __future__ import annotations

import datetime as dt
import urllib.request

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

import clink

BIDS = """
CREATE TABLE bids (
  auction BIGINT NOT NULL,
  price   BIGINT,
  ts      TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH ('connector' = 'push');
"""
WINDOWED = BIDS + """
SELECT auction, window_start, window_time, COUNT(*) AS bids, SUM(price) AS total
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end, window_time
"""
GROUPED = BIDS + "SELECT auction, COUNT(*) AS bids, SUM(price) AS total FROM bids WHERE price > 10 GROUP BY auction"

START = dt.datetime(2024, 1, 1)


def bids(n: int, seed: int, start: dt.datetime = START) -> pa.Table:
    rng = np.random.default_rng(seed)
    ms = np.sort(rng.integers(0, 60_000, n))
    return pa.table({
        "auction": pa.array(rng.integers(0, 25, n), pa.int64()),
        "price": pa.array(np.where(rng.random(n) < 0.1, None, rng.integers(0, 100, n)), pa.int64()),
        "ts": pa.array(np.datetime64(start, "ms") + ms.astype("timedelta64[ms]"), pa.timestamp("ms")),
    })


def row_of(table: pa.Table, operator_kind: str) -> dict:
    rows = [r for r in table.to_pylist() if r["kind"] == operator_kind]
    assert len(rows) == 1, rows
    return rows[0]


def test_counts_state_and_watermark_agree_with_duckdb_mid_run():
    data = bids(5000, 1)
    job = clink.compile(GROUPED, name="grouped.sql").start()
    first, second = data.slice(0, 3000), data.slice(3000)
    job.push("bids", first)
    job.run_until_idle()
    metrics = job.metrics()
    table = pa.table(metrics)  # the Arrow C stream interface: the operators table
    assert table.schema.names[:4] == ["operator", "kind", "node", "subtask"]
    source, sink = row_of(table, "source"), row_of(table, "sink")
    group = row_of(table, "group")
    assert source["operator"] == "source:bids" and source["records_in"] == 3000
    expected = duckdb.sql("SELECT COUNT(*) AS rows, COUNT(DISTINCT auction) AS keys FROM first "
                          "WHERE price > 10").fetchall()[0]
    # The filter runs before the aggregate: what it lets through is what the aggregate took in.
    assert group["records_in"] == expected[0]
    assert group["state_rows"] == expected[1]
    assert sink["records_in"] == group["records_out"] > 0
    assert source["bytes_in"] > 0 and group["busy_ms"] > 0
    assert source["sql"].startswith("grouped.sql:")
    late_watermark = first.column("ts").to_pylist()[-1] - dt.timedelta(seconds=1)
    assert source["watermark"].replace(tzinfo=None) == late_watermark
    assert source["watermark_lag_ms"] > 0

    job.push("bids", second)
    job.close_input("bids")
    job.wait()
    final = job.metrics()
    table = final.to_arrow()
    group = row_of(table, "group")
    assert row_of(table, "source")["records_in"] == 5000
    assert group["records_in"] == duckdb.sql("SELECT COUNT(*) FROM data WHERE price > 10").fetchall()[0][0]
    # DuckDB reads the metrics object itself through the Arrow C stream interface.
    assert duckdb.sql("SELECT SUM(records_in) FROM final WHERE kind = 'sink'").fetchall()[0][0] == group["records_out"]


def test_windows_latency_late_rows_and_splits():
    data = bids(4000, 2)
    job = clink.compile(WINDOWED, name="windowed.sql").start()
    job.push("bids", data)
    job.run_until_idle()
    late = pa.table({"auction": pa.array([1, 2], pa.int64()), "price": pa.array([1, 2], pa.int64()),
                     "ts": pa.array([START, START], pa.timestamp("ms"))})
    job.push("bids", late)  # the first window fired long ago: both rows are late
    job.close_input("bids")
    job.wait()
    rows = [b for b in iter(job.poll, None)]
    out = pa.Table.from_batches(rows)
    metrics = job.metrics()
    table = metrics.to_arrow()
    window = row_of(table, "window")
    sink = row_of(table, "sink")
    assert window["late_records"] == 2
    windows = duckdb.sql("SELECT COUNT(*) FROM (SELECT DISTINCT auction, time_bucket(INTERVAL 10 SECOND, ts) "
                         "FROM data)").fetchall()[0][0]
    assert sink["records_in"] == out.num_rows == windows
    # Every window fired at the end of the input, long after its event time: the latency from
    # event time is at least the time between the newest window and now.
    newest = max(out.column("window_time").to_pylist())
    assert sink["latency_p50_ms"] >= (dt.datetime.now() - newest).total_seconds() * 1000 * 0.9
    assert sink["ingestion_latency_p99_ms"] is not None and sink["ingestion_latency_p99_ms"] < 60_000
    splits = metrics.to_arrow("splits").to_pylist()
    assert [s["operator"] for s in splits] == ["source:bids"]
    assert metrics.to_arrow("checkpoints").num_rows == 0


def test_checkpoint_history(tmp_path):
    job = clink.compile(GROUPED, name="grouped.sql").start(state_dir=tmp_path)
    job.push("bids", bids(1000, 3))
    job.run_until_idle()
    first = job.checkpoint()
    job.push("bids", bids(1000, 4))
    job.run_until_idle()
    second = job.checkpoint()
    history = job.metrics().to_arrow("checkpoints").to_pylist()
    assert [h["checkpoint"] for h in history] == [first, second]
    on_disk = {p.name: sum(f.stat().st_size for f in p.iterdir())
               for p in (tmp_path / "checkpoints").iterdir() if p.is_dir()}
    for h in history:
        assert h["duration_ms"] > 0 and h["alignment_ms"] >= 0
        assert h["size_bytes"] in on_disk.values()
    job.stop()


def test_metrics_can_be_switched_to_row_counts_only():
    job = clink.compile(GROUPED, name="grouped.sql").start(config={"metrics.enabled": "false"})
    job.push("bids", bids(500, 5))
    job.run_until_idle()
    group = row_of(job.metrics().to_arrow(), "group")
    assert group["records_in"] > 0 and group["busy_ms"] == 0 and group["backpressured_ms"] == 0
    job.stop()


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def test_prometheus_scrape_matches_the_metrics_table():
    job = clink.compile(WINDOWED, name="windowed.sql").start(config={"metrics.port": "0"})
    try:
        assert job.metrics_url.startswith("http://127.0.0.1:")
        job.push("bids", bids(3000, 6))
        job.run_until_idle()
        table = job.metrics().to_arrow()  # publishes what the endpoint serves
        samples = scrape(job.metrics_url)
        for row in table.to_pylist():
            labels = tuple(sorted({"job": "windowed.sql", "operator": row["operator"], "kind": row["kind"],
                                   "subtask": str(row["subtask"])}.items()))
            assert samples[("clink_records_in_total", labels)] == row["records_in"]
            assert samples[("clink_records_out_total", labels)] == row["records_out"]
            assert samples[("clink_state_rows", labels)] == row["state_rows"]
            assert samples[("clink_busy_seconds_total", labels)] == pytest.approx(row["busy_ms"] / 1000)
            if row["watermark"] is not None:
                assert samples[("clink_watermark_seconds", labels)] == row["watermark"].timestamp()
        assert row_of(table, "window")["state_rows"] > 0 and row_of(table, "source")["records_in"] == 3000
    finally:
        url = job.metrics_url
        job.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)  # the endpoint ends with the job


def test_a_bad_metrics_port_is_refused():
    with pytest.raises(clink.SqlError, match="metrics.port"):
        clink.compile("SET 'metrics.port' = 'x';\n" + GROUPED)


def test_a_failed_job_publishes_how_far_it_got():
    job = clink.compile("CREATE TABLE t (a BIGINT) WITH ('connector' = 'push');\n"
                        "SELECT a * 4611686018427387904 AS x FROM t", name="fails.sql").start()
    job.push("t", [{"a": 0}, {"a": 1}])
    job.run_until_idle()
    job._job.observers += 1  # as a dashboard or an endpoint does: it reads what the job published
    job.push("t", [{"a": 2}])  # overflows
    with pytest.raises(clink.PipelineError, match="overflow"):
        job.run_until_idle()
    source = [r for r in job._job.metrics.operators if r["operator"] == "source:t"]
    assert source and source[0]["records_in"] == 3
