"""Read only the columns the plan uses.

Walks from the root down, carrying the set of input columns each node needs; a scan keeps just
those (projection pushdown: Parquet and CSV then skip decoding the rest), and the expressions
above are renumbered to match. Filters and projections in between drop unused columns too.
"""

from __future__ import annotations

from clink import records
from clink.compiler import ir
from clink.errors import CompilerBug


def prune_projections(root: ir.Rel) -> ir.Rel:
    if isinstance(root, ir.Sink):
        new_input, mapping = _prune(root.input, set(range(len(root.input.schema))))
        assert mapping == {i: i for i in range(len(root.input.schema))}
        return root.with_inputs((new_input,))
    new, _ = _prune(root, set(range(len(root.schema))))
    return new


def _prune(node: ir.Rel, needed: set[int]) -> tuple[ir.Rel, dict[int, int]]:
    """Rebuild ``node`` producing at least the ``needed`` columns; return the new node and
    old-position → new-position for the columns it kept."""
    match node:
        case ir.Scan(columns=columns, predicate=predicate):
            keep = set(needed) | (ir.columns_used(predicate) if predicate is not None else set())
            # The source computes the watermark from the batches it reads.
            keep |= {columns.index(p) for p in node.table.watermark_columns if p in columns}
            if node.table.normalized:
                # The last row of each key is kept by the key: an upsert scan always reads it.
                keep |= {columns.index(p) for p in node.table.key_columns if p in columns}
            if not keep and columns:
                # A query that reads no column (SELECT 1 FROM t) still needs the rows: read one.
                keep = {0}
            kept = sorted(keep)
            mapping = {old: new for new, old in enumerate(kept)}
            new_pred = ir.remap(predicate, mapping) if predicate is not None else None
            return records.evolve(node, columns=tuple(columns[i] for i in kept), predicate=new_pred), mapping
        case ir.Filter(input=child, predicate=predicate):
            new_child, mapping = _prune(child, set(needed) | ir.columns_used(predicate))
            return ir.Filter(input=new_child, predicate=ir.remap(predicate, mapping), span=node.span), mapping
        case ir.Project(input=child, exprs=exprs, names=names) | ir.Calc(input=child, exprs=exprs, names=names):
            # The outputs are the plan's contract with the node above: keep all of them unless
            # this projection feeds another node that does not need them.
            kept = sorted(needed)
            used: set[int] = set()
            for i in kept:
                used |= ir.columns_used(exprs[i])
            predicate = node.predicate if isinstance(node, ir.Calc) else None
            if predicate is not None:
                used |= ir.columns_used(predicate)
            new_child, mapping = _prune(child, used)
            new_exprs = tuple(ir.remap(exprs[i], mapping) for i in kept)
            new_names = tuple(names[i] for i in kept)
            if isinstance(node, ir.Calc):
                new_node = records.evolve(node, input=new_child, exprs=new_exprs, names=new_names,
                                        predicate=ir.remap(predicate, mapping) if predicate is not None else None)
            else:
                new_node = ir.Project(input=new_child, exprs=new_exprs, names=new_names, span=node.span)
            return new_node, {old: new for new, old in enumerate(kept)}
        case ir.Union(all_inputs=children):
            # Every input must keep the same columns in the same places: prune each to ``needed``
            # through a projection that the input's own pruning then merges away.
            kept = sorted(needed)
            pruned = []
            for child in children:
                new_child, mapping = _prune(child, set(kept))
                exprs = tuple(ir.Column(index=mapping[i], name=child.schema[i].name, type=child.schema[i].type,
                                        nullable=child.schema[i].nullable, span=None) for i in kept)
                if [mapping[i] for i in kept] != list(range(len(new_child.schema))):
                    new_child = ir.Project(input=new_child, exprs=exprs, names=tuple(child.schema[i].name for i in kept),
                                           span=child.span)
                pruned.append(new_child)
            return node.with_inputs(tuple(pruned)), {old: new for new, old in enumerate(kept)}
        case ir.Sort(input=child, time=time, order=order):
            new_child, mapping = _prune(child, set(needed) | {time} | {c for c, _ in order})
            return records.evolve(node, input=new_child, time=mapping[time],
                                order=tuple((mapping[c], d) for c, d in order)), mapping
        case ir.WindowAggregate(input=child) | ir.GroupAggregate(input=child) | ir.Replicate(input=child) \
                | ir.Unnest(input=child) | ir.MatchRecognize(input=child) \
                | ir.Lateral(input=child):
            # Its input was built for it (keys, time, arguments; a count): every column is used.
            new_child, mapping = _prune(child, set(range(len(child.schema))))
            assert all(k == v for k, v in mapping.items())
            return node.with_inputs((new_child,)), {i: i for i in range(len(node.schema))}
        case ir.Join(left=left, right=right, left_keys=lkeys, right_keys=rkeys, residual=residual):
            # Each side keeps what is needed above, its keys, and what the residual and the
            # interval bounds read: the join stores only those columns.
            width = len(left.schema)
            used = set(needed) | (ir.columns_used(residual) if residual is not None else set())
            bounds = node.interval
            left_used = {i for i in used if i < width} | set(lkeys)
            right_used = {i - width for i in used if i >= width} | set(rkeys)
            if bounds is not None:
                left_used |= {bounds.left_time, bounds.left_expiry}
                right_used |= {bounds.right_time, bounds.right_expiry}
            if node.temporal is not None:
                left_used.add(node.temporal[0])
                right_used.add(node.temporal[1])
            new_left, lmap = _prune(left, left_used)
            new_right, rmap = _prune(right, right_used)
            new_width = len(new_left.schema)
            out = dict(lmap)
            out.update({width + old: new_width + new for old, new in rmap.items()})
            new_node = records.evolve(
                node, left=new_left, right=new_right, left_keys=tuple(lmap[k] for k in lkeys),
                right_keys=tuple(rmap[k] for k in rkeys),
                residual=ir.remap(residual, out) if residual is not None else None,
                interval=records.evolve(
                    bounds, left_time=lmap[bounds.left_time], right_time=rmap[bounds.right_time],
                    left_end=lmap[bounds.left_end] if bounds.left_end is not None else None,
                    right_end=rmap[bounds.right_end] if bounds.right_end is not None else None)
                if bounds is not None else None,
                temporal=(lmap[node.temporal[0]], rmap[node.temporal[1]]) if node.temporal is not None else None)
            return new_node, out
        case ir.OverAggregate(input=child, partition=partition, time=time, aggs=aggs):
            width = len(child.schema)
            used = {i for i in needed if i < width} | set(partition) | {time}
            used |= {a.arg for a in aggs if a.arg is not None} | set(node.late_columns)
            new_child, mapping = _prune(child, used)
            new_node = records.evolve(node, input=new_child, partition=tuple(mapping[p] for p in partition),
                                    time=mapping[time], late_columns=tuple(mapping[c] for c in node.late_columns),
                                    aggs=tuple(records.evolve(a, arg=mapping[a.arg] if a.arg is not None else None)
                                               for a in aggs))
            out = dict(mapping)
            out.update({width + j: len(new_child.schema) + j for j in range(len(aggs))})
            return new_node, out
        case ir.Rank(input=child, partition=partition, order=order, expiry=expiry):
            # The rank keeps (and stores) the columns needed above and its own (those its
            # partitions end by among them); the row number itself is left out when nothing above
            # reads it.
            width = len(child.schema)
            used = {i for i in needed if i < width} | set(partition) | {c for c, _ in order} | {c for c, _ in expiry}
            new_child, mapping = _prune(child, used)
            emit_rank = node.emit_rank and width in needed
            new_node = records.evolve(node, input=new_child, partition=tuple(mapping[p] for p in partition),
                                    order=tuple((mapping[c], d) for c, d in order), emit_rank=emit_rank,
                                    expiry=tuple((mapping[c], ms) for c, ms in expiry))
            out = dict(mapping)
            if emit_rank:
                out[width] = len(new_child.schema)
            return new_node, out
        case ir.WindowTVF(input=child, time=time, partition_by=partition):
            width = len(child.schema)
            used = {i for i in needed if i < width} | {time, *partition}
            new_child, mapping = _prune(child, used)
            out = dict(mapping)
            out.update({width + j: len(new_child.schema) + j for j in range(3)})
            new_node = ir.WindowTVF(input=new_child, window=node.window, time=mapping[time],
                                    partition_by=tuple(mapping[p] for p in partition), span=node.span)
            return new_node, out
    raise CompilerBug(f"prune_projections does not know {type(node).__name__}")
