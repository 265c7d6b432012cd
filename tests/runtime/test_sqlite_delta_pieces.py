"""The sqlite backend's column-at-a-time flush and its deltas of layout 3.

A flush of fixed-width keys and values encodes whole columns (``codec.rows_encoder``), which must
give the very bytes of the row encoder; a delta of layout 3 holds a value state's changes as its
log's rows of the piece (``<tbl>_log``), written inside SQLite. These tests check the encoder
against the row encoder, that chains of an integer-keyed state (the column path) restore exactly
through puts, deletes, merges at any moment and checkpoints, and that deltas and working
databases of layout 2 (value changes as rows and keys) are still read.
"""

from __future__ import annotations

import math
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.runtime.state import codec
from clink.runtime.state.backend import ValueStateDescriptor
from clink.runtime.state.sqlite import SqliteStateBackend

MAX_PARALLELISM = 8
COUNT = ValueStateDescriptor("count", [("id", pa.int64())], pa.int64())


def _int_column(bits: int, signed: bool) -> st.SearchStrategy:
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return st.integers(lo, hi)


FIXED = [
    (pa.int8(), _int_column(8, True)), (pa.int16(), _int_column(16, True)),
    (pa.int32(), _int_column(32, True)), (pa.int64(), _int_column(64, True)),
    (pa.uint8(), _int_column(8, False)), (pa.uint16(), _int_column(16, False)),
    (pa.uint32(), _int_column(32, False)), (pa.uint64(), _int_column(64, False)),
    (pa.bool_(), st.booleans()),
    (pa.float64(), st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, math.nan, -math.nan])),
]


@st.composite
def fixed_rows(draw: st.DrawFn) -> tuple[list[pa.DataType], list[tuple]]:
    fields = draw(st.lists(st.sampled_from(FIXED), min_size=1, max_size=3))
    rows = draw(st.lists(st.tuples(*(st.none() | values for _, values in fields)), max_size=30))
    return [t for t, _ in fields], rows


@settings(max_examples=200, deadline=None)
@given(case=fixed_rows(), canonical=st.booleans())
def test_the_column_encoder_gives_the_row_encoders_bytes(case: tuple, canonical: bool) -> None:
    types, rows = case
    encode_rows = codec.rows_encoder(types, canonical=canonical)
    encode_row = codec.row_encoder(types, canonical=canonical)
    columns = [[row[i] for row in rows] for i in range(len(types))]
    matrix, nulls = encode_rows(columns)
    assert matrix.shape == (len(rows), sum(1 + (1 if t == pa.bool_() else t.bit_width // 8) for t in types))
    for row, encoded, null in zip(rows, matrix, nulls.tolist(), strict=True):
        assert null == (None in row)
        if not null:
            assert encoded.tobytes() == encode_row(row)


def test_the_column_encoder_declines_what_it_cannot_encode_exactly() -> None:
    for t in (pa.string(), pa.float32(), pa.timestamp("us"), pa.decimal128(5, 2), pa.list_(pa.int64())):
        assert codec.rows_encoder([pa.int64(), t]) is None
    encode = codec.rows_encoder([pa.int64()])
    assert encode([[1, 2.0]]) is None  # a float where ints are expected: the row path raises
    assert encode([[1, True]]) is None
    assert encode([[2**63]]) is None  # out of range
    assert codec.rows_encoder([pa.float64()])([[1]]) is None


def _backend(directory: Path, **options) -> SqliteStateBackend:
    return SqliteStateBackend(directory, max_parallelism=MAX_PARALLELISM, incremental=True, **options)


def _entries(state) -> dict[int, int]:
    out = {}
    for g in range(MAX_PARALLELISM):
        for _, key, value in state.entries(g):
            out[key[0]] = value
    return out


steps = st.lists(st.one_of(
    st.tuples(st.just("put_many"), st.lists(st.tuples(st.integers(-50, 50), st.integers(-5, 5)), max_size=30)),
    st.tuples(st.just("delete"), st.integers(-50, 50)),
    st.tuples(st.just("merge")),
    st.tuples(st.just("checkpoint")),
), max_size=25)


@settings(max_examples=40, deadline=None)
@given(steps=steps, cache=st.sampled_from([2, 100_000]))
def test_every_checkpoint_of_an_integer_keyed_chain_restores(steps: list[tuple], cache: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        model: dict[int, int] = {}
        taken = []
        # log_fraction 0: every commit leaves a log worth merging, so merges come between pieces.
        with _backend(root / "a", cache_entries=cache, log_fraction=0).open("op", [COUNT]) as state:
            counts = state.value_state("count")
            for step in [*steps, ("checkpoint",)]:
                match step:
                    case ("put_many", pairs):
                        if pairs:
                            counts.put_many(pa.array([k for k, _ in pairs], pa.int64()),
                                            pa.array([v for _, v in pairs], pa.int64()))
                            model.update(pairs)
                    case ("delete", key):
                        counts.delete(key)
                        model.pop(key, None)
                    case ("merge",):
                        state.merge()
                    case ("checkpoint",):
                        folder = root / "checkpoints" / f"chk-{len(taken)}"
                        folder.mkdir(parents=True)
                        state.commit(len(taken) + 1)
                        taken.append((state.snapshot(folder), dict(model)))
        assert any(len(files) > 1 for files, _ in taken) or len(taken) == 1
        for i, (files, expected) in enumerate(taken):
            with _backend(root / f"b{i}").open("op", [COUNT]) as fresh:
                fresh.restore(files)
                assert _entries(fresh) == expected


def _to_layout_2(delta: Path) -> None:
    """Rewrite a delta of layout 3 as layout 2 wrote it: a value state's changed rows and keys."""
    with sqlite3.connect(delta) as conn:
        conn.execute("CREATE TABLE s0 (kg INTEGER NOT NULL, k BLOB NOT NULL, v BLOB NOT NULL, PRIMARY KEY (k)) "
                     "WITHOUT ROWID")
        conn.execute("CREATE TABLE s0_chg (k BLOB NOT NULL, PRIMARY KEY (k)) WITHOUT ROWID")
        conn.execute("INSERT INTO s0 SELECT kg, k, v FROM s0_log WHERE v IS NOT NULL")
        conn.execute("INSERT INTO s0_chg SELECT k FROM s0_log")
        conn.execute("DROP TABLE s0_log")
        conn.execute("UPDATE clink_meta SET value = '2' WHERE name = 'layout'")


def test_a_chain_with_deltas_of_layout_2_still_restores(tmp_path: Path) -> None:
    keys = pa.array(np.arange(300), pa.int64())
    with _backend(tmp_path / "a").open("op", [COUNT]) as state:
        counts = state.value_state("count")
        counts.put_many(keys, pa.array(np.arange(300), pa.int64()))
        for i in (1, 2, 3):
            if i > 1:
                counts.put_many(pa.array([i, 100 + i], pa.int64()), pa.array([-i, -i], pa.int64()))
                counts.delete(200 + i)
            folder = tmp_path / f"chk-{i}"
            folder.mkdir()
            state.commit(i)
            files = state.snapshot(folder)
        expected = _entries(state)
    assert len(files) == 3
    for delta in files[1:]:
        with sqlite3.connect(delta) as conn:
            assert {"s0_log"} <= {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
            assert conn.execute("SELECT COUNT(*) FROM s0_log").fetchone()[0] == 3  # two changed, one deleted
        _to_layout_2(delta)
    with _backend(tmp_path / "b").open("op", [COUNT]) as fresh:
        fresh.restore(files)
        assert _entries(fresh) == expected
        assert 202 not in expected and expected[3] == -3


def test_a_working_database_of_layout_2_is_upgraded_and_starts_a_new_chain(tmp_path: Path) -> None:
    with _backend(tmp_path).open("op", [COUNT]) as state:
        state.value_state("count").put_many(pa.array([1, 2, 3], pa.int64()), pa.array([10, 20, 30], pa.int64()))
        (tmp_path / "chk-1").mkdir()
        state.commit(1)
        state.snapshot(tmp_path / "chk-1")
        state.value_state("count").delete(2)
        state.commit(2)
    with sqlite3.connect(tmp_path / "op.sqlite") as conn:  # as layout 2 left it: no p, a change table
        conn.execute("CREATE TABLE old_log (kg INTEGER NOT NULL, k BLOB NOT NULL, v BLOB, PRIMARY KEY (kg, k)) "
                     "WITHOUT ROWID")
        conn.execute("INSERT INTO old_log SELECT kg, k, v FROM s0_log")
        conn.execute("DROP TABLE s0_log")
        conn.execute("ALTER TABLE old_log RENAME TO s0_log")
        conn.execute("CREATE TABLE s0_chg (k BLOB NOT NULL, kg INTEGER, PRIMARY KEY (k)) WITHOUT ROWID")
        conn.execute("UPDATE clink_meta SET value = '2' WHERE name = 'layout'")
    with _backend(tmp_path).open("op", [COUNT]) as state:
        conn = state.conn
        assert conn.execute("SELECT value FROM clink_meta WHERE name = 'layout'").fetchone() == ("3",)
        assert conn.execute("SELECT value FROM clink_meta WHERE name = 'chain'").fetchone() == (None,)
        assert "s0_chg" not in {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
        assert _entries(state) == {1: 10, 3: 30}
        state.value_state("count").put(4, 40)
        (tmp_path / "chk-3").mkdir()
        state.commit(3)
        files = state.snapshot(tmp_path / "chk-3")
        assert len(files) == 1  # a new base
    with _backend(tmp_path / "b").open("op", [COUNT]) as fresh:
        fresh.restore(files)
        assert _entries(fresh) == {1: 10, 3: 30, 4: 40}


@pytest.mark.parametrize("fail_at", ["write", "chain"])
def test_a_delta_that_fails_leaves_its_changes_for_the_next_piece(tmp_path: Path, fail_at: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with _backend(tmp_path / "a").open("op", [COUNT]) as state:
        counts = state.value_state("count")
        counts.put_many(pa.array([1, 2], pa.int64()), pa.array([1, 2], pa.int64()))
        (tmp_path / "chk-1").mkdir()
        state.commit(1)
        state.snapshot(tmp_path / "chk-1")
        counts.put(1, 100)
        counts.delete(2)
        real = type(state)._write_delta if fail_at == "write" else type(state)._set_chain

        def failing(self, *args, **kwargs):
            if fail_at == "chain" and args[0] is not None and len(args[0]) < 2:
                return real(self, *args, **kwargs)
            raise OSError("disk full")

        monkeypatch.setattr(type(state), "_write_delta" if fail_at == "write" else "_set_chain", failing)
        with pytest.raises(OSError, match="disk full"):
            state.commit(2)
        monkeypatch.undo()
        assert not list((tmp_path / "a" / "op.sqlite.pieces").glob("*.delta.sqlite"))
        # A merge now keeps the log rows of the piece no delta took, for the next delta.
        assert state.merge()
        assert state.conn.execute("SELECT COUNT(*) FROM s0_log").fetchone() == (2,)
        assert _entries(state) == {1: 100}
        counts.put(3, 3)
        (tmp_path / "chk-3").mkdir()
        state.commit(3)
        files = state.snapshot(tmp_path / "chk-3")
        assert len(files) == 2
    with _backend(tmp_path / "b").open("op", [COUNT]) as fresh:
        fresh.restore(files)
        assert _entries(fresh) == {1: 100, 3: 3}


@pytest.mark.parametrize("json_each", [True, False])
@pytest.mark.parametrize("cache", [3, 100_000])
def test_a_flush_by_columns_writes_the_rows_the_row_encoder_would(tmp_path: Path, json_each: bool, cache: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The log's rows from a column-at-a-time flush (one statement over blobs, or rows bound one
    by one where SQLite has no json_each) are those of the row-by-row flush."""
    import clink.runtime.state.sqlite as sqlite_state

    logs = {}
    monkeypatch.setattr(sqlite_state, "_ROWS_PER_UPSERT", 2)  # several statements per flush
    for path in ("columns", "rows"):
        monkeypatch.setattr(sqlite_state, "_json_each", lambda: json_each)
        with _backend(tmp_path / path, cache_entries=cache).open("op", [COUNT]) as state:
            counts = state.value_state("count")
            if path == "rows":
                for table in state._tables:
                    table.encode_keys = None
            counts.put_many(pa.array([5, -1, 2**62, 0, 7], pa.int64()), pa.array([1, 2, 3, 4, 5], pa.int64()))
            counts.delete(0)
            counts.put(-(2**63), 9)
            counts.put_many(pa.array([5, 8], pa.int64()), pa.array([50, None], pa.int64()))
            state.commit(1)
            logs[path] = state.conn.execute("SELECT kg, k, v FROM s0_log ORDER BY kg, k").fetchall()
            assert _entries(state) == {5: 50, -1: 2, 2**62: 3, 7: 5, -(2**63): 9}
    assert logs["columns"] == logs["rows"]
    assert (None in {v for _, _, v in logs["columns"]})  # the deleted keys' rows
