"""A typed binary codec for state keys and values: Arrow-typed Python values to bytes and back.

The Arrow type, not the bytes, says what a value is: a blob carries no type tags, so it can only
be read back with the type it was written with (the backends store each state's types next to
its data). Nothing here can build an object of a type the declared Arrow type does not name,
which is why this exists instead of pickle.

Format version 1 (``FORMAT_VERSION``). Every value starts with a presence byte, ``0x00`` for
NULL (nothing follows) or ``0x01``, then the payload for its type:

==============================  ===============================================================
Arrow type                      payload
==============================  ===============================================================
bool                            1 byte, 0 or 1
int8 … int64, uint8 … uint64    the integer, little-endian, the type's width
float16 / float32 / float64     IEEE 754, little-endian
decimal32 … decimal256          the unscaled integer, two's complement little-endian, byte width
date32 / date64                 days (int32) / milliseconds (int64) since 1970-01-01
timestamp, time, duration       the stored integer in the type's unit (int32 or int64); for a
                                timestamp with a time zone, counted from the epoch in UTC
string, binary (+ large, view)  length (unsigned LEB128), then the UTF-8 text / the bytes
fixed_size_binary               the bytes
list, large_list, list_view     element count (unsigned LEB128), then each element
fixed_size_list                 each element
map                             entry count (LEB128), then key and value of each entry
struct                          each field, in declared order
null                            nothing (the presence byte is always 0x00)
dictionary                      as the dictionary's value type
==============================  ===============================================================

Elements and fields carry their own presence byte, so NULLs nest. With ``canonical=True`` (used
for keys) values that compare equal encode equally: ``-0.0`` as ``0.0`` and every NaN alike, so a
key's bytes can be compared instead of the key.

Python values are the ones ``pyarrow`` produces with ``to_pylist()``, except that a value of a
nanosecond temporal type (timestamp, time64 or duration in ``ns``) is an ``int`` count of
nanoseconds, because ``datetime`` cannot hold nanoseconds; ``to_pylist`` below converts an array
that way. A map is a list of ``(key, value)`` tuples, a struct a ``dict``.

>>> decode(encode([1, None, 3], pa.list_(pa.int32())), pa.list_(pa.int32()))
[1, None, 3]
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

__all__ = [
    "FORMAT_VERSION",
    "decode",
    "decode_many",
    "decoder",
    "encode",
    "encode_many",
    "encoder",
    "python_type",
    "row_decoder",
    "row_encoder",
    "rows_encoder",
    "to_pylist",
]

#: Bumped whenever the byte layout changes; stored with every durable state.
FORMAT_VERSION = 1

Writer = Callable[[bytearray, object], None]
Reader = Callable[[bytes, int], tuple[object, int]]

_NULL = b"\x00"
_PRESENT = 1
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE_ORDINAL = dt.date(1970, 1, 1).toordinal()
_ONE_US = dt.timedelta(microseconds=1)
_US_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}
_CANONICAL_NAN = {8: struct.pack("<d", math.nan), 4: struct.pack("<f", math.nan), 2: struct.pack("<e", math.nan)}
#: Enough digits for decimal256 and its scale, so scaling never rounds.
_DECIMAL_CONTEXT = decimal.Context(prec=160, Emax=10_000, Emin=-10_000)


# -- public API -----------------------------------------------------------------------------------


def encoder(type: pa.DataType, *, canonical: bool = False) -> Callable[[object], bytes]:
    """A function that encodes one Python value of Arrow type ``type`` (or None) to bytes.

    Build it once per type and reuse it: the work of inspecting the type is done here.
    Raises ``TypeError`` for a type the format does not cover, and ``ValueError``/``TypeError``
    from the returned function for a value that does not fit the type.
    """
    write = _writer(type, canonical)

    def encode_one(value: object) -> bytes:
        out = bytearray()
        write(out, value)
        return bytes(out)

    return encode_one


def decoder(type: pa.DataType) -> Callable[[bytes], object]:
    """A function that decodes bytes written by ``encoder(type)`` back to a Python value.

    Raises ``ValueError`` if the bytes are truncated or longer than one value.
    """
    read = _reader(type)

    def decode_one(data: bytes) -> object:
        try:
            value, end = read(data, 0)
        except (IndexError, struct.error) as e:
            raise ValueError(f"truncated {type} value in state ({len(data)} bytes)") from e
        if end != len(data):
            raise ValueError(f"{len(data) - end} unexpected bytes after a {type} value in state")
        return value

    return decode_one


def row_encoder(types: Sequence[pa.DataType], *, canonical: bool = False) -> Callable[[Sequence[object]], bytes]:
    """A function that encodes a tuple of values, one per type, as the values one after another
    (the layout of a struct's fields, without the struct's presence byte). Keys use this."""
    writers = [_writer(t, canonical) for t in types]

    def encode_row(values: Sequence[object]) -> bytes:
        out = bytearray()
        for write, value in zip(writers, values, strict=True):
            write(out, value)
        return bytes(out)

    return encode_row


def rows_encoder(types: Sequence[pa.DataType], *, canonical: bool = False
                 ) -> Callable[[Sequence[Sequence[object]]], tuple[np.ndarray, np.ndarray] | None] | None:
    """For fixed-width types only, a function that encodes whole columns at once: given one
    sequence of Python values per type, all of one length n, it returns ``(rows, nulls)``, an
    ``(n, width)`` uint8 matrix whose row i holds the bytes ``row_encoder(types)`` gives row i,
    and a boolean array of the rows with a NULL (None) in any column, whose matrix rows are not
    that encoding (a NULL's encoding is shorter) and must not be used.

    None (no such function) unless every type is bool, an integer or float64; the function
    returns None for columns holding a value of another Python type than ``to_pylist`` gives
    (say a float in an integer column) or out of the type's range: the caller then encodes row
    by row, which raises the usual error for a bad value.

    >>> rows, nulls = rows_encoder([pa.int8()])([[1, None]])
    >>> rows[0].tobytes() == row_encoder([pa.int8()])((1,)), nulls.tolist()
    (True, [False, True])
    """
    fields = []
    for t in types:
        if pa.types.is_boolean(t):
            fields.append((t, bool, np.dtype(np.uint8), 1))
        elif pa.types.is_integer(t):
            fields.append((t, int, np.dtype(t.to_pandas_dtype()).newbyteorder("<"), t.bit_width // 8))
        elif pa.types.is_float64(t):
            fields.append((t, float, np.dtype("<f8"), 8))
        else:
            return None
    width = sum(1 + w for *_, w in fields)
    nan = np.frombuffer(_CANONICAL_NAN[8], "<f8")[0]

    def encode_rows(columns: Sequence[Sequence[object]]) -> tuple[np.ndarray, np.ndarray] | None:
        n = len(columns[0]) if columns else 0
        out = np.empty((n, width), np.uint8)
        nulls = np.zeros(n, bool)
        pos = 0
        for (t, kind, dtype, w), column in zip(fields, columns, strict=True):
            if len(column) != n or not set(map(type, column)) <= {kind, type(None)}:
                return None
            try:
                array = pa.array(column, type=t)
            except (pa.ArrowException, OverflowError, TypeError, ValueError):
                return None
            if array.null_count:
                nulls |= np.asarray(array.is_null())
                array = array.fill_null(False if kind is bool else 0)
            values = np.asarray(array).astype(dtype, copy=False)
            if kind is float and canonical:
                values = np.where(np.isnan(values), nan, values + 0.0)  # -0.0 + 0.0 is 0.0
            out[:, pos] = _PRESENT
            out[:, pos + 1:pos + 1 + w] = np.ascontiguousarray(values).view(np.uint8).reshape(n, w)
            pos += 1 + w
        return out, nulls

    return encode_rows


def row_decoder(types: Sequence[pa.DataType]) -> Callable[[bytes], tuple[object, ...]]:
    """The inverse of ``row_encoder(types)``."""
    readers = [_reader(t) for t in types]

    def decode_row(data: bytes) -> tuple[object, ...]:
        pos = 0
        values = []
        try:
            for read in readers:
                value, pos = read(data, pos)
                values.append(value)
        except (IndexError, struct.error) as e:
            raise ValueError(f"truncated key in state ({len(data)} bytes)") from e
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} unexpected bytes after a key in state")
        return tuple(values)

    return decode_row


def encode(value: object, type: pa.DataType, *, canonical: bool = False) -> bytes:
    """Encode one value of Arrow type ``type``.

    >>> encode(None, pa.int64()), encode(1, pa.int8())
    (b'\\x00', b'\\x01\\x01')
    """
    return encoder(type, canonical=canonical)(value)


def decode(data: bytes, type: pa.DataType) -> object:
    """Decode one value of Arrow type ``type`` written by ``encode``."""
    return decoder(type)(data)


def encode_many(array: pa.Array | pa.ChunkedArray, *, canonical: bool = False) -> list[bytes]:
    """Encode each value of ``array`` (NULLs included), in order."""
    enc = encoder(array.type, canonical=canonical)
    return [enc(v) for v in to_pylist(array)]


def decode_many(blobs: Sequence[bytes | None], type: pa.DataType) -> pa.Array:
    """An Arrow array of ``type`` from encoded values; a ``None`` blob is a NULL."""
    dec = decoder(type)
    return from_pylist([None if b is None else dec(b) for b in blobs], type)


def python_type(type: pa.DataType) -> pa.DataType:
    """The Arrow type whose ``to_pylist`` gives this module's Python values for ``type``:
    ``type`` with every nanosecond temporal type replaced by int64."""
    if _is_nanos(type):
        return pa.int64()
    if pa.types.is_dictionary(type):
        return python_type(type.value_type)
    if pa.types.is_struct(type):
        return pa.struct([f.with_type(python_type(f.type)) for f in type])
    if pa.types.is_map(type):
        return pa.map_(python_type(type.key_type), python_type(type.item_type))
    if pa.types.is_fixed_size_list(type):
        return pa.list_(python_type(type.value_type), type.list_size)
    if pa.types.is_large_list(type):
        return pa.large_list(python_type(type.value_type))
    if pa.types.is_list(type) or pa.types.is_list_view(type) or pa.types.is_large_list_view(type):
        return pa.list_(python_type(type.value_type))
    return type


def to_pylist(array: pa.Array | pa.ChunkedArray) -> list:
    """``array.to_pylist()`` with nanosecond temporal values as ints (see the module docstring)."""
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    target = python_type(array.type)
    if target != array.type:
        array = array.cast(target)
    return array.to_pylist()


def from_pylist(values: list, type: pa.DataType) -> pa.Array:
    """The inverse of ``to_pylist``: an Arrow array of ``type`` from this module's Python values."""
    target = python_type(type)
    array = pa.array(values, type=target)
    return array if target == type else array.cast(type)


# -- writers --------------------------------------------------------------------------------------


def _unsupported(type: pa.DataType) -> TypeError:
    return TypeError(f"state cannot hold values of type {type}: use numbers, strings, binary, "
                     "decimals, dates, times, timestamps, durations, or lists/structs/maps of them")


def _is_nanos(type: pa.DataType) -> bool:
    return ((pa.types.is_timestamp(type) or pa.types.is_time64(type) or pa.types.is_duration(type))
            and type.unit == "ns")


def _fixed(fmt: str) -> Writer:
    pack = struct.Struct("<" + fmt).pack

    def write(out: bytearray, value: object) -> None:
        if value is None:
            out += _NULL
        else:
            out.append(_PRESENT)
            out += pack(value)

    return write


def _write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    n, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


def _float_writer(width: int, canonical: bool) -> Writer:
    fmt = {8: "d", 4: "f", 2: "e"}[width]
    pack = struct.Struct("<" + fmt).pack
    nan = _CANONICAL_NAN[width]

    def write(out: bytearray, value: object) -> None:
        if value is None:
            out += _NULL
            return
        out.append(_PRESENT)
        if canonical:
            if math.isnan(value):  # type: ignore[arg-type]
                out += nan
                return
            value = value + 0.0  # -0.0 + 0.0 is 0.0
        out += pack(value)

    return write


def _int_like(value: object, to_int: Callable[[object], int]) -> int:
    return value if type(value) is int else to_int(value)


def _timestamp_to_int(unit: str) -> Callable[[object], int]:
    per_unit = _US_PER_UNIT.get(unit)

    def convert(value: object) -> int:
        if not isinstance(value, dt.datetime):
            raise TypeError(f"expected a datetime or an int for timestamp[{unit}], got {value!r}")
        if per_unit is None:
            raise TypeError(f"a timestamp[ns] value is an int of nanoseconds, got {value!r}")
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        micros = (value - _EPOCH) // _ONE_US
        return micros // per_unit  # floor, as Arrow's cast of a datetime does

    return convert


def _duration_to_int(unit: str) -> Callable[[object], int]:
    per_unit = _US_PER_UNIT.get(unit)

    def convert(value: object) -> int:
        if not isinstance(value, dt.timedelta) or per_unit is None:
            raise TypeError(f"expected a timedelta (or an int) for duration[{unit}], got {value!r}")
        return (value // _ONE_US) // per_unit

    return convert


def _time_to_int(unit: str) -> Callable[[object], int]:
    per_unit = _US_PER_UNIT.get(unit)

    def convert(value: object) -> int:
        if not isinstance(value, dt.time) or per_unit is None:
            raise TypeError(f"expected a time (or an int) for time[{unit}], got {value!r}")
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
        return micros // per_unit

    return convert


def _date_to_days(value: object) -> int:
    if not isinstance(value, dt.date):
        raise TypeError(f"expected a date (or an int of days) for date32, got {value!r}")
    return value.toordinal() - _EPOCH_DATE_ORDINAL


def _converted(fmt: str, to_int: Callable[[object], int]) -> Writer:
    pack = struct.Struct("<" + fmt).pack

    def write(out: bytearray, value: object) -> None:
        if value is None:
            out += _NULL
        else:
            out.append(_PRESENT)
            out += pack(_int_like(value, to_int))

    return write


def _decimal_writer(type: pa.DataType) -> Writer:
    width, scale, precision = type.byte_width, type.scale, type.precision

    def write(out: bytearray, value: object) -> None:
        if value is None:
            out += _NULL
            return
        if not isinstance(value, (decimal.Decimal, int)):
            raise TypeError(f"expected a Decimal for {type}, got {value!r}")
        scaled = _DECIMAL_CONTEXT.scaleb(decimal.Decimal(value), scale)
        unscaled = int(scaled)
        if scaled != unscaled:
            raise ValueError(f"{value} has more than {scale} digits after the point for {type}")
        if len(str(abs(unscaled))) > precision:
            raise ValueError(f"{value} does not fit {type}")
        out.append(_PRESENT)
        out += unscaled.to_bytes(width, "little", signed=True)

    return write


def _bytes_writer(is_text: bool) -> Writer:
    def write(out: bytearray, value: object) -> None:
        if value is None:
            out += _NULL
            return
        data = value.encode() if is_text else bytes(value)  # type: ignore[union-attr, arg-type]
        out.append(_PRESENT)
        _write_uvarint(out, len(data))
        out += data

    return write


def _fixed_binary_writer(width: int) -> Writer:
    def write(out: bytearray, value: object) -> None:
        if value is None:
            out += _NULL
            return
        data = bytes(value)  # type: ignore[arg-type]
        if len(data) != width:
            raise ValueError(f"expected {width} bytes for fixed_size_binary({width}), got {len(data)}")
        out.append(_PRESENT)
        out += data

    return write


def _list_writer(element: Writer, size: int | None) -> Writer:
    def write(out: bytearray, value: object) -> None:
        if value is None:
            out += _NULL
            return
        items = list(value)  # type: ignore[call-overload]
        out.append(_PRESENT)
        if size is None:
            _write_uvarint(out, len(items))
        elif len(items) != size:
            raise ValueError(f"expected a list of {size} elements, got {len(items)}")
        for item in items:
            element(out, item)

    return write


def _map_writer(key: Writer, item: Writer) -> Writer:
    def write(out: bytearray, value: object) -> None:
        if value is None:
            out += _NULL
            return
        entries = list(value.items()) if isinstance(value, dict) else list(value)  # type: ignore[call-overload]
        out.append(_PRESENT)
        _write_uvarint(out, len(entries))
        for k, v in entries:
            key(out, k)
            item(out, v)

    return write


def _struct_writer(names: list[str], fields: list[Writer]) -> Writer:
    pairs = list(zip(names, fields, strict=True))

    def write(out: bytearray, value: object) -> None:
        if value is None:
            out += _NULL
            return
        if not isinstance(value, dict):
            raise TypeError(f"expected a dict with fields {names} for a struct, got {value!r}")
        out.append(_PRESENT)
        for name, field in pairs:
            field(out, value.get(name))

    return write


def _write_null(out: bytearray, value: object) -> None:
    if value is not None:
        raise TypeError(f"a value of type null must be None, got {value!r}")
    out += _NULL


_INT_FORMATS = {(8, True): "b", (16, True): "h", (32, True): "i", (64, True): "q",
                (8, False): "B", (16, False): "H", (32, False): "I", (64, False): "Q"}


def _writer(t: pa.DataType, canonical: bool) -> Writer:
    types = pa.types
    if types.is_boolean(t):
        return _fixed("?")
    if types.is_integer(t):
        return _fixed(_INT_FORMATS[(t.bit_width, types.is_signed_integer(t))])
    if types.is_floating(t):
        return _float_writer(t.bit_width // 8, canonical)
    if types.is_decimal(t):
        return _decimal_writer(t)
    if types.is_date32(t):
        return _converted("i", _date_to_days)
    if types.is_date64(t):
        return _converted("q", lambda v: _date_to_days(v) * 86_400_000)
    if types.is_timestamp(t):
        return _converted("q", _timestamp_to_int(t.unit))
    if types.is_time32(t):
        return _converted("i", _time_to_int(t.unit))
    if types.is_time64(t):
        return _converted("q", _time_to_int(t.unit))
    if types.is_duration(t):
        return _converted("q", _duration_to_int(t.unit))
    if types.is_string(t) or types.is_large_string(t) or types.is_string_view(t):
        return _bytes_writer(True)
    if types.is_binary(t) or types.is_large_binary(t) or types.is_binary_view(t):
        return _bytes_writer(False)
    if types.is_fixed_size_binary(t):
        return _fixed_binary_writer(t.byte_width)
    if types.is_map(t):
        return _map_writer(_writer(t.key_type, canonical), _writer(t.item_type, canonical))
    if types.is_fixed_size_list(t):
        return _list_writer(_writer(t.value_type, canonical), t.list_size)
    if types.is_list(t) or types.is_large_list(t) or types.is_list_view(t) or types.is_large_list_view(t):
        return _list_writer(_writer(t.value_type, canonical), None)
    if types.is_struct(t):
        return _struct_writer([f.name for f in t], [_writer(f.type, canonical) for f in t])
    if types.is_dictionary(t):
        return _writer(t.value_type, canonical)
    if types.is_null(t):
        return _write_null
    raise _unsupported(t)


# -- readers --------------------------------------------------------------------------------------


def _fixed_reader(fmt: str, convert: Callable[[object], object] | None = None) -> Reader:
    s = struct.Struct("<" + fmt)
    unpack, size = s.unpack_from, s.size

    def read(data: bytes, pos: int) -> tuple[object, int]:
        if data[pos] == 0:
            return None, pos + 1
        (value,) = unpack(data, pos + 1)
        return (value if convert is None else convert(value)), pos + 1 + size

    return read


def _timestamp_from_int(t: pa.DataType) -> Callable[[object], object] | None:
    if t.unit == "ns":
        return None
    if t.tz is not None:
        # Time-zone objects are pyarrow's business; this path is rare enough to go through it.
        return lambda v: pa.scalar(v, type=t).as_py()
    per_unit = _US_PER_UNIT[t.unit]
    return lambda v: _EPOCH + dt.timedelta(microseconds=v * per_unit)  # type: ignore[operator]


def _duration_from_int(unit: str) -> Callable[[object], object] | None:
    if unit == "ns":
        return None
    per_unit = _US_PER_UNIT[unit]
    return lambda v: dt.timedelta(microseconds=v * per_unit)  # type: ignore[operator]


def _time_from_int(unit: str) -> Callable[[object], object] | None:
    if unit == "ns":
        return None
    per_unit = _US_PER_UNIT[unit]

    def convert(v: object) -> dt.time:
        seconds, micros = divmod(v * per_unit, 1_000_000)  # type: ignore[operator]
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        return dt.time(hour, minute, second, micros)

    return convert


def _decimal_reader(type: pa.DataType) -> Reader:
    width, scale = type.byte_width, type.scale

    def read(data: bytes, pos: int) -> tuple[object, int]:
        if data[pos] == 0:
            return None, pos + 1
        end = pos + 1 + width
        if end > len(data):
            raise IndexError("truncated decimal")
        unscaled = int.from_bytes(data[pos + 1:end], "little", signed=True)
        return _DECIMAL_CONTEXT.scaleb(decimal.Decimal(unscaled), -scale), end

    return read


def _bytes_reader(is_text: bool) -> Reader:
    def read(data: bytes, pos: int) -> tuple[object, int]:
        if data[pos] == 0:
            return None, pos + 1
        n, pos = _read_uvarint(data, pos + 1)
        end = pos + n
        if end > len(data):
            raise IndexError("truncated string")
        chunk = data[pos:end]
        return (chunk.decode() if is_text else bytes(chunk)), end

    return read


def _fixed_binary_reader(width: int) -> Reader:
    def read(data: bytes, pos: int) -> tuple[object, int]:
        if data[pos] == 0:
            return None, pos + 1
        end = pos + 1 + width
        if end > len(data):
            raise IndexError("truncated binary")
        return bytes(data[pos + 1:end]), end

    return read


def _list_reader(element: Reader, size: int | None) -> Reader:
    def read(data: bytes, pos: int) -> tuple[object, int]:
        if data[pos] == 0:
            return None, pos + 1
        pos += 1
        if size is None:
            n, pos = _read_uvarint(data, pos)
        else:
            n = size
        items = []
        for _ in range(n):
            item, pos = element(data, pos)
            items.append(item)
        return items, pos

    return read


def _map_reader(key: Reader, item: Reader) -> Reader:
    def read(data: bytes, pos: int) -> tuple[object, int]:
        if data[pos] == 0:
            return None, pos + 1
        n, pos = _read_uvarint(data, pos + 1)
        entries = []
        for _ in range(n):
            k, pos = key(data, pos)
            v, pos = item(data, pos)
            entries.append((k, v))
        return entries, pos

    return read


def _struct_reader(names: list[str], fields: list[Reader]) -> Reader:
    pairs = list(zip(names, fields, strict=True))

    def read(data: bytes, pos: int) -> tuple[object, int]:
        if data[pos] == 0:
            return None, pos + 1
        pos += 1
        value = {}
        for name, field in pairs:
            value[name], pos = field(data, pos)
        return value, pos

    return read


def _read_null(data: bytes, pos: int) -> tuple[object, int]:
    if data[pos] != 0:
        raise ValueError("a value of type null must be NULL")
    return None, pos + 1


def _days_to_date(v: object) -> dt.date:
    return dt.date.fromordinal(v + _EPOCH_DATE_ORDINAL)  # type: ignore[operator]


def _reader(t: pa.DataType) -> Reader:
    types = pa.types
    if types.is_boolean(t):
        return _fixed_reader("?")
    if types.is_integer(t):
        return _fixed_reader(_INT_FORMATS[(t.bit_width, types.is_signed_integer(t))])
    if types.is_floating(t):
        return _fixed_reader({64: "d", 32: "f", 16: "e"}[t.bit_width])
    if types.is_decimal(t):
        return _decimal_reader(t)
    if types.is_date32(t):
        return _fixed_reader("i", _days_to_date)
    if types.is_date64(t):
        return _fixed_reader("q", lambda v: _days_to_date(v // 86_400_000))  # type: ignore[operator]
    if types.is_timestamp(t):
        return _fixed_reader("q", _timestamp_from_int(t))
    if types.is_time32(t):
        return _fixed_reader("i", _time_from_int(t.unit))
    if types.is_time64(t):
        return _fixed_reader("q", _time_from_int(t.unit))
    if types.is_duration(t):
        return _fixed_reader("q", _duration_from_int(t.unit))
    if types.is_string(t) or types.is_large_string(t) or types.is_string_view(t):
        return _bytes_reader(True)
    if types.is_binary(t) or types.is_large_binary(t) or types.is_binary_view(t):
        return _bytes_reader(False)
    if types.is_fixed_size_binary(t):
        return _fixed_binary_reader(t.byte_width)
    if types.is_map(t):
        return _map_reader(_reader(t.key_type), _reader(t.item_type))
    if types.is_fixed_size_list(t):
        return _list_reader(_reader(t.value_type), t.list_size)
    if types.is_list(t) or types.is_large_list(t) or types.is_list_view(t) or types.is_large_list_view(t):
        return _list_reader(_reader(t.value_type), None)
    if types.is_struct(t):
        return _struct_reader([f.name for f in t], [_reader(f.type) for f in t])
    if types.is_dictionary(t):
        return _reader(t.value_type)
    if types.is_null(t):
        return _read_null
    raise _unsupported(t)
