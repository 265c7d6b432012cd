"""Typed logical IR.

Every node knows its output type (expressions) or schema (relations) and the source span it
came from. Nodes are immutable; rewrites build new ones with ``records.evolve``. Spans are ignored
by equality, so a rewrite that only moves text positions is not a change.

Expressions refer to the columns of their input relation by position (``Column.index``), so a
rewrite that changes an input's columns must remap the expressions above it (``remap``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from clink import records
from clink.errors import CompilerBug, Span
from clink.runtime.plan import (
    APPEND_ONLY,
    INSERT_DELETE,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    UPDATING,
    ChangelogMode,
)

_span = records.field(eq=False, repr=False, default=None)


# ---------------------------------------------------------------- schemas


@records.record
class Field:
    name: str
    type: pa.DataType
    nullable: bool = True

    def to_arrow(self) -> pa.Field:
        return pa.field(self.name, self.type, nullable=self.nullable)


@records.record
class Schema:
    fields: tuple[Field, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __getitem__(self, i: int) -> Field:
        return self.fields[i]

    def to_arrow(self) -> pa.Schema:
        return pa.schema([f.to_arrow() for f in self.fields])


# ---------------------------------------------------------------- expressions


@records.record(kw_only=True)
class Expr:
    """A typed scalar expression over the columns of one input relation."""

    type: pa.DataType
    nullable: bool = True
    span: Span | None = _span

    @property
    def children(self) -> tuple[Expr, ...]:
        return ()

    def with_children(self, children: tuple[Expr, ...]) -> Expr:
        assert not children
        return self

    @property
    def deterministic(self) -> bool:
        return all(c.deterministic for c in self.children)


@records.record(kw_only=True)
class Column(Expr):
    index: int
    name: str


@records.record(kw_only=True)
class Literal(Expr):
    """A constant; ``value`` is a Python value of ``type`` (None for NULL)."""

    value: Any


@records.record(kw_only=True)
class Call(Expr):
    """A function or operator applied to arguments. ``fn`` names an emitter in
    ``clink.compiler.codegen.exprs``; ``params`` holds constant parameters that are not
    expressions (a LIKE escape, an EXTRACT unit, a SPLIT_INDEX position...)."""

    fn: str
    args: tuple[Expr, ...]
    params: tuple[Any, ...] = ()

    @property
    def children(self) -> tuple[Expr, ...]:
        return self.args

    def with_children(self, children: tuple[Expr, ...]) -> Call:
        return records.evolve(self, args=children)

    @property
    def deterministic(self) -> bool:
        return self.fn not in NONDETERMINISTIC and all(a.deterministic for a in self.args)


@records.record(kw_only=True)
class UdfRef:
    """Where generated code finds a Python UDF: imported from ``module`` (``attribute`` in it) when
    the plan loads (``CREATE FUNCTION``), or, with ``module`` None, looked up by ``name`` in the
    ``RuntimeContext.functions`` it runs with. The params of a ``Call(fn="udf")``."""

    name: str
    vectorized: bool
    module: str | None = None
    attribute: str | None = None
    #: ``scalar``, ``aggregate`` or ``table``.
    kind: str = "scalar"
    #: The CREATE FUNCTION statement, shown next to the import in the generated module.
    span: Span | None = records.field(default=None, eq=False, repr=False)

    @property
    def constant(self) -> str:
        """The generated module's name for an imported function."""
        return f"UDF_{self.name.upper()}"


#: Functions whose value depends on when they run.
NONDETERMINISTIC = frozenset({"current_timestamp", "current_date", "current_time", "localtime", "localtimestamp",
                              "proctime", "current_watermark"})


def walk(expr: Expr):
    """Every node of ``expr``, parents before children."""
    yield expr
    for child in expr.children:
        yield from walk(child)


def transform(expr: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """Apply ``fn`` bottom-up."""
    children = tuple(transform(c, fn) for c in expr.children)
    if children != expr.children:
        expr = expr.with_children(children)
    return fn(expr)


def columns_used(expr: Expr) -> set[int]:
    return {e.index for e in walk(expr) if isinstance(e, Column)}


def remap(expr: Expr, mapping: Mapping[int, int]) -> Expr:
    """Renumber column references: ``mapping[old] = new``."""

    def fn(e: Expr) -> Expr:
        if isinstance(e, Column):
            return records.evolve(e, index=mapping[e.index])
        return e

    return transform(expr, fn)


def substitute(expr: Expr, exprs: tuple[Expr, ...]) -> Expr:
    """Replace each ``Column(i)`` by ``exprs[i]``: inline a projection into the expression above it."""

    def fn(e: Expr) -> Expr:
        if isinstance(e, Column):
            replacement = exprs[e.index]
            # A plain column passed through keeps the position where the outer query named it.
            if isinstance(replacement, Column) and e.span is not None:
                return records.evolve(replacement, span=e.span)
            return replacement
        return e

    return transform(expr, fn)


def and_(left: Expr | None, right: Expr | None) -> Expr | None:
    if left is None:
        return right
    if right is None:
        return left
    return Call(fn="and", args=(left, right), type=pa.bool_(), nullable=left.nullable or right.nullable,
                span=left.span)


def conjuncts(expr: Expr | None) -> list[Expr]:
    if expr is None:
        return []
    if isinstance(expr, Call) and expr.fn == "and":
        return conjuncts(expr.args[0]) + conjuncts(expr.args[1])
    return [expr]


# ---------------------------------------------------------------- relations


def _is_boolean(instance: object, attribute: records.Field, value: Expr | None) -> None:
    # An invariant, not a user error: the binder rejects non-boolean conditions first.
    if value is not None and value.type != pa.bool_() and value.type != pa.null():
        raise CompilerBug(f"{type(instance).__name__}.{attribute.name} must be BOOLEAN, got {value.type}")


@records.record(kw_only=True)
class Rel:
    """A relational node."""

    span: Span | None = _span

    @property
    def inputs(self) -> tuple[Rel, ...]:
        return ()

    def with_inputs(self, inputs: tuple[Rel, ...]) -> Rel:
        assert not inputs, f"{type(self).__name__} has no inputs"
        return self

    @property
    def schema(self) -> Schema:
        raise NotImplementedError


@records.record(kw_only=True)
class Unary(Rel):
    """A relation over exactly one input."""

    input: Rel

    @property
    def inputs(self) -> tuple[Rel, ...]:
        return (self.input,)

    def with_inputs(self, inputs: tuple[Rel, ...]) -> Rel:
        (new_input,) = inputs
        return records.evolve(self, input=new_input)


@records.record
class TableInfo:
    """What a scan needs to know of a table: its connector, options and physical columns."""

    name: str
    connector: str
    options: tuple[tuple[str, str], ...]
    columns: Schema
    #: The event-time column's name and the watermark expression over the physical columns.
    watermark: tuple[str, Expr] | None = None
    primary_key: tuple[str, ...] = ()
    #: PARTITIONED BY columns, in order (a table that is written one directory per value).
    partition_columns: tuple[str, ...] = ()
    #: 'scan.watermark.idle-timeout' in milliseconds, if set.
    idle_timeout: int | None = None
    #: The row kinds a scan of the table produces: a changelog source (its connector says so for
    #: its options, ``Connector.source_changelog``) is an updating stream from the start.
    changelog: ChangelogMode = APPEND_ONLY
    #: A changelog whose changes may come twice ('table.exec.source.cdc-events-duplicate'): the
    #: plan passes it through ChangelogNormalize by the primary key, which drops what repeats.
    deduplicated: bool = False
    #: Fields (paths of names into the physical columns: ``("auction", "id")``) whose non-NULL
    #: values no two rows of the table share, as its connector declares them
    #: (``Connector.unique_fields``).
    unique_fields: tuple[tuple[str, ...], ...] = ()

    @property
    def normalized(self) -> bool:
        """Its scan is followed by ChangelogNormalize keyed by the primary key: upserts, or a
        changelog whose duplicated changes must be dropped."""
        return self.upserts or self.deduplicated

    @property
    def upserts(self) -> bool:
        """Its source gives upserts by primary key (``+U`` without ``-U``, ``-D`` with the key
        alone): the plan normalizes them into a full changelog by keeping the last row per key
        (Flink's ChangelogNormalize), so a scan of it is updating like any changelog."""
        return UPDATE_AFTER in self.changelog.kinds and UPDATE_BEFORE not in self.changelog.kinds

    @property
    def key_columns(self) -> set[int]:
        """The primary key's positions among the physical columns."""
        names = self.columns.names
        return {names.index(k) for k in self.primary_key}

    @property
    def watermark_columns(self) -> set[int]:
        """Physical columns the watermark expression reads: every scan of the table reads them."""
        return columns_used(self.watermark[1]) if self.watermark is not None else set()


@records.record(kw_only=True)
class Scan(Rel):
    """Read ``columns`` (positions in the table's physical columns) of ``table``, keeping the
    rows for which ``predicate`` (over the scan's own output) is TRUE."""

    table: TableInfo
    columns: tuple[int, ...]
    predicate: Expr | None = records.field(default=None, validator=_is_boolean)

    @functools.cached_property
    def schema(self) -> Schema:
        return Schema(tuple(self.table.columns[i] for i in self.columns))


@records.record(kw_only=True)
class Filter(Unary):
    """Keep the rows of ``input`` whose ``predicate`` is TRUE; FALSE and NULL drop the row."""

    predicate: Expr = records.field(validator=_is_boolean)

    @functools.cached_property
    def schema(self) -> Schema:
        return self.input.schema


@records.record(kw_only=True)
class Project(Unary):
    """Compute ``exprs`` over each row of ``input``, naming the results ``names``."""

    exprs: tuple[Expr, ...]
    names: tuple[str, ...]

    @functools.cached_property
    def schema(self) -> Schema:
        return Schema(tuple(Field(n, e.type, e.nullable) for n, e in zip(self.names, self.exprs, strict=True)))


@records.record(kw_only=True)
class Calc(Unary):
    """A fused filter and projection: keep the rows where ``predicate`` is TRUE, then compute
    ``exprs`` (both over ``input``'s columns). Made by ``fuse_stateless``."""

    predicate: Expr | None = records.field(validator=_is_boolean)
    exprs: tuple[Expr, ...]
    names: tuple[str, ...]

    @functools.cached_property
    def schema(self) -> Schema:
        return Schema(tuple(Field(n, e.type, e.nullable) for n, e in zip(self.names, self.exprs, strict=True)))


@records.record(kw_only=True)
class Union(Rel):
    """Every row of every input (UNION ALL); the inputs have the same column types."""

    all_inputs: tuple[Rel, ...]

    @property
    def inputs(self) -> tuple[Rel, ...]:
        return self.all_inputs

    def with_inputs(self, inputs: tuple[Rel, ...]) -> Union:
        return records.evolve(self, all_inputs=inputs)

    @functools.cached_property
    def schema(self) -> Schema:
        first = self.all_inputs[0].schema
        nullable = [any(i.schema[k].nullable for i in self.all_inputs) for k in range(len(first))]
        return Schema(tuple(records.evolve(f, nullable=n) for f, n in zip(first.fields, nullable, strict=True)))


@records.record(kw_only=True)
class IntervalBounds:
    """Event-time bounds of an interval join: a pair matches only if
    ``left[left_time] + lower <= right[right_end]`` and ``right[right_time] <= left[left_end] + upper``
    (milliseconds), where ``left_end`` and ``right_end`` default to the time columns themselves
    (the plain ``r.t BETWEEN l.t + lower AND l.t + upper``).

    ``left_time`` and ``right_time`` are event-time attributes: a row arriving on time is after
    the watermark. The ends may be any timestamp column of their side (an auction's ``expires``).
    So a left row can match no right row arriving on time once the watermark passes
    ``left[left_end] + upper``, nor a right row any left row once it passes
    ``right[right_end] - lower``, and the join drops such rows from its state."""

    left_time: int
    right_time: int
    lower: int
    upper: int
    left_end: int | None = None
    right_end: int | None = None

    @property
    def left_expiry(self) -> int:
        """The left column whose value (plus ``upper``) is the last time a left row can match."""
        return self.left_time if self.left_end is None else self.left_end

    @property
    def right_expiry(self) -> int:
        """The right column whose value (minus ``lower``) is the last time a right row can match."""
        return self.right_time if self.right_end is None else self.right_end


JOIN_KINDS = ("inner", "left", "right", "full")


def _is_join_kind(instance: object, attribute: records.Field, value: str) -> None:
    if value not in JOIN_KINDS:
        raise CompilerBug(f"{type(instance).__name__}.{attribute.name} must be one of {JOIN_KINDS}, got {value!r}")


@records.record(kw_only=True)
class Join(Rel):
    """Pairs of rows of ``left`` and ``right`` whose key columns are equal (``left_keys[i]`` with
    ``right_keys[i]``, of the same type) and for which ``residual`` (over the left columns then
    the right ones) is TRUE. ``kind`` left/right/full also keeps the rows of that side that match
    nothing, padded with NULLs. Output: the left columns, then the right ones."""

    left: Rel
    right: Rel
    kind: str = records.field(validator=_is_join_kind)
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    residual: Expr | None = records.field(default=None, validator=_is_boolean)
    interval: IntervalBounds | None = None
    #: A lookup join (``FOR SYSTEM_TIME AS OF`` a processing time): the right side is a bounded
    #: table read whole first; left rows are matched against it and not kept.
    lookup: bool = False
    #: A temporal join (``FOR SYSTEM_TIME AS OF`` an event time): (left time column, right time
    #: column); each left row meets the version of its key valid at its time.
    temporal: tuple[int, int] | None = None
    #: ``SELECT /*+ UID('name') */``: the name given to this operator's state in checkpoints.
    uid: str | None = None
    #: Per side (left, right), whether its join keys hold a unique key of it
    #: (``rewrite.unique_join_sides``): it has at most one row per key, ever.
    unique: tuple[bool, bool] = (False, False)

    @property
    def inputs(self) -> tuple[Rel, ...]:
        return (self.left, self.right)

    def with_inputs(self, inputs: tuple[Rel, ...]) -> Join:
        left, right = inputs
        return records.evolve(self, left=left, right=right)

    @functools.cached_property
    def schema(self) -> Schema:
        pad_left = self.kind in ("right", "full")
        pad_right = self.kind in ("left", "full")
        left = tuple(records.evolve(f, nullable=True) if pad_left else f for f in self.left.schema.fields)
        right = tuple(records.evolve(f, nullable=True) if pad_right else f for f in self.right.schema.fields)
        return Schema(left + right)


# ---------------------------------------------------------------- sinks (statement roots)


@records.record(kw_only=True)
class Sink(Unary):
    """Write ``input`` to a table (``INSERT INTO``) or back to the caller (``collect``)."""

    name: str
    connector: str
    options: tuple[tuple[str, str], ...] = ()
    target: Schema | None = None
    #: The sink column that carries the query's time attribute, if any (for latency metrics).
    event_time: str | None = None

    @functools.cached_property
    def schema(self) -> Schema:
        return self.target if self.target is not None else self.input.schema


# ---------------------------------------------------------------- windows

#: The columns a window adds: window_start, window_end, window_time (window_end - 1 ms, the
#: event time of the window's result).
WINDOW_COLUMNS = ("window_start", "window_end", "window_time")
WINDOW_TIME_TYPE = pa.timestamp("ms")
WINDOW_LTZ_TYPE = pa.timestamp("ms", tz="UTC")


def window_time_type(time_type: pa.DataType) -> pa.DataType:
    """The type of window_time over a time column of type ``time_type``: TIMESTAMP_LTZ(3) over a
    TIMESTAMP_LTZ (an instant), else TIMESTAMP(3). window_start and window_end are TIMESTAMP(3)
    either way: over a TIMESTAMP_LTZ, the wall clock of the session time zone, as in Flink."""
    ltz = pa.types.is_timestamp(time_type) and time_type.tz is not None
    return WINDOW_LTZ_TYPE if ltz else WINDOW_TIME_TYPE


@records.record
class WindowDef:
    """A window, all lengths in milliseconds (see ``clink.runtime.plan.WindowSpec``)."""

    kind: str
    size: int = 0
    slide: int = 0
    offset: int = 0
    gap: int = 0
    #: A window aggregation over rows that already carry their window (GROUP BY the window_start
    #: and window_end of a window aggregation or window table function below): that window, as
    #: SQL. The rows are then grouped by the millisecond their window closes in, a TUMBLE of 1 ms
    #: over window_end - 1 ms, with window_start as a key; it fires as the window below did.
    attached: str = ""

    def sql(self) -> str:
        if self.attached:
            return f"windows of the input: {self.attached}"
        match self.kind:
            case "tumble":
                text = f"TUMBLE(size={_ms(self.size)}"
                return text + (f", offset={_ms(self.offset)})" if self.offset else ")")
            case "hop":
                return f"HOP(slide={_ms(self.slide)}, size={_ms(self.size)})"
            case "cumulate":
                return f"CUMULATE(step={_ms(self.slide)}, max_size={_ms(self.size)})"
        return f"SESSION(gap={_ms(self.gap)})"


def _ms(value: int) -> str:
    for unit, ms in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if value % ms == 0:
            return f"{value // ms} {unit}"
    return f"{value} ms"


def _window_fields(time_type: pa.DataType) -> tuple[Field, ...]:
    types = (WINDOW_TIME_TYPE, WINDOW_TIME_TYPE, window_time_type(time_type))
    return tuple(Field(name, t, False) for name, t in zip(WINDOW_COLUMNS, types, strict=True))


@records.record(kw_only=True)
class WindowTVF(Unary):
    """A window table function used as a relation: every row of ``input`` once per window that
    contains its event time ``time``, with the window's columns appended."""

    window: WindowDef
    time: int
    #: SESSION only: the input columns whose values each have their own sessions.
    partition_by: tuple[int, ...] = ()
    #: SESSION as a relation is a stateful operator: ``SELECT /*+ UID('name') */`` names its state.
    uid: str | None = None

    @functools.cached_property
    def schema(self) -> Schema:
        return Schema(self.input.schema.fields + _window_fields(self.input.schema[self.time].type))


@records.record(kw_only=True)
class Sort(Unary):
    """``ORDER BY time, ...`` of a stream: every row once the watermark passes its event time
    ``time`` (ascending), in (time, ``order``, arrival) order; ``order``: (column, descending)
    pairs, NULLs last. Append-only."""

    time: int
    order: tuple[tuple[int, bool], ...]
    #: ``SELECT /*+ UID('name') */``: the name given to this operator's state in checkpoints.
    uid: str | None = None

    @property
    def schema(self) -> Schema:
        return self.input.schema


@records.record(kw_only=True)
class Nav:
    """A value read from the rows of a (partial) match (see ``runtime.plan.Nav``): ``kind`` last,
    first, prev, or an aggregate (sum, count, count_star, avg, min, max) over the rows of
    ``variable`` (-1: every variable) of the row column ``column``."""

    kind: str
    variable: int
    column: int
    offset: int
    type: pa.DataType
    sql: str


@records.record(kw_only=True)
class MatchRecognize(Unary):
    """``MATCH_RECOGNIZE``: per partition, rows in (event or processing time ``time``, ``order``) order searched
    for ``pattern`` ((variable, fewest, most or None, greedy) terms). Conditions (``defines``, one
    per variable, None: TRUE) and ``measures`` are expressions over the *match row*: the input's
    columns, then the ``derived`` expressions (over the input), then one column per ``navs``
    value. Output: the partition columns, then the measures (``measure_names``). Append-only."""

    partition: tuple[int, ...]
    time: int
    order: tuple[tuple[int, bool], ...]
    variables: tuple[str, ...]
    pattern: tuple[tuple[int, int, int | None, bool], ...]
    derived: tuple[Expr, ...]
    navs: tuple[Nav, ...]
    defines: tuple[Expr | None, ...]
    measures: tuple[Expr, ...]
    measure_names: tuple[str, ...]
    skip: str = "past_last"
    skip_to: int | None = None
    within: int | None = None
    #: ``time`` is a processing-time attribute: rows are matched as they arrive.
    proctime: bool = False
    #: ``SELECT /*+ UID('name') */``: the name given to this operator's state in checkpoints.
    uid: str | None = None

    @functools.cached_property
    def schema(self) -> Schema:
        keys = tuple(self.input.schema[p] for p in self.partition)
        return Schema(keys + tuple(Field(n, e.type, e.nullable)
                                   for n, e in zip(self.measure_names, self.measures, strict=True)))


@records.record(kw_only=True)
class Unnest(Unary):
    """Every row of ``input`` once per element of its array column ``column`` (none for an empty or
    NULL array), that column replaced by the element (a map's entry: its key and its value) and,
    with ``ordinality``, the element's position (1-based). ``names``: the new columns' names."""

    column: int
    ordinality: bool
    names: tuple[str, ...]

    @functools.cached_property
    def schema(self) -> Schema:
        kept = tuple(f for i, f in enumerate(self.input.schema.fields) if i != self.column)
        t = self.input.schema[self.column].type
        types = [t.key_type, t.item_type] if pa.types.is_map(t) else [t.value_type]
        types += [pa.int32()] if self.ordinality else []
        return Schema(kept + tuple(Field(n, ty, True) for n, ty in zip(self.names, types, strict=True)))


@records.record(kw_only=True)
class Lateral(Unary):
    """Every row of ``input`` (its first ``keep`` columns) joined with each row that the Python
    table function ``fn`` gives for the values of its columns ``args``; with ``outer`` (``LEFT
    JOIN LATERAL TABLE(...) ON TRUE``), a row for which it gives none is kept once, with NULLs.
    ``names``/``types``: the function's columns, as the query names them."""

    fn: UdfRef
    args: tuple[int, ...]
    keep: int
    names: tuple[str, ...]
    types: tuple[pa.DataType, ...]
    outer: bool = False

    @functools.cached_property
    def schema(self) -> Schema:
        kept = self.input.schema.fields[: self.keep]
        return Schema(kept + tuple(Field(n, t, True) for n, t in zip(self.names, self.types, strict=True)))


@records.record(kw_only=True)
class Replicate(Unary):
    """Every row of ``input`` as many times as its column ``count`` says (none for 0 or fewer),
    without that column: the rows ``INTERSECT ALL`` and ``EXCEPT ALL`` keep, from the number of
    copies each distinct row has. Over an updating input each copy keeps its row kind."""

    count: int

    @functools.cached_property
    def schema(self) -> Schema:
        return Schema(tuple(f for i, f in enumerate(self.input.schema.fields) if i != self.count))


def window_origin(rel: Rel, index: int, *,
                  through_keys: bool = False) -> tuple[WindowAggregate | WindowTVF, int] | None:
    """The window aggregation or window table function whose window_start (0), window_end (1) or
    window_time (2) column ``index`` of ``rel`` is, passed on unchanged through projections and
    filters (and, with ``through_keys``, the keys of GROUP BYs); None for any other column."""
    while True:
        match rel:
            case Project(exprs=exprs, input=below) | Calc(exprs=exprs, input=below):
                e = exprs[index]
                if not isinstance(e, Column):
                    return None
                rel, index = below, e.index
            case Filter(input=below):
                rel = below
            case GroupAggregate(num_keys=n, input=below) if through_keys and index < n:
                rel = below
            case WindowAggregate(num_keys=n) if n <= index < n + 3:
                return rel, index - n
            case WindowTVF(input=below) if index >= len(below.schema):
                return rel, index - len(below.schema)
            case _:
                return None


def attachable(node: WindowAggregate | WindowTVF) -> bool:
    """Whether the windows of ``node`` close by event time, each at its end (not SESSION windows,
    whose rows merge), no row of a closed window follows (no allowed lateness), and window_end
    compares with watermarks (not the session-zone wall clock of windows over a TIMESTAMP_LTZ).
    A GROUP BY over such windows runs as a window aggregation over them, and a Top-N partitioned
    by their end forgets each window as it closes."""
    if node.window.kind == "session":
        return False
    if isinstance(node, WindowAggregate) and (node.proctime or node.allowed_lateness):
        return False
    base = node.num_keys if isinstance(node, WindowAggregate) else len(node.input.schema)
    return node.schema[base + 2].type == WINDOW_TIME_TYPE


@records.record(kw_only=True)
class AggCall:
    """An aggregate over the input of a WindowAggregate: ``fn`` (count_star, count, sum, ...)
    reading column ``arg``, counting only rows where column ``filter`` is TRUE; ``param``: a
    constant the function takes (LISTAGG's separator)."""

    fn: str
    arg: int | None
    type: pa.DataType
    nullable: bool
    filter: int | None = None
    param: Any = None
    sql: str = records.field(default="", eq=False)
    #: A Python aggregate function (``fn`` is ``udaf``): where to find it, the columns of its
    #: arguments, and its accumulator (a struct of its fields, kept in state).
    udf: UdfRef | None = None
    args: tuple[int, ...] = ()
    accumulator: pa.StructType | None = None


@records.record(kw_only=True)
class WindowAggregate(Unary):
    """Group by the first ``num_keys`` input columns and by ``window`` over the event time in
    column ``time``; aggregate with ``aggs``. Output: the keys, window_start, window_end,
    window_time, then one column per aggregate (``agg_names``)."""

    window: WindowDef
    num_keys: int
    time: int
    aggs: tuple[AggCall, ...]
    agg_names: tuple[str, ...]
    allowed_lateness: int = 0
    #: Where late rows go (a sink whose ``input`` only describes their schema), and which input
    #: columns they are; None: late rows are dropped and counted.
    late_sink: Sink | None = records.field(default=None, eq=False)
    late_columns: tuple[int, ...] = ()
    #: Windows over processing time (``time`` is a PROCTIME() column): they fire as the clock
    #: passes their end, not on watermarks.
    proctime: bool = False
    #: ``SELECT /*+ UID('name') */``: the name given to this operator's state in checkpoints.
    uid: str | None = None

    @functools.cached_property
    def schema(self) -> Schema:
        keys = self.input.schema.fields[: self.num_keys]
        aggs = tuple(Field(n, a.type, a.nullable) for n, a in zip(self.agg_names, self.aggs, strict=True))
        return Schema(keys + _window_fields(self.input.schema[self.time].type) + aggs)


@records.record(kw_only=True)
class GroupAggregate(Unary):
    """Group by the first ``num_keys`` input columns, without a window; aggregate with ``aggs``.
    Output: the keys, then one column per aggregate (``agg_names``). The result is an updating
    (changelog) stream: each change to a group retracts its previous row (``is_updating``)."""

    num_keys: int
    aggs: tuple[AggCall, ...]
    agg_names: tuple[str, ...]
    #: ``SELECT /*+ UID('name') */``: the name given to this operator's state in checkpoints.
    uid: str | None = None

    @functools.cached_property
    def schema(self) -> Schema:
        keys = self.input.schema.fields[: self.num_keys]
        aggs = tuple(Field(n, a.type, a.nullable) for n, a in zip(self.agg_names, self.aggs, strict=True))
        return Schema(keys + aggs)


@records.record(kw_only=True)
class OverAggregate(Unary):
    """Aggregates over a frame of each row's partition, in event-time order: every input row
    with one more column per aggregate. ``frame`` is ``"rows"`` (``preceding`` rows before) or
    ``"range"`` (``preceding`` ms before, peers included); ``preceding`` None is UNBOUNDED. Over
    an append-only input, rows come out once the watermark passes ``time`` (an event-time
    attribute), so the result is append-only; over an updating input, ``time`` is any ordered
    column and results are revised as rows come and go, so the result is updating."""

    partition: tuple[int, ...]
    time: int
    frame: str
    preceding: int | None
    aggs: tuple[AggCall, ...]
    agg_names: tuple[str, ...]
    #: ``SELECT /*+ UID('name') */``: the name given to this operator's state in checkpoints.
    uid: str | None = None
    #: Where late rows go (a sink whose ``input`` only describes their schema), and which input
    #: columns they are; None: late rows are dropped and counted.
    late_sink: Sink | None = records.field(default=None, eq=False)
    late_columns: tuple[int, ...] = ()

    @functools.cached_property
    def schema(self) -> Schema:
        aggs = tuple(Field(n, a.type, a.nullable) for n, a in zip(self.agg_names, self.aggs, strict=True))
        return Schema(self.input.schema.fields + aggs)


@records.record(kw_only=True)
class Rank(Unary):
    """``ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...)`` kept to the first ``limit`` rows of
    each partition (Top-N; ``limit`` 1 is deduplication). ``order``: (column, descending) pairs,
    NULLs last. Output: the input columns, then the row number (``rank_name``) if ``emit_rank``.
    The result is updating: a row that enters a partition's top N pushes the last one out."""

    partition: tuple[int, ...]
    order: tuple[tuple[int, bool], ...]
    limit: int | None
    rank_name: str
    emit_rank: bool = True
    #: ROW_NUMBER ("row_number"), RANK ("rank") or DENSE_RANK ("dense_rank").
    function: str = "row_number"
    #: ``SELECT /*+ UID('name') */``: the name given to this operator's state in checkpoints.
    uid: str | None = None
    #: When a partition can get no more rows arriving on time (``rewrite.end_ranks``): once the
    #: watermark passes the largest of these (input column, offset in ms). Empty: never.
    expiry: tuple[tuple[int, int], ...] = ()

    def ends_sql(self) -> str:
        """When a partition ends, over the input's column names: ``max(expires, dateTime)``."""
        names = self.input.schema.names
        ends = [f"{names[c]}{f' {ms:+d} ms' if ms else ''}" for c, ms in self.expiry]
        return f"max({', '.join(ends)})" if len(ends) > 1 else ends[0]

    @functools.cached_property
    def schema(self) -> Schema:
        rank = (Field(self.rank_name, pa.int64(), False),) if self.emit_rank else ()
        return Schema(self.input.schema.fields + rank)


def changelog_mode(rel: Rel) -> ChangelogMode:
    """The row kinds ``rel`` produces: inserts only (append-only), or also retractions."""
    match rel:
        case Scan(table=table):
            return UPDATING if table.normalized else table.changelog
        case GroupAggregate():
            return UPDATING
        case Rank():
            return INSERT_DELETE  # a row enters the top N, or leaves it
        case Join(lookup=True, left=left) | Join(temporal=(_, _), left=left):
            # The right side is complete before any left row is matched: nothing is revised.
            return changelog_mode(left)
        case Join(kind=kind, left=left, right=right):
            # An outer join retracts a NULL-padded row when its first match arrives; a join of
            # updating inputs retracts the pairs of a retracted row. Pairs come and go whole.
            updating = kind != "inner" or is_updating(left) or is_updating(right)
            return INSERT_DELETE if updating else APPEND_ONLY
        case OverAggregate(input=child):
            return UPDATING if is_updating(child) else APPEND_ONLY
        case Union(all_inputs=children):
            return functools.reduce(ChangelogMode.union, (changelog_mode(c) for c in children), APPEND_ONLY)
        case Unary(input=child):
            return changelog_mode(child)
    return APPEND_ONLY


def is_updating(rel: Rel) -> bool:
    """Whether ``rel`` produces updates (rows that later rows retract), not only inserts."""
    return changelog_mode(rel).updating


def updating_source(rel: Rel) -> GroupAggregate | Join | Rank | Scan | None:
    """The operator below ``rel`` that makes it updating, for messages; None if it is append-only."""
    if isinstance(rel, GroupAggregate | Rank) or (isinstance(rel, Scan) and rel.table.changelog.updating) or (isinstance(rel, Join) and rel.kind != "inner" and not rel.lookup
                                                  and rel.temporal is None):
        return rel
    for child in rel.inputs:
        found = updating_source(child)
        if found is not None:
            return found
    return None
