"""Move a filter that sits directly on a scan into the scan.

    Filter(p) <- Scan(t)        becomes        Scan(t, predicate=p)

The scan evaluates it first, and a source that can (Parquet) may skip rows before decoding
them. Only deterministic predicates move; ``CURRENT_TIMESTAMP`` is evaluated where the query put it.
"""

from __future__ import annotations

from clink import records
from clink.compiler import ir


def push_filter_into_scan(node: ir.Rel) -> ir.Rel:
    match node:
        case ir.Filter(input=ir.Scan() as scan, predicate=predicate) if predicate.deterministic:
            return records.evolve(scan, predicate=ir.and_(scan.predicate, predicate))
        case _:
            return node
