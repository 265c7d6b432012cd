"""Fuse adjacent stateless operators into one ``Calc``.

    Project(e) <- Filter(p) <- x        becomes        Calc(p, e) <- x

A filter alone becomes a Calc that passes every column through; a projection alone, a Calc
without a predicate. A Calc on a Calc merges into one when the lower one's expressions can be
inlined without computing any of them twice; when they cannot, physical planning still runs the
two in one generated function.
"""

from __future__ import annotations

from collections import Counter

from clink.compiler import ir


def fuse_stateless(node: ir.Rel) -> ir.Rel:
    match node:
        case ir.Project(input=below, exprs=exprs, names=names):
            calc = ir.Calc(input=below, predicate=None, exprs=exprs, names=names, span=node.span)
        case ir.Filter(input=below, predicate=predicate):
            exprs = tuple(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=node.span)
                          for i, f in enumerate(below.schema.fields))
            calc = ir.Calc(input=below, predicate=predicate, exprs=exprs, names=below.schema.names, span=node.span)
        case _:
            return node
    if isinstance(calc.input, ir.Calc):
        return _merge(calc, calc.input)
    return calc


def _merge(outer: ir.Calc, inner: ir.Calc) -> ir.Calc:
    parts = [*outer.exprs, *([outer.predicate] if outer.predicate is not None else [])]
    uses = Counter(e.index for part in parts for e in ir.walk(part) if isinstance(e, ir.Column))
    for i, count in uses.items():
        expr = inner.exprs[i]
        if not expr.deterministic or (count > 1 and not isinstance(expr, (ir.Column, ir.Literal))):
            return outer
    predicate = inner.predicate
    if outer.predicate is not None:
        predicate = ir.and_(predicate, ir.substitute(outer.predicate, inner.exprs))
    exprs = tuple(ir.substitute(e, inner.exprs) for e in outer.exprs)
    return ir.Calc(input=inner.input, predicate=predicate, exprs=exprs, names=outer.names, span=outer.span)
