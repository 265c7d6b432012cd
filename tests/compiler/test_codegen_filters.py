"""What the generated filters copy: only the columns, and of a ROW column only the fields, that
the rest of the chain reads — and the rows that come out are the same."""

from __future__ import annotations

import pyarrow as pa

import clink
from clink.runtime.context import RuntimeContext

DDL = """CREATE TABLE ev (kind INT, r ROW<a BIGINT, s STRING, b BIGINT>, other STRING)
WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'parquet');
"""


def _script(tmp_path, select: str) -> str:
    import pyarrow.parquet as pq

    pq.write_table(_table(), tmp_path / "ev.parquet")
    return DDL.format(path=tmp_path / "ev.parquet") + select


def _table() -> pa.Table:
    rows = pa.array([{"a": i, "s": f"s{i}", "b": i * 10} if i % 5 else None for i in range(40)],
                    pa.struct([("a", pa.int64()), ("s", pa.string()), ("b", pa.int64())]))
    return pa.table({"kind": pa.array([i % 3 for i in range(40)], pa.int32()), "r": rows,
                     "other": pa.array([f"o{i}" for i in range(40)])})


def test_a_filter_copies_only_the_fields_read_below(tmp_path) -> None:
    script = _script(tmp_path, "SELECT r.a, r.b + 1 AS b1 FROM ev WHERE kind = 2;\n")
    source = clink.compile(script).source
    assert "K.filter(batch, keep, (1,), {1: (0, 2)})" in source
    rows = clink.sql(script, context=RuntimeContext()).to_arrow().to_pylist()
    assert rows == [{"a": i if i % 5 else None, "b1": i * 10 + 1 if i % 5 else None} for i in range(40) if i % 3 == 2]


def test_a_row_read_whole_is_filtered_whole(tmp_path) -> None:
    script = _script(tmp_path, "SELECT r, r.a FROM ev WHERE kind = 1;\n")
    source = clink.compile(script).source
    assert "K.filter(batch, keep, (1,))" in source
    rows = clink.sql(script, context=RuntimeContext()).to_arrow().to_pylist()
    assert [r["a"] for r in rows] == [i if i % 5 else None for i in range(40) if i % 3 == 1]
    assert [r["r"] for r in rows][:2] == [{"a": 1, "s": "s1", "b": 10}, {"a": 4, "s": "s4", "b": 40}]
