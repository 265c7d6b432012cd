"""Queries: SELECT blocks (their FROM, WHERE and select list, handing GROUP BY, ROW_NUMBER and
OVER to their own binders), VALUES, WITH, and the set operations.

- ``SELECT DISTINCT`` and ``UNION`` are a group aggregation by every column, without aggregates:
  an updating result, each distinct row once (as Flink plans them), whose state the TTL bounds.
- ``INTERSECT`` and ``EXCEPT`` count each distinct row on both sides (a group aggregation over
  both inputs, told apart by a flag column) and keep the rows found on both, or on the left only.
- ``VALUES`` and a ``SELECT`` without ``FROM`` read the ``values`` source, which gives row
  numbers; each column is the row's value picked by its number.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.types as pt

from clink import records
from clink.compiler import ast, ir
from clink.compiler import types as T
from clink.compiler.bind import grouping
from clink.compiler.bind.aggregates import has_aggregate
from clink.compiler.bind.over import is_row_number
from clink.compiler.bind.scope import (
    Scope,
    ast_walk,
    derive_name,
    did_you_mean,
    unique_names,
    updating_reason,
)
from clink.compiler.bind.subqueries import is_hidden
from clink.compiler.catalog import CatalogView
from clink.compiler.functions import cast_to
from clink.compiler.rewrite.limit_ranks import top_n
from clink.errors import CompilerBug, Span, SqlError

#: How the rows of a VALUES list are named, as in Flink: EXPR$0, EXPR$1, ...
_EXPR = "EXPR${}"


class QueryBinder:
    """SELECT blocks and UNION ALL; each returns its relation and the names of its output
    columns that carry event time."""

    def select(self, q: ast.QueryExpr) -> ir.Rel:
        return self._query(q)[0]

    def _query(self, q: ast.QueryExpr) -> tuple[ir.Rel, frozenset[str]]:
        match q:
            case ast.Select():
                return self._select(q)
            case ast.Values():
                return self._values(q), frozenset()
            case ast.With():
                return self._with(q)
            case ast.OrderedQuery():
                return self._ordered(q), frozenset()
            case ast.SetOp(op="UNION", all=True):
                return self._union_all(q)
            case ast.SetOp(op="UNION"):
                return self._distinct(self._union_all(q)[0], q.span), frozenset()
            case ast.SetOp():
                return self._intersect_except(q), frozenset()
        raise CompilerBug(f"no binding for the query {type(q).__name__}")

    def _sides(self, q: ast.SetOp) -> tuple[ir.Rel, ir.Rel, frozenset[str]]:
        """Both inputs of a set operation, their columns cast to common types and named as the
        left side's; the event-time columns of both."""
        left, left_times = self._query(q.left)
        right, right_times = self._query(q.right)
        what = f"{q.op}{' ALL' if q.all else ''}"
        if len(left.schema) != len(right.schema):
            raise SqlError(f"the two sides of {what} have {len(left.schema)} and {len(right.schema)} columns",
                           q.right.span)
        types = []
        for i, (a, b) in enumerate(zip(left.schema.fields, right.schema.fields, strict=True)):
            common = T.common_type(a.type, b.type)
            if common is None:
                raise SqlError(f"column {i + 1} of {what} is {T.sql_name(a.type)} on the left and "
                               f"{T.sql_name(b.type)} on the right", q.right.span, "CAST one side")
            types.append(common if not T.is_null(common) else pa.int32())
        rowtime = frozenset(name for k, name in enumerate(left.schema.names)
                            if name in left_times and right.schema.names[k] in right_times)
        left, right = (self._cast_columns(side, types, left.schema.names) for side in (left, right))
        return left, right, rowtime

    def _union_all(self, q: ast.SetOp) -> tuple[ir.Rel, frozenset[str]]:
        left, right, rowtime = self._sides(q)
        inputs: list[ir.Rel] = []
        for side in (left, right):
            inputs.extend(side.all_inputs if isinstance(side, ir.Union) else (side,))
        return ir.Union(all_inputs=tuple(inputs), span=q.span), rowtime

    def _distinct(self, rel: ir.Rel, span: Span | None) -> ir.Rel:
        """Each distinct row of ``rel`` once: a group aggregation by all its columns."""
        return ir.GroupAggregate(uid=self._uid, input=rel, num_keys=len(rel.schema), aggs=(), agg_names=(),
                                 span=span)

    def _intersect_except(self, q: ast.SetOp) -> ir.Rel:
        """The distinct rows found on both sides (INTERSECT) or on the left only (EXCEPT), or with
        ALL each as many times as both sides have it (or the left beyond the right): both sides,
        flagged by side, counted per distinct row."""
        left, right, _ = self._sides(q)
        n = len(left.schema)
        sides = []
        for rel, is_left in ((left, True), (right, False)):
            exprs = tuple(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=None)
                          for i, f in enumerate(rel.schema.fields))
            flags = (ir.Literal(value=is_left, type=pa.bool_(), nullable=False, span=None),
                     ir.Literal(value=not is_left, type=pa.bool_(), nullable=False, span=None))
            sides.append(ir.Project(input=rel, exprs=exprs + flags, names=(*rel.schema.names, "$left", "$right"),
                                    span=q.span))
        both = ir.Union(all_inputs=tuple(sides), span=q.span)
        counts = tuple(ir.AggCall(fn="count_star", arg=None, type=pa.int64(), nullable=False, filter=n + side,
                                  sql=f"COUNT(*) FILTER (WHERE {'$left' if side == 0 else '$right'})")
                       for side in (0, 1))
        counted = ir.GroupAggregate(uid=self._uid, input=both, num_keys=n, aggs=counts,
                                    agg_names=("$left", "$right"), span=q.span)

        def count(side: int) -> ir.Expr:
            return ir.Column(index=n + side, name=counted.schema.names[n + side], type=pa.int64(), nullable=False,
                             span=None)

        keys = tuple(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=None)
                     for i, f in enumerate(left.schema.fields))
        if q.all:
            # As many copies of each row as both sides have (INTERSECT ALL: the fewer of the
            # two counts) or as the left has beyond the right's (EXCEPT ALL: the difference).
            on_left, on_right = count(0), count(1)
            if q.op == "INTERSECT":
                fewer = ir.Call(fn="lt", args=(on_left, on_right), type=pa.bool_(), nullable=False, span=None)
                times = ir.Call(fn="case", args=(fewer, on_left, on_right), params=(1, True), type=pa.int64(),
                                nullable=False, span=None)
            else:
                times = ir.Call(fn="subtract", args=(on_left, on_right), type=pa.int64(), nullable=False, span=None)
            counted_rows = ir.Project(input=counted, exprs=(*keys, times), names=(*left.schema.names, "$times"),
                                      span=q.span)
            return ir.Replicate(input=counted_rows, count=n, span=q.span)
        zero = ir.Literal(value=0, type=pa.int64(), nullable=False, span=None)
        on_left = ir.Call(fn="gt", args=(count(0), zero), type=pa.bool_(), nullable=False, span=None)
        right_op = "gt" if q.op == "INTERSECT" else "eq"
        on_right = ir.Call(fn=right_op, args=(count(1), zero), type=pa.bool_(), nullable=False, span=None)
        kept = ir.Filter(input=counted, predicate=ir.Call(fn="and", args=(on_left, on_right), type=pa.bool_(),
                                                          nullable=False, span=None), span=q.span)
        return ir.Project(input=kept, exprs=keys, names=left.schema.names, span=q.span)

    def _ordered(self, q: ast.OrderedQuery) -> ir.Rel:
        """``ORDER BY ... LIMIT n`` (or ``FETCH FIRST n ROWS ONLY``): the first ``n`` rows in that
        order, a Top-N over the whole result (updating: a row that enters the first ``n`` pushes
        the last one out); ``LIMIT n`` alone keeps the first ``n`` rows to arrive. Each ORDER BY
        item is an output column (by name or position) or, under a SELECT block, an expression
        over its FROM, computed beside the select list and dropped after."""
        inner = q.query
        rel, rowtime = self._query(inner)
        visible = len(rel.schema)
        outputs = {name: i for i, name in enumerate(rel.schema.names)}
        order: list[tuple[int, bool]] = []
        hidden: list[tuple[ast.Expr, bool]] = []
        for e, descending in q.order:
            if isinstance(e, ast.Literal) and e.kind == "int":
                if not 1 <= e.value <= visible:
                    raise SqlError(f"ORDER BY {e.value}: the query has {visible} column(s)", e.span)
                order.append((e.value - 1, descending))
            elif isinstance(e, ast.ColumnRef) and e.name in outputs:
                order.append((outputs[e.name], descending))
            else:
                order.append((visible + len(hidden), descending))
                hidden.append((e, descending))
        if hidden:
            if not isinstance(inner, ast.Select) or inner.distinct:
                raise SqlError("ORDER BY here names a column of the result, by name or position", hidden[0][0].span,
                               f"the result's columns: {', '.join(rel.schema.names)}")
            extra = tuple(ast.AliasedExpr(expr=e, alias=f"$order{i}", span=e.span) for i, (e, _) in enumerate(hidden))
            rel, rowtime = self._query(records.evolve(inner, items=inner.items + extra))
        if q.limit is None:
            return self._sorted(q, rel, rowtime, order, visible)
        _check_orderable(rel, order, "ORDER BY ... LIMIT", q.span, updating=True)
        if q.limit == 0:
            never = ir.Literal(value=False, type=pa.bool_(), nullable=False, span=q.span)
            top: ir.Rel = ir.Filter(input=rel, predicate=never, span=q.span)
        else:
            top = ir.Rank(uid=self._uid, input=rel, partition=(), order=tuple(order), limit=q.limit,
                          rank_name="$rank", emit_rank=False, span=q.span)
        return _first_columns(top, visible)

    def _sorted(self, q: ast.OrderedQuery, rel: ir.Rel, rowtime: frozenset[str], order: list[tuple[int, bool]],
                visible: int) -> ir.Rel:
        """``ORDER BY time [ASC], ...`` without a limit: on a stream, as in Flink, the first key
        must be an event-time column ascending; rows come out in order as the watermark passes."""
        (time, descending), rest = order[0], order[1:]
        first = q.order[0][0]
        if rel.schema.names[time] not in rowtime:
            raise SqlError("ORDER BY without LIMIT must start with an event-time column (a table's WATERMARK "
                           "column, or a window's window_time), ascending", first.span,
                           f"event-time columns here: {', '.join(sorted(rowtime)) or 'none'}; or add LIMIT n "
                           "(a Top-N, updated as rows come)")
        if descending:
            raise SqlError("ORDER BY an event-time column must be ascending (rows come out as time passes)",
                           first.span, "drop DESC, or add LIMIT n (a Top-N, updated as rows come)")
        _check_orderable(rel, order, "ORDER BY", q.span)
        return _first_columns(ir.Sort(uid=self._uid, input=rel, time=time, order=tuple(rest), span=q.span), visible)

    def _values(self, q: ast.Values) -> ir.Rel:
        """Constant rows: column ``c`` of row ``i`` is picked from the row's values by the row
        number the ``values`` source gives."""
        empty = Scope(())
        rows = [[self.expr(e, empty) for e in row] for row in q.rows]
        self._raise_collected()
        width = len(rows[0])
        types = []
        for c in range(width):
            common = rows[0][c].type
            for r, row in enumerate(rows[1:], start=1):
                found = T.common_type(common, row[c].type)
                if found is None:
                    raise SqlError(f"column {c + 1} of VALUES is {T.sql_name(common)} in the rows above and "
                                   f"{T.sql_name(row[c].type)} in row {r + 1}", q.rows[r][c].span,
                                   "CAST the values to one type")
                common = found
            types.append(common if not T.is_null(common) else pa.int32())
        scan = self._values_scan(len(rows), q.span)
        row_number = ir.Column(index=0, name="_row", type=pa.int64(), nullable=False, span=None)
        exprs = []
        for c, t in enumerate(types):
            column = [cast_to(row[c], t) for row in rows]
            nullable = any(e.nullable for e in column)
            exprs.append(column[0] if len(rows) == 1 else
                         ir.Call(fn="pick", args=(row_number, *column), type=t, nullable=nullable, span=q.span))
        return ir.Project(input=scan, exprs=tuple(exprs), names=tuple(_EXPR.format(c) for c in range(width)),
                          span=q.span)

    def _values_scan(self, rows: int, span: Span | None) -> ir.Scan:
        """The ``values`` source: the row numbers 0 .. rows - 1, in one batch."""
        info = ir.TableInfo(name="VALUES", connector="values", options=(("rows", str(rows)),),
                            columns=ir.Schema((ir.Field("_row", pa.int64(), False),)))
        return ir.Scan(table=info, columns=(0,), span=span)

    def _with(self, q: ast.With) -> tuple[ir.Rel, frozenset[str]]:
        """Each common table expression is a view for the ones after it and the query."""
        frame: dict[str, CatalogView] = {}
        self._ctes.append(frame)
        try:
            for cte in q.ctes:
                rel, rowtime = self._query(cte.query)
                if cte.columns is not None:
                    rel, rowtime = self.renamed(rel, rowtime, cte.columns, cte.span)
                frame[cte.name] = CatalogView(name=cte.name, rel=rel, rowtime=rowtime)
            return self._query(q.query)
        finally:
            self._ctes.pop()

    def renamed(self, rel: ir.Rel, rowtime: frozenset[str], names: tuple[str, ...],
                span: Span | None) -> tuple[ir.Rel, frozenset[str]]:
        """``rel`` with its columns named ``names`` (a view's or a WITH query's column list)."""
        if len(names) != len(rel.schema):
            raise SqlError(f"{len(names)} column name(s) for a query of {len(rel.schema)} column(s)", span)
        exprs = tuple(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=None)
                      for i, f in enumerate(rel.schema.fields))
        renamed = frozenset(new for new, old in zip(names, rel.schema.names, strict=True) if old in rowtime)
        return ir.Project(input=rel, exprs=exprs, names=names, span=span), renamed

    def _cast_columns(self, rel: ir.Rel, types: list[pa.DataType], names: tuple[str, ...]) -> ir.Rel:
        """``rel`` with its columns cast to ``types`` and named ``names`` (a Project if needed)."""
        if [f.type for f in rel.schema.fields] == types and rel.schema.names == names:
            return rel
        exprs = tuple(cast_to(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=None), t)
                      for i, (f, t) in enumerate(zip(rel.schema.fields, types, strict=True)))
        return ir.Project(input=rel, exprs=exprs, names=names, span=rel.span)

    @property
    def _uid(self) -> str | None:
        """The UID hint of the SELECT being bound (None: its operators are named by what they do)."""
        return self._uids[-1] if self._uids else None

    def _select(self, q: ast.Select) -> tuple[ir.Rel, frozenset[str]]:
        """Bind a query; also return the names of its output columns that carry event time."""
        # The block's stateful operators (its joins, aggregation, OVER, Top-N) take its UID hint;
        # those of a subquery take the subquery's own.
        self._uids.append(q.uid)
        try:
            if q.distinct:
                rel, _ = self._select_block(records.evolve(q, distinct=False))
                return self._distinct(rel, q.span), frozenset()
            return self._select_block(q)
        finally:
            self._uids.pop()

    def _select_block(self, q: ast.Select) -> tuple[ir.Rel, frozenset[str]]:
        q = self._unnest_subqueries(q)
        sets = grouping.grouping_sets(q)
        if sets is not None:
            # One aggregation per grouping set, united.
            every = grouping.all_grouping_expressions(sets)
            branches = [grouping.branch(q, s, every, self._is_udaf, gid)
                        for s, gid in zip(sets, grouping.group_ids(sets), strict=True)]
            united: ast.QueryExpr = branches[0]
            for b in branches[1:]:
                united = ast.SetOp(op="UNION", all=True, left=united, right=b, span=q.span)
            return self._query(united)[0], frozenset()
        q = grouping.plain_grouping(q)
        if q.from_ is None:
            # SELECT without FROM: one row, and no column to name.
            stars = [item for item in q.items if isinstance(item, ast.Star)]
            if stars:
                raise SqlError("SELECT * needs a FROM clause", stars[0].span)
            rel, scope = self._values_scan(1, q.span), Scope(())
        elif isinstance(q.from_, ast.Join):
            # The WHERE of a join is bound with it: its conditions become join keys or move below.
            rel, scope = self._join(q.from_, q.where)
        else:
            rel, scope = self.from_item(q.from_)
        if q.where is not None and not isinstance(q.from_, ast.Join):
            pred = self.expr(q.where, scope)
            if not (pt.is_boolean(pred.type) or T.is_null(pred.type)):
                self.errors.append(SqlError(f"WHERE needs a BOOLEAN condition, got {T.sql_name(pred.type)}",
                                            q.where.span))
            else:
                rel = ir.Filter(input=rel, predicate=cast_to(pred, pa.bool_()), span=q.where.span)
                # A filter on a ROW_NUMBER's row number is a Top-N, which the rewrite limit_ranks
                # completes; one that keeps no row is refused here, before the select list.
                top_n(rel)
        if q.group_by or q.having is not None or has_aggregate(q.items, self._is_udaf):
            return self._aggregate(q, rel, scope)
        if any(is_row_number(item) for item in q.items):
            return self._row_number(q, rel, scope), frozenset()
        if any(isinstance(n, ast.FunctionCall) and n.over is not None for item in q.items for n in ast_walk(item)):
            return self._over_aggregate(q, rel, scope)
        if isinstance(rel, ir.WindowTVF) and rel.window.kind == "session" and rel.input.schema[rel.time].type.tz:
            raise SqlError("SESSION windows over a TIMESTAMP_LTZ column are only usable with GROUP BY window_start, "
                           "window_end", q.from_.span, "aggregate them, or use a TIMESTAMP event-time column")
        exprs: list[ir.Expr] = []
        names: list[str] = []
        for item in q.items:
            match item:
                case ast.Star(qualifier=qualifier):
                    cols = [(i, c) for i, c in enumerate(scope.columns)
                            if (qualifier is None and not is_hidden(c.qualifier)) or c.qualifier == qualifier]
                    if qualifier is not None and not cols:
                        self.errors.append(SqlError(f"unknown table or alias {qualifier!r}", item.span,
                                                    did_you_mean(qualifier, sorted(scope.qualifiers()))))
                    for i, c in cols:
                        exprs.append(ir.Column(index=i, name=c.name, type=c.field.type, nullable=c.field.nullable,
                                               span=item.span))
                        names.append(c.name)
                case ast.AliasedExpr(expr=e, alias=alias):
                    bound = self.expr(e, scope)
                    exprs.append(bound)
                    names.append(alias or derive_name(e, len(names)))
        self._raise_collected()
        unique = unique_names(names)
        rowtime = frozenset(n for n, e in zip(unique, exprs, strict=True)
                            if isinstance(e, ir.Column) and scope.columns[e.index].rowtime)
        return ir.Project(input=rel, exprs=tuple(exprs), names=unique, span=q.span), rowtime


def _check_orderable(rel: ir.Rel, order: list[tuple[int, bool]], what: str, span: Span | None, *,
                     updating: bool = False) -> None:
    """Refuse to order an updating query (unless ``updating``: a Top-N keeps up with it), or by a
    nested column."""
    if ir.is_updating(rel) and not updating:
        producer = ir.updating_source(rel)
        raise SqlError(f"{what} over an updating query is not supported yet", span,
                       f"the query produces updates: {updating_reason(producer, producer.span)}")
    for column, _ in order:
        if pt.is_nested(rel.schema[column].type):
            raise SqlError(f"cannot ORDER BY a {T.sql_name(rel.schema[column].type)}", span)


def _first_columns(rel: ir.Rel, n: int) -> ir.Rel:
    """The first ``n`` columns of ``rel`` (the query's own, without the ones it was ordered by)."""
    exprs = tuple(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=None)
                  for i, f in enumerate(rel.schema.fields[:n]))
    return ir.Project(input=rel, exprs=exprs, names=rel.schema.names[:n], span=rel.span)
