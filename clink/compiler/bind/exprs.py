"""Expressions: literals, intervals, column references, operators, CASE, CAST and function calls.

Each is typed as it is bound. A mistake is recorded (``Binder.errors``) and the expression stands
as a NULL, so one pass reports every mistake in a statement.
"""

from __future__ import annotations

import datetime as dt
import re

import pyarrow as pa
import pyarrow.types as pt

from clink.compiler import ast, ir, similar, udfs
from clink.compiler import types as T
from clink.compiler.bind.scope import Scope, Unresolved, did_you_mean
from clink.compiler.catalog import nearest
from clink.compiler.functions import (
    AGGREGATES,
    FUNCTIONS,
    SYNTAX,
    TABLE_FUNCTIONS,
    UNIT_FIRST,
    arithmetic,
    bind_json,
    cast_to,
    common_of,
    extract,
)
from clink.errors import Span, SqlError
from clink.runtime import compute as pc
from clink.runtime.udaf import AggregateUdf

_INTERVAL_MS = {
    "MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": 86_400_000,
    "WEEK": 7 * 86_400_000,
}
_INTERVAL_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}

WINDOW_PROPERTY = re.compile(r"(TUMBLE|HOP|SESSION|CUMULATE)_(START|END|ROWTIME)")


class ExprBinder:
    """The expression half of ``Binder`` (statements.py): it reads the binder's ``errors``,
    ``functions``, ``udfs`` and the aggregation or OVER context being bound (``_agg``, ``_over``)."""

    def expr(self, e: ast.Expr, scope: Scope) -> ir.Expr:
        """Bind ``e``; a mistake in it is recorded and ``e`` stands as a NULL so binding can go on."""
        try:
            return self._expr(e, scope)
        except Unresolved:
            return ir.Literal(value=None, type=pa.null(), span=e.span)
        except SqlError as exc:
            # Keep going, so one pass reports every mistake in the statement.
            self.errors.append(exc)
            return ir.Literal(value=None, type=pa.null(), span=e.span)

    def _expr(self, e: ast.Expr, scope: Scope) -> ir.Expr:
        match e:
            case ast.Literal():
                return _literal(e)
            case ast.IntervalLiteral():
                return _interval(e)
            case ast.ColumnRef(name=name):
                return self._column(name, None, scope, e.span)
            case ast.FieldAccess(expr=inner, name=field):
                if isinstance(inner, ast.ColumnRef) and inner.name in scope.qualifiers() and not any(
                        c.name == inner.name for c in scope.columns):
                    return self._column(field, inner.name, scope, e.span)
                base = self._expr(inner, scope)
                if not pt.is_struct(base.type):
                    raise SqlError(f"cannot access field {field!r} of {T.sql_name(base.type)}", e.span)
                names = [base.type.field(i).name for i in range(base.type.num_fields)]
                if field not in names:
                    raise SqlError(f"ROW has no field {field!r}", e.span, did_you_mean(field, names, "fields"))
                idx = names.index(field)
                f = base.type.field(idx)
                return ir.Call(fn="field", args=(base,), params=(idx,), type=f.type,
                               nullable=base.nullable or f.nullable, span=e.span)
            case ast.ArrayValue(items=items):
                values = self._common([self._expr(i, scope) for i in items], "ARRAY[...]")
                return ir.Call(fn="make_array", args=tuple(values), type=pa.list_(values[0].type), nullable=False,
                               span=e.span)
            case ast.MapValue(items=items):
                bound = [self._expr(i, scope) for i in items]
                keys, values = self._common(bound[0::2], "the keys of MAP[...]"), self._common(bound[1::2],
                                                                                                "the values of MAP[...]")
                pairs = tuple(x for kv in zip(keys, values, strict=True) for x in kv)
                return ir.Call(fn="make_map", args=pairs, type=pa.map_(keys[0].type, values[0].type), nullable=False,
                               span=e.span)
            case ast.Subscript(expr=inner, index=index):
                base = self._expr(inner, scope)
                idx = self._expr(index, scope)
                if pt.is_list(base.type):
                    if not T.is_integer(idx.type):
                        raise SqlError(f"an ARRAY index must be an integer, got {T.sql_name(idx.type)}", index.span)
                    return ir.Call(fn="element_at", args=(base, cast_to(idx, pa.int64())), type=base.type.value_type,
                                   nullable=True, span=e.span)
                if pt.is_map(base.type):
                    if not isinstance(idx, ir.Literal):
                        raise SqlError("a MAP key in [...] must be a constant", index.span)
                    return ir.Call(fn="map_get", args=(base,), params=(idx.value,), type=base.type.item_type,
                                   nullable=True, span=e.span)
                raise SqlError(f"cannot index into {T.sql_name(base.type)}", e.span)
            case ast.BinaryOp(op="||", left=left, right=right):
                lhs, rhs = self._expr(left, scope), self._expr(right, scope)
                for side in (lhs, rhs):
                    if not (T.is_string(side.type) or T.is_null(side.type)):
                        raise SqlError(f"'||' joins strings, got {T.sql_name(side.type)}", side.span,
                                       "CAST it AS STRING")
                return ir.Call(fn="concat", args=(cast_to(lhs, pa.string()), cast_to(rhs, pa.string())),
                               type=pa.string(), nullable=lhs.nullable or rhs.nullable, span=e.span)
            case ast.BinaryOp(op=op, left=left, right=right):
                return arithmetic(op, self._expr(left, scope), self._expr(right, scope), e.span)
            case ast.UnaryOp(op=op, operand=operand):
                arg = self._expr(operand, scope)
                if not (T.is_numeric(arg.type) or pt.is_duration(arg.type) or T.is_null(arg.type)):
                    raise SqlError(f"cannot apply unary '{op}' to {T.sql_name(arg.type)}", e.span)
                if op == "+":
                    return arg
                return ir.Call(fn="negate", args=(arg,), type=arg.type, nullable=arg.nullable, span=e.span)
            case ast.Comparison(op=op, left=left, right=right):
                return self._compare(op, self._expr(left, scope), self._expr(right, scope), e.span)
            case ast.And(left=left, right=right) | ast.Or(left=left, right=right):
                word = "AND" if isinstance(e, ast.And) else "OR"
                lhs = self._boolean(self._expr(left, scope), word)
                rhs = self._boolean(self._expr(right, scope), word)
                return ir.Call(fn=word.lower(), args=(lhs, rhs), type=pa.bool_(),
                               nullable=lhs.nullable or rhs.nullable, span=e.span)
            case ast.Not(operand=operand):
                arg = self._boolean(self._expr(operand, scope), "NOT")
                return ir.Call(fn="not", args=(arg,), type=pa.bool_(), nullable=arg.nullable, span=e.span)
            case ast.IsNull(operand=operand, negated=negated):
                arg = self._expr(operand, scope)
                return ir.Call(fn="is_not_null" if negated else "is_null", args=(arg,), type=pa.bool_(),
                               nullable=False, span=e.span)
            case ast.IsBool(operand=operand, value=value, negated=negated):
                arg = self._boolean(self._expr(operand, scope), "IS TRUE/FALSE")
                fn = f"is_{'not_' if negated else ''}{'true' if value else 'false'}"
                return ir.Call(fn=fn, args=(arg,), type=pa.bool_(), nullable=False, span=e.span)
            case ast.Between(operand=operand, low=low, high=high, negated=negated, symmetric=symmetric):
                arg, first, second = self._expr(operand, scope), self._expr(low, scope), self._expr(high, scope)
                both = self._within(arg, first, second, e.span)
                if symmetric:
                    # Calcite's SYMMETRIC: either order of the bounds, so NULL rules follow OR.
                    swapped = self._within(arg, second, first, e.span)
                    both = ir.Call(fn="or", args=(both, swapped), type=pa.bool_(),
                                   nullable=both.nullable or swapped.nullable, span=e.span)
                if negated:
                    return ir.Call(fn="not", args=(both,), type=pa.bool_(), nullable=both.nullable, span=e.span)
                return both
            case ast.InList(operand=operand, items=items, negated=negated):
                arg = self._expr(operand, scope)
                values = [self._expr(i, scope) for i in items]
                typ = common_of("IN", [arg, *values])
                call = ir.Call(fn="in", args=(cast_to(arg, typ), *(cast_to(v, typ) for v in values)),
                               type=pa.bool_(), nullable=arg.nullable or any(v.nullable for v in values),
                               span=e.span)
                if negated:
                    return ir.Call(fn="not", args=(call,), type=pa.bool_(), nullable=call.nullable, span=e.span)
                return call
            case ast.Like(operand=operand, pattern=pattern, escape=escape, negated=negated):
                arg = self._expr(operand, scope)
                pat = self._expr(pattern, scope)
                if not (T.is_string(arg.type) or T.is_null(arg.type)):
                    raise SqlError(f"LIKE needs a STRING on its left, got {T.sql_name(arg.type)}", operand.span)
                if not isinstance(pat, ir.Literal) or not (T.is_string(pat.type) or T.is_null(pat.type)):
                    raise SqlError("the LIKE pattern must be a constant string", pattern.span)
                if pat.value is None:
                    return ir.Literal(value=None, type=pa.bool_(), span=e.span)
                call = ir.Call(fn="like", args=(cast_to(arg, pa.string()),), params=(pat.value, escape),
                               type=pa.bool_(), nullable=arg.nullable, span=e.span)
                if negated:
                    return ir.Call(fn="not", args=(call,), type=pa.bool_(), nullable=call.nullable, span=e.span)
                return call
            case ast.SimilarTo(operand=operand, pattern=pattern, escape=escape, negated=negated):
                call = self._similar_to(self._expr(operand, scope), self._expr(pattern, scope), escape, e.span)
                if negated:
                    return ir.Call(fn="not", args=(call,), type=pa.bool_(), nullable=call.nullable, span=e.span)
                return call
            case ast.Overlaps(start1=start1, end1=end1, start2=start2, end2=end2):
                return self._overlaps([self._expr(x, scope) for x in (start1, end1, start2, end2)], e.span)
            case ast.Cast(operand=operand, type=typ, try_=try_):
                arg = self._expr(operand, scope)
                if not T.can_cast(arg.type, typ):
                    raise SqlError(f"cannot CAST {T.sql_name(arg.type)} to {T.sql_name(typ)}", e.span)
                if isinstance(arg, ir.Literal) and arg.value is None:
                    return ir.Literal(value=None, type=typ, span=e.span)
                return ir.Call(fn="cast", args=(arg,), params=(try_,), type=typ,
                               nullable=arg.nullable or try_ or T.is_string(arg.type), span=e.span)
            case ast.Extract(unit=unit, operand=operand):
                return extract(unit, self._expr(operand, scope), e.span)
            case ast.Case():
                return self._case(e, scope)
            case ast.JsonCall(name=name, args=args, options=options, returning=returning, defaults=defaults):
                bound = [self._expr(a, scope) for a in args]
                bound_defaults = {which: self._expr(d, scope) for which, d in defaults}
                return bind_json(name, bound, dict(options), returning, bound_defaults, e.name_span or e.span)
            case ast.CurrentTime(kind=kind):
                fn, typ = {
                    "CURRENT_TIMESTAMP": ("current_timestamp", pa.timestamp("ms", tz="UTC")),
                    "NOW": ("current_timestamp", pa.timestamp("ms", tz="UTC")),
                    "LOCALTIMESTAMP": ("localtimestamp", pa.timestamp("ms")),
                    "CURRENT_DATE": ("current_date", pa.date32()),
                    "CURRENT_TIME": ("current_time", pa.time32("ms")),
                    "LOCALTIME": ("localtime", pa.time32("s")),
                }[kind]
                return ir.Call(fn=fn, args=(), type=typ, nullable=False, span=e.span)
            case ast.FunctionCall():
                return self._call(e, scope)
            case ast.Descriptor() | ast.TableArg():
                raise SqlError("DESCRIPTOR(...) and TABLE t are arguments of window table functions only", e.span)
            case ast.NamedArg(name=name):
                raise SqlError(f"arguments by name ({name} => ...) are taken by window table functions only",
                               e.span, "give this function its arguments in order")
            case ast.QualifiedStar():
                raise SqlError("'.*' is allowed only as a select item", e.span)
        raise SqlError(f"unsupported expression {type(e).__name__}", e.span)

    def _common(self, values: list[ir.Expr], what: str) -> list[ir.Expr]:
        """``values`` cast to their common type (INT for all NULLs), or refused."""
        common = common_of(what, values)
        common = pa.int32() if T.is_null(common) else common
        return [cast_to(v, common) for v in values]

    def _column(self, name: str, qualifier: str | None, scope: Scope, span: Span) -> ir.Expr:
        matches = [(i, c) for i, c in enumerate(scope.columns)
                   if c.name == name and (qualifier is None or c.qualifier == qualifier)]
        if len(matches) > 1:
            raise SqlError(f"column {name!r} is ambiguous", span, "qualify it with its table or alias")
        if not matches:
            candidates = [c.name for c in scope.columns if qualifier is None or c.qualifier == qualifier]
            tables = sorted(scope.qualifiers())
            where = f" in table {qualifier or tables[0]!r}" if (qualifier or len(tables) == 1) else ""
            near = nearest(name, candidates)
            owner = f"columns of {qualifier or tables[0]!r}" if (qualifier or len(tables) == 1) else "columns"
            listing = ", ".join(candidates if len(candidates) <= 12 else [*candidates[:12], "..."])
            if near:
                hint = f"did you mean {near!r}? ({owner}: {listing})"
            else:
                hint = f"{owner}: {listing}" if candidates else ""
            self.errors.append(SqlError(f"unknown column {name!r}{where}", span, hint.strip() or None))
            raise Unresolved
        i, c = matches[0]
        return ir.Column(index=i, name=c.name, type=c.field.type, nullable=c.field.nullable, span=span)

    def _boolean(self, expr: ir.Expr, where: str) -> ir.Expr:
        if T.is_null(expr.type):
            return cast_to(expr, pa.bool_())
        if not pt.is_boolean(expr.type):
            raise SqlError(f"{where} needs BOOLEAN operands, got {T.sql_name(expr.type)}", expr.span)
        return expr

    def _similar_to(self, arg: ir.Expr, pat: ir.Expr, escape: str | None, span: Span) -> ir.Expr:
        """``arg SIMILAR TO pat``: the constant pattern becomes an anchored RE2 pattern now."""
        if not (T.is_string(arg.type) or T.is_null(arg.type)):
            raise SqlError(f"SIMILAR TO needs a STRING on its left, got {T.sql_name(arg.type)}", arg.span)
        if not isinstance(pat, ir.Literal) or not (T.is_string(pat.type) or T.is_null(pat.type)):
            raise SqlError("the SIMILAR TO pattern must be a constant string", pat.span,
                           "for a pattern that varies by row, write REGEXP(s, pattern) with a regular expression")
        if pat.value is None:
            return ir.Literal(value=None, type=pa.bool_(), span=span)
        try:
            regex = similar.to_re2(pat.value, escape)
            # Checked now so that a bad pattern fails at compile time, not on the first batch.
            pc.match_substring_regex(pa.array([""], pa.string()), pattern=regex)
        except similar.PatternError as err:
            raise SqlError(f"invalid SIMILAR TO pattern {pat.value!r} at character {err.index + 1}: {err.reason}",
                           pat.span) from None
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            reason = str(err).split(": ", 1)[-1]
            raise SqlError(f"invalid SIMILAR TO pattern {pat.value!r}: {reason}", pat.span) from None
        return ir.Call(fn="similar_to", args=(cast_to(arg, pa.string()),), params=(pat.value, escape, regex),
                       type=pa.bool_(), nullable=arg.nullable, span=span)

    def _overlaps(self, points: list[ir.Expr], span: Span) -> ir.Expr:
        """``(s1, e1) OVERLAPS (s2, e2)`` as Calcite expands it (and Flink with it): an end given as
        an interval is its start plus the interval; each pair is put in order with CASE (``s <= e``);
        then ``e1 >= s2 AND e2 >= s1``. So periods that touch overlap, and NULL follows from the
        comparisons (a NULL end makes ``s <= e`` NULL, which CASE reads as FALSE)."""
        kinds = {"DATE": pt.is_date, "TIME": pt.is_time, "TIMESTAMP_LTZ": lambda t: pt.is_timestamp(t) and t.tz,
                 "TIMESTAMP": lambda t: pt.is_timestamp(t) and not t.tz}

        def kind(t: pa.DataType) -> str | None:
            return next((k for k, test in kinds.items() if test(t)), None)

        ends: list[ir.Expr] = []
        for i, p in enumerate(points):
            if i % 2 and T.is_interval(p.type):
                start = points[i - 1]
                if not pt.is_duration(p.type):
                    raise SqlError("OVERLAPS takes a DAY, HOUR, MINUTE or SECOND interval as a period's length, "
                                   f"got {T.sql_name(p.type)}", p.span, "write the period's end as a time point")
                p = arithmetic("+", start, p, p.span)
            elif not (T.is_null(p.type) or kind(p.type)):
                what = "a time point or an interval" if i % 2 else "a time point"
                raise SqlError(f"OVERLAPS takes {what} (DATE, TIME, TIMESTAMP or TIMESTAMP_LTZ) here, got "
                               f"{T.sql_name(p.type)}", p.span)
            ends.append(p)
        found = {kind(p.type) for p in ends if not T.is_null(p.type)}
        if len(found) > 1:
            raise SqlError(f"OVERLAPS compares time points of one kind, got {' and '.join(sorted(found))}", span,
                           "CAST the points to one type")
        typ = pa.timestamp("ms") if not found else ends[0].type
        for p in ends:
            typ = T.common_type(typ, p.type) or typ
        r0, r1, r2, r3 = (cast_to(p, typ) for p in ends)

        def ordered(a: ir.Expr, b: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
            le = self._compare("<=", a, b, span)
            nullable = a.nullable or b.nullable

            def pick(x: ir.Expr, y: ir.Expr) -> ir.Expr:
                return ir.Call(fn="case", args=(le, x, y), params=(1, True), type=typ, nullable=nullable, span=span)

            return pick(a, b), pick(b, a)

        s0, e0 = ordered(r0, r1)
        s1, e1 = ordered(r2, r3)
        first, second = self._compare(">=", e0, s1, span), self._compare(">=", e1, s0, span)
        return ir.Call(fn="and", args=(first, second), type=pa.bool_(), nullable=first.nullable or second.nullable,
                       span=span)

    def _within(self, arg: ir.Expr, low: ir.Expr, high: ir.Expr, span: Span) -> ir.Expr:
        """``arg >= low AND arg <= high``, with SQL's three-valued AND."""
        lo = self._compare(">=", arg, low, span)
        hi = self._compare("<=", arg, high, span)
        return ir.Call(fn="and", args=(lo, hi), type=pa.bool_(), nullable=lo.nullable or hi.nullable, span=span)

    def _compare(self, op: str, left: ir.Expr, right: ir.Expr, span: Span) -> ir.Expr:
        typ = T.common_type(left.type, right.type)
        if typ is None or pt.is_struct(typ) or pt.is_list(typ) or pt.is_map(typ):
            raise SqlError(f"cannot compare {T.sql_name(left.type)} with {T.sql_name(right.type)}", span,
                           "CAST one side to the other's type")
        if T.is_null(typ):
            return ir.Literal(value=None, type=pa.bool_(), span=span)
        fn = {"=": "eq", "<>": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}[op]
        return ir.Call(fn=fn, args=(cast_to(left, typ), cast_to(right, typ)), type=pa.bool_(),
                       nullable=left.nullable or right.nullable, span=span)

    def _case(self, e: ast.Case, scope: Scope) -> ir.Expr:
        conditions: list[ir.Expr] = []
        operand = self._expr(e.operand, scope) if e.operand is not None else None
        for cond, _ in e.whens:
            c = self._expr(cond, scope)
            if operand is not None:
                c = self._compare("=", operand, c, cond.span)
            conditions.append(self._boolean(c, "WHEN"))
        results = [self._expr(r, scope) for _, r in e.whens]
        if e.else_ is not None:
            results.append(self._expr(e.else_, scope))
        typ = common_of("CASE", results)
        if T.is_null(typ):
            return ir.Literal(value=None, type=pa.null(), span=e.span)
        nullable = e.else_ is None or any(r.nullable for r in results)
        args = (*conditions, *(cast_to(r, typ) for r in results))
        return ir.Call(fn="case", args=args, params=(len(conditions), e.else_ is not None), type=typ,
                       nullable=nullable, span=e.span)

    def _call(self, e: ast.FunctionCall, scope: Scope) -> ir.Expr:
        span = e.name_span or e.span
        if e.name == "CURRENT_WATERMARK" and self.functions.get(e.name) is None:
            return self._current_watermark(e, scope)
        python = self._udf(e.name, span) if not is_builtin(e.name) else None
        if python is not None and python.kind == "aggregate":
            if e.over is not None:
                raise SqlError(f"the Python aggregate function {python.ref.name} cannot be used with OVER (...) yet",
                               e.over.span, "use it in a GROUP BY, or a window aggregation (TUMBLE, HOP, CUMULATE)")
            return self._aggregate_call(e, scope, python)
        if python is not None and python.kind == "table":
            raise SqlError(f"{python.ref.name} is a table function: it gives rows, not a value", span,
                           f"join it in FROM: FROM t, LATERAL TABLE({python.ref.name}(...)) AS u (a, b)")
        if e.over is not None and self._over is not None and e.name in AGGREGATES:
            return self._over_call(e, scope)
        if e.over is not None:
            raise SqlError(f"{e.name}(...) OVER (...) is not supported yet", e.over.span)
        if e.name in AGGREGATES:
            return self._aggregate_call(e, scope)
        if m := WINDOW_PROPERTY.fullmatch(e.name):
            if self._agg is None:
                raise SqlError(f"{e.name} is only usable in a query that groups by {m[1]}(...)", span)
            which = {"START": 0, "END": 1, "ROWTIME": 2}[m[2]]
            typ = self._agg.window_time if which == 2 else ir.WINDOW_TIME_TYPE
            return ir.Call(fn="__window__", args=(), params=(which,), type=typ, nullable=False, span=e.span)
        if e.name in TABLE_FUNCTIONS:
            raise SqlError(f"{e.name} is a table function: use it in FROM TABLE({e.name}(...))", span)
        if e.name in ("GROUPING", "GROUPING_ID", "GROUP_ID"):
            # The grouping rewrite made these constants where they may be (SELECT and HAVING).
            raise SqlError(f"{e.name} is only usable in the SELECT list or HAVING of a query with GROUP BY", span)
        binder = FUNCTIONS.get(e.name) or SYNTAX.get(e.name)
        udf = self._udf(e.name, span) if binder is None or self.functions.get(e.name) is not None else None
        if binder is None and udf is None:
            # Imported here: ``python -m clink.compiler.catalogue`` runs that module as __main__.
            from clink.compiler import catalogue

            if (entry := catalogue.unsupported(e.name)) is not None:
                message, hint = catalogue.refusal(e.name, entry)
                raise SqlError(message, span, hint)
            known = sorted({*FUNCTIONS, *self.udfs, *(n.upper() for n in self.functions.names())})
            raise SqlError(f"unknown function {e.name}", span, did_you_mean(e.name, known, "functions"))
        if e.distinct or e.star or e.over is not None:
            raise SqlError(f"{e.name} is a scalar function: DISTINCT, * and OVER do not apply", e.span)
        if udf is None and e.name in UNIT_FIRST and e.args and isinstance(e.args[0], ast.ColumnRef):
            # TIMESTAMPADD(DAY, ...): the unit is a word, not a column.
            unit = ir.Literal(value=e.args[0].name, type=pa.string(), nullable=False, span=e.args[0].span)
            args = [unit, *(self._expr(a, scope) for a in e.args[1:])]
        else:
            args = [self._expr(a, scope) for a in e.args]
        if udf is not None:
            return udfs.bind_call(udf, args, e.span)
        return binder(e.name, args, e.span)

    def _current_watermark(self, e: ast.FunctionCall, scope: Scope) -> ir.Expr:
        """CURRENT_WATERMARK(rowtime): the current watermark of the subtask that evaluates it, as
        the rowtime's type at millisecond precision; NULL before the first watermark. The column
        stays its argument (EXPLAIN shows it), but only the watermark is read."""
        span = e.name_span or e.span
        if len(e.args) != 1 or e.distinct or e.star or e.over is not None or e.filter is not None:
            raise SqlError("CURRENT_WATERMARK takes one argument, a rowtime attribute", e.span)
        if self._agg is not None or self._over is not None:
            raise SqlError("CURRENT_WATERMARK in a query that aggregates is not supported", span,
                           "compute it in a subquery below the aggregation, where its rows are read")
        arg = self._expr(e.args[0], scope)
        if not (isinstance(arg, ir.Column) and arg.index < len(scope.columns) and scope.columns[arg.index].rowtime):
            raise SqlError("the argument of CURRENT_WATERMARK must be a rowtime attribute", e.args[0].span,
                           "name a column that has a WATERMARK declared on it (or a window's window_time)")
        typ = pa.timestamp("ms", tz=arg.type.tz)
        return ir.Call(fn="current_watermark", args=(), params=(arg.name,), type=typ, nullable=True, span=e.span)

    def _is_udaf(self, name: str) -> bool:
        """Whether ``name`` is a Python aggregate function known to this binder."""
        if is_builtin(name):
            return False
        if name.upper() in self.udfs:
            return self.udfs[name.upper()].kind == "aggregate"
        return isinstance(self.functions.get(name), AggregateUdf)

    def _udf(self, name: str, span: Span) -> udfs.BoundUdf | None:
        if name in self.udfs:
            return self.udfs[name]
        f = self.functions.get(name)
        if f is None:
            return None
        if is_builtin(name):
            raise SqlError(f"{name} is a built-in function, and also the name of a Python function given to "
                           "clink", span, "register the Python function under another name: clink.udf(..., name=...)")
        return udfs.registry_function(f, span)


def is_builtin(name: str) -> bool:
    return (name in FUNCTIONS or name in AGGREGATES or name in TABLE_FUNCTIONS
            or WINDOW_PROPERTY.fullmatch(name) is not None)


def _literal(e: ast.Literal) -> ir.Expr:
    match e.kind:
        case "int":
            v = e.value
            if -(2**31) <= v < 2**31:
                return ir.Literal(value=v, type=pa.int32(), nullable=False, span=e.span)
            if -(2**63) <= v < 2**63:
                return ir.Literal(value=v, type=pa.int64(), nullable=False, span=e.span)
            raise SqlError(f"integer literal {v} is out of range for BIGINT", e.span)
        case "decimal":
            # A literal with a point is an exact DECIMAL(p, s), as in Flink: 0.908 is DECIMAL(3, 3).
            value = e.value
            _, digits, exponent = value.as_tuple()
            typ = T.decimal_literal_type(len(digits), exponent)
            if typ is None:
                raise SqlError(f"decimal literal {value} has more than {T.MAX_DECIMAL_PRECISION} digits", e.span,
                               "write it with an exponent (1.5E40) to make it a DOUBLE")
            return ir.Literal(value=value, type=typ, nullable=False, span=e.span)
        case "double":
            # A literal with an exponent is a DOUBLE.
            return ir.Literal(value=float(e.value), type=pa.float64(), nullable=False, span=e.span)
        case "string":
            return ir.Literal(value=e.value, type=pa.string(), nullable=False, span=e.span)
        case "bool":
            return ir.Literal(value=e.value, type=pa.bool_(), nullable=False, span=e.span)
        case "null":
            return ir.Literal(value=None, type=pa.null(), nullable=True, span=e.span)
        case "date":
            return ir.Literal(value=e.value, type=pa.date32(), nullable=False, span=e.span)
        case "time":
            return ir.Literal(value=e.value, type=pa.time64("us") if e.value.microsecond % 1000 else pa.time32("ms"),
                              nullable=False, span=e.span)
        case "timestamp" | "timestamp_ltz":
            value, precision = e.value
            typ = T.timestamp_type(precision, local_time_zone=e.kind == "timestamp_ltz")
            if e.kind == "timestamp_ltz":
                value = value.replace(tzinfo=dt.timezone.utc)
            return ir.Literal(value=value, type=typ, nullable=False, span=e.span)
    raise SqlError(f"unsupported literal {e.kind}", e.span)


_DAY_TIME = re.compile(r"^\s*(?P<sign>[+-])?(?:(?P<d>\d+)\s+)?(?P<h>\d+)(?::(?P<m>\d+)(?::(?P<s>\d+(?:\.\d+)?))?)?\s*$")


def _interval(e: ast.IntervalLiteral) -> ir.Expr:
    text = e.text.strip()
    if e.unit in _INTERVAL_MONTHS:
        try:
            if e.to_unit == "MONTH":
                years, _, months = text.partition("-")
                total = int(years) * 12 + int(months or 0)
            else:
                total = int(text) * _INTERVAL_MONTHS[e.unit]
        except ValueError:
            raise SqlError(f"{e.text!r} is not a number of {e.unit.lower()}s", e.span) from None
        return ir.Literal(value=(total, 0, 0), type=pa.month_day_nano_interval(), nullable=False, span=e.span)
    if e.unit not in _INTERVAL_MS:
        raise SqlError(f"unsupported interval unit {e.unit}", e.span)
    try:
        if e.to_unit is None:
            ms = round(float(text) * _INTERVAL_MS[e.unit])
        else:
            m = _DAY_TIME.match(text)
            if not m:
                raise ValueError
            # 'd hh:mm:ss' is read from the leading unit: INTERVAL '1:30' HOUR TO MINUTE.
            order = ["DAY", "HOUR", "MINUTE", "SECOND"]
            values = [v for v in (m["d"], m["h"], m["m"], m["s"]) if v is not None]
            units = order[order.index(e.unit):][: len(values)]
            ms = round(sum(float(v) * _INTERVAL_MS[u] for v, u in zip(values, units, strict=False)))
            if m["sign"] == "-":
                ms = -ms
    except ValueError:
        raise SqlError(f"{e.text!r} is not an interval of {e.unit}{' TO ' + e.to_unit if e.to_unit else ''}",
                       e.span) from None
    return ir.Literal(value=ms, type=pa.duration("ms"), nullable=False, span=e.span)
