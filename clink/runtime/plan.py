"""The plan description that generated modules build, and that the executor runs.

A generated module ends with ``PLAN = P.Plan(...)`` built from these classes. They hold data
and the chain functions, nothing else: the runtime decides how to run them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from clink.records import field, record

if TYPE_CHECKING:
    from clink.runtime.context import TaskContext

__all__ = ["APPEND_ONLY", "BROADCAST", "DELETE", "FORWARD", "Distribution", "Exchange", "INSERT", "INSERT_DELETE", "ROWKIND_COLUMN", "SINGLE",
           "UPDATE_AFTER", "UPDATE_BEFORE", "UPDATING", "AggSpec", "ChangelogMode", "ChangelogNormalize", "Chain", "GroupAggregate", "Join", "MatchRecognize", "Nav", "Node", "SessionWindows", "OverAggregate", "Rank", "Plan", "Sink", "Sort", "Source", "TaskContext", "Union",
           "WindowAggregate", "WindowSpec", "hash_by"]

@record
class Distribution:
    """How a stream's rows are spread over the subtasks of the node that reads it.

    ``forward``: each subtask reads what the subtask of the same index upstream produced;
    ``hash``: rows of equal ``keys`` (column indices) go to the subtask that owns their key group
    (``keygroups.key_groups``); ``broadcast``: every subtask gets every row; ``single``: one
    subtask gets every row.
    """

    kind: str
    keys: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("forward", "hash", "broadcast", "single"):
            raise ValueError(f"unknown distribution {self.kind!r}")
        if (self.kind == "hash") != bool(self.keys):
            raise ValueError("a hash distribution has key columns, and only it")

    def __repr__(self) -> str:
        return f"P.hash_by({', '.join(map(str, self.keys))})" if self.kind == "hash" else f"P.{self.kind.upper()}"


FORWARD = Distribution("forward")
BROADCAST = Distribution("broadcast")
SINGLE = Distribution("single")


def hash_by(*keys: int) -> Distribution:
    """Partition by the hash of the columns at ``keys``; with no keys, one subtask takes all."""
    return Distribution("hash", tuple(keys)) if keys else SINGLE


#: The column an updating (changelog) stream carries last: each row's kind, as Flink prints it.
#: It is the one representation of row kinds, in every operator, sink and result.
ROWKIND_COLUMN = "_rowkind"
#: Row kinds: an insert, the old and the new row of an update, and a delete.
INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = "+I", "-U", "+U", "-D"
_KIND_ORDER = (INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE)


@record
class ChangelogMode:
    """The row kinds a node's output may carry. Append-only output carries inserts alone, and its
    batches have no row-kind column; any other mode is updating: its batches end with
    ``ROWKIND_COLUMN``, and later rows may retract earlier ones."""

    kinds: frozenset[str]

    def __post_init__(self) -> None:
        unknown = set(self.kinds) - set(_KIND_ORDER)
        if unknown or INSERT not in self.kinds:
            raise ValueError(f"a changelog mode holds +I and any of -U, +U, -D; got {sorted(self.kinds)}")

    @property
    def updating(self) -> bool:
        return self.kinds != {INSERT}

    def union(self, other: ChangelogMode) -> ChangelogMode:
        """What a stream carrying the rows of both modes carries."""
        return ChangelogMode(self.kinds | other.kinds)

    def __repr__(self) -> str:
        for name, mode in _MODE_NAMES.items():
            if mode == self:
                return f"P.{name}"
        return f"P.ChangelogMode(frozenset({sorted(self.kinds, key=_KIND_ORDER.index)!r}))"

    def __str__(self) -> str:
        return "[" + ", ".join(sorted(self.kinds, key=_KIND_ORDER.index)) + "]"


#: Inserts only (sources, windows, OVER on an append-only input).
APPEND_ONLY = ChangelogMode(frozenset({INSERT}))
#: Rows come and go, with no update pairs (Top-N, outer joins, joins of updating inputs).
INSERT_DELETE = ChangelogMode(frozenset({INSERT, DELETE}))
#: Every row kind (GROUP BY without a window, OVER over an updating input).
UPDATING = ChangelogMode(frozenset(_KIND_ORDER))
_MODE_NAMES = {"APPEND_ONLY": APPEND_ONLY, "INSERT_DELETE": INSERT_DELETE, "UPDATING": UPDATING}


ChainFn = Callable[[pa.RecordBatch, "TaskContext"], pa.RecordBatch]


@record(kw_only=True)
class Node:
    """A node of the physical plan."""

    id: int
    span: str = ""
    #: A stateful operator's name in checkpoints, from what it computes and where its rows go
    #: (the compiler's ``identity.py``); "" for other nodes, and in plans made before uids.
    uid: str = ""
    #: What a stateful operator's state means, as SQL text (keys, aggregates, order): part of the
    #: state signature a restore compares.
    meaning: str = ""
    #: The row kinds the node's output carries (``APPEND_ONLY``: inserts, no row-kind column).
    changelog: ChangelogMode = APPEND_ONLY

    @property
    def inputs(self) -> tuple[int, ...]:
        return ()

    def requires(self) -> tuple[Distribution, ...]:
        """The distribution each input must have (``FORWARD``: any; it is read as it comes)."""
        return (FORWARD,) * len(self.inputs)


@record(kw_only=True)
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
    options: Mapping[str, str] = field(factory=dict)
    predicate: Callable[[], Any] | None = None
    #: ``watermark(batch, ctx)`` gives, per row, the watermark the row allows (``ts - delay``);
    #: the source's watermark is the largest seen so far. None: the table has no event time.
    watermark: Callable[[pa.RecordBatch, Any], Any] | None = None
    #: Milliseconds without rows after which the source is idle: it stops holding back the
    #: watermark of the nodes below it until rows come again. None: never idle.
    idle_timeout: int | None = None
    #: The table's PRIMARY KEY and PARTITIONED BY columns, as declared.
    primary_key: tuple[str, ...] = ()
    partition_columns: tuple[str, ...] = ()
    #: ROW columns that the plan reads only through some of their fields: column name → those
    #: fields' names. The source may leave the other fields null (a JSON reader skips them).
    fields: Mapping[str, tuple[str, ...]] = field(factory=dict)
    #: Columns that every reader of the source filters to a few constants: column name → those
    #: values. The source may make only rows holding them (nexmark makes only the kinds of event
    #: kept); the plan filters again downstream.
    kept_values: Mapping[str, tuple[Any, ...]] = field(factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", dict(self.options or {}))
        object.__setattr__(self, "fields", dict(self.fields or {}))
        object.__setattr__(self, "kept_values", dict(self.kept_values or {}))


@record(kw_only=True)
class Chain(Node):
    """A fused chain of stateless operators: ``fn(batch, ctx)`` returns the output batch."""

    fn: ChainFn
    input: int
    schema: pa.Schema
    description: str = ""

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)


@record(kw_only=True, init=False)
class Union(Node):
    """Every batch of every input passes on unchanged (UNION ALL); the schemas are equal."""

    all_inputs: tuple[int, ...]
    schema: pa.Schema

    def __init__(self, *, id: int, inputs: tuple[int, ...], schema: pa.Schema,  # noqa: A002
                 span: str = "", changelog: ChangelogMode = APPEND_ONLY) -> None:
        for name, value in (("id", id), ("all_inputs", tuple(inputs)), ("schema", schema),
                            ("span", span), ("uid", ""), ("meaning", ""),
                            ("changelog", changelog)):
            object.__setattr__(self, name, value)

    @property
    def inputs(self) -> tuple[int, ...]:
        return self.all_inputs


@record(kw_only=True)
class WindowSpec:
    """Which windows an event belongs to; all lengths in milliseconds.

    ``tumble``: [start, start + size) with start = ts - (ts - offset) mod size.
    ``hop``: windows of ``size`` every ``slide`` (an event is in size / slide of them).
    ``cumulate``: windows [start, start + k * slide) for k = 1 .. size / slide, start as tumble(size).
    ``session``: per key, events at most ``gap`` apart share a window [first, last + gap).
    """

    kind: str
    size: int = 0
    slide: int = 0
    offset: int = 0
    gap: int = 0
    #: The rows already carry their window, this one (as SQL): they arrive as a ``tumble`` of
    #: 1 ms over the window's end - 1 ms, the window's start a key (a cascaded window aggregation).
    attached: str = ""

    def describe(self) -> str:
        if self.attached:
            return f"windows of the input: {self.attached}"
        match self.kind:
            case "tumble":
                return f"TUMBLE(size={self.size} ms{f', offset={self.offset} ms' if self.offset else ''})"
            case "hop":
                return f"HOP(slide={self.slide} ms, size={self.size} ms)"
            case "cumulate":
                return f"CUMULATE(step={self.slide} ms, max size={self.size} ms)"
            case "session":
                return f"SESSION(gap={self.gap} ms)"
        return self.kind


@record(kw_only=True)
class AggSpec:
    """One aggregate of a window aggregation.

    ``fn``: count_star, count, count_distinct, sum, min, max, avg, first_value, last_value,
    stddev_pop, stddev_samp, var_pop, var_samp, listagg, collect. ``arg``: the input column it
    reads (None for count_star). ``filter``: an input BOOLEAN column; only rows where it is TRUE
    count (``FILTER (WHERE ...)``). ``type``: the result type. NULL arguments are skipped; an
    aggregate over no non-NULL value is NULL (COUNT: 0; COLLECT: an empty map). ``param``:
    LISTAGG's separator; for ``lag`` (OVER only: the value ``offset`` rows before the current
    one in its partition, else ``default``), (offset, default).
    """

    fn: str
    arg: int | None
    type: pa.DataType
    filter: int | None = None
    name: str = ""
    param: Any = None
    #: ``fn`` ``udaf``: a Python aggregate function (``clink.udaf``), or its name in the job's
    #: ``RuntimeContext.functions``; the input columns of its arguments; its accumulator's fields
    #: (a struct type), held in state.
    function: Any = None
    args: tuple[int, ...] = ()
    accumulator: pa.StructType | None = None


@record(kw_only=True)
class WindowAggregate(Node):
    """Group the input by ``keys`` and by window, aggregate, and emit each window once the
    watermark passes its end.

    Input columns are addressed by position: ``time`` is the event-time column (a timestamp),
    ``keys`` the grouping columns, each AggSpec's ``arg``/``filter`` its inputs. The output
    ``schema`` is: the keys, then window_start, window_end, window_time (window_end - 1 ms), then
    one column per aggregate. Rows whose every window has already fired (with
    ``allowed_lateness``) are late: dropped and counted.
    """

    input: int
    window: WindowSpec
    time: int
    keys: tuple[int, ...]
    aggs: tuple[AggSpec, ...]
    schema: pa.Schema
    allowed_lateness: int = 0
    #: The node that receives late rows (with the input's columns) instead of dropping them.
    late_output: int | None = None
    #: Windows over processing time: ``time`` holds each row's processing time, and windows
    #: fire as the clock passes their end (and all at the end of the input), not on watermarks.
    proctime: bool = False
    #: The input is not rows but partial aggregates per key and pane, made before the exchange by
    #: a ``preaggregate_window`` chain (two-phase aggregation); ``raw_schema`` is the schema of
    #: the rows they were made of, which fixes the layout of the state (the same as without).
    raw_schema: pa.Schema | None = None

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    def requires(self) -> tuple[Distribution, ...]:
        return (hash_by(*self.keys),)


class _PreAggregate:
    """The chain function of the first phase of a window aggregation: each batch becomes one
    partial row per key and pane (``WindowAggregateOperator.partials``), so that what crosses the
    exchange is a few partials instead of every row. One subtask alone gains nothing from it,
    and passes its partials on all the same (the second phase reads nothing else)."""

    def __init__(self, node: WindowAggregate, input_schema: pa.Schema, schema: pa.Schema) -> None:
        self.node, self.input_schema, self.schema = node, input_schema, schema
        self._per_task: dict[tuple[int, int], object] = {}

    def __call__(self, batch: pa.RecordBatch, ctx: TaskContext) -> pa.RecordBatch:
        task = (ctx.node_id, ctx.subtask)
        phase = self._per_task.get(task)
        if phase is None:
            from clink.runtime.operators.window import WindowPreAggregation

            phase = self._per_task[task] = WindowPreAggregation(self.node, ctx, input_schema=self.input_schema,
                                                                schema=self.schema)
        return phase.partials(batch)


def preaggregate_window(*, window: WindowSpec, time: int, keys: tuple[int, ...], aggs: tuple[AggSpec, ...],
                        input_schema: pa.Schema, schema: pa.Schema) -> ChainFn:
    """The first phase of a two-phase window aggregation, as a chain function over rows of
    ``input_schema`` giving partial rows of ``schema`` (``window_partial_schema``)."""
    node = WindowAggregate(id=0, input=0, window=window, time=time, keys=keys, aggs=aggs,
                           schema=_window_output_schema(input_schema, time, keys, aggs))
    return _PreAggregate(node, input_schema, schema)


def _window_output_schema(input_schema: pa.Schema, time: int, keys: tuple[int, ...],
                          aggs: tuple[AggSpec, ...]) -> pa.Schema:
    time_type = input_schema.field(time).type
    fields = [input_schema.field(k) for k in keys]
    fields += [pa.field(n, time_type) for n in ("window_start", "window_end", "window_time")]
    fields += [pa.field(a.name or f"agg{i}", a.type) for i, a in enumerate(aggs)]
    return pa.schema(fields)


@record(kw_only=True)
class GroupAggregate(Node):
    """A GROUP BY without a window: an updating aggregation over all rows seen so far.

    Input columns are addressed by position: ``keys`` the grouping columns, each AggSpec's
    ``arg``/``filter`` its inputs. An input whose schema ends with ``ROWKIND_COLUMN`` is itself
    updating: ``-U``/``-D`` rows retract what ``+I``/``+U`` rows added. The output ``schema`` is
    the keys, then one column per aggregate, then ``ROWKIND_COLUMN`` (string). For each key a
    batch changes: ``+I`` with the first result, ``-U`` with the previous result then ``+U`` with
    the new one (nothing when the result did not change), ``-D`` with the previous result when
    the key has no rows left. State is kept per key through the state contract.
    """

    input: int
    keys: tuple[int, ...]
    aggs: tuple[AggSpec, ...]
    schema: pa.Schema

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    def requires(self) -> tuple[Distribution, ...]:
        return (hash_by(*self.keys),)


@record(kw_only=True)
class OverAggregate(Node):
    """``agg(...) OVER (PARTITION BY partition ORDER BY time <frame>)``: every input row, once the
    watermark passes its ``time``, with one column per AggSpec (count_star, count, sum, avg, min,
    max) over its frame — ``frame`` ``"rows"``: the ``preceding`` rows before it in its partition
    (time, then arrival order); ``"range"``: the rows whose time is at most ``preceding`` ms
    before its own, rows of the same time included; ``preceding`` None: every earlier row. The
    output ``schema``: the input columns, then the aggregates; it is append-only. Rows at or
    behind the watermark are late: dropped and counted, or sent to ``late_output``.

    Over an updating input (its schema ends with ``ROWKIND_COLUMN``) ``time`` is any timestamp,
    date or integer column and nothing waits for the watermark: the output (schema ending with
    ``ROWKIND_COLUMN``) revises the results of the rows after each row that comes or goes.
    """

    input: int
    partition: tuple[int, ...]
    time: int
    frame: str
    preceding: int | None
    aggs: tuple[AggSpec, ...]
    schema: pa.Schema
    #: The node that receives late rows (the input's columns) instead of dropping them.
    late_output: int | None = None

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    def requires(self) -> tuple[Distribution, ...]:
        return (hash_by(*self.partition),)


@record(kw_only=True)
class Sort(Node):
    """``ORDER BY time, ...`` on a stream: every row once the watermark passes its ``time`` (an
    event-time column), all rows in (``time``, then ``order``: (column, descending) pairs, NULLs
    last, then arrival) order, in one subtask. The output ``schema`` is the input's; append-only.
    Rows at or behind the watermark are late: dropped and counted."""

    input: int
    time: int
    order: tuple[tuple[int, bool], ...]
    schema: pa.Schema

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    def requires(self) -> tuple[Distribution, ...]:
        return (SINGLE,)


@record(kw_only=True)
class SessionWindows(Node):
    """``TABLE(SESSION(...))`` as a relation: every row once its session (per ``partition``
    columns, hashed; none: one subtask) has ended, i.e. once the watermark passes its last row's
    ``time`` plus ``gap`` ms, with window_start, window_end and window_time appended (``schema``).
    Append-only; a row whose [time, time + gap) ends at or before the watermark is late."""

    input: int
    partition: tuple[int, ...]
    time: int
    gap: int
    schema: pa.Schema

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    def requires(self) -> tuple[Distribution, ...]:
        return (hash_by(*self.partition),) if self.partition else (SINGLE,)


@record(kw_only=True)
class Nav:
    """A value a pattern's condition or measure reads from the rows of a (partial) match:
    ``kind`` ``last`` / ``first`` (the row ``offset`` from the last / first row mapped to
    ``variable``; -1: any variable), ``prev`` (the row ``offset`` rows before the current one in
    the partition, matched or not), or an aggregate over the variable's rows: ``sum``, ``count``
    (non-NULL values), ``count_star``, ``avg``, ``min``, ``max``. ``column``: a column of the row
    batch (input columns, then the derived ones); ``type``: the value's type. A condition counts
    the row it is trying as mapped to its variable."""

    kind: str
    variable: int
    column: int
    offset: int = 0
    type: pa.DataType = pa.null()


@record(kw_only=True)
class MatchRecognize(Node):
    """``MATCH_RECOGNIZE``: per partition (``partition``: input columns, hashed; none: one
    partition in one subtask), rows in (event time ``time``, ``order``, arrival) order once the
    watermark passes them, searched for ``pattern``: (variable, fewest rows, most rows or None,
    greedy) terms in sequence. A row may be mapped to a term's variable when ``defines[v]``
    (None: always) is TRUE over the candidate batch: the row batch's columns (``derive`` adds
    computed ones to the input's) taken at the row, then one column per ``navs`` entry for the
    partial match the row would extend. ``row_only[v]``: the condition reads no navigation value
    (it is computed once per batch of rows). A greedy term leaves for the next only on a row it
    cannot take. A complete match gives one output row: the partition columns of its last row,
    then ``measures(batch, ctx)`` over the same layout for the finished match. ``skip``:
    ``past_last``, ``next_row``, ``to_first`` / ``to_last`` (variable ``skip_to``): which partial
    matches a match discards. ``within`` (ms): a partial match spanning longer is dropped.
    Append-only; rows at or behind the watermark on arrival are late (dropped, counted).
    State through the state contract: the rows waiting for the watermark, and per partition
    its partial matches (and the last rows PREV reads)."""

    input: int
    partition: tuple[int, ...]
    time: int
    order: tuple[tuple[int, bool], ...]
    variables: tuple[str, ...]
    pattern: tuple[tuple[int, int, int | None, bool], ...]
    defines: tuple[Callable[[pa.RecordBatch, "TaskContext"], Any] | None, ...]
    row_only: tuple[bool, ...]
    navs: tuple[Nav, ...]
    measures: Callable[[pa.RecordBatch, "TaskContext"], Any]
    schema: pa.Schema
    derive: Callable[[pa.RecordBatch, "TaskContext"], Any] | None = None
    derived_types: tuple[pa.DataType, ...] = ()
    skip: str = "past_last"
    skip_to: int | None = None
    within: int | None = None
    #: ``time`` is processing time: each batch is matched as it arrives (in arrival order, then
    #: ``order``), nothing waits for a watermark and no row is late.
    proctime: bool = False
    #: The ``navs`` each condition reads (one entry per variable), then those the measures read;
    #: empty: all of them.
    nav_uses: tuple[tuple[int, ...], ...] = ()

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    def requires(self) -> tuple[Distribution, ...]:
        return (hash_by(*self.partition),) if self.partition else (SINGLE,)


@record(kw_only=True)
class Rank(Node):
    """Top-N: per partition (``partition``: input columns), the first ``limit`` rows in ``order``
    ((column, descending) pairs; NULLs last; ties in arrival order), numbered from 1. The output
    ``schema``: the input's columns (without its row kind), the row number (int64) if
    ``emit_rank``, then ``ROWKIND_COLUMN``: ``+I`` when a row enters the top N (or gets a new
    number), ``-D`` when it leaves it. An updating input retracts rows. State through the state
    contract: the rows that can still reach the top N of each partition.
    """

    input: int
    partition: tuple[int, ...]
    order: tuple[tuple[int, bool], ...]
    limit: int
    schema: pa.Schema
    emit_rank: bool = True
    #: How rows are numbered: "row_number" (1, 2, 3, 4), "rank" (ties share a number: 1, 2, 2,
    #: 4) or "dense_rank" (1, 2, 2, 3); the top N are the rows numbered N or less.
    function: str = "row_number"
    #: When a partition ends, where the compiler can tell (a Top-N over an interval join whose
    #: partition holds a unique key of one side): (input column, offset in ms) pairs, and a row's
    #: partition can get no row arriving on time once the watermark passes the largest of its
    #: columns plus their offsets. Every row of a partition (without a NULL in the partition or
    #: in these columns) has the same end. The partition is then forgotten, and a row that comes
    #: after its end is late. Empty: partitions never end.
    expiry: tuple[tuple[int, int], ...] = ()

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    def requires(self) -> tuple[Distribution, ...]:
        return (hash_by(*self.partition),)


@record(kw_only=True)
class ChangelogNormalize(Node):
    """Upserts by key turned into a full changelog, as Flink's ChangelogNormalize: the input
    (an upsert source: ``+I``/``+U`` rows carry a key's new row, ``-D`` rows delete the key, the
    other columns may be NULL) is hash-partitioned by ``keys``; the operator keeps each key's last
    row and emits ``+I`` for a new key, ``-U`` (the old row) and ``+U`` for a changed one,
    ``-D`` (the old row) for a deleted one, and nothing for an upsert equal to the row it
    replaces or a delete of a key it does not hold. ``schema``: the input's columns then
    ``ROWKIND_COLUMN``. State through the state contract: the last row per key."""

    input: int
    keys: tuple[int, ...]
    schema: pa.Schema

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    def requires(self) -> tuple[Distribution, ...]:
        return (hash_by(*self.keys),)


@record(kw_only=True)
class Join(Node):
    """Join the rows of ``left`` and ``right`` whose key columns are equal, position by position
    (``left_keys`` in the left input, ``right_keys`` in the right); ``residual(pairs, ctx)``,
    when set, gives TRUE for the candidate pairs (a batch of the left columns then the right ones)
    that also meet the rest of the condition. ``kind``: inner, left, right or full; an outer join
    also emits each row of its preserved side(s) that has no match, padded with NULLs, and
    retracts that row when a match arrives. Either input may be updating (its batches end with
    ``ROWKIND_COLUMN``): a retracted row retracts its pairs.

    ``interval`` = (left_time, right_time, lower, upper) marks an interval join: pairs match only
    if ``lower <= right.time - left.time <= upper`` (ms), and rows that the watermark has passed
    by more than that are dropped from state. With ``interval_ends`` = (left_end, right_end), the
    upper bound is measured from the left column ``left_end`` and the lower bound reaches the
    right column ``right_end`` instead (``left.time + lower <= right.right_end`` and
    ``right.time <= left.left_end + upper``): a left row is dropped once the watermark passes
    ``left.left_end + upper``, a right row once it passes ``right.right_end - lower`` (the bounds
    are in ``residual`` too: matching never depends on when rows go). The output ``schema``: the
    left columns, then the right ones, then ``ROWKIND_COLUMN`` if the join is updating (an outer
    join, or an updating input). Both sides are kept in state through the state contract.
    """

    left: int
    right: int
    kind: str
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    schema: pa.Schema
    residual: Callable[[pa.RecordBatch, "TaskContext"], Any] | None = None
    #: The pair columns ``residual`` reads (None: any): the others need not be gathered for it.
    residual_reads: tuple[int, ...] | None = None
    interval: tuple[int, int, int, int] | None = None
    interval_ends: tuple[int, int] | None = None
    #: A lookup join: the right input (bounded) is read to its end before left rows are matched
    #: (they wait until then); left rows are not kept. INNER or LEFT; append-only output. When
    #: the right table's connector looks rows up by key (``Connector.create_lookup``), the
    #: executor asks it for each left batch's keys instead, and the right input ends empty.
    lookup: bool = False
    #: A temporal join: (left time column, right time column). Each left row waits for the
    #: watermark to pass its time, then meets the right row of its key with the latest time at or
    #: before its own (the version valid then); older versions are dropped as the watermark passes.
    temporal: tuple[int, int] | None = None
    #: Per input (left, right), whether its join keys hold a unique key of it: at most one row
    #: per key ever comes. An inner join of append-only inputs then keeps a row of the other input
    #: only until that row comes (a row that meets it on arrival is not stored, and the row's
    #: arrival removes the rows it meets). Not with ``broadcast``.
    unique: tuple[bool, bool] = (False, False)
    #: An inner interval join whose input ``broadcast`` (0 left, 1 right) reaches every subtask
    #: whole, while the other input's rows stay on the subtask that made them: a pair forms where
    #: its row of the other input is. Every subtask keeps the whole broadcast input, and a
    #: checkpoint restores it from one subtask's copy, not by key groups.
    broadcast: int | None = None

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.left, self.right)

    def requires(self) -> tuple[Distribution, ...]:
        if self.broadcast is not None:
            # Every subtask has the whole broadcast input: the other one may be spread anyhow.
            return (BROADCAST, FORWARD) if self.broadcast == 0 else (FORWARD, BROADCAST)
        # Every kind of join (lookup and temporal ones too) meets equal keys in one subtask.
        return (hash_by(*self.left_keys), hash_by(*self.right_keys))


@record(kw_only=True)
class Sink(Node):
    """Write the input to ``table`` through ``connector``.

    A bare ``SELECT`` becomes a sink with ``connector='collect'`` and ``table`` set to the
    query's name (``query_1``...): its rows go back to the caller.
    """

    table: str
    connector: str
    input: int
    schema: pa.Schema
    options: Mapping[str, str] = field(factory=dict)
    #: The table's PRIMARY KEY (an upserting connector writes by it) and PARTITIONED BY columns.
    primary_key: tuple[str, ...] = ()
    partition_columns: tuple[str, ...] = ()
    #: The column that carries the rows' event time (the query's time attribute), if it has one:
    #: what the sink's event-time latency is measured from.
    event_time: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", dict(self.options or {}))

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    def requires(self) -> tuple[Distribution, ...]:
        # One writer per table: its commits, and the order of each key's changes, stay whole.
        return (SINGLE,)


@record(kw_only=True)
class Exchange(Node):
    """Moves rows between subtasks so the node below gets ``distribution``: the planner puts one
    wherever a node requires a distribution its input does not have. Rows pass unchanged; at
    parallelism 1 it is a pass-through."""

    input: int
    distribution: Distribution
    schema: pa.Schema

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)


@record(kw_only=True)
class Plan:
    """Every node of a pipeline, its configuration (from ``SET``), and where it came from."""

    nodes: tuple[Node, ...]
    name: str = "<plan>"
    fingerprint: str = ""
    config: Mapping[str, str] = field(factory=dict)
    explain: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", dict(self.config or {}))

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
