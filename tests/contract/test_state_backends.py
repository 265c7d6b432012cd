"""The keyed state contract, run against every backend; and the state codec.

Each contract test takes ``make_backend``, which builds a fresh backend of one kind over a given
directory: ``memory``, ``sqlite`` and ``sqlite-tiny-cache`` (a write-back cache of two entries, so
nearly every operation evicts and reloads). Random operation sequences are checked against a
plain dict model.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clink.runtime.state import codec
from clink.runtime.state.backend import (
    IncompatibleState,
    OperatorState,
    PrefixedKeys,
    StateBackend,
    TableStateDescriptor,
    ValueStateDescriptor,
)
from clink.runtime.state.keygroups import key_groups
from clink.runtime.state.memory import MemoryStateBackend
from clink.runtime.state.sqlite import SqliteStateBackend

MakeBackend = Callable[[Path], StateBackend]

#: Few key groups, so that groups hold several keys and per-group iteration is exercised.
MAX_PARALLELISM = 8

BACKENDS: dict[str, MakeBackend] = {
    "memory": lambda d: MemoryStateBackend(max_parallelism=MAX_PARALLELISM),
    "sqlite": lambda d: SqliteStateBackend(d, max_parallelism=MAX_PARALLELISM),
    "sqlite-tiny-cache": lambda d: SqliteStateBackend(d, cache_entries=2, max_parallelism=MAX_PARALLELISM),
}

KEY = pa.schema([("id", pa.int64()), ("name", pa.string())])
COUNT = ValueStateDescriptor("count", KEY, pa.int64())
PARTS = TableStateDescriptor("parts", [("_key_group", pa.int32()), ("k", pa.int64()), ("v", pa.string())])
DESCRIPTORS = [COUNT, PARTS]

#: Hypothesis settings for the backend properties: few, short examples keep the file fast, and the
#: factory fixture is stateless, so sharing it between examples is safe.
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(params=list(BACKENDS))
def make_backend(request: pytest.FixtureRequest) -> MakeBackend:
    return BACKENDS[request.param]


@pytest.fixture
def state(make_backend: MakeBackend, tmp_path: Path) -> Iterator[OperatorState]:
    with make_backend(tmp_path / "state").open("op-1", DESCRIPTORS) as s:
        yield s


def all_entries(state: OperatorState) -> dict[tuple[str, tuple], Any]:
    """Every entry; a bucket of table state as the sorted list of its rows, which must each be
    listed under their own key group."""
    out: dict[tuple[str, tuple], Any] = {}
    for g in range(state.max_parallelism):
        for name, key, value in state.entries(g):
            if isinstance(value, pa.Table):
                rows = table_rows(value)
                assert rows and all(r[0] == g for r in rows), f"{name} {key}: rows listed under key group {g}"
                out.setdefault((name, key), []).extend(rows)
                continue
            assert (name, key) not in out, f"{name} {key} listed twice"
            out[name, key] = value
    return {k: sorted(v, key=repr) if k[0] == "parts" else v for k, v in out.items()}


def table_rows(table: pa.Table | None) -> list[tuple]:
    return [] if table is None else [tuple(r.values()) for r in table.to_pylist()]


def parts_table(rows: list[tuple[int, str | None]]) -> pa.Table:
    """Rows of PARTS; a row's key group is its ``k`` modulo the number of key groups."""
    ks = [k for k, _ in rows]
    return pa.table({"_key_group": pa.array([k % MAX_PARALLELISM for k in ks], pa.int32()),
                     "k": pa.array(ks, pa.int64()), "v": pa.array([v for _, v in rows], pa.string())})


def normal(model: dict[tuple[str, tuple], Any]) -> dict[tuple[str, tuple], Any]:
    return {k: sorted(v, key=repr) if k[0] == "parts" else v for k, v in model.items()
            if not (k[0] == "parts" and not v)}


# -- value state ----------------------------------------------------------------------------------


def test_put_get_delete(state: OperatorState) -> None:
    counts = state.value_state("count")
    assert counts.get((1, "a")) is None
    counts.put((1, "a"), 10)
    counts.put((1, None), 11)
    counts.put((None, None), 12)
    assert counts.get((1, "a")) == 10 and counts.get((1, None)) == 11 and counts.get((None, None)) == 12
    counts.put((1, "a"), 20)
    assert counts.get((1, "a")) == 20
    counts.delete((1, "a"))
    counts.delete((5, "never there"))
    assert counts.get((1, "a")) is None
    counts.put((1, None), None)  # storing None deletes
    assert all_entries(state) == {("count", (None, None)): 12}


def test_a_bare_value_is_a_one_field_key(make_backend: MakeBackend, tmp_path: Path) -> None:
    d = ValueStateDescriptor("v", [("k", pa.float64())], pa.string())
    with make_backend(tmp_path / "s").open("op", [d]) as s:
        v = s.value_state("v")
        v.put(1.5, "x")
        v.put(-0.0, "zero")
        v.put(math.nan, "nan")
        assert v.get((1.5,)) == "x"
        assert v.get(0.0) == "zero"  # -0.0 and 0.0 are one key
        assert v.get(float("nan")) == "nan"  # every NaN is one key
        assert v.get_many(pa.array([0.0, math.nan, None, 1.5])).to_pylist() == ["zero", "nan", None, "x"]
        with pytest.raises(TypeError, match="key tuple of 1"):
            v.get((1.5, 2.0))


def test_batch_forms_with_nulls_in_keys_and_values(state: OperatorState) -> None:
    counts = state.value_state("count")
    ids = pa.array([1, None, 2, 1, None, 3])
    names = pa.array(["a", "b", None, "a", None, "c"])
    counts.put_many([ids, names], pa.array([1, 2, 3, 4, 5, None]))
    # (1, "a") appears twice: the last row wins; (3, "c") got NULL, so it has no value
    assert counts.get((1, "a")) == 4
    assert counts.get((None, "b")) == 2 and counts.get((2, None)) == 3 and counts.get((None, None)) == 5
    got = counts.get_many([pa.array([None, 1, 3, 7, 2]), pa.array([None, "a", "c", "x", None])])
    assert got.type == pa.int64()
    assert got.to_pylist() == [5, 4, None, None, 3]
    # a NULL value deletes, and chunked or differently typed key columns are accepted
    counts.put_many([pa.chunked_array([[1], [None]]), pa.array(["a", "b"], pa.large_string())],
                    pa.array([None, 9], pa.int32()))
    assert counts.get_many([pa.array([1, None], pa.int32()), pa.array(["a", "b"])]).to_pylist() == [None, 9]
    assert counts.get_many([pa.array([], pa.int64()), pa.array([], pa.string())]).to_pylist() == []


def test_batch_and_scalar_forms_agree(state: OperatorState) -> None:
    counts = state.value_state("count")
    for i in range(50):
        counts.put((i % 7, str(i % 3)), i)
    ids, names = list(range(-2, 9)) * 3, [str(j) for j in range(3) for _ in range(11)]
    got = counts.get_many([pa.array(ids), pa.array(names)]).to_pylist()
    assert got == [counts.get((i, n)) for i, n in zip(ids, names)]


def test_values_keep_their_declared_types(make_backend: MakeBackend, tmp_path: Path) -> None:
    value_type = pa.struct([("sum", pa.decimal128(12, 2)), ("last", pa.timestamp("ms")),
                            ("tags", pa.list_(pa.string()))])
    d = ValueStateDescriptor("acc", [("day", pa.date32())], value_type)
    value = {"sum": Decimal("12.50"), "last": dt.datetime(2024, 5, 1, 12, 0, 0, 123000), "tags": ["a", None]}
    with make_backend(tmp_path / "s").open("op", [d]) as s:
        acc = s.value_state("acc")
        acc.put(dt.date(2024, 5, 1), value)
        acc.put_many(pa.array([dt.date(2024, 5, 2)]), pa.array([None], value_type))
        got = acc.get_many(pa.array([dt.date(2024, 5, 1), dt.date(2024, 5, 2)]))
        assert got.type == value_type
        assert got.to_pylist() == [value, None]
        assert acc.get(dt.date(2024, 5, 1)) == value


def test_a_state_is_asked_for_by_its_kind(state: OperatorState) -> None:
    with pytest.raises(TypeError, match="is table state, not value state"):
        state.value_state("parts")
    with pytest.raises(KeyError, match="no state 'nope'"):
        state.table_state("nope")


# -- key groups and clear -------------------------------------------------------------------------


def test_entries_of_a_key_group_are_exactly_its_keys(state: OperatorState) -> None:
    ids = list(range(200)) + [None]
    names = [f"n{i % 5}" for i in range(200)] + [None]
    state.value_state("count").put_many([pa.array(ids), pa.array(names)], pa.array(range(201)))
    groups = key_groups([pa.array(ids), pa.array(names)], MAX_PARALLELISM).tolist()
    for g in range(MAX_PARALLELISM):
        listed = list(state.entries(g))
        expected = {("count", (i, n), v) for v, (i, n, kg) in enumerate(zip(ids, names, groups)) if kg == g}
        assert {e for e in listed if e[0] == "count"} == expected
    with pytest.raises(ValueError, match="outside"):
        list(state.entries(MAX_PARALLELISM))


def test_the_key_group_of_a_key_does_not_depend_on_its_batch() -> None:
    assert key_groups([pa.array([""])])[0] == key_groups([pa.array(["", "a"])])[0]


def test_clear_removes_everything(state: OperatorState) -> None:
    state.value_state("count").put((1, "a"), 1)
    state.table_state("parts").add(1, parts_table([(1, "a")]))
    state.commit(1)
    state.clear()
    assert all_entries(state) == {}
    assert state.value_state("count").get((1, "a")) is None
    assert state.table_state("parts").get(1) is None and state.table_state("parts").namespaces() == []


# -- random operations against a dict model --------------------------------------------------------

keys = st.tuples(st.sampled_from([None, 0, 1, -1, 2**40]), st.sampled_from([None, "", "a", "é", "ab"]))
ints = st.none() | st.integers(-(2**63), 2**63 - 1)
operations = st.lists(st.one_of(
    st.tuples(st.just("put"), keys, ints),
    st.tuples(st.just("delete"), keys),
    st.tuples(st.just("get"), keys),
    st.tuples(st.just("put_many"), st.lists(st.tuples(keys, ints), max_size=8)),
    st.tuples(st.just("get_many"), st.lists(keys, max_size=8)),
    st.tuples(st.just("table_add"), st.sampled_from([-5, 0, 7, 2**40]),
              st.lists(st.tuples(st.integers(0, 20), st.sampled_from([None, "p", "q"])), max_size=5)),
    st.tuples(st.just("table_replace"), st.sampled_from([-5, 0, 7]),
              st.lists(st.tuples(st.integers(0, 20), st.sampled_from([None, "r"])), max_size=3)),
    st.tuples(st.just("table_take"), st.sampled_from([-5, 0, 7, 2**40])),
    st.tuples(st.just("commit")),
), max_size=40)


def apply(state: OperatorState, model: dict[tuple[str, tuple], Any], op: tuple) -> None:
    counts, parts = state.value_state("count"), state.table_state("parts")
    match op:
        case ("table_add", ns, rows):
            parts.add(ns, parts_table(rows))
            if rows:
                model.setdefault(("parts", (ns,)), []).extend((k % MAX_PARALLELISM, k, v) for k, v in rows)
        case ("table_replace", ns, rows):
            parts.replace(ns, parts_table(rows))
            model.pop(("parts", (ns,)), None)
            if rows:
                model[("parts", (ns,))] = [(k % MAX_PARALLELISM, k, v) for k, v in rows]
        case ("table_take", ns):
            assert table_rows(parts.take(ns)) == model.pop(("parts", (ns,)), [])
        case ("put", k, v):
            counts.put(k, v)
            model.pop(("count", k), None) if v is None else model.__setitem__(("count", k), v)
        case ("delete", k):
            counts.delete(k)
            model.pop(("count", k), None)
        case ("get", k):
            assert counts.get(k) == model.get(("count", k))
        case ("put_many", rows):
            ks = [k for k, _ in rows]
            counts.put_many([pa.array([k[0] for k in ks], pa.int64()), pa.array([k[1] for k in ks], pa.string())],
                            pa.array([v for _, v in rows], pa.int64()))
            for k, v in rows:
                model.pop(("count", k), None) if v is None else model.__setitem__(("count", k), v)
        case ("get_many", ks):
            got = counts.get_many([pa.array([k[0] for k in ks], pa.int64()), pa.array([k[1] for k in ks], pa.string())])
            assert got.to_pylist() == [model.get(("count", k)) for k in ks]
        case ("commit",):
            state.commit(1)
    # reads through the handles agree with the model after every step
    if len(op) > 1 and isinstance(op[1], tuple):
        k = op[1]
        assert counts.get(k) == model.get(("count", k))
    if op[0].startswith("table"):  # buckets keep rows in the order added
        ns = op[1]
        assert table_rows(parts.get(ns)) == model.get(("parts", (ns,)), [])
        buckets = sorted(n for (name, (n, *_)) in model if name == "parts")
        assert parts.namespaces() == buckets
        assert parts.num_rows() == sum(len(v) for (name, _), v in model.items() if name == "parts")


@PROPERTY
@given(ops=operations)
def test_random_operations_match_a_dict_model(make_backend: MakeBackend, ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as d, make_backend(Path(d)).open("op", DESCRIPTORS) as state:
        model: dict[tuple[str, tuple], Any] = {}
        for op in ops:
            apply(state, model, op)
        assert all_entries(state) == normal(model)


@PROPERTY
@given(before=operations, after=operations)
def test_snapshot_then_restore_into_a_fresh_backend(make_backend: MakeBackend, before: list[tuple],
                                                     after: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "snap").mkdir()
        model: dict[tuple[str, tuple], Any] = {}
        with make_backend(root / "a").open("op", DESCRIPTORS) as state:
            for op in before:
                apply(state, model, op)
            state.commit(7)
            files = state.snapshot(root / "snap")
            shadow = copy.deepcopy(model)
            for op in after:  # changes after the snapshot are not in it
                apply(state, shadow, op)
        assert all(f.parent == root / "snap" and f.exists() for f in files)
        with make_backend(root / "b").open("op", DESCRIPTORS) as fresh:
            fresh.value_state("count").put((99, "stale"), 1)  # restore replaces what was there
            fresh.restore(files)
            assert all_entries(fresh) == normal(model)
            for op in after:  # and the restored state works as any other
                apply(fresh, model, op)
            assert all_entries(fresh) == normal(model)


def test_restore_splits_and_merges_by_key_group(make_backend: MakeBackend, tmp_path: Path) -> None:
    (tmp_path / "snap").mkdir()
    ids, names = pa.array(range(100)), pa.array([str(i % 4) for i in range(100)])
    with make_backend(tmp_path / "a").open("op", DESCRIPTORS) as state:
        state.value_state("count").put_many([ids, names], pa.array(range(100)))
        state.table_state("parts").add(3, parts_table([(i, str(i)) for i in range(20)]))
        state.table_state("parts").add(-1, parts_table([(5, None)]))
        everything = all_entries(state)
        files = state.snapshot(tmp_path / "snap")
    low, high = set(range(MAX_PARALLELISM // 2)), set(range(MAX_PARALLELISM // 2, MAX_PARALLELISM))
    parts = []
    for i, wanted in enumerate([low, high]):  # scale out: each task takes half of the key groups
        with make_backend(tmp_path / f"part{i}").open("op", DESCRIPTORS) as part:
            part.restore(files, key_groups=wanted)
            for g in range(MAX_PARALLELISM):
                assert (list(part.entries(g)) != []) <= (g in wanted)
            (tmp_path / f"snap{i}").mkdir()
            parts += part.snapshot(tmp_path / f"snap{i}")
    with make_backend(tmp_path / "merged").open("op", DESCRIPTORS) as merged:  # scale in: merge them
        merged.restore(parts)
        assert all_entries(merged) == everything


def test_keys_grouped_by_their_first_fields_move_together(make_backend: MakeBackend, tmp_path: Path) -> None:
    """With ``group_fields``, a key's group is that of its leading fields: listed, split by key
    group and merged again, the keys that share them stay together; a state declared without
    it does not take the files."""
    grouped = ValueStateDescriptor("pairs", [("k", pa.string()), ("v", pa.int64())], pa.int64(), group_fields=1)
    (tmp_path / "snap").mkdir()
    ks, vs = pa.array([f"k{i % 37}" for i in range(2000)]), pa.array(range(2000))
    with make_backend(tmp_path / "a").open("op", [grouped]) as state:
        state.value_state("pairs").put_many([ks, vs], pa.array(range(2000)))
        state.value_state("pairs").put_many([ks.slice(0, 500), vs.slice(0, 500)], pa.nulls(500, pa.int64()))
        everything = all_entries(state)
        assert len(everything) == 1500
        for g in range(MAX_PARALLELISM):
            for _, (k, _), _ in state.entries(g):
                assert key_groups([pa.array([k])], MAX_PARALLELISM)[0] == g
        state.commit(1)
        files = state.snapshot(tmp_path / "snap")
    wanted = set(range(0, MAX_PARALLELISM, 3))
    with make_backend(tmp_path / "b").open("op", [grouped]) as part:
        part.restore(files, key_groups=wanted)
        kept = all_entries(part)
        assert kept == {key: value for key, value in everything.items()
                        if key_groups([pa.array([key[1][0]])], MAX_PARALLELISM)[0] in wanted}
        assert kept and len(kept) < len(everything)
    plain = ValueStateDescriptor("pairs", grouped.key_schema, pa.int64())
    with (make_backend(tmp_path / "c").open("op", [plain]) as other,
          pytest.raises(IncompatibleState, match="grouped by 1")):
        other.restore(files)
    with pytest.raises(ValueError, match="group_fields must be between 1 and the 2"):
        ValueStateDescriptor("pairs", grouped.key_schema, pa.int64(), group_fields=3)


def test_keys_given_with_their_prefix_once_read_and_write_as_columns(make_backend: MakeBackend,
                                                                      tmp_path: Path) -> None:
    """``PrefixedKeys`` (the grouping fields' values once, an id per row) is the same key as its
    columns row by row, read or written, whether the backend uses the prefix or not."""
    grouped = ValueStateDescriptor("pairs", [("k", pa.string()), ("v", pa.int64())], pa.int64(), group_fields=1)
    names = pa.array(["a", None, "b"])
    ids = np.array([2, 0, 1, 2, 1, 0, 2], dtype=np.int64)
    values = pa.array([1, 2, 3, 1, 5, 6, 7], pa.int32())  # cast to the key type, as columns are
    keys = PrefixedKeys([names], ids, [values])
    with make_backend(tmp_path / "a").open("op", [grouped]) as state:
        pairs = state.value_state("pairs")
        pairs.put_many([pa.array(["b", "a"]), pa.array([1, 2])], pa.array([10, 20]))
        # The rows' keys: (b, 1) (a, 2) (NULL, 3) (b, 1) (NULL, 5) (a, 6) (b, 7).
        assert pairs.get_many(keys).to_pylist() == [10, 20, None, 10, None, None, None]
        pairs.put_many(keys, pa.array([100, 101, 102, 103, 104, None, 106]))
        assert pairs.get_many(keys).to_pylist() == [103, 101, 102, 103, 104, None, 106]
        stored = {key: value for (_, key), value in all_entries(state).items()}
        assert stored == {("b", 1): 103, ("a", 2): 101, (None, 3): 102, (None, 5): 104, ("b", 7): 106}
        with pytest.raises(TypeError, match="expected 1 prefix and 1 other key columns"):
            pairs.get_many(PrefixedKeys([names, names], ids, []))


PAIRS = [ValueStateDescriptor(name, [("g", pa.string()), ("x", pa.int64())], pa.struct([("n", pa.int64())]),
                              group_fields=1) for name in ("bidders", "auctions")]
shared_rows = st.lists(st.tuples(st.sampled_from(["p", "q", "r", None]), st.integers(0, 3), st.integers(-1, 2),
                                 st.booleans()), max_size=10)


@PROPERTY
@given(batches=st.lists(shared_rows, max_size=6), cut=st.integers(0, 6))
def test_two_states_grouped_alike_count_apart(make_backend: MakeBackend, batches: list[list[tuple]], cut: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Two states grouped by fields of the same types (two COUNT(DISTINCT)s of one GROUP BY)
    given keys over the same prefix arrays and one memo, as the group operator gives them: each
    keeps its own counts, through deletes that compact one of them at once, and through a
    snapshot restored at ``cut`` into a fresh state. (The memory backend shares one store of the
    grouping fields between them.)"""
    monkeypatch.setattr("clink.runtime.state.columnar._MIN_COMPACT", 0)
    models: dict[str, dict[tuple, int]] = {"bidders": {}, "auctions": {}}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        state = make_backend(root / "a").open("op", PAIRS)
        try:
            for i, rows in enumerate(batches):
                if i == cut:
                    (root / f"snap{i}").mkdir()
                    files = state.snapshot(root / f"snap{i}")
                    state.close()
                    state = make_backend(root / f"b{i}").open("op", PAIRS)
                    state.restore(files)
                    stores = [getattr(state.value_state(name), "store", None) for name in ("bidders", "auctions")]
                    if stores[0] is not None:  # the memory backend: shared again on restore
                        assert stores[0].prefix is stores[1].prefix
                encoded = pc.dictionary_encode(pa.array([g for g, *_ in rows], pa.string()), null_encoding="encode")
                ids = encoded.indices.to_numpy().astype(np.int64)
                memo: dict[Any, Any] = {}
                for name in ("bidders", "auctions"):
                    mine = [j for j, (*_, which) in enumerate(rows) if which == (name == "bidders")]
                    keys = PrefixedKeys([encoded.dictionary], ids[mine], [pa.array([rows[j][1] for j in mine], pa.int64())],
                                        memo)
                    deltas = np.array([[rows[j][2]] for j in mine], dtype=np.int64).reshape(len(mine), 1)
                    state.value_state(name).add_counts(keys, deltas)
                    for j in mine:
                        g, x, delta, _ = rows[j]
                        total = models[name].get((g, x), 0) + delta
                        if total:
                            models[name][g, x] = total
                        else:
                            models[name].pop((g, x), None)
                expected = {(name, key): {"n": n} for name, model in models.items() for key, n in model.items()}
                assert all_entries(state) == expected
        finally:
            state.close()


COUNTERS = ValueStateDescriptor("counters", [("g", pa.string()), ("x", pa.float64())],
                                pa.struct([("a", pa.int64()), ("b", pa.int64())]), group_fields=1)
counter_keys = st.tuples(st.sampled_from(["p", "q", None]), st.sampled_from([0.0, -0.0, math.nan, 1.5, None]))
#: Mostly small deltas; sometimes ones so large that a float64 sum would round (but no sum
#: of them leaves int64).
counter_deltas = st.integers(-2, 2) | st.sampled_from([2**56, -(2**56), 2**53 + 1])


def model_counter_key(key: tuple) -> tuple:
    g, x = key
    return g, (None if x is None else "nan" if math.isnan(x) else x + 0.0)


@PROPERTY
@given(batches=st.lists(st.lists(st.tuples(counter_keys, counter_deltas, counter_deltas), max_size=12), max_size=5),
       prefixed=st.booleans())
def test_counts_added_per_key_match_a_dict_model(make_backend: MakeBackend, batches: list[list[tuple]],
                                                 prefixed: bool) -> None:
    """``add_counts`` adds each row's deltas to its key's counters (equal keys, ``-0.0`` and
    ``0.0`` or two NaNs, adding up), reports each distinct key once with its counters before and
    after, and deletes a key whose counters all return to 0."""
    model: dict[tuple, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory() as d, make_backend(Path(d)).open("op", [COUNTERS]) as state:
        counters = state.value_state("counters")
        for rows in batches:
            gs = pa.array([k[0] for k, _, _ in rows], pa.string())
            xs = pa.array([k[1] for k, _, _ in rows], pa.float64())
            if prefixed:
                encoded = pc.dictionary_encode(gs, null_encoding="encode")
                keys: Any = PrefixedKeys([encoded.dictionary], encoded.indices.to_numpy().astype(np.int64), [xs])
            else:
                keys = [gs, xs]
            deltas = np.array([[a, b] for _, a, b in rows], dtype=np.int64).reshape(len(rows), 2)
            counted = counters.add_counts(keys, deltas)
            sums: dict[tuple, list[int]] = {}
            for key, a, b in rows:
                total = sums.setdefault(model_counter_key(key), [0, 0])
                total[0] += a
                total[1] += b
            reported = [model_counter_key(rows[int(r)][0]) for r in counted.rows]
            assert sorted(reported, key=repr) == sorted(sums, key=repr)
            for key, before, after in zip(reported, counted.before.tolist(), counted.after.tolist(), strict=True):
                held = model.get(key, (0, 0))
                assert before == list(held)
                assert after == [held[0] + sums[key][0], held[1] + sums[key][1]]
                if after == [0, 0]:
                    model.pop(key, None)
                else:
                    model[key] = (after[0], after[1])
        stored = {model_counter_key(key): (value["a"], value["b"]) for (_, key), value in all_entries(state).items()}
        assert stored == model


def test_counts_need_a_value_of_int64_fields(state: OperatorState, make_backend: MakeBackend) -> None:
    with pytest.raises(TypeError, match="needs a value of int64 fields"):
        state.value_state("count").add_counts([pa.array([1]), pa.array(["a"])], np.ones((1, 1), np.int64))

    with tempfile.TemporaryDirectory() as d, make_backend(Path(d)).open("op", [COUNTERS]) as counters_state:
        counters = counters_state.value_state("counters")
        keys = [pa.array(["p", "q"]), pa.array([1.0, 2.0])]
        with pytest.raises(ValueError, match="needs 2 rows of 2 integer deltas, got shape"):
            counters.add_counts(keys, np.ones((2, 3), np.int64))
        with pytest.raises(ValueError, match="integer deltas"):
            counters.add_counts(keys, np.ones((2, 2)))
        assert all_entries(counters_state) == {}  # a refused batch changes nothing


def test_restore_rejects_state_declared_differently(make_backend: MakeBackend, tmp_path: Path) -> None:
    (tmp_path / "snap").mkdir()
    with make_backend(tmp_path / "a").open("op", DESCRIPTORS) as state:
        state.value_state("count").put((1, "a"), 1)
        files = state.snapshot(tmp_path / "snap")
    changed = ValueStateDescriptor("count", KEY, pa.string())
    with (make_backend(tmp_path / "b").open("op", [changed, PARTS]) as other,
          pytest.raises(IncompatibleState, match="count")):
        other.restore(files)
    with make_backend(tmp_path / "c").open("op", [PARTS]) as other, pytest.raises(IncompatibleState, match="does not"):
        other.restore(files)


def test_commit_records_the_checkpoint(state: OperatorState) -> None:
    assert state.committed_checkpoint is None
    state.commit(3)
    state.commit(4)
    assert state.committed_checkpoint == 4


# -- what only a durable backend does ---------------------------------------------------------------


@pytest.mark.parametrize("cache_entries", [2, 10_000])
def test_sqlite_reopens_as_of_the_last_commit(tmp_path: Path, cache_entries: int) -> None:
    backend = SqliteStateBackend(tmp_path, cache_entries=cache_entries, max_parallelism=MAX_PARALLELISM)
    with backend.open("op", DESCRIPTORS) as state:
        counts = state.value_state("count")
        counts.put_many([pa.array(range(10)), pa.array(["a"] * 10)], pa.array(range(10)))
        state.table_state("parts").add(10, parts_table([(1, "a"), (2, "b")]))
        state.commit(5)
        committed = all_entries(state)
        counts.put_many([pa.array(range(10)), pa.array(["a"] * 10)], pa.array(range(100, 110)))
        state.table_state("parts").add(10, parts_table([(3, "c")]))
        state.table_state("parts").add(11, parts_table([(3, "c")]))
        counts.put((99, "new"), 1)
    with backend.open("op", DESCRIPTORS) as state:  # the uncommitted changes are gone
        assert state.committed_checkpoint == 5
        assert all_entries(state) == committed
    with pytest.raises(IncompatibleState, match="count"):
        backend.open("op", [ValueStateDescriptor("count", KEY, pa.float64())])


def test_sqlite_table_state_spills_beyond_its_cache(tmp_path: Path) -> None:
    backend = SqliteStateBackend(tmp_path, max_parallelism=MAX_PARALLELISM, table_cache_bytes=4096)
    with backend.open("op", [PARTS]) as state:
        parts = state.table_state("parts")
        expected = []
        for i in range(50):
            rows = [(j, f"row {i}.{j}") for j in range(20)]
            parts.add(i % 3, parts_table(rows))
            expected += [(i % 3, k % MAX_PARALLELISM, k, v) for k, v in rows]
            assert parts.memory_bytes() <= 4096 + parts_table(rows).nbytes
        assert parts.parts(0) == 17 and parts.num_rows() == 1000
        state.commit(1)
        assert parts.memory_bytes() == 0
        got = [(ns, *row) for ns in parts.namespaces() for row in table_rows(parts.get(ns))]
        assert got == sorted(expected, key=lambda r: r[0])  # stable: arrival order within a bucket


def test_sqlite_table_states_of_one_operator_share_its_cache(tmp_path: Path) -> None:
    """Two table states (a join's sides) split ``table_cache_bytes``: together they hold about
    that much in memory, not twice it, and each bounds its buckets by its share."""
    other = TableStateDescriptor("other", PARTS.schema)
    backend = SqliteStateBackend(tmp_path, max_parallelism=MAX_PARALLELISM, table_cache_bytes=8192,
                                 min_bucket_bytes=0)
    with backend.open("op", [PARTS, other]) as state:
        tables = [state.table_state("parts"), state.table_state("other")]
        assert [t.bucket_bytes for t in tables] == [1024, 1024]
        for i in range(40):
            batch = parts_table([(j, f"row {i}.{j}") for j in range(20)])
            for t in tables:
                t.add(i % 3, batch)
            assert sum(t.memory_bytes() for t in tables) <= 8192 + 2 * batch.nbytes
        assert all(t.num_rows() == 800 for t in tables)
    assert MemoryStateBackend().open("op", [PARTS]).table_state("parts").bucket_bytes is None
    # However small the cache, a bucket may reach 1 MiB: a side of tiny runs would be searched
    # run by run by every batch.
    with SqliteStateBackend(tmp_path / "floor", table_cache_bytes=8192).open("op", [PARTS, other]) as state:
        assert state.table_state("parts").bucket_bytes == 1 << 20
    with SqliteStateBackend(tmp_path / "large", table_cache_bytes=64 << 20).open("op", [PARTS, other]) as state:
        assert state.table_state("parts").bucket_bytes == 8 << 20


def test_sqlite_table_state_writes_a_large_table_in_blobs_of_about_a_mebibyte(tmp_path: Path) -> None:
    """A table of ~6 MiB goes to disk in slices of ~1 MiB (buffers that reuse the heap's pages)
    and comes back whole, in order, from a reopened database."""
    backend = SqliteStateBackend(tmp_path, max_parallelism=MAX_PARALLELISM, table_cache_bytes=0)
    rows = [(j, f"{j:06d}" + "x" * 500) for j in range(12_000)]
    with backend.open("op", [PARTS]) as state:
        state.table_state("parts").add(7, parts_table(rows))
        state.commit(1)
    with sqlite3.connect(backend.path_of("op")) as conn:
        (tbl,) = conn.execute("SELECT tbl FROM clink_states WHERE name = 'parts'").fetchone()
        sizes = [n for (n,) in conn.execute(f"SELECT length(data) FROM {tbl} ORDER BY seq")]
    assert len(sizes) >= 5 and max(sizes) < 1.2 * (1 << 20)
    with backend.open("op", [PARTS]) as state:
        parts = state.table_state("parts")
        assert [row[1:] for row in table_rows(parts.get(7))] == rows


def test_sqlite_files_are_one_database_per_operator(tmp_path: Path) -> None:
    backend = SqliteStateBackend(tmp_path)
    with backend.open("join/left 1", DESCRIPTORS), backend.open("agg", DESCRIPTORS):
        pass
    assert sorted(p.name for p in tmp_path.glob("*.sqlite")) == ["agg.sqlite", "join%2Fleft%201.sqlite"]


# -- codec --------------------------------------------------------------------------------------------


def _datetimes(unit: str) -> st.SearchStrategy[dt.datetime]:
    def round_to(d: dt.datetime) -> dt.datetime:
        if unit == "s":
            return d.replace(microsecond=0)
        if unit == "ms":
            return d.replace(microsecond=d.microsecond // 1000 * 1000)
        return d
    return st.datetimes(min_value=dt.datetime(1677, 9, 22), max_value=dt.datetime(2262, 4, 11)).map(round_to)


SCALARS: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [
    (pa.bool_(), st.booleans()),
    *[(t, st.integers(-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1))
      for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())],
    *[(t, st.integers(0, 2 ** t.bit_width - 1)) for t in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())],
    (pa.float32(), st.floats(width=32)),
    (pa.float64(), st.floats()),
    (pa.string(), st.text()),
    (pa.large_string(), st.text(max_size=5)),
    (pa.binary(), st.binary()),
    (pa.binary(3), st.binary(min_size=3, max_size=3)),
    (pa.decimal128(10, 3), st.decimals(-(10**7) + 1, 10**7 - 1, places=3, allow_nan=False)),
    (pa.decimal128(38, 0), st.decimals(-(10**38) + 1, 10**38 - 1, places=0, allow_nan=False)),
    (pa.decimal256(50, 10), st.decimals(-(10**40) + 1, 10**40 - 1, places=10, allow_nan=False)),
    (pa.date32(), st.dates()),
    (pa.date64(), st.dates()),
    *[(pa.timestamp(u), _datetimes(u)) for u in ("s", "ms", "us")],
    (pa.timestamp("ms", tz="UTC"), _datetimes("ms").map(lambda d: d.replace(tzinfo=dt.UTC))),
    (pa.timestamp("us", tz="+05:30"), _datetimes("us").map(lambda d: d.replace(tzinfo=dt.UTC))),
    (pa.timestamp("ns"), st.integers(-(2**63), 2**63 - 1)),
    (pa.time64("us"), st.times()),
    (pa.time32("ms"), st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))),
    (pa.duration("us"), st.timedeltas(min_value=dt.timedelta(days=-10**6), max_value=dt.timedelta(days=10**6))),
    (pa.null(), st.none()),
]


def typed_values(depth: int = 2) -> st.SearchStrategy[tuple[pa.DataType, Any]]:
    """An Arrow type and a value of it (NULL included at every level)."""
    scalar = st.sampled_from(SCALARS).flatmap(lambda ts: st.tuples(st.just(ts[0]), st.none() | ts[1]))
    if depth == 0:
        return scalar
    inner = typed_values(depth - 1)

    def nested(kind: str) -> st.SearchStrategy[tuple[pa.DataType, Any]]:
        def build(t: pa.DataType, v_strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[pa.DataType, Any]]:
            if kind == "list":
                return st.tuples(st.just(pa.list_(t)), st.none() | st.lists(v_strategy, max_size=3))
            if kind == "fixed_list":
                return st.tuples(st.just(pa.list_(t, 2)), st.none() | st.lists(v_strategy, min_size=2, max_size=2))
            if kind == "struct":
                return st.tuples(st.just(pa.struct([("a", t), ("b", pa.string())])),
                                 st.none() | st.fixed_dictionaries({"a": v_strategy, "b": st.none() | st.text(max_size=3)}))
            return st.tuples(st.just(pa.map_(pa.string(), t)),
                             st.none() | st.lists(st.tuples(st.text(max_size=3), v_strategy), max_size=3))
        return inner.flatmap(lambda tv: build(tv[0], _values_of(tv[0])))

    return scalar | st.sampled_from(["list", "fixed_list", "struct", "map"]).flatmap(nested)


def _values_of(t: pa.DataType) -> st.SearchStrategy[Any]:
    for scalar_type, strategy in SCALARS:
        if scalar_type == t:
            return st.none() | strategy
    if pa.types.is_fixed_size_list(t):
        return st.none() | st.lists(_values_of(t.value_type), min_size=t.list_size, max_size=t.list_size)
    if pa.types.is_map(t):
        return st.none() | st.lists(st.tuples(st.text(max_size=3), _values_of(t.item_type)), max_size=3)
    if pa.types.is_list(t):
        return st.none() | st.lists(_values_of(t.value_type), max_size=3)
    assert pa.types.is_struct(t)
    return st.none() | st.fixed_dictionaries({f.name: _values_of(f.type) for f in t})


def same(a: Any, b: Any) -> bool:
    """Equality in which NaN equals NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b and type(a) is type(b)


@settings(max_examples=300, deadline=None)
@given(typed=typed_values())
def test_codec_round_trips_every_type(typed: tuple[pa.DataType, Any]) -> None:
    t, value = typed
    as_arrow = codec.to_pylist(codec.from_pylist([value], t))[0]  # what Arrow itself gives back
    data = codec.encode(value, t)
    assert same(codec.decode(data, t), as_arrow)
    assert codec.encode(codec.decode(data, t), t) == data
    array = codec.from_pylist([value, None, value], t)
    assert same(codec.to_pylist(codec.decode_many(codec.encode_many(array), t)), codec.to_pylist(array))


@given(x=st.floats(allow_nan=True))
def test_canonical_encoding_makes_equal_floats_equal_bytes(x: float) -> None:
    for t in (pa.float64(), pa.float32()):
        assert codec.encode(-0.0, t, canonical=True) == codec.encode(0.0, t, canonical=True)
        assert codec.encode(math.nan, t, canonical=True) == codec.encode(-math.nan, t, canonical=True)
        if not math.isnan(x):
            assert codec.decode(codec.encode(x, pa.float64()), pa.float64()) == x


def test_codec_rejects_what_it_cannot_read() -> None:
    with pytest.raises(TypeError, match="cannot hold values of type"):
        codec.encoder(pa.dense_union([pa.field("a", pa.int8())]))
    with pytest.raises(ValueError, match="truncated"):
        codec.decode(codec.encode("hello", pa.string())[:-1], pa.string())
    with pytest.raises(ValueError, match="unexpected bytes"):
        codec.decode(codec.encode(1, pa.int64()) + b"\x00", pa.int64())
    with pytest.raises(ValueError, match="digits after the point"):
        codec.encode(Decimal("1.234"), pa.decimal128(5, 2))
    assert codec.encode(None, pa.list_(pa.int8())) == b"\x00"


def test_sqlite_gives_freed_space_back_at_commit(tmp_path: Path) -> None:
    backend = SqliteStateBackend(tmp_path, max_parallelism=MAX_PARALLELISM, table_cache_bytes=0)
    with backend.open("op", [PARTS]) as state:
        parts = state.table_state("parts")
        for ns in range(20):
            parts.add(ns, parts_table([(i, "x" * 200) for i in range(500)]))
        state.commit(1)
        full = backend.path_of("op").stat().st_size + (tmp_path / "op.sqlite-wal").stat().st_size
        for ns in range(20):
            parts.take(ns)
        state.commit(2)
        (tmp_path / "snap").mkdir()
        (copy,) = state.snapshot(tmp_path / "snap")
    assert copy.stat().st_size < full / 10, "a checkpoint of an emptied state copies the freed pages"
