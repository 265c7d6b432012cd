"""A result is an Arrow C stream (the PyCapsule interface): pyarrow and DuckDB read it directly,
and what they read is what to_arrow gives."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

import clink

BIDS = ("CREATE TABLE bid (auction BIGINT, price BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '500', "
        "'seed' = '4', 'batch-size' = '37', 'fields.auction.min' = '1', 'fields.auction.max' = '9', "
        "'fields.price.min' = '1', 'fields.price.max' = '1000')")


def test_pyarrow_reads_an_append_only_result_batch_by_batch() -> None:
    expected = clink.sql([BIDS, "SELECT auction, price * 2 AS doubled FROM bid"]).to_arrow()
    result = clink.sql([BIDS, "SELECT auction, price * 2 AS doubled FROM bid"])
    reader = pa.RecordBatchReader.from_stream(result)
    batches = list(reader)
    assert len(batches) > 1  # streamed as the pipeline made them, not gathered first
    assert pa.Table.from_batches(batches).equals(expected)


def test_duckdb_queries_a_result_by_its_name() -> None:
    result = clink.sql([BIDS, "SELECT auction, price FROM bid"])
    got = duckdb.sql("SELECT auction, SUM(price) AS s FROM result GROUP BY auction ORDER BY auction").fetchall()
    con = duckdb.connect()
    con.register("bids", clink.sql([BIDS, "SELECT auction, price FROM bid"]).to_arrow())
    assert got == con.execute("SELECT auction, SUM(price) AS s FROM bids GROUP BY auction ORDER BY auction").fetchall()
    assert len(got) == 9
    assert result.plan.runtime_plan.sinks  # read by DuckDB through its name above (pyflakes cannot see that)


def test_an_updating_result_is_its_final_table() -> None:
    query = "SELECT auction, COUNT(*) AS n, MAX(price) AS top FROM bid GROUP BY auction"
    table = pa.table(clink.sql([BIDS, query]))
    assert "_rowkind" not in table.column_names
    assert table.sort_by("auction").equals(clink.sql([BIDS, query]).to_arrow().sort_by("auction"))
    assert pa.compute.sum(table.column("n")).as_py() == 500


def test_a_script_of_two_queries_names_the_way_out() -> None:
    result = clink.sql([BIDS, "SELECT auction FROM bid", "SELECT price FROM bid"])
    with pytest.raises(clink.ClinkError, match="query"):
        pa.table(result)


def test_polars_reads_a_result_as_a_data_frame() -> None:
    import polars as pl

    query = "SELECT auction, price FROM bid WHERE price > 500"
    frame = pl.DataFrame(clink.sql([BIDS, query]))
    assert frame.columns == ["auction", "price"]
    expected = clink.sql([BIDS, query]).to_arrow()
    assert frame.sort(["auction", "price"]).rows() == [
        tuple(r.values()) for r in expected.sort_by([("auction", "ascending"), ("price", "ascending")]).to_pylist()]
    assert 0 < frame.height < 500


# A job's live output: the push table is fed in small batches, dense or with many NULLs.
PUSHED = "CREATE TABLE t (k BIGINT, v DOUBLE, s STRING) WITH ('connector' = 'push')"


def _table(nulls: bool) -> pa.Table:
    import random

    rng = random.Random(17)

    def maybe(value):
        return None if nulls and rng.random() < 0.5 else value

    rows = [{"k": maybe(rng.randint(1, 6)), "v": maybe(rng.randint(-500, 500) / 4), "s": maybe(rng.choice("abc"))}
            for _ in range(300)]
    return pa.Table.from_pylist(rows, schema=pa.schema([("k", pa.int64()), ("v", pa.float64()), ("s", pa.string())]))


def _started(query: str, table: pa.Table):
    job = clink.compile([PUSHED, query]).start()
    for batch in table.to_batches(max_chunksize=23):
        job.push("t", batch)
        job.run_until_idle()  # one batch at a time through the pipeline, as if they came apart
    job.close_input("t")
    return job


@pytest.mark.parametrize("nulls", [False, True], ids=["dense", "nulls"])
def test_a_job_stream_reads_in_duckdb_polars_and_pyarrow_as_duckdb_computes_it(nulls: bool) -> None:
    import polars as pl

    from tests.shared_duckdb import assert_same_rows, connect

    table = _table(nulls)
    query = "SELECT k, v * 2 AS v2, s FROM t WHERE v > 0 OR s = 'a'"
    con = connect()
    con.register("t", table)
    theirs = con.execute(query).fetchall()

    reader = pa.RecordBatchReader.from_stream(_started(query, table).stream())
    batches = list(reader)
    assert len(batches) > 1  # batch by batch, as the job made them
    assert_same_rows(pa.Table.from_batches(batches, schema=reader.schema), theirs)

    stream = _started(query, table).stream()  # DuckDB finds it by its name
    assert_same_rows(pa.table(duckdb.sql("SELECT * FROM stream").arrow()), theirs)
    assert repr(stream) == "<clink.QueryStream query_1 read>"  # DuckDB read this very stream

    frame = pl.DataFrame(_started(query, table).stream())
    assert frame.columns == ["k", "v2", "s"]
    assert_same_rows(frame.to_arrow(), theirs)
    assert len(theirs) > 50


def test_an_updating_job_stream_carries_its_row_kinds() -> None:
    from tests.shared_duckdb import connect

    table = _table(nulls=True)
    query = "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t GROUP BY k"
    changes = pa.table(_started(query, table).stream())
    assert changes.column_names == ["k", "n", "total", "_rowkind"]
    assert set(changes.column("_rowkind").to_pylist()) >= {"+I", "-U", "+U"}
    from clink.runtime.changelog import materialize
    from clink.runtime.plan import UPDATING

    final = materialize(changes, UPDATING)
    con = connect()
    con.register("t", table)
    want = sorted(con.execute(query).fetchall(), key=repr)
    got = sorted((tuple(r.values()) for r in final.to_pylist()), key=repr)
    assert [(k, n, None if t is None else round(t, 6)) for k, n, t in got] == \
        [(k, n, None if t is None else round(t, 6)) for k, n, t in want]


def test_a_job_stream_hands_over_the_job_s_own_buffers() -> None:
    batch = pa.record_batch({"k": pa.array([1, 2, 3], pa.int64()), "v": [0.5, None, 2.0], "s": ["x", "y", None]})
    job = clink.compile([PUSHED, "SELECT k, v, s FROM t"]).start()
    job.push("t", batch)
    job.close_input("t")
    got = pa.RecordBatchReader.from_stream(job.stream()).read_next_batch()
    # The rows reach the reader through the C stream without a copy: the very same buffers.
    assert got.column("k").buffers()[1].address == batch.column("k").buffers()[1].address
    assert got.column("s").buffers()[2].address == batch.column("s").buffers()[2].address


def test_a_job_stream_is_read_once_and_names_its_query() -> None:
    job = clink.compile([PUSHED, "SELECT k FROM t", "SELECT s FROM t"]).start()
    with pytest.raises(clink.ClinkError, match="name one: query_1, query_2"):
        job.stream()
    stream = job.stream("query_2")
    job.push("t", [{"k": 1, "s": "a"}])
    job.close_input("t")
    assert pa.table(stream).column("s").to_pylist() == ["a"]
    with pytest.raises(clink.ClinkError, match="read already"):
        pa.table(stream)
