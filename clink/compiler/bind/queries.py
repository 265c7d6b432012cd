"""Query blocks: SELECT (its FROM, WHERE and select list, handing GROUP BY, ROW_NUMBER and
OVER to their own binders) and UNION ALL."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.types as pt

from clink.compiler import ast, ir
from clink.compiler import types as T
from clink.compiler.bind.aggregates import has_aggregate
from clink.compiler.bind.over import is_row_number
from clink.compiler.bind.scope import ast_walk, derive_name, did_you_mean, unique_names
from clink.compiler.functions import cast_to
from clink.compiler.rewrite.limit_ranks import top_n
from clink.errors import SqlError


class QueryBinder:
    """SELECT blocks and UNION ALL; each returns its relation and the names of its output
    columns that carry event time."""

    def select(self, q: ast.Select | ast.Union) -> ir.Rel:
        return self._query(q)[0]

    def _query(self, q: ast.Select | ast.Union) -> tuple[ir.Rel, frozenset[str]]:
        if isinstance(q, ast.Select):
            return self._select(q)
        left, left_times = self._query(q.left)
        right, right_times = self._query(q.right)
        if len(left.schema) != len(right.schema):
            raise SqlError(f"the two sides of UNION ALL have {len(left.schema)} and {len(right.schema)} columns",
                           q.right.span)
        types = []
        for i, (a, b) in enumerate(zip(left.schema.fields, right.schema.fields, strict=True)):
            common = T.common_type(a.type, b.type)
            if common is None:
                raise SqlError(f"column {i + 1} of UNION ALL is {T.sql_name(a.type)} on the left and "
                               f"{T.sql_name(b.type)} on the right", q.right.span, "CAST one side")
            types.append(common if not T.is_null(common) else pa.int32())
        sides = [self._cast_columns(side, types, left.schema.names) for side in (left, right)]
        inputs: list[ir.Rel] = []
        for side in sides:
            inputs.extend(side.all_inputs if isinstance(side, ir.Union) else (side,))
        rowtime = frozenset(name for k, name in enumerate(left.schema.names)
                            if name in left_times and right.schema.names[k] in right_times)
        return ir.Union(all_inputs=tuple(inputs), span=q.span), rowtime

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
            return self._select_block(q)
        finally:
            self._uids.pop()

    def _select_block(self, q: ast.Select) -> tuple[ir.Rel, frozenset[str]]:
        if q.distinct:
            raise SqlError("SELECT DISTINCT is not supported yet", q.span)
        if isinstance(q.from_, ast.Join):
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
        if q.group_by or q.having is not None or has_aggregate(q.items):
            return self._aggregate(q, rel, scope)
        if any(is_row_number(item) for item in q.items):
            return self._row_number(q, rel, scope), frozenset()
        if any(isinstance(n, ast.FunctionCall) and n.over is not None for item in q.items for n in ast_walk(item)):
            return self._over_aggregate(q, rel, scope)
        if isinstance(rel, ir.WindowTVF) and rel.window.kind == "session":
            raise SqlError("a SESSION window is only usable with GROUP BY window_start, window_end", q.from_.span)
        exprs: list[ir.Expr] = []
        names: list[str] = []
        for item in q.items:
            match item:
                case ast.Star(qualifier=qualifier):
                    cols = [(i, c) for i, c in enumerate(scope.columns) if qualifier is None or c.qualifier == qualifier]
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
