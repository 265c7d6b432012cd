"""Stateful operators, and the registry from plan node to operator.

Every operator keeps the contract in ``base.py``. ``KINDS`` says, per plan node class, how to
open the node's operator and how to describe what its state means (the state signature a
restore compares); the executor looks nodes up here and never names an operator class.

Adding an operator: its plan node class in ``clink/runtime/plan.py``, its module in this
package (a class keeping the contract, ``OperatorBase`` for the calls it does not need), and one
entry in ``KINDS``. Operator modules are imported when a plan first uses them, so a stateless
pipeline starts without them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from clink.records import record
from clink.runtime.operators.base import Operator, OperatorBase, OperatorEnv
from clink.runtime.plan import (
    ChangelogNormalize,
    GroupAggregate,
    Join,
    MatchRecognize,
    Node,
    OverAggregate,
    Rank,
    SessionWindows,
    Sort,
    WindowAggregate,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["KINDS", "Operator", "OperatorBase", "OperatorEnv", "OperatorKind", "kind_of"]


@record
class OperatorKind:
    """How the executor opens a node's operator (``open``), the prefix of its name in plans made
    before uids (``name``), and what its state means: types of keys, aggregates, order, and the
    layout of what it keeps (``describe``; ``"<meaning> | <layout>"``)."""

    name: str
    open: Callable[[Node, OperatorEnv], Operator]
    describe: Callable[[Node, tuple[pa.Schema, ...], Operator], str]


def _open_window(node: WindowAggregate, env: OperatorEnv) -> Operator:
    from clink.runtime.operators.window import WindowAggregateOperator

    return WindowAggregateOperator(node, env.task, input_schema=env.input_schemas[0], backend=env.backend,
                                   operator_id=env.operator_id)


def _open_group(node: GroupAggregate, env: OperatorEnv) -> Operator:
    from clink.runtime.operators.group import GroupAggregateOperator

    return GroupAggregateOperator(node, env.task, input_schema=env.input_schemas[0], backend=env.backend,
                                  operator_id=env.operator_id, ttl_ms=env.ttl_ms, input_mode=env.input_mode())


def _open_over(node: OverAggregate, env: OperatorEnv) -> Operator:
    (schema,) = env.input_schemas
    if env.input_mode().updating:
        from clink.runtime.operators.over_updating import UpdatingOverOperator

        return UpdatingOverOperator(node, env.task, input_schema=schema, backend=env.backend,
                                    operator_id=env.operator_id, ttl_ms=env.ttl_ms, input_mode=env.input_mode())
    from clink.runtime.operators.over import OverAggregateOperator

    return OverAggregateOperator(node, env.task, input_schema=schema, backend=env.backend,
                                 operator_id=env.operator_id)


def _open_sort(node: Sort, env: OperatorEnv) -> Operator:
    from clink.runtime.operators.sort import SortOperator

    return SortOperator(node, env.task, input_schema=env.input_schemas[0], backend=env.backend,
                        operator_id=env.operator_id)


def _describe_sort(node: Sort, schemas: tuple[pa.Schema, ...], operator: Operator) -> str:
    (schema,) = schemas
    order = ", ".join(f"{schema.field(c).type}{' DESC' if d else ''}" for c, d in node.order)
    layout = " ; ".join(d.signature() for d in operator.descriptors)
    return f"ORDER BY {schema.field(node.time).type}, ({order}) | {layout}"


def _open_match(node: MatchRecognize, env: OperatorEnv) -> Operator:
    from clink.runtime.operators.match import MatchRecognizeOperator

    return MatchRecognizeOperator(node, env.task, input_schema=env.input_schemas[0], backend=env.backend,
                                  operator_id=env.operator_id)


def _describe_match(node: MatchRecognize, schemas: tuple[pa.Schema, ...], operator: Operator) -> str:
    (schema,) = schemas
    partition = ", ".join(str(schema.field(p).type) for p in node.partition)
    pattern = " ".join(f"{node.variables[v]}{{{low},{'' if high is None else high}}}{'' if greedy else '?'}"
                       for v, low, high, greedy in node.pattern)
    navs = ", ".join(f"{n.kind}({n.variable}, {n.column}, {n.offset})" for n in node.navs)
    layout = " ; ".join(d.signature() for d in operator.descriptors)
    return (f"MATCH_RECOGNIZE PARTITION BY ({partition}) ORDER BY {schema.field(node.time).type} "
            f"PATTERN ({pattern}) keeping ({navs}) | {layout}")


def _open_session(node: SessionWindows, env: OperatorEnv) -> Operator:
    from clink.runtime.operators.session import SessionWindowsOperator

    return SessionWindowsOperator(node, env.task, input_schema=env.input_schemas[0], backend=env.backend,
                                  operator_id=env.operator_id)


def _describe_session(node: SessionWindows, schemas: tuple[pa.Schema, ...], operator: Operator) -> str:
    (schema,) = schemas
    partition = ", ".join(str(schema.field(p).type) for p in node.partition)
    layout = " ; ".join(d.signature() for d in operator.descriptors)
    return f"SESSION({node.gap} ms) PARTITION BY ({partition}) ON {schema.field(node.time).type} | {layout}"


def _open_rank(node: Rank, env: OperatorEnv) -> Operator:
    from clink.runtime.operators.rank import RankOperator

    return RankOperator(node, env.task, input_schema=env.input_schemas[0], backend=env.backend,
                        operator_id=env.operator_id, ttl_ms=env.ttl_ms, input_mode=env.input_mode())


def _open_join(node: Join, env: OperatorEnv) -> Operator:
    left, right = env.input_schemas
    if node.temporal is not None:
        from clink.runtime.operators.temporal import TemporalJoinOperator

        return TemporalJoinOperator(node, env.task, left_schema=left, right_schema=right, backend=env.backend,
                                    operator_id=env.operator_id, left_mode=env.input_mode(0),
                                    right_mode=env.input_mode(1))
    from clink.runtime.operators.join import JoinOperator

    return JoinOperator(node, env.task, left_schema=left, right_schema=right, backend=env.backend,
                        operator_id=env.operator_id, ttl_ms=env.ttl_ms, left_mode=env.input_mode(0),
                        right_mode=env.input_mode(1))


def _open_normalize(node: ChangelogNormalize, env: OperatorEnv) -> Operator:
    from clink.runtime.operators.normalize import ChangelogNormalizeOperator

    return ChangelogNormalizeOperator(node, env.task, input_schema=env.input_schemas[0], input_mode=env.input_mode(),
                                      backend=env.backend, operator_id=env.operator_id, ttl_ms=env.ttl_ms)


def _describe_normalize(node: ChangelogNormalize, schemas: tuple[pa.Schema, ...], operator: Operator) -> str:
    (schema,) = schemas
    keys = ", ".join(str(schema.field(k).type) for k in node.keys)
    return f"LAST ROW PER KEY ({keys}) | {operator.descriptor.signature()}"


def _aggs(node: WindowAggregate | GroupAggregate | OverAggregate, schema: pa.Schema, filters: bool) -> str:
    return ", ".join(f"{a.fn}({'' if a.arg is None else schema.field(a.arg).type})"
                     f"{' FILTER' if filters and a.filter is not None else ''}" for a in node.aggs)


def _describe_aggregate(node: WindowAggregate | GroupAggregate, schemas: tuple[pa.Schema, ...],
                        operator: Operator) -> str:
    (schema,) = schemas
    if isinstance(node, WindowAggregate) and node.raw_schema is not None:
        schema = node.raw_schema  # it merges partials of rows of this schema: the state means the same
    keys = ", ".join(str(schema.field(k).type) for k in node.keys)
    window = f"{node.window.describe()} " if isinstance(node, WindowAggregate) else ""
    # A GROUP BY's layout is every state it keeps (its COUNT(DISTINCT) counts too); a window
    # aggregate's, its partials (what it has always recorded, so its checkpoints still match).
    descriptors = operator.descriptors if isinstance(node, GroupAggregate) else [operator.descriptor]
    return (f"{window}GROUP BY ({keys}) computing {_aggs(node, schema, True)} | "
            f"{' ; '.join(d.signature() for d in descriptors)}")


def _describe_over(node: OverAggregate, schemas: tuple[pa.Schema, ...], operator: Operator) -> str:
    (schema,) = schemas
    partition = ", ".join(str(schema.field(p).type) for p in node.partition)
    layout = " ; ".join(d.signature() for d in operator.descriptors)
    return (f"OVER {node.frame} {node.preceding} PARTITION BY ({partition}) computing "
            f"{_aggs(node, schema, False)} | {layout}")


def _describe_rank(node: Rank, schemas: tuple[pa.Schema, ...], operator: Operator) -> str:
    (schema,) = schemas
    partition = ", ".join(str(schema.field(p).type) for p in node.partition)
    order = ", ".join(f"{schema.field(c).type}{' DESC' if d else ''}" for c, d in node.order)
    # A ROW_NUMBER's meaning reads as it always has: its checkpoints stay readable.
    numbered = "" if node.function == "row_number" else f" BY {node.function.upper()}"
    return (f"TOP {node.limit}{numbered} PARTITION BY ({partition}) ORDER BY ({order}) | "
            f"{operator.rows.descriptor.signature()}")


def _describe_join(node: Join, schemas: tuple[pa.Schema, ...], operator: Operator) -> str:
    left, right = schemas
    keys = ", ".join(f"{left.field(a).type} = {right.field(b).type}"
                     for a, b in zip(node.left_keys, node.right_keys, strict=True))
    interval = " (interval)" if node.interval is not None else " (temporal)" if node.temporal else ""
    if node.interval_ends is not None:
        # Stored rows carry the value of these columns as the time they leave by: a pipeline
        # that bounds the join by other columns must not take them over.
        left_end, right_end = node.interval_ends
        interval = f" (interval; rows leave by left column {left_end}, right column {right_end})"
    if node.broadcast is not None:
        # Each subtask's state holds the whole broadcast input: it restores differently.
        interval += f" ({('left', 'right')[node.broadcast]} input broadcast)"
    layout = " ; ".join(d.signature() for d in operator.descriptors)
    return f"{node.kind.upper()} JOIN{interval} ON ({keys}) | {layout}"


#: Per plan node class: how its operator opens and describes its state.
KINDS: dict[type[Node], OperatorKind] = {
    WindowAggregate: OperatorKind("window", _open_window, _describe_aggregate),
    GroupAggregate: OperatorKind("group", _open_group, _describe_aggregate),
    Join: OperatorKind("join", _open_join, _describe_join),
    Rank: OperatorKind("rank", _open_rank, _describe_rank),
    OverAggregate: OperatorKind("over", _open_over, _describe_over),
    Sort: OperatorKind("sort", _open_sort, _describe_sort),
    MatchRecognize: OperatorKind("match", _open_match, _describe_match),
    SessionWindows: OperatorKind("session", _open_session, _describe_session),
    ChangelogNormalize: OperatorKind("normalize", _open_normalize, _describe_normalize),
}


def kind_of(node: Node) -> OperatorKind | None:
    """The operator kind of a stateful node; None for sources, chains, unions and sinks."""
    return KINDS.get(type(node))
