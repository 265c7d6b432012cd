"""Mark the sides of a join that have one row per key, and say which columns are unique.

    Join(a.id = b.auction) over a with PRIMARY KEY (id), both append-only
    becomes
    Join(a.id = b.auction, unique=(True, False))

A side whose join keys hold a unique key of it (``unique_keys``) gets at most one row per key,
ever. In an inner join of append-only inputs a row of the other side that has met that row can
meet no other, and the row's arrival ends the other side's rows of its key; the join keeps them
only until it comes (``runtime.operators.join``). ``end_ranks`` asks the same question of a Top-N's
partition.
"""

from __future__ import annotations

from collections.abc import Collection

from clink import records
from clink.compiler import ir

#: A column of a relation with a path of struct field positions into it (``()``: the column).
Origin = tuple[int, tuple[int, ...]]


def unique_join_sides(node: ir.Rel) -> ir.Rel:
    """Mark the sides of an inner join of append-only inputs whose join keys hold a unique key
    of theirs (``ir.Join.unique``): a row of the other side that has met its row needs no keeping,
    and that row's arrival ends the other side's rows of its key."""
    match node:
        case ir.Join(kind="inner", lookup=False, temporal=None, unique=(False, False)) if not (
                ir.is_updating(node.left) or ir.is_updating(node.right)):
            unique = (holds_unique_key(node.left, node.left_keys), holds_unique_key(node.right, node.right_keys))
            if any(unique):
                return records.evolve(node, unique=unique)
    return node


def holds_unique_key(rel: ir.Rel, columns: Collection[int]) -> bool:
    """Whether ``columns`` of ``rel`` hold one of its unique keys (whole columns, not fields)."""
    return any(all(path == () and c in columns for c, path in key) for key in unique_keys(rel))


def unique_keys(rel: ir.Rel) -> list[frozenset[Origin]]:
    """Sets of columns (or struct fields in them) of an append-only ``rel`` that no two of its
    rows share values of, where none of those is NULL: an append-only table's primary key, the
    fields its connector numbers (``TableInfo.unique_fields``), passed on by projections and
    filters. Empty where it cannot tell."""
    if ir.is_updating(rel):
        return []
    match rel:
        case ir.Scan(table=table, columns=columns):
            position = {c: i for i, c in enumerate(columns)}
            names = table.columns.names
            keys = []
            if table.primary_key and all(names.index(k) in position for k in table.primary_key):
                keys.append(frozenset((position[names.index(k)], ()) for k in table.primary_key))
            for path in table.unique_fields:
                top = names.index(path[0]) if path[0] in names else None
                if top is None or top not in position:
                    continue
                t, fields = table.columns[top].type, []
                for name in path[1:]:
                    index = t.get_field_index(name)
                    fields.append(index)
                    t = t.field(index).type
                keys.append(frozenset({(position[top], tuple(fields))}))
            return keys
        case ir.Filter(input=below):
            return unique_keys(below)
        case ir.Project(exprs=exprs, input=below) | ir.Calc(exprs=exprs, input=below):
            below_keys = unique_keys(below)
            if not below_keys:
                return []
            passed = {}  # origin below -> the output column that passes it on
            for i, e in enumerate(exprs):
                o = _origin(e)
                if o is not None:
                    passed.setdefault(o, i)
            keys = []
            for key in below_keys:
                mapped = [_passed_on(o, passed) for o in key]
                if all(m is not None for m in mapped):
                    keys.append(frozenset(mapped))
            return keys
    return []


def _origin(expr: ir.Expr) -> Origin | None:
    """The column (and struct field path) ``expr`` reads unchanged, if that is all it does."""
    match expr:
        case ir.Column(index=index):
            return index, ()
        case ir.Call(fn="field", args=(base,), params=(index,)):
            below = _origin(base)
            return None if below is None else (below[0], (*below[1], index))
    return None


def _passed_on(origin: Origin, passed: dict[Origin, int]) -> Origin | None:
    """Where a projection puts ``origin``: an output column that is it, or that holds it (a
    struct passed on whole)."""
    column, path = origin
    for n in range(len(path), -1, -1):
        i = passed.get((column, path[:n]))
        if i is not None:
            return i, path[n:]
    return None
