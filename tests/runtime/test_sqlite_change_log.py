"""The change log of the sqlite backend's value state.

Writes go to a small log per value state (``<tbl>_log``, a NULL value for a deleted key) instead
of the state's table, so a commit writes only the log's pages; the log is merged into the table
later, in a transaction of its own. These tests check the log over the table against a dict
model through every operation (puts, deletes, commits, merges at any moment, checkpoints full and
incremental, restores of any earlier checkpoint, key-group splits), that a process killed between
a commit and a merge or inside a merge leaves the state of its last commit, and that snapshots of
layout 1 (before the log) still restore.
"""

from __future__ import annotations

import copy
import json
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from contract.test_state_backends import DESCRIPTORS, MAX_PARALLELISM, all_entries, apply, normal, operations
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.runtime.state.sqlite import SqliteStateBackend


def _backend(directory: Path, **options) -> SqliteStateBackend:
    return SqliteStateBackend(directory, max_parallelism=MAX_PARALLELISM, **options)


def _log_rows(state) -> int:
    return state.conn.execute("SELECT COUNT(*) FROM s0_log").fetchone()[0]


steps = st.lists(st.one_of(
    operations.map(lambda ops: ("ops", ops)),
    st.just(("merge",)),
    st.just(("checkpoint",)),
    st.tuples(st.just("restore"), st.integers(0, 20)),
), min_size=1, max_size=8)


@settings(max_examples=40, deadline=None)
@given(steps=steps, cache=st.sampled_from([0, 2, 100_000]), incremental=st.booleans(),
       fraction=st.sampled_from([0.0, 0.05]))
def test_the_log_over_the_table_matches_a_dict_model(steps: list[tuple], cache: int, incremental: bool,
                                                      fraction: float) -> None:
    """Random puts, deletes, commits, merges, checkpoints and restores against a dict model; every
    checkpoint taken then restores, whole and split by key group, to the model as it was."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        model: dict = {}
        taken: list[tuple[list[Path], dict]] = []
        options = dict(cache_entries=cache, incremental=incremental, log_fraction=fraction)
        with _backend(root / "a", **options).open("op", DESCRIPTORS) as state:
            for step in steps:
                match step:
                    case ("ops", ops):
                        for op in ops:
                            apply(state, model, op)
                    case ("merge",):
                        state.commit(len(taken) + 1000)  # a merge holds no uncommitted writes
                        assert state.merge()
                        assert _log_rows(state) == 0
                    case ("checkpoint",):
                        folder = root / "chk" / f"chk-{len(taken)}"
                        folder.mkdir(parents=True)
                        state.commit(len(taken) + 1)
                        taken.append((state.snapshot(folder), copy.deepcopy(model)))
                    case ("restore", i) if taken:
                        files, expected = taken[i % len(taken)]
                        state.restore(files)
                        model = copy.deepcopy(expected)
                        assert _log_rows(state) == 0
                assert all_entries(state) == normal(model)
        for i, (files, expected) in enumerate(taken):
            with _backend(root / f"b{i}", incremental=incremental).open("op", DESCRIPTORS) as fresh:
                fresh.restore(files)
                assert all_entries(fresh) == normal(expected)
            halves = [set(range(MAX_PARALLELISM // 2)), set(range(MAX_PARALLELISM // 2, MAX_PARALLELISM))]
            merged: dict = {}
            for j, groups in enumerate(halves):
                with _backend(root / f"c{i}-{j}").open("op", DESCRIPTORS) as part:
                    part.restore(files, key_groups=groups)
                    merged.update(all_entries(part))
            assert {k: v for k, v in merged.items() if k[0] == "count"} == \
                {k: v for k, v in normal(expected).items() if k[0] == "count"}


def test_a_commit_writes_the_log_and_a_merge_empties_it(tmp_path: Path) -> None:
    n = 1000
    keys = [pa.array(range(n), pa.int64()), pa.array(["k"] * n)]
    with _backend(tmp_path / "a", cache_entries=10).open("op", DESCRIPTORS) as state:
        counts = state.value_state("count")
        counts.put_many(keys, pa.array(range(n), pa.int64()))
        state.commit(1)
        assert _log_rows(state) == n
        assert state.conn.execute("SELECT COUNT(*) FROM s0").fetchone()[0] == 0
        counts.put_many([k[:10] for k in keys], pa.nulls(10, pa.int64()))  # deleted: NULL in the log
        state.commit(2)
        assert state.conn.execute("SELECT COUNT(*) FROM s0_log WHERE v IS NULL").fetchone()[0] == 10
        assert state.merge()
        assert _log_rows(state) == 0
        assert state.conn.execute("SELECT COUNT(*) FROM s0").fetchone()[0] == n - 10
        assert counts.get_many(keys).to_pylist() == [None] * 10 + list(range(10, n))


def test_a_merge_waits_for_writes_to_be_committed(tmp_path: Path) -> None:
    with _backend(tmp_path / "a", cache_entries=0).open("op", DESCRIPTORS) as state:
        counts = state.value_state("count")
        counts.put((1, "a"), 1)
        state.commit(1)
        counts.put((2, "a"), 2)
        counts.put((3, "a"), 3)  # (2, "a") leaves the cache: written to the log, not committed
        assert not state.merge()
        state.close()
    with _backend(tmp_path / "a").open("op", DESCRIPTORS) as state:  # as of the last commit
        assert state.committed_checkpoint == 1
        assert all_entries(state) == {("count", (1, "a")): 1}


def test_a_large_log_is_merged_at_the_first_use_after_a_commit(tmp_path: Path) -> None:
    """With a fraction of 0 every commit's log is merged: not inside the commit, but when the
    state is next read or written."""
    with _backend(tmp_path / "a", log_fraction=0.0).open("op", DESCRIPTORS) as state:
        counts = state.value_state("count")
        counts.put((1, "a"), 1)
        state.commit(1)
        assert _log_rows(state) == 1  # the commit left it
        assert counts.get((2, "a")) is None
        assert _log_rows(state) == 0


#: A child process: checkpoints 1 and 2 of a value state with a log merged after every commit,
#: then a first use of the state after checkpoint 2, which merges (and is killed at the fault
#: point). Prints nothing; the parent checks what it left.
CHILD = """
import json, sys
from pathlib import Path
import pyarrow as pa
sys.path.insert(0, {tests!r})
from contract.test_state_backends import DESCRIPTORS, MAX_PARALLELISM
from clink.runtime.state.sqlite import SqliteStateBackend

root = Path({root!r})
backend = SqliteStateBackend(root / "work", max_parallelism=MAX_PARALLELISM, incremental=True, log_fraction=0.0,
                             fault_point={point!r})
state = backend.open("op", DESCRIPTORS)
counts = state.value_state("count")
keys = [pa.array(range(100), pa.int64()), pa.array(["k"] * 100)]
files = {{}}
for checkpoint in (1, 2):
    counts.put_many(keys, pa.array([checkpoint * 1000 + i for i in range(100)], pa.int64()))
    counts.put_many([k[:checkpoint] for k in keys], pa.nulls(checkpoint, pa.int64()))
    folder = root / "chk" / f"chk-{{checkpoint}}"
    folder.mkdir(parents=True)
    state.commit(checkpoint)
    files[checkpoint] = [str(p) for p in state.snapshot(folder)]
    (root / "files.json").write_text(json.dumps(files))
counts.get((5000, "x"))  # the first use after the commit merges
print("not killed")
"""


def _expected_at_two() -> dict:
    return {("count", (i, "k")): 2000 + i for i in range(2, 100)}


@pytest.mark.parametrize("point", ["after_commit_before_merge:2", "during_merge:2"])
def test_a_kill_around_a_merge_leaves_the_state_of_the_last_commit(tmp_path: Path, point: str) -> None:
    tests = str(Path(__file__).resolve().parents[1])
    child = subprocess.run([sys.executable, "-c", CHILD.format(tests=tests, root=str(tmp_path), point=point)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
    files = json.loads((tmp_path / "files.json").read_text())
    with sqlite3.connect(tmp_path / "work" / "op.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT COUNT(*) FROM s0_log").fetchone()[0] > 0  # the merge did not happen
    # The working database reopened holds checkpoint 2, its log still over its table...
    with _backend(tmp_path / "work", incremental=True).open("op", DESCRIPTORS) as state:
        assert state.committed_checkpoint == 2
        assert all_entries(state) == _expected_at_two()
        assert state.merge()  # ...and merges the same state
        assert all_entries(state) == _expected_at_two()
    # and each checkpoint restores exactly, the one cut before the merge too
    with _backend(tmp_path / "fresh", incremental=True).open("op", DESCRIPTORS) as fresh:
        fresh.restore(files["2"])
        assert all_entries(fresh) == _expected_at_two()
        fresh.restore(files["1"])
        assert all_entries(fresh) == {("count", (i, "k")): 1000 + i for i in range(1, 100)}


def test_a_snapshot_of_layout_1_still_restores(tmp_path: Path) -> None:
    """Layout 1 had no logs: a snapshot of it is the tables alone. One is made here from a
    merged snapshot by dropping the logs and writing the old layout number."""
    n = 200
    keys = [pa.array(range(n), pa.int64()), pa.array(["k"] * n)]
    with _backend(tmp_path / "a").open("op", DESCRIPTORS) as state:
        state.value_state("count").put_many(keys, pa.array(range(n), pa.int64()))
        state.commit(1)
        state.merge()
        (tmp_path / "chk").mkdir()
        (old,) = state.snapshot(tmp_path / "chk")
        expected = all_entries(state)
    with sqlite3.connect(old) as conn:
        conn.execute("DROP TABLE s0_log")
        conn.execute("UPDATE clink_meta SET value = '1' WHERE name = 'layout'")
    for incremental in (False, True):
        with _backend(tmp_path / f"b{incremental}", incremental=incremental).open("op", DESCRIPTORS) as fresh:
            fresh.restore([old])
            assert all_entries(fresh) == expected
    # and a working database of layout 1 is upgraded when opened
    work = tmp_path / "work"
    work.mkdir()
    (work / "op.sqlite").write_bytes(old.read_bytes())
    with sqlite3.connect(work / "op.sqlite") as conn:  # layout 1's change table: the key alone
        conn.execute("DROP TABLE IF EXISTS s0_chg")
        conn.execute("CREATE TABLE s0_chg (k BLOB NOT NULL, PRIMARY KEY (k)) WITHOUT ROWID")
    with _backend(work).open("op", DESCRIPTORS) as state:
        assert all_entries(state) == expected
        state.value_state("count").put((0, "k"), None)
        state.commit(2)
    with _backend(work).open("op", DESCRIPTORS) as state:
        assert state.conn.execute("SELECT value FROM clink_meta WHERE name = 'layout'").fetchone() == ("3",)
        # (layout 3: a value state's changes are its log rows' pieces, not a change table)
        assert "p" in {row[1] for row in state.conn.execute("PRAGMA table_info(s0_log)")}
        assert not state.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 's0_chg'").fetchall()
        assert state.value_state("count").get((0, "k")) is None
        assert len(all_entries(state)) == len(expected) - 1


def test_a_full_snapshot_with_a_log_restores_from_it(tmp_path: Path) -> None:
    """A whole-database snapshot copies the log with the table: restore applies one over the other."""
    n = 100
    keys = [pa.array(range(n), pa.int64()), pa.array(["k"] * n)]
    with _backend(tmp_path / "a").open("op", DESCRIPTORS) as state:
        counts = state.value_state("count")
        counts.put_many(keys, pa.array(range(n), pa.int64()))
        state.commit(1)
        state.merge()
        counts.put_many([k[:20] for k in keys], pa.array([None] * 10 + [7] * 10, pa.int64()))
        state.commit(2)
        assert _log_rows(state) == 20
        (tmp_path / "chk").mkdir()
        files = state.snapshot(tmp_path / "chk")
        expected = all_entries(state)
    assert len(expected) == n - 10
    with _backend(tmp_path / "b").open("op", DESCRIPTORS) as fresh:
        fresh.restore(files)
        assert all_entries(fresh) == expected
