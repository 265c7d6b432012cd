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
    """Evaluate ``scan_predicate`` (pushed into the scan) and then each Calc of ``steps``, in order."""

    id: int
    input: int
    scan_predicate: ir.Expr | None
    steps: tuple[ir.Calc, ...]
    input_schema: ir.Schema
    table: str
    target: str
    partitioning: str = "forward"
    parallelism: int = 1

    @property
    def schema(self) -> ir.Schema:
        return self.steps[-1].schema if self.steps else self.input_schema


@attrs.frozen(kw_only=True)
class SinkOp:
    id: int
    input: int
    sink: ir.Sink
    parallelism: int = 1

    @property
    def schema(self) -> ir.Schema:
        return self.sink.schema


PhysicalOp = SourceOp | ChainOp | SinkOp


@attrs.frozen(kw_only=True)
class PhysicalPlan:
    ops: tuple[PhysicalOp, ...]
    explains: tuple[int, ...] = ()  # ids of the sinks whose statement was an EXPLAIN


def plan_physical(script: BoundScript, roots: tuple[ir.Sink, ...]) -> PhysicalPlan:
    ops: list[PhysicalOp] = []
    next_id = 1
    for sink in roots:
        node = sink.input
        steps: list[ir.Calc] = []
        while isinstance(node, ir.Calc):
            steps.append(node)
            node = node.input
        if not isinstance(node, ir.Scan):
            raise CompilerBug(f"physical planning expected a scan under the chain, found {type(node).__name__}")
        source = SourceOp(id=next_id, scan=node)
        ops.append(source)
        upstream = source.id
        next_id += 1
        if steps or node.predicate is not None:
            chain = ChainOp(id=next_id, input=upstream, scan_predicate=node.predicate, steps=tuple(reversed(steps)),
                            input_schema=node.schema, table=node.table.name, target=sink.name)
            ops.append(chain)
            upstream = chain.id
            next_id += 1
        ops.append(SinkOp(id=next_id, input=upstream, sink=sink))
        next_id += 1
    return PhysicalPlan(ops=tuple(ops))
