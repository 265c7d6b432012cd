"""What every clause's binder shares: the scope an expression's names resolve in, and the small
helpers that name things in results and in messages."""

from __future__ import annotations

from collections.abc import Iterator

from clink import records
from clink.compiler import ast, ir
from clink.compiler import types as T
from clink.compiler.catalog import nearest
from clink.errors import Span


@records.record
class ScopeColumn:
    qualifier: str | None
    name: str
    field: ir.Field
    #: An event-time attribute: a table's watermark column, or window_time of a window. The rewrite
    #: bound_interval_joins reads the same from the plan (``time_attributes``).
    rowtime: bool = False


@records.record
class Scope:
    """The columns an expression may name: those of the FROM item, with its qualifier."""

    columns: tuple[ScopeColumn, ...]

    def qualifiers(self) -> set[str]:
        return {c.qualifier for c in self.columns if c.qualifier}


class Unresolved(Exception):
    """An unknown name was recorded; the enclosing expression cannot be typed."""


def did_you_mean(name: str, candidates: list[str], what: str = "names") -> str | None:
    near = nearest(name, candidates)
    if near:
        return f"did you mean {near!r}?"
    if candidates:
        shown = candidates if len(candidates) <= 12 else [*candidates[:12], "..."]
        return f"{what}: {', '.join(shown)}"
    return None


def derive_name(e: ast.Expr, position: int) -> str:
    match e:
        case ast.ColumnRef(name=name):
            return name
        case ast.FieldAccess(name=name):
            return name
    return f"EXPR${position}"


def unique_names(names: list[str]) -> tuple[str, ...]:
    """Make output names unique as Flink does: a repeated ``a`` becomes ``a0``, ``a1``..."""
    seen: set[str] = set()
    out = []
    for name in names:
        candidate, n = name, 0
        while candidate in seen:
            candidate = f"{name}{n}"
            n += 1
        seen.add(candidate)
        out.append(candidate)
    return tuple(out)


def describe(schema: ir.Schema) -> str:
    return ", ".join(f"{f.name} {T.sql_name(f.type)}" for f in schema.fields)


def updating_reason(producer: ir.Rel, where: Span | None) -> str:
    if isinstance(producer, ir.Rank):
        return f"its ROW_NUMBER() Top-N (at {where}) retracts a row when a better one enters the top"
    if isinstance(producer, ir.Scan):
        return (f"its table {producer.table.name!r} (at {where}) is a changelog: its connector reads updates and "
                "deletions")
    if isinstance(producer, ir.Join):
        return (f"its {producer.kind.upper()} JOIN (at {where}) retracts a NULL-padded row when the row's "
                "first match arrives")
    return f"its GROUP BY without a window (at {where}) revises earlier rows"


def ast_walk(node: object) -> Iterator[object]:
    yield node
    if records.has(type(node)):
        for field in records.fields(type(node)):
            value = getattr(node, field.name)
            for child in value if isinstance(value, tuple) else (value,):
                if isinstance(child, tuple):
                    for grandchild in child:
                        if isinstance(grandchild, ast.Node):
                            yield from ast_walk(grandchild)
                elif isinstance(child, ast.Node):
                    yield from ast_walk(child)

