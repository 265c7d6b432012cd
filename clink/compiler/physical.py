"""Logical IR → physical plan: numbered operators with partitioning and parallelism.

Every pipeline statement becomes ``Source → Chain → Sink``: the scan is read by a source, the
stateless operators above it run as one fused chain (one generated function), and the sink
writes. Stateful operators will split chains at key-partitioned edges.
"""

from __future__ import annotations

import attrs

from clink.compiler import ir
from clink.compiler.bind import BoundScript
from clink.errors import CompilerBug


@attrs.frozen(kw_only=True)
class SourceOp:
    id: int
    scan: ir.Scan
    parallelism: int = 1

    @property
    def schema(self) -> ir.Schema:
        return self.scan.schema


@attrs.frozen(kw_only=True)
class ChainOp:
    """Evaluate ``scan_predicate`` (pushed into the scan) and then each step, in order: a Calc,
    or a WindowTVF that gives each row its windows."""

    id: int
    input: int
    scan_predicate: ir.Expr | None
    steps: tuple[ir.Calc | ir.WindowTVF, ...]
    input_schema: ir.Schema
    table: str
    target: str
    partitioning: str = "forward"
    parallelism: int = 1

    @property
    def schema(self) -> ir.Schema:
        return self.steps[-1].schema if self.steps else self.input_schema


@attrs.frozen(kw_only=True)
class WindowAggOp:
    """The stateful window aggregation; its input is hash-partitioned by the group keys."""

    id: int
    input: int
    agg: ir.WindowAggregate
    parallelism: int = 1

    @property
    def schema(self) -> ir.Schema:
        return self.agg.schema

    @property
    def partitioning(self) -> str:
        keys = self.agg.input.schema.names[: self.agg.num_keys]
        return f"hash({', '.join(keys)})" if keys else "single"


@attrs.frozen(kw_only=True)
class UnionOp:
    """Rows of every input, in arrival order; its watermark is the minimum over its inputs."""

    id: int
    inputs: tuple[int, ...]
    union: ir.Union
    parallelism: int = 1

    @property
    def schema(self) -> ir.Schema:
        return self.union.schema


@attrs.frozen(kw_only=True)
class SinkOp:
    id: int
    input: int
    sink: ir.Sink
    parallelism: int = 1

    @property
    def schema(self) -> ir.Schema:
        return self.sink.schema


PhysicalOp = SourceOp | ChainOp | WindowAggOp | UnionOp | SinkOp


@attrs.frozen(kw_only=True)
class PhysicalPlan:
    ops: tuple[PhysicalOp, ...]
    explains: tuple[int, ...] = ()  # ids of the sinks whose statement was an EXPLAIN


def plan_physical(script: BoundScript, roots: tuple[ir.Sink, ...]) -> PhysicalPlan:
    ops: list[PhysicalOp] = []
    for sink in roots:
        upstream = _build(sink.input, ops, target=sink.name)
        ops.append(SinkOp(id=len(ops) + 1, input=upstream, sink=sink))
    return PhysicalPlan(ops=tuple(ops))


def _build(rel: ir.Rel, ops: list[PhysicalOp], *, target: str) -> int:
    """Add the operators that produce ``rel`` to ``ops``; return the id of the last one."""
    steps: list[ir.Calc | ir.WindowTVF] = []
    node = rel
    while isinstance(node, (ir.Calc, ir.WindowTVF)):
        steps.append(node)
        node = node.input
    scan_predicate = None
    match node:
        case ir.Scan():
            source = SourceOp(id=len(ops) + 1, scan=node)
            ops.append(source)
            upstream, table, scan_predicate = source.id, node.table.name, node.predicate
        case ir.WindowAggregate():
            below = _build(node.input, ops, target="a window aggregate")
            op = WindowAggOp(id=len(ops) + 1, input=below, agg=node)
            ops.append(op)
            upstream, table = op.id, f"window aggregate {op.id}"
        case ir.Union(all_inputs=children):
            ids = tuple(_build(child, ops, target="a union") for child in children)
            op = UnionOp(id=len(ops) + 1, inputs=ids, union=node)
            ops.append(op)
            upstream, table = op.id, f"union {op.id}"
        case _:
            raise CompilerBug(f"physical planning does not know {type(node).__name__}")
    if steps or scan_predicate is not None:
        chain = ChainOp(id=len(ops) + 1, input=upstream, scan_predicate=scan_predicate,
                        steps=tuple(reversed(steps)), input_schema=node.schema, table=table, target=target)
        ops.append(chain)
        upstream = chain.id
    return upstream
