"""The join and Top-N row stores: their array helpers against numpy's and Arrow's own answers,
and rows removed in place against a plain list of rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.runtime.operators.rows import KeyedRows, _merge_sorted, take_rows
from clink.runtime.state.backend import OperatorState
from clink.runtime.state.keygroups import hash_columns
from clink.runtime.state.memory import MemoryStateBackend
from clink.runtime.state.sqlite import SqliteStateBackend

_keys = st.lists(st.integers(0, 12), max_size=40).map(lambda v: np.sort(np.array(v, dtype=np.uint64)))


@given(_keys, _keys)
def test_merging_two_sorted_runs_is_a_stable_sort_of_both(a, b):
    a_rows, b_rows = np.arange(len(a)), np.arange(len(b)) + 1000
    keys, rows = _merge_sorted(a, a_rows, b, b_rows)
    # Python's sort is stable: equal keys keep a's rows first, each side in its order.
    expected = sorted([*zip(a.tolist(), a_rows.tolist()), *zip(b.tolist(), b_rows.tolist())], key=lambda p: p[0])
    assert list(zip(keys.tolist(), rows.tolist())) == expected


@given(st.lists(st.integers(0, 9), min_size=1, max_size=8), st.data())
def test_taking_rows_of_a_chunked_table_gives_arrows_take(sizes, data):
    start = np.cumsum([0, *sizes])
    table = pa.Table.from_batches([pa.record_batch({"x": pa.array(np.arange(s, s + n), pa.int64()),
                                                    "y": pa.array([str(v) for v in range(s, s + n)], pa.string())})
                                   for s, n in zip(start, sizes)])
    total = int(start[-1])
    rows = np.array(data.draw(st.lists(st.integers(0, max(total - 1, 0)), max_size=total // 8 if total else 0)),
                    dtype=np.int64)
    assert take_rows(table, rows).to_pydict() == table.take(pa.array(rows, type=pa.int64())).to_pydict()


_OPS = st.lists(st.tuples(st.sampled_from(["store", "kill", "settle"]),
                          st.lists(st.integers(0, 30), min_size=1, max_size=40)), min_size=1, max_size=30)


@given(_OPS, st.data())
def test_rows_killed_in_place_are_never_found_again(ops, data):
    """A store whose rows are removed by id (a Top-N's) holds what a plain list of rows holds:
    every lookup, after any mix of stores, kills (each starting a merge or a rewrite), and
    settles, finds exactly the live rows of the keys asked for; ``stored`` and ``rows`` agree."""
    schema = pa.schema([("k", pa.int64()), ("seq", pa.int64())])
    store = KeyedRows("rows", schema, (0,), 128, retractions=True, identity=(1,))
    store.table = MemoryStateBackend().open("rank", [store.descriptor]).table_state("rows")
    live: dict[int, int] = {}  # seq -> key
    seq = 0
    for op, keys in ops:
        if op == "store":
            seqs = list(range(seq, seq + len(keys)))
            seq += len(keys)
            columns = [pa.array(keys, pa.int64()), pa.array(seqs, pa.int64())]
            store.store(columns, np.ones(len(keys), np.int64), hash_columns(columns[:1], len(keys)), 0, None)
            live.update(zip(seqs, keys, strict=True))
        elif op == "kill":
            probes = np.unique(hash_columns([pa.array(keys, pa.int64())], len(keys)))
            _, found, ids = store.lookup(probes)
            if found is None:
                continue
            chosen = data.draw(st.lists(st.integers(0, found.num_rows - 1), unique=True, max_size=found.num_rows))
            store.kill(ids[np.asarray(chosen, dtype=np.int64)])
            for i in chosen:
                del live[found.column("c1")[i].as_py()]
        else:
            store.settle()
        wanted = sorted(set(keys))
        _, found, _ = store.lookup(np.unique(hash_columns([pa.array(wanted, pa.int64())], len(wanted))))
        got = [] if found is None else sorted(found.column("c1").to_pylist())
        assert got == sorted(s for s, k in live.items() if k in wanted)
        assert store.rows() == len(live)
    assert sorted(store.stored().column("c1").to_pylist()) == sorted(live)
    assert all(run.n_dead == 0 for run in store.runs)


_BOUNDED_OPS = st.lists(st.one_of(
    st.tuples(st.just("store"), st.lists(st.integers(0, 20), min_size=1, max_size=30)),
    st.tuples(st.just("kill"), st.lists(st.integers(0, 20), min_size=1, max_size=10)),
    st.tuples(st.just("expire"), st.integers(0, 40)),
    st.tuples(st.just("restore"), st.just([]))), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None)
@given(_BOUNDED_OPS, st.sampled_from([0, 1000, 4000]), st.booleans(), st.data())
def test_a_store_on_disk_keeps_its_runs_within_the_bucket_size(tmp_path_factory, ops, cache, retractions, data):
    """A store of rows added only (a join side, or a Top-N's, which may take retractions but
    removes rows in place) whose table state reads buckets whole from disk stops
    merging runs at the state's bucket size, and still finds exactly the rows a plain list holds,
    through stores (each a merge candidate), kills, expiries by event time, and restores that
    reload the runs one bucket at a time. Expired rows may still be found (a run is rewritten
    only once a quarter of it goes). No run passes the bound but a single batch larger than it."""
    directory = tmp_path_factory.mktemp("rows")
    schema = pa.schema([("k", pa.int64()), ("seq", pa.int64())])
    restores = 0

    def fresh() -> tuple[KeyedRows, OperatorState]:
        store = KeyedRows("rows", schema, (0,), 128, retractions=retractions, identity=(1,))
        state = SqliteStateBackend(directory / f"b{restores}", max_parallelism=128, table_cache_bytes=cache,
                                   min_bucket_bytes=0).open("join", [store.descriptor])
        store.table = state.table_state("rows")
        return store, state

    store, state = fresh()
    per_row = None
    largest = 0
    live: dict[int, tuple[int, int]] = {}  # seq -> (key, time)
    expired: dict[int, tuple[int, int]] = {}
    seq = 0
    for op, arg in ops:
        if op == "store":
            seqs = list(range(seq, seq + len(arg)))
            seq += len(arg)
            largest = max(largest, len(arg))
            times = np.array(seqs, dtype=np.int64)
            columns = [pa.array(arg, pa.int64()), pa.array(seqs, pa.int64())]
            store.store(columns, np.ones(len(arg), np.int64), hash_columns(columns[:1], len(arg)), 0, times)
            live.update((s, (k, s)) for s, k in zip(seqs, arg, strict=True))
            if per_row is None:
                first = store.table.get(store.runs[0].namespace)
                per_row = first.nbytes // first.num_rows
        elif op == "kill":
            _, found, ids = store.lookup(np.unique(hash_columns([pa.array(arg, pa.int64())], len(arg))))
            if found is None:
                continue
            chosen = data.draw(st.lists(st.integers(0, found.num_rows - 1), unique=True, max_size=found.num_rows))
            store.kill(ids[np.asarray(chosen, dtype=np.int64)])
            for i in chosen:
                s = found.column("c1")[i].as_py()
                live.pop(s, None)
                expired.pop(s, None)
        elif op == "expire":
            store.expire(time_before=arg)
            for s in [s for s, (_, t) in live.items() if t < arg]:
                expired[s] = live.pop(s)
        else:
            store.settle()
            state.commit(1)
            files = state.snapshot(tmp_path_factory.mktemp("snap"))
            restores += 1
            store, state = fresh()
            state.restore(files)
            store.reload()
        cap = store._run_rows()
        if cap is not None:
            assert cap == max(1, (cache // 4) // per_row)
            # (a batch larger than the bound is a run of its own)
            assert all(run.size <= max(cap, largest) for run in store.runs)
        wanted = sorted({k for k, _ in [*live.values(), *expired.values()]})
        if not wanted:
            continue
        _, found, _ = store.lookup(np.unique(hash_columns([pa.array(wanted, pa.int64())], len(wanted))))
        got = set() if found is None else set(found.column("c1").to_pylist())
        assert set(live) <= got <= set(live) | set(expired)
    state.close()


def test_runs_that_hold_retractions_merge_past_the_bucket_size_to_net_them(tmp_path):
    """A retraction stored after its row's run reached the bound still meets it in a merge, so
    both leave the state (only merges net them)."""
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    store = KeyedRows("rows", schema, (0,), 128, retractions=True)
    state = SqliteStateBackend(tmp_path, max_parallelism=128, table_cache_bytes=0,
                               min_bucket_bytes=0).open("op", [store.descriptor])
    store.table = state.table_state("rows")
    columns = [pa.array([1, 2, 3], pa.int64()), pa.array([10, 20, 30], pa.int64())]
    khash = hash_columns(columns[:1], 3)
    store.store(columns, np.ones(3, np.int64), khash, 0, None)
    store.store([pa.array([7], pa.int64()), pa.array([70], pa.int64())], np.ones(1, np.int64),
                hash_columns([pa.array([7], pa.int64())], 1), 0, None)
    assert store._run_rows() == 1 and len(store.runs) == 2  # a bound of one row: nothing merges
    store.store(columns, -np.ones(3, np.int64), khash, 0, None)
    assert store.rows() == 1
    assert store.stored().select(["c0", "c1", "_count"]).to_pylist() == [{"c0": 7, "c1": 70, "_count": 1}]
    state.close()
