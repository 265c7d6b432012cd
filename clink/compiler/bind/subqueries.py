"""Subqueries in WHERE: ``x IN (SELECT y ...)`` as a join.

A conjunct ``x IN (query)`` of a WHERE is a semi join: the FROM is joined with the query's
distinct values on ``x = value``, so each row is kept once when its value is among them (a NULL
``x`` or value matches nothing, so the row is not kept, as IN's UNKNOWN is not TRUE). As in
Flink the distinct values are a group aggregation, so the result is updating. The joined values
sit under a hidden qualifier (``$sq1``), which ``*`` does not expand.

``NOT IN``, ``EXISTS``, scalar subqueries, subqueries under OR or in the select list, and
subqueries that read the query around them (correlated) are refused where they are written.
"""

from __future__ import annotations

import attrs

from clink.compiler import ast
from clink.compiler.bind.scope import ast_walk
from clink.errors import SqlError, SqlErrors

#: Qualifiers of the columns that subqueries add to a FROM: ``*`` leaves them out.
HIDDEN = "$"

_SUBQUERY = (ast.InSubquery, ast.Exists, ast.ScalarSubquery)


def is_hidden(qualifier: str | None) -> bool:
    return qualifier is not None and qualifier.startswith(HIDDEN)


class SubqueryBinder:
    """Rewrites the subqueries of a SELECT block into joins before it is bound."""

    def _unnest_subqueries(self, q: ast.Select) -> ast.Select:
        for item in q.items:
            _refuse_inside(item, "in the select list")
        for part in (*q.group_by, q.having):
            if part is not None:
                _refuse_inside(part, "in GROUP BY or HAVING")
        if q.where is None or not any(isinstance(n, _SUBQUERY) for n in ast_walk(q.where)):
            return q
        from_ = q.from_
        kept: list[ast.Expr] = []
        for conjunct in _conjuncts(q.where):
            if not isinstance(conjunct, ast.InSubquery):
                _refuse_inside(conjunct, "here")
                kept.append(conjunct)
                continue
            if conjunct.negated:
                raise SqlError("NOT IN (subquery) is not supported yet", conjunct.span,
                               "IN (subquery) is; NOT IN's NULL rules need an anti join clink does not have yet")
            if from_ is None:
                raise SqlError("IN (subquery) needs a FROM clause", conjunct.span)
            from_ = self._semi_join(from_, conjunct)
        where = None
        for c in kept:
            where = c if where is None else ast.And(left=where, right=c, span=c.span)
        return attrs.evolve(q, from_=from_, where=where)

    def _semi_join(self, from_: ast.FromItem, c: ast.InSubquery) -> ast.FromItem:
        """``from_`` joined with the distinct values of ``c``'s query on ``operand = value``."""
        try:
            rel, _ = self._query(c.query)
        except (SqlError, SqlErrors) as exc:
            first = exc.errors[0] if isinstance(exc, SqlErrors) else exc
            if first.message.startswith("unknown column"):
                raise SqlError("a subquery that reads a column of the query around it (a correlated subquery) "
                               "is not supported yet", first.span, first.message) from None
            raise
        if len(rel.schema) != 1:
            raise SqlError(f"the subquery of IN must give one column, not {len(rel.schema)}", c.query.span)
        self._subqueries += 1
        alias = f"{HIDDEN}sq{self._subqueries}"
        span = c.span
        column = ast.AliasedExpr(expr=ast.ColumnRef(name=f"{HIDDEN}v", span=span), alias=None, span=span)
        values = ast.Select(items=(column,), distinct=True, span=span,
                            from_=ast.SubqueryRef(query=c.query, alias=f"{HIDDEN}in", columns=(f"{HIDDEN}v",),
                                                  span=c.query.span))
        right = ast.SubqueryRef(query=values, alias=alias, span=span)
        value = ast.FieldAccess(expr=ast.ColumnRef(name=alias, span=span), name=f"{HIDDEN}v", span=span)
        condition = ast.Comparison(op="=", left=c.operand, right=value, span=span)
        return ast.Join(left=from_, right=right, kind="inner", condition=condition, span=span)


def _conjuncts(e: ast.Expr) -> list[ast.Expr]:
    if isinstance(e, ast.And):
        return [*_conjuncts(e.left), *_conjuncts(e.right)]
    return [e]


def _refuse_inside(node: ast.Node, where: str) -> None:
    for n in ast_walk(node):
        if isinstance(n, ast.InSubquery):
            raise SqlError(f"IN (subquery) {where} is not supported yet", n.span,
                           "IN (subquery) is supported as a condition of WHERE joined to the rest by AND")
        if isinstance(n, ast.Exists):
            raise SqlError("EXISTS (subquery) is not supported yet", n.span,
                           "an IN (subquery) over the columns it would compare is")
        if isinstance(n, ast.ScalarSubquery):
            raise SqlError("a subquery used as a value is not supported yet", n.span,
                           "join with the query instead (a GROUP BY without keys gives one row)")
