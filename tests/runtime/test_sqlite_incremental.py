"""Incremental checkpoints of the sqlite backend, and local recovery.

A checkpoint of ``SqliteStateBackend(incremental=True)`` is a chain: a base (a copy of the whole
database) and one delta per later checkpoint holding only the rows changed since the one before,
all in the ``shared`` folder beside the checkpoint directories. These tests check that every
chain restores to exactly the state it was taken at (a hypothesis model of value and table state
across several checkpoints, key-group splits included), that a checkpoint writes only what
changed, that the checkpoint store keeps every piece a kept checkpoint lists and removes the
rest, and that a restart reuses a working database only when its checkpoint and checksum match.
"""

from __future__ import annotations

import copy
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from contract.test_state_backends import DESCRIPTORS, MAX_PARALLELISM, all_entries, apply, normal, operations
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.errors import CheckpointCorrupted
from clink.runtime.checkpoint.store import SHARED, CheckpointStore, checkpoint_file
from clink.runtime.state.backend import IncompatibleState
from clink.runtime.state.sqlite import SqliteStateBackend


def _backend(directory: Path, **options) -> SqliteStateBackend:
    return SqliteStateBackend(directory, max_parallelism=MAX_PARALLELISM, incremental=True, **options)


def _checkpoint(state, root: Path, checkpoint_id: int) -> list[Path]:
    folder = root / f"chk-{checkpoint_id}"
    folder.mkdir(parents=True)
    state.commit(checkpoint_id)
    return state.snapshot(folder)


@settings(max_examples=25, deadline=None)
@given(rounds=st.lists(operations, min_size=1, max_size=4), cache=st.sampled_from([2, 100_000]))
def test_every_checkpoint_of_a_chain_restores_its_own_state(rounds: list[list[tuple]], cache: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        model: dict = {}
        taken = []
        with _backend(root / "a", cache_entries=cache).open("op", DESCRIPTORS) as state:
            for i, ops in enumerate(rounds, start=1):
                for op in ops:
                    apply(state, model, op)
                files = _checkpoint(state, root / "checkpoints", i)
                assert all(f.parent.name == SHARED and f.exists() for f in files)
                assert len(files) >= i  # a base, then a delta per checkpoint (and per commit)
                taken.append((files, copy.deepcopy(model)))
        for i, (files, expected) in enumerate(taken):
            with _backend(root / f"b{i}").open("op", DESCRIPTORS) as fresh:
                fresh.value_state("count").put((99, "stale"), 1)  # restore replaces what was there
                fresh.restore(files)
                assert all_entries(fresh) == normal(expected)
                # and it goes on from there: the next checkpoint is a delta on the same chain
                apply(fresh, expected, ("put", (1, "x"), 5))
                again = _checkpoint(fresh, root / "checkpoints", 100 + i)
                assert again[:-1] == files
            with _backend(root / f"c{i}").open("op", DESCRIPTORS) as fresh:
                fresh.restore(again)
                assert all_entries(fresh) == normal(expected)


def test_a_chain_splits_and_merges_by_key_group(tmp_path: Path) -> None:
    ids, names = pa.array(range(100)), pa.array([str(i % 4) for i in range(100)])
    with _backend(tmp_path / "a").open("op", DESCRIPTORS) as state:
        state.value_state("count").put_many([ids, names], pa.array(range(100)))
        _checkpoint(state, tmp_path / "chk", 1)
        state.value_state("count").put_many([ids[:10], names[:10]], pa.array([None] * 10, pa.int64()))
        files = _checkpoint(state, tmp_path / "chk", 2)
        everything = all_entries(state)
    assert len(files) == 2
    low, high = set(range(MAX_PARALLELISM // 2)), set(range(MAX_PARALLELISM // 2, MAX_PARALLELISM))
    parts = []
    for i, wanted in enumerate([low, high]):
        with _backend(tmp_path / f"part{i}").open("op", DESCRIPTORS) as part:
            part.restore(files, key_groups=wanted)
            parts += _checkpoint(part, tmp_path / f"p{i}", 3)
    with _backend(tmp_path / "merged").open("op", DESCRIPTORS) as merged:
        merged.restore(parts)
        assert all_entries(merged) == everything


def test_a_chain_missing_a_piece_is_refused(tmp_path: Path) -> None:
    with _backend(tmp_path / "a").open("op", DESCRIPTORS) as state:
        state.value_state("count").put((1, "a"), 1)
        _checkpoint(state, tmp_path / "chk", 1)
        state.value_state("count").put((2, "a"), 2)
        _checkpoint(state, tmp_path / "chk", 2)
        state.value_state("count").put((3, "a"), 3)
        base, _, last = _checkpoint(state, tmp_path / "chk", 3)
    with _backend(tmp_path / "b").open("op", DESCRIPTORS) as fresh, pytest.raises(IncompatibleState, match="incomplete"):
        fresh.restore([base, last])


def test_a_checkpoint_writes_only_what_changed(tmp_path: Path) -> None:
    """100,000 keys, then 1% of them changed: the second checkpoint adds a delta of about 1% of
    the base, and lists the same base file."""
    n = 100_000
    with _backend(tmp_path / "a").open("op", DESCRIPTORS) as state:
        counts = state.value_state("count")
        keys = [pa.array(np.arange(n)), pa.array(["k"] * n)]
        counts.put_many(keys, pa.array(np.arange(n)))
        (base,) = _checkpoint(state, tmp_path / "chk", 1)
        changed = np.random.default_rng(1).choice(n, n // 100, replace=False)
        counts.put_many([pa.array(changed), pa.array(["k"] * len(changed))], pa.array(-changed))
        first, delta = _checkpoint(state, tmp_path / "chk", 2)
    assert first == base
    assert delta.stat().st_size < base.stat().st_size * 0.05
    with _backend(tmp_path / "b").open("op", DESCRIPTORS) as fresh:
        fresh.restore([base, delta])
        values = fresh.value_state("count").get_many(keys).to_numpy()
    expected = np.arange(n)
    expected[changed] = -changed
    assert (values == expected).all()


# -- the checkpoint store: pieces shared by reference ----------------------------------------------


def _store_checkpoint(store: CheckpointStore, state, checkpoint_id: int) -> None:
    writer = store.begin(checkpoint_id, "fp")
    state.commit(checkpoint_id)
    names = writer.include(state.snapshot(writer.path))
    writer.write_bytes("job.json", repr(names).encode())
    writer.complete()
    store.prune()


def test_retention_keeps_every_piece_a_kept_checkpoint_lists(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "job", retained=2)
    shared = tmp_path / "job" / "checkpoints" / SHARED
    with _backend(tmp_path / "a").open("op", DESCRIPTORS) as state:
        counts = state.value_state("count")
        for i in range(1, 7):
            counts.put((i, "a"), i)
            _store_checkpoint(store, state, i)
            kept = [info for info in store.list() if info.valid]
            assert [info.id for info in kept] == list(range(i, max(0, i - 2), -1))
            listed = set()
            for info in kept:
                manifest = store.manifest(info)
                listed |= set(manifest["shared"])
            # every piece a kept checkpoint lists is there; nothing else is
            assert {p.name for p in shared.iterdir()} == listed
        model = {("count", (i, "a")): i for i in range(1, 7)}
    info, warnings = store.latest()
    assert info.id == 6 and not warnings
    import json

    names = [n for n in json.loads(json.dumps(store.manifest(info)["shared"]))]
    with _backend(tmp_path / "b").open("op", DESCRIPTORS) as fresh:
        fresh.restore([checkpoint_file(info.path, f"{SHARED}/{n}") for n in sorted(names)])
        assert all_entries(fresh) == model


def test_a_damaged_shared_piece_makes_its_checkpoints_invalid(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "job", retained=5)
    with _backend(tmp_path / "a").open("op", DESCRIPTORS) as state:
        for i in range(1, 4):
            state.value_state("count").put((i, "a"), i)
            _store_checkpoint(store, state, i)
    newest = store.manifest(store.latest()[0])
    delta = max(newest["shared"])  # the newest piece: only checkpoint 3 lists it
    piece = tmp_path / "job" / "checkpoints" / SHARED / delta
    data = bytearray(piece.read_bytes())
    data[len(data) // 2] ^= 0x01
    piece.write_bytes(bytes(data))
    info, warnings = store.latest()
    assert info.id == 2
    assert len(warnings) == 1 and "chk-3" in warnings[0] and "shared piece" in warnings[0]
    assert "checksum" in warnings[0]
    with pytest.raises(CheckpointCorrupted, match="shared piece"):
        store.open(tmp_path / "job" / "checkpoints" / "chk-3")


# -- local recovery --------------------------------------------------------------------------------


def _run_and_stop(tmp_path: Path) -> tuple[list[Path], list[Path], dict]:
    """Two checkpoints, then a clean stop: the files of each, and the state at the second."""
    with _backend(tmp_path / "work", local_recovery=True).open("op", DESCRIPTORS) as state:
        state.value_state("count").put_many([pa.array(range(50)), pa.array(["a"] * 50)], pa.array(range(50)))
        first = _checkpoint(state, tmp_path / "chk", 1)
        state.value_state("count").put((7, "a"), 700)
        state.table_state("parts").add(3, pa.table({"_key_group": pa.array([1], pa.int32()),
                                                    "k": pa.array([1]), "v": pa.array(["x"])}))
        second = _checkpoint(state, tmp_path / "chk", 2)
        entries = all_entries(state)
        state.value_state("count").put((8, "a"), 800)  # after the checkpoint: lost at the stop
    return first, second, entries


def test_local_recovery_keeps_the_working_database_when_it_matches(tmp_path: Path) -> None:
    _, second, entries = _run_and_stop(tmp_path)
    with _backend(tmp_path / "work", local_recovery=True).open("op", DESCRIPTORS) as state:
        state.restore(second)
        assert state.recovery == "local"
        assert state.committed_checkpoint == 2
        assert all_entries(state) == entries
        state.value_state("count").put((9, "a"), 9)  # and checkpoints go on with the same chain
        third = _checkpoint(state, tmp_path / "chk", 3)
        assert third[:-1] == second


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("change", ["another checkpoint", "damaged database"])
def test_local_recovery_is_refused_and_the_checkpoint_restored(tmp_path: Path, change: str) -> None:
    first, second, entries = _run_and_stop(tmp_path)
    files = second
    if change == "another checkpoint":
        files = first  # the working database holds checkpoint 2; checkpoint 1 is restored
        with _backend(tmp_path / "ref").open("op", DESCRIPTORS) as ref:
            ref.restore(first)
            entries = all_entries(ref)
    else:
        _flip(tmp_path / "work" / "op.sqlite")
    with _backend(tmp_path / "work", local_recovery=True).open("op", DESCRIPTORS) as state:
        state.restore(files)
        assert state.recovery is not None and state.recovery != "local"
        assert ("checkpoint 2" in state.recovery) if change == "another checkpoint" else ("checksum" in state.recovery)
        assert all_entries(state) == entries
    with sqlite3.connect(tmp_path / "work" / "op.sqlite") as conn:  # the file is sound again
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
