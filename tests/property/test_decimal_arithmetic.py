"""DECIMAL + - * / against Python's ``decimal`` module: the result type from Flink's rules, the
value the exact result rounded HALF_UP to that type's scale, NULL where it does not fit."""

from __future__ import annotations

import decimal

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from clink.compiler import types as T
from clink.testing import run_select

EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)


@st.composite
def decimal_columns(draw: st.DrawFn) -> tuple[pa.DataType, list[decimal.Decimal | None]]:
    precision = draw(st.integers(1, 38))
    scale = draw(st.integers(0, precision))
    digits = st.integers(-(10**precision - 1), 10**precision - 1)
    values = draw(st.lists(st.none() | digits.map(lambda u: decimal.Decimal(u).scaleb(-scale, context=EXACT)), min_size=1,
                           max_size=8))
    return pa.decimal128(precision, scale), values


def _expected(op: str, a: decimal.Decimal | None, b: decimal.Decimal | None, to: pa.DataType):
    if a is None or b is None or (op == "/" and b == 0):
        return None
    exact = {"+": EXACT.add, "-": EXACT.subtract, "*": EXACT.multiply, "/": EXACT.divide}[op](a, b)
    rounded = exact.quantize(decimal.Decimal(1).scaleb(-to.scale), context=EXACT)
    # copy_abs, not abs(): abs() rounds to the default context's 28 digits.
    return rounded if rounded.copy_abs() < EXACT.power(10, to.precision - to.scale) else None


@settings(max_examples=150, deadline=None)
@given(left=decimal_columns(), right=decimal_columns(), op=st.sampled_from("+-*/"))
def test_decimal_arithmetic_is_exact_with_flinks_types(left, right, op) -> None:
    (lt, lv), (rt, rv) = left, right
    n = min(len(lv), len(rv))
    table = pa.table({"a": pa.array(lv[:n], lt), "b": pa.array(rv[:n], rt)})
    to = T.decimal_arithmetic(op, lt, rt)
    out = run_select(f"SELECT a {op} b AS v FROM t", t=table)
    assert out.schema.field("v").type == to
    assert out.column("v").to_pylist() == [_expected(op, a, b, to) for a, b in zip(lv[:n], rv[:n], strict=True)]


def test_a_product_wider_than_arrows_decimals_is_still_exact() -> None:
    """DECIMAL(37, 37) * DECIMAL(37, 37) has 74 digits after the point, past decimal256's 76 in
    all: computed exactly anyway (also when every value is NULL), and rounded to Flink's type."""
    t = pa.table({"a": pa.array([decimal.Decimal("0.1234567890123456789012345678901234567"), None],
                                pa.decimal128(37, 37)),
                  "b": pa.array([decimal.Decimal("-0.5"), None], pa.decimal128(37, 37))})
    out = run_select("SELECT a * b AS p FROM t", t=t)
    to = out.schema.field("p").type
    with decimal.localcontext() as context:
        context.prec = 100
        exact = decimal.Decimal("0.1234567890123456789012345678901234567") * decimal.Decimal("-0.5")
        want = exact.quantize(decimal.Decimal(1).scaleb(-to.scale), rounding=decimal.ROUND_HALF_UP)
    assert out.to_pylist() == [{"p": want}, {"p": None}]
    nulls = pa.table({"a": pa.nulls(2, pa.decimal128(37, 37)), "b": pa.nulls(2, pa.decimal128(37, 37))})
    assert run_select("SELECT a * b AS p FROM t", t=nulls).to_pylist() == [{"p": None}, {"p": None}]
