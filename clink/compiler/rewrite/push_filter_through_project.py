"""Move a filter below the projection it sits on.

    Filter(p) <- Project(e)        becomes        Project(e) <- Filter(p[e])

so that a WHERE over a view or subquery can reach the scan. The predicate is rewritten in terms
of the projection's input (``p[e]``: each column replaced by its expression). Only when the
expressions it needs are deterministic, so moving them does not change their value.
"""

from __future__ import annotations

from clink.compiler import ir


def push_filter_through_project(node: ir.Rel) -> ir.Rel:
    match node:
        case ir.Filter(input=ir.Project(input=below, exprs=exprs) as project, predicate=predicate):
            needed = [exprs[i] for i in ir.columns_used(predicate)]
            if not predicate.deterministic or not all(e.deterministic for e in needed):
                return node
            pushed = ir.Filter(input=below, predicate=ir.substitute(predicate, exprs), span=node.span)
            return project.with_inputs((pushed,))
        case ir.Filter(input=ir.Filter(input=below, predicate=inner), predicate=outer):
            return ir.Filter(input=below, predicate=ir.and_(inner, outer), span=node.span)
        case _:
            return node
