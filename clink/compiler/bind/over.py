"""OVER: ROW_NUMBER() as Top-N (with the limit a filter on it gives), and aggregates over a frame
of each row's partition (``SUM(x) OVER (PARTITION BY k ORDER BY ts ROWS ...)``)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.types as pt

from clink import records
from clink.compiler import ast, ir
from clink.compiler import types as T
from clink.compiler.bind.aggregates import agg_sql, aggregate_signature
from clink.compiler.bind.scope import Scope, ast_walk, derive_name, unique_names
from clink.compiler.bind.subqueries import is_hidden
from clink.compiler.functions import cast_to
from clink.compiler.rewrite.bound_interval_joins import duration_ms
from clink.errors import SqlError


class OverBinder:
    """ROW_NUMBER() and OVER aggregates; ``_over`` is the OVER window being bound."""

    def _row_number(self, q: ast.Select, rel: ir.Rel, scope: Scope) -> ir.Rel:
        """``SELECT ..., ROW_NUMBER() OVER (PARTITION BY p ORDER BY o) AS rn FROM ...``: the select
        list, the partition and order expressions as one projection, a Rank over it, and the
        select list again in its order. The query above must keep ``rn <= N`` (rewrite/limit_ranks.py)."""
        calls = [item for item in q.items if is_row_number(item)]
        if len(calls) > 1:
            raise SqlError("only one ROW_NUMBER(), RANK() or DENSE_RANK() per SELECT is supported", calls[1].span)
        call: ast.FunctionCall = calls[0].expr
        over = call.over
        if call.args or call.distinct or call.star:
            raise SqlError(f"{call.name}() takes no arguments", call.span)
        if over.frame is not None:
            raise SqlError(f"{call.name}() OVER (...) takes no frame (ROWS/RANGE ...)", over.span)
        if not over.order_by:
            raise SqlError(f"{call.name}() needs ORDER BY in its OVER (...)", over.span,
                           "e.g. OVER (PARTITION BY auction ORDER BY price DESC)")
        exprs: list[ir.Expr] = []
        names: list[str] = []
        slots: list[int | None] = []  # per select output: its column in the projection, None for rn
        rank_name = calls[0].alias or "row_number"
        for item in q.items:
            match item:
                case ast.Star(qualifier=qualifier):
                    for i, c in enumerate(scope.columns):
                        if (qualifier is None and not is_hidden(c.qualifier)) or c.qualifier == qualifier:
                            slots.append(len(exprs))
                            exprs.append(ir.Column(index=i, name=c.name, type=c.field.type,
                                                   nullable=c.field.nullable, span=item.span))
                            names.append(c.name)
                case ast.AliasedExpr(expr=e, alias=alias) if not is_row_number(item):
                    slots.append(len(exprs))
                    exprs.append(self.expr(e, scope))
                    names.append(alias or derive_name(e, len(names)))
                case _:
                    slots.append(None)
        self._raise_collected()
        visible = len(exprs)
        def column_for(bound: ir.Expr, name: str) -> int:
            """The projection's column holding ``bound``: a selected column, or a new one."""
            if isinstance(bound, ir.Column):
                for j, e in enumerate(exprs):
                    if isinstance(e, ir.Column) and e.index == bound.index:
                        return j
            exprs.append(bound)
            names.append(name)
            return len(exprs) - 1

        partition = [column_for(self.expr(p, scope), f"_partition{i}") for i, p in enumerate(over.partition_by)]
        order = []
        for i, (o, descending) in enumerate(over.order_by):
            bound = self.expr(o, scope)
            if pt.is_nested(bound.type):
                raise SqlError(f"cannot ORDER BY a {T.sql_name(bound.type)}", o.span)
            order.append((column_for(bound, f"_order{i}"), descending))
        self._raise_collected()
        pre = ir.Project(input=rel, exprs=tuple(exprs), names=unique_names(names), span=q.span)
        rank = ir.Rank(uid=self._uid,
                       input=pre, partition=tuple(partition), order=tuple(order), limit=None, rank_name=rank_name,
                       function=call.name.lower(), span=call.span)
        fields = rank.schema.fields
        out_exprs = []
        out_names = []
        for slot, name in zip(slots, _select_names(q, names[:visible], slots, rank_name), strict=True):
            index = len(fields) - 1 if slot is None else slot
            out_exprs.append(ir.Column(index=index, name=fields[index].name, type=fields[index].type,
                                       nullable=fields[index].nullable, span=None))
            out_names.append(name)
        return ir.Project(input=rank, exprs=tuple(out_exprs), names=unique_names(out_names), span=q.span)

    def _over_aggregate(self, q: ast.Select, rel: ir.Rel, scope: Scope) -> tuple[ir.Rel, frozenset[str]]:
        """``SELECT ..., agg(x) OVER (PARTITION BY p ORDER BY ts <frame>) ... FROM ...``: a
        projection of the input's columns and the aggregates' arguments, an OverAggregate over it,
        and the select list over that (each OVER call replaced by its aggregate's column)."""
        calls = [n for item in q.items for n in ast_walk(item) if isinstance(n, ast.FunctionCall) and n.over]
        spec = calls[0].over
        updating = ir.is_updating(rel)
        width = len(scope.columns)
        inputs: list[ir.Expr] = [ir.Column(index=i, name=c.name, type=c.field.type, nullable=c.field.nullable,
                                           span=None) for i, c in enumerate(scope.columns)]

        def column_for(bound: ir.Expr) -> int:
            if isinstance(bound, ir.Column):
                return bound.index
            inputs.append(bound)
            return len(inputs) - 1

        partition = tuple(column_for(self.expr(p, scope)) for p in spec.partition_by)
        what = "one column" if updating else "one event-time column"
        if len(spec.order_by) != 1 or spec.order_by[0][1]:
            raise SqlError(f"OVER (...) needs ORDER BY {what}, ascending", spec.span,
                           "e.g. OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)")
        order_expr = spec.order_by[0][0]
        time = self.expr(order_expr, scope)
        frame, preceding = self._over_frame(spec)
        if updating:
            # Results are revised as rows come and go: no watermark to wait for, any order column.
            if not (pt.is_timestamp(time.type) or pt.is_date(time.type) or T.is_integer(time.type)):
                raise SqlError(f"OVER (ORDER BY ...) of a {T.sql_name(time.type)} is not supported", order_expr.span,
                               "over an updating input, order by a timestamp, date or integer")
            if frame == "range" and preceding is not None and not pt.is_timestamp(time.type):
                raise SqlError("RANGE BETWEEN INTERVAL ... PRECEDING needs ORDER BY a timestamp", order_expr.span)
            time = ir.Column(index=column_for(time), name="", type=time.type, nullable=time.nullable, span=None)
        elif not (isinstance(time, ir.Column) and scope.columns[time.index].rowtime):
            raise SqlError("OVER (ORDER BY ...) needs an event-time attribute: a column with a WATERMARK",
                           order_expr.span, "rows are aggregated in event-time order as the watermark passes them")
        context = OverContext(key=_ast_key(spec), inputs=inputs, column_for=column_for)
        self._over = context
        try:
            exprs: list[ir.Expr] = []
            names: list[str] = []
            for item in q.items:
                match item:
                    case ast.Star(qualifier=qualifier):
                        for i, c in enumerate(scope.columns):
                            if (qualifier is None and not is_hidden(c.qualifier)) or c.qualifier == qualifier:
                                exprs.append(inputs[i])
                                names.append(c.name)
                    case ast.AliasedExpr(expr=e, alias=alias):
                        exprs.append(self.expr(e, scope))
                        names.append(alias or derive_name(e, len(names)))
            self._raise_collected()
        finally:
            self._over = None
        lags = [a.param[0] for a in context.aggs if a.fn == "lag"]
        if lags:
            if updating:
                raise SqlError("LAG over an updating input is not supported yet", spec.span)
            if all(a.fn == "lag" for a in context.aggs) and spec.frame is None:
                # LAG reads no frame: keep as many rows as its largest offset reaches back.
                frame, preceding = "rows", max(lags)
            elif not (frame == "rows" and preceding is not None and preceding >= max(lags)):
                raise SqlError("LAG beside other OVER aggregates needs their window to be ROWS BETWEEN n PRECEDING "
                               f"AND CURRENT ROW with n at least LAG's offset ({max(lags)})", spec.span,
                               "or compute LAG in a SELECT of its own")
        pre = ir.Project(input=rel, exprs=tuple(inputs),
                         names=unique_names([*(c.name for c in scope.columns), *(f"_over_arg{i}" for i in
                                                                          range(len(inputs) - width))]),
                         span=q.span)
        # Over an append-only input, rows behind the watermark are late; their columns are the
        # relation's, the first ``width`` of the operator's input.
        late = None if updating else self._late_output(q, rel)
        over = ir.OverAggregate(uid=self._uid,
                                input=pre, partition=partition, time=time.index, frame=frame, preceding=preceding,
                                aggs=tuple(context.aggs), agg_names=tuple(f"over{i}" for i in range(len(context.aggs))),
                                late_sink=late, late_columns=tuple(range(width)) if late is not None else (),
                                span=spec.span)
        base = len(pre.schema)

        def placeholder(e: ir.Expr) -> ir.Expr:
            if isinstance(e, ir.Call) and e.fn == "__over__":
                j = e.params[0]
                return ir.Column(index=base + j, name=over.agg_names[j], type=e.type, nullable=e.nullable, span=e.span)
            return e

        out = tuple(ir.transform(e, placeholder) for e in exprs)
        unique = unique_names(names)
        rowtime = frozenset(n for n, e in zip(unique, out, strict=True)
                            if isinstance(e, ir.Column) and e.index < width and scope.columns[e.index].rowtime
                            and not updating)
        return ir.Project(input=over, exprs=out, names=unique, span=q.span), rowtime

    def _over_frame(self, spec: ast.WindowSpec) -> tuple[str, int | None]:
        """(frame kind, preceding rows or ms, None for UNBOUNDED); no frame is RANGE UNBOUNDED."""
        if spec.frame is None:
            return "range", None
        kind, (_, bound) = spec.frame
        kind = kind.lower()
        if bound is None:
            return kind, None
        value = self.expr(bound, Scope(()))
        if kind == "rows":
            if not (isinstance(value, ir.Literal) and T.is_integer(value.type) and value.value is not None
                    and value.value >= 0):
                raise SqlError("ROWS BETWEEN n PRECEDING needs a whole number n >= 0", bound.span)
            return kind, int(value.value)
        ms = duration_ms(value)
        if ms is None or ms < 0:
            raise SqlError("RANGE BETWEEN ... PRECEDING needs an interval, e.g. INTERVAL '10' SECOND", bound.span)
        return kind, ms

    def _over_call(self, e: ast.FunctionCall, scope: Scope) -> ir.Expr:
        context = self._over
        span = e.name_span or e.span
        if _ast_key(e.over) != context.key:
            raise SqlError("every OVER aggregate of a SELECT needs the same OVER (...) window", e.over.span)
        if e.filter is not None:
            raise SqlError("FILTER on an OVER aggregate is not supported yet", e.filter.span)
        if e.name == "LEAD":
            raise SqlError("LEAD over a stream is not supported: it reads rows that have not arrived yet", span,
                           "order the other way round and use LAG, or compute it in a later step")
        if e.name == "LAG":
            return self._lag(e, scope)
        args = [self._expr(a, scope) for a in e.args]
        fn, typ, nullable = aggregate_signature(e, args)
        if fn not in OVER_AGGREGATES:
            raise SqlError(f"{agg_sql(e)} OVER (...) is not supported yet", span,
                           f"supported: {', '.join(OVER_AGGREGATE_NAMES)}")
        if args and not (T.is_numeric(args[0].type) or pt.is_temporal(args[0].type) or fn == "count") \
                or args and pt.is_decimal(args[0].type) and fn != "count":
            raise SqlError(f"{e.name} OVER (...) of a {T.sql_name(args[0].type)} is not supported yet", span,
                           "OVER aggregates take integers, floating-point numbers and times")
        arg = context.column_for(args[0]) if args else None
        context.aggs.append(ir.AggCall(fn=fn, arg=arg, type=typ, nullable=nullable, sql=agg_sql(e)))
        return ir.Call(fn="__over__", args=(), params=(len(context.aggs) - 1,), type=typ, nullable=nullable,
                       span=e.span)


    def _lag(self, e: ast.FunctionCall, scope: Scope) -> ir.Expr:
        """``LAG(x [, offset [, default]])``: ``x`` of the row ``offset`` (1) rows before in the
        partition, else ``default`` (NULL); constant offset and default."""
        context = self._over
        if not 1 <= len(e.args) <= 3 or e.distinct or e.star:
            raise SqlError("LAG takes a value, an optional offset and an optional default", e.span)
        value = self._expr(e.args[0], scope)
        offset = 1
        if len(e.args) > 1:
            o = e.args[1]
            if not (isinstance(o, ast.Literal) and o.kind == "int" and o.value >= 0):
                raise SqlError("the offset of LAG must be a constant integer, 0 or more", o.span)
            offset = o.value
        default = None
        typ = value.type if not T.is_null(value.type) else pa.int32()
        if len(e.args) > 2:
            d = cast_to(self._expr(e.args[2], scope), typ)
            if not (isinstance(d, ir.Literal) and (d.value is None or isinstance(d.value, (bool, int, float, str)))):
                raise SqlError("the default of LAG must be a constant number, string or boolean of the value's type",
                               e.args[2].span)
            default = d.value
        column = context.column_for(cast_to(value, typ))
        context.aggs.append(ir.AggCall(fn="lag", arg=column, type=typ, nullable=True, sql=agg_sql(e),
                                       param=(offset, default)))
        return ir.Call(fn="__over__", args=(), params=(len(context.aggs) - 1,), type=typ, nullable=True,
                       span=e.span)


OVER_AGGREGATES = ("count_star", "count", "sum", "avg", "min", "max")
OVER_AGGREGATE_NAMES = ("COUNT(*)", "COUNT", "SUM", "AVG", "MIN", "MAX")


@records.record(frozen=False)
class OverContext:
    """While binding a SELECT list with OVER aggregates: the window they share, the projection's
    columns (the input's, then computed arguments) and the aggregates found."""

    key: object
    inputs: list[ir.Expr]
    column_for: Callable[[ir.Expr], int]
    aggs: list[ir.AggCall] = records.field(factory=list)


def _ast_key(node: object) -> object:
    """``node`` as nested tuples without positions: equal for the same text written twice."""
    if isinstance(node, tuple):
        return tuple(_ast_key(n) for n in node)
    if records.has(type(node)):
        return (type(node).__name__, *(
            _ast_key(getattr(node, a.name)) for a in records.fields(type(node)) if a.name not in ("span", "name_span")))
    return node


#: The numbering functions a Top-N takes (Flink's): ROW_NUMBER, and RANK and DENSE_RANK, whose
#: ties share a number.
NUMBERINGS = ("ROW_NUMBER", "RANK", "DENSE_RANK")


def is_row_number(item: ast.SelectItem) -> bool:
    return (isinstance(item, ast.AliasedExpr) and isinstance(item.expr, ast.FunctionCall)
            and item.expr.over is not None and item.expr.name in NUMBERINGS)


def _select_names(q: ast.Select, names: list[str], slots: list[int | None], rank_name: str) -> list[str]:
    """The output names of a select list with ROW_NUMBER: each slot's name, ``rank_name`` for rn."""
    return [rank_name if slot is None else names[slot] for slot in slots]

