"""Typed logical IR.

Every node knows its output type (expressions) or schema (relations) and the source span it
came from. Nodes are immutable; rewrites build new ones with ``attrs.evolve``. Spans are ignored
by equality, so a rewrite that only moves text positions is not a change.

Expressions refer to the columns of their input relation by position (``Column.index``), so a
rewrite that changes an input's columns must remap the expressions above it (``remap``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pyarrow as pa

from clink.errors import CompilerBug, Span

_span = attrs.field(eq=False, repr=False, default=None)


# ---------------------------------------------------------------- schemas


@attrs.frozen
class Field:
    name: str
    type: pa.DataType
    nullable: bool = True

    def to_arrow(self) -> pa.Field:
        return pa.field(self.name, self.type, nullable=self.nullable)


@attrs.frozen
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


@attrs.frozen(kw_only=True)
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


@attrs.frozen(kw_only=True)
class Column(Expr):
    index: int
    name: str


@attrs.frozen(kw_only=True)
class Literal(Expr):
    """A constant; ``value`` is a Python value of ``type`` (None for NULL)."""

    value: Any


@attrs.frozen(kw_only=True)
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
        return attrs.evolve(self, args=children)

    @property
    def deterministic(self) -> bool:
        return self.fn not in NONDETERMINISTIC and all(a.deterministic for a in self.args)


#: Functions whose value depends on when they run.
NONDETERMINISTIC = frozenset({"current_timestamp", "current_date", "current_time", "localtimestamp"})


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
            return attrs.evolve(e, index=mapping[e.index])
        return e

    return transform(expr, fn)


def substitute(expr: Expr, exprs: tuple[Expr, ...]) -> Expr:
    """Replace each ``Column(i)`` by ``exprs[i]``: inline a projection into the expression above it."""

    def fn(e: Expr) -> Expr:
        if isinstance(e, Column):
            replacement = exprs[e.index]
            # A plain column passed through keeps the position where the outer query named it.
            if isinstance(replacement, Column) and e.span is not None:
                return attrs.evolve(replacement, span=e.span)
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


def _is_boolean(instance: object, attribute: attrs.Attribute, value: Expr | None) -> None:
    # An invariant, not a user error: the binder rejects non-boolean conditions first.
    if value is not None and value.type != pa.bool_() and value.type != pa.null():
        raise CompilerBug(f"{type(instance).__name__}.{attribute.name} must be BOOLEAN, got {value.type}")


@attrs.frozen(kw_only=True)
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


@attrs.frozen(kw_only=True)
class Unary(Rel):
    """A relation over exactly one input."""

    input: Rel

    @property
    def inputs(self) -> tuple[Rel, ...]:
        return (self.input,)

    def with_inputs(self, inputs: tuple[Rel, ...]) -> Rel:
        (new_input,) = inputs
        return attrs.evolve(self, input=new_input)


@attrs.frozen
class TableInfo:
    """What a scan needs to know of a table: its connector, options and physical columns."""

    name: str
    connector: str
    options: tuple[tuple[str, str], ...]
    columns: Schema
    watermark: tuple[str, Expr] | None = None
    primary_key: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Scan(Rel):
    """Read ``columns`` (positions in the table's physical columns) of ``table``, keeping the
    rows for which ``predicate`` (over the scan's own output) is TRUE."""

    table: TableInfo
    columns: tuple[int, ...]
    predicate: Expr | None = attrs.field(default=None, validator=_is_boolean)

    @functools.cached_property
    def schema(self) -> Schema:
        return Schema(tuple(self.table.columns[i] for i in self.columns))


@attrs.frozen(kw_only=True)
class Filter(Unary):
    """Keep the rows of ``input`` whose ``predicate`` is TRUE; FALSE and NULL drop the row."""

    predicate: Expr = attrs.field(validator=_is_boolean)

    @functools.cached_property
    def schema(self) -> Schema:
        return self.input.schema


@attrs.frozen(kw_only=True)
class Project(Unary):
    """Compute ``exprs`` over each row of ``input``, naming the results ``names``."""

    exprs: tuple[Expr, ...]
    names: tuple[str, ...]

    @functools.cached_property
    def schema(self) -> Schema:
        return Schema(tuple(Field(n, e.type, e.nullable) for n, e in zip(self.names, self.exprs, strict=True)))


@attrs.frozen(kw_only=True)
class Calc(Unary):
    """A fused filter and projection: keep the rows where ``predicate`` is TRUE, then compute
    ``exprs`` (both over ``input``'s columns). Made by ``fuse_stateless``."""

    predicate: Expr | None = attrs.field(validator=_is_boolean)
    exprs: tuple[Expr, ...]
    names: tuple[str, ...]

    @functools.cached_property
    def schema(self) -> Schema:
        return Schema(tuple(Field(n, e.type, e.nullable) for n, e in zip(self.names, self.exprs, strict=True)))


# ---------------------------------------------------------------- sinks (statement roots)


@attrs.frozen(kw_only=True)
class Sink(Unary):
    """Write ``input`` to a table (``INSERT INTO``) or back to the caller (``collect``)."""

    name: str
    connector: str
    options: tuple[tuple[str, str], ...] = ()
    target: Schema | None = None

    @functools.cached_property
    def schema(self) -> Schema:
        return self.target if self.target is not None else self.input.schema
