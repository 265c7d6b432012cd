"""Move a filter below a window table function when it does not read the window's columns.

    Filter(p) <- WindowTVF(w) <- x        becomes        WindowTVF(w) <- Filter(p) <- x

Rows are filtered before HOP and CUMULATE copy them into each of their windows.
"""

from __future__ import annotations

from clink.compiler import ir


def push_filter_below_windows(node: ir.Rel) -> ir.Rel:
    match node:
        case ir.Filter(input=ir.WindowTVF(input=below) as tvf, predicate=predicate) if predicate.deterministic:
            if any(i >= len(below.schema) for i in ir.columns_used(predicate)):
                return node
            return tvf.with_inputs((ir.Filter(input=below, predicate=predicate, span=node.span),))
        case _:
            return node
