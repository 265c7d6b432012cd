"""The plan description that generated modules build, and that the executor runs.

A generated module ends with ``PLAN = P.Plan(...)`` built from these classes. They hold data
and the chain functions, nothing else: the runtime decides how to run them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import pyarrow as pa

if TYPE_CHECKING:
    from clink.runtime.context import TaskContext

__all__ = ["BROADCAST", "Chain", "FORWARD", "Node", "Plan", "SINGLE", "Sink", "Source", "TaskContext", "hash_by"]

#: How a node's input is distributed over its parallel instances.
FORWARD = ("forward",)
BROADCAST = ("broadcast",)
SINGLE = ("single",)


def hash_by(*keys: str) -> tuple[str, ...]:
    """Partition by the hash of ``keys``."""
    return ("hash", *keys)


ChainFn = Callable[[pa.RecordBatch, "TaskContext"], pa.RecordBatch]


def _frozen_options(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return dict(value or {})


@attrs.frozen(kw_only=True)
class Node:
    """A node of the physical plan."""

    id: int
    parallelism: int = 1
    span: str = ""

    @property
    def inputs(self) -> tuple[int, ...]:
        return ()


@attrs.frozen(kw_only=True)
class Source(Node):
    """Read ``table`` through ``connector``.

    ``schema`` is what the source must produce: the table's physical columns that the plan
    reads, in that order (projection pushdown). ``table_schema`` is every physical column of the
    table, for formats that match columns by position. ``predicate``, when set, returns a
    ``pyarrow.compute.Expression`` a source *may* use to skip rows early; the plan filters again
    downstream, so a source that ignores it is still correct.
    """

    table: str
    connector: str
    schema: pa.Schema
    table_schema: pa.Schema
    options: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_options)
    predicate: Callable[[], Any] | None = None
    watermark: Callable[[pa.RecordBatch], Any] | None = None


@attrs.frozen(kw_only=True)
class Chain(Node):
    """A fused chain of stateless operators: ``fn(batch, ctx)`` returns the output batch."""

    fn: ChainFn
    input: int
    schema: pa.Schema
    partitioning: tuple[str, ...] = FORWARD
    description: str = ""

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)


@attrs.frozen(kw_only=True)
class Sink(Node):
    """Write the input to ``table`` through ``connector``.

    A bare ``SELECT`` becomes a sink with ``connector='collect'`` and ``table`` set to the
    query's name (``query_1``...): its rows go back to the caller.
    """

    table: str
    connector: str
    input: int
    schema: pa.Schema
    options: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_options)

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)


@attrs.frozen(kw_only=True)
class Plan:
    """Every node of a pipeline, its configuration (from ``SET``), and where it came from."""

    nodes: tuple[Node, ...]
    name: str = "<plan>"
    fingerprint: str = ""
    config: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_options)
    explain: tuple[str, ...] = ()

    def node(self, node_id: int) -> Node:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    @property
    def sources(self) -> tuple[Source, ...]:
        return tuple(n for n in self.nodes if isinstance(n, Source))

    @property
    def sinks(self) -> tuple[Sink, ...]:
        return tuple(n for n in self.nodes if isinstance(n, Sink))


from clink.runtime.context import TaskContext  # noqa: E402  (generated chains annotate with P.TaskContext)
