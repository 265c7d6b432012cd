"""Kernels of Flink's built-in scalar functions that ``pyarrow.compute`` does not give as they are.

Generated code calls them as ``F.<name>`` (it imports this module as ``F``). Each
works on whole arrays (or a scalar, for an expression that reads no column). Where Arrow has no
kernel at all (hashes, base64, Java's ``Long.toBinaryString``), the function runs once per
*distinct* value of the batch (``_each_distinct``) and the results are taken back out by position.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from clink.errors import EvaluationError
from clink.runtime import compute as pc
from clink.runtime.timezone import from_local, to_local

Value = pa.Array | pa.ChunkedArray | pa.Scalar

_MS = {"MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": 86_400_000,
       "WEEK": 7 * 86_400_000}
_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}
_PER_MS = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}
_DAY_MS = 86_400_000


def _array(a: Value) -> pa.Array:
    if isinstance(a, pa.Scalar):
        return pa.array([a.as_py()], a.type)
    if isinstance(a, pa.ChunkedArray):
        return a.combine_chunks()
    return a


def _like(result: pa.Array, *inputs: Value) -> Value:
    """``result`` as a scalar when every input was one (a constant expression)."""
    return result[0] if all(isinstance(x, pa.Scalar) for x in inputs) else result


def _valid(a: pa.Array) -> np.ndarray:
    return np.ones(len(a), bool) if a.null_count == 0 else np.asarray(pc.is_valid(a))


def _each_distinct(a: Value, fn: Callable[[Any], Any], out: pa.DataType) -> Value:
    """``fn`` of each value of ``a`` (NULL stays NULL), run in Python once per distinct value:
    for functions Arrow has no kernel for. A batch's values repeat (keys, URLs, codes), so the
    loop is over its few distinct values, not its rows."""
    arr = _array(a)
    encoded = pc.dictionary_encode(arr)
    values = [None if v is None else fn(v) for v in encoded.dictionary.to_pylist()]
    result = pc.take(pa.array(values, out), encoded.indices)
    return _like(result, a)


# ---------------------------------------------------------------- numbers


def sign(a: Value) -> Value:
    """SIGN: -1, 0 or 1 in the argument's type (NaN stays NaN)."""
    if pa.types.is_decimal(a.type):
        return pc.cast(pc.sign(pc.cast(a, pa.float64())), a.type)
    return pc.cast(pc.sign(a), a.type)


def cot(a: Value) -> Value:
    return pc.divide(pa.scalar(1.0), pc.tan(a))


def log(base: Value, a: Value) -> Value:
    """LOG(base, x): the logarithm of ``x`` to ``base``; Flink fails on a base of 1 or less."""
    low = pc.less_equal(base, pa.scalar(1.0))
    if pc.any(pc.fill_null(low, False)).as_py():
        raise EvaluationError("the base of LOG(base, x) must be greater than 1")
    return pc.divide(pc.ln(a), pc.ln(base))


def truncate(a: Value, digits: int = 0) -> Value:
    """TRUNCATE(x, d): ``x`` cut (toward zero) to ``d`` decimals; a negative ``d`` zeroes digits
    left of the point. A DOUBLE is cut on the shortest decimal that prints it, as Flink does
    (TRUNCATE(1.15, 2) is 1.15, although 1.15 is stored a little below it)."""
    if pa.types.is_integer(a.type):
        if digits >= 0:
            return a
        step = pa.scalar(10 ** -digits, pa.int64())
        wide = pc.cast(a, pa.int64())
        # Integer division truncates toward zero here, as in Java.
        cut = pc.multiply(pc.divide(wide, step), step)
        return pc.cast(cut, a.type)
    if pa.types.is_decimal(a.type):
        return pc.round(a, ndigits=digits, round_mode="towards_zero")
    rounded = pc.round(a, ndigits=digits, round_mode="towards_zero")
    arr = _array(a)
    values = arr.to_numpy(zero_copy_only=False).astype(float)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = np.abs(values * (10.0 ** digits))
        # Values that scale to a hair below a whole number may be that number in decimal.
        near = np.abs(scaled - np.round(scaled)) <= np.maximum(1e-9, scaled * 1e-12)
    near &= np.isfinite(values)
    rows = np.flatnonzero(near)
    if len(rows) == 0:
        return rounded
    import decimal

    fixed = _array(rounded).to_numpy(zero_copy_only=False).astype(float).copy()
    quantum = decimal.Decimal(1).scaleb(-digits)
    for i in rows:  # the few rows near a cut, decided exactly from their decimal form
        fixed[i] = float(decimal.Decimal(repr(float(values[i]))).quantize(quantum, rounding=decimal.ROUND_DOWN))
    out = pa.array(fixed, a.type, mask=~_valid(arr))
    return _like(out, a)


def bin_(a: Value) -> Value:
    """BIN(n): ``n`` in binary, as Java's Long.toBinaryString (two's complement for negatives)."""
    return _each_distinct(pc.cast(a, pa.int64()), lambda v: format(v & 0xFFFF_FFFF_FFFF_FFFF, "b"), pa.string())


_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", np.uint8)


def hex_(a: Value) -> Value:
    """HEX(n): an integer in upper-case hexadecimal (two's complement for negatives); HEX(s): the
    UTF-8 bytes of a string, two digits each."""
    if pa.types.is_integer(a.type):
        return _each_distinct(pc.cast(a, pa.int64()), lambda v: format(v & 0xFFFF_FFFF_FFFF_FFFF, "X"), pa.string())
    arr = _array(a)
    if len(arr) == 0:
        return pa.array([], pa.string())
    offsets, raw = _bytes_of(arr)
    begin, end = offsets[0], offsets[-1]
    raw = raw[begin:end]
    out = np.empty(2 * len(raw), np.uint8)
    out[0::2] = _HEX_DIGITS[raw >> 4]
    out[1::2] = _HEX_DIGITS[raw & 0x0F]
    new_offsets = ((offsets - begin) * 2).astype(np.int32)
    mask = None if arr.null_count == 0 else pa.py_buffer(np.packbits(_valid(arr), bitorder="little"))
    result = pa.Array.from_buffers(pa.string(), len(arr), [mask, pa.py_buffer(new_offsets), pa.py_buffer(out)])
    return _like(result, a)


# ---------------------------------------------------------------- strings


def repeat(a: Value, n: Value) -> Value:
    """REPEAT(s, n): ``s`` ``n`` times; '' for ``n`` of 0 or less."""
    return pc.binary_repeat(a, pc.max_element_wise(pc.cast(n, pa.int64()), pa.scalar(0, pa.int64()),
                                                    skip_nulls=False))


def regexp(a: Value, pattern: str) -> Value:
    """REGEXP(s, regex): whether some (maybe empty) part of ``s`` matches."""
    return pc.match_substring_regex(a, pattern=pattern)


def regexp_replace(a: Value, pattern: str, replacement: str) -> Value:
    """REGEXP_REPLACE(s, regex, replacement): every match replaced (``replacement`` is in RE2's
    form already: the compiler turned Java's ``$1`` into ``\\1``)."""
    return pc.replace_substring_regex(a, pattern=pattern, replacement=replacement)


def _bytes_of(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets as int64, the data bytes) of a string array."""
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)
    data = arr.buffers()[2]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return offsets, raw


def initcap(a: Value) -> Value:
    """INITCAP(s): each word's first letter upper case and its other letters lower case, a word
    being a run of ASCII letters and digits (Flink's rule; other characters are left alone)."""
    arr = _array(a)
    if len(arr) == 0:
        return arr
    offsets, raw = _bytes_of(arr)
    begin, end = offsets[0], offsets[-1]
    data = raw[begin:end].copy()
    lower = (data >= 97) & (data <= 122)
    upper = (data >= 65) & (data <= 90)
    alnum = lower | upper | ((data >= 48) & (data <= 57))
    # A word starts at an alphanumeric byte whose previous byte is not one, or that opens a string.
    previous = np.concatenate(([False], alnum[:-1]))
    opens = np.zeros(len(data), bool)
    starts = offsets[:-1] - begin
    opens[starts[starts < len(data)]] = True
    first = alnum & (~previous | opens)
    data[first & lower] -= 32
    data[~first & upper] += 32
    new_offsets = (offsets - begin).astype(np.int32)
    mask = None if arr.null_count == 0 else pa.py_buffer(np.packbits(_valid(arr), bitorder="little"))
    result = pa.Array.from_buffers(pa.string(), len(arr), [mask, pa.py_buffer(new_offsets), pa.py_buffer(data)])
    return _like(result, a)


def concat_ws(sep: Value, *parts: Value) -> Value:
    """CONCAT_WS(sep, s1, ...): the non-NULL parts joined by ``sep``; NULL only if ``sep`` is
    ('' when every part is NULL)."""
    # Arrow's "skip" drops a row whose parts are all NULL (the result comes out shorter): such a
    # row's first part becomes '', which joins to ''.
    none = pc.is_null(parts[0])
    for p in parts[1:]:
        none = pc.and_(none, pc.is_null(p))
    first = pc.if_else(none, pa.scalar("", pa.string()), parts[0])
    return pc.binary_join_element_wise(first, *parts[1:], sep, null_handling="skip")


def pad(a: Value, length: int, padding: str, left: bool) -> Value:
    """LPAD / RPAD(s, n, pad): ``s`` padded with repeats of ``pad`` to ``n`` characters, or cut to
    ``n`` when longer. The compiler makes ``n`` < 0 and an empty ``pad`` NULL, as Flink."""
    cut = pc.utf8_slice_codeunits(a, 0, length)
    if len(padding) == 1:
        return pc.utf8_lpad(cut, width=length, padding=padding) if left else pc.utf8_rpad(cut, width=length,
                                                                                            padding=padding)
    need = pc.subtract(pa.scalar(length, pa.int64()), pc.cast(pc.utf8_length(cut), pa.int64()))
    arr = _array(need)
    counts = np.asarray(pc.fill_null(arr, 0).to_numpy(zero_copy_only=False), np.int64)
    # The padding each row needs, made once per distinct amount (strings of similar lengths need few).
    amounts, index = np.unique(counts, return_inverse=True)
    times = -(-int(amounts.max(initial=0)) // len(padding))
    fills = pa.array([(padding * times)[:k] for k in amounts.tolist()], pa.string())
    fill = pc.take(fills, pa.array(index.reshape(-1).astype(np.int32)))
    fill = _like(fill, need)
    parts = (fill, cut) if left else (cut, fill)
    return pc.binary_join_element_wise(*parts, "")


def to_base64(a: Value) -> Value:
    import base64

    return _each_distinct(a, lambda v: base64.b64encode(v.encode()).decode(), pa.string())


def from_base64(a: Value) -> Value:
    """FROM_BASE64(s): the decoded bytes read as UTF-8; text that is not base64 fails the pipeline."""
    import base64
    import binascii

    def decode(v: str) -> str:
        try:
            return base64.b64decode(v, validate=True).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            raise EvaluationError(f"FROM_BASE64: {v!r} is not base64") from None

    return _each_distinct(a, decode, pa.string())


def ascii_(a: Value) -> Value:
    """ASCII(s): the code of the first character (0 for '')."""
    first = pc.utf8_slice_codeunits(a, 0, 1)
    return _each_distinct(first, lambda v: ord(v) if v else 0, pa.int32())


_CHARS = pa.array([chr(i) for i in range(256)] + [""], pa.string())


def chr_(a: Value) -> Value:
    """CHR(n): the character of code ``n`` modulo 256 (Latin-1); '' for a negative ``n``."""
    n = pc.cast(a, pa.int64())
    index = pc.if_else(pc.less(n, pa.scalar(0, pa.int64())), pa.scalar(256, pa.int64()),
                       pc.bit_wise_and(n, pa.scalar(255, pa.int64())))
    if isinstance(index, pa.Scalar):
        return _CHARS[index.as_py()] if index.is_valid else pa.scalar(None, pa.string())
    return pc.take(_CHARS, index)


def _char_positions(arr: pa.Array, byte_index: pa.Array) -> pa.Array:
    """Byte offsets into each string (-1: none) as 1-based character positions (0: none)."""
    found = np.asarray(pc.fill_null(byte_index, -1).to_numpy(zero_copy_only=False), np.int64)
    offsets, raw = _bytes_of(arr)
    starts = np.concatenate(([0], np.cumsum((raw & 0xC0) != 0x80, dtype=np.int64)))
    at = offsets[:-1] + np.maximum(found, 0)
    chars = starts[at] - starts[offsets[:-1]]
    out = np.where(found >= 0, chars + 1, 0).astype(np.int32)
    return pa.array(out, pa.int32(), mask=~_valid(arr) | ~_valid(byte_index))


def locate(a: Value, needle: str, start: int = 1) -> Value:
    """INSTR(s, needle), LOCATE(needle, s[, start]), POSITION(needle IN s): the 1-based character
    position of the first ``needle`` in ``s`` at or after character ``start``; 0 if none."""
    arr = _array(a)
    if start < 1:
        return _like(pc.if_else(pc.is_valid(arr), pa.scalar(0, pa.int32()), pa.scalar(None, pa.int32())), a)
    searched = pc.utf8_slice_codeunits(arr, start - 1) if start > 1 else arr
    found = _char_positions(searched, pc.find_substring(searched, pattern=needle))
    if start > 1:
        found = pc.if_else(pc.greater(found, 0), pc.add(found, pa.scalar(start - 1, pa.int32())), found)
    return _like(found, a)


def left(a: Value, n: int) -> Value:
    return pc.utf8_slice_codeunits(a, 0, max(n, 0))


def right(a: Value, n: int) -> Value:
    if n <= 0:
        return pc.utf8_slice_codeunits(a, 0, 0)
    return pc.utf8_slice_codeunits(a, -n)


_DECIMAL_TEXT = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"


def is_kind(a: Value, kind: str) -> Value:
    """IS_ALPHA, IS_DIGIT, IS_DECIMAL: never NULL (FALSE for NULL, as Flink)."""
    if kind == "alpha":
        out = pc.utf8_is_alpha(a)
    elif kind == "digit":
        out = pc.utf8_is_digit(a)
    else:
        out = pc.match_substring_regex(a, pattern=_DECIMAL_TEXT)
    return pc.fill_null(out, False)


def is_distinct(a: Value, b: Value) -> Value:
    """``a IS DISTINCT FROM b``: ``a <> b``, with NULL the same as NULL and unlike any value."""
    one_null = pc.xor(pc.is_null(a), pc.is_null(b))
    return pc.if_else(pc.and_(pc.is_valid(a), pc.is_valid(b)), pc.not_equal(a, b), one_null)


def greatest(*args: Value) -> Value:
    """GREATEST(a, b, ...): NULL if any argument is NULL, as Flink."""
    return pc.max_element_wise(*args, skip_nulls=False)


def least(*args: Value) -> Value:
    return pc.min_element_wise(*args, skip_nulls=False)


def hash_text(a: Value, algorithm: str) -> Value:
    """MD5, SHA1, SHA2 ...: the hex digest of the UTF-8 bytes."""
    import hashlib

    return _each_distinct(a, lambda v: hashlib.new(algorithm, v.encode()).hexdigest(), pa.string())


def str_to_map(a: Value, pairs: str, pair: str) -> Value:
    """STR_TO_MAP: ``a`` split into entries on the regex ``pairs``, each into key and value on the
    first match of the regex ``pair`` (no match: the value is NULL); a key given twice keeps its
    last value, as Flink's map does."""
    import re

    pairs_re, pair_re = re.compile(pairs), re.compile(pair)

    def parse(text: str) -> list[tuple[str, str | None]]:
        out: dict[str, str | None] = {}
        for entry in pairs_re.split(text):
            key, *value = pair_re.split(entry, maxsplit=1)
            out[key] = value[0] if value else None
        return list(out.items())

    return _each_distinct(a, parse, pa.map_(pa.string(), pa.string()))


_CHARSETS = {"US-ASCII": "ascii", "ISO-8859-1": "latin-1", "UTF-8": "utf-8", "UTF-16BE": "utf-16-be",
             "UTF-16LE": "utf-16-le", "UTF-16": "utf-16"}


def decode(a: Value, charset: str) -> Value:
    """DECODE(binary, charset): the bytes read in one of Flink's six character sets."""
    codec = _CHARSETS[charset.upper()]
    return _each_distinct(a, lambda v: v.decode(codec, errors="replace"), pa.string())


def encode(a: Value, charset: str) -> Value:
    """ENCODE(string, charset): the string written in one of Flink's six character sets."""
    codec = _CHARSETS[charset.upper()]
    return _each_distinct(a, lambda v: v.encode(codec, errors="replace"), pa.binary())


def parse_url(a: Value, part: str, key: str | None = None) -> Value:
    """PARSE_URL: a part of a URL (HOST, PATH, QUERY, REF, PROTOCOL, FILE, AUTHORITY, USERINFO), as
    Java's URL names them; with a key, that QUERY parameter's value. NULL where the URL has none."""
    from urllib.parse import parse_qs, urlsplit

    def take(url: str) -> str | None:
        try:
            u = urlsplit(url)
        except ValueError:
            return None
        if not u.scheme:
            return None  # Java's URL needs a protocol
        if part == "QUERY" and key is not None:
            values = parse_qs(u.query, keep_blank_values=True).get(key)
            return values[0] if values else None
        found = {
            "HOST": u.hostname, "PATH": u.path, "QUERY": u.query or None, "REF": u.fragment or None,
            "PROTOCOL": u.scheme, "FILE": u.path + (f"?{u.query}" if u.query else ""),
            "AUTHORITY": u.netloc or None,
            "USERINFO": u.netloc.rpartition("@")[0] if "@" in u.netloc else None,
        }[part]
        return found

    return _each_distinct(a, take, pa.string())


def map_part(a: Value, keys: bool) -> Value:
    """MAP_KEYS / MAP_VALUES: the keys or values of each map as an ARRAY."""
    arr = _array(a)
    values = arr.keys if keys else arr.items
    offsets = pa.array(np.asarray(arr.offsets), pa.int32())
    out = pa.ListArray.from_arrays(offsets, values, mask=pc.is_null(arr) if arr.null_count else None)
    return _like(out, a)


def element(a: Value) -> Value:
    """ELEMENT(array): its one element; NULL if empty; more than one fails the pipeline."""
    lengths = pc.list_value_length(a)
    if pc.any(pc.fill_null(pc.greater(lengths, 1), False)).as_py():
        raise EvaluationError("ELEMENT(array) of an array of more than one element")
    from clink.runtime.kernels import element_at

    return element_at(a, pa.scalar(1, pa.int64()))


def _lists(a: Value, n: int | None = None) -> pa.Array:
    if isinstance(a, pa.Scalar):
        return pa.array([a.as_py()] * (n or 1), a.type)
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a


def _n(*values: Value) -> int:
    return next((len(v) for v in values if not isinstance(v, pa.Scalar)), 1)


def _elements(lists: pa.Array) -> tuple[np.ndarray, pa.Array, np.ndarray, np.ndarray]:
    """The elements of ``lists``: the list of each (its row), the elements, and per list where
    its elements start among them and how many it has (0 for NULL)."""
    parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(lists)
    counts = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    starts = np.cumsum(counts) - counts
    return parents, flat, starts, counts


def _matches(flat: pa.Array, parents: np.ndarray, needle: Value) -> np.ndarray:
    """Per element, whether it equals its row's ``needle``; a NULL needle finds NULL elements."""
    if isinstance(needle, pa.Scalar):
        if not needle.is_valid:
            return ~_valid(flat)
        return pc.fill_null(pc.equal(flat, needle.cast(flat.type)), False).to_numpy(zero_copy_only=False)
    per = _array(needle).cast(flat.type).take(pa.array(parents))
    equal = pc.fill_null(pc.equal(flat, per), False).to_numpy(zero_copy_only=False)
    return equal | (~_valid(per) & ~_valid(flat))


def _rebuilt(lists: pa.Array, keep: np.ndarray, parents: np.ndarray, flat: pa.Array, n: int,
             order: np.ndarray | None = None) -> pa.Array:
    """``lists`` with only the elements ``keep`` (in ``order`` if given); NULL lists stay NULL."""
    index = np.flatnonzero(keep) if order is None else order
    counts = np.bincount(parents[index], minlength=n)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
    out = pa.ListArray.from_arrays(pa.array(offsets), flat.take(pa.array(index)), type=lists.type,
                                   mask=pc.is_null(lists))
    return out


def array_contains(haystack: Value, needle: Value) -> Value:
    """ARRAY_CONTAINS: whether an element equals ``needle`` (a NULL needle finds a NULL element);
    NULL for a NULL array."""
    n = _n(haystack, needle)
    lists = _lists(haystack, n)
    parents, flat, _, _ = _elements(lists)
    found = np.bincount(parents[_matches(flat, parents, needle)], minlength=n) > 0
    return _like(pa.array(found, mask=~_valid(lists)), haystack, needle)


def array_position(haystack: Value, needle: Value) -> Value:
    """ARRAY_POSITION: the 1-based position of the first element equal to ``needle``, 0 if none;
    NULL if either is NULL."""
    n = _n(haystack, needle)
    lists = _lists(haystack, n)
    parents, flat, starts, _ = _elements(lists)
    hit = _matches(flat, parents, needle) & _valid(flat)
    position = np.zeros(n, dtype=np.int64)
    at = np.flatnonzero(hit)[::-1]  # last to first: the first occurrence is written last
    position[parents[at]] = at - starts[parents[at]] + 1
    missing = ~_valid(lists) | ~_valid(_lists(needle, n))
    return _like(pa.array(position.astype(np.int32), mask=missing), haystack, needle)


def array_remove(haystack: Value, needle: Value) -> Value:
    """ARRAY_REMOVE: without the elements equal to ``needle`` (a NULL needle removes NULLs), in
    their order; NULL for a NULL array."""
    n = _n(haystack, needle)
    lists = _lists(haystack, n)
    parents, flat, _, _ = _elements(lists)
    return _like(_rebuilt(lists, ~_matches(flat, parents, needle), parents, flat, n), haystack, needle)


def array_reverse(haystack: Value) -> Value:
    """ARRAY_REVERSE: the elements in reverse order; NULL for a NULL array."""
    lists = _lists(haystack)
    parents, flat, starts, counts = _elements(lists)
    place = np.arange(len(flat), dtype=np.int64) - starts[parents]
    order = starts[parents] + counts[parents] - 1 - place
    return _like(_rebuilt(lists, None, parents, flat, len(lists), order=order), haystack)


def array_distinct(haystack: Value) -> Value:
    """ARRAY_DISTINCT: each element once (NULL too), at its first place; NULL for a NULL array."""
    lists = _lists(haystack)
    parents, flat, _, _ = _elements(lists)
    if not len(flat):
        return haystack
    table = pa.table({"p": parents, "v": flat, "i": np.arange(len(flat), dtype=np.int64)})
    firsts = np.sort(table.group_by(["p", "v"], use_threads=False).aggregate([("i", "min")])["i_min"].to_numpy())
    return _like(_rebuilt(lists, None, parents, flat, len(lists), order=firsts), haystack)


def map_from_arrays(keys: Value, values: Value) -> Value:
    """MAP_FROM_ARRAYS: the map of ``keys[i]`` to ``values[i]``; NULL if either array is NULL. The
    arrays must have equal lengths and the keys no NULL."""
    n = _n(keys, values)
    k, v = _lists(keys, n), _lists(values, n)
    valid = _valid(k) & _valid(v)
    lk = pc.fill_null(pc.list_value_length(k), 0).to_numpy(zero_copy_only=False)
    lv = pc.fill_null(pc.list_value_length(v), 0).to_numpy(zero_copy_only=False)
    if (valid & (lk != lv)).any():
        raise EvaluationError("MAP_FROM_ARRAYS of arrays of different lengths")
    k = pc.if_else(pa.array(valid), k, pa.nulls(n, k.type))
    v = pc.if_else(pa.array(valid), v, pa.nulls(n, v.type))
    flat_keys, flat_values = pc.list_flatten(k), pc.list_flatten(v)
    if flat_keys.null_count:
        raise EvaluationError("MAP_FROM_ARRAYS with a NULL key")
    counts = np.where(valid, lk, 0)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
    out = pa.MapArray.from_arrays(pa.array(offsets, mask=np.append(~valid, False)), flat_keys, flat_values)
    return _like(out, keys, values)


# ---------------------------------------------------------------- date and time


def _epoch(a: Value) -> tuple[np.ndarray, np.ndarray, str]:
    """(epoch values in ``a``'s unit as int64, valid mask, unit) of a TIMESTAMP or DATE array."""
    arr = _array(a)
    if pa.types.is_date(arr.type):
        arr = pc.cast(arr, pa.timestamp("ms"))
    unit = arr.type.unit
    ints = pc.cast(pc.cast(arr, pa.timestamp(unit)), pa.int64())
    values = np.asarray(pc.fill_null(ints, 0).to_numpy(zero_copy_only=False), np.int64)
    return values, _valid(arr), unit


def _per_day(unit: str) -> int:
    return {"s": 86_400, "ms": _DAY_MS, "us": _DAY_MS * 1000, "ns": _DAY_MS * 1_000_000}[unit]


def _add_months(days: np.ndarray, months: np.ndarray) -> np.ndarray:
    """Days since the epoch moved by whole months; a day past the new month's end becomes its
    last day (Jan 31 + 1 month is Feb 28 or 29), as Java's plusMonths."""
    date = days.astype("datetime64[D]")
    month = date.astype("datetime64[M]")
    day_of_month = (date - month.astype("datetime64[D]")).astype(np.int64)
    target = month + months.astype("timedelta64[M]")
    length = ((target + 1).astype("datetime64[D]") - target.astype("datetime64[D]")).astype(np.int64)
    return (target.astype("datetime64[D]").astype(np.int64) + np.minimum(day_of_month, length - 1))


def timestampadd(unit: str, n: Value, ts: Value) -> Value:
    """TIMESTAMPADD(unit, n, ts): ``ts`` moved by ``n`` units; months as calendar months, with the
    day kept where the month has it and the month's last day otherwise."""
    values, valid, tu = _epoch(ts)
    counts = _array(pc.cast(n, pa.int64()))
    if len(counts) == 1 and len(values) != 1:
        counts = pa.repeat(counts[0], len(values)) if counts[0].is_valid else pa.nulls(len(values), pa.int64())
    valid = valid & _valid(counts)
    k = np.asarray(pc.fill_null(counts, 0).to_numpy(zero_copy_only=False), np.int64)
    if unit in _MONTHS:
        per_day = _per_day(tu)
        days = np.floor_divide(values, per_day)
        out = _add_months(days, k * _MONTHS[unit]) * per_day + (values - days * per_day)
    else:
        step = _MS[unit] * (_PER_MS[tu] or 1) // (1000 if tu == "s" else 1)
        out = values + k * step
    typ = ts.type
    if pa.types.is_date(typ):
        result = pc.cast(pc.cast(pa.array(out, pa.int64(), mask=~valid), pa.timestamp(tu)), pa.date32())
    else:
        result = pc.cast(pa.array(out, pa.int64(), mask=~valid), typ)
    return _like(result, n, ts)


def _months_between(d0: np.ndarray, d1: np.ndarray) -> np.ndarray:
    """Whole months from day ``d1`` to day ``d0`` (negative when ``d0`` is earlier): the most
    months that, added to the earlier day, do not pass the later one (Flink's subtractMonths)."""
    later, earlier = np.maximum(d0, d1), np.minimum(d0, d1)
    to_month = lambda d: d.astype("datetime64[D]").astype("datetime64[M]").astype(np.int64)  # noqa: E731
    m = to_month(later) - to_month(earlier)
    m = m - (_add_months(earlier, m) > later)
    return np.where(d0 >= d1, m, -m)


def timestampdiff(unit: str, a: Value, b: Value) -> Value:
    """TIMESTAMPDIFF(unit, a, b): whole units from ``a`` to ``b``, truncated toward zero (INT).
    MONTH, QUARTER and YEAR count calendar months as Flink does (its subtractMonths): from Jan 31
    to Feb 28 is one month, and a month is not complete until its time of day is reached."""
    va, valid_a, ua = _epoch(pc.cast(a, pa.timestamp("ms")) if not pa.types.is_date(a.type) else a)
    vb, valid_b, ub = _epoch(pc.cast(b, pa.timestamp("ms")) if not pa.types.is_date(b.type) else b)
    n = max(len(va), len(vb))
    va, vb = np.broadcast_to(va, n), np.broadcast_to(vb, n)
    valid = np.broadcast_to(valid_a, n) & np.broadcast_to(valid_b, n)
    if unit in _MONTHS:
        day_b, day_a = np.floor_divide(vb, _DAY_MS), np.floor_divide(va, _DAY_MS)
        ms_b, ms_a = vb - day_b * _DAY_MS, va - day_a * _DAY_MS
        months = _months_between(day_b, day_a)
        # Flink: on the day the months land on, the last month counts only once its time of day
        # is reached. Flink applies this whichever way the difference goes, so a negative one
        # lands one month further from zero (from Feb 1 12:00 back to Jan 1 10:00 is -2), and so
        # does clink.
        exact = _add_months(day_a, months) == day_b
        months = months - (exact & (ms_b < ms_a))
        out = np.trunc(months / _MONTHS[unit]).astype(np.int64) if unit != "MONTH" else months
    else:
        diff = vb - va
        out = np.sign(diff) * (np.abs(diff) // _MS[unit])
    if np.any(valid & ((out > 2**31 - 1) | (out < -(2**31)))):
        raise EvaluationError(f"TIMESTAMPDIFF({unit}, ...) does not fit an INT")
    result = pa.array(out.astype(np.int32), pa.int32(), mask=~valid)
    return _like(result, a, b)


def parse_datetime(a: Value, regex: str, anchored: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read strings with a pattern the compiler made from Java's letters (named groups y M d H m
    s S and X for the zone): (wall-clock epoch ms, valid mask, zone offset ms or 0, has-zone). A
    string that does not match, or names a day that does not exist, is not valid."""
    arr = _array(a)
    pattern = "^" + regex + ("$" if anchored else "")
    matched = pc.fill_null(pc.match_substring_regex(arr, pattern=pattern), False)
    parts = pc.extract_regex(pc.if_else(matched, arr, pa.scalar("", pa.string())) if len(arr) else arr,
                             pattern="^" + regex) if len(arr) else None
    n = len(arr)
    valid = np.asarray(matched.to_numpy(zero_copy_only=False), bool) if n else np.zeros(0, bool)
    names = [parts.type.field(i).name for i in range(parts.type.num_fields)] if parts is not None else []

    def field(name: str, default: int) -> np.ndarray:
        if name not in names:
            return np.full(n, default, np.int64)
        text = pc.struct_field(parts, [names.index(name)])
        return np.asarray(pc.fill_null(pc.cast(pc.if_else(pc.equal(text, ""), pa.scalar("0"), text), pa.int64()),
                                       default).to_numpy(zero_copy_only=False), np.int64)

    year, month, day = field("y", 1970), field("M", 1), field("d", 1)
    hour, minute, second, milli = field("H", 0), field("m", 0), field("s", 0), field("S", 0)
    valid &= (month >= 1) & (month <= 12) & (day >= 1) & (hour < 24) & (minute < 60) & (second < 60)
    month_start = ((year - 1970) * 12 + np.clip(month, 1, 12) - 1).astype("datetime64[M]")
    length = ((month_start + 1).astype("datetime64[D]") - month_start.astype("datetime64[D]")).astype(np.int64)
    valid &= day <= length
    days = month_start.astype("datetime64[D]").astype(np.int64) + day - 1
    ms = days * _DAY_MS + hour * 3_600_000 + minute * 60_000 + second * 1000 + milli
    offset = np.zeros(n, np.int64)
    zoned = np.zeros(n, bool)
    if "X" in names:
        zone = pc.struct_field(parts, [names.index("X")])
        sign = np.where(np.asarray(pc.fill_null(pc.starts_with(zone, "-"), False)), -1, 1)
        digits = pc.replace_substring_regex(zone, pattern="[^0-9]", replacement="")
        hh = pc.utf8_slice_codeunits(digits, 0, 2)
        mm = pc.utf8_slice_codeunits(digits, 2, 4)
        to_int = lambda t: np.asarray(pc.fill_null(pc.cast(pc.if_else(pc.equal(t, ""), pa.scalar("0"), t),  # noqa: E731
                                                           pa.int64()), 0).to_numpy(zero_copy_only=False))
        offset = sign * (to_int(hh) * 3_600_000 + to_int(mm) * 60_000)
        zoned = np.asarray(pc.fill_null(pc.not_equal(zone, ""), False).to_numpy(zero_copy_only=False), bool)
    return np.where(valid, ms, 0), valid & _valid(arr), offset, zoned


def to_timestamp(a: Value, regex: str) -> Value:
    """TO_TIMESTAMP(s, format): the wall clock ``s`` spells, TIMESTAMP(3); NULL if it does not."""
    ms, valid, offset, zoned = parse_datetime(a, regex, anchored=True)
    return _like(pc.cast(pa.array(ms - np.where(zoned, offset, 0), pa.int64(), mask=~valid),
                         pa.timestamp("ms")), a)


def to_date(a: Value, regex: str) -> Value:
    """TO_DATE(s, format): the day ``s`` spells; NULL if it does not."""
    ms, valid, _, _ = parse_datetime(a, regex, anchored=True)
    return _like(pa.array((ms // _DAY_MS).astype(np.int32), pa.int32(), mask=~valid).cast(pa.date32()), a)


_LONG_MIN = -(2**63)


def unix_timestamp(a: Value, regex: str, zone: str) -> Value:
    """UNIX_TIMESTAMP(s, format): epoch seconds of the wall clock ``s`` in the session time zone,
    or in the zone ``s`` names (pattern letter X). Like Java's SimpleDateFormat, text after the
    pattern is ignored; a string that does not parse gives Long.MIN_VALUE, as in Flink."""
    ms, valid, offset, zoned = parse_datetime(a, regex, anchored=False)
    in_session = pc.cast(from_local(pc.cast(pa.array(ms, pa.int64()), pa.timestamp("ms")), zone), pa.int64())
    instants = np.where(zoned, ms - offset, np.asarray(in_session.to_numpy(zero_copy_only=False), np.int64))
    seconds = np.where(valid, np.trunc(instants / 1000).astype(np.int64), _LONG_MIN)
    null = ~_valid(_array(a))
    return _like(pa.array(seconds, pa.int64(), mask=null if null.any() else None), a)


def from_unixtime(a: Value, fmt: str, millis: bool, zone: str) -> Value:
    """FROM_UNIXTIME(n, format): the epoch second ``n`` as the wall clock of the session time zone,
    formatted."""
    from clink.runtime.kernels import date_format

    seconds = pc.cast(a, pa.int64()) if pa.types.is_integer(a.type) else pc.cast(pc.floor(a), pa.int64())
    instants = pc.cast(pc.multiply_checked(seconds, pa.scalar(1000, pa.int64())), pa.timestamp("ms", tz="UTC"))
    return date_format(to_local(instants, zone), fmt, millis)


def unix_now(ms: int) -> pa.Scalar:
    """UNIX_TIMESTAMP(): the processing time in whole epoch seconds."""
    return pa.scalar(ms // 1000, pa.int64())


def floor_to(a: Value, unit: str, ceil: bool) -> Value:
    """FLOOR / CEIL(ts TO unit): ``ts`` rounded down / up to a whole unit; a week starts on Sunday,
    as in Flink (Calcite). A value on a boundary stays where it is."""
    name = {"MILLISECOND": "millisecond", "SECOND": "second", "MINUTE": "minute", "HOUR": "hour", "DAY": "day",
            "WEEK": "week", "MONTH": "month", "QUARTER": "quarter", "YEAR": "year"}[unit]
    options: dict[str, Any] = {"unit": name}
    if name == "week":
        options["week_starts_monday"] = False
    if pa.types.is_date(a.type):
        ts = pc.cast(a, pa.timestamp("s"))
        out = pc.ceil_temporal(ts, **options) if ceil else pc.floor_temporal(ts, **options)
        return pc.cast(out, pa.date32())
    return pc.ceil_temporal(a, **options) if ceil else pc.floor_temporal(a, **options)


# ---------------------------------------------------------------- JSON
#
# The functions that read JSON text parse it in Python: Arrow has no kernel for JSON text. They
# run once per distinct value of the batch (``_each_distinct`` dictionary-encodes it first), so a
# column whose documents repeat is parsed a few times, not once per row.


def _json_context(text: str, spec: str) -> tuple[bool, Any]:
    """(failed, found) of Flink's path evaluation: strict mode fails on text that is not JSON and
    on a path that finds nothing; lax mode finds None instead."""
    from clink.runtime import jsonpath

    path = jsonpath.parse(spec)
    lax = path[0] == "lax"
    try:
        doc = jsonpath.loads(text)
    except ValueError:
        return (False, None) if lax else (True, None)
    try:
        return False, jsonpath.evaluate(doc, path)
    except jsonpath.JsonPathError:
        return (False, None) if lax else (True, None)


def _scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def is_json(a: Value, kind: str) -> Value:
    """``s IS JSON [VALUE | SCALAR | ARRAY | OBJECT]``: FALSE for NULL and for text that is not JSON."""
    from clink.runtime import jsonpath

    def check(text: str) -> bool:
        try:
            doc = jsonpath.loads(text)
        except ValueError:
            return False
        return {"VALUE": True, "SCALAR": _scalar(doc), "ARRAY": isinstance(doc, list),
                "OBJECT": isinstance(doc, dict)}[kind]

    return pc.fill_null(_each_distinct(a, check, pa.bool_()), False)


def json_exists(a: Value, spec: str, on_error: str) -> Value:
    """JSON_EXISTS(s, path [... ON ERROR]): whether the path finds a (non-null) value."""
    def exists(text: str) -> bool | None:
        failed, found = _json_context(text, spec)
        if not failed:
            return found is not None
        if on_error == "ERROR":
            raise EvaluationError(f"JSON_EXISTS: the path {spec!r} finds nothing in {text!r}")
        return {"TRUE": True, "FALSE": False, "UNKNOWN": None}[on_error]

    return _each_distinct(a, exists, pa.bool_())


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)


_OK, _EMPTY, _ERROR = 0, 1, 2


def json_value(a: Value, on_empty_default: Value, on_error_default: Value, spec: str, to: pa.DataType,
               on_empty: str, on_error: str) -> Value:
    """JSON_VALUE(s, path [RETURNING type] [... ON EMPTY] [... ON ERROR]): the scalar the path
    finds, as ``to``. Nothing found (or, in lax mode, an object or array) is EMPTY; text that is not
    JSON, a strict path that finds nothing or a non-scalar, and a value that does not convert to
    ``to`` are ERROR. Each then gives NULL, fails the pipeline, or gives its DEFAULT."""
    from clink.runtime.kernels import cast

    def value(text: str) -> dict:
        failed, found = _json_context(text, spec)
        if failed:
            return {"s": _ERROR, "v": None}
        if found is None or (_scalar(found) is False and jsonpath_mode(spec) == "lax"):
            return {"s": _EMPTY, "v": None}
        if not _scalar(found):
            return {"s": _ERROR, "v": None}
        return {"s": _OK, "v": _scalar_text(found)}

    parts = _each_distinct(a, value, pa.struct([pa.field("s", pa.int8()), pa.field("v", pa.string())]))
    status, text = pc.struct_field(parts, [0]), pc.struct_field(parts, [1])
    typed = cast(text, to, try_=True) if to != pa.string() else text
    # A value that does not convert to the type asked for is an error too.
    status = pc.if_else(pc.and_(pc.equal(status, pa.scalar(_OK, pa.int8())), pc.is_null(typed)),
                        pa.scalar(_ERROR, pa.int8()), status)
    for code, behaviour, default in ((_EMPTY, on_empty, on_empty_default), (_ERROR, on_error, on_error_default)):
        hit = pc.fill_null(pc.equal(status, pa.scalar(code, pa.int8())), False)
        if behaviour == "ERROR" and pc.any(hit).as_py():
            raise EvaluationError(f"JSON_VALUE: the path {spec!r} finds "
                                  f"{'nothing' if code == _EMPTY else 'no scalar of the type asked for'}")
        if behaviour == "DEFAULT":
            typed = pc.if_else(hit, default, typed)
    return typed


def jsonpath_mode(spec: str) -> str:
    from clink.runtime import jsonpath

    return jsonpath.parse(spec)[0]


_QUERY_BEHAVIOUR = {"NULL": None, "EMPTY ARRAY": "[]", "EMPTY OBJECT": "{}"}


def json_query(a: Value, spec: str, wrapper: str, on_empty: str, on_error: str) -> Value:
    """JSON_QUERY(s, path [wrapper] [... ON EMPTY] [... ON ERROR]): what the path finds, as JSON
    text; a scalar must be wrapped (WITH [CONDITIONAL | UNCONDITIONAL] ARRAY WRAPPER) to be given."""
    from clink.runtime import jsonpath

    lax = jsonpath_mode(spec) == "lax"

    def behave(behaviour: str, text: str, what: str) -> str | None:
        if behaviour == "ERROR":
            raise EvaluationError(f"JSON_QUERY: the path {spec!r} finds {what} in {text!r}")
        return _QUERY_BEHAVIOUR[behaviour]

    def query(text: str) -> str | None:
        failed, found = _json_context(text, spec)
        if failed:
            return behave(on_error, text, "nothing")
        if found is None:
            return behave(on_empty, text, "nothing")
        if wrapper == "UNCONDITIONAL" or (wrapper == "CONDITIONAL" and not isinstance(found, list)):
            found = [found]
        if _scalar(found):
            return behave(on_empty, text, "a scalar") if lax else behave(on_error, text, "a scalar")
        return jsonpath.dumps(found)

    return _each_distinct(a, query, pa.string())


def json_text(a: Value) -> Value:
    """Each value as JSON text (NULL stays NULL): strings quoted and escaped, numbers and booleans
    as they are, ARRAY as a JSON array, MAP and ROW as JSON objects."""
    from clink.runtime import jsonpath

    t = a.type
    if isinstance(a, pa.Scalar):
        return json_text(_array(a))[0]
    arr = _array(a)
    if pa.types.is_string(t):
        return _each_distinct(arr, jsonpath.dumps, pa.string())
    if pa.types.is_boolean(t):
        return pc.if_else(arr, pa.scalar("true"), pa.scalar("false"))
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return pc.cast(arr, pa.string())
    if pa.types.is_floating(t):
        return _each_distinct(arr, lambda v: repr(float(v)), pa.string())
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string())
    if pa.types.is_list(t) or pa.types.is_map(t):
        offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset:arr.offset + len(arr) + 1]
        if pa.types.is_map(t):
            keys = json_text(pc.cast(arr.keys, pa.string()))
            items = pc.fill_null(json_text(arr.items), "null")
            elements = pc.binary_join_element_wise(keys, items, ":")
        else:
            elements = pc.fill_null(json_text(arr.values), "null")
        lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), elements,
                                         mask=pc.is_null(arr) if arr.null_count else None)
        inner = pc.binary_join(lists, ",")
        return pc.binary_join_element_wise("[" if pa.types.is_list(t) else "{", inner,
                                           "]" if pa.types.is_list(t) else "}", "")
    if pa.types.is_struct(t):
        members = [pc.binary_join_element_wise(jsonpath.dumps(t.field(i).name),
                                               pc.fill_null(json_text(pc.struct_field(arr, [i])), "null"), ":")
                   for i in range(t.num_fields)]
        inner = pc.binary_join_element_wise(*members, ",") if members else pa.scalar("")
        out = pc.binary_join_element_wise("{", inner, "}", "")
        return pc.if_else(pc.is_valid(arr), out, pa.scalar(None, pa.string()))
    raise EvaluationError(f"cannot write {t} as JSON")


def _join_present(parts: list[Value], sep: str) -> Value:
    """The non-NULL parts joined by ``sep`` ('' when all are NULL, or there are none)."""
    if not parts:
        return pa.scalar("", pa.string())
    return concat_ws(pa.scalar(sep), *parts)


def json_object(*args: Any) -> Value:
    """JSON_OBJECT(KEY k VALUE v, ...): ``args`` are the values, then the keys, the per-value flag
    "is JSON already" and whether NULL values are kept (NULL ON NULL) or left out (ABSENT ON NULL)."""
    *values, keys, raw, keep_null = args
    from clink.runtime import jsonpath

    members = []
    for value, key, is_raw in zip(values, keys, raw, strict=True):
        text = value if is_raw else json_text(value)
        if keep_null:
            text = pc.fill_null(text, "null") if not isinstance(text, pa.Scalar) else (
                text if text.is_valid else pa.scalar("null"))
        members.append(pc.binary_join_element_wise(jsonpath.dumps(key) + ":", text, ""))
    inner = _join_present(members, ",")
    return pc.binary_join_element_wise("{", inner, "}", "")


def json_array(*args: Any) -> Value:
    """JSON_ARRAY(v, ...): ``args`` are the values, then the per-value flag "is JSON already" and
    whether NULL values are kept (NULL ON NULL) or left out (ABSENT ON NULL)."""
    *values, raw, keep_null = args
    elements = []
    for value, is_raw in zip(values, raw, strict=True):
        text = value if is_raw else json_text(value)
        if keep_null:
            text = pc.fill_null(text, "null") if not isinstance(text, pa.Scalar) else (
                text if text.is_valid else pa.scalar("null"))
        elements.append(text)
    inner = _join_present(elements, ",")
    return pc.binary_join_element_wise("[", inner, "]", "")
