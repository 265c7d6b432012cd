"""The columnar value state of the memory backend (``state/columnar.py``): what the contract
suite cannot see from outside — hash collisions, growth of the index, compaction, every key and
value layout — checked against a plain dict model, and old snapshots restored.

Collisions are forced by replacing ``keygroups.hash_columns`` with one that keeps only the low
three bits of the real hash: with 8 key groups every key keeps its key group, but hundreds of
keys share each hash, so only the exact comparison of key columns tells them apart.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clink.runtime.state import keygroups
from clink.runtime.state.backend import PrefixedKeys, ValueStateDescriptor
from clink.runtime.state.columnar import ColumnarValues, _representatives
from clink.runtime.state.keygroups import key_groups
from clink.runtime.state.memory import MemoryStateBackend

MAX_PARALLELISM = 8
DATA = Path(__file__).parent.parent / "contract" / "data"
_real_hash = keygroups.hash_columns


@pytest.fixture
def colliding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key hashes to one of 8 values (its key group's), so keys collide by the hundred."""
    monkeypatch.setattr(keygroups, "hash_columns",
                        lambda columns, num_rows=None: _real_hash(columns, num_rows) & np.uint64(7))


def entries(state: Any) -> dict[tuple, Any]:
    out = {}
    for g in range(state.max_parallelism):
        for _, key, value in state.entries(g):
            assert key not in out
            out[key] = value
    return out


def test_keys_whose_hashes_collide_stay_apart(colliding: None) -> None:
    d = ValueStateDescriptor("v", [("id", pa.int64()), ("name", pa.string())], pa.int64())
    with MemoryStateBackend(max_parallelism=MAX_PARALLELISM).open("op", [d]) as state:
        v = state.value_state("v")
        ids = list(range(3000)) + [None, None]
        names = [f"n{i % 7}" for i in range(3000)] + ["x", None]
        model = {(i, n): k for k, (i, n) in enumerate(zip(ids, names))}
        # In three batches, the last also rewriting the first's keys with new values.
        for lo, hi in ((0, 1000), (1000, 3002), (0, 500)):
            part = slice(lo, hi)
            v.put_many([pa.array(ids[part], pa.int64()), pa.array(names[part])],
                       pa.array([k + (lo == 0 and hi == 500) * 10_000 for k in range(lo, hi)], pa.int64()))
        model.update({(ids[k], names[k]): k + 10_000 for k in range(500)})
        got = v.get_many([pa.array(ids, pa.int64()), pa.array(names)]).to_pylist()
        assert got == [model[(i, n)] for i, n in zip(ids, names)]
        # Keys never stored, hashing like stored ones, read as absent.
        assert v.get_many([pa.array([5, 4000]), pa.array(["n6", "n0"])]).to_pylist() == [None, None]
        # Delete every other key: the neighbours in the probe chains must still be found.
        gone = list(range(0, 3002, 2))
        v.put_many([pa.array([ids[k] for k in gone], pa.int64()), pa.array([names[k] for k in gone])],
                   pa.nulls(len(gone), pa.int64()))
        for k in gone:
            del model[(ids[k], names[k])]
        assert entries(state) == model
        groups = key_groups([pa.array([k[0] for k in model], pa.int64()), pa.array([k[1] for k in model])],
                            MAX_PARALLELISM).tolist()
        for g in range(MAX_PARALLELISM):
            assert {k for _, k, _ in state.entries(g)} == {k for k, kg in zip(model, groups) if kg == g}


def test_the_index_grows_and_compacts_in_bulk() -> None:
    store = ColumnarValues([pa.int64()], pa.float64(), MAX_PARALLELISM)
    keys = np.arange(200_000, dtype=np.int64)
    store.put([pa.array(keys)], pa.array(keys * 0.5))
    assert len(store) == 200_000 and len(store.index) >= 2 * store.used
    assert store.get([pa.array([7, -1, 199_999])]).to_pylist() == [3.5, None, 99_999.5]
    # Deleting most keys leaves dead slots until they outnumber the live ones, then compacts.
    store.put([pa.array(keys[:150_000])], pa.nulls(150_000, pa.float64()))
    assert len(store) == 50_000 and store.used == 50_000
    assert len(store.index) <= 4 * 65_536
    got = store.get([pa.array(keys)]).to_numpy(zero_copy_only=False)
    assert np.isnan(got[:150_000]).all() and (got[150_000:] == keys[150_000:] * 0.5).all()
    # A deleted key written again revives; reads and writes still agree after the rebuild.
    store.put([pa.array([3, 150_001])], pa.array([1.0, 2.0]))
    assert store.get([pa.array([3, 150_001, 4])]).to_pylist() == [1.0, 2.0, None]


def test_float_keys_one_zero_one_nan() -> None:
    store = ColumnarValues([pa.float64(), pa.float32()], pa.string(), MAX_PARALLELISM)
    nan_bits = np.array([0x7FF8000000000001, 0xFFF8000000000000], dtype=np.uint64).view(np.float64)
    store.put([pa.array([-0.0, nan_bits[0], None, 1.5]), pa.array([0.0, -0.0, None, math.nan], pa.float32())],
              pa.array(["zero", "nan", "null", "x"]))
    got = store.get([pa.array([0.0, nan_bits[1], None, 1.5, 0.0]),
                     pa.array([-0.0, 0.0, None, -math.nan, None], pa.float32())])
    assert got.to_pylist() == ["zero", "nan", "null", "x", None]
    assert len(store) == 4


KEY_TYPES = [
    (pa.int8(), st.integers(-128, 127)),
    (pa.uint64(), st.integers(0, 2**64 - 1)),
    (pa.bool_(), st.booleans()),
    (pa.float64(), st.sampled_from([0.0, -0.0, math.nan, 1.5, -2.25, math.inf])),
    (pa.string(), st.text(max_size=4)),
    (pa.large_binary(), st.binary(max_size=4)),
    (pa.binary(2), st.binary(min_size=2, max_size=2)),
    (pa.decimal128(10, 2), st.decimals(-999, 999, places=2, allow_nan=False)),
    (pa.date32(), st.dates(dt.date(1960, 1, 1), dt.date(2080, 1, 1))),
    (pa.timestamp("us", tz="UTC"), st.datetimes(dt.datetime(1960, 1, 1), dt.datetime(2080, 1, 1),
                                                timezones=st.just(dt.UTC))),
]
VALUE = pa.struct([("n", pa.int64()), ("s", pa.string()), ("l", pa.list_(pa.int32())),
                   ("d", pa.decimal128(20, 3)), ("b", pa.bool_()), ("m", pa.map_(pa.string(), pa.float64()))])
values = st.fixed_dictionaries({
    "n": st.none() | st.integers(-(2**63), 2**63 - 1),
    "s": st.none() | st.text(max_size=5),
    "l": st.none() | st.lists(st.none() | st.integers(-5, 5), max_size=3),
    "d": st.none() | st.decimals(-10**5, 10**5, places=3, allow_nan=False),
    "b": st.none() | st.booleans(),
    "m": st.none() | st.lists(st.tuples(st.text(max_size=2), st.none() | st.floats(-1, 1)), max_size=2),
})


def model_key(key: tuple) -> tuple:
    """A key as the model stores it: every NaN one object, ``-0.0`` as ``0.0``."""
    return tuple((math.nan if math.isnan(v) else v + 0.0) if isinstance(v, float) else v for v in key)


def prefixed(columns: list[pa.Array]) -> PrefixedKeys:
    """Two key columns as ``PrefixedKeys``: the first column's distinct values, and ids."""
    encoded = pc.dictionary_encode(columns[0], null_encoding="encode")
    return PrefixedKeys([encoded.dictionary], encoded.indices.to_numpy().astype(np.int64), columns[1:])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), types=st.lists(st.sampled_from(range(len(KEY_TYPES))), min_size=1, max_size=2))
def test_every_key_layout_and_nested_values_match_a_dict_model(colliding: None, data: st.DataObject,
                                                               types: list[int]) -> None:
    schema = pa.schema([(f"k{j}", KEY_TYPES[i][0]) for j, i in enumerate(types)])
    keys = st.tuples(*(st.none() | KEY_TYPES[i][1] for i in types))
    # Two fields: perhaps grouped by the first (its distinct values then have an index of their own).
    grouped = len(types) == 2 and data.draw(st.booleans())
    d = ValueStateDescriptor("v", schema, VALUE, group_fields=1 if grouped else None)
    model: dict[tuple, Any] = {}
    with MemoryStateBackend(max_parallelism=MAX_PARALLELISM).open("op", [d]) as state:
        v = state.value_state("v")
        for _ in range(data.draw(st.integers(1, 6))):
            rows = data.draw(st.lists(st.tuples(keys, st.none() | values), max_size=30))
            columns: Any = [pa.array([k[j] for k, _ in rows], f.type) for j, f in enumerate(schema)]
            if grouped and data.draw(st.booleans()):
                columns = prefixed(columns)
            if data.draw(st.booleans()):
                # Read first, as an operator does: the write then reuses the slots the read found.
                assert v.get_many(columns).to_pylist() == [model.get(model_key(k)) for k, _ in rows]
            v.put_many(columns, pa.array([val for _, val in rows], VALUE))
            for k, val in rows:
                if val is None:
                    model.pop(model_key(k), None)
                else:
                    model[model_key(k)] = val
            probe = [k for k, _ in rows] + data.draw(st.lists(keys, max_size=5))
            columns = [pa.array([k[j] for k in probe], f.type) for j, f in enumerate(schema)]
            got = v.get_many(prefixed(columns) if grouped and data.draw(st.booleans()) else columns)
            expected = [model.get(model_key(k)) for k in probe]
            assert pa.array(expected, VALUE).equals(got)
        listed = entries(state)
        assert {model_key(k) for k in listed} == set(model)
        expected = pa.array([model[model_key(k)] for k in listed], VALUE)
        assert pa.array(list(listed.values()), VALUE).equals(expected)
        width = 1 if grouped else len(types)
        for g in range(MAX_PARALLELISM):
            for _, key, _ in state.entries(g):
                columns = [pa.array([key[j]], schema.field(j).type) for j in range(width)]
                assert key_groups(columns, MAX_PARALLELISM)[0] == g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 40), st.none() | st.text("ab", max_size=2),
                                           st.integers(-2, 2)), max_size=80), max_size=6))
def test_counts_of_colliding_keys_stay_apart(colliding: None, batches: list[list[tuple]]) -> None:
    """``add_counts`` with hundreds of keys per hash: a batch's repeated keys add up in one slot,
    keys that only share a hash never do."""
    store = ColumnarValues([pa.int64(), pa.string()], pa.struct([("c", pa.int64())]), MAX_PARALLELISM)
    model: dict[tuple, int] = {}
    for rows in batches:
        keys = [pa.array([r[0] for r in rows], pa.int64()), pa.array([r[1] for r in rows], pa.string())]
        counted = store.add_counts(keys, np.array([[r[2]] for r in rows], dtype=np.int64).reshape(-1, 1))
        sums: dict[tuple, int] = {}
        for k, name, delta in rows:
            sums[k, name] = sums.get((k, name), 0) + delta
        reported = [rows[int(r)][:2] for r in counted.rows]
        assert sorted(reported, key=repr) == sorted(sums, key=repr)
        for key, before, after in zip(reported, counted.before[:, 0].tolist(), counted.after[:, 0].tolist(),
                                      strict=True):
            assert (before, after) == (model.get(key, 0), model.get(key, 0) + sums[key])
            if after:
                model[key] = after
            else:
                model.pop(key, None)
        assert len(store) == len(model)
    live = store.live_slots()
    keys = store.key_arrays(live)
    stored = dict(zip(zip(keys[0].to_pylist(), keys[1].to_pylist(), strict=True),
                      pc.struct_field(store.value_array(live), [0]).to_pylist(), strict=True))
    assert stored == model


def test_prefixed_keys_given_to_several_states_are_hashed_once() -> None:
    """The prefix of a ``PrefixedKeys`` is hashed once for every state of its key types it is
    given to, and each state still finds its own keys."""
    keys = prefixed([pa.array(["x", "y", "x", None]), pa.array([1, 2, 3, 1])])
    a = ColumnarValues([pa.string(), pa.int64()], pa.struct([("c", pa.int64())]), MAX_PARALLELISM, group_fields=1)
    b = ColumnarValues([pa.string(), pa.int64()], pa.struct([("c", pa.int64())]), MAX_PARALLELISM, group_fields=1)
    b.add_counts([pa.array(["y", "z"]), pa.array([2, 9])], np.array([[5], [6]]))  # b's prefix ids differ from a's
    calls = []
    real = ColumnarValues._probe

    def counting(self: ColumnarValues, columns: Any) -> Any:
        calls.append(self)
        return real(self, columns)

    # Another value column over the same prefix (a second COUNT(DISTINCT) of one GROUP BY)
    # shares what was worked out from the prefix through the memo.
    other = PrefixedKeys(keys.prefix, keys.ids, [pa.array([5, 2, 3, 1])], keys.memo)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ColumnarValues, "_probe", counting)
        counted_a = a.add_counts(keys, np.ones((4, 1), np.int64))
        counted_b = b.add_counts(other, np.ones((4, 1), np.int64))
    assert calls.count(a.prefix) + calls.count(b.prefix) == 1
    assert counted_a.after[:, 0].tolist() == [1, 1, 1, 1]
    assert sorted(counted_b.after[:, 0].tolist()) == [1, 1, 1, 6]
    assert b.get([pa.array(["y", "z", "x", None]), pa.array([2, 9, 5, 1])]).to_pylist() == [
        {"c": 6}, {"c": 6}, {"c": 1}, {"c": 1}]


def test_int64_values_are_held_narrow_until_one_does_not_fit() -> None:
    """An int64 field is kept in the narrowest of int8, int16, int32 and int64 that its values
    so far fit, and widened, values kept, by the first write (``put`` or ``add_counts``) of one
    that does not."""
    value = pa.struct([("n", pa.int64()), ("m", pa.int64())])
    store = ColumnarValues([pa.int64()], value, MAX_PARALLELISM)
    keys = [pa.array(np.arange(5, dtype=np.int64))]
    store.put(keys, pa.array([{"n": i, "m": None if i == 2 else -i} for i in range(5)], value))
    assert [c.values.dtype for c in store.columns] == [np.int8, np.int8]
    store.put([pa.array([1])], pa.array([{"n": 300, "m": -(2**31)}], value))
    assert [c.values.dtype for c in store.columns] == [np.int16, np.int32]
    store.add_counts([pa.array([3, 3])], np.array([[0, 2**31], [0, 2**31]], dtype=np.int64))
    assert [c.values.dtype for c in store.columns] == [np.int16, np.int64]
    store.put([pa.array([0])], pa.array([{"n": -(2**40), "m": 7}], value))
    assert [c.values.dtype for c in store.columns] == [np.int64, np.int64]
    assert store.get(keys).to_pylist() == [{"n": -(2**40), "m": 7}, {"n": 300, "m": -(2**31)}, {"n": 2, "m": None},
                                           {"n": 3, "m": 2**32 - 3}, {"n": 4, "m": -4}]


def test_int64_keys_are_held_in_four_bytes_until_one_does_not_fit() -> None:
    """8-byte integer keys are stored in 4 bytes while they fit, and widened by the first that
    does not; a key equal to a stored one only in its low 4 bytes is another key."""
    store = ColumnarValues([pa.int64()], pa.int64(), MAX_PARALLELISM)
    store.put([pa.array([1, 2**32 - 1])], pa.array([10, 20]))
    assert store.keys[0].values.dtype == np.uint32
    assert store.get([pa.array([2**32 + 1, -1, 1])]).to_pylist() == [None, None, 10]
    store.put([pa.array([2**32 + 1, -1])], pa.array([30, 40]))
    assert store.keys[0].values.dtype == np.uint64
    keys = [pa.array([1, 2**32 - 1, 2**32 + 1, -1, 2**33 + 1])]
    assert store.get(keys).to_pylist() == [10, 20, 30, 40, None]
    live = store.live_slots()
    assert sorted(store.key_arrays(live)[0].to_pylist()) == [-1, 1, 2**32 - 1, 2**32 + 1]


def test_int32_keys_and_prefix_ids_are_held_in_two_bytes_until_one_does_not_fit() -> None:
    """4-byte integer keys (a prefix's slot number among them) are stored in 2 bytes while they
    fit, and widened by the first that does not (a negative one too); a key equal to a stored one
    only in its low 2 bytes is another key."""
    store = ColumnarValues([pa.int32()], pa.int64(), MAX_PARALLELISM)
    store.put([pa.array([1, 2**16 - 1], pa.int32())], pa.array([10, 20]))
    assert store.keys[0].values.dtype == np.uint16
    assert store.get([pa.array([2**16 + 1, -1, 1], pa.int32())]).to_pylist() == [None, None, 10]
    store.put([pa.array([-1], pa.int32())], pa.array([30]))
    assert store.keys[0].values.dtype == np.uint32
    keys = [pa.array([1, 2**16 - 1, -1, 2**16 + 1, -(2**31)], pa.int32())]
    assert store.get(keys).to_pylist() == [10, 20, 30, None, None]
    assert sorted(store.key_arrays(store.live_slots())[0].to_pylist()) == [-1, 1, 2**16 - 1]
    grouped = ColumnarValues([pa.string(), pa.int64()], pa.int64(), MAX_PARALLELISM, group_fields=1)
    grouped.put([pa.array([f"g{i % 70_000}" for i in range(140_000)]), pa.array(range(140_000))],
                pa.array(range(140_000)))
    assert grouped.keys[0].values.dtype == np.uint32  # 70,000 prefixes: past 2 bytes
    got = grouped.get([pa.array(["g5", "g69999", "g5"]), pa.array([5, 69_999, 70_005])])
    assert got.to_pylist() == [5, 69_999, 70_005]


def test_a_validity_is_held_only_from_the_first_null() -> None:
    """Keys and values without NULLs keep no validity array; the first NULL makes one, and the
    earlier slots read as valid."""
    store = ColumnarValues([pa.int64(), pa.string()], pa.int64(), MAX_PARALLELISM)
    store.put([pa.array([1, 2]), pa.array(["a", "b"])], pa.array([10, 20]))
    assert [k.valid.bits for k in store.keys] == [None, None] and store.columns[0].valid.bits is None
    store.put([pa.array([None, 3]), pa.array(["c", None])], pa.array([30, 40]))
    assert all(k.valid.bits is not None for k in store.keys)
    assert store.columns[0].valid.bits is None  # NULL values delete, they are not written
    keys = [pa.array([1, 2, None, 3, None]), pa.array(["a", "b", "c", None, None])]
    assert store.get(keys).to_pylist() == [10, 20, 30, 40, None]
    struct = pa.struct([("n", pa.int64())])
    values = ColumnarValues([pa.int64()], struct, MAX_PARALLELISM)
    values.put([pa.array([1, 2])], pa.array([{"n": 5}, {"n": 6}], struct))
    assert values.columns[0].valid.bits is None
    values.put([pa.array([3])], pa.array([{"n": None}], struct))
    assert values.get([pa.array([1, 2, 3, 4])]).to_pylist() == [{"n": 5}, {"n": 6}, {"n": None}, None]


def test_keys_grouped_by_a_prefix_compact_with_it() -> None:
    """A state grouped by its first field stores that field's distinct values once; after a
    compaction only those still held are left, and every key reads back the same."""
    store = ColumnarValues([pa.string(), pa.int64()], pa.int64(), MAX_PARALLELISM, group_fields=1)
    n = 60_000
    names = pa.array([f"group-{i % 3000}" for i in range(n)])
    values = np.arange(n, dtype=np.int64)
    store.put([names, pa.array(values)], pa.array(values * 2))
    assert len(store) == n and store.prefix is not None and store.prefix.used == 3000
    # Keep the keys of groups 0..99 only: far more dead slots than live, so it compacts.
    gone = np.array([i % 3000 >= 100 for i in range(n)])
    store.put([names.filter(pa.array(gone)), pa.array(values[gone])], pa.nulls(int(gone.sum()), pa.int64()))
    assert store.used == len(store) == int((~gone).sum()) and store.prefix.used == 100
    got = store.get([names, pa.array(values)]).to_numpy(zero_copy_only=False)
    assert np.isnan(got[gone]).all() and (got[~gone] == values[~gone] * 2).all()
    live = store.live_slots()
    keys = store.key_arrays(live)
    assert sorted(zip(keys[0].to_pylist(), keys[1].to_pylist())) == sorted(
        (f"group-{i % 3000}", i) for i in range(n) if not gone[i])
    expected = key_groups([keys[0]], MAX_PARALLELISM)
    assert (store.groups_of(live) == expected).all()
    # New keys of old and new groups still land right.
    store.put([pa.array(["group-5", "new"]), pa.array([-1, -2])], pa.array([7, 8]))
    assert store.get([pa.array(["group-5", "new", "group-2999"]), pa.array([-1, -2, 2999])]).to_pylist() == [
        7, 8, None]


def test_rewritten_strings_do_not_pile_up() -> None:
    store = ColumnarValues([pa.int64()], pa.struct([("n", pa.int64()), ("s", pa.string())]), MAX_PARALLELISM)
    keys = pa.array(np.arange(1000, dtype=np.int64))
    for round_ in range(200):
        rows = [{"n": round_, "s": f"r{round_}-{i}"} for i in range(1000)]
        store.put([keys], pa.array(rows, store.value_type))
    (column,) = [c for c in store.columns if hasattr(c, "chunks")]
    assert column.total <= 3 * 1000 + 4096 and len(column.chunks) <= 20
    assert store.get([pa.array([0, 999])]).to_pylist() == [{"n": 199, "s": "r199-0"},
                                                           {"n": 199, "s": "r199-999"}]


def test_a_snapshot_of_the_dict_backend_restores(tmp_path: Path) -> None:
    """``data/memory-format1.op.0.acc.arrow`` was written by the memory backend when it kept a
    dict per key group; the file layout is unchanged, so it restores as it is."""
    key = [("id", pa.int64()), ("name", pa.string()), ("x", pa.float64())]
    value = pa.struct([("n", pa.int64()), ("s", pa.string()), ("l", pa.list_(pa.int64())),
                       ("d", pa.decimal128(12, 2)), ("t", pa.timestamp("ms"))])
    d = ValueStateDescriptor("acc", key, value)
    files = [DATA / "memory-format1.op.0.acc.arrow"]
    with MemoryStateBackend(max_parallelism=MAX_PARALLELISM).open("op", [d]) as state:
        state.restore(files)
        got = entries(state)
        acc = state.value_state("acc")
        assert acc.get((2, None, math.nan)) == {"n": 2, "s": None, "l": None, "d": None, "t": None}
        assert acc.get((None, "é", 0.0)) == {"n": None, "s": "", "l": [], "d": Decimal("-3.00"),
                                               "t": dt.datetime(1970, 1, 1)}
        assert got[(1, "a", 0.5)] == {"n": 1, "s": "one", "l": [1, None], "d": Decimal("1.25"),
                                      "t": dt.datetime(2024, 1, 2, 3, 4, 5, 6000)}
        assert len(got) == 3 and acc.get((3, "gone", 1.0)) is None
        (tmp_path / "again").mkdir()
        again = state.snapshot(tmp_path / "again")
    with MemoryStateBackend(max_parallelism=MAX_PARALLELISM).open("op", [d]) as state:
        state.restore(again, key_groups=[7])
        assert list(entries(state)) == [(1, "a", 0.5)]


@settings(max_examples=200, deadline=None)
@given(slots=st.lists(st.one_of(st.integers(0, 40), st.integers(0, 2**31 - 1),
                                st.integers(0, 63).map(lambda i: i << 20)), max_size=3000))
def test_each_slot_of_a_batch_gets_one_representative_row(slots: list[int]) -> None:
    """``_representatives``: every row points at a row of its own slot, all rows of a slot at
    the same one, which points at itself: slots that collide on their low bits (``i << 20``),
    repeat, or are spread over the whole range included."""
    array = np.array(slots, dtype=np.int64)
    chosen = _representatives(array)
    assert (array[chosen] == array).all()
    assert (chosen[chosen] == chosen).all()
    assert len(np.unique(chosen)) == len(set(slots))


def test_states_sharing_a_prefix_store_look_a_batch_up_in_it_once() -> None:
    """``share_prefix``: an empty state grouped by fields of the same types takes another's
    store of them; keys given to both with one memo are looked up in it once, and each state
    keeps its own values. A state holding keys, or grouped by other types, keeps its own."""
    value = pa.struct([("c", pa.int64())])
    a = ColumnarValues([pa.string(), pa.int64()], value, MAX_PARALLELISM, group_fields=1)
    b = ColumnarValues([pa.string(), pa.int64()], value, MAX_PARALLELISM, group_fields=1)
    other = ColumnarValues([pa.int64(), pa.int64()], value, MAX_PARALLELISM, group_fields=1)
    assert b.share_prefix(a) and b.prefix is a.prefix
    assert not other.share_prefix(a)
    names = pa.array(["x", "y", None])
    memo: dict[Any, Any] = {}
    calls = []
    real = ColumnarValues._prefix_ids

    def counting(self: ColumnarValues, *args: Any, **kwargs: Any) -> Any:
        calls.append(self)
        return real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ColumnarValues, "_prefix_ids", counting)
        a.add_counts(PrefixedKeys([names], np.array([0, 1, 2]), [pa.array([1, 2, 3])], memo), np.ones((3, 1), np.int64))
        b.add_counts(PrefixedKeys([names], np.array([2, 0]), [pa.array([1, 1])], memo), np.full((2, 1), 5, np.int64))
    assert calls == [a.prefix]
    assert a.get([pa.array(["x", "y", None, "x"]), pa.array([1, 2, 3, 2])]).to_pylist() == [
        {"c": 1}, {"c": 1}, {"c": 1}, None]
    assert b.get([pa.array([None, "x", "y"]), pa.array([1, 1, 2])]).to_pylist() == [{"c": 5}, {"c": 5}, None]
    fresh = ColumnarValues([pa.string(), pa.int64()], value, MAX_PARALLELISM, group_fields=1)
    fresh.add_counts([pa.array(["z"]), pa.array([1])], np.ones((1, 1), np.int64))
    assert not fresh.share_prefix(a) and fresh.prefix is not a.prefix


def _fixed_pool(t: pa.DataType, n: int, rng: np.random.Generator) -> list[Any]:
    """``n`` values of the fixed-width type ``t`` (repeats allowed), the awkward ones included."""
    if pa.types.is_floating(t):
        return [0.0, -0.0, math.nan, -math.inf, *rng.normal(size=n - 4).round(1).tolist()]
    if pa.types.is_boolean(t):
        return [bool(b) for b in rng.integers(0, 2, n)]
    if pa.types.is_decimal(t):
        return [Decimal(int(v)).scaleb(-2) for v in rng.integers(-99_999, 99_999, n)]
    if pa.types.is_fixed_size_binary(t):
        return [bytes(b) for b in rng.integers(0, 256, (n, t.byte_width), dtype=np.uint8)]
    if pa.types.is_date(t):
        return [dt.date(1970, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(-5000, 40_000, n)]
    if pa.types.is_timestamp(t):
        return pa.array(rng.integers(-2**40, 2**40, n), pa.int64()).cast(t).to_pylist()
    info = np.iinfo(t.to_pandas_dtype())
    return [int(v) for v in rng.integers(info.min, info.max, n, dtype=t.to_pandas_dtype(), endpoint=True)]


@pytest.mark.parametrize("collide", [False, True])
@pytest.mark.parametrize("type_index", [i for i, (t, _) in enumerate(KEY_TYPES)
                                        if not (pa.types.is_string(t) or pa.types.is_large_binary(t))])
def test_a_hashless_prefixed_state_finds_its_keys_through_rebuilds_and_compactions(
        monkeypatch: pytest.MonkeyPatch, type_index: int, collide: bool) -> None:
    """A state grouped by a string prefix whose other key field is fixed-width keeps no hashes:
    each index rebuild (1,024 positions growing to 8,192 or more) hashes the stored keys again, and
    must place every key where a probe of the same key looks (``-0.0`` as ``0.0``, NaN as NaN),
    through deletes and compactions, with or without colliding hashes."""
    if collide:
        monkeypatch.setattr(keygroups, "hash_columns",
                            lambda columns, num_rows=None: _real_hash(columns, num_rows) & np.uint64(7))
    monkeypatch.setattr("clink.runtime.state.columnar._MIN_COMPACT", 0)
    t = KEY_TYPES[type_index][0]
    rng = np.random.default_rng(type_index)
    n = 6000
    groups = [f"g{i}" for i in rng.integers(0, 1500, n)]
    values = _fixed_pool(t, n, rng)
    store = ColumnarValues([pa.string(), t], pa.int64(), MAX_PARALLELISM, group_fields=1)
    assert store.hashless
    model: dict[tuple, int] = {}
    for lo in range(0, n, 1500):
        keys = [pa.array(groups[lo:lo + 1500]), pa.array(values[lo:lo + 1500], t)]
        store.put(keys if lo % 3000 else prefixed(keys), pa.array(range(lo, lo + 1500), pa.int64()))
        model.update((model_key(k), i) for i, k in enumerate(zip(groups[lo:lo + 1500], values[lo:lo + 1500]),
                                                             start=lo))
    assert len(store.hashes) == 0 and len(store.index) >= 8192

    def check() -> None:
        flipped = [-v if isinstance(v, float) and v == 0 else v for v in values]  # 0.0 and -0.0 swapped
        for probe in (values, flipped):
            got = store.get([pa.array(groups), pa.array(probe, t)]).to_pylist()
            assert got == [model.get(model_key(k)) for k in zip(groups, probe)]

    check()
    gone = list(range(0, n, 2))  # half the rows: deleted keys outnumber the live ones, a compaction
    store.put([pa.array([groups[i] for i in gone]), pa.array([values[i] for i in gone], t)],
              pa.array([None] * len(gone), pa.int64()))
    for i in gone:
        model.pop(model_key((groups[i], values[i])), None)
    check()
    more = _fixed_pool(t, 3000, np.random.default_rng(99))
    store.put([pa.array(groups[:3000]), pa.array(more, t)], pa.array(range(n, n + 3000), pa.int64()))
    model.update((model_key(k), i) for i, k in enumerate(zip(groups[:3000], more), start=n))
    check()
    got = store.get([pa.array(groups[:3000]), pa.array(more, t)]).to_pylist()
    assert got == [model[model_key(k)] for k in zip(groups[:3000], more)]
