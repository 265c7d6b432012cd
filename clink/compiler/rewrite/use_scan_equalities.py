"""Use what a scan's filter says about a column in the projection above it.

    Project(CASE WHEN kind = 0 THEN a.x ELSE b.x END) <- Scan(t, predicate= kind = 2 AND ...)
    becomes
    Project(b.x) <- Scan(t, predicate= kind = 2 AND ...)

A conjunct ``column = literal`` of the scan's predicate holds for every row that reaches the
projection, so the projection may read the literal instead of the column; comparisons of two
literals then fold, and CASE branches whose condition is now a constant FALSE (or NULL) go,
as does everything after a constant TRUE one. The column itself stays in the scan (the
predicate reads it), but columns only the dropped branches read no longer do, and pruning
removes them: a view that picks one kind of row out of a union-like table (Nexmark's ``bid``)
then reads only that kind's columns.
"""

from __future__ import annotations

from clink import records
from clink.compiler import ir

_COMPARE = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def use_scan_equalities(node: ir.Rel) -> ir.Rel:
    match node:
        case ir.Project(input=ir.Scan(predicate=predicate) as scan) if predicate is not None:
            known = _equalities(predicate, scan.schema)
            if not known:
                return node
            # Each column keeps its declared nullability: the output schema does not change.
            exprs = tuple(records.evolve(new, nullable=old.nullable) if new.nullable != old.nullable else new
                          for old, new in ((e, _simplify(_substitute(e, known))) for e in node.exprs))
            return node if exprs == node.exprs else records.evolve(node, exprs=exprs)
    return node


def _equalities(predicate: ir.Expr, schema: ir.Schema) -> dict[int, ir.Literal]:
    """Columns that a conjunct of ``predicate`` pins to a non-NULL literal of their own type."""
    known: dict[int, ir.Literal] = {}
    for c in ir.conjuncts(predicate):
        match c:
            case ir.Call(fn="eq", args=(ir.Column(index=i), ir.Literal() as lit)) | \
                 ir.Call(fn="eq", args=(ir.Literal() as lit, ir.Column(index=i))):
                if lit.value is not None and lit.type == schema[i].type:
                    known[i] = lit
    return known


def _substitute(e: ir.Expr, known: dict[int, ir.Literal]) -> ir.Expr:
    if isinstance(e, ir.Column) and e.index in known:
        lit = known[e.index]
        return ir.Literal(value=lit.value, type=lit.type, nullable=False, span=e.span)
    children = tuple(_substitute(c, known) for c in e.children)
    return e.with_children(children) if children != e.children else e


def _simplify(e: ir.Expr) -> ir.Expr:
    children = tuple(_simplify(c) for c in e.children)
    if children != e.children:
        e = e.with_children(children)
    match e:
        case ir.Call(fn=fn, args=(ir.Literal() as a, ir.Literal() as b)) if fn in _COMPARE and a.type == b.type:
            value = None if a.value is None or b.value is None else _COMPARE[fn](a.value, b.value)
            return ir.Literal(value=value, type=e.type, nullable=value is None, span=e.span)
        case ir.Call(fn="case", params=(n, has_else)):
            return _simplify_case(e, n, has_else)
    return e


def _simplify_case(e: ir.Call, n: int, has_else: bool) -> ir.Expr:
    conditions, results = list(e.args[:n]), list(e.args[n:])
    kept_conditions, kept_results = [], []
    for cond, result in zip(conditions, results[:n], strict=True):
        if isinstance(cond, ir.Literal):
            if cond.value is True:
                if not kept_conditions:
                    return result  # the first condition that can hold always does
                # Later branches can never be reached: this one becomes the ELSE.
                return _case(e, kept_conditions, [*kept_results, result], has_else=True)
            continue  # FALSE or NULL: the branch is never taken
        kept_conditions.append(cond)
        kept_results.append(result)
    else_ = results[n:]
    if not kept_conditions:
        return else_[0] if has_else else ir.Literal(value=None, type=e.type, nullable=True, span=e.span)
    if len(kept_conditions) == n:
        return e
    return _case(e, kept_conditions, [*kept_results, *else_], has_else=has_else)


def _case(e: ir.Call, conditions: list[ir.Expr], results: list[ir.Expr], *, has_else: bool) -> ir.Call:
    return records.evolve(e, args=(*conditions, *results), params=(len(conditions), has_else))
