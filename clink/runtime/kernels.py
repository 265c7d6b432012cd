"""Vectorized helpers that generated code calls as ``K.<name>``.

Each one gives SQL semantics where ``pyarrow.compute`` alone does not: NULL instead of an error
on division by zero, 1-based string positions, three-valued IN, casts that fail with the value
that did not convert. All work on whole arrays (or scalars); none loops over rows except on an
error path.
"""

from __future__ import annotations

import decimal
import functools
import re
from typing import Any

import numpy as np
import pyarrow as pa

from clink.errors import EvaluationError
from clink.runtime import compute as pc
from clink.runtime.context import TaskContext
from clink.runtime.memo import ValueMemo
from clink.runtime.timezone import epoch_ms, from_local, local_ms, to_local

Value = pa.Array | pa.ChunkedArray | pa.Scalar

def filter(batch: pa.RecordBatch, keep: Value, used: tuple[int, ...] | None = None,  # noqa: A001
           fields: dict[int, tuple[int, ...]] | None = None) -> pa.RecordBatch:
    """Rows of ``batch`` where ``keep`` is TRUE (FALSE and NULL drop the row).

    ``used``: the only columns the caller reads afterwards; the others come back as NULLs of the
    right length instead of being filtered (a wide row type, such as a ROW of strings, costs
    several times more to filter than the fields read from it). ``fields``: of a ROW column in
    ``used``, the only fields read afterwards; its other fields become NULLs likewise."""
    if isinstance(keep, pa.Scalar):
        return batch if keep.is_valid and keep.as_py() else batch.slice(0, 0)
    if keep.null_count == 0 and pc.all(keep).as_py():
        return batch
    if used is None or len(used) == batch.num_columns:
        return pc.filter(batch, keep, null_selection_behavior="drop")
    fields = fields or {}
    columns = {i: _filter_fields(batch.column(i), keep, fields[i]) if i in fields else
               pc.filter(batch.column(i), keep, null_selection_behavior="drop") for i in used}
    n = len(next(iter(columns.values()))) if columns else int(pc.sum(keep).as_py() or 0)
    return pa.RecordBatch.from_arrays(
        [columns[i] if i in columns else pa.nulls(n, f.type) for i, f in enumerate(batch.schema)], schema=batch.schema)


def _filter_fields(column: pa.StructArray, keep: pa.Array, read: tuple[int, ...]) -> pa.StructArray:
    """``column`` filtered by ``keep``, with only the fields ``read`` (the others NULL)."""
    taken = {j: pc.filter(pc.struct_field(column, [j]), keep, null_selection_behavior="drop") for j in read}
    n = len(next(iter(taken.values())))
    mask = pc.invert(pc.filter(pc.is_valid(column), keep, null_selection_behavior="drop")) if column.null_count else None
    children = [taken[j] if j in taken else pa.nulls(n, f.type) for j, f in enumerate(column.type)]
    return pa.StructArray.from_arrays(children, fields=list(column.type), mask=mask)


def max_epoch_ms(values: Value) -> int | None:
    """The largest timestamp in ``values`` as milliseconds since the epoch (None if all NULL)."""
    if isinstance(values, pa.Scalar):
        values = pa.array([values.as_py()], values.type)
    top = pc.max(values)
    if not top.is_valid:
        return None
    return pc.cast(pc.cast(top, pa.timestamp("ms", tz=values.type.tz)), pa.int64()).as_py()


def broadcast(value: Value, n: int, type: pa.DataType) -> pa.Array:  # noqa: A002
    """A column of ``n`` copies of a scalar (arrays pass through)."""
    if isinstance(value, pa.Scalar):
        if value.type != type:
            value = pc.cast(value, type)
        return pa.repeat(value, n) if value.is_valid else pa.nulls(n, type)
    return value


def _interleaved(items: list[Value], n: int, type: pa.DataType) -> tuple[pa.Array, pa.Array]:  # noqa: A002
    """The items' values row by row (row 0's items, then row 1's, ...), and the list offsets."""
    k = len(items)
    columns = [broadcast(v, n, type) for v in items]
    columns = [c if c.type == type else pc.cast(c, type) for c in columns]
    order = (np.arange(k, dtype=np.int64)[None, :] * n + np.arange(n, dtype=np.int64)[:, None]).ravel()
    values = pa.concat_arrays(columns).take(pa.array(order)) if k else pa.array([], type)
    return values, pa.array(np.arange(0, (n + 1) * k, k or 1, dtype=np.int32)[: n + 1] if k else np.zeros(n + 1, np.int32))


def make_array(items: list[Value], n: int, type: pa.ListType) -> pa.Array:  # noqa: A002
    """``ARRAY[a, b, ...]`` for ``n`` rows: each row's list of its items."""
    values, offsets = _interleaved(items, n, type.value_type)
    return pa.ListArray.from_arrays(offsets, values, type=type)


def make_map(items: list[Value], n: int, type: pa.MapType) -> pa.Array:  # noqa: A002
    """``MAP[k1, v1, k2, v2, ...]`` for ``n`` rows."""
    keys, offsets = _interleaved(items[0::2], n, type.key_type)
    values, _ = _interleaved(items[1::2], n, type.item_type)
    return pa.MapArray.from_arrays(offsets, keys, values, type=type)


def make_row(items: list[Value], n: int, type: pa.StructType) -> pa.Array:  # noqa: A002
    """``ROW(a, b, ...)`` for ``n`` rows."""
    fields = list(type)
    return pa.StructArray.from_arrays([broadcast(v, n, f.type) for v, f in zip(items, fields, strict=True)],
                                      fields=fields)


def cardinality(a: Value) -> Value:
    """The number of elements of each array or map (NULL for NULL)."""
    if pa.types.is_map(a.type):
        # A map's entries are a list of (key, value): its offsets count them.
        a = a.cast(pa.list_(pa.struct([a.type.key_field, a.type.item_field]))) if isinstance(a, pa.Array) else a
    if isinstance(a, pa.Scalar):
        return pa.scalar(None if not a.is_valid else len(a), pa.int32())
    return pc.cast(pc.list_value_length(a), pa.int32())


def unnest(batch: pa.RecordBatch, column: int, ordinality: bool) -> pa.RecordBatch:
    """A row per element of the list (or map) column ``column`` (none for an empty or NULL one):
    the other columns repeated, then the element (a map's key and value), then with
    ``ordinality`` its 1-based position."""
    lists = batch.column(column)
    if pa.types.is_map(lists.type):
        lists = lists.cast(pa.list_(pa.struct([lists.type.key_field, lists.type.item_field])))
    parents = pc.list_parent_indices(lists)
    values = pc.list_flatten(lists)
    rest = batch.remove_column(column).take(parents)
    columns = list(rest.columns)
    names = list(rest.schema.names)
    if pa.types.is_struct(lists.type.value_type):
        columns += [values.field(0), values.field(1)]
        names += ["key", "value"]
    else:
        columns.append(values)
        names.append("element")
    if ordinality:
        counts = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
        starts = np.cumsum(counts) - counts
        owner = parents.to_numpy(zero_copy_only=False)
        columns.append(pa.array(np.arange(len(owner), dtype=np.int64) - starts[owner] + 1, pa.int32()))
        names.append("ordinality")
    return pa.RecordBatch.from_arrays(columns, names=names)


def move_column(batch: pa.RecordBatch, source: int, target: int) -> pa.RecordBatch:
    """``batch`` with its column ``source`` moved to place ``target`` (-1: last): how a chain keeps
    an updating stream's row kind beside a step that adds or drops columns."""
    columns, names = list(batch.columns), list(batch.schema.names)
    column, name = columns.pop(source), names.pop(source)
    target = len(columns) if target == -1 else target
    columns.insert(target, column)
    names.insert(target, name)
    return pa.RecordBatch.from_arrays(columns, names=names)


def replicate(batch: pa.RecordBatch, count: int) -> pa.RecordBatch:
    """Each row of ``batch`` as many times as its column ``count`` says (none for 0 or fewer, or
    NULL), without that column; the copies of a row are next to each other."""
    times = pc.fill_null(batch.column(count), 0).to_numpy(zero_copy_only=False)
    rest = batch.remove_column(count)
    if (times == 1).all():
        return rest
    index = np.repeat(np.arange(batch.num_rows, dtype=np.int64), np.maximum(times, 0))
    return rest.take(pa.array(index))


def pick(row: pa.Array, values: list[Value], type: pa.DataType) -> pa.Array:  # noqa: A002
    """Row ``i`` of a VALUES list gets ``values[row[i]]`` (each a scalar, or a column of which
    its row's entry is taken)."""
    if all(isinstance(v, pa.Scalar) for v in values):
        column = pa.array([v.cast(type) if v.type != type else v for v in values], type)
    else:
        n = len(row)
        column = pa.chunked_array([broadcast(v, n, type).slice(i, 1) for i, v in enumerate(values)], type)
        column = column.combine_chunks()
    return column.take(row)


def _zero_to_null(divisor: Value) -> Value:
    zero = pc.equal(divisor, pa.scalar(0, divisor.type))
    if isinstance(divisor, pa.Scalar):
        return pa.scalar(None, divisor.type) if zero.as_py() else divisor
    return pc.if_else(zero, pa.scalar(None, divisor.type), divisor)


def divide(a: Value, b: Value) -> Value:
    """``a / b``; integers truncate toward zero; division by zero is NULL."""
    b = _zero_to_null(b)
    if pa.types.is_integer(a.type):
        return pc.divide_checked(a, b)
    return pc.divide(a, b)


def mod(a: Value, b: Value) -> Value:
    """``a % b`` with the sign of ``a`` (as in SQL); modulo by zero is NULL."""
    return pc.remainder(a, _zero_to_null(b))


# ---------------------------------------------------------------- exact DECIMAL arithmetic

_WIDEST = 76  # digits of decimal256, where intermediate results are computed


def decimal_arith(op: str, a: Value, b: Value, to: pa.DataType) -> Value:
    """``a op b`` (add, subtract, multiply, divide, mod) over DECIMAL operands of any precision
    and scale, exactly, as Flink's DecimalDataUtils: the exact result (a quotient to one digit
    beyond the result's scale) rounded HALF_UP to ``to``'s scale; NULL where it does not fit
    ``to``'s precision, and for division or modulo by zero.

    Arrow's own decimal kernels want room for the widest value their input *types* allow, which
    overflows 38 (even 76) digits quickly; the operands are first narrowed to the digits their
    values really use."""
    if isinstance(a, pa.Scalar) and isinstance(b, pa.Scalar):
        return decimal_arith(op, pa.array([a.as_py()], a.type), pa.array([b.as_py()], b.type), to)[0]
    if op in ("add", "subtract", "multiply"):
        fast = _int64_decimal_arith(op, a, b, to)
        if fast is not None:
            return fast
    n = len(a) if not isinstance(a, pa.Scalar) else len(b)
    a, b = _tight(a, n), _tight(b, n)
    try:
        return _decimal_arrow(op, a, b, to)
    except pa.ArrowInvalid as exc:
        if "precision out of range" not in str(exc):
            raise
        # The exact result needs more than decimal256's 76 digits (DECIMAL(37, 37) * DECIMAL(37,
        # 37) has 74 after the point): computed per row with Python's decimal, which has no bound.
        return _decimal_python(op, a, b, to)


def _decimal_arrow(op: str, a: pa.Array, b: pa.Array, to: pa.DataType) -> pa.Array:
    if op in ("divide", "mod"):
        zero = pc.fill_null(pc.equal(b, pa.scalar(0, b.type)), False)
        b = pc.if_else(zero, pa.scalar(1, b.type), b)
    if op == "add":
        out = pc.add(a, b)
    elif op == "subtract":
        out = pc.subtract(a, b)
    elif op == "multiply":
        out = pc.multiply(a, b)
    else:
        # Arrow's quotient has a scale of at least the dividend's + 1 and truncates: with the
        # dividend at the result's scale, one more digit is there to round HALF_UP from.
        want = max(a.type.scale, to.scale if pa.types.is_decimal(to) else 0)
        a = pc.cast(a, pa.decimal256(min(_WIDEST, a.type.precision - a.type.scale + want), want))
        out = pc.divide(a, b)
        if op == "mod":
            whole = pc.cast(out, pa.decimal256(max(1, out.type.precision - out.type.scale), 0), safe=False)
            out = pc.subtract(a, pc.multiply(_tight(whole, len(whole)), b))
        out = pc.if_else(zero, pa.scalar(None, out.type), out)
    return fit_decimal(out, to)


def _decimal_python(op: str, a: pa.Array, b: pa.Array, to: pa.DataType) -> pa.Array:
    """``decimal_arith`` one row at a time, exactly: for results wider than Arrow's decimals."""
    scale = to.scale if pa.types.is_decimal(to) else 0
    quantum = decimal.Decimal(1).scaleb(-scale)
    limit = decimal.Decimal(10) ** ((to.precision - scale) if pa.types.is_decimal(to) else 18)
    out = []
    with decimal.localcontext() as context:
        context.prec = 400
        for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True):
            if x is None or y is None or (op in ("divide", "mod") and y == 0):
                out.append(None)
                continue
            if op == "add":
                r = x + y
            elif op == "subtract":
                r = x - y
            elif op == "multiply":
                r = x * y
            elif op == "divide":
                r = x / y
            else:
                r = x - y * (x / y).to_integral_value(rounding=decimal.ROUND_DOWN)
            r = r.quantize(quantum, rounding=decimal.ROUND_HALF_UP)
            out.append(r if abs(r) < limit else None)
    if pa.types.is_decimal(to):
        return pa.array(out, to)
    return pa.array([None if v is None else int(v) for v in out], to)


_INT64_ROOM = 1 << 62


def _unscaled(x: Value) -> tuple[np.ndarray | int, pa.Buffer | None, int] | None:
    """The unscaled values of a DECIMAL array (or scalar) as int64, its validity bitmap and its
    scale; None where a value does not fit in an int64."""
    if isinstance(x, pa.Scalar):
        if not x.is_valid:
            return None
        value = int(x.as_py().scaleb(x.type.scale))
        return (value, None, x.type.scale) if abs(value) < _INT64_ROOM else None
    if isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks()
    if x.type.byte_width != 16 or x.offset:
        return None
    words = np.frombuffer(x.buffers()[1], dtype=np.int64, count=2 * len(x)).reshape(-1, 2)
    low, high = words[:, 0], words[:, 1]
    if not np.array_equal(high, low >> 63):
        return None  # some value needs more than 64 bits
    return low, x.buffers()[0], x.type.scale


def _int64_decimal_arith(op: str, a: Value, b: Value, to: pa.DataType) -> pa.Array | None:
    """``a op b`` for DECIMAL operands whose unscaled values fit in an int64 and whose exact
    result needs no rounding (+, - at the larger scale, * at the sum of the scales): computed on
    the unscaled integers with numpy, two orders of magnitude faster than through decimal256.
    None where it does not apply (the caller takes the general path)."""
    if not pa.types.is_decimal128(to) or to.precision > 38:
        return None
    ua, ub = _unscaled(a), _unscaled(b)
    if ua is None or ub is None:
        return None
    (va, mask_a, sa), (vb, mask_b, sb) = ua, ub
    big_a, big_b = np.abs(va).max(initial=0), np.abs(vb).max(initial=0)
    if op == "multiply":
        if to.scale != sa + sb or float(big_a) * float(big_b) >= _INT64_ROOM:
            return None
        out = np.multiply(va, vb, dtype=np.int64)
    else:
        scale = max(sa, sb)
        fa, fb = 10 ** (scale - sa), 10 ** (scale - sb)
        if (to.scale != scale or max(fa, fb) >= _INT64_ROOM
                or float(big_a) * fa + float(big_b) * fb >= _INT64_ROOM):
            return None
        va, vb = np.multiply(va, fa, dtype=np.int64), np.multiply(vb, fb, dtype=np.int64)
        out = va + vb if op == "add" else va - vb
    out = np.asarray(out, dtype=np.int64)
    if out.ndim == 0:
        return None
    n = len(out)
    validity = None
    if mask_a is not None or mask_b is not None:
        valid = np.ones(n, dtype=bool)
        for x in (a, b):
            if not isinstance(x, pa.Scalar) and x.null_count:
                valid &= pc.is_valid(x).to_numpy(zero_copy_only=False)
        if not valid.all():
            validity = pa.array(valid).buffers()[1]
    if to.precision < 19:
        # A result beyond the type's precision is NULL, as in Flink.
        too_big = np.abs(out) >= 10 ** to.precision
        if too_big.any():
            return None
    words = np.empty((n, 2), dtype=np.int64)
    words[:, 0] = out
    words[:, 1] = out >> 63
    return pa.Array.from_buffers(to, n, [validity, pa.py_buffer(words)])


def _tight(x: Value, n: int) -> pa.Array:
    """``x`` (a DECIMAL array or scalar) as decimal256 with no more digits than its values use."""
    if isinstance(x, pa.Scalar):
        x = pa.array([x.as_py()] * n, x.type)
    elif isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks()
    scale = x.type.scale
    biggest = pc.max(pc.abs(x)).as_py()
    whole = max(1, biggest.adjusted() + 1) if biggest else 1
    return pc.cast(x, pa.decimal256(min(_WIDEST, whole + scale), scale))


def fit_decimal(x: Value, to: pa.DataType) -> Value:
    """A DECIMAL ``x`` as ``to`` (a DECIMAL, or an integer for ``%`` of whole numbers): rounded
    HALF_UP (halves away from zero) to its scale, NULL where the value does not fit."""
    scale = to.scale if pa.types.is_decimal(to) else 0
    whole = to.precision - scale if pa.types.is_decimal(to) else len(str(np.iinfo(to.to_pandas_dtype()).max)) - 1
    if x.type.scale > scale:
        x = pc.round(x, scale, round_mode="half_towards_infinity")
    if x.type.precision - x.type.scale > whole:
        limit = pa.scalar(decimal.Decimal(10) ** whole, pa.decimal256(whole + 1 + x.type.scale, x.type.scale))
        too_big = pc.fill_null(pc.greater_equal(pc.abs(x), limit), False)
        x = pc.if_else(too_big, pa.scalar(None, x.type), x)
    if pa.types.is_decimal(to):
        return pc.cast(pc.cast(x, pa.decimal256(_WIDEST, scale)), to) if x.type.scale != scale else pc.cast(x, to)
    return pc.cast(x, to, safe=False)


def date_add(date: Value, interval: Value, subtract: bool = False) -> Value:
    """DATE ± a day-time interval, as a DATE (a part day rounds down to the day before)."""
    ts = pc.cast(date, pa.timestamp("ms"))
    delta = pc.cast(interval, pa.duration("ms")) if interval.type != pa.duration("ms") else interval
    moved = pc.subtract(ts, delta) if subtract else pc.add(ts, delta)
    return pc.cast(pc.floor_temporal(moved, unit="day"), pa.date32())


_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}


def time_add(time: Value, interval: Value, subtract: bool = False) -> Value:
    """TIME ± a day-time interval, as Flink computes it: the time of day moved and wrapped around
    midnight (``TIME '23:00:00' + INTERVAL '2' HOUR`` is 01:00:00). A part of the interval finer
    than the TIME's precision is dropped."""
    unit = time.type.unit
    day = _DAY[unit]
    as_int = pa.int32() if pa.types.is_time32(time.type) else pa.int64()
    t = pc.cast(pc.cast(time, as_int), pa.int64())
    d = pc.cast(pc.cast(interval, pa.duration(unit), safe=False), pa.int64())
    # Integer division truncates toward zero: d - (d / day) * day keeps d's sign, |d| < day.
    d = pc.subtract(d, pc.multiply(pc.divide(d, day), day))
    moved = pc.subtract(t, d) if subtract else pc.add(t, d)  # now in (-day, 2 * day)
    moved = pc.if_else(pc.less(moved, 0), pc.add(moved, day),
                       pc.if_else(pc.greater_equal(moved, day), pc.subtract(moved, day), moved))
    return pc.cast(pc.cast(moved, as_int), time.type)


def interval_multiply(a: Value, b: Value) -> Value:
    ms = pc.multiply(pc.cast(a, pa.int64()), b)
    return pc.cast(pc.cast(pc.round(ms), pa.int64()), a.type)


def interval_divide(a: Value, b: Value) -> Value:
    ms = divide(pc.cast(pc.cast(a, pa.int64()), pa.float64()), b)
    return pc.cast(pc.cast(pc.round(ms), pa.int64()), a.type)


def in_list(a: Value, items: list[Value]) -> Value:
    """``a IN (items)`` with three-valued logic: TRUE if any item equals ``a``; else NULL if
    ``a`` or any item is NULL; else FALSE."""
    if all(isinstance(i, pa.Scalar) for i in items):
        values = [i for i in items if i.is_valid]
        found = pc.is_in(a, value_set=pa.array([v.as_py() for v in values], a.type)) if values else None
        if found is None:
            found = pc.equal(a, pa.scalar(None, a.type))
        if len(values) != len(items):
            # A NULL in the list makes a miss unknown rather than false.
            found = pc.if_else(found, True, pa.scalar(None, pa.bool_()))
        return pc.if_else(pc.is_null(a), pa.scalar(None, pa.bool_()), found)
    result: Value = pa.scalar(False)
    for item in items:
        result = pc.or_kleene(result, pc.equal(a, item))
    return result


def like(a: Value, pattern: str, escape: str | None = None) -> Value:
    """SQL LIKE: ``%`` any run, ``_`` one character; ``escape`` makes the next character literal."""
    if escape is not None and escape != "\\":
        out, i = [], 0
        while i < len(pattern):
            ch = pattern[i]
            if ch == escape and i + 1 < len(pattern):
                nxt = pattern[i + 1]
                out.append("\\" + nxt if nxt in "%_\\" else nxt)
                i += 2
                continue
            out.append("\\\\" if ch == "\\" else ch)
            i += 1
        pattern = "".join(out)
    elif escape is None:
        # Without ESCAPE a backslash is an ordinary character.
        pattern = pattern.replace("\\", "\\\\")
    return pc.match_like(a, pattern)


def case_when(conditions: list[Value], results: list[Value], else_: Value, type: pa.DataType) -> Value:  # noqa: A002
    """Searched CASE: the result of the first TRUE condition (NULL counts as not true), else ``else_``."""
    values = [*results, else_]
    arrays = [v for v in [*conditions, *values] if not isinstance(v, pa.Scalar)]
    if not arrays:
        for cond, res in zip(conditions, results, strict=True):
            if cond.is_valid and cond.as_py():
                return pc.cast(res, type) if res.type != type else res
        return pc.cast(else_, type) if else_.type != type else else_
    n = len(arrays[0])
    conds = [broadcast(c, n, pa.bool_()) for c in conditions]
    # A constant result stays a scalar: Arrow's case_when takes one, and spreading it is a copy.
    vals = [v if isinstance(v, pa.Scalar) and v.type == type else broadcast(v, n, type) for v in values]
    return pc.case_when(pc.make_struct(*conds, field_names=[f"c{i}" for i in range(len(conds))]), *vals)


def if_(cond: Value, a: Value, b: Value) -> Value:
    """IF(cond, a, b): a NULL condition picks ``b``."""
    return pc.if_else(pc.fill_null(cond, False), a, b)


def nullif(a: Value, b: Value) -> Value:
    """NULL where ``a = b`` is TRUE, else ``a``."""
    same = pc.fill_null(pc.equal(a, b), False)
    return pc.if_else(same, pa.scalar(None, a.type), a)


def _ascii(a: Value) -> bool:
    """True when every string of ``a`` is known to be ASCII: no byte of its data (read whole,
    so a slice may be judged on bytes outside it) has the high bit set."""
    if isinstance(a, pa.ChunkedArray):
        return all(_ascii(chunk) for chunk in a.chunks)
    if isinstance(a, pa.Scalar) or a.type not in (pa.string(), pa.large_string()):
        return False
    data = a.buffers()[2]
    return data is None or data.size == 0 or int(np.frombuffer(data, np.uint8).max()) < 0x80


def lower(a: Value) -> Value:
    """LOWER: Unicode case mapping; text that is all ASCII takes Arrow's ASCII kernel, which
    gives the same strings some thirty times faster."""
    return pc.ascii_lower(a) if _ascii(a) else pc.utf8_lower(a)


def upper(a: Value) -> Value:
    """UPPER: as ``lower``."""
    return pc.ascii_upper(a) if _ascii(a) else pc.utf8_upper(a)


def substring(a: Value, start: int, length: int | None = None) -> Value:
    """SUBSTRING(a, start[, length]), 1-based, as Flink reads it: a start of 0 is the first
    character; a negative start counts from the end (SUBSTRING('hello', -3, 2) is 'll'), and one
    before the beginning of the string gives ''."""
    if length == 0:
        return pc.utf8_slice_codeunits(a, 0, 0)
    if start >= 0:
        begin = max(start - 1, 0)
        return pc.utf8_slice_codeunits(a, begin, None if length is None else begin + length)
    # Arrow slices like Python: a negative start counts from the end.
    stop = None if length is None or start + length >= 0 else start + length
    sliced = pc.utf8_slice_codeunits(a, start, stop)
    too_short = pc.less(pc.utf8_length(a), -start)
    return pc.if_else(too_short, pa.scalar("", pa.string()), sliced)


def split_index(a: Value, sep: str, index: int, memo: ValueMemo | None = None) -> Value:
    """The ``index``-th (0-based) piece of ``a`` split on ``sep``; NULL when there is no such piece.
    ``memo``: the task's memory of values seen (``TaskContext.memo``)."""
    memo = ValueMemo() if memo is None else memo
    if index < 0 or sep == "":
        return pc.cast(pc.if_else(pc.is_valid(a), pa.scalar(None, pa.string()), pa.scalar(None, pa.string())),
                       pa.string())
    if isinstance(a, pa.Scalar):
        return split_index(pa.array([a.as_py()], a.type), sep, index, memo)[0]
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if a.type == pa.string():
        picked = _per_value(a, ("split_index", sep), index,
                            lambda values, i: _split_index_array(values, sep, i, memo), _SPLIT_MOST_DISTINCT, memo)
        if picked is not None:
            return picked
    return _split_index_array(a, sep, index, memo)


def _split_index_array(a: pa.Array, sep: str, index: int, memo: ValueMemo) -> pa.Array:
    if len(sep.encode()) == 1 and sep.isascii() and a.type == pa.string() and a.offset == 0:
        picked = _split_index_byte(a, sep.encode()[0], index, memo)
        if picked is not None:
            return picked
    # Splitting stops after the piece wanted; the piece is then found by offset arithmetic
    # rather than by list kernels, which copy the lists.
    parts = pc.split_pattern(a, pattern=sep, max_splits=index + 1)
    offsets = np.asarray(parts.offsets)
    lengths = np.diff(offsets)
    # An empty string has no pieces at all (as in Flink), not one empty piece.
    empty = np.asarray(pc.fill_null(pc.equal(a, ""), False))
    has = (lengths > index) & ~empty
    if parts.null_count:
        has &= np.asarray(pc.is_valid(parts))
    positions = np.where(has, offsets[:-1] + index, 0)
    values = parts.values
    if len(values) == 0:
        return pa.nulls(len(a), pa.string())
    picked = pc.take(values, pa.array(positions, pa.int64()))
    return pc.if_else(pa.array(has), picked, pa.scalar(None, pa.string()))


#: A string function runs once per distinct value of an array instead of once per row (then its
#: results are taken back out by index) when a sample of the array has at most this share of
#: distinct values: hashing the strings costs about a fifth of a regular expression per row and
#: somewhat less than splitting one. A sample overestimates the share of the whole array (a batch
#: of 60,000 Nexmark URLs drawn from 10,004 has a sixth distinct, a sample of 1,000 half).
_REGEX_MOST_DISTINCT = 0.9
_SPLIT_MOST_DISTINCT = 0.6
_DISTINCT_MIN_ROWS = 1024
_DISTINCT_SAMPLE = 1024

def _distinct(a: pa.Array, most: float, memo: ValueMemo) -> tuple[pa.Array, pa.Array] | None:
    """(distinct values, per row the index of its value there, NULL for a NULL) of string array
    ``a``, or None when a sample of ``a`` has more than the share ``most`` of distinct values (or
    ``a`` is too short to be worth it). The last array looked at is remembered with its verdict
    (``memo.last_distinct``): several calls on one column (SPLIT_INDEX(url, '/', 3), (url, '/',
    4) ...) hash it once. The array itself is kept, so it can only ever match that very array."""
    n = len(a)
    if n < _DISTINCT_MIN_ROWS:
        return None
    last = memo.last_distinct
    if last is not None and last[0] is a:
        share, encoded = last[1], last[2]
    else:
        step = max(n // _DISTINCT_SAMPLE, 1)
        sample = pc.take(a, pa.array(np.arange(0, n, step, dtype=np.int64)))
        share = pc.count_distinct(sample, mode="all").as_py() / len(sample)
        encoded = None
    if share > most:
        memo.last_distinct = (a, share, None)
        return None
    if encoded is None:
        dictionary = pc.dictionary_encode(a)
        encoded = (dictionary.dictionary, dictionary.indices)
    memo.last_distinct = (a, share, encoded)
    return encoded


#: Per string function and fixed argument (REGEXP_EXTRACT's pattern, SPLIT_INDEX's separator):
#: the distinct values it has run on and, per group or piece index, its results for them, in the
#: same order. A column such as a URL repeats its values from batch to batch as well as within one:
#: a call then looks its rows up among the values seen (one hash probe), runs the function only on
#: the values new to it, and takes the results out by position. They are kept in the task's
#: ``ValueMemo`` (``memo.seen``), within these bounds.
_SEEN_MOST_KEYS = 16
_SEEN_MOST_VALUES = 1 << 16
_SEEN_MOST_BYTES = 8 << 20  # per key: at most 128 MiB in all
#: Values new to a call beyond this share of its rows start the values seen afresh from that call.
_SEEN_MOST_NEW = 0.25


def _per_value(a: pa.Array, key: tuple, param: int, fn, most: float, memo: ValueMemo) -> pa.Array | None:
    """``fn(a, param)`` for a string array ``a``, where ``fn(values, param)`` gives one result per
    value and ``key`` names ``fn``: run on the distinct values of ``a`` not seen by an earlier
    call, and taken back out by position. None when ``a``'s values hardly repeat (see
    ``_distinct``): the caller then runs ``fn`` on ``a`` itself."""
    n = len(a)
    if n < _DISTINCT_MIN_ROWS:
        return None
    seen = memo.seen.get(key)
    last = memo.last_lookup
    if seen is not None and last is not None and last[0] is a and last[1] is seen[0]:
        values, results = seen
        positions = last[2]
    else:
        positions = None
        if seen is not None:
            values, results = seen
            found = pc.index_in(a, value_set=values)  # NULL for a NULL and for a value not seen
            missing = found.null_count - a.null_count
            if missing == 0:
                positions = found
            elif missing <= n * _SEEN_MOST_NEW and len(values) + missing <= _SEEN_MOST_VALUES:
                valid = np.asarray(pc.is_valid(a))
                lost = np.flatnonzero(valid & np.asarray(pc.is_null(found)))
                lost_values = pc.take(a, pa.array(lost))
                new = pc.unique(lost_values)
                if values.nbytes + new.nbytes <= _SEEN_MOST_BYTES:
                    where = pc.fill_null(found, 0).to_numpy().astype(np.int32)
                    where[lost] = len(values) + pc.index_in(lost_values, value_set=new).to_numpy()
                    values = pa.concat_arrays([values, new])
                    results = {p: pa.concat_arrays([r, fn(new, p)]) for p, r in results.items()}
                    mask = None if a.null_count == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
                    positions = pa.Array.from_buffers(pa.int32(), n, [mask, pa.py_buffer(where)])
        if positions is None:
            distinct = _distinct(a, most, memo)
            if distinct is None:
                return None
            values, positions = distinct
            results = {}
            if values.nbytes > _SEEN_MOST_BYTES:
                # Too big to keep: used for this call only.
                return pc.take(fn(values, param), positions)
        memo.seen.pop(key, None)
        while len(memo.seen) >= _SEEN_MOST_KEYS:
            memo.seen.pop(next(iter(memo.seen)))
        memo.seen[key] = (values, results)
        memo.last_lookup = (a, values, positions)
    result = results.get(param)
    if result is None:
        result = results[param] = fn(values, param)
    return pc.take(result, positions)


def _separators(a: pa.StringArray, sep: int, memo: ValueMemo) -> tuple[np.ndarray, ...]:
    """(offsets, data, separator positions, per row its first separator's index among them, and
    its number of separators) of ``a`` split on byte ``sep``. The last array split is remembered
    (``memo.last_split``): SPLIT_INDEX(url, '/', 3), (url, '/', 4) … in one projection split the
    same array, and finding the separators is most of the work. The array itself is kept, so it
    can only ever match that very array."""
    last = memo.last_split
    if last is not None and last[0] is a and last[1] == sep:
        return last[2]
    n = len(a)
    offsets = np.frombuffer(a.buffers()[1], np.int32, n + 1)
    data = np.frombuffer(a.buffers()[2], np.uint8) if a.buffers()[2] is not None else np.zeros(0, np.uint8)
    data = data[: offsets[-1]]
    hits = np.flatnonzero(data == sep)
    first = np.searchsorted(hits, offsets[:-1])  # per row: its first separator's index in hits
    count = np.searchsorted(hits, offsets[1:]) - first  # separators per row
    found = (offsets, data, hits, first, count)
    memo.last_split = (a, sep, found)
    return found


def _split_index_byte(a: pa.StringArray, sep: int, index: int, memo: ValueMemo) -> pa.Array | None:
    """``split_index`` for a one-byte (ASCII) separator, on the bytes themselves: the separators'
    positions, each one's rank within its string, and the piece between the ``index``-th and the
    next, gathered into a new string array. An ASCII byte never occurs inside a multi-byte UTF-8
    character, so byte positions are safe."""
    n = len(a)
    offsets, data, hits, first, count = _separators(a, sep, memo)
    # Piece k starts after separator k-1 (or at the row's start) and ends at separator k (or the end).
    has = count >= index
    if index == 0:
        starts = offsets[:-1].astype(np.int64)
    else:
        starts = np.zeros(n, np.int64)
        take = first + index - 1
        starts[has] = hits[take[has]] + 1
    ends = offsets[1:].astype(np.int64).copy()
    inner = count > index
    ends[inner] = hits[(first + index)[inner]]
    lengths = np.where(has, ends - starts, 0)
    valid = has & (offsets[1:] > offsets[:-1])  # an empty string has no pieces (as in Flink)
    if a.null_count:
        valid &= np.asarray(pc.is_valid(a))
    lengths = np.where(valid, lengths, 0)
    out_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=out_offsets[1:])
    total = int(out_offsets[-1])
    if total >= 2**31:
        return None  # too big for 32-bit offsets: the caller takes the general path
    # Gather: for every output byte, its source position (run starts repeated, plus a ramp).
    source = np.repeat(starts - out_offsets[:-1], lengths) + np.arange(total)
    out_data = data[source]
    mask = None if valid.all() else pa.array(valid).buffers()[1]
    return pa.StringArray.from_buffers(n, pa.py_buffer(out_offsets.astype(np.int32)), pa.py_buffer(out_data),
                                       mask, null_count=-1)


@functools.lru_cache(maxsize=256)
def _name_groups(pattern: str, wanted: int = -1) -> tuple[str, int]:
    """``pattern`` with capturing group ``wanted`` (1-based) named ``clink_group`` and every other
    capturing group made non-capturing (``extract_regex`` returns named groups only, and each
    group it need not capture makes it slower), and the number of capturing groups ``pattern``
    has. Escapes, ``\\Q...\\E`` and character classes are skipped, so a ``(`` inside them is not
    taken for a group."""
    out: list[str] = []
    groups = 0
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if pattern.startswith("\\Q", i):
                end = pattern.find("\\E", i + 2)
                end = n if end < 0 else end + 2
                out.append(pattern[i:end])
                i = end
                continue
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                if end >= 0:
                    out.append(pattern[i:end + 2])
                    i = end + 2
                    continue
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            out.append(c)
            i += 1
            # A ']' right after '[' or '[^' is a literal member of the class.
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            if pattern.startswith("]", i):
                out.append("]")
                i += 1
            continue
        elif c == "(":
            named = pattern.startswith(("(?P<", "(?<"), i) and not pattern.startswith(("(?<=", "(?<!"), i)
            if named or not pattern.startswith("(?", i):
                groups += 1
                out.append("(?P<clink_group>" if groups == wanted else "(?:")
                i = pattern.index(">", i) + 1 if named else i + 1
                continue
        out.append(c)
        i += 1
    return "".join(out), groups


def regexp_extract(a: Value, pattern: str, index: int = 0, memo: ValueMemo | None = None) -> Value:
    """REGEXP_EXTRACT(a, pattern[, index]): group ``index`` of the first match of ``pattern`` in
    ``a`` (0 is the whole match); NULL when nothing matches or the pattern has no such group.
    A group that takes no part in the match gives '' (RE2 does not tell it from an empty one).
    ``memo``: the task's memory of values seen (``TaskContext.memo``)."""
    memo = ValueMemo() if memo is None else memo
    groups = _name_groups(pattern, index)[1]
    if not 0 <= index <= groups:
        if isinstance(a, pa.Scalar):
            return pa.scalar(None, pa.string())
        return pa.nulls(len(a), pa.string())
    if isinstance(a, pa.Scalar):
        return regexp_extract(pa.array([a.as_py()], pa.string()), pattern, index, memo)[0]
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if a.type == pa.string():
        found = _per_value(a, ("regexp_extract", pattern), index, functools.partial(_extract, pattern),
                           _REGEX_MOST_DISTINCT, memo)
        if found is not None:
            return found
    return _extract(pattern, a, index)


def _extract(pattern: str, a: pa.Array, index: int) -> pa.Array:
    named, _ = _name_groups(pattern, index)
    if index == 0:
        # The whole match: the pattern, wrapped in the one group captured.
        named = f"(?P<clink_group>{named})"
    return pc.struct_field(pc.extract_regex(a, pattern=named), [0])


def round_half_up(a: Value, digits: int = 0) -> Value:
    """ROUND: halves go away from zero, judged on the shortest decimal that prints the DOUBLE,
    as Flink does (ROUND(79.55, 1) is 79.6 and ROUND(1.005, 2) is 1.01, although both are
    stored a little below the half). Integers with digits >= 0 are unchanged."""
    if pa.types.is_integer(a.type):
        if digits >= 0:
            return a
        return pc.cast(round_half_up(pc.cast(a, pa.float64()), digits), a.type)
    if not pa.types.is_floating(a.type):
        return pc.round(a, ndigits=digits, round_mode="half_towards_infinity")
    if isinstance(a, pa.Scalar):
        return pa.scalar(_round_decimal(a.as_py(), digits), a.type)
    rounded = pc.round(a, ndigits=digits, round_mode="half_towards_infinity")
    # Scaling by 10**digits in binary can land a hair to either side of a half; only rows that
    # come that close are decided again, exactly, from their decimal form (few rows).
    values = a.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = np.abs(values * (10.0 ** digits))
        near = np.abs((scaled - np.floor(scaled)) - 0.5) <= np.maximum(1e-9, scaled * 1e-12)
    ties = np.flatnonzero(near)
    if len(ties) == 0:
        return rounded
    fixed = rounded.to_numpy(zero_copy_only=False).copy()
    for i in ties:
        fixed[i] = _round_decimal(float(values[i]), digits)
    return pa.array(fixed, a.type, mask=pc.is_null(a).to_numpy(zero_copy_only=False))


def _round_decimal(x: float | None, digits: int) -> float | None:
    import decimal

    if x is None or x != x or x in (float("inf"), float("-inf")):
        return x
    quantum = decimal.Decimal(1).scaleb(-digits)
    return float(decimal.Decimal(repr(x)).quantize(quantum, rounding=decimal.ROUND_HALF_UP))


def floor(a: Value) -> Value:
    return a if pa.types.is_integer(a.type) else pc.floor(a)


def ceil(a: Value) -> Value:
    return a if pa.types.is_integer(a.type) else pc.ceil(a)


def element_at(a: Value, index: Value) -> Value:
    """``a[index]``, 1-based; NULL when out of range."""
    lengths = pc.list_value_length(a)
    ok = pc.and_(pc.greater_equal(index, 1), pc.less_equal(index, lengths))
    ok = pc.fill_null(ok, False)
    arr = a if not isinstance(a, pa.Scalar) else pa.array([a.as_py()], a.type)
    idx = index if not isinstance(index, pa.Scalar) else pa.repeat(index, len(arr))
    okarr = ok if not isinstance(ok, pa.Scalar) else pa.repeat(ok, len(arr))
    # Vectorized gather: the flat position of each wanted element in the list values.
    offsets = np.asarray(arr.offsets)[:-1]
    flat = offsets + np.nan_to_num(np.asarray(pc.subtract(idx, 1).to_numpy(zero_copy_only=False), dtype=float),
                                   nan=0).astype(np.int64)
    flat = np.where(np.asarray(okarr.to_numpy(zero_copy_only=False), dtype=bool), flat, 0)
    values = arr.flatten() if arr.offset == 0 else pc.list_flatten(arr)
    if len(values) == 0:
        return pa.nulls(len(arr), a.type.value_type)
    picked = pc.take(values, pa.array(np.clip(flat - int(np.asarray(arr.offsets)[0]), 0, len(values) - 1)))
    out = pc.if_else(okarr, picked, pa.scalar(None, a.type.value_type))
    return out[0] if isinstance(a, pa.Scalar) else out


def map_get(a: Value, key: Any) -> Value:
    """``m['key']``: the value for ``key``, NULL if absent."""
    return pc.map_lookup(a, pa.scalar(key, a.type.key_type), "first")


_UNIT_FN = {
    "year": pc.year, "quarter": pc.quarter, "month": pc.month, "iso_week": pc.iso_week, "day": pc.day,
    "day_of_year": pc.day_of_year, "hour": pc.hour, "minute": pc.minute, "second": pc.second,
    "millisecond": pc.millisecond,
}


def extract(a: Value, unit: str) -> Value:
    """EXTRACT(unit FROM a) as BIGINT. DAYOFWEEK counts Sunday as 1 through Saturday as 7."""
    if unit == "dayofweek":
        out = pc.add(pc.day_of_week(a, count_from_zero=True, week_start=7), 1)
    else:
        out = _UNIT_FN[unit](a)
    return pc.cast(out, pa.int64())


def date_format(a: Value, fmt: str, millis: bool = False) -> Value:
    """Format a TIMESTAMP with a strftime pattern (translated from Java's by the compiler)."""
    if pa.types.is_timestamp(a.type) and a.type.tz is not None:
        a = pc.cast(a, pa.timestamp(a.type.unit))
    if pa.types.is_date(a.type):
        a = pc.cast(a, pa.timestamp("s"))
    # %S of a sub-second timestamp prints fractional seconds; drop them unless SSS asked for them.
    secs = pc.cast(pc.floor_temporal(a, unit="second"), pa.timestamp("s")) if a.type.unit != "s" else a
    text = _strftime_distinct(secs, fmt)
    if millis:
        ms = pc.utf8_lpad(pc.cast(pc.millisecond(a), pa.string()), width=3, padding="0")
        text = pc.binary_join_element_wise(text, ms, "")
    return text


#: strftime directives by the coarsest time unit (in seconds) they can be printed from; any
#: other directive needs the second.
_DIRECTIVE_UNIT = {**dict.fromkeys("YymdejaAbBhCGgVUWuwDFxnt%", 86400), **dict.fromkeys("HIklp", 3600),
                   **dict.fromkeys("MR", 60)}


def _distinct_steps(values: np.ndarray, unit: int, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.unique(values, return_inverse=True)`` of multiples of ``unit``: where they span
    few steps of it (a batch's days, minutes or seconds), by marking the steps in a table
    instead of sorting. Rows not ``valid`` get any index."""
    live = values if valid is None else values[valid]
    if len(live):
        low, high = int(live.min()), int(live.max())
        span = (high - low) // unit + 1
        if span <= 4 * len(values):
            steps = (values - low) // unit
            if valid is not None:
                steps[~valid] = 0
            seen = np.zeros(span, bool)
            seen[steps] = True
            numbers = np.cumsum(seen) - 1
            return low + np.flatnonzero(seen) * unit, numbers[steps]
    return np.unique(values, return_inverse=True)


def _strftime_distinct(secs: Value, fmt: str) -> Value:
    """``strftime`` of whole-second timestamps, computed once per distinct value of the coarsest
    unit the format prints (a batch of events spans a few minutes or days: a handful of strings,
    taken for every row, instead of formatting each row)."""
    if isinstance(secs, pa.Scalar) or len(secs) < 64:
        return pc.strftime(secs, format=fmt)
    directives = re.findall(r"%(.)", fmt)
    unit = min((_DIRECTIVE_UNIT.get(d, 1) for d in directives), default=86400)
    raw = pc.cast(secs, pa.int64())
    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks()
    valid = pc.is_valid(raw).to_numpy(zero_copy_only=False) if raw.null_count else None
    values = raw.to_numpy(zero_copy_only=False) if valid is None else np.where(valid, pc.fill_null(raw, 0), 0)
    if unit > 1:
        values = values // unit * unit
    distinct, index = _distinct_steps(values, unit, valid)
    if len(distinct) * 4 > len(values):
        return pc.strftime(secs, format=fmt)
    texts = pc.strftime(pa.array(distinct, pa.int64()).cast(pa.timestamp("s")), format=fmt)
    mask = None if valid is None else ~valid
    return texts.take(pa.array(index.reshape(-1).astype(np.int32), mask=mask))


def current_timestamp(ctx: TaskContext) -> pa.Scalar:
    """CURRENT_TIMESTAMP, NOW(): the processing time as an instant (TIMESTAMP_LTZ(3))."""
    return pc.cast(pa.scalar(ctx.now(), pa.int64()), pa.timestamp("ms", tz="UTC"))


def current_watermark(ctx: TaskContext, tz: str | None) -> pa.Scalar:
    """CURRENT_WATERMARK(rowtime): the evaluating subtask's current input watermark as
    TIMESTAMP(3) (``tz`` None) or TIMESTAMP_LTZ(3); NULL before its first watermark."""
    return pa.scalar(ctx.watermark, pa.timestamp("ms", tz=tz))


def local_timestamp(ctx: TaskContext) -> pa.Scalar:
    """LOCALTIMESTAMP: the wall clock in the session time zone (TIMESTAMP(3))."""
    return to_local(current_timestamp(ctx), ctx.time_zone)


def current_date(ctx: TaskContext) -> pa.Scalar:
    """CURRENT_DATE: today in the session time zone."""
    return pc.cast(local_timestamp(ctx), pa.date32())


def current_time(ctx: TaskContext) -> pa.Scalar:
    """CURRENT_TIME: the time of day in the session time zone (TIME(3))."""
    return cast(local_timestamp(ctx), pa.time32("ms"))


def local_time(ctx: TaskContext) -> pa.Scalar:
    """LOCALTIME: the time of day in the session time zone in whole seconds (TIME(0)), the
    fraction dropped as a CAST to TIME(0) drops it."""
    return cast(local_timestamp(ctx), pa.time32("s"))


# ---------------------------------------------------------------- time zones


def to_timestamp_ltz(a: Value, precision: int) -> Value:
    """TO_TIMESTAMP_LTZ(n, 0): ``n`` epoch seconds; TO_TIMESTAMP_LTZ(n, 3): epoch milliseconds.
    A fraction of a millisecond is dropped (toward zero)."""
    if pa.types.is_integer(a.type):
        ms = pc.cast(a, pa.int64())
        if precision == 0:
            ms = pc.multiply_checked(ms, pa.scalar(1000, pa.int64()))
    else:
        ms = pc.cast(pc.trunc(pc.multiply(pc.cast(a, pa.float64()), 1000.0 if precision == 0 else 1.0)),
                     pa.int64())
    return pc.cast(ms, pa.timestamp("ms", tz="UTC"))


def convert_tz(a: Value, from_zone: str, to_zone: str) -> Value:
    """CONVERT_TZ(text, from, to): the wall clock ``text`` in ``from_zone`` as shown in ``to_zone``,
    formatted ``yyyy-MM-dd HH:mm:ss``."""
    wall = cast(a, pa.timestamp("ms"))
    shown = to_local(from_local(wall, from_zone), to_zone)
    return pc.strftime(pc.cast(shown, pa.timestamp("s"), safe=False), format="%Y-%m-%d %H:%M:%S")


# ---------------------------------------------------------------- casts


def cast(a: Value, to: pa.DataType, try_: bool = False, zone: str = "UTC") -> Value:
    """CAST with SQL semantics, read as Flink does: a float to an integer truncates toward zero;
    a string is trimmed and must spell a value of the target type, or the pipeline fails naming
    the value (TRY_CAST gives NULL instead). Numbers that do not fit the target fail likewise.

    A TIMESTAMP_LTZ becomes a TIMESTAMP, DATE, TIME or string as the wall clock it shows in the
    session time zone ``zone``; a TIMESTAMP, DATE or string becomes a TIMESTAMP_LTZ as the instant
    its wall clock names in ``zone``. Numbers and TIMESTAMP_LTZ convert as epoch seconds."""
    src = a.type
    if src == to:
        return a
    src_ltz = pa.types.is_timestamp(src) and src.tz is not None
    to_ltz = pa.types.is_timestamp(to) and to.tz is not None
    if src_ltz and not to_ltz and not pa.types.is_integer(to):
        a = to_local(a, zone)
        return cast(a, to, try_)
    if to_ltz and not src_ltz and not pa.types.is_integer(src) and not pa.types.is_null(src):
        return from_local(cast(a, pa.timestamp(to.unit), try_), zone)
    if pa.types.is_null(src):
        return pa.scalar(None, to) if isinstance(a, pa.Scalar) else pa.nulls(len(a), to)
    if pa.types.is_string(to) or pa.types.is_large_string(to):
        return _to_string(a, src)
    if pa.types.is_string(src) or pa.types.is_large_string(src):
        a = pc.utf8_trim(a, characters=" ")
        if pa.types.is_boolean(to):
            return _string_to_bool(a, try_)
        if pa.types.is_timestamp(to) or pa.types.is_date(to):
            a = pc.replace_substring(a, pattern="T", replacement=" ", max_replacements=1)
        if pa.types.is_timestamp(to) and to.unit != "ns":
            # Digits of a second beyond the type's precision are dropped, as Flink's CAST reads up
            # to nine and then truncates to the precision; Arrow's parser refuses them.
            digits = {"s": 0, "ms": 3, "us": 6}[to.unit]
            a = pc.replace_substring_regex(
                a, pattern=rf"(:[0-9]{{2}})(\.[0-9]{{{digits}}})[0-9]+" if digits else r"(:[0-9]{2})()\.[0-9]+",
                replacement=r"\1\2")
        if pa.types.is_integer(to):
            # Read as Flink does: an explicit plus sign is allowed and a fraction of digits is
            # dropped ('+12' is 12, '1.5' is 1, '.5' is 0); Arrow's parser accepts neither.
            a = pc.replace_substring_regex(a, pattern=r"^\+([0-9.])", replacement=r"\1")
            a = pc.replace_substring_regex(a, pattern=r"^(-?[0-9]+)\.[0-9]*$", replacement=r"\1")
            a = pc.replace_substring_regex(a, pattern=r"^(-?)\.[0-9]*$", replacement=r"\10")
    if pa.types.is_floating(to) and pa.types.is_decimal(src):
        # Arrow's decimal-to-float cast can miss the nearest float (2.675 gives 2.6750000000000003);
        # parsing the decimal's text is correctly rounded, as Java's BigDecimal.doubleValue.
        return pc.cast(pc.cast(a, pa.string()), to)
    if pa.types.is_floating(to) and (pa.types.is_integer(src) or pa.types.is_floating(src)):
        # Widening to a float rounds to the nearest representable value; it never fails.
        return pc.cast(a, to, safe=False)
    if pa.types.is_floating(src) and (pa.types.is_integer(to) or pa.types.is_decimal(to)):
        if pa.types.is_integer(to):
            a = pc.trunc(a)
        else:
            # Flink reads the DOUBLE as its shortest decimal form and rounds that HALF_UP; three
            # digits more than the target's scale (Arrow rounds to those) stand in for that form.
            finite = pc.is_finite(a)
            if not pc.all(pc.fill_null(finite, True)).as_py():
                raise EvaluationError(f"cannot CAST {_first_non_finite(a)} to {_sql(to)}")
            a = pc.cast(a, pa.decimal256(_WIDEST, min(to.scale + 3, _WIDEST - to.precision + to.scale)), safe=False)
            src = a.type
    if pa.types.is_decimal(src) and pa.types.is_decimal(to) and src.scale > to.scale:
        a = pc.round(a, to.scale, round_mode="half_towards_infinity")  # HALF_UP, as Flink
    if pa.types.is_integer(src) and pa.types.is_decimal(to):
        # Arrow wants room for the integer type's widest value; go through the widest decimal,
        # then narrow, which fails only for values that really do not fit.
        return _checked(pc.cast(a, pa.decimal128(38, to.scale)), to, try_)
    if pa.types.is_timestamp(src) and pa.types.is_integer(to):
        # A timestamp as a number counts seconds since the epoch, as in Flink.
        return _checked(pc.divide(pc.cast(a, pa.int64()), _per_second(src.unit)), to, try_)
    if pa.types.is_integer(src) and pa.types.is_timestamp(to):
        return pc.cast(pc.multiply_checked(pc.cast(a, pa.int64()), _per_second(to.unit)), to)
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(to) and src.tz != to.tz:
        a = pc.cast(pc.cast(a, pa.int64()), pa.timestamp(src.unit, tz=to.tz))
        return pc.cast(a, to, safe=False) if a.type != to else a
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(to):
        return pc.cast(a, to, safe=False)
    if pa.types.is_timestamp(src) and pa.types.is_date(to):
        return pc.cast(pc.cast(a, pa.timestamp(src.unit)), to, safe=False)
    if pa.types.is_timestamp(src) and pa.types.is_time(to):
        since_midnight = pc.subtract(pc.cast(a, pa.int64()), pc.cast(pc.floor_temporal(a, unit="day"), pa.int64()))
        time_type = _time_of(src.unit)
        # Arrow casts to TIME only from the integer of the same width (int32 for time32).
        since_midnight = pc.cast(since_midnight, pa.int32() if pa.types.is_time32(time_type) else pa.int64())
        return pc.cast(pc.cast(since_midnight, time_type), to, safe=False)
    return _checked(a, to, try_)


def _first_non_finite(a: Value) -> float:
    values = a.to_pylist() if not isinstance(a, pa.Scalar) else [a.as_py()]
    return next(v for v in values if v is not None and not np.isfinite(v))


def _time_of(unit: str) -> pa.DataType:
    return pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)


def _per_second(unit: str) -> pa.Scalar:
    return pa.scalar({"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}[unit], pa.int64())


def _checked(a: Value, to: pa.DataType, try_: bool) -> Value:
    try:
        return pc.cast(a, to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        if not try_:
            bad = _first_bad(a, to)
            shown = repr(bad) if isinstance(bad, str) else str(bad)
            raise EvaluationError(f"cannot CAST {shown} to {_sql(to)}" if bad is not None else
                                  f"cannot CAST to {_sql(to)}: {exc}") from None
    # TRY_CAST: convert what converts, NULL for the rest (the error path, row by row).
    values = a.to_pylist() if not isinstance(a, pa.Scalar) else [a.as_py()]
    out = []
    for v in values:
        try:
            out.append(pc.cast(pa.array([v], a.type), to)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out.append(None)
    arr = pa.array(out, to)
    return arr[0] if isinstance(a, pa.Scalar) else arr


def _first_bad(a: Value, to: pa.DataType) -> Any:
    values = a.to_pylist() if not isinstance(a, pa.Scalar) else [a.as_py()]
    for v in values:
        try:
            pc.cast(pa.array([v], a.type), to)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return v
    return None


def _sql(t: pa.DataType) -> str:
    names = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
             pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN", pa.date32(): "DATE"}
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    return names.get(t, str(t).upper())


_TRUE = pa.array(["true", "t", "yes", "y", "1"])
_FALSE = pa.array(["false", "f", "no", "n", "0"])


def _string_to_bool(a: Value, try_: bool) -> Value:
    low = pc.utf8_lower(a)
    is_true = pc.is_in(low, value_set=_TRUE)
    is_false = pc.is_in(low, value_set=_FALSE)
    bad = pc.and_(pc.is_valid(a), pc.invert(pc.or_(is_true, is_false)))
    if not try_ and pc.any(bad).as_py():
        first = pc.filter(a, bad)[0] if not isinstance(a, pa.Scalar) else a
        raise EvaluationError(f"cannot CAST {first.as_py()!r} to BOOLEAN")
    return pc.if_else(is_true, True, pc.if_else(is_false, False, pa.scalar(None, pa.bool_())))


def _to_string(a: Value, src: pa.DataType) -> Value:
    if pa.types.is_boolean(src):
        return pc.if_else(a, "TRUE", "FALSE")
    if pa.types.is_timestamp(src):
        fmt = "%Y-%m-%d %H:%M:%S"
        if src.tz is not None:
            a = pc.cast(a, pa.timestamp(src.unit))
        return pc.strftime(a, format=fmt)
    if pa.types.is_floating(src):
        # Whole floats print with one decimal ('2.0'), not as integers.
        text = pc.cast(a, pa.string())
        whole = pc.and_(pc.equal(pc.trunc(a), a), pc.invert(pc.match_substring_regex(text, r"[.eEn]")))
        return pc.if_else(whole, pc.binary_join_element_wise(text, ".0", ""), text)
    return pc.cast(a, pa.string())


# ---------------------------------------------------------------- windows


def window_starts(ts: np.ndarray, spec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For event times ``ts`` (int64 ms): (row index, window start, window end) of every window
    each row belongs to, per ``spec`` (a ``plan.WindowSpec``; not SESSION). Start inclusive, end
    exclusive."""
    rows = np.arange(len(ts), dtype=np.int64)
    if spec.kind == "tumble":
        start = ts - np.mod(ts - spec.offset, spec.size)
        return rows, start, start + spec.size
    if spec.kind == "hop":
        count = spec.size // spec.slide
        last = ts - np.mod(ts - spec.offset, spec.slide)
        rows = np.repeat(rows, count)
        back = np.tile(np.arange(count, dtype=np.int64) * spec.slide, len(ts))
        start = last[rows] - back
        return rows, start, start + spec.size
    if spec.kind == "cumulate":
        steps = spec.size // spec.slide
        start = ts - np.mod(ts - spec.offset, spec.size)
        first = (ts - start) // spec.slide + 1  # the first step whose end lies after ts
        counts = steps - first + 1
        rows = np.repeat(rows, counts)
        # k runs from first .. steps for each row: offsets within each row's run.
        run = np.arange(len(rows), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        k = first[rows] + run
        begin = start[rows]
        return rows, begin, begin + k * spec.slide
    raise ValueError(f"cannot assign {spec.kind} windows row by row")


def assign_windows(batch: pa.RecordBatch, time: int, spec, zone: str = "UTC") -> pa.RecordBatch:
    """Each row of ``batch`` once per window containing its event time (column ``time``), with
    window_start, window_end and window_time (window_end - 1 ms) appended. Rows with a NULL
    event time belong to no window.

    Over a TIMESTAMP_LTZ time column, windows are aligned on the wall clock of the session time
    zone ``zone``, as in Flink: window_start and window_end are that wall clock (TIMESTAMP), and
    window_time is the instant just before the end (TIMESTAMP_LTZ)."""
    column = batch.column(time)
    if column.null_count:
        batch = pc.filter(batch, pc.is_valid(column))
        column = batch.column(time)
    ts = pc.cast(pc.cast(column, pa.timestamp("ms", tz=column.type.tz)), pa.int64()).to_numpy()
    local = column.type.tz is not None
    if local:
        ts = local_ms(ts, zone)
    rows, start, end = window_starts(ts, spec)
    if len(rows) != batch.num_rows or not np.array_equal(rows, np.arange(batch.num_rows)):
        batch = pc.take(batch, pa.array(rows))
    stamp = pa.timestamp("ms")
    if local:
        window_time = pc.cast(pa.array(epoch_ms(end - 1, zone), pa.int64()), pa.timestamp("ms", tz="UTC"))
    else:
        window_time = pc.cast(pa.array(end - 1, pa.int64()), stamp)
    columns = [*batch.columns, pc.cast(pa.array(start, pa.int64()), stamp), pc.cast(pa.array(end, pa.int64()), stamp),
               window_time]
    names = [*batch.schema.names, "window_start", "window_end", "window_time"]
    return pa.RecordBatch.from_arrays(columns, names=names)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values``, ascending: a sort and a comparison of neighbours (for
    64-bit hashes several times faster than ``np.unique``, which hashes first)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def group_ids(columns: list[pa.Array | pa.ChunkedArray], num_rows: int) -> tuple[np.ndarray, int]:
    """A dense id (0 .. n-1) per row such that rows get the same id exactly when all ``columns``
    are equal (NULL equals NULL), and the number of ids."""
    ids = np.zeros(num_rows, dtype=np.int64)
    cardinality = 1
    for col in columns:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        encoded = pc.dictionary_encode(col, null_encoding="encode")
        size = max(len(encoded.dictionary), 1)
        if cardinality * size >= 2**62:
            _, ids = np.unique(ids, return_inverse=True)
            cardinality = int(ids.max()) + 1 if len(ids) else 1
        ids = ids * size + encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        cardinality *= size
    unique, inverse = np.unique(ids, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), len(unique)
