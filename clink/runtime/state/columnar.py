"""Columnar value state: a hash index over the key columns, values in numpy and Arrow columns.

This is how the ``memory`` backend holds value state (``memory._MemoryValueState``): no Python
object per key, and a batch read or write costs what the batch touches, not the whole state.

Layout. Every key the state has seen since its last compaction owns a **slot**, a row number
into a set of parallel arrays that grow by doubling:

- ``hashes`` (uint32: the low half of ``keygroups.hash_columns`` of the key, which places it in
  the index and mostly tells keys apart before they are compared) and ``groups`` (int32, its key
  group, derived from the hash as exchanges derive it; a state that groups by a prefix of the
  key, ``group_fields``, keeps no ``groups`` of its own: its prefix store's say it, by prefix).
  A state grouped by a prefix whose other key fields are all fixed-width keeps no ``hashes``
  either (``hashless``): its keys are a prefix's slot number and a few words, compared as fast
  as a hash, and an index rebuild hashes them again from the stored keys (a COUNT(DISTINCT)'s
  (group, value) pairs, 4 bytes fewer each);
- ``alive`` (bool): whether the key holds a value. Deleting a key only clears it; the slot keeps
  its key, so a later write of the same key revives the same slot (a tombstone that is found
  again, not a hole in the probe chains);
- the key, one store per key field: fixed-width types (integers, floats, booleans, dates, times,
  timestamps, durations) as numpy values plus a validity mask, floats canonical (``-0.0`` stored
  as ``0.0``, every NaN as one NaN) so that bitwise equality is the contract's key equality;
  decimals and fixed-size binary as a matrix of bytes; strings and binary as offsets and lengths
  into one growing byte buffer;
- the value, one store per field of a struct value type (or one for any other type): fixed-width
  fields in numpy with a validity mask, scattered and gathered by slot (int64 fields as int32
  while every value written fits, ``_NarrowColumn``); other types
  (strings, lists, maps, nested rows) as Arrow arrays appended per write (``_ArrowColumn``), each
  slot pointing at its latest row.

The **index** is an open-addressing table (int32 slot numbers, -1 for empty, a power of two in
size, at most half full) probed linearly. A batch is looked up in vectorized rounds: every row
still pending reads its table position; an empty position ends the search (or, when inserting,
is claimed: all rows write a marker there, and the row whose marker stays wins and gets a new
slot, the others look again); an occupied one whose stored hash equals the row's has its key
compared **exactly**, field by field, with the stored key; otherwise the row moves on to the next
position. Two keys whose hashes collide therefore sit in two slots of one probe chain and are
never merged. Rounds stop when no row is pending: their number is the longest probe of the
batch, a handful at this load.

When deleted slots outnumber the live ones (and are more than ``_MIN_COMPACT``), the state is
compacted in bulk: the live slots are copied to new arrays and the index rebuilt, which costs
O(live keys), paid for by at least as many deletes. The Arrow value columns are rewritten the
same way once their dead rows outnumber the live ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.state import keygroups
from clink.runtime.state.backend import Counted, PrefixedKeys, distinct_rows, sum_by_id
from clink.runtime.state.keygroups import group_of_hash

__all__ = ["ColumnarValues", "num_rows"]

#: Deleted slots below this many never trigger a compaction.
_MIN_COMPACT = 4096
#: The index never has fewer positions than this.
_MIN_INDEX = 1024
_EMPTY = -1
#: Slots hashed again at a time by an index rebuild of a ``hashless`` state.
_REHASH_ROWS = 1 << 16
#: The narrower word an integer key field of a width starts in (``_FixedKey``).
_NARROW_KEY = {8: "<u4", 4: "<u2"}
#: The widths of a narrowed int64 value field, narrowest first.
_NARROW = (np.int8, np.int16, np.int32, np.int64)


def _grow(array: np.ndarray, needed: int) -> np.ndarray:
    """``array`` with room for at least ``needed`` rows (capacity doubles), contents kept."""
    if needed <= len(array):
        return array
    capacity = max(needed, 2 * len(array), 16)
    out = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    out[: len(array)] = array
    return out


class _Mask:
    """Validity per slot, held as an array only from the first invalid value written: until then
    every slot is valid, and the mask costs no memory (keys and values are mostly never NULL)."""

    __slots__ = ("bits",)

    def __init__(self) -> None:
        self.bits: np.ndarray | None = None

    def get(self, slots: np.ndarray) -> np.ndarray:
        return np.ones(len(slots), dtype=bool) if self.bits is None else self.bits[slots]

    def set(self, slots: np.ndarray | slice, valid: np.ndarray, size: int) -> None:
        """Set the validity of ``slots`` of a store whose arrays hold ``size`` slots."""
        if self.bits is None:
            if valid.all():
                return
            self.bits = np.ones(size, dtype=bool)
        self.bits[slots] = valid

    def set_valid(self, slots: np.ndarray) -> None:
        if self.bits is not None:
            self.bits[slots] = True

    def reserve(self, capacity: int) -> None:
        if self.bits is not None:
            self.bits = _grow(self.bits, capacity)

    def keep(self, slots: np.ndarray) -> None:
        if self.bits is not None:
            self.bits = self.bits[slots]

    def clear(self) -> None:
        self.bits = None


def _batch_table(n: int) -> tuple[np.ndarray, int]:
    """A scratch table of at least twice ``n`` positions (a power of two) and its mask."""
    size = 1 << max(10, math.ceil(math.log2(2 * max(n, 1))))
    return np.empty(size, dtype=np.int64), size - 1


def _representatives(slots: np.ndarray) -> np.ndarray:
    """For each of ``slots``, the position of one of the rows with the same slot (the same for
    all of them). Rows are placed in a small table by their slot's low bits (slots handed out
    together are consecutive, and do not collide): each position is won by one row, whose slot's
    rows are done; the rows another slot beat try again placed by a multiplicative hash of their
    slot, and the few left after that are sorted."""
    n = len(slots)
    chosen = np.arange(n, dtype=np.int64)
    table, mask = _batch_table(n)
    bits = np.uint64(mask.bit_length())
    pending = chosen
    for spread in (None, np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)):
        of = slots[pending]
        if spread is None:
            at = of & mask
        else:
            at = ((of.astype(np.uint64) * spread) >> (np.uint64(64) - bits)).astype(np.int64)
        table[at] = pending
        winner = table[at]
        same = slots[winner] == of
        chosen[pending[same]] = winner[same]
        pending = pending[~same]
        if not len(pending):
            return chosen
    _, first, inverse = np.unique(slots[pending], return_index=True, return_inverse=True)
    chosen[pending] = pending[first[inverse.reshape(-1)]]
    return chosen


def _valid(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _validity_buffer(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    nulls = len(valid) - int(np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _fixed_width(t: pa.DataType) -> int | None:
    """Bytes per value of a type held in numpy, or None for a type held as Arrow arrays."""
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t):
        return t.byte_width
    if (pa.types.is_integer(t) or pa.types.is_floating(t)
            or (pa.types.is_temporal(t) and not pa.types.is_interval(t))):
        return t.bit_width // 8
    return None


def _numpy_layout(t: pa.DataType, width: int) -> tuple[str, tuple[int, ...]]:
    """The dtype and the per-row shape that hold one value of ``t``: a word of its width, or a
    row of bytes for decimals and fixed-size binary."""
    if pa.types.is_boolean(t):
        return "u1", ()
    if width in (1, 2, 4, 8) and not (pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t)):
        return f"<u{width}", ()
    return "u1", (width,)


def _fixed_values(arr: pa.Array, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """The values of a fixed-width array as numpy (raw bits; zero where NULL)."""
    n = len(arr)
    if pa.types.is_boolean(arr.type):
        return pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(np.uint8)
    buf = arr.buffers()[1]
    if buf is None or n == 0:
        return np.zeros((n, *shape), dtype=dtype)
    if shape:
        width = shape[0]
        values = np.frombuffer(buf, dtype=np.uint8, count=(arr.offset + n) * width)[arr.offset * width:]
        values = values.reshape(n, width)
    else:
        values = np.frombuffer(buf, dtype=dtype, count=arr.offset + n)[arr.offset:]
    if arr.null_count:
        values = values.copy()
        values[~_valid(arr)] = 0
    return values


def _fixed_array(t: pa.DataType, values: np.ndarray, valid: np.ndarray) -> pa.Array:
    """An Arrow array of type ``t`` from raw values and a validity mask."""
    n = len(valid)
    validity, nulls = _validity_buffer(valid)
    if pa.types.is_boolean(t):
        data = pa.py_buffer(np.packbits(values.astype(bool), bitorder="little"))
    else:
        data = pa.py_buffer(np.ascontiguousarray(values))
    return pa.Array.from_buffers(t, n, [validity, data], null_count=nulls)


def _canonical_floats(values: np.ndarray, t: pa.DataType) -> np.ndarray:
    """Float bits with ``-0.0`` as ``0.0`` and every NaN as one NaN (keys only)."""
    as_float = values.view({2: np.float16, 4: np.float32, 8: np.float64}[t.bit_width // 8])
    as_float = as_float + as_float.dtype.type(0.0)
    nan = np.isnan(as_float)
    if nan.any():
        as_float[nan] = np.nan
    return as_float.view(values.dtype)


#: Bytes compared at once by ``_BytesKey.equal``.
_WORD = 8


def _words(data: np.ndarray) -> np.ndarray:
    """The 8-byte little-endian word starting at each byte of ``data`` (a view: the words
    overlap), for all but the last 7 bytes, which are padding."""
    return np.ndarray(shape=(len(data) - _WORD + 1,), dtype="<u8", buffer=data, strides=(1,))


def _ragged_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """For rows of ``lengths`` bytes starting at ``starts``, the position of every byte in turn."""
    total = int(lengths.sum())
    firsts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) + np.repeat(starts - firsts, lengths)


def _same_bytes(a: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                b: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Pairwise, whether two lists of byte strings, each (starts, lengths, validity, a buffer
    padded by a word), hold the same values."""
    at_a, la, valid_a, data_a = a
    at_b, lb, valid_b, data_b = b
    same = (valid_a == valid_b) & (la == lb)
    check = np.flatnonzero(same & (la > 0))
    if len(check):
        # Eight bytes at a time: the pairs still equal compare their next word, the last
        # word of a value masked to its length.
        at_a, at_b, length = at_a[check], at_b[check], la[check]
        words_a, words_b = _words(data_a), _words(data_b)
        pending = np.arange(len(check))
        offset = 0
        while len(pending):
            left = length[pending] - offset
            x = words_a[at_a[pending] + offset] ^ words_b[at_b[pending] + offset]
            short = left < _WORD
            if short.any():
                x[short] &= (np.uint64(1) << (8 * left[short]).astype(np.uint64)) - np.uint64(1)
            differ = x != 0
            same[check[pending[differ]]] = False
            pending = pending[~differ & (left > _WORD)]
            offset += _WORD
    return same


# -- key stores -----------------------------------------------------------------------------------


class _FixedKey:
    """One key field of a fixed-width type: values and validity per slot, compared bitwise. An
    8-byte integer key is held in 4 bytes while every key stored fits in them (ids mostly do),
    a 4-byte one in 2 bytes (a prefix's slot number, while there are at most 65,536 prefixes),
    and widened in place to its own width by the first that does not; a narrow word compares with
    the wider word of a probe as the same number (both unsigned), so equality is unchanged."""

    def __init__(self, t: pa.DataType, width: int) -> None:
        self.type = t
        self.dtype, self.shape = _numpy_layout(t, width)
        self.floating = pa.types.is_floating(t)
        narrow = _NARROW_KEY.get(width) if pa.types.is_integer(t) else None
        self.values = np.zeros((0, *self.shape), dtype=narrow or self.dtype)
        self.valid = _Mask()

    def probe(self, arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
        """The batch's values, and their validity (None: no NULL, nothing to compare)."""
        values = _fixed_values(arr, self.dtype, self.shape)
        if self.floating:
            values = _canonical_floats(values, self.type)
        return values, (None if arr.null_count == 0 else _valid(arr))

    def equal(self, probe: tuple[np.ndarray, np.ndarray | None], rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        values, valid = probe
        same = values[rows] == self.values[slots]
        if self.shape:
            same = same.all(axis=1)
        if valid is None and self.valid.bits is None:
            return same  # no NULL on either side
        return same & ((np.ones(len(rows), bool) if valid is None else valid[rows]) == self.valid.get(slots))

    def equal_rows(self, probe: tuple[np.ndarray, np.ndarray | None], a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether rows ``a`` and rows ``b`` of one probed batch hold the same key value."""
        values, valid = probe
        same = values[a] == values[b]
        if self.shape:
            same = same.all(axis=1)
        return same if valid is None else same & (valid[a] == valid[b])

    def append(self, probe: tuple[np.ndarray, np.ndarray | None], rows: np.ndarray, start: int) -> None:
        end = start + len(rows)
        values = probe[0][rows]
        if (self.values.dtype != self.dtype and len(values)
                and values.max() > np.iinfo(self.values.dtype).max):
            self.values = self.values.astype(self.dtype)
        self.values = _grow(self.values, end)
        self.valid.reserve(len(self.values))
        self.values[start:end] = values
        if probe[1] is None:
            self.valid.set_valid(slice(start, end))
        else:
            self.valid.set(slice(start, end), probe[1][rows], len(self.values))

    def array(self, slots: np.ndarray) -> pa.Array:
        return _fixed_array(self.type, self.values[slots].astype(self.dtype, copy=False), self.valid.get(slots))

    def keep(self, slots: np.ndarray) -> None:
        self.values = self.values[slots]
        self.valid.keep(slots)


class _BytesKey:
    """One key field of strings or binary: each slot's bytes in one growing buffer."""

    def __init__(self, t: pa.DataType) -> None:
        self.type = t
        self.large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        self.starts = np.zeros(0, dtype=np.int64)
        self.lengths = np.zeros(0, dtype=np.int64)
        self.valid = _Mask()
        self.data = np.zeros(_WORD, dtype=np.uint8)
        self.used = 0  # bytes of ``data`` in use; a word of zeros at least follows them

    def probe(self, arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        n = len(arr)
        valid = _valid(arr)
        if n == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, valid, np.zeros(_WORD, dtype=np.uint8)
        offsets = np.frombuffer(arr.buffers()[1], dtype="<i8" if self.large else "<i4",
                                count=arr.offset + n + 1)[arr.offset:].astype(np.int64)
        lengths = np.diff(offsets)
        if arr.null_count:
            lengths = np.where(valid, lengths, 0)
        data_buf = arr.buffers()[2]
        size = int(offsets[-1])
        # Padded by a word, so that every value can be read as whole 8-byte words (``_words``).
        data = np.zeros(size + _WORD, dtype=np.uint8)
        if data_buf is not None and size:
            data[:size] = np.frombuffer(data_buf, dtype=np.uint8, count=size)
        return offsets[:-1], lengths, valid, data

    def equal(self, probe: tuple, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        starts, lengths, valid, data = probe
        return _same_bytes((starts[rows], lengths[rows], valid[rows], data),
                           (self.starts[slots], self.lengths[slots], self.valid.get(slots), self.data))

    def equal_rows(self, probe: tuple, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether rows ``a`` and rows ``b`` of one probed batch hold the same key value."""
        starts, lengths, valid, data = probe
        return _same_bytes((starts[a], lengths[a], valid[a], data), (starts[b], lengths[b], valid[b], data))

    def append(self, probe: tuple, rows: np.ndarray, start: int) -> None:
        starts, lengths, valid, data = probe
        end = start + len(rows)
        self.starts = _grow(self.starts, end)
        self.lengths = _grow(self.lengths, end)
        self.valid.reserve(len(self.lengths))
        counts = lengths[rows]
        size = int(counts.sum())
        self.data = _grow(self.data, self.used + size + _WORD)
        self.data[self.used:self.used + size] = data[_ragged_positions(starts[rows], counts)]
        self.starts[start:end] = self.used + np.cumsum(counts) - counts
        self.lengths[start:end] = counts
        self.valid.set(slice(start, end), valid[rows], len(self.lengths))
        self.used += size

    def array(self, slots: np.ndarray) -> pa.Array:
        counts = self.lengths[slots]
        offsets = np.zeros(len(slots) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        if not self.large and offsets[-1] >= 2**31:
            raise OverflowError(f"{offsets[-1]} bytes of {self.type} keys do not fit one array")
        data = self.data[_ragged_positions(self.starts[slots], counts)]
        validity, nulls = _validity_buffer(self.valid.get(slots))
        offsets_buf = pa.py_buffer(offsets if self.large else offsets.astype(np.int32))
        return pa.Array.from_buffers(self.type, len(slots), [validity, offsets_buf, pa.py_buffer(data)],
                                     null_count=nulls)

    def keep(self, slots: np.ndarray) -> None:
        counts = self.lengths[slots]
        kept = self.data[_ragged_positions(self.starts[slots], counts)]
        self.used = len(kept)
        self.data = np.zeros(self.used + _WORD, dtype=np.uint8)
        self.data[: self.used] = kept
        self.starts = np.cumsum(counts) - counts
        self.lengths = counts
        self.valid.keep(slots)


def _key_store(t: pa.DataType) -> _FixedKey | _BytesKey:
    width = _fixed_width(t)
    if width is not None:
        return _FixedKey(t, width)
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)):
        return _BytesKey(t)
    raise TypeError(f"value state cannot index keys of type {t}")


# -- value stores ---------------------------------------------------------------------------------


class _FixedColumn:
    """One value field of a fixed-width type, in numpy: scattered and gathered by slot."""

    def __init__(self, t: pa.DataType, width: int) -> None:
        self.type = t
        self.dtype, self.shape = _numpy_layout(t, width)
        self.values = np.zeros((0, *self.shape), dtype=self.dtype)
        self.valid = _Mask()

    def reserve(self, capacity: int) -> None:
        self.values = _grow(self.values, capacity)
        self.valid.reserve(len(self.values))

    def put(self, slots: np.ndarray, arr: pa.Array) -> None:
        self.values[slots] = _fixed_values(arr, self.dtype, self.shape)
        self.valid.set(slots, _valid(arr), len(self.values))

    def get(self, slots: np.ndarray, found: np.ndarray | None, *, mask: bool = True) -> pa.Array:
        valid = self.valid.get(slots)
        if mask and found is not None:
            valid = valid & found
        return _fixed_array(self.type, self.values[slots], valid)

    def keep(self, slots: np.ndarray) -> None:
        self.values = self.values[slots]
        self.valid.keep(slots)

    def garbage_collect(self, live: np.ndarray) -> None:
        pass

    def clear(self) -> None:
        self.values = self.values[:0]
        self.valid.clear()


class _NarrowColumn(_FixedColumn):
    """An int64 value field held in the narrowest of int8, int16, int32 and int64 that every
    value written to it so far fits (counts mostly fit one or two bytes, sums four), widened in
    place by the first value that does not: an eighth to half the memory of int64."""

    def __init__(self, t: pa.DataType) -> None:
        super().__init__(t, 8)
        self.values = np.zeros(0, dtype=np.int8)

    def put(self, slots: np.ndarray, arr: pa.Array) -> None:
        self.write(slots, _fixed_values(arr, "<i8", ()))
        self.valid.set(slots, _valid(arr), len(self.values))

    def write(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Set the values (int64) of ``slots``, leaving their validity as it is."""
        if self.values.dtype != np.int64 and len(values):
            low, high = values.min(), values.max()
            limits = np.iinfo(self.values.dtype)
            if low < limits.min or high > limits.max:
                wide = next(t for t in _NARROW if np.iinfo(t).min <= low and high <= np.iinfo(t).max)
                self.values = self.values.astype(wide)
        self.values[slots] = values

    def read(self, slots: np.ndarray) -> np.ndarray:
        """The values (int64) of ``slots``, whatever their validity."""
        return self.values[slots].astype(np.int64, copy=False)

    def get(self, slots: np.ndarray, found: np.ndarray | None, *, mask: bool = True) -> pa.Array:
        valid = self.valid.get(slots)
        if mask and found is not None:
            valid = valid & found
        return _fixed_array(self.type, self.read(slots), valid)


class _ArrowColumn:
    """One value field of any other type (strings, lists, maps, rows) as Arrow arrays.

    Each write appends its rows as a new chunk; ``rows`` gives each slot its row in the
    concatenation of the chunks (which never moves when neighbouring chunks are merged). Chunks
    are merged while the older is at most twice the newer, so there are O(log rows) of them; rows
    no slot points at any more are dropped by rewriting the live ones once they are the majority.
    """

    def __init__(self, t: pa.DataType) -> None:
        self.type = t
        self.rows = np.zeros(0, dtype=np.int64)
        self.chunks: list[pa.Array] = []
        self.total = 0  # rows in all chunks

    def reserve(self, capacity: int) -> None:
        self.rows = _grow(self.rows, capacity)

    def put(self, slots: np.ndarray, arr: pa.Array) -> None:
        if len(arr) == 0:
            return
        self.rows[slots] = self.total + np.arange(len(arr), dtype=np.int64)
        self.chunks.append(arr)
        self.total += len(arr)
        while len(self.chunks) >= 2 and len(self.chunks[-2]) <= 2 * len(self.chunks[-1]):
            newer = self.chunks.pop()
            self.chunks[-1] = pa.concat_arrays([self.chunks[-1], newer])

    def get(self, slots: np.ndarray, found: np.ndarray | None, *, mask: bool = True) -> pa.Array:
        """The values of ``slots``; where ``found`` is False the slot may hold none (read as NULL
        if ``mask``, else as anything)."""
        if not self.chunks:
            return pa.nulls(len(slots), self.type)
        rows = self.rows[slots]
        if found is not None:
            rows = np.where(found, rows, 0)
        bounds = np.cumsum([0] + [len(c) for c in self.chunks])
        first = int(np.searchsorted(bounds, rows.min(), side="right")) - 1 if len(rows) else 0
        if first == len(self.chunks) - 1 or not len(rows) or rows.max() < bounds[first + 1]:
            # Every row in one chunk: the usual case for a small batch of recently written keys.
            out = self.chunks[first].take(pa.array(rows - bounds[first]))
        else:
            # Few chunks (merged geometrically): a small integer, which a stable sort orders in
            # linear time (radix sort).
            chunk = (np.searchsorted(bounds, rows, side="right") - 1).astype(np.int16)
            order = np.argsort(chunk, kind="stable")
            ends = np.cumsum(np.bincount(chunk, minlength=len(self.chunks)))
            parts = []
            for c, (lo, hi) in enumerate(zip([0, *ends[:-1].tolist()], ends.tolist(), strict=True)):
                if hi > lo:
                    parts.append(self.chunks[c].take(pa.array(rows[order[lo:hi]] - bounds[c])))
            inverse = np.empty_like(order)
            inverse[order] = np.arange(len(order))
            out = pa.concat_arrays(parts).take(pa.array(inverse))
        if mask and found is not None and not found.all():
            out = pc.if_else(pa.array(found), out, pa.scalar(None, self.type))
        return out

    def keep(self, slots: np.ndarray) -> None:
        if not self.chunks:
            self.rows = self.rows[slots]
            return
        column = self.get(slots, None)
        self.chunks = [column] if len(column) else []
        self.total = len(column)
        self.rows = np.arange(len(slots), dtype=np.int64)

    def garbage_collect(self, live: np.ndarray) -> None:
        """Drop the rows no slot points at if they are most of the rows (``live``: the slots that
        hold a value)."""
        if self.total > 2 * len(live) + _MIN_COMPACT:
            column = self.get(live, None)
            self.chunks = [column] if len(column) else []
            self.total = len(column)
            self.rows[live] = np.arange(len(live), dtype=np.int64)

    def clear(self) -> None:
        self.rows = self.rows[:0]
        self.chunks = []
        self.total = 0


def num_rows(keys: list[pa.Array] | PrefixedKeys) -> int:
    """The rows of a batch of keys."""
    return len(keys) if isinstance(keys, PrefixedKeys) else len(keys[0])


def _same_keys(a: list[pa.Array] | PrefixedKeys, b: list[pa.Array] | PrefixedKeys) -> bool:
    """Whether ``a`` and ``b`` are the same key arrays (the same objects)."""
    if isinstance(a, PrefixedKeys) or isinstance(b, PrefixedKeys):
        return a is b
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _value_store(t: pa.DataType) -> _FixedColumn | _ArrowColumn:
    if t == pa.int64():
        return _NarrowColumn(t)
    width = _fixed_width(t)
    return _ArrowColumn(t) if width is None else _FixedColumn(t, width)


# -- the state ------------------------------------------------------------------------------------


class ColumnarValues:
    """Values of ``value_type`` per key of ``key_types``, indexed by a hash table over the keys
    (see the module docstring). Keys arrive as arrays of exactly ``key_types``; values as one
    array of exactly ``value_type``."""

    def __init__(self, key_types: Sequence[pa.DataType], value_type: pa.DataType,
                 max_parallelism: int, *, group_fields: int | None = None) -> None:
        self.key_types = list(key_types)
        #: The key fields whose hash gives the key group (None: all of them, the key's hash).
        self.group_fields = None if group_fields == len(self.key_types) else group_fields
        self.value_type = value_type
        self.max_parallelism = max_parallelism
        self.struct = pa.types.is_struct(value_type)
        self.fields = list(value_type) if self.struct else []
        self.clear()

    def clear(self) -> None:
        self.used = 0  # slots handed out
        self.live = 0  # slots alive
        self.hashes = np.zeros(0, dtype=np.uint32)
        self.groups = np.zeros(0, dtype=np.int32)
        self.alive = np.zeros(0, dtype=bool)
        if self.group_fields is None:
            #: The distinct values of the grouping fields (see ``_prefix_ids``), when not all.
            self.prefix: ColumnarValues | None = None
            self.keys = [_key_store(t) for t in self.key_types]
        else:
            n = self.group_fields
            self.prefix = ColumnarValues(self.key_types[:n], pa.bool_(), self.max_parallelism)
            # A key's prefix as its slot in the prefix store (the index's slots are int32).
            self.keys = [_FixedKey(pa.int32(), 4), *(_key_store(t) for t in self.key_types[n:])]
        #: No stored hashes (see the module docstring): every key field fixed-width, behind a prefix.
        self.hashless = self.prefix is not None and all(isinstance(k, _FixedKey) for k in self.keys)
        types = [f.type for f in self.fields] if self.struct else [self.value_type]
        self.columns = [_value_store(t) for t in types]
        self.index = np.full(_MIN_INDEX, _EMPTY, dtype=np.int32)
        #: The key arrays of the last ``get``, their hashes, probes and slots (see ``put``).
        self._last_read: tuple[list[pa.Array] | PrefixedKeys, np.ndarray, list[Any], np.ndarray] | None = None

    def __len__(self) -> int:
        return self.live

    def share_prefix(self, other: ColumnarValues) -> bool:
        """Use ``other``'s store of grouping fields, if both states group by fields of the same
        types and this one holds nothing yet; whether it does now. States sharing a store look a
        batch's ``PrefixedKeys`` up in it once (the COUNT(DISTINCT) states of one GROUP BY). A
        store only gains entries while shared; a state that compacts or clears takes a store
        of its own, and the others keep the old one."""
        if (self.prefix is None or other.prefix is None or self.used or self.prefix.used
                or self.prefix.key_types != other.prefix.key_types
                or self.max_parallelism != other.max_parallelism):
            return self.prefix is not None and self.prefix is other.prefix
        self.prefix = other.prefix
        return True

    # -- batch access ----------------------------------------------------------------------------

    def get(self, keys: list[pa.Array] | PrefixedKeys) -> pa.Array:
        """Each row's value, NULL where its key holds none."""
        n = num_rows(keys)
        if n == 0 or self.live == 0:
            return pa.nulls(n, self.value_type)
        hashes, probes = self._probe(keys)
        slots = self._find(hashes, probes, np.arange(n, dtype=np.int64), insert=False)
        self._last_read = (keys, hashes, probes, slots)
        found = slots >= 0
        found[found] = self.alive[slots[found]]
        return self._values(np.where(found, slots, 0), None if found.all() else found)

    def put(self, keys: list[pa.Array] | PrefixedKeys, values: pa.Array) -> None:
        """Set each row's key to its value, the last row of a key winning; NULL deletes."""
        n = len(values)
        if n == 0:
            return
        # An operator reads a batch's keys and then writes the same key arrays back: the slots
        # found by that read still hold (only a write adds or moves slots), so the write looks
        # up only the keys the read did not find.
        last, self._last_read = self._last_read, None
        known = None
        if last is not None and _same_keys(last[0], keys):
            _, hashes, probes, known = last
        else:
            hashes, probes = self._probe(keys)
        has_value = _valid(values)
        slots = np.full(n, _EMPTY, dtype=np.int64)
        writes = np.flatnonzero(has_value)
        inserted = False
        if len(writes):
            if known is None:
                slots[writes] = self._find(hashes, probes, writes, insert=True)
            else:
                slots[writes] = known[writes]
                absent = writes[known[writes] < 0]
                if len(absent):
                    slots[absent] = self._find(hashes, probes, absent, insert=True)
                    inserted = True
        deletes = np.flatnonzero(~has_value)
        if known is not None and len(deletes):
            slots[deletes] = known[deletes]
            # A key the read did not find may have been added by this very batch.
            deletes = deletes[known[deletes] < 0] if inserted else deletes[:0]
        if len(deletes) and self.used:
            slots[deletes] = self._find(hashes, probes, deletes, insert=False)
        rows = np.flatnonzero(slots >= 0)
        rows = rows[self._last_of_each(slots[rows])]
        targets = slots[rows]
        keep = has_value[rows]
        was_alive = int(np.count_nonzero(self.alive[targets]))
        self.alive[targets] = keep
        self.live += int(np.count_nonzero(keep)) - was_alive
        written, at = rows[keep], targets[keep]
        if len(written):
            chosen = values if len(written) == n else values.take(pa.array(written))
            if self.struct:
                # flatten() folds the struct's own validity into its fields; these rows are valid.
                parts = chosen.flatten()
            else:
                parts = [chosen]
            for column, part in zip(self.columns, parts, strict=True):
                column.put(at, part)
        self._tidy()

    def add_counts(self, keys: list[pa.Array] | PrefixedKeys, deltas: np.ndarray) -> Counted:
        """For a value of int64 fields only: add each row's ``deltas`` (one int64 per field) to
        its key's fields (0 where the key holds no value, or a field is NULL), and delete the keys
        whose fields are then all 0. See ``ValueState.add_counts``: here the keys are found (or
        given slots) in one pass, and the fields are read and written in place."""
        n, width = deltas.shape
        self._last_read = None
        if n == 0:
            empty = np.zeros((0, width), dtype=np.int64)
            return Counted(np.zeros(0, dtype=np.int64), empty, empty)
        hashes, probes = self._probe(keys)
        same = self._same_key_rows(hashes, probes)
        own = np.flatnonzero(same == np.arange(n))
        slots = np.empty(n, dtype=np.int64)
        slots[own] = self._find(hashes, probes, own, insert=True)
        slots = slots[same]
        # One row per slot: the row its slot's rows point at represents it.
        chosen = _representatives(slots)
        first = np.flatnonzero(chosen == np.arange(n))
        local = np.empty(n, dtype=np.int64)
        local[first] = np.arange(len(first), dtype=np.int64)
        sums = sum_by_id(local[chosen], deltas, len(first))
        at = slots[first]
        held = self.alive[at]
        columns: list[_NarrowColumn] = self.columns  # type: ignore[assignment]
        # Column-major, as the fields are stored: each is read and written whole.
        before = np.zeros((len(first), width), dtype=np.int64, order="F")
        if held.any():
            for j, column in enumerate(columns):
                before[:, j] = np.where(held & column.valid.get(at), column.read(at), 0)
        after = before + sums
        keep = (after != 0).any(axis=1)
        self.alive[at] = keep
        self.live += int(np.count_nonzero(keep)) - int(np.count_nonzero(held))
        every = bool(keep.all())
        written = at if every else at[keep]
        for j, column in enumerate(columns):
            column.write(written, after[:, j] if every else after[keep, j])
            column.valid.set_valid(written)
        self._tidy()
        return Counted(first, before, after)

    def _same_key_rows(self, hashes: np.ndarray, probes: list[Any]) -> np.ndarray:
        """For each row of a batch, a row of the batch with the same key: the row itself, or
        one found by a pass over a small table of the batch's own (most repeated keys are
        found; the rest are left to ``_find``, which also gives repeats one slot)."""
        n = len(hashes)
        rows = np.arange(n, dtype=np.int64)
        table, mask = _batch_table(n)
        position = (hashes & np.uint64(mask)).astype(np.int64)
        table[position] = rows  # one of the rows at each position wins it
        other = table[position]
        check = np.flatnonzero((other != rows) & (hashes[other] == hashes))
        if len(check):
            equal = np.ones(len(check), dtype=bool)
            for store, probe in zip(self.keys, probes, strict=True):
                equal &= store.equal_rows(probe, check, other[check])
            rows[check[equal]] = other[check[equal]]
        return rows

    def _tidy(self) -> None:
        """Compact after a write that left too many dead slots or dead Arrow value rows."""
        if self.used - self.live > max(self.live, _MIN_COMPACT):
            self._compact()
        else:
            live_slots = None
            for column in self.columns:
                if isinstance(column, _ArrowColumn) and column.total > 2 * self.live + _MIN_COMPACT:
                    if live_slots is None:
                        live_slots = np.flatnonzero(self.alive[: self.used])
                    column.garbage_collect(live_slots)

    # -- whole-state access ----------------------------------------------------------------------

    def slots_of_group(self, group: int) -> np.ndarray:
        """The live slots whose keys are in key group ``group``."""
        used = self.used
        if self.prefix is None:
            return np.flatnonzero(self.alive[:used] & (self.groups[:used] == group))
        in_group = self.prefix.groups[: self.prefix.used] == group
        return np.flatnonzero(self.alive[:used] & in_group[self.keys[0].values[:used]])

    def groups_of(self, slots: np.ndarray) -> np.ndarray:
        """The key group of each of ``slots``."""
        if self.prefix is None:
            return self.groups[slots]
        return self.prefix.groups[self.keys[0].values[slots]]

    def live_slots(self) -> np.ndarray:
        return np.flatnonzero(self.alive[: self.used])

    def key_arrays(self, slots: np.ndarray) -> list[pa.Array]:
        if self.prefix is None:
            return [k.array(slots) for k in self.keys]
        ids = self.keys[0].values[slots]
        return [*self.prefix.key_arrays(ids), *(k.array(slots) for k in self.keys[1:])]

    def value_array(self, slots: np.ndarray) -> pa.Array:
        return self._values(slots, None)

    # -- internals -------------------------------------------------------------------------------

    def _probe(self, keys: list[pa.Array] | PrefixedKeys) -> tuple[np.ndarray, list[Any]]:
        if isinstance(keys, PrefixedKeys):
            assert self.prefix is not None, "prefixed keys for a state that does not group by a prefix"
            # The prefix's hashes are the same for every state of these key types: worked out
            # once for all the states the keys are given to.
            memo = ("prefix probe", *self.prefix.key_types)
            probed = keys.memo.get(memo)
            if probed is None:
                probed = keys.memo[memo] = self.prefix._probe(keys.prefix)
            # And looked up once in a prefix store that several states share (``share_prefix``):
            # a store is never renumbered in place, so its ids hold for the batch.
            found = keys.memo.get(("prefix ids", self.prefix))
            if found is None:
                found = keys.memo["prefix ids", self.prefix] = self.prefix._prefix_ids(keys.prefix, probed=probed)
            ids, group_hashes = found
            ids, group_hashes = ids[keys.ids], group_hashes[keys.ids]
            rest = keys.rest
        elif self.prefix is None:
            # Looked up at call time, so a test can replace the hash to force collisions.
            hashes = keygroups.hash_columns(keys, len(keys[0]))
            return hashes, [store.probe(arr) for store, arr in zip(self.keys, keys, strict=True)]
        else:
            n = self.group_fields
            ids, group_hashes = self.prefix._prefix_ids(keys[:n])
            rest = keys[n:]
        hashes = keygroups.extend_hashes(group_hashes, rest)
        probes = [(ids.astype(np.uint32), None),
                  *(store.probe(arr) for store, arr in zip(self.keys[1:], rest, strict=True))]
        return hashes, probes

    def _prefix_ids(self, columns: list[pa.Array], *,
                    probed: tuple[np.ndarray, list[Any]] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """For a store that holds the grouping fields of another: each row's slot (the rows'
        values added if new) and hash. Each distinct row of the batch is hashed and looked up
        once, and every row gets its answer. Given the rows' hashes and probes (``probed``),
        the rows are mostly distinct already (``PrefixedKeys.prefix``), and are looked up as
        they are."""
        if probed is not None:
            hashes, probes = probed
            return self._find(hashes, probes, np.arange(len(columns[0]), dtype=np.int64), insert=True), hashes
        rows, picked = distinct_rows(columns)
        columns = [c.take(pa.array(picked)) for c in columns]
        hashes, probes = self._probe(columns)
        slots = self._find(hashes, probes, np.arange(len(picked), dtype=np.int64), insert=True)
        return slots[rows], hashes[rows]

    def _values(self, slots: np.ndarray, found: np.ndarray | None) -> pa.Array:
        if self.used == 0:
            return pa.nulls(len(slots), self.value_type)
        if not self.struct:
            return self.columns[0].get(slots, found)
        # The struct's mask says which rows have no value: its fields need not say it again.
        arrays = [column.get(slots, found, mask=False) for column in self.columns]
        mask = None if found is None else pa.array(~found)
        return pa.StructArray.from_arrays(arrays, fields=self.fields, mask=mask)

    def _equal(self, probes: list[Any], rows: np.ndarray, slots: np.ndarray,
               first_new: int | None = None, new_rows: np.ndarray | None = None) -> np.ndarray:
        """Whether each of ``rows`` holds the key of its slot. Slots from ``first_new`` on were
        claimed by this batch and hold no key yet: row ``new_rows[slot - first_new]`` has it.

        Fields are compared last first, each only for the rows still equal: a ``hashless``
        state's value field tells most keys apart (its first field, the prefix's number, is
        shared by many), so a row that meets another key costs one comparison, as a stored hash
        would."""
        same = np.zeros(len(rows), dtype=bool)
        fresh = None if first_new is None else np.flatnonzero(slots >= first_new)
        fields = list(zip(self.keys, probes, strict=True))[::-1]
        at = np.arange(len(rows)) if fresh is None or not len(fresh) else np.flatnonzero(slots < first_new)
        for store, probe in fields:
            if not len(at):
                break
            at = at[store.equal(probe, rows[at], slots[at])]
        same[at] = True
        if fresh is None or not len(fresh):
            return same
        assert new_rows is not None
        owners = new_rows[slots[fresh] - first_new]
        at = np.arange(len(fresh))
        for store, probe in fields:
            if not len(at):
                break
            at = at[store.equal_rows(probe, rows[fresh[at]], owners[at])]
        same[fresh[at]] = True
        return same

    def _find(self, hashes: np.ndarray, probes: list[Any], rows: np.ndarray, *, insert: bool) -> np.ndarray:
        """The slot of each of ``rows``' keys (-1 if absent); with ``insert``, an absent key gets
        a new slot (rows with one key share it). Vectorized rounds of linear probing.

        A slot claimed during the rounds gets its hash and key group at once (later rounds
        compare hashes), but its key only after the last round, in one append per key field:
        until then a row that meets it is compared with the row that claimed it."""
        result = np.full(len(rows), _EMPTY, dtype=np.int64)
        if insert:
            self._reserve(self.used + len(rows))
        first_new = self.used
        claimed: list[np.ndarray] = []  # per round, the rows (of the batch) that took new slots
        new_rows = np.zeros(0, dtype=np.int64)
        index = self.index
        mask = np.uint64(len(index) - 1)
        pending = np.arange(len(rows), dtype=np.int64)  # positions into ``rows``
        wanted = hashes[rows]
        position = (wanted & mask).astype(np.int64)
        tags = wanted.astype(np.uint32)  # the low half, as stored
        while len(pending):
            at = position[pending]
            held = index[at].astype(np.int64)
            occupied = held >= 0
            done = np.zeros(len(pending), dtype=bool)
            candidates = np.flatnonzero(occupied)
            if len(candidates):
                slots = held[candidates]
                if not self.hashless:
                    same_hash = self.hashes[slots] == tags[pending[candidates]]
                    candidates, slots = candidates[same_hash], slots[same_hash]
                if len(candidates):
                    if claimed and len(claimed[-1]):
                        new_rows = np.concatenate(claimed) if len(claimed) > 1 else claimed[0]
                        claimed = [new_rows]
                    equal = self._equal(probes, rows[pending[candidates]], slots,
                                        first_new if len(new_rows) else None, new_rows)
                    hits = candidates[equal]
                    result[pending[hits]] = slots[equal]
                    done[hits] = True
            empty = np.flatnonzero(~occupied)
            if len(empty):
                if insert:
                    claim, claim_at = pending[empty], at[empty]
                    marker = (-2 - claim).astype(np.int32)
                    index[claim_at] = marker
                    won = index[claim_at] == marker
                    winners, winner_at = claim[won], claim_at[won]
                    new = self._claim(hashes, rows[winners])
                    claimed.append(rows[winners])
                    index[winner_at] = new
                    result[winners] = new
                    done[empty[won]] = True
                    # The losers look at the same position again: it now holds the winner's key.
                    occupied[empty[~won]] = False
                else:
                    done[empty] = True
            advance = occupied & ~done
            position[pending[advance]] = (at[advance] + 1) & int(mask)
            pending = pending[~done]
        if self.used > first_new:
            added = np.concatenate(claimed) if len(claimed) > 1 else claimed[0]
            for store, probe in zip(self.keys, probes, strict=True):
                store.append(probe, added, first_new)
        return result

    def _claim(self, hashes: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """New slots, not alive yet, for the keys of ``rows`` (room already reserved): their
        hashes and key groups (none by prefix: see ``groups_of``); ``_find`` appends their keys."""
        start = self.used
        end = start + len(rows)
        if not self.hashless:
            self.hashes[start:end] = hashes[rows].astype(np.uint32)
        if self.prefix is None:
            self.groups[start:end] = group_of_hash(hashes[rows], self.max_parallelism)
        self.alive[start:end] = False
        self.used = end
        return np.arange(start, end, dtype=np.int64)

    def _reserve(self, slots: int) -> None:
        """Room for ``slots`` slots, and an index at most half full with them."""
        if not self.hashless:
            self.hashes = _grow(self.hashes, slots)
        if self.prefix is None:
            self.groups = _grow(self.groups, slots)
        self.alive = _grow(self.alive, slots)
        for column in self.columns:
            column.reserve(len(self.alive))
        if 2 * slots > len(self.index):
            if slots > 2**30:  # the index's positions come from the 32 bits of hash kept per key
                raise OverflowError(f"{slots:,} keys in one value state: at most 2**30 fit")
            self._rebuild_index(max(_MIN_INDEX, 1 << math.ceil(math.log2(4 * max(slots, 1)))))

    def _rebuild_index(self, size: int) -> None:
        """A new index of ``size`` positions over the slots in use (whose keys are distinct, so
        no key is compared)."""
        index = np.full(size, _EMPTY, dtype=np.int32)
        mask = size - 1
        slots = np.arange(self.used, dtype=np.int32)
        if self.hashless:
            position = self._slot_positions(mask)
        else:
            position = (self.hashes[: self.used] & np.uint32(mask)).astype(np.int64)
        # Every position is free at first: each slot writes its home, and those that read
        # themselves back hold it; the others go on, probing past occupied positions.
        index[position] = slots
        placed = index[position] == slots
        slots, position = slots[~placed], (position[~placed] + 1) & mask
        while len(slots):
            free = index[position] < 0
            claim, claim_at = slots[free], position[free]
            index[claim_at] = claim
            placed = np.zeros(len(slots), dtype=bool)
            placed[np.flatnonzero(free)[index[claim_at] == claim]] = True
            slots = slots[~placed]
            position = (position[~placed] + 1) & mask
        self.index = index

    def _slot_positions(self, mask: int) -> np.ndarray:
        """The home position (hash & ``mask``) of every slot in use, from its stored key (a
        ``hashless`` state): its prefix's hash, by prefix, extended by its other fields, as
        ``_probe`` hashed it. In chunks that the hash's many passes find in the CPU's cache."""
        assert self.prefix is not None
        prefix = self.prefix
        group_hashes = keygroups.hash_columns(prefix.key_arrays(np.arange(prefix.used, dtype=np.int64)),
                                              prefix.used)
        position = np.empty(self.used, dtype=np.int64)
        ids = self.keys[0].values
        for lo in range(0, self.used, _REHASH_ROWS):
            hi = min(lo + _REHASH_ROWS, self.used)
            slots = np.arange(lo, hi, dtype=np.int64)
            hashes = keygroups.extend_hashes(group_hashes[ids[lo:hi]], [k.array(slots) for k in self.keys[1:]])
            position[lo:hi] = hashes & np.uint64(mask)
        return position

    def _compact(self) -> None:
        """Keep only the live slots, renumbered in order, and rebuild the index."""
        live = self.live_slots()
        if not self.hashless:
            self.hashes = self.hashes[live]
        if self.prefix is None:
            self.groups = self.groups[live]
        self.alive = np.ones(len(live), dtype=bool)
        for store in self.keys:
            store.keep(live)
        for column in self.columns:
            column.keep(live)
        self.used = self.live = len(live)
        if self.prefix is not None:
            # The grouping fields' store drops the values no live key holds any more.
            ids = self.keys[0].values[: self.used]
            held, inverse = np.unique(ids, return_inverse=True)
            prefix = ColumnarValues(self.prefix.key_types, pa.bool_(), self.max_parallelism)
            renumbered, _ = prefix._prefix_ids(self.prefix.key_arrays(held))
            self.keys[0].values[: self.used] = renumbered[inverse.reshape(-1)]
            self.prefix = prefix
        self._rebuild_index(max(_MIN_INDEX, 1 << math.ceil(math.log2(4 * max(self.used, 1)))))

    def _last_of_each(self, slots: np.ndarray) -> np.ndarray:
        """Positions into ``slots`` of the last occurrence of each slot, in order."""
        n = len(slots)
        if n < 2:
            return np.arange(n)
        # Without repeats (the usual batch: one row per key) every row represents its own slot;
        # only a batch with repeats pays for a sort.
        positions = np.arange(n, dtype=np.int64)
        if (_representatives(slots) == positions).all():
            return positions
        order = np.argsort(slots, kind="stable")
        ordered = slots[order]
        if (ordered[1:] != ordered[:-1]).all():
            return np.arange(len(slots))
        last = np.ones(len(slots), dtype=bool)
        last[:-1] = ordered[1:] != ordered[:-1]
        return np.sort(order[last])
