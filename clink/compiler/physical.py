"""Logical IR → physical plan: numbered operators, and the exchanges their partitioning needs.

Every pipeline statement becomes ``Source → Chain → Sink``: the scan is read by a source, the
stateless operators above it run as one fused chain (one generated function), and the sink
writes. Stateful operators will split chains at key-partitioned edges.
"""

from __future__ import annotations

from clink import records
from clink.compiler import ir
from clink.compiler.bind import BoundScript
from clink.compiler.functions import cast_to
from clink.errors import CompilerBug
from clink.runtime.plan import BROADCAST, SINGLE, Distribution, hash_by


@records.record(kw_only=True)
class SourceOp:
    id: int
    scan: ir.Scan

    @property
    def schema(self) -> ir.Schema:
        return self.scan.schema


@records.record(kw_only=True)
class NormalizeOp:
    """The upserts of a scan turned into a full changelog (Flink's ChangelogNormalize): keyed by
    the table's primary key (``keys``: positions in the scan's columns), it keeps each key's last
    row; its input is hash-partitioned by the key, and its output is an updating stream."""

    id: int
    input: int
    scan: ir.Scan
    keys: tuple[int, ...]

    @property
    def schema(self) -> ir.Schema:
        return self.scan.schema

    @property
    def partitioning(self) -> str:
        return f"hash({', '.join(self.scan.schema.names[k] for k in self.keys)})"


@records.record(kw_only=True)
class ChainOp:
    """Evaluate ``scan_predicate`` (pushed into the scan) and then each step, in order: a Calc,
    a WindowTVF that gives each row its windows, or a Replicate that repeats rows."""

    id: int
    input: int
    scan_predicate: ir.Expr | None
    steps: tuple[ir.Calc | ir.WindowTVF | ir.Replicate | ir.Unnest | ir.Lateral, ...]
    input_schema: ir.Schema
    table: str
    target: str
    partitioning: str = "forward"
    #: The input is an updating stream: each batch ends with the row-kind column, passed on.
    updating: bool = False

    @property
    def schema(self) -> ir.Schema:
        return self.steps[-1].schema if self.steps else self.input_schema


@records.record(kw_only=True)
class PreAggOp:
    """The first phase of a window aggregation in two: each subtask turns its rows into partial
    aggregates per key and pane before the exchange (a chain, keeping no state), so that what
    crosses is a few partials, not every row; the window aggregation above merges them."""

    id: int
    input: int
    agg: ir.WindowAggregate
    #: The partial rows: the keys, the pane start, the partials (``window_partial_schema``).
    partial_schema: ir.Schema
    partitioning: str = "forward"

    @property
    def schema(self) -> ir.Schema:
        return self.partial_schema


@records.record(kw_only=True)
class WindowAggOp:
    """The stateful window aggregation; its input is hash-partitioned by the group keys."""

    id: int
    input: int
    agg: ir.WindowAggregate
    late_output: int | None = None
    #: The PreAggOp whose partials it merges (two-phase), or None: it reads the rows.
    pre: int | None = None

    @property
    def schema(self) -> ir.Schema:
        return self.agg.schema

    @property
    def partitioning(self) -> str:
        return _key_partitioning(self.agg.input, self.agg.num_keys)


@records.record(kw_only=True)
class GroupAggOp:
    """The stateful GROUP BY without a window; its input is hash-partitioned by the group keys,
    and its output is an updating stream."""

    id: int
    input: int
    agg: ir.GroupAggregate

    @property
    def schema(self) -> ir.Schema:
        return self.agg.schema

    @property
    def partitioning(self) -> str:
        return _key_partitioning(self.agg.input, self.agg.num_keys)


@records.record(kw_only=True)
class JoinOp:
    """The stateful join; each input is hash-partitioned by its join keys. ``residual_fn`` names
    the generated function that evaluates the residual condition over joined pairs."""

    id: int
    left: int
    right: int
    join: ir.Join
    #: The input sent whole to every subtask (0 left, 1 right; ``broadcast_side``), or None.
    broadcast: int | None = None

    @property
    def schema(self) -> ir.Schema:
        return self.join.schema

    @property
    def inputs(self) -> tuple[int, int]:
        return (self.left, self.right)

    @property
    def partitioning(self) -> str:
        if self.broadcast is not None:
            return "forward / broadcast" if self.broadcast == 1 else "broadcast / forward"
        left = [self.join.left.schema.names[k] for k in self.join.left_keys]
        right = [self.join.right.schema.names[k] for k in self.join.right_keys]
        return f"hash({', '.join(left)}) / hash({', '.join(right)})"


@records.record(kw_only=True)
class OverAggOp:
    """The stateful OVER aggregation; its input is hash-partitioned by the partition columns."""

    id: int
    input: int
    over: ir.OverAggregate
    late_output: int | None = None

    @property
    def schema(self) -> ir.Schema:
        return self.over.schema

    @property
    def partitioning(self) -> str:
        names = [self.over.input.schema.names[p] for p in self.over.partition]
        return f"hash({', '.join(names)})" if names else "single"


@records.record(kw_only=True)
class SortOp:
    """The stateful streaming ORDER BY: all rows in one subtask, out in order as the watermark
    passes them."""

    id: int
    input: int
    sort: ir.Sort
    partitioning: str = "single"

    @property
    def schema(self) -> ir.Schema:
        return self.sort.schema


@records.record(kw_only=True)
class SessionOp:
    """A SESSION window table function as a relation: rows wait for their session to end; its
    input is hash-partitioned by the PARTITION BY columns (one subtask without them)."""

    id: int
    input: int
    tvf: ir.WindowTVF

    @property
    def schema(self) -> ir.Schema:
        return self.tvf.schema

    @property
    def partitioning(self) -> str:
        names = [self.tvf.input.schema.names[p] for p in self.tvf.partition_by]
        return f"hash({', '.join(names)})" if names else "single"


@records.record(kw_only=True)
class MatchOp:
    """MATCH_RECOGNIZE; its input is hash-partitioned by the partition columns (all rows in one
    subtask without PARTITION BY); append-only output."""

    id: int
    input: int
    match: ir.MatchRecognize

    @property
    def schema(self) -> ir.Schema:
        return self.match.schema

    @property
    def partitioning(self) -> str:
        names = [self.match.input.schema.names[p] for p in self.match.partition]
        return f"hash({', '.join(names)})" if names else "single"


@records.record(kw_only=True)
class RankOp:
    """The stateful Top-N; its input is hash-partitioned by the partition columns, and its output
    is an updating stream."""

    id: int
    input: int
    rank: ir.Rank

    @property
    def schema(self) -> ir.Schema:
        return self.rank.schema

    @property
    def partitioning(self) -> str:
        names = [self.rank.input.schema.names[p] for p in self.rank.partition]
        return f"hash({', '.join(names)})" if names else "single"


def _key_partitioning(rel: ir.Rel, num_keys: int) -> str:
    """How an aggregation's input is distributed: by the hash of its first ``num_keys`` columns."""
    keys = rel.schema.names[:num_keys]
    return f"hash({', '.join(keys)})" if keys else "single"


@records.record(kw_only=True)
class UnionOp:
    """Rows of every input, in arrival order; its watermark is the minimum over its inputs."""

    id: int
    inputs: tuple[int, ...]
    union: ir.Union

    @property
    def schema(self) -> ir.Schema:
        return self.union.schema


@records.record(kw_only=True)
class ExchangeOp:
    """Moves rows between subtasks so that the operator above reads them with ``distribution``
    (hash on key columns, or one subtask for all); rows pass unchanged."""

    id: int
    input: int
    distribution: Distribution
    input_schema: ir.Schema

    @property
    def schema(self) -> ir.Schema:
        return self.input_schema

    @property
    def partitioning(self) -> str:
        return describe_distribution(self.distribution, self.input_schema)


def describe_distribution(distribution: Distribution, schema: ir.Schema) -> str:
    """``hash(auction, bidder)``, ``single``, ...: a distribution with column names."""
    if distribution.kind == "hash":
        return f"hash({', '.join(schema.names[k] for k in distribution.keys)})"
    return distribution.kind


@records.record(kw_only=True)
class SinkOp:
    id: int
    input: int
    sink: ir.Sink

    @property
    def schema(self) -> ir.Schema:
        return self.sink.schema


PhysicalOp = (SourceOp | NormalizeOp | ChainOp | ExchangeOp | PreAggOp | WindowAggOp | GroupAggOp | JoinOp | RankOp | OverAggOp
              | SortOp | MatchOp | SessionOp | UnionOp | SinkOp)


def output_distribution(op: PhysicalOp) -> Distribution | None:
    """How ``op``'s output rows are spread over its subtasks, where the planner knows it: a keyed
    operator's output stays with the subtask of its key, whose columns it keeps in place."""
    match op:
        case ExchangeOp(distribution=d) if d.kind in ("hash", "single"):
            return d
        case WindowAggOp(agg=agg) | GroupAggOp(agg=agg):
            return hash_by(*range(agg.num_keys))
        case OverAggOp(over=node) | RankOp(rank=node):
            return hash_by(*node.partition)
        case NormalizeOp(keys=keys):
            return hash_by(*keys)
        case MatchOp(match=node) if node.partition:
            # The output starts with the partition columns.
            return hash_by(*range(len(node.partition)))
        case JoinOp(join=join, broadcast=None):
            return hash_by(*join.left_keys)
    return None


def broadcast_side(join: ir.Join) -> int | None:
    """The input of ``join`` to send whole to every subtask, leaving the other input's rows on the
    subtask that made them (no exchange of its rows), or None to hash both by the join keys.

    An input of one row per window (a window aggregation grouped by nothing but its window) is
    tiny next to a stream of events, and an interval join forgets its rows as the windows close,
    so every subtask can keep all of them; Nexmark q5 and q7 join such a maximum per window
    with every bid or count. Only an inner join: a pair then forms exactly once, on the subtask
    of its row of the other input, where an outer join could not tell alone that a broadcast
    row met nothing anywhere."""
    if join.kind != "inner" or join.lookup or join.temporal is not None or join.interval is None:
        return None
    if _one_row_per_window(join.right) and not _one_row_per_window(join.left):
        return 1
    if _one_row_per_window(join.left) and not _one_row_per_window(join.right):
        return 0
    return None


def _one_row_per_window(rel: ir.Rel) -> bool:
    """Whether ``rel`` is (projections and filters of) a window aggregation without grouping keys
    besides its window: one row per window."""
    while isinstance(rel, ir.Project | ir.Calc | ir.Filter):
        rel = rel.input
    if not isinstance(rel, ir.WindowAggregate) or rel.proctime:
        return False
    if rel.num_keys == 0:
        return True
    # Over rows that carry their window, the window's start is the key (``WindowDef.attached``).
    origin = ir.window_origin(rel.input, 0) if rel.window.attached and rel.num_keys == 1 else None
    return origin is not None and origin[1] == 0


def runtime_window(node: ir.WindowAggregate):
    """``node`` as the runtime's plan node (without its place in a plan)."""
    import pyarrow as pa

    from clink.runtime import plan as P

    window = node.window
    aggs = tuple(P.AggSpec(fn=a.fn, arg=a.arg, type=a.type, filter=a.filter, name=n, param=a.param)
                 for a, n in zip(node.aggs, node.agg_names, strict=True))
    spec = P.WindowSpec(kind=window.kind, **{k: getattr(window, k) for k in ("size", "slide", "offset", "gap",
                                                                        "attached") if getattr(window, k)})
    rows = pa.schema([f.to_arrow() for f in node.input.schema.fields])
    keys = tuple(range(node.num_keys))
    return P.WindowAggregate(id=0, input=0, window=spec, time=node.time, keys=keys, aggs=aggs,
                             schema=P._window_output_schema(rows, node.time, keys, aggs)), rows


def _partial_schema(node: ir.WindowAggregate) -> ir.Schema | None:
    """The schema of the partials when ``node`` splits in two phases, or None when it does not:
    over processing time, with late rows kept, for a session, or with an aggregate whose partials
    per pane do not merge into its result (DISTINCT, FIRST_VALUE / LAST_VALUE, variance) or a sum
    that is not of integers or floating point numbers."""
    import pyarrow as pa

    from clink.runtime.operators.window import PREAGGREGATED, window_partial_schema

    if node.proctime or node.late_sink is not None or node.window.kind not in ("tumble", "hop", "cumulate"):
        return None
    for a in node.aggs:
        if a.fn not in PREAGGREGATED:
            return None
        if a.arg is not None:
            kind = node.input.schema[a.arg].type
            if a.fn in ("sum", "avg") and not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                return None
            if pa.types.is_nested(kind) or pa.types.is_dictionary(kind):
                return None
    runtime, rows = runtime_window(node)
    return ir.Schema(tuple(ir.Field(f.name, f.type, f.nullable) for f in window_partial_schema(runtime, rows)))


def _distributed(ops: list[PhysicalOp], below: int, required: Distribution, schema: ir.Schema) -> int:
    """``below``, or an Exchange above it when its rows are not spread as ``required``. An
    equal hash (the same key columns, in the same order) or one subtask for all satisfies."""
    if required.kind == "forward" or output_distribution(ops[below - 1]) == required:
        return below
    exchange = ExchangeOp(id=len(ops) + 1, input=below, distribution=required, input_schema=schema)
    ops.append(exchange)
    return exchange.id


@records.record(kw_only=True)
class PhysicalPlan:
    ops: tuple[PhysicalOp, ...]


def plan_physical(script: BoundScript, roots: tuple[ir.Sink, ...]) -> PhysicalPlan:
    ops: list[PhysicalOp] = []
    for sink in roots:
        # Equal scans of one statement share a source (rewrite/share_scans.py).
        upstream = _build(sink.input, ops, target=sink.name, shared={})
        upstream = _distributed(ops, upstream, SINGLE, sink.input.schema)
        ops.append(SinkOp(id=len(ops) + 1, input=upstream, sink=sink))
    return PhysicalPlan(ops=tuple(ops))


def _build_late_output(op: WindowAggOp | OverAggOp, ops: list[PhysicalOp]) -> None:
    """Late rows leave a window or OVER operator with its input's columns; a chain picks the
    relation's own columns, cast to the late-events table's types, and a sink writes them."""
    agg = op.agg if isinstance(op, WindowAggOp) else op.over
    what = "window aggregate" if isinstance(op, WindowAggOp) else "over aggregate"
    sink = agg.late_sink
    assert sink is not None
    schema = agg.input.schema
    exprs = tuple(cast_to(ir.Column(index=i, name=schema[i].name, type=schema[i].type, nullable=schema[i].nullable,
                                    span=None), field.type)
                  for i, field in zip(agg.late_columns, sink.target.fields, strict=True))
    calc = ir.Calc(input=agg.input, predicate=None, exprs=exprs, names=sink.target.names, span=sink.span)
    chain = ChainOp(id=len(ops) + 1, input=op.id, scan_predicate=None, steps=(calc,), input_schema=schema,
                    table=f"late rows of {what} {op.id}", target=sink.name)
    ops.append(chain)
    upstream = _distributed(ops, chain.id, SINGLE, calc.schema)
    ops.append(SinkOp(id=len(ops) + 1, input=upstream, sink=records.evolve(sink, input=calc)))


def _is_session(node: ir.Rel) -> bool:
    return isinstance(node, ir.WindowTVF) and node.window.kind == "session"


def _build(rel: ir.Rel, ops: list[PhysicalOp], *, target: str, shared: dict) -> int:
    """Add the operators that produce ``rel`` to ``ops``; return the id of the last one.
    ``shared``: the source already planned for each scan of the statement, and the (operator
    id, description) planned for each stateful subquery, by its shape."""
    steps: list[ir.Calc | ir.WindowTVF | ir.Replicate | ir.Unnest | ir.Lateral] = []
    node = rel
    while isinstance(node, (ir.Calc, ir.WindowTVF, ir.Replicate, ir.Unnest, ir.Lateral)) and not _is_session(node):
        steps.append(node)
        node = node.input
    scan_predicate = None
    key = _shape(node) if not isinstance(node, ir.Scan) else None
    if key is not None and key in shared:
        # The same stateful subquery twice in one statement (Nexmark q5 counts bids per auction
        # and window for both sides of its join): computed once, its output feeds both.
        upstream, table = shared[key]
        node = None
    match node:
        case None:
            pass
        case ir.Scan():
            source = shared.get(node)
            if source is None:
                source = shared[node] = SourceOp(id=len(ops) + 1, scan=node)
                ops.append(source)
                if node.table.normalized:
                    # Upserts become a changelog by key before anything else reads them (the
                    # scan's predicate too: a row leaving it must retract what it was).
                    keys = tuple(node.columns.index(p) for p in sorted(node.table.key_columns))
                    below = _distributed(ops, source.id, hash_by(*keys), node.schema)
                    normalize = NormalizeOp(id=len(ops) + 1, input=below, scan=node, keys=keys)
                    ops.append(normalize)
                    source = shared[node] = normalize
            upstream, table, scan_predicate = source.id, node.table.name, node.predicate
        case ir.WindowAggregate():
            below = _build(node.input, ops, target="a window aggregate", shared=shared)
            pre = None
            partials = _partial_schema(node)
            if partials is not None:
                pre = PreAggOp(id=len(ops) + 1, input=below, agg=node, partial_schema=partials)
                ops.append(pre)
                below = _distributed(ops, pre.id, hash_by(*range(node.num_keys)), partials)
            else:
                below = _distributed(ops, below, hash_by(*range(node.num_keys)), node.input.schema)
            op = WindowAggOp(id=len(ops) + 1, input=below, agg=node, pre=pre.id if pre is not None else None,
                             late_output=len(ops) + 2 if node.late_sink is not None else None)
            ops.append(op)
            upstream, table = op.id, f"window aggregate {op.id}"
            if node.late_sink is not None:
                _build_late_output(op, ops)
        case ir.GroupAggregate():
            below = _build(node.input, ops, target="a group aggregate", shared=shared)
            below = _distributed(ops, below, hash_by(*range(node.num_keys)), node.input.schema)
            op = GroupAggOp(id=len(ops) + 1, input=below, agg=node)
            ops.append(op)
            upstream, table = op.id, f"group aggregate {op.id}"
        case ir.OverAggregate():
            below = _build(node.input, ops, target="an OVER aggregation", shared=shared)
            below = _distributed(ops, below, hash_by(*node.partition), node.input.schema)
            op = OverAggOp(id=len(ops) + 1, input=below, over=node,
                           late_output=len(ops) + 2 if node.late_sink is not None else None)
            ops.append(op)
            upstream, table = op.id, f"over aggregate {op.id}"
            if node.late_sink is not None:
                _build_late_output(op, ops)
        case ir.Sort():
            below = _build(node.input, ops, target="an ORDER BY", shared=shared)
            below = _distributed(ops, below, SINGLE, node.input.schema)
            op = SortOp(id=len(ops) + 1, input=below, sort=node)
            ops.append(op)
            upstream, table = op.id, f"order by {op.id}"
        case ir.WindowTVF():  # SESSION: rows wait for their sessions to end
            below = _build(node.input, ops, target="a SESSION window", shared=shared)
            wanted = hash_by(*node.partition_by) if node.partition_by else SINGLE
            below = _distributed(ops, below, wanted, node.input.schema)
            op = SessionOp(id=len(ops) + 1, input=below, tvf=node)
            ops.append(op)
            upstream, table = op.id, f"session windows {op.id}"
        case ir.MatchRecognize():
            below = _build(node.input, ops, target="a MATCH_RECOGNIZE", shared=shared)
            wanted = hash_by(*node.partition) if node.partition else SINGLE
            below = _distributed(ops, below, wanted, node.input.schema)
            op = MatchOp(id=len(ops) + 1, input=below, match=node)
            ops.append(op)
            upstream, table = op.id, f"match_recognize {op.id}"
        case ir.Rank():
            below = _build(node.input, ops, target="a Top-N", shared=shared)
            below = _distributed(ops, below, hash_by(*node.partition), node.input.schema)
            op = RankOp(id=len(ops) + 1, input=below, rank=node)
            ops.append(op)
            upstream, table = op.id, f"top-n {op.id}"
        case ir.Join(left=left, right=right):
            left_id = _build(left, ops, target="the left side of a join", shared=shared)
            right_id = _build(right, ops, target="the right side of a join", shared=shared)
            broadcast = broadcast_side(node)
            if broadcast is None:
                left_id = _distributed(ops, left_id, hash_by(*node.left_keys), left.schema)
                right_id = _distributed(ops, right_id, hash_by(*node.right_keys), right.schema)
            elif broadcast == 0:
                left_id = _distributed(ops, left_id, BROADCAST, left.schema)
            else:
                right_id = _distributed(ops, right_id, BROADCAST, right.schema)
            if right_id == left_id:
                # A table joined with itself through one shared source: the join tells its sides
                # apart by the node they come from, so the right side passes through a chain.
                passing = ChainOp(id=len(ops) + 1, input=right_id, scan_predicate=None, steps=(),
                                  input_schema=right.schema, table=f"the right side of join {len(ops) + 2}",
                                  target="a join", updating=ir.is_updating(right))
                ops.append(passing)
                right_id = passing.id
            op = JoinOp(id=len(ops) + 1, left=left_id, right=right_id, join=node, broadcast=broadcast)
            ops.append(op)
            upstream, table = op.id, f"join {op.id}"
        case ir.Union(all_inputs=children):
            # An append-only input of an updating union: its rows come out as inserts (the
            # union gives them the row-kind column).
            ids = tuple(_build(child, ops, target="a union", shared=shared) for child in children)
            op = UnionOp(id=len(ops) + 1, inputs=ids, union=node)
            ops.append(op)
            upstream, table = op.id, f"union {op.id}"
        case _:
            raise CompilerBug(f"physical planning does not know {type(node).__name__}")
    if key is not None and node is not None:
        shared[key] = (upstream, table)
    if steps or scan_predicate is not None:
        chain = ChainOp(id=len(ops) + 1, input=upstream, scan_predicate=scan_predicate,
                        steps=tuple(reversed(steps)), input_schema=(rel if not steps else steps[-1].input).schema,
                        table=table, target=target, updating=ir.is_updating(steps[-1].input if steps else rel))
        ops.append(chain)
        upstream = chain.id
    return upstream


def _shape(node: ir.Rel) -> tuple | None:
    """What a stateful subquery computes, ignoring where its text is (spans): equal shapes are
    the same computation. None for a node never shared (a window aggregate that writes late rows
    to a table: those must be written once)."""
    if isinstance(node, ir.WindowAggregate | ir.OverAggregate) and node.late_sink is not None:
        return None
    shape = _value_shape(node)
    try:
        hash(shape)
    except TypeError:
        return None
    return shape


def _value_shape(value: object) -> object:
    if records.has(type(value)):
        return (type(value).__name__, *((a.name, _value_shape(getattr(value, a.name)))
                                        for a in records.fields(type(value)) if a.name != "span"))
    if isinstance(value, (tuple, list)):
        return tuple(_value_shape(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _value_shape(v)) for k, v in value.items()))
    return value
