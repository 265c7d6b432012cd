"""DuckDB, the reference the differential and property tests compare clink with.

Opening a DuckDB database takes about 35 ms, and these tests open one hundreds of times: for
each example and each case. A cursor of a database that is open already takes well under a
millisecond and is a connection of its own: its settings (``SET TimeZone``) and the Arrow tables
registered on it are seen by no other cursor. So the tests take cursors of one in-memory database.

What a test creates in the database itself outlives its cursor: views a test makes are TEMP views,
which end with it.
"""

from __future__ import annotations

import functools

import duckdb


@functools.cache
def _database() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def connect() -> duckdb.DuckDBPyConnection:
    """A new connection to the tests' in-memory database, used as ``duckdb.connect()`` would be."""
    return _database().cursor()


def assert_same_rows(ours, theirs: list[tuple]) -> None:
    """``ours`` (an Arrow table) holds the rows ``theirs`` (DuckDB's) does, as multisets; floats
    compared to 6 decimals. The message counts and shows some of the rows in excess and missing."""
    import math
    from collections import Counter

    def value(v):
        if isinstance(v, float) and not math.isnan(v):
            return round(v, 6)
        if isinstance(v, (list, tuple)):
            return tuple(value(x) for x in v)
        if isinstance(v, dict):
            return tuple(sorted((k, value(x)) for k, x in v.items()))
        return v

    def norm(row: tuple) -> tuple:
        return tuple(value(v) for v in row)

    got = Counter(norm(tuple(r.values())) for r in ours.to_pylist())
    want = Counter(norm(r) for r in theirs)
    assert got == want, (f"{sum((got - want).values())} rows too many, {sum((want - got).values())} missing; "
                         f"e.g. extra {list(got - want)[:3]}, missing {list(want - got)[:3]}")
