"""Expressions of the IR written back as SQL-like text, for plans (EXPLAIN) and for the
statements that show what was declared (DESCRIBE, SHOW CREATE TABLE)."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa

from clink.compiler import ir
from clink.compiler import types as T

__all__ = ["expr_sql"]

_INFIX = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "mod": "%", "eq": "=", "ne": "<>",
          "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "AND", "or": "OR"}


def expr_sql(e: ir.Expr, names: tuple[str, ...]) -> str:
    """``e`` written back as SQL-like text over the input column ``names``."""
    match e:
        case ir.Column(index=i):
            return names[i] if i < len(names) else f"${i}"
        case ir.Literal(value=None):
            return "NULL" if T.is_null(e.type) else f"CAST(NULL AS {T.sql_name(e.type)})"
        case ir.Literal(value=v):
            return _literal_sql(v, e.type)
        case ir.Call(fn=fn, args=args) if fn in _INFIX:
            return f"({expr_sql(args[0], names)} {_INFIX[fn]} {expr_sql(args[1], names)})"
        case ir.Call(fn="not", args=(a,)):
            return f"NOT {expr_sql(a, names)}"
        case ir.Call(fn="negate", args=(a,)):
            return f"-{expr_sql(a, names)}"
        case ir.Call(fn="cast", args=(a,), params=(try_,)):
            return f"{'TRY_CAST' if try_ else 'CAST'}({expr_sql(a, names)} AS {T.sql_name(e.type)})"
        case ir.Call(fn="field", args=(a,), params=(idx,)):
            return f"{expr_sql(a, names)}.{a.type.field(idx).name}"
        case ir.Call(fn="like", args=(a,), params=(pattern, escape)):
            tail = f" ESCAPE {_literal_sql(escape, pa.string())}" if escape else ""
            return f"({expr_sql(a, names)} LIKE {_literal_sql(pattern, pa.string())}{tail})"
        case ir.Call(fn="similar_to", args=(a,), params=(pattern, escape, _)):
            tail = f" ESCAPE {_literal_sql(escape, pa.string())}" if escape else ""
            return f"({expr_sql(a, names)} SIMILAR TO {_literal_sql(pattern, pa.string())}{tail})"
        case ir.Call(fn="pick", args=(_, *values)):
            return f"VALUES({', '.join(expr_sql(v, names) for v in values)})"
        case ir.Call(fn="in", args=(a, *items)):
            return f"({expr_sql(a, names)} IN ({', '.join(expr_sql(i, names) for i in items)}))"
        case ir.Call(fn="is_null" | "is_not_null" | "is_true" | "is_not_true" | "is_false" | "is_not_false",
                     args=(a,)):
            return f"({expr_sql(a, names)} {e.fn.upper().replace('_', ' ')})"
        case ir.Call(fn="case", args=args, params=(n, has_else)):
            whens = " ".join(f"WHEN {expr_sql(c, names)} THEN {expr_sql(r, names)}"
                             for c, r in zip(args[:n], args[n:2 * n], strict=True))
            tail = f" ELSE {expr_sql(args[-1], names)}" if has_else else ""
            return f"CASE {whens}{tail} END"
        case ir.Call(fn="current_watermark", params=(rowtime,)):
            return f"CURRENT_WATERMARK({rowtime})"
        case ir.Call(fn="udf", args=args, params=(ref,)):
            return f"{ref.name}({', '.join(expr_sql(a, names) for a in args)})"
        case ir.Call(fn=fn, args=args, params=params):
            inner = ", ".join([expr_sql(a, names) for a in args] + [repr(p) for p in params])
            return f"{fn.upper()}({inner})"
    return repr(e)


def _literal_sql(v: object, t: pa.DataType) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.replace(tzinfo=None).isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    if isinstance(v, dt.time):
        return f"TIME '{v.isoformat()}'"
    if pa.types.is_duration(t):
        return f"INTERVAL '{v / 1000:g}' SECOND"
    if isinstance(v, decimal.Decimal):
        return str(v)
    return repr(v)
