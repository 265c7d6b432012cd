"""Subqueries in WHERE: ``x IN (SELECT y ...)`` and ``[NOT] EXISTS (...)`` as joins.

A conjunct ``x IN (query)`` of a WHERE is a semi join: the FROM is joined with the query's
distinct values on ``x = value``, so each row is kept once when its value is among them (a NULL
``x`` or value matches nothing, so the row is not kept, as IN's UNKNOWN is not TRUE). As in
Flink the distinct values are a group aggregation, so the result is updating. The joined values
sit under a hidden qualifier (``$sq1``), which ``*`` does not expand.

``[NOT] EXISTS (SELECT ... FROM s WHERE s.a = outer.b AND ...)`` (correlated by equalities) is
a join with the distinct ``s.a`` of the rows that pass the subquery's own conditions: inner for
EXISTS, left for NOT EXISTS keeping the rows that found none (a NULL ``outer.b`` matches nothing,
so NOT EXISTS keeps its row, as SQL says).

``x NOT IN (query)`` follows SQL's NULL rules through three left joins (see ``_not_in``).

A subquery used as a value in a condition of WHERE, an aggregation without GROUP BY, is joined
to every row (see ``_scalar_joins``).

``x [NOT] IN (SELECT y FROM s WHERE s.a = outer.b AND ...)``, tied to the outer query by
equalities, is ``EXISTS (... AND y = x)`` for IN; for NOT IN the three joins go by ``outer.b``
too (the subquery's rows are those of the outer row's values).

An EXISTS without such an equality, other subqueries used as values, and subqueries under OR or in
the select list are refused where they are written.
"""

from __future__ import annotations

from clink import records
from clink.compiler import ast
from clink.compiler.bind.aggregates import has_aggregate
from clink.compiler.bind.scope import Unresolved, ast_walk
from clink.errors import SqlError, SqlErrors

#: Qualifiers of the columns that subqueries add to a FROM: ``*`` leaves them out.
HIDDEN = "$"

_SUBQUERY = (ast.InSubquery, ast.Exists, ast.ScalarSubquery)


def is_hidden(qualifier: str | None) -> bool:
    return qualifier is not None and qualifier.startswith(HIDDEN)


class SubqueryBinder:
    """Rewrites the subqueries of a SELECT block into joins before it is bound."""

    def _unnest_subqueries(self, q: ast.Select) -> ast.Select:
        for part in (*q.group_by, q.having):
            if part is not None:
                _refuse_inside(part, "in GROUP BY or HAVING")
        if any(isinstance(n, ast.ScalarSubquery) for item in q.items for n in _outside_subqueries(item)):
            q = self._select_list_scalars(q)
        for item in q.items:
            _refuse_inside(item, "in the select list")
        if q.where is None or not any(isinstance(n, _SUBQUERY) for n in ast_walk(q.where)):
            return q
        from_ = q.from_
        kept: list[ast.Expr] = []
        for conjunct in _conjuncts(q.where):
            negated = isinstance(conjunct, ast.Not) and isinstance(conjunct.operand, ast.Exists)
            if isinstance(conjunct, ast.Exists) or negated:
                if from_ is None:
                    raise SqlError("EXISTS (subquery) needs a FROM clause", conjunct.span)
                exists = conjunct.operand if negated else conjunct
                if not self._correlated_exists(exists):
                    # Not tied to the outer row: whether the subquery has a row at all, a count
                    # joined to every row like a subquery used as a value.
                    span = exists.span
                    count = ast.ScalarSubquery(query=ast.Select(
                        items=(ast.AliasedExpr(expr=ast.FunctionCall(name="COUNT", args=(), star=True, span=span),
                                               alias=None, span=span),),
                        from_=ast.SubqueryRef(query=exists.query, alias=f"{HIDDEN}e", span=span), span=span),
                        span=span)
                    test = ast.Comparison(op="=" if negated else ">", left=count,
                                          right=ast.Literal(kind="int", value=0, span=span), span=span)
                    from_, test = self._scalar_joins(from_, test, [count], anchor=self._anchor(from_, span))
                    kept.append(test)
                    continue
                from_, marker = self._exists_join(from_, exists, negated)
                if negated:
                    kept.append(ast.IsNull(operand=marker, negated=False, span=conjunct.span))
                continue
            scalars = [n for n in _outside_subqueries(conjunct) if isinstance(n, ast.ScalarSubquery)]
            if scalars and not isinstance(conjunct, (ast.InSubquery, ast.Exists)):
                if from_ is None:
                    raise SqlError("a subquery used as a value in WHERE needs a FROM clause", scalars[0].span)
                from_, conjunct = self._scalar_joins(from_, conjunct, scalars)
            if not isinstance(conjunct, ast.InSubquery):
                _refuse_inside(conjunct, "here")
                kept.append(conjunct)
                continue
            if from_ is None:
                raise SqlError("IN (subquery) needs a FROM clause", conjunct.span)
            correlated = self._correlated_in(conjunct)
            if conjunct.negated:
                from_, condition = self._not_in(from_, conjunct, correlated)
                kept.append(condition)
                continue
            if correlated is not None:
                # x IN (SELECT y FROM s WHERE s.a = outer.b): EXISTS (... AND y = x).
                local, keys, item = correlated
                exists = ast.Exists(query=records.evolve(conjunct.query, where=_all(local)), span=conjunct.span)
                from_, _ = self._exists_join(from_, exists, False, [*keys, (item, conjunct.operand)])
                continue
            from_ = self._semi_join(from_, conjunct)
        where = None
        for c in kept:
            where = c if where is None else ast.And(left=where, right=c, span=c.span)
        return records.evolve(q, from_=from_, where=where)

    def _exists_join(self, from_: ast.FromItem, e: ast.Exists, negated: bool,
                     extra: list[tuple[ast.Expr, ast.Expr]] | None = None) -> tuple[ast.FromItem, ast.Expr]:
        """``[NOT] EXISTS (SELECT ... FROM s WHERE s.a = outer.b AND ...)``: ``from_`` joined (inner
        for EXISTS, left for NOT EXISTS) with the distinct keys ``s.a`` of the rows that pass the
        subquery's own conditions, on ``outer.b = key``; and a column that is NULL exactly for
        the rows that found no match."""
        sub = e.query
        local, keys = self._correlation(sub, "EXISTS")
        keys += extra or []
        if not keys:
            raise SqlError("EXISTS without an equality tying it to the outer query is not supported yet", e.span,
                           "add the condition that relates the subquery's rows to the outer row (t.k = outer.k)")
        self._subqueries += 1
        alias = f"{HIDDEN}sq{self._subqueries}"
        span = e.span
        items = [ast.AliasedExpr(expr=inner_key, alias=f"{HIDDEN}k{i}", span=span) for i, (inner_key, _) in enumerate(keys)]
        items.append(ast.AliasedExpr(expr=ast.Literal(kind="bool", value=True, span=span), alias=f"{HIDDEN}m", span=span))
        where = None
        for c in local:
            where = c if where is None else ast.And(left=where, right=c, span=c.span)
        matches = ast.Select(items=tuple(items), from_=sub.from_, where=where, distinct=True, span=sub.span)
        condition = None
        for i, (_, outer_key) in enumerate(keys):
            key = ast.FieldAccess(expr=ast.ColumnRef(name=alias, span=span), name=f"{HIDDEN}k{i}", span=span)
            c = ast.Comparison(op="=", left=outer_key, right=key, span=span)
            condition = c if condition is None else ast.And(left=condition, right=c, span=span)
        join = ast.Join(left=from_, right=ast.SubqueryRef(query=matches, alias=alias, span=span),
                        kind="left" if negated else "inner", condition=condition, span=span)
        return join, ast.FieldAccess(expr=ast.ColumnRef(name=alias, span=span), name=f"{HIDDEN}m", span=span)

    def _correlation(self, sub: ast.QueryExpr, what: str) -> tuple[list[ast.Expr], list[tuple[ast.Expr, ast.Expr]]]:
        """The conditions of ``sub``'s WHERE that read only its own FROM, and its equalities with
        the outer query as (subquery expression, outer expression) pairs."""
        if (not isinstance(sub, ast.Select) or sub.from_ is None or sub.group_by or sub.having is not None
                or sub.distinct or has_aggregate(sub.items, self._is_udaf)):
            raise SqlError(f"{what} over this subquery is not supported yet", sub.span,
                           f"{what} (SELECT ... FROM t WHERE t.k = outer.k AND ...) is")
        _, inner = self._join(sub.from_, None) if isinstance(sub.from_, ast.Join) else self.from_item(sub.from_)
        local: list[ast.Expr] = []
        keys: list[tuple[ast.Expr, ast.Expr]] = []
        for c in _conjuncts(sub.where) if sub.where is not None else []:
            if self._reads_only(c, inner):
                local.append(c)
            elif isinstance(c, ast.Comparison) and c.op == "=" and self._reads_only(c.left, inner):
                keys.append((c.left, c.right))
            elif isinstance(c, ast.Comparison) and c.op == "=" and self._reads_only(c.right, inner):
                keys.append((c.right, c.left))
            else:
                raise SqlError(f"a condition of {what} that reads the outer query must be an equality of a "
                               "subquery expression and an outer one", c.span)
        return local, keys

    def _reads_only(self, e: ast.Expr, scope) -> bool:
        """Whether ``e`` binds in ``scope`` (reads only the subquery's own columns)."""
        errors = len(self.errors)
        try:
            self._expr(e, scope)
        except (SqlError, Unresolved):
            return False
        finally:
            del self.errors[errors:]
        return True

    def _correlated_in(self, c: ast.InSubquery):
        """None for a subquery of IN that stands alone; for one tied to the outer query by
        equalities: its own conditions, the (subquery, outer) equality pairs and its value."""
        try:
            self._check_in_subquery(c)
            return None
        except SqlError as exc:
            if not exc.message.startswith("a subquery that reads a column of the query around it"):
                raise
            correlated = exc
        local, keys = self._correlation(c.query, "IN")
        items = c.query.items
        if not keys or len(items) != 1 or not isinstance(items[0], ast.AliasedExpr):
            raise correlated
        return local, keys, items[0].expr

    def _not_in(self, from_: ast.FromItem, c: ast.InSubquery, correlated=None) -> tuple[ast.FromItem, ast.Expr]:
        """``x NOT IN (SELECT y ...)`` with SQL's NULL rules: TRUE when the subquery has no row;
        otherwise only for a non-NULL ``x`` equal to no ``y`` while no ``y`` is NULL. Three left
        joins find, per row, a matching value, whether the subquery has a row, and whether it has
        a NULL (the last two on a key every row has: ``x IS NULL OR x IS NOT NULL``). A subquery
        tied to the outer query by equalities (``correlated``) gives its rows per value of those:
        the three joins are on them too."""
        span = c.span
        self._subqueries += 1
        alias = f"{HIDDEN}sq{self._subqueries}"
        value = ast.ColumnRef(name=f"{HIDDEN}v", span=span)
        keys: list[tuple[ast.Expr, ast.Expr]] = []
        if correlated is None:
            source = ast.SubqueryRef(query=c.query, alias=f"{HIDDEN}in", columns=(f"{HIDDEN}v",), span=c.query.span)
        else:
            local, keys, item = correlated
            own = (ast.AliasedExpr(expr=item, alias=f"{HIDDEN}v", span=span),
                   *(ast.AliasedExpr(expr=inner, alias=f"{HIDDEN}k{i}", span=span)
                     for i, (inner, _) in enumerate(keys)))
            source = ast.SubqueryRef(query=records.evolve(c.query, items=own, where=_all(local)), alias=f"{HIDDEN}in",
                                     span=c.query.span)
        key_items = tuple(ast.AliasedExpr(expr=ast.ColumnRef(name=f"{HIDDEN}k{i}", span=span), alias=f"{HIDDEN}k{i}",
                                          span=span) for i in range(len(keys)))

        def values(items: tuple[ast.SelectItem, ...], where: ast.Expr | None) -> ast.SubqueryRef:
            return ast.SubqueryRef(query=ast.Select(items=(*items, *key_items), distinct=True, where=where, span=span,
                                                    from_=source), alias=None, span=span)

        def hidden(name: str) -> ast.Expr:
            return ast.FieldAccess(expr=ast.ColumnRef(name=f"{alias}{name}", span=span), name=f"{HIDDEN}{name}",
                                   span=span)

        flag = ast.Literal(kind="bool", value=True, span=span)
        every_row = ast.Or(left=ast.IsNull(operand=c.operand, negated=False, span=span),
                           right=ast.IsNull(operand=c.operand, negated=True, span=span), span=span)
        joined = from_
        for name, items, where, key in (
                ("m", (ast.AliasedExpr(expr=value, alias=f"{HIDDEN}m", span=span),), None, c.operand),
                ("any", (ast.AliasedExpr(expr=flag, alias=f"{HIDDEN}any", span=span),), None, every_row),
                ("null", (ast.AliasedExpr(expr=flag, alias=f"{HIDDEN}null", span=span),),
                 ast.IsNull(operand=value, negated=False, span=span), every_row)):
            right = records.evolve(values(items, where), alias=f"{alias}{name}")
            condition: ast.Expr = ast.Comparison(op="=", left=key, right=hidden(name), span=span)
            if keys and name != "m":
                condition = None
            for i, (_, outer) in enumerate(keys):
                tie = ast.Comparison(op="=", left=outer, right=ast.FieldAccess(
                    expr=ast.ColumnRef(name=f"{alias}{name}", span=span), name=f"{HIDDEN}k{i}", span=span), span=span)
                condition = tie if condition is None else ast.And(left=condition, right=tie, span=span)
            joined = ast.Join(left=joined, right=right, kind="left", span=span, condition=condition)
        empty = ast.IsNull(operand=hidden("any"), negated=False, span=span)
        found_none = ast.And(
            left=ast.And(left=ast.IsNull(operand=c.operand, negated=True, span=span),
                         right=ast.IsNull(operand=hidden("m"), negated=False, span=span), span=span),
            right=ast.IsNull(operand=hidden("null"), negated=False, span=span), span=span)
        return joined, ast.Or(left=empty, right=found_none, span=span)

    def _correlated_exists(self, e: ast.Exists) -> bool:
        """Whether the subquery of ``e`` reads the query around it (else it binds alone)."""
        errors = len(self.errors)
        try:
            self._query(e.query)
        except (SqlError, SqlErrors, Unresolved):
            return True
        finally:
            del self.errors[errors:]
        return False

    def _anchor(self, from_: ast.FromItem, span) -> ast.Expr:
        """A column of ``from_`` (any), to build a key every row has from."""
        _, scope = self._join(from_, None) if isinstance(from_, ast.Join) else self.from_item(from_)
        column = next((c for c in scope.columns if not is_hidden(c.qualifier)), scope.columns[0])
        if column.qualifier is None:
            return ast.ColumnRef(name=column.name, span=span)
        return ast.FieldAccess(expr=ast.ColumnRef(name=column.qualifier, span=span), name=column.name, span=span)

    def _select_list_scalars(self, q: ast.Select) -> ast.Select:
        """Subqueries used as values in the select list: a single-row aggregation is joined to
        every row (as in WHERE); one tied to the outer row by equalities is aggregated per key
        and joined on it (left: a key without rows gives NULL, or 0 for a COUNT)."""
        if q.from_ is None:
            first = next(n for item in q.items for n in _outside_subqueries(item) if isinstance(n, ast.ScalarSubquery))
            raise SqlError("a subquery used as a value needs a FROM clause around it", first.span)
        from_ = q.from_
        items = []
        for item in q.items:
            scalars = [n for n in _outside_subqueries(item) if isinstance(n, ast.ScalarSubquery)]
            if not scalars:
                items.append(item)
                continue
            replaced: dict[int, ast.Expr] = {}
            plain = []
            for sub in scalars:
                if self._correlated_exists(ast.Exists(query=sub.query, span=sub.span)):
                    from_, replaced[id(sub)] = self._correlated_scalar(from_, sub)
                else:
                    plain.append(sub)
            if plain:
                from_, _ = self._scalar_joins(from_, item.expr, plain, anchor=self._anchor(from_, item.span),
                                              replaced=replaced)
            new = _replace(item.expr, replaced)
            # A value joined in keeps the name the subquery's column gives it, as Flink names it.
            items.append(records.evolve(item, expr=new, alias=item.alias or (
                f"EXPR${q.items.index(item)}" if isinstance(item.expr, ast.ScalarSubquery) else None)))
        return records.evolve(q, items=tuple(items), from_=from_)

    def _correlated_scalar(self, from_: ast.FromItem, sub: ast.ScalarSubquery) -> tuple[ast.FromItem, ast.Expr]:
        """``(SELECT agg(...) FROM s WHERE s.k = outer.k AND ...)``: the aggregation per key, left
        joined on it; a key without rows gives NULL, which for a bare COUNT is 0."""
        q = sub.query
        if (not isinstance(q, ast.Select) or len(q.items) != 1 or not isinstance(q.items[0], ast.AliasedExpr)
                or not has_aggregate(q.items) or q.group_by or q.distinct):
            raise SqlError("a subquery used as a value that reads the outer query is supported as an aggregation "
                           "without GROUP BY (one row, one column)", sub.span,
                           "e.g. (SELECT COUNT(*) FROM o WHERE o.k = t.k)")
        local, keys = self._correlation(records.evolve(q, items=(ast.AliasedExpr(
            expr=ast.Literal(kind="int", value=1, span=sub.span), alias=None, span=sub.span),)), "a subquery")
        value = q.items[0].expr
        counting = isinstance(value, ast.FunctionCall) and value.name == "COUNT"
        if any(isinstance(n, ast.FunctionCall) and n.name == "COUNT" for n in ast_walk(value)) and not counting:
            raise SqlError("a COUNT inside an expression of a subquery that reads the outer query is not supported "
                           "yet (it is not NULL for a key without rows)", sub.span,
                           "select the COUNT alone and compute with it outside")
        self._subqueries += 1
        alias = f"{HIDDEN}sq{self._subqueries}"
        span = sub.span
        items = (*(ast.AliasedExpr(expr=inner, alias=f"{HIDDEN}k{i}", span=span) for i, (inner, _) in enumerate(keys)),
                 ast.AliasedExpr(expr=value, alias=f"{HIDDEN}s", span=span))
        grouped = ast.Select(items=items, from_=q.from_, where=_all(local), group_by=tuple(k for k, _ in keys),
                             span=q.span)
        condition = None
        for i, (_, outer) in enumerate(keys):
            c = ast.Comparison(op="=", left=outer, right=ast.FieldAccess(
                expr=ast.ColumnRef(name=alias, span=span), name=f"{HIDDEN}k{i}", span=span), span=span)
            condition = c if condition is None else ast.And(left=condition, right=c, span=span)
        joined = ast.Join(left=from_, right=ast.SubqueryRef(query=grouped, alias=alias, span=span), kind="left",
                          condition=condition, span=span)
        result: ast.Expr = ast.FieldAccess(expr=ast.ColumnRef(name=alias, span=span), name=f"{HIDDEN}s", span=span)
        if counting:
            result = ast.FunctionCall(name="COALESCE", args=(result, ast.Literal(kind="int", value=0, span=span)),
                                      span=span)
        return joined, result

    def _scalar_joins(self, from_: ast.FromItem, conjunct: ast.Expr, scalars: list[ast.ScalarSubquery], *,
                      anchor: ast.Expr | None = None,
                      replaced: dict[int, ast.Expr] | None = None) -> tuple[ast.FromItem, ast.Expr]:
        """A condition of WHERE with subqueries used as values (``price > (SELECT AVG(price)
        FROM bid)``): each must be an aggregation without GROUP BY (one row, one column); its row
        is joined to every row (left, so that its value is NULL before it has one) on a key
        every row has, built from a column the condition reads; the condition reads its value."""
        if anchor is None:
            anchors = [n for n in _outside_subqueries(conjunct) if isinstance(n, (ast.ColumnRef, ast.FieldAccess))]
            if not anchors:
                raise SqlError("a subquery used as a value is supported in a condition that also reads a column",
                               scalars[0].span)
            anchor = anchors[0]
        every_row = ast.Or(left=ast.IsNull(operand=anchor, negated=False, span=anchor.span),
                           right=ast.IsNull(operand=anchor, negated=True, span=anchor.span), span=anchor.span)
        replaced = {} if replaced is None else replaced
        for sub in scalars:
            q = sub.query
            if (not isinstance(q, ast.Select) or q.group_by or len(q.items) != 1 or q.distinct
                    or not isinstance(q.items[0], ast.AliasedExpr) or not has_aggregate(q.items, self._is_udaf)):
                raise SqlError("a subquery used as a value is supported as an aggregation without GROUP BY "
                               "(one row, one column)", sub.span, "e.g. (SELECT AVG(price) FROM bid)")
            self._subqueries += 1
            alias = f"{HIDDEN}sq{self._subqueries}"
            span = sub.span
            items = (records.evolve(q.items[0], alias=f"{HIDDEN}s"),
                     ast.AliasedExpr(expr=ast.Literal(kind="bool", value=True, span=span), alias=f"{HIDDEN}k", span=span))
            right = ast.SubqueryRef(query=records.evolve(q, items=items), alias=alias, span=span)
            key = ast.FieldAccess(expr=ast.ColumnRef(name=alias, span=span), name=f"{HIDDEN}k", span=span)
            from_ = ast.Join(left=from_, right=right, kind="left", span=span,
                             condition=ast.Comparison(op="=", left=every_row, right=key, span=span))
            value: ast.Expr = ast.FieldAccess(expr=ast.ColumnRef(name=alias, span=span), name=f"{HIDDEN}s", span=span)
            if isinstance(q.items[0].expr, ast.FunctionCall) and q.items[0].expr.name == "COUNT":
                # Before the subquery has a row (none of its rows yet) its COUNT is 0, as SQL says.
                value = ast.FunctionCall(name="COALESCE", args=(value, ast.Literal(kind="int", value=0, span=span)),
                                         span=span)
            replaced[id(sub)] = value
        return from_, _replace(conjunct, replaced)

    def _check_in_subquery(self, c: ast.InSubquery) -> None:
        """Refuse a correlated subquery, or one of more than one column."""
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

    def _semi_join(self, from_: ast.FromItem, c: ast.InSubquery) -> ast.FromItem:
        """``from_`` joined with the distinct values of ``c``'s query on ``operand = value``."""
        self._check_in_subquery(c)
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


def _outside_subqueries(node):
    """The nodes of ``node``, not descending into subqueries (a ScalarSubquery itself is yielded)."""
    yield node
    if isinstance(node, (ast.ScalarSubquery, ast.InSubquery, ast.Exists, ast.QueryExpr)):
        return
    for field in records.fields(type(node)):
        value = getattr(node, field.name)
        for child in value if isinstance(value, tuple) else (value,):
            if isinstance(child, ast.Node):
                yield from _outside_subqueries(child)


def _replace(node, replaced: dict[int, ast.Expr]):
    """``node`` with the nodes whose ids ``replaced`` names put in their place."""
    return ast.rewrite(node, lambda n: replaced.get(id(n), n if isinstance(n, ast.QueryExpr) else None))


def _all(conditions: list[ast.Expr]) -> ast.Expr | None:
    where = None
    for c in conditions:
        where = c if where is None else ast.And(left=where, right=c, span=c.span)
    return where


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
            raise SqlError(f"EXISTS (subquery) {where} is not supported yet", n.span,
                           "[NOT] EXISTS is supported as a condition of WHERE joined to the rest by AND")
        if isinstance(n, ast.ScalarSubquery):
            raise SqlError("a subquery used as a value is not supported yet", n.span,
                           "join with the query instead (a GROUP BY without keys gives one row)")
