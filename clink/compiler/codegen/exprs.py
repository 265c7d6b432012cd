"""IR expression → ``pyarrow.compute`` source text.

``emit(expr, columns)`` returns Python source that evaluates ``expr`` over a batch whose columns
are held in the variables ``columns`` (by position). Each IR function name has one emitter.
Semantics that ``pyarrow.compute`` does not give directly (SQL NULL rules, division by zero,
1-based positions) live in ``clink.runtime.kernels``, called as ``K.<name>``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Callable

import pyarrow as pa
import pyarrow.types as pt

from clink.compiler import ir
from clink.errors import CompilerBug


def type_py(t: pa.DataType) -> str:
    """Source text that builds the Arrow type ``t``."""
    if pt.is_null(t):
        return "pa.null()"
    if pt.is_boolean(t):
        return "pa.bool_()"
    simple = {pa.int8(): "int8", pa.int16(): "int16", pa.int32(): "int32", pa.int64(): "int64",
              pa.float32(): "float32", pa.float64(): "float64", pa.string(): "string", pa.binary(): "binary",
              pa.date32(): "date32", pa.large_string(): "large_string"}
    if t in simple:
        return f"pa.{simple[t]}()"
    if pt.is_decimal(t):
        return f"pa.decimal128({t.precision}, {t.scale})"
    if pt.is_timestamp(t):
        return f"pa.timestamp({t.unit!r}, tz={t.tz!r})" if t.tz else f"pa.timestamp({t.unit!r})"
    if pt.is_time32(t):
        return f"pa.time32({t.unit!r})"
    if pt.is_time64(t):
        return f"pa.time64({t.unit!r})"
    if pt.is_duration(t):
        return f"pa.duration({t.unit!r})"
    if pt.is_interval(t):
        return "pa.month_day_nano_interval()"
    if pt.is_struct(t):
        fields = ", ".join(field_py(t.field(i)) for i in range(t.num_fields))
        return f"pa.struct([{fields}])"
    if pt.is_list(t):
        return f"pa.list_({type_py(t.value_type)})"
    if pt.is_map(t):
        return f"pa.map_({type_py(t.key_type)}, {type_py(t.item_type)})"
    raise CompilerBug(f"no source form for Arrow type {t}")


def field_py(f: pa.Field) -> str:
    nullable = "" if f.nullable else ", nullable=False"
    return f"pa.field({f.name!r}, {type_py(f.type)}{nullable})"


def literal_py(value: object, t: pa.DataType) -> str:
    if value is None:
        return f"pa.scalar(None, {type_py(t)})"
    if isinstance(value, dt.datetime):
        text = f"dt.datetime({value.year}, {value.month}, {value.day}, {value.hour}, {value.minute}, " \
               f"{value.second}, {value.microsecond})"
        return f"pa.scalar({text}, {type_py(t)})"
    if isinstance(value, dt.date):
        return f"pa.scalar(dt.date({value.year}, {value.month}, {value.day}), {type_py(t)})"
    if isinstance(value, dt.time):
        return f"pa.scalar(dt.time({value.hour}, {value.minute}, {value.second}, {value.microsecond}), {type_py(t)})"
    if isinstance(value, float) and value != value:
        return f"pa.scalar(float('nan'), {type_py(t)})"
    if isinstance(value, decimal.Decimal):
        return f"pa.scalar(decimal.Decimal({str(value)!r}), {type_py(t)})"
    return f"pa.scalar({value!r}, {type_py(t)})"


Emitter = Callable[[ir.Call, list[str]], str]


def _pc(name: str) -> Emitter:
    return lambda e, a: f"pc.{name}({', '.join(a)})"


def _k(name: str) -> Emitter:
    return lambda e, a: f"K.{name}({', '.join(a)})"


def _k_params(name: str) -> Emitter:
    return lambda e, a: f"K.{name}({', '.join([*a, *(repr(p) for p in e.params)])})"


def _k_memo(name: str) -> Emitter:
    """A kernel that keeps what it computed per value in the task's memo (``TaskContext.memo``)."""
    return lambda e, a: f"K.{name}({', '.join([*a, *(repr(p) for p in e.params)])}, memo=ctx.memo)"


def _f(name: str) -> Emitter:
    """A kernel of ``clink/runtime/functions.py``: the arguments, then the call's fixed parameters."""
    return lambda e, a: f"F.{name}({', '.join([*a, *(repr(p) for p in e.params)])})"


def _arith(checked: str, plain: str) -> Emitter:
    def emit(e: ir.Call, a: list[str]) -> str:
        # Integers fail on overflow instead of wrapping around; floats and times use plain kernels.
        return f"pc.{checked if pt.is_integer(e.type) else plain}({', '.join(a)})"

    return emit


def _is_ltz(t: pa.DataType) -> bool:
    return pt.is_timestamp(t) and t.tz is not None


def _numeric(name: str, fallback: Emitter) -> Emitter:
    def emit(e: ir.Call, a: list[str]) -> str:
        # A DECIMAL operand makes the operation exact, with Flink's result type and rounding.
        if any(pt.is_decimal(x.type) for x in e.args):
            return f"K.decimal_arith({name!r}, {a[0]}, {a[1]}, {type_py(e.type)})"
        return fallback(e, a)

    return emit


def _cast(e: ir.Call, a: list[str]) -> str:
    (try_,) = e.params
    # Between TIMESTAMP_LTZ and wall-clock types, the session time zone decides.
    zone = ", zone=ctx.time_zone" if _is_ltz(e.type) != _is_ltz(e.args[0].type) else ""
    return f"K.cast({a[0]}, {type_py(e.type)}{', try_=True' if try_ else ''}{zone})"


def _case(e: ir.Call, a: list[str]) -> str:
    n, has_else = e.params
    conditions, results = a[:n], a[n:]
    else_ = results[-1] if has_else else f"pa.scalar(None, {type_py(e.type)})"
    return f"K.case_when([{', '.join(conditions)}], [{', '.join(results[:n])}], {else_}, {type_py(e.type)})"


def _udf(e: ir.Call, a: list[str]) -> str:
    (ref,) = e.params
    # Imported when the module loads (CREATE FUNCTION), or looked up in the job's context.
    fn = ref.constant if ref.module is not None else f"ctx.function({ref.name!r})"
    helper = "vectorized" if ref.vectorized else "rowwise"
    return f"U.{helper}({fn}, {ref.name!r}, [{', '.join(a)}], batch.num_rows, {type_py(e.type)})"


EMITTERS: dict[str, Emitter] = {
    "add": _numeric("add", _arith("add_checked", "add")),
    "subtract": _numeric("subtract", _arith("subtract_checked", "subtract")),
    "multiply": _numeric("multiply", _arith("multiply_checked", "multiply")),
    "divide": _numeric("divide", _k("divide")),
    "mod": _numeric("mod", _k("mod")),
    "negate": _arith("negate_checked", "negate"),
    "interval_multiply": _k("interval_multiply"),
    "date_add": _k_params("date_add"),
    "time_add": _k_params("time_add"),
    "interval_divide": _k("interval_divide"),
    "eq": _pc("equal"),
    "ne": _pc("not_equal"),
    "lt": _pc("less"),
    "le": _pc("less_equal"),
    "gt": _pc("greater"),
    "ge": _pc("greater_equal"),
    "and": _pc("and_kleene"),
    "or": _pc("or_kleene"),
    "not": _pc("invert"),
    "is_null": _pc("is_null"),
    "is_not_null": _pc("is_valid"),
    "is_true": lambda e, a: f"pc.fill_null({a[0]}, False)",
    "is_not_true": lambda e, a: f"pc.invert(pc.fill_null({a[0]}, False))",
    "is_false": lambda e, a: f"pc.fill_null(pc.invert({a[0]}), False)",
    "is_not_false": lambda e, a: f"pc.fill_null({a[0]}, True)",
    "in": lambda e, a: f"K.in_list({a[0]}, [{', '.join(a[1:])}])",
    "like": _k_params("like"),
    "similar_to": lambda e, a: f"pc.match_substring_regex({a[0]}, pattern={e.params[2]!r})",
    "cast": _cast,
    "case": _case,
    "concat": lambda e, a: f"pc.binary_join_element_wise({', '.join(a)}, '', null_handling='emit_null')",
    "upper": _k("upper"),
    "lower": _k("lower"),
    "trim": lambda e, a: f"pc.utf8_trim({a[0]}, characters={(e.params[0] if e.params else ' ')!r})",
    "ltrim": lambda e, a: f"pc.utf8_ltrim({a[0]}, characters={(e.params[0] if e.params else ' ')!r})",
    "rtrim": lambda e, a: f"pc.utf8_rtrim({a[0]}, characters={(e.params[0] if e.params else ' ')!r})",
    "char_length": _pc("utf8_length"),
    "substring": _k_params("substring"),
    "replace": lambda e, a: f"pc.replace_substring({a[0]}, pattern={e.params[0]!r}, replacement={e.params[1]!r})",
    "split_index": _k_memo("split_index"),
    "regexp_extract": _k_memo("regexp_extract"),
    "abs": _arith("abs_checked", "abs"),
    "round": _k_params("round_half_up"),
    "floor": _k("floor"),
    "ceil": _k("ceil"),
    "power": _pc("power"),
    "sqrt": _pc("sqrt"),
    "coalesce": _pc("coalesce"),
    "nullif": _k("nullif"),
    "if": _k("if_"),
    "date_format": _k_params("date_format"),
    "extract": _k_params("extract"),
    "field": lambda e, a: f"pc.struct_field({a[0]}, [{e.params[0]}])",
    "element_at": _k("element_at"),
    "map_get": _k_params("map_get"),
    "current_timestamp": lambda e, a: "K.current_timestamp(ctx)",
    "proctime": lambda e, a: "K.current_timestamp(ctx)",
    "current_watermark": lambda e, a: f"K.current_watermark(ctx, {e.type.tz!r})",
    "localtimestamp": lambda e, a: "K.local_timestamp(ctx)",
    "to_timestamp_ltz": _k_params("to_timestamp_ltz"),
    "convert_tz": _k_params("convert_tz"),
    "current_date": lambda e, a: "K.current_date(ctx)",
    "current_time": lambda e, a: "K.current_time(ctx)",
    "localtime": lambda e, a: "K.local_time(ctx)",
    "udf": _udf,
    # Flink's other built-in functions (clink/runtime/functions.py, or Arrow kernels as they are).
    "ln": _pc("ln"),
    "log": _f("log"),
    "log10": _pc("log10"),
    "log2": _pc("log2"),
    "exp": _pc("exp"),
    "sin": _pc("sin"),
    "sinh": _pc("sinh"),
    "cos": _pc("cos"),
    "cosh": _pc("cosh"),
    "tan": _pc("tan"),
    "tanh": _pc("tanh"),
    "cot": _f("cot"),
    "asin": _pc("asin"),
    "acos": _pc("acos"),
    "atan": _pc("atan"),
    "atan2": _pc("atan2"),
    "degrees": lambda e, a: f"pc.multiply({a[0]}, pa.scalar({180 / math.pi!r}))",
    "radians": lambda e, a: f"pc.multiply({a[0]}, pa.scalar({math.pi / 180!r}))",
    "sign": _f("sign"),
    "truncate": _f("truncate"),
    "bin": _f("bin_"),
    "hex": _f("hex_"),
    "repeat": _f("repeat"),
    "regexp": _f("regexp"),
    "regexp_replace": _f("regexp_replace"),
    "initcap": _f("initcap"),
    "concat_ws": _f("concat_ws"),
    "pad": _f("pad"),
    "to_base64": _f("to_base64"),
    "from_base64": _f("from_base64"),
    "ascii": _f("ascii_"),
    "chr": _f("chr_"),
    "locate": _f("locate"),
    "left": _f("left"),
    "right": _f("right"),
    "reverse": _pc("utf8_reverse"),
    "is_kind": _f("is_kind"),
    "greatest": _f("greatest"),
    "least": _f("least"),
    "hash": _f("hash_text"),
    "map_part": _f("map_part"),
    "element": _f("element"),
    "str_to_map": _f("str_to_map"),
    "decode": _f("decode"),
    "encode": _f("encode"),
    "parse_url": _f("parse_url"),
    "array_contains": _f("array_contains"),
    "array_position": _f("array_position"),
    "array_remove": _f("array_remove"),
    "array_reverse": _f("array_reverse"),
    "array_distinct": _f("array_distinct"),
    "map_from_arrays": _f("map_from_arrays"),
    "timestampadd": lambda e, a: f"F.timestampadd({e.params[0]!r}, {a[0]}, {a[1]})",
    "timestampdiff": lambda e, a: f"F.timestampdiff({e.params[0]!r}, {a[0]}, {a[1]})",
    "to_timestamp": _f("to_timestamp"),
    "is_distinct": _f("is_distinct"),
    "is_json": _f("is_json"),
    "json_exists": _f("json_exists"),
    "json_query": _f("json_query"),
    "json_value": lambda e, a: (f"F.json_value({', '.join(a)}, {e.params[0]!r}, {type_py(e.params[1])}, "
                                f"{e.params[2]!r}, {e.params[3]!r})"),
    "json_string": _f("json_text"),
    "json_object": _f("json_object"),
    "json_array": _f("json_array"),
    "floor_to": _f("floor_to"),
    "to_date": _f("to_date"),
    "unix_timestamp": lambda e, a: f"F.unix_timestamp({a[0]}, {e.params[0]!r}, ctx.time_zone)",
    "unix_now": lambda e, a: "F.unix_now(ctx.now())",
    "from_unixtime": lambda e, a: f"F.from_unixtime({a[0]}, {e.params[0]!r}, {e.params[1]!r}, ctx.time_zone)",
    # Constructors build a column of n values from their items (columns or constants).
    "make_array": lambda e, a: f"K.make_array([{', '.join(a)}], batch.num_rows, {type_py(e.type)})",
    "make_map": lambda e, a: f"K.make_map([{', '.join(a)}], batch.num_rows, {type_py(e.type)})",
    "make_row": lambda e, a: f"K.make_row([{', '.join(a)}], batch.num_rows, {type_py(e.type)})",
    "cardinality": lambda e, a: f"K.cardinality({a[0]})",
    # Row i of a VALUES list: the i-th of the values (args[1:]) by the row number in args[0].
    "pick": lambda e, a: f"K.pick({a[0]}, [{', '.join(a[1:])}], {type_py(e.type)})",
}


def emit(e: ir.Expr, columns: list[str]) -> str:
    """Source text evaluating ``e``; ``columns[i]`` is the variable holding input column ``i``."""
    match e:
        case ir.Column(index=i):
            return columns[i]
        case ir.Literal(value=v):
            return literal_py(v, e.type)
        case ir.Call(fn=fn, args=args):
            emitter = EMITTERS.get(fn)
            if emitter is None:
                raise CompilerBug(f"no emitter for function {fn!r}")
            return emitter(e, [emit(a, columns) for a in args])
    raise CompilerBug(f"cannot emit {type(e).__name__}")


def is_constant(e: ir.Expr) -> bool:
    """True when ``e`` reads no column: it evaluates to a scalar that must be spread over the batch.
    A UDF call always gives a column (one value per row, even without arguments)."""
    return not any(isinstance(x, ir.Column) or (isinstance(x, ir.Call) and x.fn == "udf") for x in ir.walk(e))
