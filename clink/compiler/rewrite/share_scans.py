"""Read a table once when one statement scans it several times with the same filter.

    ... Scan(t, columns=[a, b], where p) ... Scan(t, columns=[b, c], where p) ...
becomes
    ... Project(a, b) <- Scan(t, columns=[a, b, c], where p) ... Project(b, c) <- Scan(t, [a, b, c], where p) ...

The two scans are then equal, and physical planning gives them one source whose batches feed
both branches (a self-join, or a query over two views of one table, such as Nexmark's bid view
read by a join and by a window aggregation): the table is read and decoded once, not twice.
Scans with different filters stay apart (each source skips different rows early).
"""

from __future__ import annotations

from collections import defaultdict

from clink import records
from clink.compiler import ir


def share_scans(root: ir.Rel) -> ir.Rel:
    scans = _scans(root)
    groups: dict[tuple, list[ir.Scan]] = defaultdict(list)
    for scan in scans:
        physical = dict(enumerate(scan.columns))
        predicate = ir.remap(scan.predicate, physical) if scan.predicate is not None else None
        groups[(scan.table, predicate)].append(scan)
    replacement: dict[int, ir.Rel] = {}
    for (_, predicate), members in groups.items():
        if len({m.columns for m in members}) < 2:
            continue
        union = tuple(sorted({c for m in members for c in m.columns}))
        position = {c: i for i, c in enumerate(union)}
        shared = records.evolve(members[0], columns=union,
                              predicate=ir.remap(predicate, position) if predicate is not None else None)
        for scan in members:
            fields = shared.schema.fields
            exprs = tuple(ir.Column(index=position[c], name=fields[position[c]].name, type=fields[position[c]].type,
                                    nullable=fields[position[c]].nullable, span=None) for c in scan.columns)
            replacement[id(scan)] = ir.Project(input=shared, exprs=exprs, names=scan.schema.names, span=scan.span)
    if not replacement:
        return root
    return _replace(root, replacement)


def _scans(node: ir.Rel) -> list[ir.Scan]:
    if isinstance(node, ir.Scan):
        return [node]
    return [s for child in node.inputs for s in _scans(child)]


def _replace(node: ir.Rel, replacement: dict[int, ir.Rel]) -> ir.Rel:
    if id(node) in replacement:
        return replacement[id(node)]
    inputs = tuple(_replace(child, replacement) for child in node.inputs)
    return node.with_inputs(inputs) if inputs != node.inputs else node
