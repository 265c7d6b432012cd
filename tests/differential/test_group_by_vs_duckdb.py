"""GROUP BY without a window: an updating query whose final table must equal DuckDB's batch
answer, read in small batches so every group is revised many times on the way."""

from __future__ import annotations

import io
import math
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

# tests/shared_duckdb.py: pytest puts tests/ on sys.path, as it holds the root conftest.py.
import shared_duckdb

import clink
from clink.errors import SqlError
from clink.runtime.context import RuntimeContext
from clink.testing import run_select

N = 4000


@pytest.fixture(scope="module")
def events() -> pa.Table:
    rng = np.random.default_rng(11)

    def nulls(rate: float) -> np.ndarray:
        return rng.random(N) < rate

    return pa.table({
        "k1": pa.array(rng.integers(0, 6, N), pa.int64(), mask=nulls(0.1)),
        "k2": pa.array(rng.choice(np.array(["a", "b", "c"]), N), pa.string(), mask=nulls(0.05)),
        "price": pa.array(rng.integers(-50, 1000, N), pa.int64(), mask=nulls(0.2)),
        "score": pa.array(np.round(rng.normal(10, 5, N), 3), pa.float64(), mask=nulls(0.2)),
    })


def _same(ours: pa.Table, theirs: list[tuple]) -> None:
    def norm(row: tuple) -> tuple:
        return tuple(round(v, 6) if isinstance(v, float) and not math.isnan(v) else v for v in row)

    assert Counter(norm(tuple(r.values())) for r in ours.to_pylist()) == Counter(norm(r) for r in theirs)


QUERIES = [
    ("SELECT k1, COUNT(*) AS n, COUNT(price) AS c, SUM(price) AS s, MIN(price) AS lo, MAX(price) AS hi, "
     "AVG(score) AS a FROM ev GROUP BY k1"),
    "SELECT k1, k2, COUNT(*) AS n, SUM(price) AS s FROM ev WHERE price > 100 GROUP BY k1, k2",
    "SELECT k2, SUM(price) AS s FROM ev GROUP BY k2 HAVING COUNT(*) > 600",
    "SELECT k1 % 2 AS parity, COUNT(*) FILTER (WHERE score > 10) AS high, MAX(score) AS top FROM ev GROUP BY k1 % 2",
    # Retractions through a second aggregation: how many keys have each count.
    ("SELECT n, COUNT(*) AS keys, SUM(s) AS total FROM "
     "(SELECT k1, k2, COUNT(*) AS n, SUM(price) AS s FROM ev GROUP BY k1, k2) GROUP BY n"),
    # Distinct counts: several over one column with different filters, one over another column.
    ("SELECT k2, COUNT(DISTINCT price) AS prices, COUNT(DISTINCT price) FILTER (WHERE score > 10) AS high, "
     "COUNT(DISTINCT price) FILTER (WHERE k1 < 3) AS low_k1, COUNT(DISTINCT score) AS scores, COUNT(*) AS n "
     "FROM ev GROUP BY k2"),
    # ... and over an updating input, whose retractions take values away.
    # Global aggregates that read no column still count rows (COUNT(*) alone returned no row).
    "SELECT COUNT(*) AS n FROM ev",
    "SELECT COUNT(*) AS n FROM ev WHERE price > 100",
    "SELECT COUNT(*) AS n FROM ev HAVING COUNT(*) > 10",
    "SELECT COUNT(*) AS n, COUNT(1) AS ones FROM ev WHERE k2 = 'a'",
    "SELECT COUNT(*) AS n FROM (SELECT k1, COUNT(*) AS c FROM ev GROUP BY k1)",
    ("SELECT n % 4 AS r, COUNT(DISTINCT k2) AS k2s, COUNT(DISTINCT s % 7) FILTER (WHERE n > 130) AS sevens, "
     "COUNT(*) AS keys FROM (SELECT k1, k2, COUNT(*) AS n, SUM(price) AS s FROM ev GROUP BY k1, k2) GROUP BY n % 4"),
]


#: Group aggregations in mini-batches of about five source batches (and the last one at the end).
MINI_BATCH = {"table.exec.mini-batch.enabled": "true", "table.exec.mini-batch.allow-latency": "1 h",
              "table.exec.mini-batch.size": "500"}


#: The same plan on two Ray workers, with mini-batches: barriers, watermarks and the end flush
#: them in each worker.
ON_RAY = {"execution.target": "ray", "parallelism.default": "2", **MINI_BATCH}


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize(("backend", "settings"), [
    ("memory", {}), ("sqlite", {}), ("memory", MINI_BATCH),
    pytest.param("memory", ON_RAY, marks=pytest.mark.cluster, id="memory-ray"),
])
def test_final_table_equals_duckdb(events: pa.Table, query: str, backend: str, settings: dict,
                                   request: pytest.FixtureRequest) -> None:
    if settings.get("execution.target") == "ray":
        request.getfixturevalue("ray_cluster")
    context = RuntimeContext(config={"state.backend": backend, **settings})
    ours = run_select(query, context=context, row_group_size=97, ev=events)
    theirs = _duck(query, events)
    _same(ours, theirs)


def _duck(query: str, events: pa.Table) -> list[tuple]:
    con = shared_duckdb.connect()
    con.register("ev", events)
    return con.execute(query).fetchall()


def _printed_changes(tmp_path: Path, settings: str = "") -> list[str]:
    """The changes ``clink run`` prints for counts and sums of five rows, read one at a time."""
    script = tmp_path / "counts.sql"
    script.write_text(
        settings +
        "CREATE TABLE t (id INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5', 'batch-size' = '1',\n"
        "  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '5');\n"
        "SELECT id % 2 AS odd, COUNT(*) AS n, SUM(id) AS s FROM t GROUP BY id % 2;\n")
    done = subprocess.run([sys.executable, "-m", "clink", "run", "--recompile", str(script)], capture_output=True,
                          text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line[:2] in ("+I", "-U", "+U", "-D")]


def test_print_shows_each_change_with_its_kind(tmp_path: Path) -> None:
    lines = _printed_changes(tmp_path)
    assert lines == ["+I[1, 1, 1]", "+I[0, 1, 2]", "-U[1, 1, 1]", "+U[1, 2, 4]", "-U[0, 1, 2]", "+U[0, 2, 6]",
                     "-U[1, 2, 4]", "+U[1, 3, 9]"]


def test_a_mini_batch_aggregates_its_rows_together(tmp_path: Path) -> None:
    """Five rows in batches of one, in mini-batches of three rows: each key changes once per
    mini-batch, not once per row (as Flink's 'table.exec.mini-batch.*' do)."""
    lines = _printed_changes(tmp_path, "SET 'table.exec.mini-batch.enabled' = 'true';\n"
                                       "SET 'table.exec.mini-batch.allow-latency' = '1 h';\n"
                                       "SET 'table.exec.mini-batch.size' = '3';\n")
    # Rows 1-3, then rows 4-5 (the end); within a mini-batch, the keys' changes in any order.
    assert sorted(lines[:2]) == ["+I[0, 1, 2]", "+I[1, 2, 4]"]
    assert sorted(lines[2:]) == ["+U[0, 2, 6]", "+U[1, 3, 9]", "-U[0, 1, 2]", "-U[1, 2, 4]"]


@pytest.mark.parametrize(("settings", "message"), [
    ({"table.exec.mini-batch.enabled": "true"}, "needs 'table.exec.mini-batch.allow-latency'"),
    ({"table.exec.mini-batch.enabled": "true", "table.exec.mini-batch.allow-latency": "2 s"},
     "and 'table.exec.mini-batch.size', each greater than 0"),
    ({"table.exec.mini-batch.enabled": "yes"}, "expected one of 'true', 'false', got 'yes'"),
    ({"table.exec.mini-batch.enabled": "true", "table.exec.mini-batch.allow-latency": "2 s",
      "table.exec.mini-batch.size": "lots"}, "'table.exec.mini-batch.size': expected a whole number"),
])
def test_a_mini_batch_without_its_bounds_is_refused(settings: dict, message: str) -> None:
    from clink.errors import UsageError

    with pytest.raises(UsageError, match=re.escape(message)):
        clink.sql("CREATE TABLE t (k INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n"
                  "SELECT k, COUNT(*) FROM t GROUP BY k", context=RuntimeContext(config=settings)).to_arrow()


def test_a_mini_batch_size_of_zero_is_a_positioned_error() -> None:
    script = ("SET 'table.exec.mini-batch.size' = '0';\nCREATE TABLE t (k INT) WITH ('connector' = 'datagen');\n"
              "SELECT k FROM t")
    with pytest.raises(SqlError) as info:
        clink.compile(script, name="p.sql")
    text = info.value.render({"p.sql": script})
    assert "p.sql:1:" in text and "table.exec.mini-batch.size" in text


def test_updates_into_an_append_only_sink_are_refused_with_a_position() -> None:
    script = (
        "CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n"
        "CREATE TABLE out_file (k INT, n BIGINT) WITH ('connector' = 'filesystem', 'path' = '/tmp/x', "
        "'format' = 'csv');\n"
        "INSERT INTO out_file SELECT k, COUNT(*) FROM t GROUP BY k;\n")
    with pytest.raises(SqlError) as info:
        clink.compile(script, name="p.sql")
    text = info.value.render({"p.sql": script})
    assert "table 'out_file' (connector 'filesystem') takes only inserts, but the query produces updates" in text
    assert "p.sql:3:13" in text and "blackhole, collect, print" in text


def test_updates_into_print_and_blackhole_are_accepted_and_explained() -> None:
    script = (
        "CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '50', 'batch-size' = '5',"
        " 'fields.k.min' = '1', 'fields.k.max' = '3');\n"
        "CREATE TABLE shown (k INT, n BIGINT) WITH ('connector' = 'print');\n"
        "CREATE TABLE gone (k INT, n BIGINT) WITH ('connector' = 'blackhole');\n"
        "INSERT INTO shown SELECT k, COUNT(*) FROM t GROUP BY k;\n"
        "INSERT INTO gone SELECT k, COUNT(*) FROM t GROUP BY k;\n")
    plan = clink.compile(script)
    explained = plan.explain()
    assert "GroupAggregate state keys=[k]" in explained and "produces updates" in explained
    out = io.StringIO()
    plan.run(context=RuntimeContext(stdout=out)).run()
    printed = out.getvalue().splitlines()
    assert printed[0].startswith("+I[") and any(line.startswith("+U[") for line in printed)


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT k, STDDEV_POP(v) FROM t GROUP BY k", "is not supported in a GROUP BY without a window yet"),
    ("SELECT n, MAX(k) FROM (SELECT k, COUNT(*) AS n FROM t GROUP BY k) GROUP BY n",
     "over an updating input is not supported yet"),
])
def test_unsupported_group_aggregates_are_refused(query: str, message: str) -> None:
    with pytest.raises(SqlError, match=message):
        clink.compile("CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n"
                      + query)


RESTART_SQL = """
CREATE TABLE t (k BIGINT, v BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '20000', 'seed' = '3',
  'batch-size' = '500', 'fields.k.min' = '1', 'fields.k.max' = '40', 'fields.v.min' = '1', 'fields.v.max' = '99');
SELECT n, COUNT(*) AS keys, SUM(s) AS total FROM (SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k) GROUP BY n;
"""


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_stopped_and_resumed_job_adds_up_to_the_same_table(tmp_path: Path, backend: str, path: str) -> None:
    from clink.runtime.changelog import materialize
    from clink.runtime.executor import Job

    if path.startswith("ray:"):
        return _stopped_and_resumed_on_ray(tmp_path, backend)
    plan = clink.compile(RESTART_SQL, name="restart.sql").runtime_plan
    [query] = [s for s in plan.sinks if s.connector == "collect"]
    changes: list[pa.RecordBatch] = []

    def job(state: Path | None) -> Job:
        config = {"state.backend": backend}
        if state is not None:
            config["execution.checkpointing.interval-rows"] = "3000"
        return Job(plan, RuntimeContext(config=config, state_dir=state, on_result=lambda _, b: changes.append(b)))

    job(None).run()
    expected = materialize(pa.Table.from_batches(changes, schema=query.schema), query.changelog)
    changes.clear()
    first = job(tmp_path)
    first.run(stop_after_checkpoints=2)
    assert first.metrics.stopped_at is not None
    second = job(tmp_path)
    assert second.metrics.restored_from == first.metrics.stopped_at
    second.run()
    resumed = materialize(pa.Table.from_batches(changes, schema=query.schema), query.changelog)
    assert sorted(resumed.to_pylist(), key=str) == sorted(expected.to_pylist(), key=str)
    assert expected.num_rows > 3


def _stopped_and_resumed_on_ray(tmp_path: Path, backend: str) -> None:
    """On Ray: stopped with a checkpoint (``clink stop --with-checkpoint``) while it runs, then
    submitted again over the same state directory, the job's changes add up to the table of a
    run that never stopped."""
    from clink.cluster import onray
    from clink.runtime.artefact import artefact_bytes
    from clink.runtime.changelog import materialize

    # 20,000 rows at 8,000 a second: the job runs for 2.5 s, long enough to be stopped.
    compiled = clink.compile(RESTART_SQL.replace("'batch-size' = '500'", "'batch-size' = '500', "
                                                 "'rows-per-second' = '8000'"), name="restart.sql")
    plan = compiled.runtime_plan
    [query] = [s for s in plan.sinks if s.connector == "collect"]
    artefact = artefact_bytes(module_source=compiled.source, plan=plan)
    changes: list[pa.RecordBatch] = []

    def submit(state: Path | None) -> onray.RayJob:
        config = {"state.backend": backend, "parallelism.default": "2"}
        if state is not None:
            config["execution.checkpointing.interval"] = "200 ms"
        return onray.submit(artefact, config=config, state_dir=str(state) if state else None, workers=2,
                            parallelism=2, fingerprint=compiled.fingerprint, host="127.0.0.1",
                            on_result=lambda _, batch: changes.append(batch))

    def table() -> list[dict]:
        rows = materialize(pa.Table.from_batches(changes, schema=query.schema), query.changelog).to_pylist()
        changes.clear()
        return sorted(rows, key=str)

    submit(None).result()
    expected = table()
    first = submit(tmp_path)
    while first.status()["last_checkpoint"] is None:
        time.sleep(0.05)
    stopped = first.stop(with_checkpoint=True)
    assert stopped["state"] == "stopped" and stopped["stopped_at"] is not None
    assert sum(b.num_rows for b in changes) > 0, "stopped before any change came back"
    second = submit(tmp_path).result()
    assert second["restored_from"] == stopped["stopped_at"]
    assert table() == expected and len(expected) > 3


def test_state_ttl_is_read_from_set_and_applies_to_count_distinct() -> None:
    base = ("CREATE TABLE t (k INT, v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '200', "
            "'fields.k.min' = '1', 'fields.k.max' = '5');\n")
    # A TTL far longer than the run: the result is the same as without one.
    for select in ("SELECT k, COUNT(*) AS n FROM t GROUP BY k;", "SELECT k, COUNT(DISTINCT v) AS n FROM t GROUP BY k;"):
        with_ttl = clink.sql("SET 'table.exec.state.ttl' = '1 h';\n" + base + select)
        plain = clink.sql(base + select)
        assert sorted(with_ttl.to_arrow().to_pylist(), key=repr) == sorted(plain.to_arrow().to_pylist(), key=repr)


def test_an_aggregate_that_overflows_its_type_fails_at_the_aggregations_sql() -> None:
    """SUM of an INT is an INT (Flink's type); past its range the pipeline fails with the
    position of the aggregation, not a raw traceback."""
    from clink.errors import PipelineError

    t = pa.table({"k": pa.array([1, 1, 1], pa.int64()), "v": pa.array([2**31 - 1, 2**31 - 1, 5], pa.int32())})
    with pytest.raises(PipelineError, match="cannot CAST 4294967299 to INT") as exc:
        run_select("SELECT k, SUM(v) AS s FROM t GROUP BY k", t=t)
    assert exc.value.span is not None and exc.value.span.file == "test.sql"
