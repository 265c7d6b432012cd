"""Operator identity: the name a stateful operator's state is filed under in a checkpoint.

A checkpoint must give each operator of a changed pipeline its own state back, or refuse. So the
name comes from what the operator computes and where its rows go, not from its position in the
plan (reordering two INSERT statements must not swap their states):

    uid  = <kind>-<hash of: the kind; each path from the operator to a sink table, through the
           stateful operators and join sides in between; the source tables it reads>

Two operators that tie (the same kind, paths and sources: two aggregations of one table that
feed the two sides of a union) are told apart by their order, ``#2`` and so on.

What the state *means* — the keys and aggregates as SQL text — goes into the state signature
(``meaning``), which the runtime compares on restore: ``SUM(v)`` changed to ``SUM(w)`` keeps the
uid, and the restore is refused naming the operator and both meanings.

A user who changes what the uid is made of (renames a sink or source table, say) and wants to
keep the state names the SELECT's operators: ``SELECT /*+ UID('totals') */ ...`` gives them
``<kind>:totals`` (``window:totals``, ``join:totals``), whatever the plan around them.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import NamedTuple

from clink.compiler import ir
from clink.compiler.sqltext import expr_sql
from clink.compiler.physical import (
    ChainOp,
    ExchangeOp,
    GroupAggOp,
    JoinOp,
    OverAggOp,
    PreAggOp,
    PhysicalOp,
    PhysicalPlan,
    MatchOp,
    NormalizeOp,
    SessionOp,
    RankOp,
    SinkOp,
    SortOp,
    SourceOp,
    UnionOp,
    WindowAggOp,
)

__all__ = ["Identity", "operator_identities"]

_KINDS: dict[type, str] = {WindowAggOp: "window", GroupAggOp: "group", JoinOp: "join", RankOp: "rank",
                           OverAggOp: "over", SortOp: "sort",
                           MatchOp: "match", SessionOp: "session", NormalizeOp: "normalize"}


def _inputs(op: PhysicalOp) -> tuple[int, ...]:
    match op:
        case SourceOp():
            return ()
        case JoinOp(left=left, right=right):
            return (left, right)
        case UnionOp(inputs=inputs):
            return inputs
        case _:
            return (op.input,)


class Identity(NamedTuple):
    """A stateful operator's name in checkpoints, and what its state means (SQL text)."""

    uid: str
    meaning: str


def operator_identities(plan: PhysicalPlan) -> dict[int, Identity]:
    """The identity of every stateful operator of ``plan``, by operator id."""
    ops = {op.id: op for op in plan.ops}
    consumers: dict[int, list[tuple[PhysicalOp, int]]] = defaultdict(list)
    for op in plan.ops:
        for slot, source in enumerate(_inputs(op)):
            consumers[source].append((op, slot))

    def paths(op_id: int) -> set[str]:
        found: set[str] = set()
        for consumer, slot in consumers.get(op_id, ()):
            match consumer:
                case SinkOp(sink=sink):
                    found.add(sink.name)
                case ChainOp() | ExchangeOp() | PreAggOp():
                    found |= paths(consumer.id)
                case _:
                    step = _KINDS.get(type(consumer), "union")
                    side = f"[{slot}]" if len(_inputs(consumer)) > 1 else ""
                    found |= {f"{p} <- {step}{side}" for p in paths(consumer.id)}
        return found

    def sources(op_id: int) -> set[str]:
        op = ops[op_id]
        if isinstance(op, SourceOp):
            return {op.scan.table.name}
        return set().union(*(sources(i) for i in _inputs(op)))

    out: dict[int, Identity] = {}
    seen: dict[str, int] = defaultdict(int)
    for op in plan.ops:
        kind = _KINDS.get(type(op))
        if kind is None:
            continue
        named = None if isinstance(op, NormalizeOp) else _ir_node(op).uid
        if named is not None:
            base = f"{kind}:{named}"
        else:
            what = f"{kind} | {' ; '.join(sorted(paths(op.id)))} | {', '.join(sorted(sources(op.id)))}"
            base = f"{kind}-{hashlib.sha256(what.encode()).hexdigest()[:10]}"
        seen[base] += 1
        uid = base if seen[base] == 1 else f"{base}#{seen[base]}"
        out[op.id] = Identity(uid, _meaning(op))
    return out


def _ir_node(op: PhysicalOp) -> ir.Rel:
    match op:
        case WindowAggOp(agg=node) | GroupAggOp(agg=node) | OverAggOp(over=node) | RankOp(rank=node) | JoinOp(join=node):
            return node
        case SortOp(sort=node):
            return node
        case MatchOp(match=node):
            return node
        case SessionOp(tvf=node):
            return node
    raise TypeError(f"{type(op).__name__} is not a stateful operator")


def _column_sql(rel: ir.Rel, index: int) -> str:
    """Column ``index`` of ``rel`` as the SQL that computes it, where a projection says so."""
    if isinstance(rel, ir.Calc):
        return expr_sql(rel.exprs[index], rel.input.schema.names)
    return rel.schema.names[index]


def _aggs(aggs: tuple[ir.AggCall, ...], rel: ir.Rel) -> str:
    texts = []
    for a in aggs:
        if a.fn == "count_star":
            text = "COUNT(*)"
        elif a.fn == "count_distinct":
            text = f"COUNT(DISTINCT {_column_sql(rel, a.arg)})"
        elif a.fn == "udaf":
            # The accumulator's fields are part of what the state means: a changed one is refused.
            fields = ", ".join(f"{f.name} {f.type}" for f in a.accumulator)
            text = f"{a.udf.name}({', '.join(_column_sql(rel, i) for i in a.args)}) [accumulator {fields}]"
        else:
            text = f"{a.fn.upper()}({'' if a.arg is None else _column_sql(rel, a.arg)})"
        if a.filter is not None:
            text += f" FILTER (WHERE {_column_sql(rel, a.filter)})"
        texts.append(text)
    return ", ".join(texts)


def _meaning(op: PhysicalOp) -> str:
    """The keys and aggregates (or order, or join condition) as SQL text."""
    match op:
        case WindowAggOp(agg=agg) | GroupAggOp(agg=agg):
            keys = ", ".join(_column_sql(agg.input, i) for i in range(agg.num_keys))
            return f"GROUP BY ({keys}) computing {_aggs(agg.aggs, agg.input)}"
        case OverAggOp(over=over):
            partition = ", ".join(_column_sql(over.input, i) for i in over.partition)
            return (f"PARTITION BY ({partition}) ORDER BY {_column_sql(over.input, over.time)} "
                    f"computing {_aggs(over.aggs, over.input)}")
        case SortOp(sort=sort):
            order = "".join(f", {_column_sql(sort.input, c)}{' DESC' if d else ''}" for c, d in sort.order)
            return f"ORDER BY {_column_sql(sort.input, sort.time)}{order}"
        case SessionOp(tvf=tvf):
            partition = ", ".join(_column_sql(tvf.input, i) for i in tvf.partition_by)
            return f"SESSION({tvf.window.gap} ms) PARTITION BY ({partition}) ON {_column_sql(tvf.input, tvf.time)}"
        case MatchOp(match=m):
            partition = ", ".join(_column_sql(m.input, i) for i in m.partition)
            pattern = " ".join(f"{m.variables[v]}{{{lo},{'' if hi is None else hi}}}{'' if g else '?'}"
                               for v, lo, hi, g in m.pattern)
            return (f"MATCH_RECOGNIZE PARTITION BY ({partition}) ORDER BY {_column_sql(m.input, m.time)} "
                    f"PATTERN ({pattern}) reading ({', '.join(n.sql for n in m.navs)})")
        case RankOp(rank=rank):
            partition = ", ".join(_column_sql(rank.input, i) for i in rank.partition)
            order = ", ".join(f"{_column_sql(rank.input, c)}{' DESC' if d else ''}" for c, d in rank.order)
            return f"PARTITION BY ({partition}) ORDER BY ({order}) TOP {rank.limit}"
        case NormalizeOp(scan=scan, keys=keys):
            return f"PRIMARY KEY ({', '.join(scan.schema.names[k] for k in keys)}) of {scan.table.name}"
        case JoinOp(join=join):
            keys = ", ".join(f"{_column_sql(join.left, a)} = {_column_sql(join.right, b)}"
                             for a, b in zip(join.left_keys, join.right_keys, strict=True))
            return f"ON ({keys})"
    return ""
