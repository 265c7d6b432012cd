"""``MATCH_RECOGNIZE``: the pattern, its conditions and measures, as Flink's CEP page documents them.

A condition (DEFINE) or measure (MEASURES) reads rows of the match through *navigation*: ``A.price``
(the last row mapped to A; in A's own condition, the row being tried), ``LAST(A.price, n)`` /
``FIRST(A.price, n)``, ``PREV(price, n)`` (the row n before, matched or not), and aggregates over
a variable's rows (``SUM(A.price)``; no variable: every row of the match). Each such value becomes
a column of the *match row* the operator builds per candidate (``ir.Nav``); the expression is
then bound like any other, over the input's columns, the derived row expressions that
navigation reads (``LAST(A.price * A.tax)``) and those navigation columns.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.types as pt

from clink.compiler import ast, ir
from clink.compiler import types as T
from clink.compiler.bind.aggregates import aggregate_signature
from clink.compiler.bind.relations import is_proctime
from clink.compiler.bind.scope import Scope, ScopeColumn
from clink.compiler.sqltext import expr_sql
from clink.errors import SqlError

_AGGREGATES = {"SUM", "COUNT", "AVG", "MIN", "MAX"}
_NOT_HERE = {
    "NEXT": "NEXT looks at a row after the current one, which a stream has not seen yet; write PREV or LAST",
    "CLASSIFIER": "CLASSIFIER() is not supported (it needs ALL ROWS PER MATCH)",
    "MATCH_NUMBER": "MATCH_NUMBER() is not supported",
    "MATCH_PROCTIME": "MATCH_PROCTIME() is not supported: MATCH_ROWTIME() gives a match's time when the "
                      "MATCH_RECOGNIZE is ordered by event time",
    "RUNNING": "RUNNING/FINAL semantics are not supported: MEASURES are FINAL",
    "FINAL": "RUNNING/FINAL semantics are not supported: MEASURES are FINAL (write the expression alone)",
}


class MatchBinder:
    """``input MATCH_RECOGNIZE (...)``."""

    def _match_recognize(self, item: ast.MatchRecognize) -> tuple[ir.Rel, Scope]:
        rel, scope = self.from_item(item.input)
        if ir.is_updating(rel):
            raise SqlError("MATCH_RECOGNIZE needs an append-only input; this one is updating", item.input.span,
                           "match over the table or stream itself, before any GROUP BY, join or Top-N that "
                           "updates rows")
        width = len(rel.schema)
        names = [t.variable for t in item.pattern]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise SqlError(f"pattern variable {name} appears twice in the PATTERN", item.pattern[i].span,
                               "a variable names one term; to repeat it, use a quantifier (A{2})")
        variables = {name: i for i, name in enumerate(names)}
        partition = tuple(self._match_column(e, scope, "PARTITION BY") for e in item.partition_by)
        time, order, proctime = self._match_order(item, scope, rel)
        last = item.pattern[-1]
        if last.low == 0 or all(t.low == 0 for t in item.pattern):
            raise SqlError("the pattern can match no row at its end", last.span,
                           "end the PATTERN with a variable that must match a row (no *, ? or {0,...} last)")
        if last.greedy and last.high != last.low:
            raise SqlError(f"the last variable of a pattern cannot have a greedy quantifier ({last.variable})",
                           last.span, f"make it reluctant ({last.variable}+?), or add a variable after it whose "
                                      "condition ends the match")
        skip_to = None
        if item.skip in ("to_first", "to_last"):
            if item.skip_to not in variables:
                raise SqlError(f"AFTER MATCH SKIP names {item.skip_to}, which is not a pattern variable",
                               item.skip_span, f"pattern variables: {', '.join(names)}")
            skip_to = variables[item.skip_to]
            first = item.pattern[0]
            if item.skip == "to_first" and skip_to == 0 and first.low > 0:
                raise SqlError(f"AFTER MATCH SKIP TO FIRST {first.variable} would start the next match where this one "
                               "started, and find it again forever", item.skip_span,
                               "write SKIP TO NEXT ROW, or skip to a later variable")
        within = None
        if item.within is not None:
            value = self.expr(item.within, Scope(()))
            if not (isinstance(value, ir.Literal) and pt.is_duration(value.type)) or value.value <= 0:
                raise SqlError("WITHIN takes a positive interval of time (INTERVAL '1' HOUR)", item.within.span)
            within = int(value.value)

        defines: dict[int, ast.AliasedExpr] = {}
        for d in item.defines:
            if d.alias not in variables:
                raise SqlError(f"DEFINE {d.alias}: {d.alias} is not a variable of the PATTERN", d.span,
                               f"pattern variables: {', '.join(names)}")
            if variables[d.alias] in defines:
                raise SqlError(f"{d.alias} is defined twice", d.span)
            defines[variables[d.alias]] = d
        navs: list[tuple[str, int, ast.Expr, int, ast.Expr]] = []  # kind, variable, row expression, offset, call
        time_name = rel.schema[time].name
        rewritten_defines = {v: self._navigate(d.expr, variables, v, navs, time_name, proctime)
                             for v, d in defines.items()}
        rewritten_measures = [self._navigate(m.expr, variables, None, navs, time_name, proctime)
                              for m in item.measures]
        measure_names = [str(m.alias) for m in item.measures]
        for i, n in enumerate(measure_names):
            if n in measure_names[:i] or n in [rel.schema[p].name for p in partition]:
                raise SqlError(f"the result has two columns named {n!r}", item.measures[i].span)

        # The row expressions navigation reads: a column as it is, the rest derived.
        derived: list[ir.Expr] = []
        nav_nodes: list[ir.Nav] = []
        for kind, var, row_expr, offset, call in navs:
            bound = self.expr(row_expr, scope)
            if isinstance(bound, ir.Column):
                column = bound.index
            else:
                if bound not in derived:
                    derived.append(bound)
                column = width + derived.index(bound)
            if kind in ("last", "first", "prev"):
                typ = bound.type if not T.is_null(bound.type) else pa.int32()
            else:
                fn, typ, _ = aggregate_signature(call, [bound])
                kind = fn
            target = f"{names[var]}." if var >= 0 else ""
            text = f"{kind.upper()}({target}{expr_sql(bound, rel.schema.names)}{f', {offset}' if offset else ''})"
            nav_nodes.append(ir.Nav(kind=kind, variable=var, column=column, offset=offset, type=typ, sql=text))
        fields = list(scope.columns)
        fields += [ScopeColumn(None, f"$d{i}", ir.Field(f"$d{i}", e.type, True)) for i, e in enumerate(derived)]
        fields += [ScopeColumn(None, f"$nav{i}", ir.Field(f"$nav{i}", n.type, True)) for i, n in enumerate(nav_nodes)]
        match_scope = Scope(tuple(fields))
        bound_defines: list[ir.Expr | None] = [None] * len(names)
        for v, e in rewritten_defines.items():
            cond = self.expr(e, match_scope)
            if not (pt.is_boolean(cond.type) or T.is_null(cond.type)):
                raise SqlError(f"DEFINE {names[v]} must be a condition (BOOLEAN), got {T.sql_name(cond.type)}",
                               defines[v].expr.span)
            bound_defines[v] = cond
        measures = tuple(self.expr(e, match_scope) for e in rewritten_measures)
        node = ir.MatchRecognize(
            uid=self._uid, input=rel, partition=partition, time=time, order=order, variables=tuple(names),
            pattern=tuple((variables[t.variable], t.low, t.high, t.greedy) for t in item.pattern),
            derived=tuple(derived), navs=tuple(nav_nodes), defines=tuple(bound_defines), measures=measures,
            measure_names=tuple(measure_names), skip=item.skip, skip_to=skip_to, within=within, proctime=proctime,
            span=item.span)
        qualifier = item.alias
        # MATCH_ROWTIME() is an event-time attribute, as in Flink: windows and interval joins may
        # follow on it (a match comes out once the watermark has passed its last row).
        rowtime = {str(m.alias) for m in item.measures
                   if isinstance(m.expr, ast.FunctionCall) and m.expr.name == "MATCH_ROWTIME"}
        return node, Scope(tuple(ScopeColumn(qualifier, f.name, f, f.name in rowtime) for f in node.schema.fields))

    def _match_column(self, e: ast.Expr, scope: Scope, clause: str) -> int:
        bound = self.expr(e, scope)
        if not isinstance(bound, ir.Column):
            raise SqlError(f"{clause} of MATCH_RECOGNIZE takes columns", e.span,
                           "compute the value in a subquery or view first")
        return bound.index

    def _match_order(self, item: ast.MatchRecognize, scope: Scope,
                     rel: ir.Rel) -> tuple[int, tuple[tuple[int, bool], ...], bool]:
        """ORDER BY: a time attribute ascending first (as Flink requires), then any columns; and
        whether that attribute is processing time."""
        if not item.order_by:
            raise SqlError("MATCH_RECOGNIZE needs ORDER BY a time attribute", item.span)
        (first, descending), rest = item.order_by[0], item.order_by[1:]
        time = self._match_column(first, scope, "ORDER BY")
        rowtime = [c.name for c in scope.columns if c.rowtime]
        proctime = is_proctime(rel, time)
        if not (scope.columns[time].rowtime or proctime):
            raise SqlError("MATCH_RECOGNIZE must be ordered by a time attribute first (a table's WATERMARK column, "
                           "or a processing-time column defined as PROCTIME())", first.span,
                           f"event-time columns here: {', '.join(rowtime) or 'none'}")
        if descending:
            raise SqlError("MATCH_RECOGNIZE orders by its time attribute ascending", first.span, "drop DESC")
        return time, tuple((self._match_column(e, scope, "ORDER BY"), d) for e, d in rest), proctime

    def _navigate(self, e: ast.Expr, variables: dict[str, int], current: int | None,
                  navs: list, time_name: str, proctime: bool) -> ast.Expr:
        """``e`` with every navigation replaced by a column ``$navK`` (``navs`` gets its entry);
        ``current``: the variable whose condition ``e`` is (None in MEASURES)."""

        def nav(kind: str, var: int, row_expr: ast.Expr, offset: int, call: ast.Expr) -> ast.Expr:
            entry = (kind, var, row_expr, offset, call)
            if entry not in navs:
                navs.append(entry)
            return ast.ColumnRef(name=f"$nav{navs.index(entry)}", span=call.span)

        def variable_of(arg: ast.Expr, what: str) -> tuple[int, ast.Expr]:
            """The one variable ``arg`` names (-1: none) and ``arg`` without it."""
            found: set[int] = set()

            def strip(n: ast.Node) -> ast.Node | None:
                if isinstance(n, ast.FieldAccess) and isinstance(n.expr, ast.ColumnRef) and n.expr.name in variables:
                    found.add(variables[n.expr.name])
                    return ast.ColumnRef(name=n.name, span=n.span)
                if isinstance(n, ast.FunctionCall) and (n.name in ("FIRST", "LAST", "PREV") or n.name in _AGGREGATES):
                    raise SqlError(f"{n.name} cannot be nested in {what}", n.span)
                return None

            plain = ast.rewrite(arg, strip)
            if len(found) > 1:
                raise SqlError(f"{what} reads the rows of {len(found)} variables; it may read one", arg.span,
                               "write one navigation per variable, e.g. LAST(A.price) * LAST(B.tax)")
            return (found.pop() if found else -1), plain

        def visit(n: ast.Node) -> ast.Node | None:
            if isinstance(n, ast.ColumnRef) and current is None and not n.name.startswith("$nav"):
                return nav("last", -1, n, 0, n)  # in MEASURES: the match's last row
            if isinstance(n, ast.FieldAccess) and isinstance(n.expr, ast.ColumnRef) and n.expr.name in variables:
                var = variables[n.expr.name]
                column = ast.ColumnRef(name=n.name, span=n.span)
                if var == current:
                    return column  # the row being tried
                return nav("last", var, column, 0, n)
            if not isinstance(n, ast.FunctionCall):
                return None
            name = n.name
            if name in _NOT_HERE:
                raise SqlError(_NOT_HERE[name], n.name_span or n.span)
            if name == "MATCH_ROWTIME":
                if n.args:
                    raise SqlError("MATCH_ROWTIME() takes no argument here", n.span)
                if proctime:
                    raise SqlError("MATCH_ROWTIME() needs a MATCH_RECOGNIZE ordered by event time; this one is "
                                   "ordered by processing time", n.name_span or n.span)
                return nav("last", -1, ast.ColumnRef(name=time_name, span=n.span), 0, n)
            if name in ("FIRST", "LAST", "PREV"):
                if not 1 <= len(n.args) <= 2:
                    raise SqlError(f"{name} takes a value and an optional offset", n.span)
                offset = 1 if name == "PREV" else 0
                if len(n.args) == 2:
                    arg = n.args[1]
                    if not (isinstance(arg, ast.Literal) and arg.kind == "int" and arg.value >= 0):
                        raise SqlError(f"the offset of {name} must be a constant integer, 0 or more", arg.span)
                    offset = arg.value
                var, plain = variable_of(n.args[0], f"{name}(...)")
                if name == "PREV":
                    if current is None:
                        raise SqlError("PREV is supported in DEFINE only", n.span, "in MEASURES use LAST or FIRST")
                    if var not in (-1, current):
                        raise SqlError(f"PREV reads from the row being tried here, of {list(variables)[current]}",
                                       n.span, "write LAST(var.column, n) for another variable's rows")
                return nav(name.lower(), var, plain, offset, n)
            if name in _AGGREGATES:
                if n.distinct:
                    raise SqlError(f"{name}(DISTINCT ...) is not supported in MATCH_RECOGNIZE", n.span)
                if n.over is not None or n.filter is not None:
                    raise SqlError(f"{name} in MATCH_RECOGNIZE takes no OVER or FILTER", n.span)
                if n.star:
                    return nav("agg", -1, ast.Literal(kind="int", value=1, span=n.span), 0, n)
                if len(n.args) != 1:
                    raise SqlError(f"{name} takes 1 argument, got {len(n.args)}", n.span)
                var, plain = variable_of(n.args[0], f"{name}(...)")
                return nav("agg", var, plain, 0, n)
            return None

        return ast.rewrite(e, visit)

