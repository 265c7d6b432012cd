"""Make a filter on a ROW_NUMBER's row number the limit of its Rank (Top-N).

    Filter(rn <= 3 AND p) <- Project(..., rn) <- Rank(limit=None)
    becomes
    Filter(p) <- Project(..., rn) <- Rank(limit=3)

``rn <= N``, ``rn < N`` and ``rn = 1`` are limits, written either way round (``3 >= rn``); the
smallest wins and the other conjuncts stay in the filter. The binder refuses a ROW_NUMBER that
no such filter limits (``check_ranks_limited``) and, at the WHERE, a limit that keeps no row, so
after this rule every Rank has its limit. It runs first: other rules move filters.
"""

from __future__ import annotations

from clink import records
from clink.compiler import ir
from clink.errors import SqlError


def limit_ranks(node: ir.Rel) -> ir.Rel:
    found = top_n(node)
    if found is None:
        return node
    limit, rest = found
    project = node.input
    ranked = records.evolve(project, input=records.evolve(project.input, limit=limit))
    predicate = None
    for c in rest:
        predicate = ir.and_(predicate, c)
    return ranked if predicate is None else ir.Filter(input=ranked, predicate=predicate, span=predicate.span)


def top_n(node: ir.Rel) -> tuple[int, list[ir.Expr]] | None:
    """When ``node`` filters the row number of the ROW_NUMBER projection right below it: the
    limit that puts on it and the filter's other conjuncts; else None.

    Raises ``SqlError`` when the limit keeps no row (``rn < 1``).
    """
    match node:
        case ir.Filter(input=ir.Project(input=ir.Rank(limit=None) as rank) as project, predicate=predicate):
            pass
        case _:
            return None
    conjuncts = ir.conjuncts(predicate)
    rank_column = len(rank.schema) - 1
    outputs = {i for i, e in enumerate(project.exprs) if isinstance(e, ir.Column) and e.index == rank_column}
    limit = None
    rest = []
    for c in conjuncts:
        bound = _rank_bound(c, outputs)
        if bound is not None:
            limit = bound if limit is None else min(limit, bound)
        else:
            rest.append(c)
    if limit is None:
        return None
    if limit < 1:
        raise SqlError(f"the row number is at least 1, so this keeps no row (limit {limit})",
                       conjuncts[0].span)
    return limit, rest


def check_ranks_limited(rel: ir.Rel) -> None:
    """Every ROW_NUMBER needs a limit from the query above it (Top-N): a filter on its row number
    right above its projection, which ``limit_ranks`` makes the Rank's limit. The binder calls it
    on what an INSERT or a query writes, and on each input of a join: a filter the join puts on
    an input is not a Top-N."""
    if top_n(rel) is not None:
        check_ranks_limited(rel.input.input.input)  # below the Rank this filter limits
        return
    if isinstance(rel, ir.Rank) and rel.limit is None:
        raise SqlError("ROW_NUMBER() OVER (...) is supported as Top-N only: filter its result in the query "
                       "around it", rel.span, "e.g. SELECT * FROM (SELECT *, ROW_NUMBER() OVER (...) AS rn FROM t) "
                       "WHERE rn <= 3")
    for child in rel.inputs:
        check_ranks_limited(child)


def _rank_bound(c: ir.Expr, outputs: set[int]) -> int | None:
    if not (isinstance(c, ir.Call) and c.fn in ("le", "lt", "eq", "ge", "gt") and len(c.args) == 2):
        return None
    a, b = c.args
    fn = c.fn
    if isinstance(b, ir.Column) and isinstance(a, ir.Literal):
        a, b = b, a
        fn = {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt", "eq": "eq"}[fn]
    if not (isinstance(a, ir.Column) and a.index in outputs and isinstance(b, ir.Literal)
            and isinstance(b.value, int) and not isinstance(b.value, bool)):
        return None
    if fn == "le":
        return b.value
    if fn == "lt":
        return b.value - 1
    if fn == "eq" and b.value == 1:
        return 1
    return None
