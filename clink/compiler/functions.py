"""Scalar functions: argument checks, result types and NULL rules.

Each entry binds a call: it receives the bound arguments and returns the typed IR node (usually a
``Call`` whose ``fn`` names an emitter in ``codegen/exprs.py``). Unless said otherwise a function
returns NULL when any argument is NULL, as SQL functions do.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pyarrow as pa
import pyarrow.types as pt

from clink import records
from clink.compiler import ir
from clink.compiler import types as T
from clink.errors import Span, SqlError
from clink.runtime import compute as pc
from clink.runtime.settings import parse_time_zone

Binder = Callable[[str, list[ir.Expr], Span], ir.Expr]


def _nullable(args: list[ir.Expr]) -> bool:
    return any(a.nullable for a in args)


def cast_to(expr: ir.Expr, typ: pa.DataType) -> ir.Expr:
    """``expr`` as ``typ``: literals are converted at compile time, the rest get a cast node."""
    if expr.type == typ:
        return expr
    if isinstance(expr, ir.Literal) and expr.value is None:
        return ir.Literal(value=None, type=typ, nullable=True, span=expr.span)
    if isinstance(expr, ir.Literal) and T.is_numeric(expr.type) and T.is_numeric(typ):
        # Fold the cast of a numeric literal now, so generated code compares with a typed constant.
        try:
            if pt.is_decimal(expr.type) and pt.is_floating(typ):
                value = float(expr.value)  # correctly rounded, unlike Arrow's decimal-to-float cast
            else:
                value = pc.cast(pa.scalar(expr.value, expr.type), typ).as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        else:
            return ir.Literal(value=value, type=typ, nullable=False, span=expr.span)
    return ir.Call(fn="cast", args=(expr,), params=(False,), type=typ, nullable=expr.nullable, span=expr.span)


def wall_clock(expr: ir.Expr) -> ir.Expr:
    """A TIMESTAMP_LTZ as the wall clock it shows in the session time zone (a TIMESTAMP), which
    is what its fields (hour, day, ...) and its formatted text are read from; other types as they are."""
    t = expr.type
    return cast_to(expr, pa.timestamp(t.unit)) if pt.is_timestamp(t) and t.tz is not None else expr


def _arity(name: str, args: list[ir.Expr], span: Span, low: int, high: int | None = None) -> None:
    high = low if high is None else high
    if not low <= len(args) <= high:
        want = str(low) if low == high else f"{low} to {high}"
        raise SqlError(f"{name} takes {want} argument{'s' if high != 1 else ''}, got {len(args)}", span)


def _need(name: str, arg: ir.Expr, ok: Callable[[pa.DataType], bool], what: str, position: int) -> None:
    if not (ok(arg.type) or T.is_null(arg.type)):
        raise SqlError(f"argument {position} of {name} must be {what}, got {T.sql_name(arg.type)}", arg.span)


def _literal(name: str, arg: ir.Expr, position: int, what: str) -> object:
    if not isinstance(arg, ir.Literal):
        raise SqlError(f"argument {position} of {name} must be a constant {what}", arg.span,
                       f"{name} takes a literal here, not a column or an expression")
    return arg.value


def _string_fn(fn: str) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 1)
        _need(name, args[0], T.is_string, "a STRING", 1)
        return ir.Call(fn=fn, args=(cast_to(args[0], pa.string()),), type=pa.string(),
                       nullable=_nullable(args), span=span)

    return bind


def _char_length(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 1)
    _need(name, args[0], T.is_string, "a STRING", 1)
    return ir.Call(fn="char_length", args=(cast_to(args[0], pa.string()),), type=pa.int32(),
                   nullable=_nullable(args), span=span)


def _trim_fn(fn: str) -> Binder:
    """TRIM / LTRIM / RTRIM of spaces, or (from ``TRIM([BOTH | LEADING | TRAILING] chars FROM s)``)
    of the characters of a constant string."""
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 1, 2)
        _need(name, args[0], T.is_string, "a STRING", 1)
        params: tuple = ()
        if len(args) == 2:
            chars = _literal(name, args[1], 2, "string")
            if chars is None:
                return ir.Literal(value=None, type=pa.string(), nullable=True, span=span)
            if not isinstance(chars, str):
                raise SqlError(f"the characters {name} removes must be a string", args[1].span)
            params = (chars,)
        return ir.Call(fn=fn, args=(cast_to(args[0], pa.string()),), params=params, type=pa.string(),
                       nullable=args[0].nullable, span=span)
    return bind


def _substring(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2, 3)
    _need(name, args[0], T.is_string, "a STRING", 1)
    start = _literal(name, args[1], 2, "integer")
    length = _literal(name, args[2], 3, "integer") if len(args) == 3 else None
    if not isinstance(start, int) or (length is not None and not isinstance(length, int)):
        raise SqlError(f"{name} takes integer positions", span)
    if length is not None and length < 0:
        raise SqlError(f"the length given to {name} must not be negative, got {length}", args[2].span)
    return ir.Call(fn="substring", args=(cast_to(args[0], pa.string()),), params=(start, length),
                   type=pa.string(), nullable=args[0].nullable, span=span)


def _concat(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    if not args:
        raise SqlError(f"{name} takes at least 1 argument", span)
    for i, a in enumerate(args, 1):
        _need(name, a, T.is_string, "a STRING", i)
    return ir.Call(fn="concat", args=tuple(cast_to(a, pa.string()) for a in args), type=pa.string(),
                   nullable=_nullable(args), span=span)


def _replace(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 3)
    _need(name, args[0], T.is_string, "a STRING", 1)
    search = _literal(name, args[1], 2, "string")
    replacement = _literal(name, args[2], 3, "string")
    if search is None or replacement is None:
        return ir.Literal(value=None, type=pa.string(), span=span)
    if search == "":
        # Nothing to find, so nothing changes (Arrow's replace_substring never ends on an empty pattern).
        return cast_to(args[0], pa.string())
    return ir.Call(fn="replace", args=(cast_to(args[0], pa.string()),), params=(search, replacement),
                   type=pa.string(), nullable=args[0].nullable, span=span)


def _str_to_map(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """STR_TO_MAP(s [, pair delimiter, key-value delimiter]): constant regular expressions (',' and
    '=' by default), checked here."""
    import re

    _arity(name, args, span, 1, 3)
    if len(args) == 2:
        raise SqlError(f"{name} takes both delimiters or neither", span)
    _need(name, args[0], T.is_string, "a STRING", 1)
    delimiters = [",", "="]
    for i, a in enumerate(args[1:], 2):
        value = _literal(name, a, i, "string")
        if not isinstance(value, str):
            raise SqlError(f"argument {i} of {name} must be a string", a.span)
        try:
            re.compile(value)
        except re.error as exc:
            raise SqlError(f"invalid regular expression for {name}: {exc}", a.span) from None
        delimiters[i - 2] = value
    return ir.Call(fn="str_to_map", args=(cast_to(args[0], pa.string()),), params=tuple(delimiters),
                   type=pa.map_(pa.string(), pa.string()), nullable=args[0].nullable, span=span)


def _charset(name: str, arg: ir.Expr, position: int) -> str:
    from clink.runtime.functions import _CHARSETS

    value = _literal(name, arg, position, "string")
    if not isinstance(value, str) or value.upper() not in _CHARSETS:
        raise SqlError(f"{name} takes one of the character sets {', '.join(_CHARSETS)}", arg.span)
    return value.upper()


def _decode(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2)
    _need(name, args[0], lambda t: pt.is_binary(t) or pt.is_large_binary(t), "a BYTES value", 1)
    return ir.Call(fn="decode", args=(cast_to(args[0], pa.binary()),), params=(_charset(name, args[1], 2),),
                   type=pa.string(), nullable=args[0].nullable, span=span)


def _encode(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2)
    _need(name, args[0], T.is_string, "a STRING", 1)
    return ir.Call(fn="encode", args=(cast_to(args[0], pa.string()),), params=(_charset(name, args[1], 2),),
                   type=pa.binary(), nullable=args[0].nullable, span=span)


_URL_PARTS = ("HOST", "PATH", "QUERY", "REF", "PROTOCOL", "FILE", "AUTHORITY", "USERINFO")


def _parse_url(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2, 3)
    _need(name, args[0], T.is_string, "a STRING", 1)
    part = _literal(name, args[1], 2, "string")
    if not isinstance(part, str) or part.upper() not in _URL_PARTS:
        raise SqlError(f"{name} takes one of the parts {', '.join(_URL_PARTS)}", args[1].span)
    params: tuple = (part.upper(),)
    if len(args) == 3:
        if part.upper() != "QUERY":
            raise SqlError(f"{name} takes a key only with QUERY", args[2].span)
        key = _literal(name, args[2], 3, "string")
        if not isinstance(key, str):
            raise SqlError(f"argument 3 of {name} must be a string", args[2].span)
        params += (key,)
    return ir.Call(fn="parse_url", args=(cast_to(args[0], pa.string()),), params=params, type=pa.string(),
                   nullable=True, span=span)


def _split_index(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 3)
    _need(name, args[0], T.is_string, "a STRING", 1)
    sep = _literal(name, args[1], 2, "string")
    index = _literal(name, args[2], 3, "integer")
    if sep is None or index is None:
        return ir.Literal(value=None, type=pa.string(), span=span)
    if not isinstance(index, int):
        raise SqlError(f"argument 3 of {name} must be an integer", args[2].span)
    return ir.Call(fn="split_index", args=(cast_to(args[0], pa.string()),), params=(sep, index),
                   type=pa.string(), nullable=True, span=span)


def _regexp_extract(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2, 3)
    _need(name, args[0], T.is_string, "a STRING", 1)
    regex = _literal(name, args[1], 2, "string")
    index = _literal(name, args[2], 3, "integer") if len(args) == 3 else 0
    if regex is None or index is None:
        return ir.Literal(value=None, type=pa.string(), span=span)
    if not isinstance(regex, str):
        raise SqlError(f"argument 2 of {name} must be a STRING regular expression", args[1].span)
    if not isinstance(index, int) or isinstance(index, bool):
        raise SqlError(f"argument 3 of {name} must be an integer group index", args[2].span)
    try:
        # Checked now so that a bad pattern fails at compile time, not on the first batch.
        pc.match_substring_regex(pa.array([""], pa.string()), pattern=regex)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        reason = str(e).split(": ", 1)[-1]
        raise SqlError(f"invalid regular expression for {name}: {reason}", args[1].span,
                       "clink uses RE2 syntax: lookarounds, backreferences and possessive quantifiers "
                       "are not available") from None
    return ir.Call(fn="regexp_extract", args=(cast_to(args[0], pa.string()),), params=(regex, index),
                   type=pa.string(), nullable=True, span=span)


def _numeric_same(fn: str) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 1)
        _need(name, args[0], T.is_numeric, "a number", 1)
        typ = args[0].type if not T.is_null(args[0].type) else pa.float64()
        return ir.Call(fn=fn, args=(cast_to(args[0], typ),), type=typ, nullable=_nullable(args), span=span)

    return bind


def _round(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 1, 2)
    _need(name, args[0], T.is_numeric, "a number", 1)
    digits = _literal(name, args[1], 2, "integer") if len(args) == 2 else 0
    if not isinstance(digits, int):
        raise SqlError(f"argument 2 of {name} must be an integer", args[1].span)
    typ = args[0].type if not T.is_null(args[0].type) else pa.float64()
    return ir.Call(fn="round", args=(cast_to(args[0], typ),), params=(digits,), type=typ,
                   nullable=args[0].nullable, span=span)


def _double_fn(fn: str, arity: int) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, arity)
        for i, a in enumerate(args, 1):
            _need(name, a, T.is_numeric, "a number", i)
        return ir.Call(fn=fn, args=tuple(cast_to(a, pa.float64()) for a in args), type=pa.float64(),
                       nullable=_nullable(args), span=span)

    return bind


def _mod(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2)
    return arithmetic("%", args[0], args[1], span)


def _coalesce(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    if not args:
        raise SqlError(f"{name} takes at least 1 argument", span)
    typ = common_of(name, args)
    return ir.Call(fn="coalesce", args=tuple(cast_to(a, typ) for a in args), type=typ,
                   nullable=all(a.nullable for a in args), span=span)


def _nullif(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2)
    typ = common_of(name, args)
    return ir.Call(fn="nullif", args=tuple(cast_to(a, typ) for a in args), type=typ, nullable=True, span=span)


def _if(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 3)
    _need(name, args[0], pt.is_boolean, "a BOOLEAN condition", 1)
    typ = common_of(name, args[1:])
    return ir.Call(fn="if", args=(cast_to(args[0], pa.bool_()), cast_to(args[1], typ), cast_to(args[2], typ)),
                   type=typ, nullable=args[1].nullable or args[2].nullable, span=span)


#: Java date-time pattern letters (DATE_FORMAT's patterns, as in Flink) → strftime directives.
_JAVA_PATTERN = (
    ("yyyy", "%Y"), ("yy", "%y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("hh", "%I"),
    ("mm", "%M"), ("ss", "%S"), ("a", "%p"), ("EEEE", "%A"), ("EEE", "%a"), ("MMMM", "%B"), ("MMM", "%b"),
    ("D", "%j"),
)


def java_to_strftime(pattern: str) -> tuple[str, bool]:
    """Translate a Java date-time pattern; the flag says whether it ends in milliseconds (SSS)."""
    out, i, millis = [], 0, False
    while i < len(pattern):
        if pattern[i] == "'":
            end = pattern.find("'", i + 1)
            end = len(pattern) if end < 0 else end
            out.append(pattern[i + 1:end].replace("%", "%%") or "'")
            i = end + 1
            continue
        if pattern.startswith("SSS", i):
            if i != len(pattern) - 3:
                raise ValueError("SSS (milliseconds) is supported only at the end of the pattern")
            millis = True
            i += 3
            continue
        for java, c in _JAVA_PATTERN:
            if pattern.startswith(java, i):
                out.append(c)
                i += len(java)
                break
        else:
            out.append("%%" if pattern[i] == "%" else pattern[i])
            i += 1
    return "".join(out), millis


def _date_format(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2)
    _need(name, args[0], lambda t: pt.is_timestamp(t) or pt.is_date(t) or T.is_string(t), "a TIMESTAMP", 1)
    fmt = _literal(name, args[1], 2, "format string")
    if fmt is None:
        return ir.Literal(value=None, type=pa.string(), span=span)
    try:
        strftime, millis = java_to_strftime(str(fmt))
    except ValueError as exc:
        raise SqlError(f"unsupported DATE_FORMAT pattern {fmt!r}: {exc}", args[1].span) from None
    arg = args[0]
    if T.is_string(arg.type):
        arg = ir.Call(fn="cast", args=(arg,), params=(False,), type=pa.timestamp("ms"), nullable=arg.nullable,
                      span=arg.span)
    arg = wall_clock(arg)
    return ir.Call(fn="date_format", args=(arg,), params=(strftime, millis), type=pa.string(),
                   nullable=arg.nullable, span=span)


EXTRACT_UNITS = {
    "YEAR": "year", "QUARTER": "quarter", "MONTH": "month", "WEEK": "iso_week", "DAY": "day",
    "DAYOFMONTH": "day", "DAYOFWEEK": "dayofweek", "DAYOFYEAR": "day_of_year", "HOUR": "hour",
    "MINUTE": "minute", "SECOND": "second", "MILLISECOND": "millisecond",
}
_DATE_UNITS = {"YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "DAYOFMONTH", "DAYOFWEEK", "DAYOFYEAR"}


def extract(unit: str, arg: ir.Expr, span: Span) -> ir.Expr:
    """``EXTRACT(unit FROM arg)`` as BIGINT; DAYOFWEEK counts Sunday as 1, as Flink does."""
    if unit not in EXTRACT_UNITS:
        raise SqlError(f"cannot extract {unit}", span, f"units: {', '.join(sorted(EXTRACT_UNITS))}")
    ok = pt.is_timestamp(arg.type) or (pt.is_date(arg.type) and unit in _DATE_UNITS) or (
        pt.is_time(arg.type) and unit not in _DATE_UNITS) or T.is_null(arg.type)
    if not ok:
        raise SqlError(f"cannot extract {unit} from {T.sql_name(arg.type)}", arg.span)
    arg = wall_clock(arg)
    return ir.Call(fn="extract", args=(arg,), params=(EXTRACT_UNITS[unit],), type=pa.int64(),
                   nullable=arg.nullable, span=span)


def _extract_fn(unit: str) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 1)
        return extract(unit, args[0], span)

    return bind


def common_of(name: str, args: list[ir.Expr]) -> pa.DataType:
    typ = args[0].type
    for a in args[1:]:
        nxt = T.common_type(typ, a.type)
        if nxt is None:
            raise SqlError(f"{name} mixes {T.sql_name(typ)} and {T.sql_name(a.type)}", a.span,
                           "CAST the arguments to one type")
        typ = nxt
    return typ


def arithmetic(op: str, left: ir.Expr, right: ir.Expr, span: Span) -> ir.Expr:
    """``left op right`` for ``+ - * / %``. Integer ``/`` truncates (as in Flink); division or
    modulo by zero gives NULL; integer overflow fails the pipeline rather than wrapping."""
    lt, rt = left.type, right.type
    if T.is_null(lt) and T.is_null(rt):
        return ir.Literal(value=None, type=pa.null(), span=span)
    if T.is_null(lt):
        lt = rt
    if T.is_null(rt):
        rt = lt
    if T.is_numeric(lt) and T.is_numeric(rt):
        fn = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide", "%": "mod"}[op]
        if (pt.is_decimal(lt) or pt.is_decimal(rt)) and not (pt.is_floating(lt) or pt.is_floating(rt)):
            # Exact: each side keeps its own DECIMAL type (an integer becomes DECIMAL(19, 0) etc.),
            # the result type is Flink's, and the value is rounded HALF_UP to its scale, or NULL
            # when it does not fit (Flink's DecimalData.fromBigDecimal).
            typ = T.decimal_arithmetic(op, lt, rt)
            args = (cast_to(left, T.as_decimal(lt)), cast_to(right, T.as_decimal(rt)))
            return ir.Call(fn=fn, args=args, type=typ, nullable=True, span=span)
        typ = T.common_numeric(lt, rt)
        return ir.Call(fn=fn, args=(cast_to(left, typ), cast_to(right, typ)), type=typ,
                       nullable=True if op in "/%" else left.nullable or right.nullable, span=span)
    if pt.is_timestamp(lt) and T.is_interval(rt) and op in "+-":
        return _timestamp_interval(op, left, right, span)
    if T.is_interval(lt) and pt.is_timestamp(rt) and op == "+":
        return _timestamp_interval(op, right, left, span)
    if pt.is_date(lt) and pt.is_duration(rt) and op in "+-" or pt.is_duration(lt) and pt.is_date(rt) and op == "+":
        date, interval = (left, right) if pt.is_date(lt) else (right, left)
        # DATE ± a day-time interval is a DATE: whole days move it; a part day rounds down.
        return ir.Call(fn="date_add", args=(date, interval), params=(op == "-",), type=pa.date32(),
                       nullable=date.nullable or interval.nullable, span=span)
    if pt.is_time(lt) and pt.is_duration(rt) and op in "+-" or pt.is_duration(lt) and pt.is_time(rt) and op == "+":
        time, interval = (left, right) if pt.is_time(lt) else (right, left)
        # TIME ± a day-time interval is a TIME: the time of day, wrapping around midnight.
        return ir.Call(fn="time_add", args=(time, interval), params=(op == "-",), type=time.type,
                       nullable=time.nullable or interval.nullable, span=span)
    if pt.is_duration(lt) and pt.is_duration(rt) and op in "+-":
        fn = "add" if op == "+" else "subtract"
        return ir.Call(fn=fn, args=(left, right), type=lt, nullable=left.nullable or right.nullable, span=span)
    if pt.is_duration(lt) and T.is_numeric(rt) and op in "*/":
        fn = "interval_multiply" if op == "*" else "interval_divide"
        return ir.Call(fn=fn, args=(left, cast_to(right, pa.float64())), type=lt, nullable=True, span=span)
    raise SqlError(
        f"cannot apply '{op}' to {T.sql_name(left.type)} and {T.sql_name(right.type)}", span,
        "use || to join strings" if op == "+" and (T.is_string(lt) or T.is_string(rt)) else
        "CAST one side so both are numbers" if T.is_string(lt) or T.is_string(rt) else None,
    )


def _timestamp_interval(op: str, ts: ir.Expr, interval: ir.Expr, span: Span) -> ir.Expr:
    if pt.is_interval(interval.type):
        raise SqlError("adding a YEAR or MONTH interval to a TIMESTAMP is not supported yet", interval.span,
                       "use a DAY, HOUR, MINUTE or SECOND interval")
    unit = ts.type.unit
    delta = cast_to(interval, pa.duration(unit)) if interval.type != pa.duration(unit) else interval
    fn = "add" if op == "+" else "subtract"
    return ir.Call(fn=fn, args=(ts, delta), type=ts.type, nullable=ts.nullable or interval.nullable, span=span)


def _to_timestamp_ltz(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """TO_TIMESTAMP_LTZ(n [, precision]): epoch seconds (precision 0) or milliseconds (3, the
    default) as a TIMESTAMP_LTZ(3)."""
    _arity(name, args, span, 1, 2)
    _need(name, args[0], T.is_numeric, "a number (epoch seconds or milliseconds)", 1)
    precision = _literal(name, args[1], 2, "integer") if len(args) == 2 else 3
    if precision not in (0, 3):
        where = args[1].span if len(args) == 2 else span
        raise SqlError(f"the precision of {name} must be 0 (epoch seconds) or 3 (epoch milliseconds), "
                       f"got {precision}", where)
    typ = pa.timestamp("ms", tz="UTC")
    if T.is_null(args[0].type):
        return ir.Literal(value=None, type=typ, span=span)
    return ir.Call(fn="to_timestamp_ltz", args=(args[0],), params=(precision,), type=typ,
                   nullable=args[0].nullable, span=span)


def _convert_tz(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """CONVERT_TZ(text, from_zone, to_zone): a 'yyyy-MM-dd HH:mm:ss' wall clock moved between zones."""
    _arity(name, args, span, 3)
    _need(name, args[0], lambda t: T.is_string(t) or T.is_null(t), "a string", 1)
    zones = []
    for i in (1, 2):
        text = _literal(name, args[i], i + 1, "time zone string")
        if not isinstance(text, str):
            raise SqlError(f"argument {i + 1} of {name} must be a time zone string such as 'Asia/Shanghai'",
                           args[i].span)
        try:
            zones.append(parse_time_zone(text))
        except ValueError as exc:
            raise SqlError(str(exc), args[i].span) from None
    if T.is_null(args[0].type):
        return ir.Literal(value=None, type=pa.string(), span=span)
    return ir.Call(fn="convert_tz", args=(args[0],), params=tuple(zones), type=pa.string(), nullable=True,
                   span=span)


def _row(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """``ROW(a, b, ...)``: a ROW whose fields are named EXPR$0, EXPR$1, ... (as Flink names them)."""
    if not args:
        raise SqlError("ROW(...) takes at least one value", span)
    fields = [pa.field(f"EXPR${i}", a.type if not T.is_null(a.type) else pa.int32()) for i, a in enumerate(args)]
    return ir.Call(fn="make_row", args=tuple(cast_to(a, f.type) for a, f in zip(args, fields, strict=True)),
                   type=pa.struct(fields), nullable=False, span=span)


def _cardinality(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """``CARDINALITY(array | map)``: its number of elements (INT), NULL for NULL."""
    _arity(name, args, span, 1)
    (arg,) = args
    if not (pa.types.is_list(arg.type) or pa.types.is_map(arg.type)):
        raise SqlError(f"CARDINALITY takes an ARRAY or a MAP, got {T.sql_name(arg.type)}", arg.span)
    return ir.Call(fn="cardinality", args=(arg,), type=pa.int32(), nullable=arg.nullable, span=span)


def _current(fn: str, typ: pa.DataType) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 0)
        return ir.Call(fn=fn, args=(), type=typ, nullable=False, span=span)

    return bind


# ---------------------------------------------------------------- more of Flink's catalogue


def _call(fn: str, args: list[ir.Expr], typ: pa.DataType, span: Span, params: tuple = (),
          nullable: bool | None = None) -> ir.Expr:
    return ir.Call(fn=fn, args=tuple(args), params=params, type=typ,
                   nullable=_nullable(args) if nullable is None else nullable, span=span)


def _strings(name: str, args: list[ir.Expr]) -> list[ir.Expr]:
    for i, a in enumerate(args, 1):
        _need(name, a, T.is_string, "a STRING", i)
    return [cast_to(a, pa.string()) for a in args]


def _integer_literal(name: str, arg: ir.Expr, position: int) -> int | None:
    value = _literal(name, arg, position, "integer")
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise SqlError(f"argument {position} of {name} must be an integer", arg.span)
    return value


def _string_literal(name: str, arg: ir.Expr, position: int, what: str = "string") -> str | None:
    value = _literal(name, arg, position, what)
    if value is not None and not isinstance(value, str):
        raise SqlError(f"argument {position} of {name} must be a {what}", arg.span)
    return value


def _null(typ: pa.DataType, span: Span) -> ir.Expr:
    return ir.Literal(value=None, type=typ, span=span)


def _double_of(fn: str, arity: int = 1) -> Binder:
    """A function of numbers giving a DOUBLE, run by the Arrow kernel ``fn`` (or an ``F`` one, runtime/functions.py)."""
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, arity)
        for i, a in enumerate(args, 1):
            _need(name, a, T.is_numeric, "a number", i)
        return _call(fn, [cast_to(a, pa.float64()) for a in args], pa.float64(), span)

    return bind


def _log(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """LOG(x) is LN(x); LOG(base, x) the logarithm to ``base`` (Flink fails on a base <= 1)."""
    _arity(name, args, span, 1, 2)
    for i, a in enumerate(args, 1):
        _need(name, a, T.is_numeric, "a number", i)
    doubles = [cast_to(a, pa.float64()) for a in args]
    return _call("ln" if len(args) == 1 else "log", doubles, pa.float64(), span)


def _constant(value: float) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 0)
        return ir.Literal(value=value, type=pa.float64(), nullable=False, span=span)

    return bind


def _sign(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 1)
    _need(name, args[0], T.is_numeric, "a number", 1)
    typ = args[0].type if not T.is_null(args[0].type) else pa.float64()
    return _call("sign", [cast_to(args[0], typ)], typ, span)


def _truncate(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 1, 2)
    _need(name, args[0], T.is_numeric, "a number", 1)
    digits = _integer_literal(name, args[1], 2) if len(args) == 2 else 0
    typ = args[0].type if not T.is_null(args[0].type) else pa.float64()
    if digits is None:
        return _null(typ, span)
    return _call("truncate", [cast_to(args[0], typ)], typ, span, (digits,), args[0].nullable)


def _bin(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 1)
    _need(name, args[0], T.is_integer, "an integer", 1)
    return _call("bin", [cast_to(args[0], pa.int64())], pa.string(), span)


def _hex(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 1)
    _need(name, args[0], lambda t: T.is_integer(t) or T.is_string(t), "an integer or a STRING", 1)
    arg = args[0] if not T.is_null(args[0].type) else cast_to(args[0], pa.string())
    return _call("hex", [arg], pa.string(), span)


def _repeat(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2)
    (text,) = _strings(name, args[:1])
    _need(name, args[1], T.is_integer, "an integer", 2)
    return _call("repeat", [text, cast_to(args[1], pa.int64())], pa.string(), span)


def _regex_literal(name: str, arg: ir.Expr, position: int) -> str | None:
    regex = _string_literal(name, arg, position, "regular expression")
    if regex is None:
        return None
    try:
        # Checked now so that a bad pattern fails at compile time, not on the first batch.
        pc.match_substring_regex(pa.array([""], pa.string()), pattern=regex)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        reason = str(e).split(": ", 1)[-1]
        raise SqlError(f"invalid regular expression for {name}: {reason}", arg.span,
                       "clink uses RE2 syntax: lookarounds, backreferences and possessive quantifiers "
                       "are not available") from None
    return regex


def _regexp(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2)
    (text,) = _strings(name, args[:1])
    regex = _regex_literal(name, args[1], 2)
    if regex is None:
        return _null(pa.bool_(), span)
    return _call("regexp", [text], pa.bool_(), span, (regex,), args[0].nullable)


def java_replacement(text: str) -> str:
    r"""A Java regex replacement (``$1`` for a group, ``\$`` for a dollar) in RE2's form (``\1``)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append("\\\\" if nxt == "\\" else nxt)
            i += 2
        elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append("\\" + text[i + 1:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _regexp_replace(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 3)
    (text,) = _strings(name, args[:1])
    regex = _regex_literal(name, args[1], 2)
    replacement = _string_literal(name, args[2], 3)
    if regex is None or replacement is None:
        return _null(pa.string(), span)
    return _call("regexp_replace", [text], pa.string(), span, (regex, java_replacement(replacement)),
                 args[0].nullable)


def _concat_ws(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    if len(args) < 2:
        raise SqlError(f"{name} takes a separator and at least 1 string", span)
    strings = _strings(name, args)
    return _call("concat_ws", strings, pa.string(), span, nullable=args[0].nullable)


def _pad(left: bool) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 3)
        (text,) = _strings(name, args[:1])
        length = _integer_literal(name, args[1], 2)
        padding = _string_literal(name, args[2], 3)
        if length is None or padding is None or length < 0 or padding == "":
            # Flink gives NULL for a negative length and for an empty padding.
            return _null(pa.string(), span)
        return _call("pad", [text], pa.string(), span, (length, padding, left), args[0].nullable)

    return bind


def _string_to(fn: str, typ: pa.DataType, params: tuple = ()) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 1)
        return _call(fn, _strings(name, args), typ, span, params)

    return bind


def _chr(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 1)
    _need(name, args[0], T.is_integer, "an integer", 1)
    return _call("chr", [cast_to(args[0], pa.int64())], pa.string(), span)


def _instr(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """INSTR(s, needle); LOCATE(needle, s [, start]) and POSITION(needle IN s) are the same search."""
    if name == "INSTR":
        _arity(name, args, span, 2)
        text, needle_arg, start = args[0], args[1], 1
    else:
        _arity(name, args, span, 2, 3)
        needle_arg, text = args[0], args[1]
        start = _integer_literal(name, args[2], 3) if len(args) == 3 else 1
    (text,) = _strings(name, [text])
    position = 2 if name == "INSTR" else 1
    needle = _string_literal(name, needle_arg, position)
    if needle is None or start is None:
        return _null(pa.int32(), span)
    return _call("locate", [text], pa.int32(), span, (needle, start), text.nullable)


def _left_right(fn: str) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 2)
        (text,) = _strings(name, args[:1])
        n = _integer_literal(name, args[1], 2)
        if n is None:
            return _null(pa.string(), span)
        return _call(fn, [text], pa.string(), span, (n,), args[0].nullable)

    return bind


def _ifnull(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """IFNULL(x, replacement): NULL only when the replacement is."""
    _arity(name, args, span, 2)
    typ = common_of(name, args)
    return ir.Call(fn="coalesce", args=tuple(cast_to(a, typ) for a in args), type=typ,
                   nullable=args[1].nullable, span=span)


def _is_kind(kind: str) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 1)
        return _call("is_kind", _strings(name, args), pa.bool_(), span, (kind,), False)

    return bind


def _extreme(fn: str) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        if not args:
            raise SqlError(f"{name} takes at least 1 argument", span)
        typ = common_of(name, args)
        if pt.is_struct(typ) or pt.is_list(typ) or pt.is_map(typ) or pt.is_boolean(typ):
            raise SqlError(f"{name} cannot compare {T.sql_name(typ)} values", span)
        if T.is_null(typ):
            return _null(pa.int32(), span)
        return _call(fn, [cast_to(a, typ) for a in args], typ, span)

    return bind


_SHA2 = {224: "sha224", 256: "sha256", 384: "sha384", 512: "sha512"}


def _hash(algorithm: str | None) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 1 if algorithm else 2)
        (text,) = _strings(name, args[:1])
        chosen = algorithm
        if chosen is None:
            bits = _integer_literal(name, args[1], 2)
            if bits is None:
                return _null(pa.string(), span)
            if bits not in _SHA2:
                raise SqlError(f"SHA2 takes a bit length of 224, 256, 384 or 512, got {bits}", args[1].span)
            chosen = _SHA2[bits]
        return _call("hash", [text], pa.string(), span, (chosen,), args[0].nullable)

    return bind


def _typeof(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """TYPEOF(x): the SQL type of ``x`` (with NOT NULL when it cannot be NULL), a constant."""
    _arity(name, args, span, 1, 2)
    (arg,) = args[:1]
    text = T.sql_name(arg.type) if not T.is_null(arg.type) else "NULL"
    if not arg.nullable:
        text += " NOT NULL"
    return ir.Literal(value=text, type=pa.string(), nullable=False, span=span)


def _current_database(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """CURRENT_DATABASE(): clink has one database, named as Flink's default one."""
    _arity(name, args, span, 0)
    return ir.Literal(value="default_database", type=pa.string(), nullable=False, span=span)


def _map_part(keys: bool) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 1)
        (arg,) = args
        if not pt.is_map(arg.type):
            raise SqlError(f"{name} takes a MAP, got {T.sql_name(arg.type)}", arg.span)
        part = arg.type.key_type if keys else arg.type.item_type
        return _call("map_part", [arg], pa.list_(part), span, (keys,))

    return bind


def _array_arg(name: str, arg: ir.Expr) -> pa.DataType:
    if not pt.is_list(arg.type):
        raise SqlError(f"{name} takes an ARRAY, got {T.sql_name(arg.type)}", arg.span)
    return arg.type.value_type


def _array_needle(fn: str) -> Binder:
    """ARRAY_CONTAINS, ARRAY_POSITION and ARRAY_REMOVE: an array and a value of its elements' type
    (cast to it)."""
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 2)
        haystack, needle = args
        element = _array_arg(name, haystack)
        if not (T.is_null(needle.type) or needle.type == element
                or (T.is_numeric(needle.type) and T.is_numeric(element))
                or (T.is_string(needle.type) and T.is_string(element))):
            raise SqlError(f"{name} looks for a {T.sql_name(element)} in this array, got {T.sql_name(needle.type)}",
                           needle.span, "CAST the value to the array's element type")
        needle = cast_to(needle, element)
        if fn == "array_contains":
            return _call(fn, [haystack, needle], pa.bool_(), span, nullable=haystack.nullable)
        if fn == "array_position":
            return _call(fn, [haystack, needle], pa.int32(), span)
        return _call(fn, [haystack, needle], haystack.type, span, nullable=haystack.nullable)

    return bind


def _array_of(fn: str) -> Binder:
    """ARRAY_REVERSE and ARRAY_DISTINCT: an array of the same type."""
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        _arity(name, args, span, 1)
        _array_arg(name, args[0])
        return _call(fn, args, args[0].type, span)

    return bind


def _map_from_arrays(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 2)
    keys, values = _array_arg(name, args[0]), _array_arg(name, args[1])
    if pt.is_nested(keys) or T.is_null(keys):
        raise SqlError(f"{name}: the keys must be of a scalar type, got {T.sql_name(keys)}", args[0].span)
    return _call("map_from_arrays", args, pa.map_(keys, values), span)


def _element(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 1)
    (arg,) = args
    if not pt.is_list(arg.type):
        raise SqlError(f"{name} takes an ARRAY, got {T.sql_name(arg.type)}", arg.span)
    return _call("element", [arg], arg.type.value_type, span, nullable=True)


TIME_UNITS = ("MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR")


def time_unit(name: str, arg: ir.Expr | str, span: Span) -> str:
    """The unit word of TIMESTAMPADD, TIMESTAMPDIFF and FLOOR / CEIL(... TO unit)."""
    word = arg.upper() if isinstance(arg, str) else None
    if word is None and isinstance(arg, ir.Literal) and isinstance(arg.value, str):
        word = arg.value.upper()
    word = {"SQL_TSI_" + u: u for u in TIME_UNITS}.get(word, word) if word else None
    word = {"YEARS": "YEAR", "MONTHS": "MONTH", "DAYS": "DAY", "HOURS": "HOUR", "MINUTES": "MINUTE",
            "SECONDS": "SECOND", "MILLISECONDS": "MILLISECOND"}.get(word, word) if word else None
    if word not in TIME_UNITS:
        raise SqlError(f"{name} takes a time unit here", getattr(arg, "span", span),
                       f"units: {', '.join(TIME_UNITS)}")
    return word


def _temporal(name: str, arg: ir.Expr, position: int) -> ir.Expr:
    t = arg.type
    if not (pt.is_timestamp(t) or pt.is_date(t) or T.is_null(t)):
        raise SqlError(f"argument {position} of {name} must be a TIMESTAMP or a DATE, got {T.sql_name(t)}", arg.span)
    return cast_to(arg, pa.timestamp("ms")) if T.is_null(t) else arg


def timestampadd(unit: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """TIMESTAMPADD(unit, n, ts): ``ts`` moved by ``n`` units, in ``ts``'s type (a DATE stays a
    DATE, for units of a day or more)."""
    name = "TIMESTAMPADD"
    if len(args) != 2:
        raise SqlError(f"{name} takes a unit and 2 arguments, got {len(args) + 1}", span)
    _need(name, args[0], T.is_integer, "an integer", 2)
    ts = _temporal(name, args[1], 3)
    if pt.is_date(ts.type) and unit in ("MILLISECOND", "SECOND", "MINUTE", "HOUR"):
        raise SqlError(f"{name} of {unit} to a DATE is not supported", args[1].span, "CAST the DATE AS TIMESTAMP")
    if pt.is_timestamp(ts.type) and ts.type.tz is not None and unit in ("MONTH", "QUARTER", "YEAR"):
        raise SqlError(f"{name} of {unit}s to a TIMESTAMP_LTZ is not supported", args[1].span,
                       "CAST it AS TIMESTAMP(3) (its wall clock in the session time zone) first")
    return _call("timestampadd", [cast_to(args[0], pa.int64()), ts], ts.type, span, (unit,))


def timestampdiff(unit: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """TIMESTAMPDIFF(unit, a, b): whole units from ``a`` to ``b`` (INT)."""
    name = "TIMESTAMPDIFF"
    if len(args) != 2:
        raise SqlError(f"{name} takes a unit and 2 arguments, got {len(args) + 1}", span)
    a, b = (wall_clock(_temporal(name, x, i)) for i, x in ((2, args[0]), (3, args[1])))
    return _call("timestampdiff", [a, b], pa.int32(), span, (unit,))


def _unit_first(bind_rest: Callable[[str, list[ir.Expr], Span], ir.Expr]) -> Binder:
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        if not args:
            raise SqlError(f"{name} takes a unit and 2 arguments", span)
        return bind_rest(time_unit(name, args[0], span), args[1:], span)

    return bind


#: Java date-time pattern letters a parser reads, as regular-expression groups.
_JAVA_PARSE = (
    ("yyyy", r"(?P<y>[0-9]{4})"), ("MM", r"(?P<M>[0-9]{1,2})"), ("M", r"(?P<M>[0-9]{1,2})"),
    ("dd", r"(?P<d>[0-9]{1,2})"), ("d", r"(?P<d>[0-9]{1,2})"), ("HH", r"(?P<H>[0-9]{1,2})"),
    ("H", r"(?P<H>[0-9]{1,2})"), ("mm", r"(?P<m>[0-9]{1,2})"), ("m", r"(?P<m>[0-9]{1,2})"),
    ("ss", r"(?P<s>[0-9]{1,2})"), ("s", r"(?P<s>[0-9]{1,2})"), ("SSS", r"(?P<S>[0-9]{3})"),
    ("XXX", r"(?P<X>Z|[+-][0-9]{2}:[0-9]{2})"), ("XX", r"(?P<X>Z|[+-][0-9]{4})"), ("X", r"(?P<X>Z|[+-][0-9]{2}(?:[0-9]{2})?)"),
)


def java_to_regex(pattern: str) -> str:
    """A Java date-time pattern (as TO_TIMESTAMP, TO_DATE and UNIX_TIMESTAMP take it) as a regular
    expression with a named group per field; ValueError names a letter it cannot read."""
    import re

    out, i, seen = [], 0, set()
    while i < len(pattern):
        c = pattern[i]
        if c == "'":
            end = pattern.find("'", i + 1)
            end = len(pattern) if end < 0 else end
            out.append(re.escape(pattern[i + 1:end] or "'"))
            i = end + 1
            continue
        for java, group in _JAVA_PARSE:
            if pattern.startswith(java, i) and not pattern.startswith(java + java[0], i):
                if java[0] in seen:
                    raise ValueError(f"the pattern letter {java[0]!r} appears twice")
                seen.add(java[0])
                out.append(group)
                i += len(java)
                break
        else:
            if c.isalpha():
                run = len(pattern) - len(pattern[i:].lstrip(c))
                raise ValueError(f"the pattern letters {pattern[i:i + run]!r} are not supported "
                                 "(supported: yyyy MM dd HH mm ss SSS X, text in '...')")
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _pattern_arg(name: str, args: list[ir.Expr], default: str) -> str | None:
    fmt = _string_literal(name, args[1], 2, "format string") if len(args) == 2 else default
    if fmt is None:
        return None
    try:
        return java_to_regex(fmt)
    except ValueError as exc:
        raise SqlError(f"unsupported {name} pattern {fmt!r}: {exc}", args[1].span) from None


def _to_timestamp(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """TO_TIMESTAMP(s [, format]): TIMESTAMP(3); NULL when ``s`` does not spell one. Without a
    format, ``s`` is read as CAST reads it (a fraction of a second allowed)."""
    _arity(name, args, span, 1, 2)
    (text,) = _strings(name, args[:1])
    if len(args) == 1:
        return ir.Call(fn="cast", args=(text,), params=(True,), type=pa.timestamp("ms"), nullable=True, span=span)
    regex = _pattern_arg(name, args, "")
    if regex is None:
        return _null(pa.timestamp("ms"), span)
    return _call("to_timestamp", [text], pa.timestamp("ms"), span, (regex,), True)


def _to_date(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    _arity(name, args, span, 1, 2)
    (text,) = _strings(name, args[:1])
    regex = _pattern_arg(name, args, "yyyy-MM-dd")
    if regex is None:
        return _null(pa.date32(), span)
    return _call("to_date", [text], pa.date32(), span, (regex,), True)


def _unix_timestamp(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """UNIX_TIMESTAMP(): processing time in epoch seconds; UNIX_TIMESTAMP(s [, format]): the
    epoch seconds ``s`` names in the session time zone (Long.MIN_VALUE when it does not parse)."""
    _arity(name, args, span, 0, 2)
    if not args:
        return _call("unix_now", [], pa.int64(), span, nullable=False)
    (text,) = _strings(name, args[:1])
    regex = _pattern_arg(name, args, "yyyy-MM-dd HH:mm:ss")
    if regex is None:
        return _null(pa.int64(), span)
    return _call("unix_timestamp", [text], pa.int64(), span, (regex,), args[0].nullable)


def _from_unixtime(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """FROM_UNIXTIME(n [, format]): epoch seconds as text, in the session time zone."""
    _arity(name, args, span, 1, 2)
    _need(name, args[0], T.is_numeric, "a number of seconds", 1)
    fmt = _string_literal(name, args[1], 2, "format string") if len(args) == 2 else "yyyy-MM-dd HH:mm:ss"
    if fmt is None or T.is_null(args[0].type):
        return _null(pa.string(), span)
    try:
        strftime, millis = java_to_strftime(fmt)
    except ValueError as exc:
        raise SqlError(f"unsupported {name} pattern {fmt!r}: {exc}", args[1].span) from None
    return _call("from_unixtime", [args[0]], pa.string(), span, (strftime, millis))


FUNCTIONS: dict[str, Binder] = {
    "UPPER": _string_fn("upper"),
    "LOWER": _string_fn("lower"),
    "TRIM": _trim_fn("trim"),
    "LTRIM": _trim_fn("ltrim"),
    "RTRIM": _trim_fn("rtrim"),
    "CHAR_LENGTH": _char_length,
    "CHARACTER_LENGTH": _char_length,
    "SUBSTRING": _substring,
    "SUBSTR": _substring,
    "CONCAT": _concat,
    "REPLACE": _replace,
    "SPLIT_INDEX": _split_index,
    "STR_TO_MAP": _str_to_map,
    "DECODE": _decode,
    "ENCODE": _encode,
    "PARSE_URL": _parse_url,
    "REGEXP_EXTRACT": _regexp_extract,
    "ABS": _numeric_same("abs"),
    "ROUND": _round,
    "FLOOR": _numeric_same("floor"),
    "CEIL": _numeric_same("ceil"),
    "CEILING": _numeric_same("ceil"),
    "MOD": _mod,
    "POWER": _double_fn("power", 2),
    "SQRT": _double_fn("sqrt", 1),
    "COALESCE": _coalesce,
    "NULLIF": _nullif,
    "IF": _if,
    "DATE_FORMAT": _date_format,
    "YEAR": _extract_fn("YEAR"),
    "QUARTER": _extract_fn("QUARTER"),
    "MONTH": _extract_fn("MONTH"),
    "WEEK": _extract_fn("WEEK"),
    "DAYOFMONTH": _extract_fn("DAY"),
    "DAYOFWEEK": _extract_fn("DAYOFWEEK"),
    "DAYOFYEAR": _extract_fn("DAYOFYEAR"),
    "HOUR": _extract_fn("HOUR"),
    "MINUTE": _extract_fn("MINUTE"),
    "SECOND": _extract_fn("SECOND"),
    "NOW": _current("current_timestamp", pa.timestamp("ms", tz="UTC")),
    "TO_TIMESTAMP_LTZ": _to_timestamp_ltz,
    "CONVERT_TZ": _convert_tz,
    "ROW": _row,
    "CARDINALITY": _cardinality,
    # The processing time of each row: a processing-time attribute (lookup joins).
    "PROCTIME": _current("proctime", pa.timestamp("ms", tz="UTC")),
    "CURRENT_ROW_TIMESTAMP": _current("proctime", pa.timestamp("ms", tz="UTC")),
    "LN": _double_of("ln"),
    "LOG": _log,
    "LOG10": _double_of("log10"),
    "LOG2": _double_of("log2"),
    "EXP": _double_of("exp"),
    "SIN": _double_of("sin"),
    "SINH": _double_of("sinh"),
    "COS": _double_of("cos"),
    "COSH": _double_of("cosh"),
    "TAN": _double_of("tan"),
    "TANH": _double_of("tanh"),
    "COT": _double_of("cot"),
    "ASIN": _double_of("asin"),
    "ACOS": _double_of("acos"),
    "ATAN": _double_of("atan"),
    "ATAN2": _double_of("atan2", 2),
    "DEGREES": _double_of("degrees"),
    "RADIANS": _double_of("radians"),
    "SIGN": _sign,
    "PI": _constant(math.pi),
    "E": _constant(math.e),
    "TRUNCATE": _truncate,
    "BIN": _bin,
    "HEX": _hex,
    "REPEAT": _repeat,
    "REGEXP": _regexp,
    "REGEXP_REPLACE": _regexp_replace,
    "INITCAP": _string_to("initcap", pa.string()),
    "CONCAT_WS": _concat_ws,
    "LPAD": _pad(True),
    "RPAD": _pad(False),
    "TO_BASE64": _string_to("to_base64", pa.string()),
    "FROM_BASE64": _string_to("from_base64", pa.string()),
    "ASCII": _string_to("ascii", pa.int32()),
    "CHR": _chr,
    "INSTR": _instr,
    "LOCATE": _instr,
    "POSITION": _instr,
    "LEFT": _left_right("left"),
    "RIGHT": _left_right("right"),
    "REVERSE": _string_to("reverse", pa.string()),
    "IFNULL": _ifnull,
    "IS_ALPHA": _is_kind("alpha"),
    "IS_DIGIT": _is_kind("digit"),
    "IS_DECIMAL": _is_kind("decimal"),
    "GREATEST": _extreme("greatest"),
    "LEAST": _extreme("least"),
    "MD5": _hash("md5"),
    "SHA1": _hash("sha1"),
    "SHA224": _hash("sha224"),
    "SHA256": _hash("sha256"),
    "SHA384": _hash("sha384"),
    "SHA512": _hash("sha512"),
    "SHA2": _hash(None),
    "TYPEOF": _typeof,
    "CURRENT_DATABASE": _current_database,
    "MAP_KEYS": _map_part(True),
    "MAP_VALUES": _map_part(False),
    "ELEMENT": _element,
    "ARRAY_CONTAINS": _array_needle("array_contains"),
    "ARRAY_POSITION": _array_needle("array_position"),
    "ARRAY_REMOVE": _array_needle("array_remove"),
    "ARRAY_REVERSE": _array_of("array_reverse"),
    "ARRAY_DISTINCT": _array_of("array_distinct"),
    "MAP_FROM_ARRAYS": _map_from_arrays,
    "TIMESTAMPADD": _unit_first(timestampadd),
    "TIMESTAMPDIFF": _unit_first(timestampdiff),
    "TO_TIMESTAMP": _to_timestamp,
    "TO_DATE": _to_date,
    "UNIX_TIMESTAMP": _unix_timestamp,
    "FROM_UNIXTIME": _from_unixtime,
}

def _is_distinct(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """``a IS DISTINCT FROM b``: ``a <> b`` where NULL equals NULL; never NULL."""
    typ = common_of(name, args)
    if pt.is_struct(typ) or pt.is_list(typ) or pt.is_map(typ):
        raise SqlError(f"cannot compare {T.sql_name(typ)} values", span)
    return _call("is_distinct", [cast_to(a, typ) for a in args], pa.bool_(), span, nullable=False)


def _floor_to(ceil: bool) -> Binder:
    """FLOOR / CEIL(x TO unit): a TIMESTAMP or DATE rounded to a whole unit, in its own type."""
    def bind(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
        word = "CEIL" if ceil else "FLOOR"
        arg = args[0]
        unit = time_unit(f"{word}(... TO unit)", args[1], span)
        t = arg.type
        if pt.is_timestamp(t) and t.tz is not None:
            raise SqlError(f"{word}(... TO {unit}) of a TIMESTAMP_LTZ is not supported", arg.span,
                           "CAST it AS TIMESTAMP(3) (its wall clock in the session time zone) first")
        if not (pt.is_timestamp(t) or pt.is_date(t) or T.is_null(t)):
            raise SqlError(f"{word}(... TO {unit}) takes a TIMESTAMP or a DATE, got {T.sql_name(t)}", arg.span)
        if pt.is_date(t) and unit in ("MILLISECOND", "SECOND", "MINUTE", "HOUR"):
            raise SqlError(f"{word}(... TO {unit}) of a DATE is the DATE itself", span, "write the DATE, or CAST "
                           "it AS TIMESTAMP")
        arg = cast_to(arg, pa.timestamp("ms")) if T.is_null(t) else arg
        return _call("floor_to", [arg], arg.type, span, (unit, ceil))

    return bind


#: Functions written as syntax (``a IS DISTINCT FROM b``, ``FLOOR(ts TO DAY)``): the parser gives
#: them names a call cannot spell.
SYNTAX: dict[str, Binder] = {
    "IS DISTINCT FROM": _is_distinct,
    "FLOOR TO": _floor_to(False),
    "CEIL TO": _floor_to(True),
}

#: Functions whose first argument is a time unit word (``TIMESTAMPADD(DAY, 1, ts)``).
UNIT_FIRST = frozenset({"TIMESTAMPADD", "TIMESTAMPDIFF"})

#: Aggregate and window functions: recognised so that using one outside GROUP BY / OVER gets a
#: clear message rather than "unknown function".
AGGREGATES = frozenset({
    "COUNT", "SUM", "MIN", "MAX", "AVG", "FIRST_VALUE", "LAST_VALUE", "STDDEV_POP", "STDDEV_SAMP",
    "VAR_POP", "VAR_SAMP", "VARIANCE", "LAG", "ROW_NUMBER", "RANK", "DENSE_RANK", "LISTAGG", "COLLECT",
    "JSON_OBJECTAGG", "JSON_ARRAYAGG",
})

#: Table functions, which appear in ``FROM TABLE(...)``.
TABLE_FUNCTIONS = frozenset({"TUMBLE", "HOP", "CUMULATE", "SESSION"})


def with_span(expr: ir.Expr, span: Span) -> ir.Expr:
    return records.evolve(expr, span=span)


# ---------------------------------------------------------------- JSON


def _json_path(name: str, arg: ir.Expr, position: int) -> str | None:
    from clink.runtime import jsonpath

    spec = _string_literal(name, arg, position, "JSON path")
    if spec is None:
        return None
    try:
        jsonpath.parse(spec)
    except ValueError as exc:
        raise SqlError(f"invalid JSON path for {name}: {exc}", arg.span) from None
    return spec


def _json_input(name: str, arg: ir.Expr) -> ir.Expr:
    if not (T.is_string(arg.type) or T.is_null(arg.type)):
        raise SqlError(f"{name} reads JSON text: a STRING, got {T.sql_name(arg.type)}", arg.span,
                       "write the value with JSON_STRING(...) first")
    return cast_to(arg, pa.string())


#: The types JSON_VALUE can give (RETURNING), as Flink lists them, and the other scalars CAST reads.
def _json_returning(t: pa.DataType) -> bool:
    return T.is_string(t) or pt.is_boolean(t) or T.is_numeric(t) or pt.is_date(t) or pt.is_timestamp(t)


def bind_json(name: str, args: list[ir.Expr], options: dict[str, str], returning: pa.DataType | None,
              defaults: dict[str, ir.Expr], span: Span) -> ir.Expr:
    """The SQL/JSON functions: JSON_VALUE, JSON_QUERY, JSON_EXISTS, IS JSON, JSON_OBJECT, JSON_ARRAY."""
    if name == "IS JSON":
        (arg,) = args
        return _call("is_json", [_json_input("IS JSON", arg)], pa.bool_(), span, (options.get("kind", "VALUE"),),
                     False)
    if name in ("JSON_VALUE", "JSON_QUERY", "JSON_EXISTS"):
        text, spec = _json_input(name, args[0]), _json_path(name, args[1], 2)
        if name == "JSON_EXISTS":
            if spec is None:
                return _null(pa.bool_(), span)
            return _call("json_exists", [text], pa.bool_(), span, (spec, options.get("on_error", "FALSE")), True)
        if name == "JSON_QUERY":
            if spec is None:
                return _null(pa.string(), span)
            return _call("json_query", [text], pa.string(), span,
                         (spec, options.get("wrapper", "WITHOUT"), options.get("on_empty", "NULL"),
                          options.get("on_error", "NULL")), True)
        to = returning or pa.string()
        if not _json_returning(to):
            raise SqlError(f"JSON_VALUE cannot return {T.sql_name(to)}", span,
                           "RETURNING takes a STRING, BOOLEAN, number, DATE or TIMESTAMP type")
        if spec is None:
            return _null(to, span)
        values = []
        for which in ("EMPTY", "ERROR"):
            default = defaults.get(f"on_{which.lower()}")
            if default is None:
                values.append(_null(to, span))
                continue
            if not T.can_cast(default.type, to):
                raise SqlError(f"the DEFAULT ... ON {which} of JSON_VALUE must be a {T.sql_name(to)}, got "
                               f"{T.sql_name(default.type)}", default.span)
            if pt.is_boolean(default.type) and T.is_string(to):
                # As JSON writes it, like the values JSON_VALUE finds: 'false', not CAST's 'FALSE'.
                values.append(_call("json_string", [default], pa.string(), default.span))
            else:
                values.append(cast_to(default, to))
        return _call("json_value", [text, *values], to, span,
                     (spec, to, options.get("on_empty", "NULL"), options.get("on_error", "NULL")), True)
    keep_null = options.get("on_null", "NULL" if name == "JSON_OBJECT" else "ABSENT") == "NULL"
    if name == "JSON_OBJECT":
        keys, values = args[0::2], args[1::2]
        names = []
        for k in keys:
            key = _string_literal(name, k, 1, "key string")
            if key is None:
                raise SqlError("a key of JSON_OBJECT must not be NULL", k.span)
            names.append(key)
    else:
        values, names = args, []
    for v in values:
        _json_writable(name, v)
    raw = tuple(isinstance(v, ir.Call) and v.fn in ("json_object", "json_array") for v in values)
    fn = "json_object" if name == "JSON_OBJECT" else "json_array"
    params = (tuple(names), raw, keep_null) if name == "JSON_OBJECT" else (raw, keep_null)
    return _call(fn, list(values), pa.string(), span, params, False)


def json_member(name: str, value: ir.Expr, keep_null: bool) -> ir.Expr:
    """A value of JSON_OBJECTAGG or JSON_ARRAYAGG as the JSON text the aggregate adds: made by
    JSON_OBJECT or JSON_ARRAY, it goes in as JSON (as in those functions); any other value is
    written by JSON_STRING. A NULL value is the text ``null`` (NULL ON NULL) or stays NULL, which
    the aggregate leaves out (ABSENT ON NULL)."""
    _json_writable(name, value)
    span = value.span
    if isinstance(value, ir.Call) and value.fn in ("json_object", "json_array"):
        text = value
    elif T.is_null(value.type):
        text = _null(pa.string(), span)
    else:
        text = _call("json_string", [value], pa.string(), span)
    if keep_null and text.nullable:
        text = _coalesce("COALESCE", [text, ir.Literal(value="null", type=pa.string(), nullable=False, span=span)],
                         span)
    return text


def _json_writable(name: str, v: ir.Expr) -> None:
    def ok(t: pa.DataType) -> bool:
        if T.is_string(t) or pt.is_boolean(t) or T.is_numeric(t) or T.is_null(t):
            return True
        if pt.is_list(t):
            return ok(t.value_type)
        if pt.is_map(t):
            return T.is_string(t.key_type) and ok(t.item_type)
        if pt.is_struct(t):
            return all(ok(t.field(i).type) for i in range(t.num_fields))
        return False

    if not ok(v.type):
        raise SqlError(f"{name} cannot write {T.sql_name(v.type)} as JSON", v.span, "CAST it AS STRING first")


def _json_string(name: str, args: list[ir.Expr], span: Span) -> ir.Expr:
    """JSON_STRING(value): ``value`` as JSON text; NULL for NULL."""
    _arity(name, args, span, 1)
    _json_writable(name, args[0])
    if T.is_null(args[0].type):
        return _null(pa.string(), span)
    return _call("json_string", args, pa.string(), span)


FUNCTIONS["JSON_STRING"] = _json_string
