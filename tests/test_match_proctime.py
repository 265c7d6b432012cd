"""The first example of Flink's pattern-recognition page orders by processing time: rows are
matched in the order they arrive. That order is the file's only when one subtask reads it (with
several, their rows interleave as they come, in Flink too), so these tests run at one subtask,
outside the differential suite that repeats every test at several."""

from __future__ import annotations

import pyarrow as pa
import pytest

from clink.errors import SqlError

BATCHES = pytest.mark.parametrize("batch", [1, 3, 100])


INTRO = """SELECT T.aid, T.bid, T.cid
FROM MyTable
    MATCH_RECOGNIZE (
      PARTITION BY userid
      ORDER BY proctime
      MEASURES
        A.id AS aid,
        B.id AS bid,
        C.id AS cid
      PATTERN (A B C)
      DEFINE
        A AS name = 'a',
        B AS name = 'b',
        C AS name = 'c'
    ) AS T"""


def _my_table(tmp_path, names: list[tuple[int, str]], batch: int) -> str:
    import pyarrow.parquet as pq

    path = tmp_path / "my.parquet"
    pq.write_table(pa.table({"userid": pa.array([u for u, _ in names], pa.int64()),
                             "id": pa.array(range(1, len(names) + 1), pa.int64()),
                             "name": [n for _, n in names]}), path, row_group_size=batch)
    return (f"CREATE TABLE MyTable (userid BIGINT, id BIGINT, name STRING, proctime AS PROCTIME()) "
            f"WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'parquet')")


@BATCHES
@pytest.mark.parametrize("pattern", ["A B C", "A B+ C"])  # matched a batch at a time, or run by run
def test_the_pages_first_example_matches_in_arrival_order(tmp_path, batch: int, pattern: str) -> None:
    import duckdb

    import clink

    names = [(1, "a"), (2, "a"), (1, "b"), (2, "x"), (1, "c"), (2, "a"), (2, "b"), (1, "a"), (2, "c"), (1, "b"),
             (1, "b"), (1, "a"), (1, "b"), (1, "c"), (3, "a"), (3, "b")]
    query = INTRO.replace("PATTERN (A B C)", f"PATTERN ({pattern})")
    rows = clink.sql(f"{_my_table(tmp_path, names, batch)};\n{query};").to_pylist()
    got = sorted((r["aid"], r["bid"], r["cid"]) for r in rows)
    # DuckDB on the same rows, arrival order being the id order.
    want = duckdb.sql("SELECT id, b, c FROM (SELECT id, name, LEAD(name) OVER w AS n1, LEAD(name, 2) OVER w AS n2, "
                      "LEAD(id) OVER w AS b, LEAD(id, 2) OVER w AS c FROM (SELECT * FROM read_parquet("
                      f"'{tmp_path / 'my.parquet'}')) WINDOW w AS (PARTITION BY userid ORDER BY id)) "
                      "WHERE name = 'a' AND n1 = 'b' AND n2 = 'c'").fetchall()
    assert got == sorted(want) == [(1, 3, 5), (6, 7, 9), (12, 13, 14)]


def test_a_match_by_processing_time_has_no_rowtime(tmp_path) -> None:
    import clink

    with pytest.raises(SqlError, match=r"MATCH_ROWTIME\(\) needs a MATCH_RECOGNIZE ordered by event time"):
        clink.compile(f"{_my_table(tmp_path, [(1, 'a')], 1)};\n"
                      + INTRO.replace("C.id AS cid", "C.id AS cid, MATCH_ROWTIME() AS t"))
