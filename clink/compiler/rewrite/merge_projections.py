"""Merge a projection into the projection above it.

    Project(outer) <- Project(inner)        becomes        Project(outer[inner])

Each inner expression is inlined where the outer one names it. To avoid computing an expression
twice, the merge happens only when every inner expression that is not a plain column or a
literal is used at most once above.
"""

from __future__ import annotations

from collections import Counter

from clink.compiler import ir


def merge_projections(node: ir.Rel) -> ir.Rel:
    match node:
        case ir.Project(input=ir.Project(input=below, exprs=inner), exprs=outer):
            uses = Counter(e.index for expr in outer for e in ir.walk(expr) if isinstance(e, ir.Column))
            for i, expr in enumerate(inner):
                if uses[i] > 1 and not isinstance(expr, (ir.Column, ir.Literal)):
                    return node
            if not all(inner[i].deterministic for i in uses):
                return node
            exprs = tuple(ir.substitute(e, inner) for e in outer)
            return ir.Project(input=below, exprs=exprs, names=node.names, span=node.span)
        case _:
            return node
