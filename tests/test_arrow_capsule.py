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
