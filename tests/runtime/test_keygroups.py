"""Key groups: deterministic across processes, spread evenly, NULL-safe, several columns."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.runtime.state.keygroups import (
    _hash_binary,
    _hash_rows,
    _mix,
    _repeats,
    _run_starts,
    extend_hashes,
    group_of_hash,
    hash_columns,
    key_groups,
)


def test_same_value_same_group_whatever_the_chunking_or_slicing() -> None:
    values = pa.array([3, 1, None, 3, 7, 1])
    groups = key_groups([values])
    assert groups.dtype == np.int32
    assert groups[0] == groups[3] and groups[1] == groups[5]
    assert key_groups([values.slice(3)]).tolist() == groups[3:].tolist()
    chunked = pa.chunked_array([values.slice(0, 2), values.slice(2)])
    assert key_groups([chunked]).tolist() == groups.tolist()


def test_the_same_in_another_process() -> None:
    """Python's hash() is salted per process; key groups must not be."""
    code = ("import pyarrow as pa; from clink.runtime.state.keygroups import hash_columns; "
            "print(hash_columns([pa.array(['a', 'bb', None, 'é']), pa.array([1, 2, 3, None])]).tolist())")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(runs) == 1
    local = hash_columns([pa.array(["a", "bb", None, "é"]), pa.array([1, 2, 3, None])]).tolist()
    assert runs == {f"{local}\n"}


def test_known_values_do_not_drift() -> None:
    """State written by one version must land in the same key groups in the next."""
    assert key_groups([pa.array([0, 1, 2, None])]).tolist() == key_groups([pa.array([0, 1, 2, None])]).tolist()
    pinned = key_groups([pa.array([0, 1, 2, 42, None]), pa.array(["x", "y", "", "z", None])]).tolist()
    assert pinned == [39, 9, 125, 64, 57]


@pytest.mark.parametrize("values", [
    pa.array(np.arange(20_000)),
    pa.array([f"user-{i}" for i in range(20_000)]),
    pa.array(np.arange(20_000) * 0.5),
    pa.array(np.arange(20_000) * 1000, pa.timestamp("ms")),
], ids=["int", "string", "float", "timestamp"])
def test_roughly_uniform_over_128_groups(values: pa.Array) -> None:
    counts = np.bincount(key_groups([values]), minlength=128)
    expected = len(values) / 128
    chi2 = ((counts - expected) ** 2 / expected).sum()
    # 127 degrees of freedom: the 99.9th percentile of chi-square is about 181.
    assert chi2 < 181, counts


def test_nulls_hash_alike_whatever_the_type() -> None:
    for arr in (pa.array([None, None], pa.int64()), pa.array([None, None], pa.string()),
                pa.array([None, None], pa.float64()), pa.array([None, None], pa.bool_()), pa.nulls(2)):
        groups = key_groups([arr])
        assert groups[0] == groups[1]


def test_equal_values_of_different_widths_share_a_group() -> None:
    assert key_groups([pa.array([5, -5], pa.int8())]).tolist() == key_groups([pa.array([5, -5])]).tolist()
    assert key_groups([pa.array([-0.0, float("nan")])]).tolist() == \
        key_groups([pa.array([0.0, float("nan")], pa.float32())]).tolist()
    assert key_groups([pa.array(["ab"], pa.large_string())]).tolist() == key_groups([pa.array(["ab"])]).tolist()
    dictionary = pa.array(["x", "y", "x"]).dictionary_encode()
    assert key_groups([dictionary]).tolist() == key_groups([pa.array(["x", "y", "x"])]).tolist()


def test_other_types() -> None:
    for arr in (pa.array([True, False, None]), pa.array([Decimal("1.5"), Decimal(-2), None], pa.decimal128(10, 2)),
                pa.array([b"\x00", b"\x00\x00", b""]), pa.array([1, 2, None], pa.date32())):
        groups = key_groups([arr], max_parallelism=1 << 15)
        assert len(set(groups.tolist())) == 3
    with pytest.raises(TypeError, match="cannot hash a key column"):
        key_groups([pa.array([[1], [2]])])


def test_strings_depend_on_order_and_length() -> None:
    h = hash_columns([pa.array(["ab", "ba", "a", "a\x00", "", "abc" * 50])]).tolist()
    assert len(set(h)) == len(h)


def test_several_columns_combine_in_order() -> None:
    a, b = pa.array([1, 2, None, 1]), pa.array(["x", "x", "x", None])
    h = hash_columns([a, b])
    assert len(set(h.tolist())) == 4
    assert hash_columns([a, b]).tolist() != hash_columns([b, a]).tolist()
    pairs = hash_columns([pa.array(np.repeat(np.arange(100), 100)), pa.array(np.tile(np.arange(100), 100))])
    assert len(np.unique(pairs)) == 10_000
    assert (key_groups([a, b], max_parallelism=7) < 7).all()


def test_no_columns_means_one_group() -> None:
    assert len(set(key_groups([], num_rows=5).tolist())) == 1
    with pytest.raises(ValueError):
        key_groups([pa.array([1])], max_parallelism=0)


@pytest.mark.parametrize("max_parallelism", [1, 2, 100, 128, 4096])
def test_group_of_a_hash_is_its_remainder(max_parallelism: int) -> None:
    """Powers of two take the low bits instead of dividing: the same groups either way."""
    hashes = np.array([0, 1, 127, 128, 2**63, 2**64 - 1, 0x9E3779B97F4A7C15], dtype=np.uint64)
    expected = [int(h) % max_parallelism for h in hashes.tolist()]
    assert group_of_hash(hashes, max_parallelism).tolist() == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2), st.integers(1, 3000)), min_size=1, max_size=12),
       st.sampled_from([pa.int64(), pa.int32(), pa.int8(), pa.timestamp("ms"), pa.date32()]))
def test_runs_of_equal_keys_hash_as_row_by_row(runs: list[tuple[int, int, int]], first_type: pa.DataType) -> None:
    """A window aggregate's result comes in long runs of one window: hashed once per run, the
    hashes must be exactly those of hashing every row."""
    a = np.repeat([r[0] for r in runs], [r[2] for r in runs])
    b = np.repeat([r[1] for r in runs], [r[2] for r in runs])
    first = pa.array(a.astype(np.int32)).view(first_type) if first_type == pa.date32() else pa.array(a).cast(first_type)
    columns = [first, pa.array(b)]
    assert hash_columns(columns).tolist() == _hash_rows(columns).tolist()
    assert hash_columns(columns[:1]).tolist() == _hash_rows(columns[:1]).tolist()


def test_long_runs_take_the_short_way() -> None:
    ends = pa.array(np.repeat(np.array([10_000, 12_000, 14_000], dtype=np.int64), 5000), pa.timestamp("ms"))
    assert _run_starts([ends, ends]).tolist() == [0, 5000, 10000]
    assert _run_starts([pa.array(np.arange(20_000))]) is None  # no runs
    assert _run_starts([pa.array([1] * 5000 + [None])]) is None  # NULLs: row by row


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=12)), min_size=1, max_size=8),
       st.integers(4096, 9000), st.integers(0, 50),
       st.sampled_from([pa.string(), pa.large_string(), pa.binary()]))
def test_repeated_strings_hash_as_each_value_alone(values: list[str | None], n: int, offset: int,
                                                  type_: pa.DataType) -> None:
    """A long column of few distinct strings is hashed one distinct value at a time: the hashes
    must be exactly those of the row-by-row way, NULLs and slices included."""
    rng = np.random.default_rng(n)
    rows = [values[i] for i in rng.integers(0, len(values), n + offset)]
    if type_ == pa.binary():
        rows = [None if v is None else v.encode() for v in rows]
    column = pa.array(rows, type_).slice(offset)
    assert _repeats(column)
    # One column's hash is its values' hash, mixed once more (``_hash_rows``).
    row_by_row = np.where(column.is_valid().to_numpy(zero_copy_only=False), _mix(_hash_binary(column)),
                          hash_columns([pa.nulls(1, type_)])[0])
    assert hash_columns([column]).tolist() == row_by_row.tolist()
    assert not _repeats(pa.array([str(i) for i in range(n)]))


def test_a_hash_extended_by_more_columns_is_the_hash_of_them_all() -> None:
    columns = [pa.array(["a", "b", None, "a"]), pa.array([1, 2, 3, None]), pa.array([0.5, None, -0.0, 2.0])]
    for n in (1, 2):
        assert extend_hashes(hash_columns(columns[:n]), columns[n:]).tolist() == hash_columns(columns).tolist()


def _unmix(h: int) -> int:
    """The inverse of ``keygroups._mix`` on one value: each step undone in reverse order."""
    mask = (1 << 64) - 1

    def unshift(x: int, s: int) -> int:  # inverse of x ^= x >> s
        y = x
        for _ in range(64 // s + 1):
            y = x ^ (y >> s)
        return y & mask

    h = unshift(h, 31)
    h = (h * pow(0x94D049BB133111EB, -1, 1 << 64)) & mask
    h = unshift(h, 27)
    h = (h * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & mask
    h = unshift(h, 30)
    return (h - 0x9E3779B97F4A7C15) & mask


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50))
def test_an_integer_keys_hash_gives_back_its_value(values):
    """A one-column integer key's hash is a bijection of its value: the join skips comparing the
    keys of rows whose hashes are equal (``join._hash_is_key``) on the strength of this."""
    hashes = hash_columns([pa.array(values, pa.int64())])
    back = [_unmix(_unmix(int(h))) for h in hashes]
    assert [v & ((1 << 64) - 1) for v in values] == back
