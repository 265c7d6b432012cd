"""Result types follow Flink's, case by case: DECIMAL literals, arithmetic over DECIMAL operands
(LogicalTypeMerging's find*DecimalType), aggregates (findSumAggType, findAvgAggType, and
Calcite's AVG return type for STDDEV and VAR) and the implicit casts of INSERT.

DuckDB derives decimal types its own way, so the differential tests compare values only; the
types are asserted here, against Flink's rules."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest

import clink
from clink.compiler import types as T
from clink.errors import SqlError
from clink.testing import run_select

D = decimal.Decimal

TABLE = pa.table({
    "ti": pa.array([1], pa.int8()), "si": pa.array([1], pa.int16()), "i": pa.array([7], pa.int32()),
    "b": pa.array([10], pa.int64()), "f": pa.array([1.5], pa.float32()), "dbl": pa.array([2.5], pa.float64()),
    "d52": pa.array([D("1.25")], pa.decimal128(5, 2)), "d380": pa.array([D("12")], pa.decimal128(38, 0)),
    "d3810": pa.array([D("1.5")], pa.decimal128(38, 10)), "d3838": pa.array([D("0.5")], pa.decimal128(38, 38)),
})

CASES = [
    # literals: a point makes a DECIMAL of the digits written, an exponent a DOUBLE
    ("1.5", "DECIMAL(2, 1)"),
    ("0.908", "DECIMAL(3, 3)"),
    ("10.00", "DECIMAL(4, 2)"),
    ("-0.5", "DECIMAL(1, 1)"),
    ("1e3", "DOUBLE"),
    ("1.5E-2", "DOUBLE"),
    # + and -: max(s1, s2) + max(p1 - s1, p2 - s2) + 1, max(s1, s2)
    ("d52 + d52", "DECIMAL(6, 2)"),
    ("d52 - i", "DECIMAL(13, 2)"),
    ("b + d52", "DECIMAL(22, 2)"),
    ("ti + 1.5", "DECIMAL(5, 1)"),
    ("d380 + d380", "DECIMAL(38, 0)"),
    ("d3810 + d380", "DECIMAL(38, 6)"),
    # *: p1 + p2 + 1, s1 + s2 (Nexmark q1: DECIMAL(3, 3) * BIGINT)
    ("0.908 * b", "DECIMAL(23, 3)"),
    ("d52 * d52", "DECIMAL(11, 4)"),
    ("si * d52", "DECIMAL(11, 2)"),
    ("d3810 * d3810", "DECIMAL(38, 6)"),
    # /: scale max(6, s1 + p2 + 1), precision p1 - s1 + s2 + scale
    ("d52 / d52", "DECIMAL(13, 8)"),
    ("d52 / i", "DECIMAL(16, 13)"),
    ("b / 2.0", "DECIMAL(26, 6)"),
    ("d3810 / d3810", "DECIMAL(38, 6)"),
    # %: min(p1 - s1, p2 - s2) + max(s1, s2), max(s1, s2); whole numbers: the right side's type
    ("d52 % d52", "DECIMAL(5, 2)"),
    ("d52 % b", "DECIMAL(5, 2)"),
    ("d380 % i", "INT"),
    ("i % d380", "DECIMAL(38, 0)"),
    # DECIMAL with a floating-point number is DOUBLE; integers alone stay integers
    ("d52 * dbl", "DOUBLE"),
    ("d52 + f", "DOUBLE"),
    ("1.5 * dbl", "DOUBLE"),
    ("i * b", "BIGINT"),
    # aggregates
    ("SUM(ti)", "TINYINT"),
    ("SUM(i)", "INT"),
    ("SUM(b)", "BIGINT"),
    ("SUM(dbl)", "DOUBLE"),
    ("SUM(d52)", "DECIMAL(38, 2)"),
    ("AVG(si)", "SMALLINT"),
    ("AVG(i)", "INT"),
    ("AVG(b)", "BIGINT"),
    ("AVG(f)", "FLOAT"),
    ("AVG(dbl)", "DOUBLE"),
    ("AVG(d52)", "DECIMAL(38, 6)"),
    ("AVG(d3810)", "DECIMAL(38, 10)"),
    ("MIN(d52)", "DECIMAL(5, 2)"),
    ("MAX(i)", "INT"),
]


@pytest.mark.parametrize(("expr", "flink_type"), CASES, ids=[c[0] for c in CASES])
def test_result_type_is_flinks(expr: str, flink_type: str) -> None:
    out = run_select(f"SELECT {expr} AS v FROM t", t=TABLE)
    assert T.sql_name(out.schema.field("v").type) == flink_type


@pytest.mark.parametrize(("name", "arg", "flink_type"), [
    ("STDDEV_POP", pa.int32(), "INT"),
    ("VAR_SAMP", pa.int64(), "BIGINT"),
    ("STDDEV_SAMP", pa.float64(), "DOUBLE"),
    ("VAR_POP", pa.decimal128(5, 2), "DECIMAL(38, 6)"),
])
def test_variance_types_are_avgs(name: str, arg: pa.DataType, flink_type: str) -> None:
    # Only window aggregates compute these; their type is AVG's, as Calcite gives it.
    assert T.sql_name(T.aggregate_type(name, arg)) == flink_type


@pytest.mark.parametrize(("expr", "value"), [
    # Flink's documentation examples and rounding: HALF_UP (halves away from zero)
    ("0.908 * b", D("9.080")),
    ("d52 / 3", D("0.4166666666667")),
    ("-d52 / 3", D("-0.4166666666667")),
    ("d52 * d52", D("1.5625")),
    ("d52 % 1", D("0.25")),
    ("1.25 / 2", D("0.625000")),
    ("CAST(d52 AS DECIMAL(3, 1))", D("1.3")),
    ("CAST(-d52 AS DECIMAL(3, 1))", D("-1.3")),
    ("CAST(2.675E0 AS DECIMAL(4, 2))", D("2.68")),
    ("d52 / 0", None),
    ("d52 % 0", None),
    ("CAST(d52 AS DOUBLE)", 1.25),
    ("0.1 + 0.2 = 0.3", True),
])
def test_decimal_values(expr: str, value: object) -> None:
    assert run_select(f"SELECT {expr} AS v FROM t", t=TABLE).column("v").to_pylist() == [value]


def test_overflow_is_null_as_in_flink() -> None:
    # DecimalData.fromBigDecimal gives NULL when the rounded value needs more digits.
    t = pa.table({"d": pa.array([D("9" * 36 + ".5"), D("1.5")], pa.decimal128(38, 1))})
    out = run_select("SELECT d * 100 AS v FROM t", t=t)
    assert out.schema.field("v").type == pa.decimal128(38, 1)
    assert out.column("v").to_pylist() == [None, D("150.0")]


def test_avg_of_integers_truncates_toward_zero_exactly() -> None:
    big = 2**62
    t = pa.table({"k": [1, 1, 2, 2, 3, 3], "v": pa.array([-7, 2, big, big - 1, 5, 6], pa.int64())})
    out = run_select("SELECT k, AVG(v) AS a FROM t GROUP BY k", t=t)
    # (2**62 + 2**62 - 1) / 2 is not a float: a float average would round it up.
    assert sorted(out.to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "a": -2}, {"k": 2, "a": big - 1}, {"k": 3, "a": 5}]


def test_insert_casts_numbers_into_a_decimal_sink_column() -> None:
    result = clink.sql("""
        CREATE TABLE src (price BIGINT, rate DOUBLE) WITH ('connector' = 'datagen', 'number-of-rows' = '5');
        CREATE TABLE out (a DECIMAL(23, 3), b DECIMAL(23, 3), c DECIMAL(23, 3))
            WITH ('connector' = 'blackhole');
        INSERT INTO out SELECT 0.908 * price, price, rate FROM src;
    """)
    assert result is not None


def test_a_decimal_literal_of_more_than_38_digits_is_an_error_with_a_position() -> None:
    with pytest.raises(SqlError, match="more than 38 digits") as e:
        run_select(f"SELECT {'1' * 40}.5 AS v FROM t", t=TABLE)
    assert e.value.span.col == 8
