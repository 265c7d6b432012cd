"""SQL types and Arrow types: the one-to-one mapping, names for messages, and coercion rules.

Every SQL type maps to one Arrow type (BIGINT → int64, TIMESTAMP(3) → timestamp[ms], ROW →
struct ...). VARCHAR(n) and CHAR(n) become Arrow strings: the length is not enforced, as in
most engines that store strings as UTF-8.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.types as pt

INTEGER_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
FLOAT_TYPES = (pa.float32(), pa.float64())

_SIMPLE = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "FLOAT": pa.float32(),
    "REAL": pa.float32(),
    "DOUBLE": pa.float64(),
    "STRING": pa.string(),
    "BYTES": pa.binary(),
    "DATE": pa.date32(),
    "VARCHAR": pa.string(),
    "CHAR": pa.string(),
    "BINARY": pa.binary(),
    "VARBINARY": pa.binary(),
}


def simple_type(name: str) -> pa.DataType:
    return _SIMPLE[name.upper()]


def timestamp_type(precision: int, *, local_time_zone: bool = False) -> pa.DataType:
    """TIMESTAMP(p): 0 → seconds, 1–3 → ms, 4–6 → µs, 7–9 → ns. LTZ is an instant, stored in UTC."""
    if precision == 0:
        unit = "s"
    elif precision <= 3:
        unit = "ms"
    elif precision <= 6:
        unit = "us"
    else:
        unit = "ns"
    return pa.timestamp(unit, tz="UTC" if local_time_zone else None)


def time_type(precision: int) -> pa.DataType:
    if precision == 0:
        return pa.time32("s")
    if precision <= 3:
        return pa.time32("ms")
    if precision <= 6:
        return pa.time64("us")
    return pa.time64("ns")


def is_integer(t: pa.DataType) -> bool:
    return pt.is_integer(t)


def is_numeric(t: pa.DataType) -> bool:
    return pt.is_integer(t) or pt.is_floating(t) or pt.is_decimal(t)


def is_string(t: pa.DataType) -> bool:
    return pt.is_string(t) or pt.is_large_string(t)


def is_temporal(t: pa.DataType) -> bool:
    return pt.is_timestamp(t) or pt.is_date(t) or pt.is_time(t)


def is_interval(t: pa.DataType) -> bool:
    return pt.is_duration(t) or pt.is_interval(t)


def is_null(t: pa.DataType) -> bool:
    return pt.is_null(t)


def sql_name(t: pa.DataType) -> str:
    """The SQL spelling of an Arrow type, for messages and EXPLAIN."""
    if pt.is_null(t):
        return "NULL"
    if pt.is_boolean(t):
        return "BOOLEAN"
    for name, typ in (("TINYINT", pa.int8()), ("SMALLINT", pa.int16()), ("INT", pa.int32()),
                      ("BIGINT", pa.int64()), ("FLOAT", pa.float32()), ("DOUBLE", pa.float64())):
        if t == typ:
            return name
    if pt.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    if is_string(t):
        return "STRING"
    if pt.is_binary(t) or pt.is_large_binary(t):
        return "BYTES"
    if pt.is_date(t):
        return "DATE"
    if pt.is_time(t):
        return f"TIME({_precision(t.unit)})"
    if pt.is_timestamp(t):
        base = "TIMESTAMP_LTZ" if t.tz else "TIMESTAMP"
        return f"{base}({_precision(t.unit)})"
    if pt.is_duration(t):
        return "INTERVAL DAY TO SECOND"
    if pt.is_interval(t):
        return "INTERVAL YEAR TO MONTH"
    if pt.is_struct(t):
        inner = ", ".join(f"{t.field(i).name} {sql_name(t.field(i).type)}" for i in range(t.num_fields))
        return f"ROW<{inner}>"
    if pt.is_list(t) or pt.is_large_list(t):
        return f"ARRAY<{sql_name(t.value_type)}>"
    if pt.is_map(t):
        return f"MAP<{sql_name(t.key_type)}, {sql_name(t.item_type)}>"
    return str(t).upper()


def _precision(unit: str) -> int:
    return {"s": 0, "ms": 3, "us": 6, "ns": 9}[unit]


_NUMERIC_RANK = {
    pa.int8(): 1,
    pa.int16(): 2,
    pa.int32(): 3,
    pa.int64(): 4,
    pa.float32(): 6,
    pa.float64(): 7,
}


def common_numeric(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type two numeric operands are brought to: the wider one; DECIMAL with an integer
    stays DECIMAL (wide enough for the integer), DECIMAL with a float becomes DOUBLE."""
    if pt.is_decimal(a) or pt.is_decimal(b):
        if pt.is_floating(a) or pt.is_floating(b):
            return pa.float64()
        da, db = (as_decimal(a), as_decimal(b))
        scale = max(da.scale, db.scale)
        whole = max(da.precision - da.scale, db.precision - db.scale)
        return pa.decimal128(min(38, whole + scale), scale)
    return a if _NUMERIC_RANK[a] >= _NUMERIC_RANK[b] else b


def as_decimal(t: pa.DataType) -> pa.DataType:
    """An exact number's type as a DECIMAL: integers get the digits of their widest value."""
    if pt.is_decimal(t):
        return t
    digits = {pa.int8(): 3, pa.int16(): 5, pa.int32(): 10, pa.int64(): 19}[t]
    return pa.decimal128(digits, 0)


# DECIMAL precision and scale, as Flink derives them (LogicalTypeMerging: findAdditionDecimalType,
# findMultiplicationDecimalType, findDivisionDecimalType, findModuloDecimalType, findAvgAggType,
# findSumAggType; FlinkTypeSystem.deriveDecimalModType), after SQL Server's rules:
#
#   e1 + e2, e1 - e2   precision max(s1, s2) + max(p1 - s1, p2 - s2) + 1    scale max(s1, s2)
#   e1 * e2            precision p1 + p2 + 1                                scale s1 + s2
#   e1 / e2            precision p1 - s1 + s2 + max(6, s1 + p2 + 1)         scale max(6, s1 + p2 + 1)
#   e1 % e2            precision min(p1 - s1, p2 - s2) + max(s1, s2)        scale max(s1, s2)
#                      (both scales 0: the type of e2)
#
# A precision above 38 is cut to 38, giving up scale (but keeping at least min(scale, 6) digits)
# so that the whole part is kept, as Hive and Spark do.
MAX_DECIMAL_PRECISION = 38
_MIN_ADJUSTED_SCALE = 6


def _adjusted_decimal(precision: int, scale: int) -> pa.DataType:
    if precision <= MAX_DECIMAL_PRECISION:
        return pa.decimal128(precision, scale)
    whole = precision - scale
    scale = max(MAX_DECIMAL_PRECISION - whole, min(scale, _MIN_ADJUSTED_SCALE))
    return pa.decimal128(MAX_DECIMAL_PRECISION, scale)


def decimal_arithmetic(op: str, a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The result type of ``a op b`` (``+ - * / %``) for exact numbers of which one is a DECIMAL
    (an integer counts as DECIMAL(3/5/10/19, 0))."""
    da, db = as_decimal(a), as_decimal(b)
    p1, s1, p2, s2 = da.precision, da.scale, db.precision, db.scale
    if op in "+-":
        scale = max(s1, s2)
        return _adjusted_decimal(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if op == "*":
        return _adjusted_decimal(p1 + p2 + 1, s1 + s2)
    if op == "/":
        scale = max(_MIN_ADJUSTED_SCALE, s1 + p2 + 1)
        return _adjusted_decimal(p1 - s1 + s2 + scale, scale)
    if s1 == 0 and s2 == 0:
        return b
    scale = max(s1, s2)
    return _adjusted_decimal(min(p1 - s1, p2 - s2) + scale, scale)


def decimal_literal_type(digits: int, exponent: int) -> pa.DataType | None:
    """The DECIMAL(p, s) of a literal written with a point (``1.50`` is DECIMAL(3, 2), ``0.908``
    DECIMAL(3, 3)); None when it needs more than 38 digits. ``digits``/``exponent`` are those of
    ``decimal.Decimal(text).as_tuple()`` (leading zeros are already gone)."""
    scale = max(0, -exponent)
    precision = max(digits + max(0, exponent), scale, 1)
    return pa.decimal128(precision, scale) if precision <= MAX_DECIMAL_PRECISION else None


def aggregate_type(name: str, t: pa.DataType) -> pa.DataType:
    """The result type of SUM, AVG, STDDEV_POP/SAMP and VAR_POP/SAMP over a number of type ``t``,
    as in Flink: SUM and AVG keep the argument's type (AVG of integers truncates toward zero),
    except that SUM of DECIMAL(p, s) is DECIMAL(38, s) and AVG of it DECIMAL(38, max(6, s))
    (findSumAggType, findAvgAggType). Calcite gives STDDEV and VAR AVG's return type
    (ReturnTypes.AVG_AGG_FUNCTION), so they too keep an integer argument's type."""
    if pt.is_null(t):
        return pa.int32()
    if name == "SUM":
        return pa.decimal128(MAX_DECIMAL_PRECISION, t.scale) if pt.is_decimal(t) else t
    if pt.is_decimal(t):
        # A division by the BIGINT count: DECIMAL(38, s) / DECIMAL(20, 0).
        return decimal_arithmetic("/", pa.decimal128(MAX_DECIMAL_PRECISION, t.scale), pa.decimal128(20, 0))
    return t


def common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both sides of a comparison, CASE branch or COALESCE are cast to, or None."""
    if a == b:
        return a
    if pt.is_null(a):
        return b
    if pt.is_null(b):
        return a
    if is_numeric(a) and is_numeric(b):
        return common_numeric(a, b)
    if is_string(a) and is_string(b):
        return pa.string()
    if pt.is_timestamp(a) and pt.is_timestamp(b):
        unit = max(a.unit, b.unit, key=_precision)
        return pa.timestamp(unit, tz=a.tz or b.tz)
    if pt.is_timestamp(a) and pt.is_date(b):
        return a
    if pt.is_date(a) and pt.is_timestamp(b):
        return b
    if pt.is_time(a) and pt.is_time(b):
        return time_type(max(_precision(a.unit), _precision(b.unit)))
    if pt.is_duration(a) and pt.is_duration(b):
        return pa.duration(max(a.unit, b.unit, key=_precision))
    return None


def can_cast(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether ``CAST(x AS dst)`` is allowed for an ``x`` of type ``src`` (values may still fail)."""
    if src == dst or pt.is_null(src):
        return True
    if is_string(src) or is_string(dst):
        # Everything but nested types converts to and from text.
        other = dst if is_string(src) else src
        return not (pt.is_struct(other) or pt.is_list(other) or pt.is_map(other))
    if pt.is_boolean(src) and is_numeric(dst) or is_numeric(src) and pt.is_boolean(dst):
        return True
    if is_numeric(src) and is_numeric(dst):
        return True
    if is_temporal(src) and is_temporal(dst):
        return not (pt.is_time(src) != pt.is_time(dst) and not (pt.is_timestamp(src) and pt.is_time(dst)))
    if pt.is_timestamp(src) and is_integer(dst) or is_integer(src) and pt.is_timestamp(dst):
        return True
    if pt.is_binary(src) and pt.is_binary(dst):
        return True
    if pt.is_struct(src) and pt.is_struct(dst) and src.num_fields == dst.num_fields:
        return all(can_cast(src.field(i).type, dst.field(i).type) for i in range(src.num_fields))
    if pt.is_list(src) and pt.is_list(dst):
        return can_cast(src.value_type, dst.value_type)
    return False


def assignable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether a query column of ``src`` may be written to a sink column of ``dst``: what
    ``implicitly_castable`` allows, and any number into any number, which Flink's INSERT casts
    implicitly (a DOUBLE or BIGINT into a DECIMAL(23, 3) column, as Nexmark q1's sink)."""
    return implicitly_castable(src, dst) or is_numeric(src) and is_numeric(dst)


def implicitly_castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether a value of ``src`` may be written where ``dst`` is expected without a CAST
    (INSERT targets, function arguments): widening numbers, NULL, same family."""
    if src == dst or pt.is_null(src):
        return True
    if is_numeric(src) and is_numeric(dst):
        if pt.is_floating(dst):
            return True
        if pt.is_decimal(dst):
            return not pt.is_floating(src)
        if is_integer(dst) and is_integer(src):
            return _NUMERIC_RANK[src] <= _NUMERIC_RANK[dst]
        return False
    if is_string(src) and is_string(dst):
        return True
    if pt.is_timestamp(src) and pt.is_timestamp(dst):
        return True
    if pt.is_binary(src) and pt.is_binary(dst):
        return True
    if pt.is_struct(src) and pt.is_struct(dst) and src.num_fields == dst.num_fields:
        return all(implicitly_castable(src.field(i).type, dst.field(i).type) for i in range(src.num_fields))
    if pt.is_list(src) and pt.is_list(dst):
        return implicitly_castable(src.value_type, dst.value_type)
    return False
