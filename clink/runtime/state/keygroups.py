"""Key groups: the unit in which keyed state is split and merged on rescale.

A row's key group is a hash of its key tuple modulo ``max_parallelism``. The hash is our own,
computed from the Arrow buffers with numpy, so it is the same in every process and on every run
(Python's ``hash`` is salted per process and would scatter state differently after a restart).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc

__all__ = ["DEFAULT_MAX_PARALLELISM", "extend_hashes", "group_of_hash", "hash_columns", "key_groups"]

#: How many key groups keyed state is divided into unless the job says otherwise.
DEFAULT_MAX_PARALLELISM = 128

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_M1 = _U64(0xBF58476D1CE4E5B9)
_M2 = _U64(0x94D049BB133111EB)
_SEED = _U64(0x2545F4914F6CDD1D)
#: What a NULL hashes to, whatever the column's type.
_NULL_HASH = _U64(0x6A09E667F3BCC909)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit affects every output bit. Wraps modulo 2**64."""
    x = x + _GOLDEN  # a new array: the steps below work in place on it
    shifted = x >> _U64(30)
    x ^= shifted
    x *= _M1
    np.right_shift(x, _U64(27), out=shifted)
    x ^= shifted
    x *= _M2
    np.right_shift(x, _U64(31), out=shifted)
    x ^= shifted
    return x


def _fixed_width_values(arr: pa.Array, dtype: str) -> np.ndarray:
    # Read the data buffer directly: to_numpy() would turn integers with NULLs into floats.
    n = len(arr)
    buf = arr.buffers()[1]
    if buf is None or n == 0:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(buf, dtype=dtype, count=arr.offset + n)[arr.offset:]


def _hash_integers(arr: pa.Array) -> np.ndarray:
    width = arr.type.bit_width // 8
    signed = pa.types.is_signed_integer(arr.type) or not pa.types.is_integer(arr.type)
    values = _fixed_width_values(arr, f"<{'i' if signed else 'u'}{width}")
    # Widen first so 5 as INT and 5 as BIGINT land in the same key group.
    return _mix(values.astype(np.int64, copy=False).view(np.uint64))


def _hash_floats(arr: pa.Array) -> np.ndarray:
    values = _fixed_width_values(pc.cast(arr, pa.float64()) if arr.type != pa.float64() else arr, "<f8")
    values = values + 0.0  # -0.0 equals 0.0, so it must hash the same
    values = np.where(np.isnan(values), np.nan, values)  # one bit pattern for every NaN
    return _mix(values.view(np.uint64))


def _hash_words(arr: pa.Array, width: int) -> np.ndarray:
    """Fixed-size values (decimals, fixed-size binary) of ``width`` bytes, word by word."""
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=(arr.offset + n) * width)[arr.offset * width:]
    padded_width = -(-width // 8) * 8
    if padded_width != width:
        raw = np.concatenate([raw.reshape(n, width), np.zeros((n, padded_width - width), np.uint8)], axis=1)
    words = np.ascontiguousarray(raw).reshape(n, padded_width).view("<u8")
    h = np.full(n, _SEED, dtype=np.uint64)
    for i in range(words.shape[1]):
        h = _mix(h ^ words[:, i])
    return h


def _hash_binary(arr: pa.Array) -> np.ndarray:
    """Variable-length bytes: a sum of the bytes weighted by a pseudo-random value per position,
    mixed with the length. The per-row sums come from one cumulative sum over the data buffer."""
    n = len(arr)
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets_buf = arr.buffers()[1]
    if offsets_buf is None or n == 0:
        return np.zeros(n, dtype=np.uint64)
    offsets = np.frombuffer(offsets_buf, dtype="<i8" if large else "<i4", count=arr.offset + n + 1)[arr.offset:]
    offsets = offsets.astype(np.int64)
    lengths = np.diff(offsets)
    lo, hi = int(offsets[0]), int(offsets[-1])
    total = hi - lo
    if total == 0:
        # Every value is empty: the byte sums are all zero; hash as the general path would.
        return _mix(_U64(0) ^ _mix(lengths.view(np.uint64)))
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8, count=hi)[lo:]
    starts = offsets[:-1] - lo
    position = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    weights = _mix(np.arange(int(lengths.max()), dtype=np.uint64))
    terms = (data.astype(np.uint64) + _U64(1)) * weights[position]
    sums = np.zeros(total + 1, dtype=np.uint64)
    np.cumsum(terms, out=sums[1:])
    row_sums = sums[offsets[1:] - lo] - sums[starts]
    return _mix(row_sums ^ _mix(lengths.view(np.uint64)))


#: Rows from which a string column is checked for repeated values, and how many are sampled.
_REPEATS_FROM, _REPEATS_SAMPLE = 4096, 1024


def _repeats(arr: pa.Array) -> bool:
    """Whether a long column of strings seems to repeat its values (its leading rows hold at
    most half as many distinct values as rows): hashing its distinct values once then pays."""
    if len(arr) < _REPEATS_FROM:
        return False
    return pc.count_distinct(arr.slice(0, _REPEATS_SAMPLE)).as_py() <= _REPEATS_SAMPLE // 2


def _hash_repeated(arr: pa.Array) -> np.ndarray:
    """``_hash_binary`` of a column of repeated values: each distinct value hashed once (a
    channel or a country name over a whole batch). NULLs get their hash in ``_hash_array``."""
    encoded = pc.dictionary_encode(arr)
    indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    if not len(encoded.dictionary):
        return np.zeros(len(arr), dtype=np.uint64)
    return _hash_binary(encoded.dictionary)[indices]


def _hash_array(arr: pa.Array) -> np.ndarray:
    t = arr.type
    if pa.types.is_dictionary(t):
        return _hash_array(arr.dictionary_decode())
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return _hash_array(arr.cast(pa.string() if pa.types.is_string_view(t) else pa.binary()))
    if pa.types.is_null(t):
        return np.full(len(arr), _NULL_HASH, dtype=np.uint64)
    if pa.types.is_boolean(t):
        h = _mix(pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(np.uint64))
    elif pa.types.is_floating(t):
        h = _hash_floats(arr)
    elif (pa.types.is_integer(t) or pa.types.is_temporal(t)) and t.bit_width in (8, 16, 32, 64):
        h = _hash_integers(arr)
    elif pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t):
        h = _hash_words(arr, t.byte_width)
    elif pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        h = _hash_repeated(arr) if _repeats(arr) else _hash_binary(arr)
    else:
        raise TypeError(f"cannot hash a key column of type {t}: use a scalar type (number, string, "
                        "timestamp, boolean, decimal, binary) as a grouping key")
    if arr.null_count:
        h = np.where(pc.is_valid(arr).to_numpy(zero_copy_only=False), h, _NULL_HASH)
    return h


def hash_columns(columns: Sequence[pa.Array | pa.ChunkedArray], num_rows: int | None = None) -> np.ndarray:
    """A deterministic 64-bit hash (``uint64``) of each row's tuple of values in ``columns``.

    Equal tuples hash equally across processes and runs. Integers hash by value whatever their
    width; floats by value (``-0.0`` as ``0.0``, every NaN alike); NULL hashes to a fixed value,
    so NULL keys group together. With no columns every row hashes alike (``num_rows`` rows).
    """
    if not columns:
        return np.full(num_rows or 0, _SEED, dtype=np.uint64)
    arrays = [(col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)) if isinstance(col, pa.ChunkedArray)
              else col for col in columns]
    starts = _run_starts(arrays)
    if starts is not None:
        # Few runs of equal keys (a window aggregate's result, keyed by its window): hash each
        # run's first row once. The hashes are the same as row by row.
        firsts = pa.array(starts)
        lengths = np.diff(np.append(starts, len(arrays[0])))
        return np.repeat(_hash_rows([pc.take(a, firsts) for a in arrays]), lengths)
    return _hash_rows(arrays)


def extend_hashes(hashes: np.ndarray, columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """Given ``hashes``, the ``hash_columns`` of some leading columns, the ``hash_columns`` of
    those columns followed by ``columns`` (a tuple's hash is built column by column, so a
    prefix hashed once, by its distinct values, serves every row that holds it)."""
    arrays = [(col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)) if isinstance(col, pa.ChunkedArray)
              else col for col in columns]
    return _hash_rows(arrays, hashes)


#: Rows below which looking for runs does not pay.
_RUNS_FROM = 4096
#: The leading rows looked at before the whole column: more changes than this there, and the
#: column is taken to have no long runs.
_RUNS_SAMPLE, _RUNS_SAMPLE_CHANGES = 64, 4


def _run_starts(arrays: list[pa.Array]) -> np.ndarray | None:
    """Where each run of rows with equal key tuples starts, if the keys are integers or times
    without NULLs and form at most one run per 16 rows; else None (hash row by row)."""
    n = len(arrays[0])
    if n < _RUNS_FROM:
        return None
    values = []
    for arr in arrays:
        t = arr.type
        if arr.null_count or not (pa.types.is_integer(t) or pa.types.is_temporal(t)) or pa.types.is_interval(t):
            return None
        if t.bit_width not in (8, 16, 32, 64):
            return None
        v = _fixed_width_values(arr, f"<i{t.bit_width // 8}")
        head = v[:_RUNS_SAMPLE]
        if np.count_nonzero(head[1:] != head[:-1]) > _RUNS_SAMPLE_CHANGES:
            return None
        values.append(v)
    changed = values[0][1:] != values[0][:-1]
    for v in values[1:]:
        changed |= v[1:] != v[:-1]
    if np.count_nonzero(changed) >= n // 16:
        return None
    return np.concatenate([[0], np.flatnonzero(changed) + 1])


def _hash_rows(arrays: list[pa.Array], h: np.ndarray | None = None) -> np.ndarray:
    """The hash of each row's tuple of ``arrays``; continuing from ``h``, that of the leading
    columns, if given."""
    for col in arrays:
        c = _hash_array(col)
        # boost::hash_combine, widened to 64 bits: the order of the columns matters.
        h = _mix(c) if h is None else _mix(h ^ (c + _GOLDEN + (h << _U64(6)) + (h >> _U64(2))))
    assert h is not None
    return h


def group_of_hash(hashes: np.ndarray, max_parallelism: int) -> np.ndarray:
    """The key group (``int32``) of each key hash from ``hash_columns``: the one rule that the
    exchanges routing rows and the operators filing their state share."""
    if max_parallelism & (max_parallelism - 1) == 0:
        # A power of two (the default 128): the low bits are the remainder, and far cheaper.
        return (hashes & _U64(max_parallelism - 1)).astype(np.int32)
    return (hashes % _U64(max_parallelism)).astype(np.int32)


def key_groups(columns: Sequence[pa.Array | pa.ChunkedArray], max_parallelism: int = DEFAULT_MAX_PARALLELISM,
               *, num_rows: int | None = None) -> np.ndarray:
    """The key group (``0 <= g < max_parallelism``, as ``int32``) of each row's key tuple.

    >>> key_groups([pa.array([1, 2, 1])]).tolist()[0] == key_groups([pa.array([1])]).tolist()[0]
    True
    """
    if max_parallelism <= 0:
        raise ValueError(f"max_parallelism must be positive, got {max_parallelism}")
    return group_of_hash(hash_columns(columns, num_rows), max_parallelism)
