"""``GROUP BY GROUPING SETS (...)``, ``ROLLUP (...)`` and ``CUBE (...)``: one aggregation per
grouping set, their rows united (UNION ALL), as the SQL standard defines them.

In the branch of a grouping set, each grouping expression that is not in the set reads as NULL
(outside aggregate arguments), and ``GROUPING(e)`` is 1 for such an expression and 0 for one in
the set (``GROUPING(a, b)`` and ``GROUPING_ID(a, b)``: those bits, the first argument highest).
A grouping set written twice aggregates twice; ``GROUP_ID()`` tells the copies apart: 0 in the
branch of a set's first occurrence, 1 in its second, and so on (the sets compared as sets, as
Calcite and Flink compare them: ``(a, b)`` is ``(b, a)``).
``ROLLUP (a, b)`` is the sets ``(a, b), (a), ()``; ``CUBE (a, b)`` every subset; several items
of a GROUP BY multiply (``GROUP BY k, ROLLUP (a)`` is ``(k, a), (k)``). Over a window table
function, keep ``window_start, window_end`` in every set: each branch is a window aggregation.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pyarrow as pa

from clink import records
from clink.compiler import ast
from clink.compiler.bind.scope import ast_walk, derive_name
from clink.compiler.functions import AGGREGATES
from clink.errors import SqlError

_SETS = ("ROLLUP", "CUBE")
_BITS = ("GROUPING", "GROUPING_ID")
#: The functions that read which grouping set a row comes from, made constants in each branch.
GROUPING_FUNCTIONS = (*_BITS, "GROUP_ID")


def grouping_sets(q: ast.Select) -> list[tuple[ast.Expr, ...]] | None:
    """The grouping sets of ``q``'s GROUP BY, or None when it has none (a plain GROUP BY)."""
    choices: list[list[tuple[ast.Expr, ...]]] = []
    found = False
    for item in q.group_by:
        match item:
            case ast.GroupingSets(sets=sets):
                choices.append(list(sets))
                found = True
            case ast.FunctionCall(name=name, args=args) if name in _SETS and item.over is None:
                if name == "ROLLUP":
                    choices.append([tuple(args[:i]) for i in range(len(args), -1, -1)])
                else:
                    choices.append([c for r in range(len(args), -1, -1) for c in itertools.combinations(args, r)])
                found = True
            case _:
                choices.append([(item,)])
    if not found:
        return None
    sets = []
    for combo in itertools.product(*choices):
        chosen: list[ast.Expr] = []
        for e in itertools.chain.from_iterable(combo):
            if e not in chosen:
                chosen.append(e)
        sets.append(tuple(chosen))
    return sets


def group_ids(sets: list[tuple[ast.Expr, ...]]) -> list[int]:
    """``GROUP_ID()`` of each grouping set: how many times the same set came before it."""
    seen: dict[frozenset[ast.Expr], int] = {}
    ids = []
    for s in sets:
        key = frozenset(s)
        ids.append(seen.get(key, 0))
        seen[key] = ids[-1] + 1
    return ids


def branch(q: ast.Select, grouping: tuple[ast.Expr, ...], every: list[ast.Expr],
           udaf: Callable[[str], bool] = lambda name: False, group_id: int = 0) -> ast.Select:
    """The SELECT block of one grouping set: its keys, the others NULL, GROUPING(...) and
    GROUP_ID() constant. ``udaf``: whether a name is a Python aggregate function (whose
    arguments, too, are kept)."""
    missing = [e for e in every if e not in grouping]
    rewrite = _Rewrite(grouping, missing, udaf, group_id)
    return records.evolve(q, group_by=grouping, items=tuple(_keep_name(i, rewrite(i)) for i in q.items),
                        having=rewrite(q.having) if q.having is not None else None)


def _keep_name(item: ast.SelectItem, rewritten: ast.SelectItem) -> ast.SelectItem:
    """``rewritten`` named as ``item`` would be: a column left out of the set, now NULL, keeps
    its name (the first branch names the union's columns)."""
    if (isinstance(item, ast.AliasedExpr) and item.alias is None and isinstance(rewritten, ast.AliasedExpr)
            and isinstance(item.expr, (ast.ColumnRef, ast.FieldAccess)) and rewritten.expr != item.expr):
        return records.evolve(rewritten, alias=derive_name(item.expr, 0))
    return rewritten


def all_grouping_expressions(sets: list[tuple[ast.Expr, ...]]) -> list[ast.Expr]:
    every: list[ast.Expr] = []
    for s in sets:
        for e in s:
            if e not in every:
                every.append(e)
    return every


def plain_grouping(q: ast.Select) -> ast.Select:
    """A plain GROUP BY, whose GROUPING(...) and GROUP_ID() calls are 0 (every expression is
    grouped, in the one grouping set)."""
    calls = [n for item in (*q.items, q.having) if item is not None for n in ast_walk(item)
             if isinstance(n, ast.FunctionCall) and n.name in GROUPING_FUNCTIONS]
    if not calls:
        return q
    if not q.group_by:
        raise SqlError(f"{calls[0].name} belongs to a query with GROUP BY", calls[0].name_span or calls[0].span,
                       "add a GROUP BY (GROUPING SETS, ROLLUP and CUBE give several grouping sets)")
    rewrite = _Rewrite(q.group_by, [])
    return records.evolve(q, items=tuple(rewrite(i) for i in q.items),
                        having=rewrite(q.having) if q.having is not None else None)


@records.record(frozen=False)
class _Rewrite:
    grouping: tuple[ast.Expr, ...]
    missing: list[ast.Expr]
    udaf: Callable[[str], bool] = lambda name: False
    group_id: int = 0

    def __call__(self, node):
        return ast.rewrite(node, self._visit)

    def _visit(self, node: ast.Node) -> ast.Node | None:
        if isinstance(node, ast.Expr) and node in self.missing:
            return ast.Literal(kind="null", value=None, span=node.span)
        if isinstance(node, ast.FunctionCall) and node.name in _BITS:
            return self._bits(node)
        if isinstance(node, ast.FunctionCall) and node.name == "GROUP_ID":
            if node.args or node.distinct or node.star or node.over is not None:
                raise SqlError("GROUP_ID takes no arguments: write GROUP_ID()", node.span)
            # BIGINT NOT NULL, as Calcite types it.
            return ast.Cast(operand=ast.Literal(kind="int", value=self.group_id, span=node.span), type=pa.int64(),
                            span=node.span)
        if isinstance(node, ast.FunctionCall) and (node.name in AGGREGATES or self.udaf(node.name)):
            return node  # an aggregate's arguments are the rows', never NULLed
        return None

    def _bits(self, call: ast.FunctionCall) -> ast.Expr:
        if not call.args:
            raise SqlError(f"{call.name} takes the grouping expressions it asks about", call.span)
        value = 0
        for arg in call.args:
            if arg not in self.grouping and arg not in self.missing:
                raise SqlError(f"{call.name} asks about an expression that is not grouped by", arg.span)
            value = value * 2 + (arg in self.missing)
        return ast.Literal(kind="int", value=value, span=call.span)
