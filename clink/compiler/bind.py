"""Syntax tree → typed IR: resolve names against the catalog, type every expression.

The binder walks a script statement by statement. DDL fills the catalog; ``SET`` fills the
configuration; each ``INSERT`` and bare ``SELECT`` becomes an ``ir.Sink`` over a typed relation.
Unknown names are collected within a statement and reported together, each with the nearest
known name suggested.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Mapping

import attrs
import pyarrow as pa
import pyarrow.types as pt

from clink.compiler import ast, ir, udfs
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
from clink.runtime.settings import SETTINGS, check_setting, close_settings, parse_duration
from clink.runtime.connectors.base import PARTITION_COLUMNS_OPTION, PRIMARY_KEY_OPTION, ConnectorRegistry
from clink.runtime.udf import FunctionRegistry

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
    #: Where each Python UDF of CREATE FUNCTION comes from (``module:attribute``), by name.
    udf_paths: tuple[str, ...] = ()


def bind_script(script: ast.Script, connectors: ConnectorRegistry,
                functions: FunctionRegistry | None = None) -> BoundScript:
    """Bind every statement; ``functions`` are the Python UDFs the caller gives (besides those
    the script creates with ``CREATE FUNCTION``)."""
    binder = _Binder(connectors, functions or FunctionRegistry())
    out: list[BoundStatement] = []
    for stmt in script.statements:
        bound = binder.statement(stmt)
        if bound is not None:
            out.append(bound)
    paths = tuple(f"{u.ref.name}={u.ref.module}:{u.ref.attribute}" for u in binder.udfs.values())
    return BoundScript(statements=tuple(out), config=tuple(binder.config.items()), catalog=binder.catalog,
                       udf_paths=paths)


@attrs.frozen
class _ScopeColumn:
    qualifier: str | None
    name: str
    field: ir.Field
    #: An event-time attribute: a table's watermark column, or window_time of a window.
    rowtime: bool = False


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
    def __init__(self, connectors: ConnectorRegistry, functions: FunctionRegistry) -> None:
        self.catalog = Catalog()
        self.connectors = connectors
        self.functions = functions
        #: UDFs from CREATE FUNCTION, by upper-case name.
        self.udfs: dict[str, udfs.BoundUdf] = {}
        self.config: dict[str, str] = {}
        self.errors: list[SqlError] = []
        self.query_count = 0
        self._agg: _AggContext | None = None
        self._over: _OverContext | None = None
        #: The UID hint of each SELECT being bound, innermost last.
        self._uids: list[str | None] = []

    # ------------------------------------------------------------ statements

    def set(self, stmt: ast.SetStmt) -> None:
        """Take a SET of a setting clink implements; refuse any other (it would do nothing)."""
        problem = check_setting(stmt.key, stmt.value)
        if problem is not None:
            known = stmt.key in SETTINGS
            close = close_settings(stmt.key)
            hint = (f"did you mean {', '.join(repr(c) for c in close)}?" if close and not known
                    else None if known else "the settings clink implements are listed in docs/sql.md#configuration")
            raise SqlError(problem, (stmt.value_span if known else stmt.key_span) or stmt.span, hint)
        self.config[stmt.key] = stmt.value

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
                self.set(stmt)
                result = None
            case ast.CreateFunction():
                self.create_function(stmt)
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

    def create_function(self, stmt: ast.CreateFunction) -> None:
        key = stmt.name.upper()
        if _is_builtin(key):
            raise SqlError(f"{stmt.name} is a built-in function", stmt.span, "give the Python function another name")
        if key in self.udfs or self.functions.get(key) is not None:
            if stmt.if_not_exists:
                return
            raise SqlError(f"function {stmt.name} already exists", stmt.span, "use CREATE FUNCTION IF NOT EXISTS")
        self.udfs[key] = udfs.create_function(stmt)

    def _udf(self, name: str, span: Span) -> udfs.BoundUdf | None:
        if name in self.udfs:
            return self.udfs[name]
        f = self.functions.get(name)
        if f is None:
            return None
        if _is_builtin(name):
            raise SqlError(f"{name} is a built-in function, and also the name of a Python function given to "
                           "clink", span, "register the Python function under another name: clink.udf(..., name=...)")
        return udfs.registry_function(f, span)

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
        idle = options.get("scan.watermark.idle-timeout")
        partition_options = self._partitioned_by(stmt, connector, options, ir.Schema(tuple(physical)))
        registered = self.connectors.get(connector)
        if stmt.primary_key and registered is not None and registered.upserts:
            partition_options += ((PRIMARY_KEY_OPTION, json.dumps(list(stmt.primary_key))),)
        info = ir.TableInfo(name=stmt.name, connector=connector,
                            options=tuple((k, p.value) for k, p in options.items()
                                          if k != "connector" and k not in SOURCE_OPTIONS) + partition_options,
                            columns=ir.Schema(tuple(physical)), primary_key=stmt.primary_key,
                            idle_timeout=parse_duration(idle.value) if idle is not None else None)
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
        # The source evaluates the watermark on the batches it reads, before computed columns
        # exist: express it over the physical columns.
        physical_exprs = tuple(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=wm.span)
                               for i, f in enumerate(physical))
        expr = ir.substitute(expr, physical_exprs + tuple(e for _, e in computed))
        return wm.column, expr

    def _partitioned_by(self, stmt: ast.CreateTable, connector: str, options: Mapping[str, ast.Property],
                        schema: ir.Schema) -> tuple[tuple[str, str], ...]:
        """Check PARTITIONED BY; the partition columns travel to the sink as one more option."""
        if not stmt.partitioned_by:
            return ()
        names = list(schema.names)
        if connector not in PARTITIONED_CONNECTORS:
            raise SqlError(f"table {stmt.name!r}: the {connector!r} connector does not write partitioned tables",
                           stmt.span, "remove PARTITIONED BY, or use the 'filesystem' connector")
        seen: set[str] = set()
        for column in stmt.partitioned_by:
            if column not in names:
                raise SqlError(f"partition column {column!r} is not a physical column of {stmt.name!r}",
                               stmt.span, _did_you_mean(column, names))
            if column in seen:
                raise SqlError(f"partition column {column!r} is listed twice in PARTITIONED BY of {stmt.name!r}",
                               stmt.span)
            seen.add(column)
        if len(seen) == len(names):
            raise SqlError(f"table {stmt.name!r}: every column is a partition column, so the files would hold "
                           "no column", stmt.span, "leave at least one column out of PARTITIONED BY")
        value = json.dumps(list(stmt.partitioned_by))
        registered = self.connectors.get(connector)
        if registered is not None and registered.validate is not None:
            values = {k: p.value for k, p in options.items() if k != "connector"}
            values[PARTITION_COLUMNS_OPTION] = value
            problems = registered.validate(values, schema.to_arrow(), "table")
            if PARTITION_COLUMNS_OPTION in problems:
                raise SqlError(f"table {stmt.name!r}: {problems[PARTITION_COLUMNS_OPTION]}", stmt.span)
        return ((PARTITION_COLUMNS_OPTION, value),)

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
            if key in SOURCE_OPTIONS:
                try:
                    SOURCE_OPTIONS[key](p.value)
                except ValueError as exc:
                    errors.append(SqlError(f"option {key!r}: {exc}", p.span))
                continue
            if not any(s.matches(key, names) for s in specs):
                valid = sorted({s.name.replace("#", "<column>") for s in specs})
                near = nearest(key, valid)
                hint = (f"did you mean {near!r}? " if near else "") + (
                    f"options of {prop.value!r}: {', '.join(valid)}" if valid
                    else f"the {prop.value!r} connector takes no other options")
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
        rel, rowtime = self._query(stmt.query)
        self._raise_collected()
        self.catalog.views[stmt.name] = CatalogView(name=stmt.name, rel=rel, rowtime=rowtime)

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
        check_ranks_limited(rel)
        if ir.is_updating(rel) and connector.upserts and not target.info.primary_key:
            producer = ir.updating_source(rel)
            raise SqlError(f"table {stmt.table!r} (connector {target.info.connector!r}) takes updates only by a "
                           f"primary key, and declares none; the query produces updates: "
                           f"{_updating_reason(producer, producer.span)}", span,
                           f"declare the key the rows are unique by: PRIMARY KEY (...) NOT ENFORCED in CREATE TABLE "
                           f"{stmt.table}")
        if ir.is_updating(rel) and not (connector.accepts_updates or connector.upserts):
            producer = ir.updating_source(rel)
            takers = ", ".join(sorted(n for n in self.connectors.names()
                                      if (c := self.connectors.get(n)).accepts_updates and c.create_sink))
            upserters = ", ".join(sorted(n for n in self.connectors.names() if self.connectors.get(n).upserts))
            if upserters:
                takers += f"; with a PRIMARY KEY: {upserters}"
            raise SqlError(f"table {stmt.table!r} (connector {target.info.connector!r}) takes only inserts, but the "
                           f"query produces updates: {_updating_reason(producer, producer.span)}", span,
                           f"write it to a connector that takes updates ({takers}), or aggregate over windows, "
                           "whose results are final")
        columns = target.info.columns
        if len(rel.schema) != len(columns):
            raise SqlError(
                f"INSERT INTO {stmt.table} gives {len(rel.schema)} column{'s' if len(rel.schema) != 1 else ''}, "
                f"the table has {len(columns)}: {', '.join(columns.names)}", stmt.query.span)
        exprs = []
        for i, (got, want) in enumerate(zip(rel.schema.fields, columns.fields, strict=True)):
            # No span of its own: once merged, the column keeps the span of the select item it names.
            col = ir.Column(index=i, name=got.name, type=got.type, nullable=got.nullable, span=None)
            if not T.assignable(got.type, want.type):
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
        check_ranks_limited(rel)
        self.query_count += 1
        return ir.Sink(input=rel, name=f"query_{self.query_count}", connector="collect", span=stmt.span)

    # ------------------------------------------------------------ queries

    def select(self, q: ast.Select | ast.Union) -> ir.Rel:
        return self._query(q)[0]

    def _query(self, q: ast.Select | ast.Union) -> tuple[ir.Rel, frozenset[str]]:
        if isinstance(q, ast.Select):
            return self._select(q)
        left, left_times = self._query(q.left)
        right, right_times = self._query(q.right)
        if len(left.schema) != len(right.schema):
            raise SqlError(f"the two sides of UNION ALL have {len(left.schema)} and {len(right.schema)} columns",
                           q.right.span)
        types = []
        for i, (a, b) in enumerate(zip(left.schema.fields, right.schema.fields, strict=True)):
            common = T.common_type(a.type, b.type)
            if common is None:
                raise SqlError(f"column {i + 1} of UNION ALL is {T.sql_name(a.type)} on the left and "
                               f"{T.sql_name(b.type)} on the right", q.right.span, "CAST one side")
            types.append(common if not T.is_null(common) else pa.int32())
        sides = [self._cast_columns(side, types, left.schema.names) for side in (left, right)]
        inputs: list[ir.Rel] = []
        for side in sides:
            inputs.extend(side.all_inputs if isinstance(side, ir.Union) else (side,))
        rowtime = frozenset(name for k, name in enumerate(left.schema.names)
                            if name in left_times and right.schema.names[k] in right_times)
        return ir.Union(all_inputs=tuple(inputs), span=q.span), rowtime

    def _cast_columns(self, rel: ir.Rel, types: list[pa.DataType], names: tuple[str, ...]) -> ir.Rel:
        """``rel`` with its columns cast to ``types`` and named ``names`` (a Project if needed)."""
        if [f.type for f in rel.schema.fields] == types and rel.schema.names == names:
            return rel
        exprs = tuple(cast_to(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=None), t)
                      for i, (f, t) in enumerate(zip(rel.schema.fields, types, strict=True)))
        return ir.Project(input=rel, exprs=exprs, names=names, span=rel.span)

    @property
    def _uid(self) -> str | None:
        """The UID hint of the SELECT being bound (None: its operators are named by what they do)."""
        return self._uids[-1] if self._uids else None

    def _select(self, q: ast.Select) -> tuple[ir.Rel, frozenset[str]]:
        """Bind a query; also return the names of its output columns that carry event time."""
        # The block's stateful operators (its joins, aggregation, OVER, Top-N) take its UID hint;
        # those of a subquery take the subquery's own.
        self._uids.append(q.uid)
        try:
            return self._select_block(q)
        finally:
            self._uids.pop()

    def _select_block(self, q: ast.Select) -> tuple[ir.Rel, frozenset[str]]:
        if q.distinct:
            raise SqlError("SELECT DISTINCT is not supported yet", q.span)
        if isinstance(q.from_, ast.Join):
            # The WHERE of a join is bound with it: its conditions become join keys or move below.
            rel, scope = self._join(q.from_, q.where)
        else:
            rel, scope = self.from_item(q.from_)
        if q.where is not None and not isinstance(q.from_, ast.Join):
            pred = self.expr(q.where, scope)
            if not (pt.is_boolean(pred.type) or T.is_null(pred.type)):
                self.errors.append(SqlError(f"WHERE needs a BOOLEAN condition, got {T.sql_name(pred.type)}",
                                            q.where.span))
            else:
                pred = cast_to(pred, pa.bool_())
                ranked, rest = _take_rank_limit(rel, ir.conjuncts(pred))
                if ranked is rel:
                    rel = ir.Filter(input=rel, predicate=pred, span=q.where.span)
                else:
                    rel = _filter(ranked, rest)
        if q.group_by or q.having is not None or _has_aggregate(q.items):
            return self._aggregate(q, rel, scope)
        if any(_is_row_number(item) for item in q.items):
            return self._row_number(q, rel, scope), frozenset()
        if any(isinstance(n, ast.FunctionCall) and n.over is not None for item in q.items for n in _ast_walk(item)):
            return self._over_aggregate(q, rel, scope)
        if isinstance(rel, ir.WindowTVF) and rel.window.kind == "session":
            raise SqlError("a SESSION window is only usable with GROUP BY window_start, window_end", q.from_.span)
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
        unique = _unique(names)
        rowtime = frozenset(n for n, e in zip(unique, exprs, strict=True)
                            if isinstance(e, ir.Column) and scope.columns[e.index].rowtime)
        return ir.Project(input=rel, exprs=tuple(exprs), names=unique, span=q.span), rowtime

    def from_item(self, item: ast.FromItem) -> tuple[ir.Rel, _Scope]:
        match item:
            case ast.TableRef(name=name):
                if item.as_of is not None:
                    raise SqlError("FOR SYSTEM_TIME AS OF belongs to the right side of a JOIN", item.as_of.span)
                entry = self.catalog.lookup(name)
                if entry is None:
                    raise SqlError(f"unknown table {name!r}", item.span,
                                   _did_you_mean(name, self.catalog.names(), "tables and views"))
                qualifier = item.alias or name.split(".")[-1]
                if isinstance(entry, CatalogView):
                    rel, rowtime = entry.rel, entry.rowtime
                else:
                    rel = self._scan(entry, item.span)
                    rowtime = frozenset([entry.info.watermark[0]]) if entry.info.watermark else frozenset()
                return rel, _Scope(tuple(_ScopeColumn(qualifier, f.name, f, f.name in rowtime)
                                         for f in rel.schema.fields))
            case ast.SubqueryRef(query=query, alias=alias):
                rel, rowtime = self._query(query)
                return rel, _Scope(tuple(_ScopeColumn(alias, f.name, f, f.name in rowtime) for f in rel.schema.fields))
            case ast.Join():
                return self._join(item, None)
            case ast.TableFunctionRef(call=call):
                if call.name in TABLE_FUNCTIONS:
                    return self._window_tvf(call, item.alias)
                raise SqlError(f"unknown table function {call.name}", call.name_span or call.span,
                               f"table functions: {', '.join(sorted(TABLE_FUNCTIONS))}")
        raise SqlError(f"unsupported FROM item {type(item).__name__}", item.span)

    # ------------------------------------------------------------ ranking

    def _row_number(self, q: ast.Select, rel: ir.Rel, scope: _Scope) -> ir.Rel:
        """``SELECT ..., ROW_NUMBER() OVER (PARTITION BY p ORDER BY o) AS rn FROM ...``: the select
        list, the partition and order expressions as one projection, a Rank over it, and the
        select list again in its order. The query above must keep ``rn <= N`` (``_take_rank_limit``)."""
        calls = [item for item in q.items if _is_row_number(item)]
        if len(calls) > 1:
            raise SqlError("only one ROW_NUMBER() per SELECT is supported", calls[1].span)
        call: ast.FunctionCall = calls[0].expr
        over = call.over
        if call.args or call.distinct or call.star:
            raise SqlError("ROW_NUMBER() takes no arguments", call.span)
        if over.frame is not None:
            raise SqlError("ROW_NUMBER() OVER (...) takes no frame (ROWS/RANGE ...)", over.span)
        if ir.is_updating(rel):
            producer = ir.updating_source(rel)
            raise SqlError("ROW_NUMBER() over an updating input is not supported yet", call.span,
                           f"the input produces updates: {_updating_reason(producer, producer.span)}")
        if not over.order_by:
            raise SqlError("ROW_NUMBER() needs ORDER BY in its OVER (...)", over.span,
                           "e.g. OVER (PARTITION BY auction ORDER BY price DESC)")
        exprs: list[ir.Expr] = []
        names: list[str] = []
        slots: list[int | None] = []  # per select output: its column in the projection, None for rn
        rank_name = calls[0].alias or "row_number"
        for item in q.items:
            match item:
                case ast.Star(qualifier=qualifier):
                    for i, c in enumerate(scope.columns):
                        if qualifier is None or c.qualifier == qualifier:
                            slots.append(len(exprs))
                            exprs.append(ir.Column(index=i, name=c.name, type=c.field.type,
                                                   nullable=c.field.nullable, span=item.span))
                            names.append(c.name)
                case ast.AliasedExpr(expr=e, alias=alias) if not _is_row_number(item):
                    slots.append(len(exprs))
                    exprs.append(self.expr(e, scope))
                    names.append(alias or _derive_name(e, len(names)))
                case _:
                    slots.append(None)
        self._raise_collected()
        visible = len(exprs)
        def column_for(bound: ir.Expr, name: str) -> int:
            """The projection's column holding ``bound``: a selected column, or a new one."""
            if isinstance(bound, ir.Column):
                for j, e in enumerate(exprs):
                    if isinstance(e, ir.Column) and e.index == bound.index:
                        return j
            exprs.append(bound)
            names.append(name)
            return len(exprs) - 1

        partition = [column_for(self.expr(p, scope), f"_partition{i}") for i, p in enumerate(over.partition_by)]
        order = []
        for i, (o, descending) in enumerate(over.order_by):
            bound = self.expr(o, scope)
            if pt.is_nested(bound.type):
                raise SqlError(f"cannot ORDER BY a {T.sql_name(bound.type)}", o.span)
            order.append((column_for(bound, f"_order{i}"), descending))
        self._raise_collected()
        pre = ir.Project(input=rel, exprs=tuple(exprs), names=_unique(names), span=q.span)
        rank = ir.Rank(uid=self._uid,
                       input=pre, partition=tuple(partition), order=tuple(order), limit=None, rank_name=rank_name,
                       span=call.span)
        fields = rank.schema.fields
        out_exprs = []
        out_names = []
        for slot, name in zip(slots, _select_names(q, names[:visible], slots, rank_name), strict=True):
            index = len(fields) - 1 if slot is None else slot
            out_exprs.append(ir.Column(index=index, name=fields[index].name, type=fields[index].type,
                                       nullable=fields[index].nullable, span=None))
            out_names.append(name)
        return ir.Project(input=rank, exprs=tuple(out_exprs), names=_unique(out_names), span=q.span)

    # ------------------------------------------------------------ OVER aggregation

    def _over_aggregate(self, q: ast.Select, rel: ir.Rel, scope: _Scope) -> tuple[ir.Rel, frozenset[str]]:
        """``SELECT ..., agg(x) OVER (PARTITION BY p ORDER BY ts <frame>) ... FROM ...``: a
        projection of the input's columns and the aggregates' arguments, an OverAggregate over it,
        and the select list over that (each OVER call replaced by its aggregate's column)."""
        calls = [n for item in q.items for n in _ast_walk(item) if isinstance(n, ast.FunctionCall) and n.over]
        spec = calls[0].over
        updating = ir.is_updating(rel)
        width = len(scope.columns)
        inputs: list[ir.Expr] = [ir.Column(index=i, name=c.name, type=c.field.type, nullable=c.field.nullable,
                                           span=None) for i, c in enumerate(scope.columns)]

        def column_for(bound: ir.Expr) -> int:
            if isinstance(bound, ir.Column):
                return bound.index
            inputs.append(bound)
            return len(inputs) - 1

        partition = tuple(column_for(self.expr(p, scope)) for p in spec.partition_by)
        what = "one column" if updating else "one event-time column"
        if len(spec.order_by) != 1 or spec.order_by[0][1]:
            raise SqlError(f"OVER (...) needs ORDER BY {what}, ascending", spec.span,
                           "e.g. OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)")
        order_expr = spec.order_by[0][0]
        time = self.expr(order_expr, scope)
        frame, preceding = self._over_frame(spec)
        if updating:
            # Results are revised as rows come and go: no watermark to wait for, any order column.
            if not (pt.is_timestamp(time.type) or pt.is_date(time.type) or T.is_integer(time.type)):
                raise SqlError(f"OVER (ORDER BY ...) of a {T.sql_name(time.type)} is not supported", order_expr.span,
                               "over an updating input, order by a timestamp, date or integer")
            if frame == "range" and preceding is not None and not pt.is_timestamp(time.type):
                raise SqlError("RANGE BETWEEN INTERVAL ... PRECEDING needs ORDER BY a timestamp", order_expr.span)
            time = ir.Column(index=column_for(time), name="", type=time.type, nullable=time.nullable, span=None)
        elif not (isinstance(time, ir.Column) and scope.columns[time.index].rowtime):
            raise SqlError("OVER (ORDER BY ...) needs an event-time attribute: a column with a WATERMARK",
                           order_expr.span, "rows are aggregated in event-time order as the watermark passes them")
        context = _OverContext(key=_ast_key(spec), inputs=inputs, column_for=column_for)
        self._over = context
        try:
            exprs: list[ir.Expr] = []
            names: list[str] = []
            for item in q.items:
                match item:
                    case ast.Star(qualifier=qualifier):
                        for i, c in enumerate(scope.columns):
                            if qualifier is None or c.qualifier == qualifier:
                                exprs.append(inputs[i])
                                names.append(c.name)
                    case ast.AliasedExpr(expr=e, alias=alias):
                        exprs.append(self.expr(e, scope))
                        names.append(alias or _derive_name(e, len(names)))
            self._raise_collected()
        finally:
            self._over = None
        pre = ir.Project(input=rel, exprs=tuple(inputs),
                         names=_unique([*(c.name for c in scope.columns), *(f"_over_arg{i}" for i in
                                                                          range(len(inputs) - width))]),
                         span=q.span)
        # Over an append-only input, rows behind the watermark are late; their columns are the
        # relation's, the first ``width`` of the operator's input.
        late = None if updating else self._late_output(q, rel)
        over = ir.OverAggregate(uid=self._uid,
                                input=pre, partition=partition, time=time.index, frame=frame, preceding=preceding,
                                aggs=tuple(context.aggs), agg_names=tuple(f"over{i}" for i in range(len(context.aggs))),
                                late_sink=late, late_columns=tuple(range(width)) if late is not None else (),
                                span=spec.span)
        base = len(pre.schema)

        def placeholder(e: ir.Expr) -> ir.Expr:
            if isinstance(e, ir.Call) and e.fn == "__over__":
                j = e.params[0]
                return ir.Column(index=base + j, name=over.agg_names[j], type=e.type, nullable=e.nullable, span=e.span)
            return e

        out = tuple(ir.transform(e, placeholder) for e in exprs)
        unique = _unique(names)
        rowtime = frozenset(n for n, e in zip(unique, out, strict=True)
                            if isinstance(e, ir.Column) and e.index < width and scope.columns[e.index].rowtime
                            and not updating)
        return ir.Project(input=over, exprs=out, names=unique, span=q.span), rowtime

    def _over_frame(self, spec: ast.WindowSpec) -> tuple[str, int | None]:
        """(frame kind, preceding rows or ms, None for UNBOUNDED); no frame is RANGE UNBOUNDED."""
        if spec.frame is None:
            return "range", None
        kind, (_, bound) = spec.frame
        kind = kind.lower()
        if bound is None:
            return kind, None
        value = self.expr(bound, _Scope(()))
        if kind == "rows":
            if not (isinstance(value, ir.Literal) and T.is_integer(value.type) and value.value is not None
                    and value.value >= 0):
                raise SqlError("ROWS BETWEEN n PRECEDING needs a whole number n >= 0", bound.span)
            return kind, int(value.value)
        ms = _duration_ms(value)
        if ms is None or ms < 0:
            raise SqlError("RANGE BETWEEN ... PRECEDING needs an interval, e.g. INTERVAL '10' SECOND", bound.span)
        return kind, ms

    def _over_call(self, e: ast.FunctionCall, scope: _Scope) -> ir.Expr:
        context = self._over
        span = e.name_span or e.span
        if _ast_key(e.over) != context.key:
            raise SqlError("every OVER aggregate of a SELECT needs the same OVER (...) window", e.over.span)
        if e.filter is not None:
            raise SqlError("FILTER on an OVER aggregate is not supported yet", e.filter.span)
        args = [self._expr(a, scope) for a in e.args]
        fn, typ, nullable = aggregate_signature(e, args)
        if fn not in OVER_AGGREGATES:
            raise SqlError(f"{_agg_sql(e)} OVER (...) is not supported yet", span,
                           f"supported: {', '.join(OVER_AGGREGATE_NAMES)}")
        if args and not (T.is_numeric(args[0].type) or pt.is_temporal(args[0].type) or fn == "count") \
                or args and pt.is_decimal(args[0].type) and fn != "count":
            raise SqlError(f"{e.name} OVER (...) of a {T.sql_name(args[0].type)} is not supported yet", span,
                           "OVER aggregates take integers, floating-point numbers and times")
        arg = context.column_for(args[0]) if args else None
        context.aggs.append(ir.AggCall(fn=fn, arg=arg, type=typ, nullable=nullable, sql=_agg_sql(e)))
        return ir.Call(fn="__over__", args=(), params=(len(context.aggs) - 1,), type=typ, nullable=nullable,
                       span=e.span)

    # ------------------------------------------------------------ joins

    def _join(self, item: ast.Join, where: ast.Expr | None) -> tuple[ir.Rel, _Scope]:
        """Bind a tree of joins, with the WHERE above it (if any).

        Every condition, from ON or WHERE, is split into conjuncts and placed as low as it may
        go: a conjunct over one input of an inner join filters that input; one over both becomes
        a join key (``l = r``) or part of the join's residual condition. Outer joins keep their
        ON conditions (except those over the NULL-padded side only, which filter that side), and
        a WHERE over an outer join stays above it."""
        tree = self._join_tree(item)
        scope = _Scope(tree.columns)
        conditions: list[ir.Expr] = []
        if where is not None:
            pred = self.expr(where, scope)
            self._raise_collected()
            conditions = ir.conjuncts(self._condition(pred, "WHERE", where.span))
        rel = self._build_join(tree, conditions, 0)
        fields = rel.schema.fields
        return rel, _Scope(tuple(attrs.evolve(c, field=f) for c, f in zip(tree.columns, fields, strict=True)))

    def _condition(self, pred: ir.Expr, clause: str, span: Span) -> ir.Expr:
        if not (pt.is_boolean(pred.type) or T.is_null(pred.type)):
            raise SqlError(f"{clause} needs a BOOLEAN condition, got {T.sql_name(pred.type)}", span)
        return cast_to(pred, pa.bool_())

    def _join_tree(self, item: ast.FromItem) -> _JoinTree:
        if not isinstance(item, ast.Join):
            rel, scope = self.from_item(item)
            return _JoinTree(columns=scope.columns, rel=rel, span=item.span)
        left = self._join_tree(item.left)
        as_of = item.right.as_of if isinstance(item.right, ast.TableRef) else None
        right = self._join_tree(attrs.evolve(item.right, as_of=None) if as_of is not None else item.right)
        # Columns of a regular join's output are not event-time attributes: a row may come out long
        # after the watermark passed its time.
        columns = tuple(attrs.evolve(c, rowtime=False) for c in left.columns + right.columns)
        on: list[ir.Expr] = []
        if item.condition is not None:
            pred = self.expr(item.condition, _Scope(left.columns + right.columns))
            self._raise_collected()
            on = ir.conjuncts(self._condition(pred, "ON", item.condition.span))
        lookup, temporal = False, None
        if as_of is not None:
            lookup, temporal = self._check_temporal(item, as_of, left, right)
        return _JoinTree(columns=columns, left=left, right=right, kind=item.kind, on=tuple(on), span=item.span,
                         lookup=lookup, temporal=temporal,
                         primary_key=self.catalog.lookup(item.right.name).info.primary_key if temporal else ())

    def _check_temporal(self, item: ast.Join, as_of: ast.Expr, left: _JoinTree,
                        right: _JoinTree) -> tuple[bool, tuple[int, int] | None]:
        """``JOIN t FOR SYSTEM_TIME AS OF l.x``: a lookup join when ``x`` is a processing-time
        attribute (``PROCTIME()``) of the left side; a temporal join against the versioned table
        ``t`` when ``x`` is an event-time attribute and ``t`` has a watermark and a primary key.
        Returns (lookup, (left time column, right time column) of a temporal join)."""
        time = self.expr(as_of, _Scope(left.columns))
        self._raise_collected()
        if item.kind not in ("inner", "left"):
            raise SqlError(f"a join FOR SYSTEM_TIME AS OF is INNER or LEFT, not {item.kind.upper()}", item.span)
        if isinstance(time, ir.Column) and left.rel is not None and _is_proctime(left.rel, time.index):
            return True, None
        if not (isinstance(time, ir.Column) and left.columns[time.index].rowtime):
            raise SqlError("FOR SYSTEM_TIME AS OF needs a time attribute of the left side: an event-time column "
                           "(with a WATERMARK) or a processing-time one (defined as PROCTIME())", as_of.span,
                           "e.g. FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency")
        entry = self.catalog.lookup(item.right.name) if isinstance(item.right, ast.TableRef) else None
        if not isinstance(entry, CatalogTable) or not entry.info.primary_key or not entry.info.watermark:
            raise SqlError(f"a temporal join by event time needs a versioned table on the right: {item.right.name!r} "
                           "must be a table with a PRIMARY KEY and a WATERMARK", item.right.span,
                           "declare PRIMARY KEY (...) NOT ENFORCED and WATERMARK FOR its time column")
        times = [i for i, c in enumerate(right.columns) if c.rowtime]
        return False, (time.index, times[0])

    def _build_join(self, tree: _JoinTree, above: list[ir.Expr], depth: int) -> ir.Rel:
        """The relation of ``tree`` with the conjuncts ``above`` (over its columns) applied."""
        if tree.rel is not None:
            return _filter(tree.rel, above)
        width = len(tree.left.columns)
        inner = tree.kind == "inner"
        to_left: list[ir.Expr] = []
        to_right: list[ir.Expr] = []
        across: list[ir.Expr] = []
        stay_above: list[ir.Expr] = []
        for c, from_on in [(c, False) for c in above] + [(c, True) for c in tree.on]:
            used = ir.columns_used(c)
            only_left = bool(used) and max(used) < width
            only_right = bool(used) and min(used) >= width
            if not from_on and not inner:
                stay_above.append(c)
            elif only_left and c.deterministic and (inner or tree.kind == "right"):
                to_left.append(c)
            elif only_right and c.deterministic and (inner or tree.kind == "left"):
                to_right.append(ir.remap(c, {i: i - width for i in used}))
            else:
                across.append(c)
        left = self._build_join(tree.left, to_left, depth + 1)
        right = self._build_join(tree.right, to_right, depth + 1)
        rel = self._equi_join(tree, left, right, across)
        return _filter(rel, stay_above)

    def _equi_join(self, tree: _JoinTree, left: ir.Rel, right: ir.Rel, conditions: list[ir.Expr]) -> ir.Rel:
        """An ir.Join of ``left`` and ``right``: equalities between a left and a right expression
        become its keys, the rest its residual. Keys that are not plain columns are computed into
        extra columns below the join, and a projection above drops them again."""
        width = len(left.schema)
        pairs: list[tuple[ir.Expr, ir.Expr]] = []
        residual: list[ir.Expr] = []
        for c in conditions:
            if isinstance(c, ir.Call) and c.fn == "eq":
                a, b = c.args
                ua, ub = ir.columns_used(a), ir.columns_used(b)
                if ua and ub and max(ua) < width <= min(ub) and a.deterministic and b.deterministic:
                    pairs.append((a, ir.remap(b, {i: i - width for i in ub})))
                    continue
                if ua and ub and max(ub) < width <= min(ua) and a.deterministic and b.deterministic:
                    pairs.append((b, ir.remap(a, {i: i - width for i in ua})))
                    continue
            residual.append(c)
        if not pairs:
            article = "an" if tree.kind == "inner" else "a"
            raise SqlError(f"{article} {tree.kind.upper()} JOIN needs at least one equality between the two sides",
                           tree.span, "add ON a.key = b.key (a join without one would pair every row with every "
                           "row, which a stream cannot bound)")
        left_x, left_keys = _key_columns(left, [a for a, _ in pairs])
        right_x, right_keys = _key_columns(right, [b for _, b in pairs])
        extra_left = len(left_x.schema) - width
        shift = {i: i + extra_left for i in range(width, width + len(right.schema))}
        resid = None
        for c in residual:
            resid = ir.and_(resid, ir.remap(c, shift) if extra_left else c)
        plain = not tree.lookup and tree.temporal is None
        interval = _interval_bounds(resid, left_x, right_x, tree, left_keys, right_keys) if plain else None
        if tree.temporal is not None:
            names = right.schema.names
            missing = [k for k in tree.primary_key if names.index(k) not in right_keys]
            if missing:
                raise SqlError(f"a temporal join must match the versioned table's whole primary key; "
                               f"{', '.join(missing)} is not compared with the left side", tree.span,
                               f"add ON ... = {tree.right.columns[names.index(missing[0])].qualifier or 'r'}."
                               f"{missing[0]}")
        join = ir.Join(uid=self._uid,
                       left=left_x, right=right_x, kind=tree.kind, left_keys=left_keys, right_keys=right_keys,
                       residual=resid, interval=interval, lookup=tree.lookup, temporal=tree.temporal,
                       span=tree.span)
        if left_x is left and right_x is right:
            return join
        keep = list(range(width)) + [len(left_x.schema) + i for i in range(len(right.schema))]
        fields = join.schema.fields
        exprs = tuple(ir.Column(index=i, name=fields[i].name, type=fields[i].type, nullable=fields[i].nullable,
                                span=None) for i in keep)
        return ir.Project(input=join, exprs=exprs, names=tuple(fields[i].name for i in keep), span=tree.span)

    # ------------------------------------------------------------ windows

    def _window_tvf(self, call: ast.FunctionCall, alias: str | None) -> tuple[ir.Rel, _Scope]:
        """``TUMBLE(TABLE t, DESCRIPTOR(ts), size [, offset])``, ``HOP(..., slide, size [, offset])``,
        ``CUMULATE(..., step, max_size [, offset])``, ``SESSION(TABLE t [PARTITION BY k], ..., gap)``."""
        name = call.name
        usage = {
            "TUMBLE": "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND [, offset])",
            "HOP": "HOP(TABLE t, DESCRIPTOR(ts), slide, size [, offset])",
            "CUMULATE": "CUMULATE(TABLE t, DESCRIPTOR(ts), step, max_size [, offset])",
            "SESSION": "SESSION(TABLE t [PARTITION BY k], DESCRIPTOR(ts), gap)",
        }[name]
        args = call.args
        wanted = {"TUMBLE": (3, 4), "HOP": (4, 5), "CUMULATE": (4, 5), "SESSION": (3, 3)}[name]
        if not wanted[0] <= len(args) <= wanted[1]:
            raise SqlError(f"{name} takes {wanted[0]}{'' if wanted[0] == wanted[1] else f' or {wanted[1]}'} "
                           f"arguments, got {len(args)}", call.span, f"write {usage}")
        table_arg, descriptor, *lengths = args
        if not isinstance(table_arg, ast.TableArg):
            raise SqlError(f"the first argument of {name} must be TABLE <name>", table_arg.span, f"write {usage}")
        if not isinstance(descriptor, ast.Descriptor) or len(descriptor.names) != 1:
            raise SqlError(f"the second argument of {name} must be DESCRIPTOR(<time column>)", descriptor.span,
                           f"write {usage}")
        if table_arg.partition_by and name != "SESSION":
            raise SqlError(f"PARTITION BY applies to SESSION windows only, not {name}", table_arg.span)
        rel, scope = self.from_item(ast.TableRef(name=table_arg.name, alias=alias, span=table_arg.span))
        time_name = descriptor.names[0]
        matches = [i for i, c in enumerate(scope.columns) if c.name == time_name]
        if not matches:
            raise SqlError(f"unknown column {time_name!r} in {table_arg.name!r}", descriptor.span,
                           _did_you_mean(time_name, [c.name for c in scope.columns], "columns"))
        time = matches[0]
        if not scope.columns[time].rowtime:
            entry = self.catalog.lookup(table_arg.name)
            declared = isinstance(entry, CatalogTable) and entry.info.watermark is not None
            raise SqlError(
                f"column {time_name!r} of {table_arg.name!r} is not an event-time attribute", descriptor.span,
                (f"windows run on the watermark column of the table ({entry.info.watermark[0]!r})" if declared else
                 f"{table_arg.name!r} has no event time: declare WATERMARK FOR {time_name} AS "
                 f"{time_name} - INTERVAL '5' SECOND in its CREATE TABLE"))
        ms = [self._window_length(name, a) for a in lengths]
        match name:
            case "TUMBLE":
                window = ir.WindowDef("tumble", size=ms[0], offset=ms[1] if len(ms) > 1 else 0)
            case "HOP":
                window = ir.WindowDef("hop", slide=ms[0], size=ms[1], offset=ms[2] if len(ms) > 2 else 0)
                if window.size % window.slide:
                    raise SqlError("a HOP window's size must be a whole multiple of its slide", call.span)
            case "CUMULATE":
                window = ir.WindowDef("cumulate", slide=ms[0], size=ms[1], offset=ms[2] if len(ms) > 2 else 0)
                if window.size % window.slide:
                    raise SqlError("a CUMULATE window's max size must be a whole multiple of its step", call.span)
            case _:
                window = ir.WindowDef("session", gap=ms[0])
        partition = []
        for key in table_arg.partition_by:
            found = [i for i, c in enumerate(scope.columns) if c.name == key]
            if not found:
                raise SqlError(f"unknown column {key!r} in PARTITION BY", table_arg.span,
                               _did_you_mean(key, [c.name for c in scope.columns], "columns"))
            partition.append(found[0])
        tvf = ir.WindowTVF(input=rel, window=window, time=time, partition_by=tuple(partition), span=call.span)
        columns = tuple(attrs.evolve(c, rowtime=False) for c in scope.columns)
        columns += tuple(_ScopeColumn(alias, f.name, f, f.name == "window_time")
                         for f in tvf.schema.fields[len(scope.columns):])
        return tvf, _Scope(columns)

    def _window_length(self, function: str, arg: ast.Expr) -> int:
        value = self._expr(arg, _Scope(()))
        if not (isinstance(value, ir.Literal) and pt.is_duration(value.type)):
            raise SqlError(f"{function} takes interval literals for its lengths, like INTERVAL '10' SECOND",
                           arg.span)
        if value.value <= 0:
            raise SqlError(f"a {function} window length must be positive, got {value.value} ms", arg.span)
        return value.value

    def _legacy_window(self, call: ast.FunctionCall, scope: _Scope,
                       rel: ir.Rel) -> tuple[ir.WindowDef, int, bool]:
        """``GROUP BY TUMBLE(ts, size)``, ``HOP(ts, slide, size)``, ``SESSION(ts, gap)``; ``ts``
        an event-time column, or a processing-time one (``PROCTIME()``, the last value: True)."""
        wanted = {"TUMBLE": 2, "HOP": 3, "SESSION": 2, "CUMULATE": 3}[call.name]
        if len(call.args) != wanted:
            raise SqlError(f"{call.name} in GROUP BY takes {wanted} arguments, got {len(call.args)}", call.span)
        time = self._expr(call.args[0], scope)
        proctime = isinstance(time, ir.Column) and _is_proctime(rel, time.index)
        if proctime and call.name != "TUMBLE":
            raise SqlError(f"{call.name} windows over processing time are not supported yet; TUMBLE is",
                           call.args[0].span)
        if not isinstance(time, ir.Column) or not (scope.columns[time.index].rowtime or proctime):
            raise SqlError(f"the first argument of {call.name} must be an event-time column "
                           "(the table's WATERMARK column) or a processing-time one (PROCTIME())", call.args[0].span)
        ms = [self._window_length(call.name, a) for a in call.args[1:]]
        match call.name:
            case "TUMBLE":
                window = ir.WindowDef("tumble", size=ms[0])
            case "HOP":
                window = ir.WindowDef("hop", slide=ms[0], size=ms[1])
                if window.size % window.slide:
                    raise SqlError("a HOP window's size must be a whole multiple of its slide", call.span)
            case "CUMULATE":
                window = ir.WindowDef("cumulate", slide=ms[0], size=ms[1])
            case _:
                window = ir.WindowDef("session", gap=ms[0])
        return window, time.index, proctime

    def _aggregate(self, q: ast.Select, rel: ir.Rel, scope: _Scope) -> tuple[ir.Rel, frozenset[str]]:
        """A window aggregation: GROUP BY window_start, window_end (of a window table function)
        or a group window (``GROUP BY TUMBLE(ts, ...)``), plus any keys."""
        group = list(q.group_by)
        legacy = [g for g in group if isinstance(g, ast.FunctionCall) and g.name in TABLE_FUNCTIONS]
        window_cols: dict[int, int] = {}
        if isinstance(rel, ir.Filter) and isinstance(rel.input, ir.WindowTVF):
            # WHERE over a window table function: a filter on the input columns is the same
            # filter before window assignment (the window columns come after them).
            tvf = rel.input
            if any(i >= len(tvf.input.schema) for i in ir.columns_used(rel.predicate)):
                raise SqlError("a WHERE on window_start, window_end or window_time before a window aggregation "
                               "is not supported yet", rel.span, "filter on them in HAVING, or in an outer query")
            rel = attrs.evolve(tvf, input=ir.Filter(input=tvf.input, predicate=rel.predicate, span=rel.span))
        if isinstance(rel, ir.WindowTVF):
            if legacy:
                raise SqlError("GROUP BY a window function over a window table function", legacy[0].span,
                               "group by window_start, window_end instead")
            window, time, below = rel.window, rel.time, rel.input
            proctime = False
            n = len(below.schema)
            window_cols = {n: 0, n + 1: 1, n + 2: 2}
        elif legacy:
            if len(legacy) > 1:
                raise SqlError("GROUP BY can have only one window", legacy[1].span)
            group.remove(legacy[0])
            window, time, proctime = self._legacy_window(legacy[0], scope, rel)
            below = rel
        else:
            return self._group_aggregate(q, rel, scope)
        keys, key_names, seen = self._group_keys(group, scope, window_cols)
        if window_cols and not {0, 1} <= seen:
            where = q.group_by[0].span if q.group_by else q.span
            raise SqlError("a window aggregation must GROUP BY window_start and window_end", where,
                           "add window_start, window_end to GROUP BY")
        if window.kind == "session":
            self._check_session_keys(rel, keys, q)
        self._raise_collected()
        window_time = ir.window_time_type(below.schema[time].type)
        context, bound, having = self._bind_aggregates(q, scope, base=len(keys) + 1, window_time=window_time)
        num_keys = len(keys)
        rebase = _rebaser(keys, key_names, window_cols=window_cols)

        inputs = [*keys, ir.Column(index=time, name=below.schema[time].name, type=below.schema[time].type,
                                   nullable=below.schema[time].nullable, span=q.span), *context.inputs]
        names = [*key_names, "__time", *(f"__arg{i}" for i in range(len(context.inputs)))]
        late = self._late_output(q, below)
        late_columns: tuple[int, ...] = ()
        if late is not None:
            # Late rows go out whole: the operator's input carries every column of the relation.
            late_columns = tuple(range(len(inputs), len(inputs) + len(below.schema)))
            inputs += [ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=None)
                       for i, f in enumerate(below.schema.fields)]
            names += [f"__late_{f.name}" for f in below.schema.fields]
        pre = ir.Project(input=below, exprs=tuple(inputs), names=_unique(names), span=q.span)
        agg_rel: ir.Rel = ir.WindowAggregate(
            uid=self._uid, input=pre, window=window, num_keys=num_keys, time=num_keys, aggs=tuple(context.aggs),
            agg_names=tuple(f"agg{i}" for i in range(len(context.aggs))),
            allowed_lateness=self._allowed_lateness(q), late_sink=late, late_columns=late_columns, proctime=proctime,
            span=q.span)
        project = self._select_over_aggregate(q, agg_rel, bound, having, rebase)
        rowtime = frozenset(n for n, e in zip(project.names, project.exprs, strict=True)
                            if isinstance(e, ir.Column) and e.index == num_keys + 2)
        return project, rowtime

    def _group_keys(self, group: list[ast.Expr], scope: _Scope,
                    window_cols: dict[int, int]) -> tuple[list[ir.Expr], list[str], set[int]]:
        """The GROUP BY keys and their names; ``seen``: which window columns were grouped by."""
        keys: list[ir.Expr] = []
        key_names: list[str] = []
        seen: set[int] = set()
        for g in group:
            e = self.expr(g, scope)
            if isinstance(e, ir.Column) and e.index in window_cols:
                seen.add(window_cols[e.index])
                continue
            if any(c in window_cols for c in ir.columns_used(e)):
                raise SqlError("window columns can be grouped by only as they are (window_start, window_end)",
                               g.span)
            if e not in keys:
                keys.append(e)
                key_names.append(_derive_name(g, len(key_names)) if not isinstance(g, ast.ColumnRef) else g.name)
        return keys, key_names, seen

    def _bind_aggregates(self, q: ast.Select, scope: _Scope, base: int, group_input: ir.Rel | None = None,
                         window_time: pa.DataType = ir.WINDOW_TIME_TYPE,
                         ) -> tuple[_AggContext, list[tuple[ast.AliasedExpr, ir.Expr]], ir.Expr | None]:
        """Bind the SELECT list and HAVING of an aggregation, collecting its aggregate calls and
        their input columns (numbered from ``base``)."""
        context = _AggContext(base=base, group_input=group_input, window_time=window_time)
        previous, self._agg = self._agg, context
        try:
            bound = [(item, self.expr(item.expr, scope)) for item in q.items if isinstance(item, ast.AliasedExpr)]
            having = self.expr(q.having, scope) if q.having is not None else None
        finally:
            self._agg = previous
        for item in q.items:
            if isinstance(item, ast.Star):
                self.errors.append(SqlError("'*' cannot be used with GROUP BY", item.span,
                                            "name the grouped columns and aggregates"))
        self._raise_collected()
        return context, bound, having

    def _select_over_aggregate(self, q: ast.Select, agg_rel: ir.Rel, bound: list[tuple[ast.AliasedExpr, ir.Expr]],
                               having: ir.Expr | None, rebase: Callable[[ir.Expr], ir.Expr]) -> ir.Project:
        """HAVING as a filter over the aggregation, then the SELECT list as a projection."""
        exprs, names = [], []
        for item, e in bound:
            try:
                exprs.append(rebase(e))
                names.append(item.alias or _derive_name(item.expr, len(names)))
            except SqlError as exc:
                self.errors.append(exc)
        if having is not None:
            try:
                condition = rebase(having)
                if not (pt.is_boolean(condition.type) or T.is_null(condition.type)):
                    raise SqlError(f"HAVING needs a BOOLEAN condition, got {T.sql_name(condition.type)}",
                                   q.having.span)
                agg_rel = ir.Filter(input=agg_rel, predicate=cast_to(condition, pa.bool_()), span=q.having.span)
            except SqlError as exc:
                self.errors.append(exc)
        self._raise_collected()
        return ir.Project(input=agg_rel, exprs=tuple(exprs), names=_unique(names), span=q.span)

    def _group_aggregate(self, q: ast.Select, rel: ir.Rel, scope: _Scope) -> tuple[ir.Rel, frozenset[str]]:
        """GROUP BY without a window: an updating aggregation over every row so far."""
        keys, key_names, _ = self._group_keys(list(q.group_by), scope, {})
        self._raise_collected()
        context, bound, having = self._bind_aggregates(q, scope, base=len(keys), group_input=rel)
        num_keys = len(keys)
        rebase = _rebaser(keys, key_names, window_cols=None)

        names = [*key_names, *(f"__arg{i}" for i in range(len(context.inputs)))]
        pre = ir.Project(input=rel, exprs=(*keys, *context.inputs), names=_unique(names), span=q.span)
        agg_rel = ir.GroupAggregate(uid=self._uid, input=pre, num_keys=num_keys, aggs=tuple(context.aggs),
                                    agg_names=tuple(f"agg{i}" for i in range(len(context.aggs))), span=q.span)
        # The result has no event time: an update is not an event at a time.
        return self._select_over_aggregate(q, agg_rel, bound, having, rebase), frozenset()

    def _check_session_keys(self, rel: ir.Rel, keys: list[ir.Expr], q: ast.Select) -> None:
        # Sessions are kept per group key; Flink's SESSION(TABLE t PARTITION BY k, ...) means the same
        # when the partition keys are the grouping keys.
        if not isinstance(rel, ir.WindowTVF):
            return
        key_columns = {k.index for k in keys if isinstance(k, ir.Column)}
        if set(rel.partition_by) != key_columns or len(key_columns) != len(keys):
            raise SqlError("a SESSION window needs PARTITION BY the same columns the query groups by",
                           q.from_.span, "write SESSION(TABLE t PARTITION BY k, ...) ... GROUP BY window_start, "
                                         "window_end, k")

    def _late_output(self, q: ast.Select, below: ir.Rel) -> ir.Sink | None:
        """With SET 'table.exec.late-events' = 'side-output', the sink late rows go to: the table
        named by 'table.exec.late-events.table', whose columns match the rows the window or OVER
        aggregation reads."""
        mode = self.config.get("table.exec.late-events", "drop").lower()
        if mode == "drop":
            return None
        if mode != "side-output":
            raise SqlError(f"'table.exec.late-events' must be 'drop' or 'side-output', got {mode!r}", q.span)
        name = self.config.get("table.exec.late-events.table")
        if not name:
            raise SqlError("'table.exec.late-events' = 'side-output' needs 'table.exec.late-events.table', "
                           "the table late rows go to", q.span)
        target = self.catalog.tables.get(name)
        if target is None:
            raise SqlError(f"unknown table {name!r} in 'table.exec.late-events.table'", q.span,
                           _did_you_mean(name, sorted(self.catalog.tables), "tables"))
        connector = self.connectors.get(target.info.connector)
        if connector is None or connector.create_sink is None:
            raise SqlError(f"late rows cannot be written to {name!r}: its connector cannot be written", q.span)
        got, want = below.schema, target.info.columns
        if len(got) != len(want) or not all(T.assignable(a.type, b.type)
                                            for a, b in zip(got.fields, want.fields, strict=True)):
            raise SqlError(f"late rows have the columns ({_describe(got)}), but {name!r} has ({_describe(want)})",
                           q.span, "declare the late-events table with the same columns as the rows "
                                   "the window or OVER aggregation reads")
        return ir.Sink(input=below, name=name, connector=target.info.connector, options=target.info.options,
                       target=want, span=q.span)

    def _allowed_lateness(self, q: ast.Select) -> int:
        text = self.config.get("table.exec.allowed-lateness")
        if text is None:
            return 0
        return parse_duration(text)  # checked when SET

    def _scan(self, table: CatalogTable, span: Span) -> ir.Rel:
        info = table.info
        if table.definition.partitioned_by:
            raise SqlError(f"reading the partitioned table {info.name!r} is not supported yet", span,
                           "a PARTITIONED BY table can be written (INSERT INTO) but not read yet")
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
        if e.over is not None and self._over is not None and e.name in AGGREGATES:
            return self._over_call(e, scope)
        if e.over is not None:
            raise SqlError(f"{e.name}(...) OVER (...) is not supported yet", e.over.span)
        if e.name in AGGREGATES:
            return self._aggregate_call(e, scope)
        if m := _WINDOW_PROPERTY.fullmatch(e.name):
            if self._agg is None:
                raise SqlError(f"{e.name} is only usable in a query that groups by {m[1]}(...)", span)
            which = {"START": 0, "END": 1, "ROWTIME": 2}[m[2]]
            typ = self._agg.window_time if which == 2 else ir.WINDOW_TIME_TYPE
            return ir.Call(fn="__window__", args=(), params=(which,), type=typ, nullable=False, span=e.span)
        if e.name in TABLE_FUNCTIONS:
            raise SqlError(f"{e.name} is a table function: use it in FROM TABLE({e.name}(...))", span)
        binder = FUNCTIONS.get(e.name)
        udf = self._udf(e.name, span) if binder is None or self.functions.get(e.name) is not None else None
        if binder is None and udf is None:
            known = sorted({*FUNCTIONS, *self.udfs, *(n.upper() for n in self.functions.names())})
            raise SqlError(f"unknown function {e.name}", span, _did_you_mean(e.name, known, "functions"))
        if e.distinct or e.star or e.over is not None:
            raise SqlError(f"{e.name} is a scalar function: DISTINCT, * and OVER do not apply", e.span)
        args = [self._expr(a, scope) for a in e.args]
        if udf is not None:
            return udfs.bind_call(udf, args, e.span)
        return binder(e.name, args, e.span)


    def _aggregate_call(self, e: ast.FunctionCall, scope: _Scope) -> ir.Expr:
        context = self._agg
        span = e.name_span or e.span
        if context is None:
            raise SqlError(f"aggregate function {e.name} is not allowed here", span,
                           "aggregates belong in the SELECT list or HAVING of a GROUP BY query")
        if context.inside:
            raise SqlError(f"aggregate function {e.name} inside another aggregate", span)
        context.inside = True
        try:
            args = [self._expr(a, scope) for a in e.args]
            condition = self._expr(e.filter, scope) if e.filter is not None else None
        finally:
            context.inside = False
        fn, typ, nullable = aggregate_signature(e, args)
        if condition is not None and not (pt.is_boolean(condition.type) or T.is_null(condition.type)):
            raise SqlError(f"FILTER needs a BOOLEAN condition, got {T.sql_name(condition.type)}", e.filter.span)
        arg = context.add_input(args[0]) if args else None
        filter_ = context.add_input(cast_to(condition, pa.bool_())) if condition is not None else None
        call = ir.AggCall(fn=fn, arg=arg, filter=filter_, type=typ, nullable=nullable,
                          sql=_agg_sql(e))
        if context.group_input is not None:
            if fn not in GROUP_AGGREGATES:
                raise SqlError(f"{_agg_sql(e)} is not supported in a GROUP BY without a window yet", span,
                               f"supported: {', '.join(GROUP_AGGREGATE_NAMES)}; or aggregate over windows")
            if fn in ("min", "max") and ir.is_updating(context.group_input):
                raise SqlError(f"{e.name} over an updating input is not supported yet", span,
                               "its input is itself a GROUP BY without a window, whose rows are revised")
        return ir.Call(fn="__agg__", args=(), params=(context.add_agg(call),), type=typ, nullable=nullable,
                       span=e.span)


OVER_AGGREGATES = ("count_star", "count", "sum", "avg", "min", "max")
OVER_AGGREGATE_NAMES = ("COUNT(*)", "COUNT", "SUM", "AVG", "MIN", "MAX")


@attrs.define
class _OverContext:
    """While binding a SELECT list with OVER aggregates: the window they share, the projection's
    columns (the input's, then computed arguments) and the aggregates found."""

    key: object
    inputs: list[ir.Expr]
    column_for: Callable[[ir.Expr], int]
    aggs: list[ir.AggCall] = attrs.Factory(list)


def _ast_key(node: object) -> object:
    """``node`` as nested tuples without positions: equal for the same text written twice."""
    if isinstance(node, tuple):
        return tuple(_ast_key(n) for n in node)
    if attrs.has(type(node)):
        return (type(node).__name__, *(
            _ast_key(getattr(node, a.name)) for a in attrs.fields(type(node)) if a.name not in ("span", "name_span")))
    return node


def _is_row_number(item: ast.SelectItem) -> bool:
    return (isinstance(item, ast.AliasedExpr) and isinstance(item.expr, ast.FunctionCall)
            and item.expr.over is not None and item.expr.name == "ROW_NUMBER")


def _select_names(q: ast.Select, names: list[str], slots: list[int | None], rank_name: str) -> list[str]:
    """The output names of a select list with ROW_NUMBER: each slot's name, ``rank_name`` for rn."""
    return [rank_name if slot is None else names[slot] for slot in slots]


def _take_rank_limit(rel: ir.Rel, conjuncts: list[ir.Expr]) -> tuple[ir.Rel, list[ir.Expr]]:
    """A WHERE over a ROW_NUMBER query: ``rn <= N``, ``rn < N`` or ``rn = 1`` becomes the
    Rank's limit (Top-N); the other conjuncts are returned to filter as usual."""
    if not (isinstance(rel, ir.Project) and isinstance(rel.input, ir.Rank) and rel.input.limit is None):
        return rel, conjuncts
    rank = rel.input
    rank_column = len(rank.schema) - 1
    outputs = {i for i, e in enumerate(rel.exprs) if isinstance(e, ir.Column) and e.index == rank_column}
    limit = None
    rest = []
    for c in conjuncts:
        bound = _rank_bound(c, outputs)
        if bound is not None:
            limit = bound if limit is None else min(limit, bound)
        else:
            rest.append(c)
    if limit is None:
        return rel, conjuncts
    if limit < 1:
        raise SqlError(f"the row number is at least 1, so this keeps no row (limit {limit})", conjuncts[0].span)
    return attrs.evolve(rel, input=attrs.evolve(rank, limit=limit)), rest


def _rank_bound(c: ir.Expr, outputs: set[int]) -> int | None:
    if not (isinstance(c, ir.Call) and c.fn in ("le", "lt", "eq", "ge", "gt") and len(c.args) == 2):
        return None
    a, b = c.args
    fn = c.fn
    if isinstance(b, ir.Column) and isinstance(a, ir.Literal):
        a, b = b, a
        fn = {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt", "eq": "eq"}[fn]
    if not (isinstance(a, ir.Column) and a.index in outputs and isinstance(b, ir.Literal)
            and isinstance(b.value, int) and not isinstance(b.value, bool)):
        return None
    if fn == "le":
        return b.value
    if fn == "lt":
        return b.value - 1
    if fn == "eq" and b.value == 1:
        return 1
    return None


def check_ranks_limited(rel: ir.Rel) -> None:
    """Every ROW_NUMBER needs a limit from the query above it (Top-N)."""
    if isinstance(rel, ir.Rank) and rel.limit is None:
        raise SqlError("ROW_NUMBER() OVER (...) is supported as Top-N only: filter its result in the query "
                       "around it", rel.span, "e.g. SELECT * FROM (SELECT *, ROW_NUMBER() OVER (...) AS rn FROM t) "
                       "WHERE rn <= 3")
    for child in rel.inputs:
        check_ranks_limited(child)


@attrs.frozen
class _JoinTree:
    """A FROM clause's joins before conditions are placed: a leaf has ``rel``; a join has two
    subtrees, its kind and its ON conjuncts (over its own columns)."""

    columns: tuple[_ScopeColumn, ...]
    span: Span | None
    rel: ir.Rel | None = None
    left: _JoinTree | None = None
    right: _JoinTree | None = None
    kind: str = "inner"
    on: tuple[ir.Expr, ...] = ()
    #: ``FOR SYSTEM_TIME AS OF`` a processing time: the right side is looked up, not joined with.
    lookup: bool = False
    #: ``FOR SYSTEM_TIME AS OF`` an event time: (left time column, right time column), and the
    #: versioned table's primary key.
    temporal: tuple[int, int] | None = None
    primary_key: tuple[str, ...] = ()


def _is_proctime(rel: ir.Rel, index: int) -> bool:
    """Whether column ``index`` of ``rel`` is ``PROCTIME()``, passed on unchanged."""
    while True:
        match rel:
            case ir.Project(exprs=exprs, input=below) | ir.Calc(exprs=exprs, input=below):
                e = exprs[index]
                if isinstance(e, ir.Call) and e.fn == "proctime":
                    return True
                if not isinstance(e, ir.Column):
                    return False
                rel, index = below, e.index
            case ir.Filter(input=below):
                rel = below
            case _:
                return False


def _filter(rel: ir.Rel, conditions: list[ir.Expr]) -> ir.Rel:
    pred = None
    for c in conditions:
        pred = ir.and_(pred, c)
    return rel if pred is None else ir.Filter(input=rel, predicate=pred, span=pred.span)


def _key_columns(rel: ir.Rel, keys: list[ir.Expr]) -> tuple[ir.Rel, tuple[int, ...]]:
    """``rel`` and the positions of ``keys`` in it; keys that are not columns of ``rel`` are
    appended by a projection."""
    if all(isinstance(k, ir.Column) for k in keys):
        return rel, tuple(k.index for k in keys)
    fields = rel.schema.fields
    exprs = [ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=None) for i, f in enumerate(fields)]
    names = list(rel.schema.names)
    positions = []
    for n, k in enumerate(keys):
        if isinstance(k, ir.Column):
            positions.append(k.index)
            continue
        positions.append(len(exprs))
        exprs.append(k)
        names.append(f"_join_key{n}")
    return ir.Project(input=rel, exprs=tuple(exprs), names=tuple(names), span=rel.span), tuple(positions)


def _interval_bounds(residual: ir.Expr | None, left: ir.Rel, right: ir.Rel, tree: _JoinTree,
                     left_keys: tuple[int, ...] = (), right_keys: tuple[int, ...] = ()) -> ir.IntervalBounds | None:
    """Event-time bounds between a time column of each side, if both a lower and an upper bound
    are there (``r.t BETWEEN l.t - a AND l.t + b`` and its forms, or a key ``l.t = r.t``): the
    join can then forget rows the watermark has passed by more than the bound.

    Between two append-only inputs, the bound away from a side's time column may also be another
    timestamp column of that side: ``r.t BETWEEN l.t AND l.expires`` (``l.t <= r.t`` and
    ``r.t <= l.expires``), its mirror ``l.t BETWEEN r.t AND r.expires``, or two spans that
    overlap. What makes a bound usable is the column it puts a limit on: an upper bound
    ``r.t <= l.x + b`` must limit a right time attribute (a right row arriving on time is after
    the watermark, so the left row is done once the watermark passes ``l.x + b``), and a lower
    bound ``l.t + a <= r.y`` a left one (the right row is done once it passes ``r.y - a``). The
    other column may be any timestamp; the plain pair of time columns is preferred when present.

    A time column is an event-time attribute, or the ``window_end`` of a window aggregation
    (passed on unchanged, or as a key of a GROUP BY over it): rows with a window end at or before
    the watermark have all arrived, so a join on two window ends (a window join) or bounded by
    one drops state as windows close."""
    left_times = {i for i, c in enumerate(tree.left.columns) if c.rowtime}
    left_times |= {i for i in range(len(left.schema)) if _window_end(left, i)}
    right_times = {i for i, c in enumerate(tree.right.columns) if c.rowtime}
    right_times |= {i for i in range(len(right.schema)) if _window_end(right, i)}
    if not left_times or not right_times:
        return None
    for a, b in zip(left_keys, right_keys, strict=True):
        if a in left_times and b in right_times and pt.is_timestamp(left.schema[a].type):
            return ir.IntervalBounds(left_time=a, right_time=b, lower=0, upper=0)
    if residual is None:
        return None
    width = len(left.schema)
    # (left column, right column) -> the bound on right - left: a lower bound needs a left time
    # attribute, an upper bound a right one (the side whose rows arrive after the watermark).
    lower: dict[tuple[int, int], int] = {}
    upper: dict[tuple[int, int], int] = {}
    for c in ir.conjuncts(residual):
        if not (isinstance(c, ir.Call) and c.fn in ("ge", "gt", "le", "lt")):
            continue
        a, b = (_time_term(x) for x in c.args)
        if a is None or b is None:
            continue
        (ca, oa), (cb, ob) = a, b
        at_least = c.fn in ("ge", "gt")
        if ca >= width and cb < width:
            pair, bound = (cb, ca - width), ob - oa  # r + oa op l + ob: r - l op ob - oa
        elif ca < width and cb >= width:
            pair, bound, at_least = (ca, cb - width), oa - ob, not at_least  # l + oa op r + ob: r - l op' oa - ob
        else:
            continue
        if at_least and pair[0] in left_times:
            lower[pair] = max(lower.get(pair, bound), bound)
        elif not at_least and pair[1] in right_times:
            upper[pair] = min(upper.get(pair, bound), bound)
    for pair in sorted(set(lower) & set(upper)):
        if pair[0] in left_times and pair[1] in right_times and lower[pair] <= upper[pair]:
            return ir.IntervalBounds(left_time=pair[0], right_time=pair[1], lower=lower[pair], upper=upper[pair])
    if ir.is_updating(left) or ir.is_updating(right):
        # A retraction must meet every row its pairs were made with: only the plain bound above,
        # whose rows leave by their own time attribute, is kept for updating inputs.
        return None
    # A bound against another column of a side: prefer the fewest such columns, then positions.
    candidates = sorted(((low[1] != up[1]) + (low[0] != up[0]), low, up)
                        for low in lower for up in upper if low != up)
    if not candidates:
        return None
    _, (left_time, right_end), (left_end, right_time) = candidates[0]
    return ir.IntervalBounds(left_time=left_time, right_time=right_time, lower=lower[left_time, right_end],
                             upper=upper[left_end, right_time],
                             left_end=left_end if left_end != left_time else None,
                             right_end=right_end if right_end != right_time else None)


def _window_end(rel: ir.Rel, index: int) -> bool:
    """Whether column ``index`` of ``rel`` is a window aggregation's window_end, passed on
    unchanged through projections, filters and the keys of GROUP BYs."""
    while True:
        match rel:
            case ir.Project(exprs=exprs, input=below) | ir.Calc(exprs=exprs, input=below):
                e = exprs[index]
                if not isinstance(e, ir.Column):
                    return False
                rel, index = below, e.index
            case ir.Filter(input=below):
                rel = below
            case ir.GroupAggregate(num_keys=n, input=below) if index < n:
                rel = below
            case ir.WindowAggregate(num_keys=n, proctime=False):
                # Over a TIMESTAMP_LTZ, window_end is a wall clock of the session time zone, not
                # comparable with watermarks (instants); its window_time is, and bounds joins.
                return index == n + 1 and rel.schema[n + 2].type == ir.WINDOW_TIME_TYPE
            case _:
                return False


def _time_term(e: ir.Expr) -> tuple[int, int] | None:
    """``column``, ``column + INTERVAL`` or ``column - INTERVAL`` over a timestamp column: (column, ms)."""
    if isinstance(e, ir.Call) and e.fn == "cast" and pt.is_timestamp(e.type) and pt.is_timestamp(e.args[0].type):
        return _time_term(e.args[0])
    if isinstance(e, ir.Column) and pt.is_timestamp(e.type):
        return e.index, 0
    if isinstance(e, ir.Call) and e.fn in ("add", "subtract") and len(e.args) == 2:
        inner, amount = e.args
        ms = _duration_ms(amount)
        base = _time_term(inner)
        if base is not None and ms is not None:
            return base[0], base[1] + (ms if e.fn == "add" else -ms)
    return None


def _duration_ms(e: ir.Expr) -> int | None:
    if not (isinstance(e, ir.Literal) and pt.is_duration(e.type) and e.value is not None):
        return None
    value = e.value
    if isinstance(value, dt.timedelta):
        return value // dt.timedelta(milliseconds=1)
    return int(value) * {"s": 1000, "ms": 1, "us": 1, "ns": 1}[e.type.unit] // {"s": 1, "ms": 1, "us": 1000,
                                                                              "ns": 1_000_000}[e.type.unit]


def _updating_reason(producer: ir.Rel, where: Span | None) -> str:
    if isinstance(producer, ir.Rank):
        return f"its ROW_NUMBER() Top-N (at {where}) retracts a row when a better one enters the top"
    if isinstance(producer, ir.Join):
        return (f"its {producer.kind.upper()} JOIN (at {where}) retracts a NULL-padded row when the row's "
                "first match arrives")
    return f"its GROUP BY without a window (at {where}) revises earlier rows"


def _is_builtin(name: str) -> bool:
    return (name in FUNCTIONS or name in AGGREGATES or name in TABLE_FUNCTIONS
            or _WINDOW_PROPERTY.fullmatch(name) is not None)


#: Options every source table accepts, whatever its connector, with their value parsers.
#: Connectors that write PARTITIONED BY tables (one directory per partition value).
PARTITIONED_CONNECTORS = frozenset({"filesystem"})
SOURCE_OPTIONS = {"scan.watermark.idle-timeout": parse_duration}

_WINDOW_PROPERTY = re.compile(r"(TUMBLE|HOP|SESSION|CUMULATE)_(START|END|ROWTIME)")


def _rebaser(keys: list[ir.Expr], key_names: list[str],
             window_cols: dict[int, int] | None) -> Callable[[ir.Expr], ir.Expr]:
    """Rewrites a SELECT item or HAVING, bound over the aggregation's input, to read the
    aggregation's output: the keys, then (with ``window_cols``, a window aggregation) the window
    columns, then the aggregates. Any other input column is an error."""
    num_keys = len(keys)
    key_index = {k: i for i, k in enumerate(keys)}
    windowed = window_cols is not None
    agg_base = num_keys + (3 if windowed else 0)

    def rebase(e: ir.Expr) -> ir.Expr:
        if e in key_index:
            i = key_index[e]
            return ir.Column(index=i, name=key_names[i], type=e.type, nullable=e.nullable, span=e.span)
        match e:
            case ir.Call(fn="__agg__", params=(i,)):
                return ir.Column(index=agg_base + i, name=f"agg{i}", type=e.type, nullable=e.nullable, span=e.span)
            case ir.Call(fn="__window__", params=(i,)) if windowed:
                return ir.Column(index=num_keys + i, name=ir.WINDOW_COLUMNS[i], type=e.type, nullable=False,
                                 span=e.span)
            case ir.Column(index=i) if windowed and i in window_cols:
                j = window_cols[i]
                return ir.Column(index=num_keys + j, name=ir.WINDOW_COLUMNS[j], type=e.type, nullable=False,
                                 span=e.span)
            case ir.Column(name=name):
                raise SqlError(f"column {name!r} must be in GROUP BY or inside an aggregate function", e.span,
                               f"add {name} to GROUP BY, or aggregate it, e.g. MAX({name})")
        children = tuple(rebase(c) for c in e.children)
        return e.with_children(children) if children != e.children else e

    return rebase


#: The aggregates a GROUP BY without a window computes (runtime names), and how SQL spells them.
GROUP_AGGREGATES = ("count_star", "count", "count_distinct", "sum", "avg", "min", "max")
GROUP_AGGREGATE_NAMES = ("COUNT(*)", "COUNT", "COUNT(DISTINCT)", "SUM", "AVG", "MIN", "MAX")


@attrs.define
class _AggContext:
    """While binding the SELECT list and HAVING of an aggregation: the aggregates found, and
    the extra input columns they read (placed after the keys and the time column)."""

    base: int
    #: For a GROUP BY without a window: its input, whose aggregates are checked as they are bound.
    group_input: ir.Rel | None = None
    #: The type of the window's ``*_ROWTIME`` (TIMESTAMP_LTZ over a TIMESTAMP_LTZ time column).
    window_time: pa.DataType = ir.WINDOW_TIME_TYPE
    aggs: list[ir.AggCall] = attrs.field(factory=list)
    inputs: list[ir.Expr] = attrs.field(factory=list)
    inside: bool = False

    def add_input(self, expr: ir.Expr) -> int:
        if expr not in self.inputs:
            self.inputs.append(expr)
        return self.base + self.inputs.index(expr)

    def add_agg(self, call: ir.AggCall) -> int:
        if call not in self.aggs:
            self.aggs.append(call)
        return self.aggs.index(call)


def aggregate_signature(e: ast.FunctionCall, args: list[ir.Expr]) -> tuple[str, pa.DataType, bool]:
    """The runtime name, result type and nullability of an aggregate call.

    SUM, AVG, STDDEV and VAR follow Flink (``types.aggregate_type``): they keep the argument's
    type (AVG of integers truncates toward zero), SUM of DECIMAL(p, s) is DECIMAL(38, s) and AVG
    of it DECIMAL(38, max(6, s)); MIN, MAX, FIRST_VALUE and LAST_VALUE keep the argument's type;
    COUNT is a BIGINT that is never NULL.
    """
    name = e.name
    span = e.name_span or e.span
    if e.star:
        if name != "COUNT":
            raise SqlError(f"{name}(*) is not valid; only COUNT(*) is", e.span)
        return "count_star", pa.int64(), False
    if name in ("ROW_NUMBER", "RANK", "DENSE_RANK"):
        raise SqlError(f"{name} needs OVER (...), which is not supported yet", span)
    if name in ("LISTAGG", "COLLECT"):
        raise SqlError(f"aggregate function {name} is not supported yet", span)
    if len(args) != 1:
        raise SqlError(f"{name} takes 1 argument, got {len(args)}", e.span)
    (arg,) = args
    t = arg.type
    if e.distinct and name != "COUNT":
        raise SqlError(f"{name}(DISTINCT ...) is not supported yet; COUNT(DISTINCT ...) is", e.span)
    match name:
        case "COUNT":
            return ("count_distinct" if e.distinct else "count"), pa.int64(), False
        case "SUM":
            if not (T.is_numeric(t) or T.is_null(t)):
                raise SqlError(f"SUM needs a number, got {T.sql_name(t)}", arg.span)
            return "sum", T.aggregate_type(name, t), True
        case "AVG" | "STDDEV_POP" | "STDDEV_SAMP" | "VAR_POP" | "VAR_SAMP":
            if not (T.is_numeric(t) or T.is_null(t)):
                raise SqlError(f"{name} needs a number, got {T.sql_name(t)}", arg.span)
            return name.lower(), T.aggregate_type(name, t), True
        case "MIN" | "MAX":
            if pt.is_struct(t) or pt.is_list(t) or pt.is_map(t):
                raise SqlError(f"{name} cannot compare {T.sql_name(t)} values", arg.span)
            return name.lower(), t if not T.is_null(t) else pa.int32(), True
        case "FIRST_VALUE" | "LAST_VALUE":
            return name.lower(), t if not T.is_null(t) else pa.int32(), True
    raise SqlError(f"aggregate function {name} is not supported yet", span)


def _agg_sql(e: ast.FunctionCall) -> str:
    if e.star:
        return f"{e.name}(*)"
    return f"{e.name}({'DISTINCT ' if e.distinct else ''}...)"


def _ast_walk(node: object):
    yield node
    if attrs.has(type(node)):
        for field in attrs.fields(type(node)):
            value = getattr(node, field.name)
            for child in value if isinstance(value, tuple) else (value,):
                if isinstance(child, tuple):
                    for grandchild in child:
                        if isinstance(grandchild, ast.Node):
                            yield from _ast_walk(grandchild)
                elif isinstance(child, ast.Node):
                    yield from _ast_walk(child)


def _has_aggregate(items: tuple[ast.SelectItem, ...]) -> bool:
    # An aggregate with OVER (...) is an OVER window function, not a grouping aggregate.
    return any(isinstance(n, ast.FunctionCall) and n.over is None
               and (n.name in AGGREGATES or _WINDOW_PROPERTY.fullmatch(n.name))
               for item in items for n in _ast_walk(item))


class _Unresolved(Exception):
    """An unknown name was recorded; the enclosing expression cannot be typed."""


def _describe(schema: ir.Schema) -> str:
    return ", ".join(f"{f.name} {T.sql_name(f.type)}" for f in schema.fields)


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
            # A literal with a point is an exact DECIMAL(p, s), as in Flink: 0.908 is DECIMAL(3, 3).
            value = e.value
            _, digits, exponent = value.as_tuple()
            typ = T.decimal_literal_type(len(digits), exponent)
            if typ is None:
                raise SqlError(f"decimal literal {value} has more than {T.MAX_DECIMAL_PRECISION} digits", e.span,
                               "write it with an exponent (1.5E40) to make it a DOUBLE")
            return ir.Literal(value=value, type=typ, nullable=False, span=e.span)
        case "double":
            # A literal with an exponent is a DOUBLE.
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
            # 'd hh:mm:ss' is read from the leading unit: INTERVAL '1:30' HOUR TO MINUTE.
            order = ["DAY", "HOUR", "MINUTE", "SECOND"]
            values = [v for v in (m["d"], m["h"], m["m"], m["s"]) if v is not None]
            units = order[order.index(e.unit):][: len(values)]
            ms = round(sum(float(v) * _INTERVAL_MS[u] for v, u in zip(values, units, strict=False)))
            if m["sign"] == "-":
                ms = -ms
    except ValueError:
        raise SqlError(f"{e.text!r} is not an interval of {e.unit}{' TO ' + e.to_unit if e.to_unit else ''}",
                       e.span) from None
    return ir.Literal(value=ms, type=pa.duration("ms"), nullable=False, span=e.span)
