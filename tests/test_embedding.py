"""The embedding API: a pipeline running inside the test's process, fed by ``push`` and read by
``poll``. Results are compared with ``clink.sql`` reading the same rows from a Parquet file, or
with results worked out by hand."""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.util
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import clink
from clink.embedded import EmbeddedJob

EXAMPLES = Path(__file__).parent.parent / "examples"

BIDS = """\
CREATE TABLE bids (
  auction BIGINT NOT NULL,
  price   BIGINT,
  ts      TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH ({with_});
"""
PUSH = "'connector' = 'push'"
WINDOWS = """\
SELECT auction, window_start, COUNT(*) AS n, SUM(price) AS total
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end, auction;
"""
EXPENSIVE = "SELECT auction, price * 2 AS doubled FROM bids WHERE price > 50;\n"
SCHEMA = pa.schema([pa.field("auction", pa.int64(), nullable=False), ("price", pa.int64()),
                    ("ts", pa.timestamp("ms"))])
T0 = dt.datetime(2024, 1, 1)


def make_bids(n: int, seed: int = 7) -> pa.Table:
    """``n`` bids over about a minute, in order of event time (so that no row is late however
    the rows are cut into pushes, and every run fires the same windows)."""
    rng = np.random.default_rng(seed)
    offsets_ms = np.sort(rng.integers(0, 60_000, n))
    ts = (np.datetime64("2024-01-01T00:00:00", "ms") + offsets_ms.astype("timedelta64[ms]"))
    return pa.table({"auction": rng.integers(1, 6, n), "price": rng.integers(1, 100, n), "ts": ts},
                    schema=SCHEMA)


def rows(batches: list[pa.RecordBatch] | pa.Table) -> list[tuple]:
    table = batches if isinstance(batches, pa.Table) else pa.Table.from_batches(batches)
    return sorted(tuple(r.values()) for r in table.to_pylist())


def reference(query: str, bids: pa.Table, tmp_path: Path) -> list[tuple]:
    """What ``clink.sql`` gives for ``query`` over ``bids`` read from a Parquet file."""
    path = tmp_path / "reference" / "bids.parquet"
    path.parent.mkdir(exist_ok=True)
    pq.write_table(bids, path)
    source = f"'connector' = 'filesystem', 'path' = '{path}', 'format' = 'parquet'"
    return rows(clink.sql(BIDS.format(with_=source) + query).to_arrow())


def drain(job: EmbeddedJob, query: str | None = None) -> list[pa.RecordBatch]:
    batches = []
    while (batch := job.poll(query)) is not None:
        batches.append(batch)
    return batches


def plan(query: str = WINDOWS, name: str = "bids.sql") -> clink.Plan:
    return clink.compile(BIDS.format(with_=PUSH) + query, name=name)


# -- step mode -----------------------------------------------------------------------------------


def test_windows_over_pushed_rows_match_the_same_sql_over_a_file(tmp_path: Path) -> None:
    bids = make_bids(2000)
    job = plan().start()
    out: list[pa.RecordBatch] = []
    for chunk in bids.to_batches(max_chunksize=150):
        job.push("bids", chunk)
        out += drain(job)
    assert out, "windows fire while rows are still being pushed, as the watermark passes them"
    job.close_input("bids")
    assert job.wait(timeout=10)
    out += drain(job)
    assert rows(out) == reference(WINDOWS, bids, tmp_path)
    assert job.metrics().records_in == {"bids": 2000}


def test_a_window_fires_when_the_watermark_passes_its_end() -> None:
    job = plan().start()
    job.push("bids", [{"auction": 1, "price": 5, "ts": "2024-01-01 00:00:01"},
                      {"auction": 1, "price": 9, "ts": "2024-01-01 00:00:04"},
                      {"auction": 2, "price": 3, "ts": "2024-01-01 00:00:07"}])
    assert job.poll() is None  # the watermark is 00:00:06: the window [0 s, 10 s) is open
    job.push("bids", [{"auction": 2, "price": 4, "ts": "2024-01-01 00:00:11"}])
    fired = job.poll()
    assert fired is not None and job.poll() is None
    assert fired.to_pylist() == [{"auction": 1, "window_start": T0, "n": 2, "total": 14},
                                 {"auction": 2, "window_start": T0, "n": 1, "total": 3}]
    job.close_input("bids")
    assert job.wait()
    assert rows(drain(job)) == [(2, T0 + dt.timedelta(seconds=10), 1, 4)]
    assert job.finished


def test_step_and_run_until_idle_drive_the_job() -> None:
    job = plan(EXPENSIVE).start()
    assert job.step() is False  # nothing pushed: nothing to do
    job.push("bids", [{"auction": 1, "price": 60}, {"auction": 2, "price": 10}])
    assert job.run_until_idle() is True
    assert job.run_until_idle() is False
    assert job.poll().to_pylist() == [{"auction": 1, "doubled": 120}]


def test_two_queries_over_one_push_table_both_see_every_row(tmp_path: Path) -> None:
    bids = make_bids(500)
    job = plan(WINDOWS + EXPENSIVE).start()
    assert job.queries == ["query_1", "query_2"] and job.push_tables == ["bids"]
    job.push("bids", bids)
    job.close_input("bids")
    assert job.wait()
    assert rows(drain(job, "query_1")) == reference(WINDOWS, bids, tmp_path)
    assert rows(drain(job, "query_2")) == reference(EXPENSIVE, bids, tmp_path)
    with pytest.raises(clink.UsageError, match="2 queries; name one: query_1, query_2"):
        job.poll()


# -- input types and bad input --------------------------------------------------------------------


def test_tables_batches_and_lists_of_dicts_are_cast_to_the_table_schema() -> None:
    job = plan("SELECT auction, price, ts FROM bids;").start()
    # A Table with columns in another order and narrower types.
    job.push("bids", pa.table({"ts": pa.array([T0], pa.timestamp("s")), "price": pa.array([1], pa.int8()),
                               "auction": pa.array([10], pa.int32())}))
    # A RecordBatch with microsecond timestamps (truncated to the column's milliseconds).
    job.push("bids", pa.RecordBatch.from_pydict({"auction": [11], "price": [2],
                                                  "ts": [dt.datetime(2024, 1, 1, 0, 0, 1, 500_999)]}))
    # Dicts with text timestamps, a key only the second row has, and a missing nullable column.
    job.push("bids", [{"auction": 12, "ts": "2024-01-01 00:00:02"},
                      {"auction": 13, "ts": "2024-01-01T00:00:03.250", "price": 4}])
    job.push("bids", [{"auction": 14}])
    job.push("bids", [])  # nothing, and no error
    result = pa.Table.from_batches(drain(job))
    assert result.schema.field("auction").type == pa.int64()
    assert result.schema.field("ts").type == pa.timestamp("ms")
    assert rows(result) == [
        (10, 1, T0),
        (11, 2, T0 + dt.timedelta(seconds=1, milliseconds=500)),
        (12, None, T0 + dt.timedelta(seconds=2)),
        (13, 4, T0 + dt.timedelta(seconds=3, milliseconds=250)),
        (14, None, None),
    ]
    assert job.pushed_position("bids") == 5


class _ArrowStream:
    """Any object that offers its rows through the Arrow PyCapsule interface."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self._table.__arrow_c_stream__(requested_schema)


def test_dataframes_and_arrow_streams_are_accepted() -> None:
    job = plan(EXPENSIVE).start()
    job.push("bids", _ArrowStream(pa.table({"auction": [1], "price": [60]})))
    expected = [(1, 120)]
    for library in ("pandas", "polars"):
        if importlib.util.find_spec(library) is None:
            continue  # optional: tested where it is installed
        frames = importlib.import_module(library)
        job.push("bids", frames.DataFrame({"auction": [len(expected) + 1], "price": [70]}))
        expected.append((len(expected) + 1, 140))
    assert rows(drain(job)) == expected


def test_two_readers_of_a_table_restored_at_different_rows_skip_what_they_had() -> None:
    from clink.runtime.connectors.base import TableSpec
    from clink.runtime.connectors.push import PushInputs

    inputs = PushInputs()
    schema = pa.schema([("a", pa.int64())])
    connector = inputs.connector()
    readers = [connector.create_source(TableSpec(name="t", schema=schema, table_schema=schema), None)
               for _ in range(2)]
    readers[0].seek({"rows": 3})
    readers[1].seek({"rows": 5})
    inputs.started()
    assert inputs.pushed_position("t") == 3  # the application pushes again from row 3
    inputs.offer("t", inputs.convert("t", [{"a": i} for i in range(3, 8)]))
    assert readers[0].poll().column("a").to_pylist() == [3, 4, 5, 6, 7]
    assert readers[1].poll().column("a").to_pylist() == [5, 6, 7]
    assert [r.position() for r in readers] == [{"rows": 8}, {"rows": 8}]


@pytest.mark.parametrize(("pushed", "message"), [
    ([{"auction": 1, "prize": 3}],
     "cannot push into table 'bids': it has no column 'prize'; did you mean 'price'?"),
    ([{"auction": 1, "price": "cheap"}],
     "table 'bids': column 'price' is BIGINT, and the pushed STRING values do not convert"),
    ([{"auction": 1, "price": 1}, {"auction": 2, "price": "two"}],
     "table 'bids': the values of column 'price' do not have one type"),
    ([{"auction": None, "price": 1}], "table 'bids': column 'auction' is NOT NULL, and 1 pushed row"),
    ([{"price": 1}], "table 'bids': column 'auction' is NOT NULL, and the pushed rows do not have it"),
    (pa.table({"auction": [1.5]}), "column 'auction' is BIGINT, and the pushed DOUBLE values do not convert"),
    ([1, 2], "a list must hold one dict per row"),
    ("auction,price", "takes a pyarrow RecordBatch or Table, a list of dicts"),
])
def test_bad_input_is_refused_naming_the_table_and_column(pushed: object, message: str) -> None:
    job = plan(EXPENSIVE).start()
    with pytest.raises(clink.UsageError) as raised:
        job.push("bids", pushed)
    assert message in str(raised.value)
    assert job.pushed_position("bids") == 0  # nothing of a refused push goes in
    job.push("bids", [{"auction": 1, "price": 70}])  # and the job carries on
    assert job.poll().to_pylist() == [{"auction": 1, "doubled": 140}]


def test_unknown_and_closed_tables_are_refused() -> None:
    job = plan(EXPENSIVE).start()
    with pytest.raises(clink.UsageError, match=r"no push table named 'bid' .*did you mean 'bids'"):
        job.push("bid", [{"auction": 1}])
    job.close_input("bids")
    with pytest.raises(clink.UsageError, match="push table 'bids' is closed"):
        job.push("bids", [{"auction": 1}])


def test_a_push_table_cannot_run_outside_start() -> None:
    with pytest.raises(clink.UsageError, match=r"uses the 'push' connector.*plan.start\(\)"):
        clink.sql(BIDS.format(with_=PUSH) + EXPENSIVE)


def test_waiting_forever_on_an_open_input_is_refused() -> None:
    job = plan().start()
    with pytest.raises(clink.UsageError, match="never end; close_input"):
        job.wait()
    assert job.wait(timeout=0.05) is False


# -- background mode ------------------------------------------------------------------------------


def test_background_mode_runs_the_job_in_a_thread(tmp_path: Path) -> None:
    bids = make_bids(3000, seed=3)
    job = plan().start(background=True)
    assert job.background
    out: list[pa.RecordBatch] = []
    for chunk in bids.to_batches(max_chunksize=400):
        job.push("bids", chunk)
        out += drain(job)
    job.close_input("bids")
    assert job.wait(timeout=10)
    out += drain(job)
    assert rows(out) == reference(WINDOWS, bids, tmp_path)


def test_background_poll_waits_for_a_batch() -> None:
    job = plan(EXPENSIVE).start(background=True)
    assert job.poll(timeout=0.05) is None
    pusher = threading.Timer(0.05, job.push, args=("bids", [{"auction": 3, "price": 99}]))
    pusher.start()
    batch = job.poll(timeout=5)
    pusher.join()
    assert batch is not None and batch.to_pylist() == [{"auction": 3, "doubled": 198}]
    assert job.stop() is None  # no state directory: no checkpoint
    assert job.finished


def test_on_rows_hands_each_batch_to_a_callback() -> None:
    job = plan(EXPENSIVE).start(background=True)
    job.push("bids", [{"auction": 1, "price": 60}])
    job.run_until_idle()  # this batch waits in the queue until the callback is set
    seen: list[pa.RecordBatch] = []
    job.on_rows(None, seen.append)
    job.push("bids", [{"auction": 2, "price": 80}, {"auction": 3, "price": 5}])
    job.close_input("bids")
    assert job.wait(timeout=10)
    assert rows(seen) == [(1, 120), (2, 160)]
    assert job.poll() is None


def test_iterating_yields_every_batch_until_the_job_ends() -> None:
    job = plan(EXPENSIVE).start(background=True)
    job.push("bids", [{"auction": 1, "price": 60}])
    job.push("bids", [{"auction": 2, "price": 70}])
    job.close_input("bids")
    assert rows(list(job)) == [(1, 120), (2, 140)]


# -- pipeline errors ------------------------------------------------------------------------------

CAST = ("CREATE TABLE t (id BIGINT, s STRING) WITH ('connector' = 'push');\n"
        "SELECT id, CAST(s AS INT) AS n FROM t;\n")


def test_a_pipeline_error_comes_out_of_poll_with_its_sql_position() -> None:
    job = clink.compile(CAST, name="cast.sql").start()
    job.push("t", [{"id": 1, "s": "12"}, {"id": 2, "s": "twelve"}])
    with pytest.raises(clink.PipelineError) as raised:
        job.poll()
    assert raised.value.where == "cast.sql:2:12  CAST(s AS INT)"
    assert "cannot CAST 'twelve' to INT" in str(raised.value)
    with pytest.raises(clink.PipelineError) as again:  # the job is dead; every call says why
        job.push("t", [{"id": 3, "s": "3"}])
    assert again.value is raised.value


def test_a_pipeline_error_in_the_background_thread_is_raised_by_the_next_call() -> None:
    job = clink.compile(CAST, name="cast.sql").start(background=True)
    job.push("t", [{"id": 1, "s": "12"}])
    assert job.poll(timeout=5).to_pylist() == [{"id": 1, "n": 12}]
    job.push("t", [{"id": 2, "s": "twelve"}])
    with pytest.raises(clink.PipelineError) as raised:
        job.wait(timeout=10)
    assert raised.value.span == clink.errors.Span("cast.sql", 2, 12)
    rendered = raised.value.render({"cast.sql": CAST})
    assert rendered.startswith("cast.sql:2:12: error: pipeline failed: cannot CAST 'twelve' to INT\n"
                               " 2 | SELECT id, CAST(s AS INT) AS n FROM t;\n"
                               "   |            ^^^^^^^^^^^^^^")
    for call in (job.poll, lambda: job.push("t", [{"id": 3, "s": "3"}]), job.stop, job.checkpoint):
        with pytest.raises(clink.PipelineError) as again:
            call()
        assert again.value is raised.value
    assert job.finished


# -- checkpoints and restarts ---------------------------------------------------------------------


def test_stop_with_checkpoint_then_restart_gives_the_uninterrupted_results(tmp_path: Path) -> None:
    bids = make_bids(3000, seed=11)
    query = WINDOWS + EXPENSIVE
    state = tmp_path / "state"
    first = plan(query).start(state_dir=state)
    first.push("bids", bids.slice(0, 1000))
    out1, out2 = drain(first, "query_1"), drain(first, "query_2")
    first.push("bids", bids.slice(1000, 700))  # pushed, not yet run: the checkpoint takes them in
    checkpoint_id = first.stop(with_checkpoint=True)
    assert checkpoint_id is not None
    assert first.checkpointed_position("bids") == first.pushed_position("bids") == 1700
    out1 += drain(first, "query_1")
    out2 += drain(first, "query_2")

    second = plan(query).start(state_dir=state)
    assert second.metrics().restored_from == checkpoint_id
    resume = second.pushed_position("bids")
    assert resume == 1700
    second.push("bids", bids.slice(resume))
    second.close_input("bids")
    assert second.wait(timeout=10)
    out1 += drain(second, "query_1")
    out2 += drain(second, "query_2")
    assert rows(out1) == reference(WINDOWS, bids, tmp_path)
    assert rows(out2) == reference(EXPENSIVE, bids, tmp_path)


def test_rows_pushed_after_the_last_checkpoint_are_pushed_again_after_a_restart(tmp_path: Path) -> None:
    bids = make_bids(2000, seed=5)
    state = tmp_path / "state"
    first = plan().start(state_dir=state)
    first.push("bids", bids.slice(0, 800))
    first.checkpoint()
    assert first.checkpointed_position("bids") == 800
    kept = drain(first)  # results up to the checkpoint
    first.push("bids", bids.slice(800, 600))
    first.run_until_idle()
    drain(first)  # results after the checkpoint: a crash loses them, and the restart makes them again
    assert first.pushed_position("bids") == 1400 and first.checkpointed_position("bids") == 800
    assert first.stop(with_checkpoint=False) is None  # stands for a crash: no last checkpoint

    second = plan().start(state_dir=state)
    assert second.pushed_position("bids") == second.checkpointed_position("bids") == 800
    second.push("bids", bids.slice(800))
    second.close_input("bids")
    assert second.wait(timeout=10)
    assert rows(kept + drain(second)) == reference(WINDOWS, bids, tmp_path)


def test_automatic_checkpoints_move_the_checkpointed_position(tmp_path: Path) -> None:
    job = plan(EXPENSIVE).start(state_dir=tmp_path / "state",
                                config={"execution.checkpointing.interval-rows": "100"})
    job.push("bids", make_bids(250))
    job.run_until_idle()
    assert job.metrics().checkpoints >= 1
    assert job.checkpointed_position("bids") == 250


def test_checkpoints_need_a_state_directory() -> None:
    job = plan().start()
    with pytest.raises(clink.UsageError, match=r"plan.start\(state_dir=...\)"):
        job.checkpoint()


# -- plans from artefacts, and the context manager -------------------------------------------------


def test_a_loaded_artefact_starts_like_a_compiled_plan(tmp_path: Path) -> None:
    from clink.runtime.artefact import write_artefact

    compiled = plan(EXPENSIVE)
    path = write_artefact(tmp_path / "bids.clk", module_source=compiled.source, plan=compiled.runtime_plan,
                          sql=BIDS.format(with_=PUSH) + EXPENSIVE, explain=compiled.explain(),
                          clink_version=clink.__version__)
    with clink.load(path).start() as job:
        job.push("bids", [{"auction": 4, "price": 51}, {"auction": 5, "price": 50}])
        assert job.poll().to_pylist() == [{"auction": 4, "doubled": 102}]
    assert job.finished


# -- the HTTP service example ---------------------------------------------------------------------


def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"clink_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _request(url: str, body: object | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_the_http_service_example_pushes_bids_and_serves_window_totals() -> None:
    example = _load_example("embedded_service")
    service = example.BidService(port=0).start()
    try:
        assert service.url.startswith("http://127.0.0.1:")
        assert _request(service.url + "/bid", {"auction": 1, "price": 5, "ts": "2024-01-01 00:00:01"}) == (
            200, {"pushed": 1})
        assert _request(service.url + "/bid", [{"auction": 1, "price": 9, "ts": "2024-01-01 00:00:04"},
                                               {"auction": 2, "price": 3, "ts": "2024-01-01 00:00:07"}]) == (
            200, {"pushed": 2})
        assert _request(service.url + "/totals") == (200, {"totals": []})  # nothing has closed yet
        _request(service.url + "/bid", {"auction": 1, "price": 4, "ts": "2024-01-01 00:00:12"})
        _request(service.url + "/bid", {"auction": 2, "price": 6, "ts": "2024-01-01 00:00:25"})
        status, body = _request(service.url + "/bid", {"auction": 2, "prize": 6})
        assert status == 400 and "no column 'prize'; did you mean 'price'?" in body["error"]
        status, body = _request(service.url + "/totals")
        assert status == 200
        totals = [(t["auction"], t["window_start"][:19], t["bids"], t["top_price"]) for t in body["totals"]]
        assert totals == [
            (1, "2024-01-01T00:00:00", 2, 9),
            (2, "2024-01-01T00:00:00", 1, 3),
            (1, "2024-01-01T00:00:10", 1, 4),
        ]
        assert _request(service.url + "/nowhere")[0] == 404
    finally:
        service.close()
    assert service.job.finished
