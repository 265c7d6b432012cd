"""Syntax tree → typed IR: resolve names against the catalog, type every expression.

The binder walks a script statement by statement. DDL fills the catalog; ``SET`` fills the
configuration; each ``INSERT`` and bare ``SELECT`` becomes an ``ir.Sink`` over a typed relation.
Unknown names are collected within a statement and reported together, each with the nearest
known name suggested.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping

import attrs
import pyarrow as pa
import pyarrow.types as pt

from clink.compiler import ast, ir
from clink.compiler import types as T
from clink.compiler.catalog import Catalog, CatalogTable, CatalogView, nearest
from clink.compiler.functions import (
    AGGREGATES,
    FUNCTIONS,
    TABLE_FUNCTIONS,
    arithmetic,
    cast_to,
    common_of,
    extract,
)
from clink.errors import Span, SqlError, SqlErrors
from clink.runtime.connectors.base import ConnectorRegistry

__all__ = ["BoundScript", "bind_script"]


@attrs.frozen(kw_only=True)
class BoundStatement:
    """A statement that produces a pipeline: ``sink`` is its root; ``explain`` marks EXPLAIN."""

    sink: ir.Sink
    explain: bool = False
    span: Span | None = None


@attrs.frozen(kw_only=True)
class BoundScript:
    statements: tuple[BoundStatement, ...]
    config: tuple[tuple[str, str], ...]
    catalog: Catalog


def bind_script(script: ast.Script, connectors: ConnectorRegistry) -> BoundScript:
    binder = _Binder(connectors)
    out: list[BoundStatement] = []
    for stmt in script.statements:
        bound = binder.statement(stmt)
        if bound is not None:
            out.append(bound)
    return BoundScript(statements=tuple(out), config=tuple(binder.config.items()), catalog=binder.catalog)


@attrs.frozen
class _ScopeColumn:
    qualifier: str | None
    name: str
    field: ir.Field


@attrs.frozen
class _Scope:
    """The columns an expression may name: those of the FROM item, with its qualifier."""

    columns: tuple[_ScopeColumn, ...]

    def qualifiers(self) -> set[str]:
        return {c.qualifier for c in self.columns if c.qualifier}


_INTERVAL_MS = {
    "MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": 86_400_000,
    "WEEK": 7 * 86_400_000,
}
_INTERVAL_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}


class _Binder:
    def __init__(self, connectors: ConnectorRegistry) -> None:
        self.catalog = Catalog()
        self.connectors = connectors
        self.config: dict[str, str] = {}
        self.errors: list[SqlError] = []
        self.query_count = 0

    # ------------------------------------------------------------ statements

    def statement(self, stmt: ast.Statement) -> BoundStatement | None:
        self.errors = []
        match stmt:
            case ast.CreateTable():
                self.create_table(stmt)
                result = None
            case ast.CreateView():
                self.create_view(stmt)
                result = None
            case ast.SetStmt():
                self.config[stmt.key] = stmt.value
                result = None
            case ast.Insert():
                result = BoundStatement(sink=self.insert(stmt), span=stmt.span)
            case ast.Query():
                result = BoundStatement(sink=self.query_sink(stmt), span=stmt.span)
            case ast.Explain():
                inner = self.statement(stmt.statement)
                assert inner is not None
                result = attrs.evolve(inner, explain=True, span=stmt.span)
            case _:
                raise SqlError(f"{type(stmt).__name__} is not supported", stmt.span)
        self._raise_collected()
        return result

    def _raise_collected(self) -> None:
        if self.errors:
            errors, self.errors = self.errors, []
            errors.sort(key=lambda e: (e.span.line, e.span.col) if e.span else (0, 0))
            raise errors[0] if len(errors) == 1 else SqlErrors(errors)

    def create_table(self, stmt: ast.CreateTable) -> None:
        if self.catalog.lookup(stmt.name) is not None:
            if stmt.if_not_exists:
                return
            raise SqlError(f"table or view {stmt.name!r} already exists", stmt.span)
        physical: list[ir.Field] = []
        seen: set[str] = set()
        for col in stmt.columns:
            if col.name in seen:
                raise SqlError(f"column {col.name!r} is declared twice in table {stmt.name!r}", col.span)
            seen.add(col.name)
            if isinstance(col, ast.ColumnDef):
                physical.append(ir.Field(col.name, col.type, col.nullable))
        for key in stmt.primary_key:
            if key not in {f.name for f in physical}:
                raise SqlError(f"primary key column {key!r} is not a physical column of {stmt.name!r}", stmt.span,
                               _did_you_mean(key, [f.name for f in physical]))
        # Primary key columns are NOT NULL, as in Flink.
        physical = [attrs.evolve(f, nullable=False) if f.name in stmt.primary_key else f for f in physical]
        options = {p.key: p for p in stmt.options}
        connector = self._check_connector(stmt, options, ir.Schema(tuple(physical)))
        info = ir.TableInfo(name=stmt.name, connector=connector,
                            options=tuple((k, p.value) for k, p in options.items() if k != "connector"),
                            columns=ir.Schema(tuple(physical)), primary_key=stmt.primary_key)
        # Computed columns see the physical columns, in declaration order.
        scope = _Scope(tuple(_ScopeColumn(stmt.name, f.name, f) for f in physical))
        computed: list[tuple[str, ir.Expr]] = []
        for col in stmt.columns:
            if isinstance(col, ast.ComputedColumn):
                expr = self.expr(col.expr, scope)
                self._raise_collected()
                computed.append((col.name, expr))
        schema = ir.Schema(tuple(physical) + tuple(ir.Field(n, e.type, e.nullable) for n, e in computed))
        if stmt.watermark is not None:
            info = attrs.evolve(info, watermark=self._watermark(stmt, schema, computed, physical))
        self.catalog.tables[stmt.name] = CatalogTable(info=info, computed=tuple(computed), schema=schema,
                                                      definition=stmt)

    def _watermark(self, stmt: ast.CreateTable, schema: ir.Schema, computed, physical) -> tuple[str, ir.Expr]:
        wm = stmt.watermark
        assert wm is not None
        if wm.column not in schema.names:
            raise SqlError(f"the watermark column {wm.column!r} is not a column of {stmt.name!r}", wm.span,
                           _did_you_mean(wm.column, list(schema.names)))
        field = schema.fields[schema.names.index(wm.column)]
        if not pt.is_timestamp(field.type):
            raise SqlError(f"the watermark column {wm.column!r} must be a TIMESTAMP or TIMESTAMP_LTZ, "
                           f"got {T.sql_name(field.type)}", wm.span)
        scope = _Scope(tuple(_ScopeColumn(stmt.name, f.name, f) for f in schema.fields))
        expr = self.expr(wm.expr, scope)
        self._raise_collected()
        if not pt.is_timestamp(expr.type):
            raise SqlError(f"a watermark expression must be a TIMESTAMP, got {T.sql_name(expr.type)}", wm.expr.span,
                           f"for example: WATERMARK FOR {wm.column} AS {wm.column} - INTERVAL '5' SECOND")
        return wm.column, expr

    def _check_connector(self, stmt: ast.CreateTable, options: Mapping[str, ast.Property],
                         schema: ir.Schema) -> str:
        if "connector" not in options:
            raise SqlError(f"table {stmt.name!r} has no 'connector' option", stmt.span,
                           f"add WITH ('connector' = '...'); connectors: {', '.join(self._public_connectors())}")
        prop = options["connector"]
        connector = self.connectors.get(prop.value)
        if connector is None or prop.value == "collect":
            raise SqlError(f"unknown connector {prop.value!r}", prop.span,
                           _did_you_mean(prop.value, self._public_connectors(), "connectors"))
        specs = {*connector.source_options, *connector.sink_options}
        names = [f.name for f in schema.fields]
        errors = []
        for key, p in options.items():
            if key == "connector":
                continue
            if not any(s.matches(key, names) for s in specs):
                valid = sorted({s.name.replace("#", "<column>") for s in specs})
                near = nearest(key, valid)
                hint = (f"did you mean {near!r}? " if near else "") + f"options of {prop.value!r}: {', '.join(valid)}"
                errors.append(SqlError(f"unknown option {key!r} for connector {prop.value!r}", p.span, hint))
        for spec in specs:
            if spec.required and spec.name not in options:
                errors.append(SqlError(f"connector {prop.value!r} needs the option {spec.name!r}", stmt.span,
                                       spec.description))
            if spec.choices and spec.name in options:
                p = options[spec.name]
                if p.value.lower() not in {c.lower() for c in spec.choices}:
                    errors.append(SqlError(f"option {spec.name!r} must be one of {', '.join(spec.choices)}; "
                                           f"got {p.value!r}", p.span))
        if connector.validate is not None and not errors:
            values = {k: p.value for k, p in options.items() if k != "connector"}
            for key, message in connector.validate(values, schema.to_arrow(), "table").items():
                where = options[key].span if key in options else stmt.span
                errors.append(SqlError(message, where))
        if errors:
            raise errors[0] if len(errors) == 1 else SqlErrors(errors)
        return prop.value

    def _public_connectors(self) -> list[str]:
        return [n for n in self.connectors.names() if n != "collect"]

    def create_view(self, stmt: ast.CreateView) -> None:
        if self.catalog.lookup(stmt.name) is not None:
            if stmt.if_not_exists:
                return
            raise SqlError(f"table or view {stmt.name!r} already exists", stmt.span)
        rel = self.select(stmt.query)
        self._raise_collected()
        self.catalog.views[stmt.name] = CatalogView(name=stmt.name, rel=rel)

    def insert(self, stmt: ast.Insert) -> ir.Sink:
        target = self.catalog.lookup(stmt.table)
        span = stmt.table_span or stmt.span
        if target is None:
            raise SqlError(f"unknown table {stmt.table!r}", span,
                           _did_you_mean(stmt.table, self.catalog.names(), "tables"))
        if isinstance(target, CatalogView):
            raise SqlError(f"cannot INSERT INTO view {stmt.table!r}", span, "INSERT INTO a table")
        connector = self.connectors.get(target.info.connector)
        if connector is None or connector.create_sink is None:
            raise SqlError(f"table {stmt.table!r} uses connector {target.info.connector!r}, which cannot be written",
                           span)
        rel = self.select(stmt.query)
        self._raise_collected()
        columns = target.info.columns
        if len(rel.schema) != len(columns):
            raise SqlError(
                f"INSERT INTO {stmt.table} gives {len(rel.schema)} column{'s' if len(rel.schema) != 1 else ''}, "
                f"the table has {len(columns)}: {', '.join(columns.names)}", stmt.query.span)
        exprs = []
        for i, (got, want) in enumerate(zip(rel.schema.fields, columns.fields, strict=True)):
            # No span of its own: once merged, the column keeps the span of the select item it names.
            col = ir.Column(index=i, name=got.name, type=got.type, nullable=got.nullable, span=None)
            if not T.implicitly_castable(got.type, want.type):
                item = stmt.query.items[i] if i < len(stmt.query.items) else stmt.query
                raise SqlError(f"column {want.name!r} of {stmt.table!r} is {T.sql_name(want.type)}, "
                               f"but the query gives {T.sql_name(got.type)}", item.span,
                               f"CAST it: CAST(... AS {T.sql_name(want.type)})")
            exprs.append(cast_to(col, want.type))
        if any(not isinstance(e, ir.Column) for e in exprs) or rel.schema.names != columns.names:
            rel = ir.Project(input=rel, exprs=tuple(exprs), names=columns.names, span=stmt.query.span)
        return ir.Sink(input=rel, name=stmt.table, connector=target.info.connector, options=target.info.options,
                       target=columns, span=stmt.span)

    def query_sink(self, stmt: ast.Query) -> ir.Sink:
        rel = self.select(stmt.query)
        self._raise_collected()
        self.query_count += 1
        return ir.Sink(input=rel, name=f"query_{self.query_count}", connector="collect", span=stmt.span)

    # ------------------------------------------------------------ queries

    def select(self, q: ast.Select) -> ir.Rel:
        if q.group_by or q.having is not None:
            clause = "GROUP BY" if q.group_by else "HAVING"
            raise SqlError(f"{clause} is not supported yet", q.span,
                           "this version runs stateless pipelines: SELECT ... FROM ... WHERE")
        if q.distinct:
            raise SqlError("SELECT DISTINCT is not supported yet", q.span)
        rel, scope = self.from_item(q.from_)
        if q.where is not None:
            pred = self.expr(q.where, scope)
            if not (pt.is_boolean(pred.type) or T.is_null(pred.type)):
                self.errors.append(SqlError(f"WHERE needs a BOOLEAN condition, got {T.sql_name(pred.type)}",
                                            q.where.span))
            else:
                rel = ir.Filter(input=rel, predicate=cast_to(pred, pa.bool_()), span=q.where.span)
        exprs: list[ir.Expr] = []
        names: list[str] = []
        for item in q.items:
            match item:
                case ast.Star(qualifier=qualifier):
                    cols = [(i, c) for i, c in enumerate(scope.columns) if qualifier is None or c.qualifier == qualifier]
                    if qualifier is not None and not cols:
                        self.errors.append(SqlError(f"unknown table or alias {qualifier!r}", item.span,
                                                    _did_you_mean(qualifier, sorted(scope.qualifiers()))))
                    for i, c in cols:
                        exprs.append(ir.Column(index=i, name=c.name, type=c.field.type, nullable=c.field.nullable,
                                               span=item.span))
                        names.append(c.name)
                case ast.AliasedExpr(expr=e, alias=alias):
                    bound = self.expr(e, scope)
                    exprs.append(bound)
                    names.append(alias or _derive_name(e, len(names)))
        self._raise_collected()
        return ir.Project(input=rel, exprs=tuple(exprs), names=_unique(names), span=q.span)

    def from_item(self, item: ast.FromItem) -> tuple[ir.Rel, _Scope]:
        match item:
            case ast.TableRef(name=name):
                entry = self.catalog.lookup(name)
                if entry is None:
                    raise SqlError(f"unknown table {name!r}", item.span,
                                   _did_you_mean(name, self.catalog.names(), "tables and views"))
                qualifier = item.alias or name.split(".")[-1]
                if isinstance(entry, CatalogView):
                    rel = entry.rel
                else:
                    rel = self._scan(entry, item.span)
                return rel, _Scope(tuple(_ScopeColumn(qualifier, f.name, f) for f in rel.schema.fields))
            case ast.SubqueryRef(query=query, alias=alias):
                rel = self.select(query)
                return rel, _Scope(tuple(_ScopeColumn(alias, f.name, f) for f in rel.schema.fields))
            case ast.TableFunctionRef(call=call):
                if call.name in TABLE_FUNCTIONS:
                    raise SqlError(f"window table function {call.name} is not supported yet", call.span,
                                   "this version runs stateless pipelines")
                raise SqlError(f"unknown table function {call.name}", call.span,
                               f"table functions: {', '.join(sorted(TABLE_FUNCTIONS))}")
        raise SqlError(f"unsupported FROM item {type(item).__name__}", item.span)

    def _scan(self, table: CatalogTable, span: Span) -> ir.Rel:
        info = table.info
        rel: ir.Rel = ir.Scan(table=info, columns=tuple(range(len(info.columns))), span=span)
        if table.computed:
            exprs = tuple(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=span)
                          for i, f in enumerate(info.columns.fields))
            exprs += tuple(e for _, e in table.computed)
            rel = ir.Project(input=rel, exprs=exprs, names=table.schema.names, span=span)
        return rel

    # ------------------------------------------------------------ expressions

    def expr(self, e: ast.Expr, scope: _Scope) -> ir.Expr:
        """Bind ``e``; a mistake in it is recorded and ``e`` stands as a NULL so binding can go on."""
        try:
            return self._expr(e, scope)
        except _Unresolved:
            return ir.Literal(value=None, type=pa.null(), span=e.span)
        except SqlError as exc:
            # Keep going, so one pass reports every mistake in the statement.
            self.errors.append(exc)
            return ir.Literal(value=None, type=pa.null(), span=e.span)

    def _expr(self, e: ast.Expr, scope: _Scope) -> ir.Expr:
        match e:
            case ast.Literal():
                return _literal(e)
            case ast.IntervalLiteral():
                return _interval(e)
            case ast.ColumnRef(name=name):
                return self._column(name, None, scope, e.span)
            case ast.FieldAccess(expr=inner, name=field):
                if isinstance(inner, ast.ColumnRef) and inner.name in scope.qualifiers() and not any(
                        c.name == inner.name for c in scope.columns):
                    return self._column(field, inner.name, scope, e.span)
                base = self._expr(inner, scope)
                if not pt.is_struct(base.type):
                    raise SqlError(f"cannot access field {field!r} of {T.sql_name(base.type)}", e.span)
                names = [base.type.field(i).name for i in range(base.type.num_fields)]
                if field not in names:
                    raise SqlError(f"ROW has no field {field!r}", e.span, _did_you_mean(field, names, "fields"))
                idx = names.index(field)
                f = base.type.field(idx)
                return ir.Call(fn="field", args=(base,), params=(idx,), type=f.type,
                               nullable=base.nullable or f.nullable, span=e.span)
            case ast.Subscript(expr=inner, index=index):
                base = self._expr(inner, scope)
                idx = self._expr(index, scope)
                if pt.is_list(base.type):
                    if not T.is_integer(idx.type):
                        raise SqlError(f"an ARRAY index must be an integer, got {T.sql_name(idx.type)}", index.span)
                    return ir.Call(fn="element_at", args=(base, cast_to(idx, pa.int64())), type=base.type.value_type,
                                   nullable=True, span=e.span)
                if pt.is_map(base.type):
                    if not isinstance(idx, ir.Literal):
                        raise SqlError("a MAP key in [...] must be a constant", index.span)
                    return ir.Call(fn="map_get", args=(base,), params=(idx.value,), type=base.type.item_type,
                                   nullable=True, span=e.span)
                raise SqlError(f"cannot index into {T.sql_name(base.type)}", e.span)
            case ast.BinaryOp(op="||", left=left, right=right):
                lhs, rhs = self._expr(left, scope), self._expr(right, scope)
                for side in (lhs, rhs):
                    if not (T.is_string(side.type) or T.is_null(side.type)):
                        raise SqlError(f"'||' joins strings, got {T.sql_name(side.type)}", side.span,
                                       "CAST it AS STRING")
                return ir.Call(fn="concat", args=(cast_to(lhs, pa.string()), cast_to(rhs, pa.string())),
                               type=pa.string(), nullable=lhs.nullable or rhs.nullable, span=e.span)
            case ast.BinaryOp(op=op, left=left, right=right):
                return arithmetic(op, self._expr(left, scope), self._expr(right, scope), e.span)
            case ast.UnaryOp(op=op, operand=operand):
                arg = self._expr(operand, scope)
                if not (T.is_numeric(arg.type) or pt.is_duration(arg.type) or T.is_null(arg.type)):
                    raise SqlError(f"cannot apply unary '{op}' to {T.sql_name(arg.type)}", e.span)
                if op == "+":
                    return arg
                return ir.Call(fn="negate", args=(arg,), type=arg.type, nullable=arg.nullable, span=e.span)
            case ast.Comparison(op=op, left=left, right=right):
                return self._compare(op, self._expr(left, scope), self._expr(right, scope), e.span)
            case ast.And(left=left, right=right) | ast.Or(left=left, right=right):
                word = "AND" if isinstance(e, ast.And) else "OR"
                lhs = self._boolean(self._expr(left, scope), word)
                rhs = self._boolean(self._expr(right, scope), word)
                return ir.Call(fn=word.lower(), args=(lhs, rhs), type=pa.bool_(),
                               nullable=lhs.nullable or rhs.nullable, span=e.span)
            case ast.Not(operand=operand):
                arg = self._boolean(self._expr(operand, scope), "NOT")
                return ir.Call(fn="not", args=(arg,), type=pa.bool_(), nullable=arg.nullable, span=e.span)
            case ast.IsNull(operand=operand, negated=negated):
                arg = self._expr(operand, scope)
                return ir.Call(fn="is_not_null" if negated else "is_null", args=(arg,), type=pa.bool_(),
                               nullable=False, span=e.span)
            case ast.IsBool(operand=operand, value=value, negated=negated):
                arg = self._boolean(self._expr(operand, scope), "IS TRUE/FALSE")
                fn = f"is_{'not_' if negated else ''}{'true' if value else 'false'}"
                return ir.Call(fn=fn, args=(arg,), type=pa.bool_(), nullable=False, span=e.span)
            case ast.Between(operand=operand, low=low, high=high, negated=negated):
                arg = self._expr(operand, scope)
                lo = self._compare(">=", arg, self._expr(low, scope), e.span)
                hi = self._compare("<=", arg, self._expr(high, scope), e.span)
                both = ir.Call(fn="and", args=(lo, hi), type=pa.bool_(), nullable=lo.nullable or hi.nullable,
                               span=e.span)
                if negated:
                    return ir.Call(fn="not", args=(both,), type=pa.bool_(), nullable=both.nullable, span=e.span)
                return both
            case ast.InList(operand=operand, items=items, negated=negated):
                arg = self._expr(operand, scope)
                values = [self._expr(i, scope) for i in items]
                typ = common_of("IN", [arg, *values])
                call = ir.Call(fn="in", args=(cast_to(arg, typ), *(cast_to(v, typ) for v in values)),
                               type=pa.bool_(), nullable=arg.nullable or any(v.nullable for v in values),
                               span=e.span)
                if negated:
                    return ir.Call(fn="not", args=(call,), type=pa.bool_(), nullable=call.nullable, span=e.span)
                return call
            case ast.Like(operand=operand, pattern=pattern, escape=escape, negated=negated):
                arg = self._expr(operand, scope)
                pat = self._expr(pattern, scope)
                if not (T.is_string(arg.type) or T.is_null(arg.type)):
                    raise SqlError(f"LIKE needs a STRING on its left, got {T.sql_name(arg.type)}", operand.span)
                if not isinstance(pat, ir.Literal) or not (T.is_string(pat.type) or T.is_null(pat.type)):
                    raise SqlError("the LIKE pattern must be a constant string", pattern.span)
                if pat.value is None:
                    return ir.Literal(value=None, type=pa.bool_(), span=e.span)
                call = ir.Call(fn="like", args=(cast_to(arg, pa.string()),), params=(pat.value, escape),
                               type=pa.bool_(), nullable=arg.nullable, span=e.span)
                if negated:
                    return ir.Call(fn="not", args=(call,), type=pa.bool_(), nullable=call.nullable, span=e.span)
                return call
            case ast.Cast(operand=operand, type=typ, try_=try_):
                arg = self._expr(operand, scope)
                if not T.can_cast(arg.type, typ):
                    raise SqlError(f"cannot CAST {T.sql_name(arg.type)} to {T.sql_name(typ)}", e.span)
                if isinstance(arg, ir.Literal) and arg.value is None:
                    return ir.Literal(value=None, type=typ, span=e.span)
                return ir.Call(fn="cast", args=(arg,), params=(try_,), type=typ,
                               nullable=arg.nullable or try_ or T.is_string(arg.type), span=e.span)
            case ast.Extract(unit=unit, operand=operand):
                return extract(unit, self._expr(operand, scope), e.span)
            case ast.Case():
                return self._case(e, scope)
            case ast.CurrentTime(kind=kind):
                fn, typ = {
                    "CURRENT_TIMESTAMP": ("current_timestamp", pa.timestamp("ms", tz="UTC")),
                    "NOW": ("current_timestamp", pa.timestamp("ms", tz="UTC")),
                    "LOCALTIMESTAMP": ("localtimestamp", pa.timestamp("ms")),
                    "CURRENT_DATE": ("current_date", pa.date32()),
                    "CURRENT_TIME": ("current_time", pa.time32("ms")),
                }[kind]
                return ir.Call(fn=fn, args=(), type=typ, nullable=False, span=e.span)
            case ast.FunctionCall():
                return self._call(e, scope)
            case ast.Descriptor() | ast.TableArg():
                raise SqlError("DESCRIPTOR(...) and TABLE t are arguments of window table functions only", e.span)
            case ast.QualifiedStar():
                raise SqlError("'.*' is allowed only as a select item", e.span)
        raise SqlError(f"unsupported expression {type(e).__name__}", e.span)

    def _column(self, name: str, qualifier: str | None, scope: _Scope, span: Span) -> ir.Expr:
        matches = [(i, c) for i, c in enumerate(scope.columns)
                   if c.name == name and (qualifier is None or c.qualifier == qualifier)]
        if len(matches) > 1:
            raise SqlError(f"column {name!r} is ambiguous", span, "qualify it with its table or alias")
        if not matches:
            candidates = [c.name for c in scope.columns if qualifier is None or c.qualifier == qualifier]
            tables = sorted(scope.qualifiers())
            where = f" in table {qualifier or tables[0]!r}" if (qualifier or len(tables) == 1) else ""
            near = nearest(name, candidates)
            owner = f"columns of {qualifier or tables[0]!r}" if (qualifier or len(tables) == 1) else "columns"
            listing = ", ".join(candidates if len(candidates) <= 12 else [*candidates[:12], "..."])
            if near:
                hint = f"did you mean {near!r}? ({owner}: {listing})"
            else:
                hint = f"{owner}: {listing}" if candidates else ""
            self.errors.append(SqlError(f"unknown column {name!r}{where}", span, hint.strip() or None))
            raise _Unresolved
        i, c = matches[0]
        return ir.Column(index=i, name=c.name, type=c.field.type, nullable=c.field.nullable, span=span)

    def _boolean(self, expr: ir.Expr, where: str) -> ir.Expr:
        if T.is_null(expr.type):
            return cast_to(expr, pa.bool_())
        if not pt.is_boolean(expr.type):
            raise SqlError(f"{where} needs BOOLEAN operands, got {T.sql_name(expr.type)}", expr.span)
        return expr

    def _compare(self, op: str, left: ir.Expr, right: ir.Expr, span: Span) -> ir.Expr:
        typ = T.common_type(left.type, right.type)
        if typ is None or pt.is_struct(typ) or pt.is_list(typ) or pt.is_map(typ):
            raise SqlError(f"cannot compare {T.sql_name(left.type)} with {T.sql_name(right.type)}", span,
                           "CAST one side to the other's type")
        if T.is_null(typ):
            return ir.Literal(value=None, type=pa.bool_(), span=span)
        fn = {"=": "eq", "<>": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}[op]
        return ir.Call(fn=fn, args=(cast_to(left, typ), cast_to(right, typ)), type=pa.bool_(),
                       nullable=left.nullable or right.nullable, span=span)

    def _case(self, e: ast.Case, scope: _Scope) -> ir.Expr:
        conditions: list[ir.Expr] = []
        operand = self._expr(e.operand, scope) if e.operand is not None else None
        for cond, _ in e.whens:
            c = self._expr(cond, scope)
            if operand is not None:
                c = self._compare("=", operand, c, cond.span)
            conditions.append(self._boolean(c, "WHEN"))
        results = [self._expr(r, scope) for _, r in e.whens]
        if e.else_ is not None:
            results.append(self._expr(e.else_, scope))
        typ = common_of("CASE", results)
        if T.is_null(typ):
            return ir.Literal(value=None, type=pa.null(), span=e.span)
        nullable = e.else_ is None or any(r.nullable for r in results)
        args = (*conditions, *(cast_to(r, typ) for r in results))
        return ir.Call(fn="case", args=args, params=(len(conditions), e.else_ is not None), type=typ,
                       nullable=nullable, span=e.span)

    def _call(self, e: ast.FunctionCall, scope: _Scope) -> ir.Expr:
        span = e.name_span or e.span
        if e.name in AGGREGATES:
            raise SqlError(f"aggregate function {e.name} is not supported yet", span,
                           "this version runs stateless pipelines: GROUP BY and OVER come later")
        if e.name in TABLE_FUNCTIONS:
            raise SqlError(f"{e.name} is a table function: use it in FROM TABLE({e.name}(...))", span)
        binder = FUNCTIONS.get(e.name)
        if binder is None:
            raise SqlError(f"unknown function {e.name}", span,
                           _did_you_mean(e.name, sorted(FUNCTIONS), "functions"))
        if e.distinct or e.star or e.over is not None:
            raise SqlError(f"{e.name} is a scalar function: DISTINCT, * and OVER do not apply", e.span)
        args = [self._expr(a, scope) for a in e.args]
        return binder(e.name, args, e.span)


class _Unresolved(Exception):
    """An unknown name was recorded; the enclosing expression cannot be typed."""


def _did_you_mean(name: str, candidates: list[str], what: str = "names") -> str | None:
    near = nearest(name, candidates)
    if near:
        return f"did you mean {near!r}?"
    if candidates:
        shown = candidates if len(candidates) <= 12 else [*candidates[:12], "..."]
        return f"{what}: {', '.join(shown)}"
    return None


def _derive_name(e: ast.Expr, position: int) -> str:
    match e:
        case ast.ColumnRef(name=name):
            return name
        case ast.FieldAccess(name=name):
            return name
    return f"EXPR${position}"


def _unique(names: list[str]) -> tuple[str, ...]:
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


def _literal(e: ast.Literal) -> ir.Expr:
    match e.kind:
        case "int":
            v = e.value
            if -(2**31) <= v < 2**31:
                return ir.Literal(value=v, type=pa.int32(), nullable=False, span=e.span)
            if -(2**63) <= v < 2**63:
                return ir.Literal(value=v, type=pa.int64(), nullable=False, span=e.span)
            raise SqlError(f"integer literal {v} is out of range for BIGINT", e.span)
        case "decimal":
            # A literal with a decimal point or an exponent is a DOUBLE.
            return ir.Literal(value=float(e.value), type=pa.float64(), nullable=False, span=e.span)
        case "string":
            return ir.Literal(value=e.value, type=pa.string(), nullable=False, span=e.span)
        case "bool":
            return ir.Literal(value=e.value, type=pa.bool_(), nullable=False, span=e.span)
        case "null":
            return ir.Literal(value=None, type=pa.null(), nullable=True, span=e.span)
        case "date":
            return ir.Literal(value=e.value, type=pa.date32(), nullable=False, span=e.span)
        case "time":
            return ir.Literal(value=e.value, type=pa.time64("us") if e.value.microsecond % 1000 else pa.time32("ms"),
                              nullable=False, span=e.span)
        case "timestamp" | "timestamp_ltz":
            value, precision = e.value
            typ = T.timestamp_type(precision, local_time_zone=e.kind == "timestamp_ltz")
            if e.kind == "timestamp_ltz":
                value = value.replace(tzinfo=dt.timezone.utc)
            return ir.Literal(value=value, type=typ, nullable=False, span=e.span)
    raise SqlError(f"unsupported literal {e.kind}", e.span)


_DAY_TIME = re.compile(r"^\s*(?P<sign>[+-])?(?:(?P<d>\d+)\s+)?(?P<h>\d+)(?::(?P<m>\d+)(?::(?P<s>\d+(?:\.\d+)?))?)?\s*$")


def _interval(e: ast.IntervalLiteral) -> ir.Expr:
    text = e.text.strip()
    if e.unit in _INTERVAL_MONTHS:
        try:
            if e.to_unit == "MONTH":
                years, _, months = text.partition("-")
                total = int(years) * 12 + int(months or 0)
            else:
                total = int(text) * _INTERVAL_MONTHS[e.unit]
        except ValueError:
            raise SqlError(f"{e.text!r} is not a number of {e.unit.lower()}s", e.span) from None
        return ir.Literal(value=(total, 0, 0), type=pa.month_day_nano_interval(), nullable=False, span=e.span)
    if e.unit not in _INTERVAL_MS:
        raise SqlError(f"unsupported interval unit {e.unit}", e.span)
    try:
        if e.to_unit is None:
            ms = round(float(text) * _INTERVAL_MS[e.unit])
        else:
            m = _DAY_TIME.match(text)
            if not m:
                raise ValueError
            parts = {"DAY": m["d"], "HOUR": m["h"], "MINUTE": m["m"], "SECOND": m["s"]}
            # 'd hh:mm:ss' is read from the leading unit: INTERVAL '1:30' HOUR TO MINUTE.
            order = ["DAY", "HOUR", "MINUTE", "SECOND"]
            values = [v for v in (m["d"], m["h"], m["m"], m["s"]) if v is not None]
            units = order[order.index(e.unit):][: len(values)]
            ms = round(sum(float(v) * _INTERVAL_MS[u] for v, u in zip(values, units, strict=False)))
            del parts
            if m["sign"] == "-":
                ms = -ms
    except ValueError:
        raise SqlError(f"{e.text!r} is not an interval of {e.unit}{' TO ' + e.to_unit if e.to_unit else ''}",
                       e.span) from None
    return ir.Literal(value=ms, type=pa.duration("ms"), nullable=False, span=e.span)
