"""The binder: statement by statement, DDL into the catalog, INSERT and SELECT into sinks.

``Binder`` is one class assembled from a mixin per clause (ddl, queries, relations, windows,
aggregates, over, exprs); each mixin's methods use the state ``Binder.__init__`` sets up.
"""

from __future__ import annotations

from clink import records
from clink.compiler import ast, ir, udfs
from clink.compiler import types as T
from clink.compiler.bind.aggregates import AggContext, AggregateBinder
from clink.compiler.bind.client import DEFAULT_CATALOG, DEFAULT_DATABASE, ClientBinder
from clink.compiler.bind.ddl import DdlBinder
from clink.compiler.bind.exprs import ExprBinder
from clink.compiler.bind.match import MatchBinder
from clink.compiler.bind.over import OverBinder, OverContext
from clink.compiler.bind.queries import QueryBinder
from clink.compiler.bind.relations import RelationBinder
from clink.compiler.bind.scope import did_you_mean, updating_reason
from clink.compiler.bind.subqueries import SubqueryBinder
from clink.compiler.bind.windows import WindowBinder
from clink.compiler.catalog import Catalog, CatalogTable, CatalogView
from clink.compiler.functions import cast_to
from clink.compiler.rewrite.limit_ranks import check_ranks_limited
from clink.errors import Span, SqlError, SqlErrors
from clink.runtime.connectors.base import ConnectorRegistry
from clink.runtime.udf import FunctionRegistry


@records.record(kw_only=True)
class BoundStatement:
    """A statement that produces a pipeline: ``sink`` is its root; ``explain`` marks EXPLAIN."""

    sink: ir.Sink
    explain: bool = False
    span: Span | None = None


@records.record(kw_only=True)
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
    binder = Binder(connectors, functions or FunctionRegistry())
    out: list[BoundStatement] = []
    for stmt in script.statements:
        bound = binder.statement(stmt)
        if bound is not None:
            out.append(bound)
    paths = tuple(f"{u.ref.name}={u.ref.module}:{u.ref.attribute}" for u in binder.udfs.values())
    return BoundScript(statements=tuple(out), config=tuple(binder.config.items()), catalog=binder.catalog,
                       udf_paths=paths)


class Binder(DdlBinder, ClientBinder, QueryBinder, SubqueryBinder, RelationBinder, MatchBinder, WindowBinder,
             AggregateBinder, OverBinder, ExprBinder):
    """Binds one script's statements in order; the catalog, settings and UDFs carry over from one
    statement to the next, the collected errors do not."""

    def __init__(self, connectors: ConnectorRegistry, functions: FunctionRegistry) -> None:
        self.catalog = Catalog()
        self.connectors = connectors
        self.functions = functions
        #: UDFs from CREATE FUNCTION, by upper-case name.
        self.udfs: dict[str, udfs.BoundUdf] = {}
        self.config: dict[str, str] = {}
        self.errors: list[SqlError] = []
        self.query_count = 0
        self._agg: AggContext | None = None
        self._over: OverContext | None = None
        #: The UID hint of each SELECT being bound, innermost last.
        self._uids: list[str | None] = []
        #: Subqueries joined so far (each names its hidden columns' qualifier).
        self._subqueries = 0
        #: The common table expressions of each WITH being bound, innermost last.
        self._ctes: list[dict[str, CatalogView]] = []

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
            case ast.CreateTableAs():
                insert = self.create_table_as(stmt)
                result = BoundStatement(sink=self.insert(insert), span=stmt.span) if insert is not None else None
            case ast.Show():
                result = self._rows_sink(self.show(stmt), stmt.span)
            case ast.Describe():
                result = self._rows_sink(self.describe(stmt), stmt.span)
            case ast.ShowCreate():
                result = self._rows_sink(self.show_create(stmt), stmt.span)
            case ast.Reset():
                self.reset(stmt)
                result = None
            case ast.Use():
                self.use(stmt)
                result = None
            case ast.CreateCatalog():
                raise SqlError(f"CREATE CATALOG {stmt.name}: clink has one catalog, {DEFAULT_CATALOG}, holding one "
                               f"database, {DEFAULT_DATABASE}", stmt.span,
                               "declare the tables with CREATE TABLE; their WITH options say where their data is")
            case ast.Explain():
                inner = self.statement(stmt.statement)
                assert inner is not None
                result = records.evolve(inner, explain=True, span=stmt.span)
            case _:
                raise SqlError(f"{type(stmt).__name__} is not supported", stmt.span)
        self._raise_collected()
        return result

    def _raise_collected(self) -> None:
        if self.errors:
            errors, self.errors = self.errors, []
            errors.sort(key=lambda e: (e.span.line, e.span.col) if e.span else (0, 0))
            raise errors[0] if len(errors) == 1 else SqlErrors(errors)

    def insert(self, stmt: ast.Insert) -> ir.Sink:
        target = self.catalog.lookup(stmt.table)
        span = stmt.table_span or stmt.span
        if target is None:
            raise SqlError(f"unknown table {stmt.table!r}", span,
                           did_you_mean(stmt.table, self.catalog.names(), "tables"))
        if isinstance(target, CatalogView):
            raise SqlError(f"cannot INSERT INTO view {stmt.table!r}", span, "INSERT INTO a table")
        connector = self.connectors.get(target.info.connector)
        if connector is None or connector.create_sink is None:
            raise SqlError(f"table {stmt.table!r} uses connector {target.info.connector!r}, which cannot be written",
                           span)
        self._check_sink_options(target, connector)
        rel, rowtime = self._query(stmt.query)
        names = rel.schema.names
        self._raise_collected()
        check_ranks_limited(rel)
        if ir.is_updating(rel) and connector.upserts and not target.info.primary_key:
            producer = ir.updating_source(rel)
            raise SqlError(f"table {stmt.table!r} (connector {target.info.connector!r}) takes updates only by a "
                           f"primary key, and declares none; the query produces updates: "
                           f"{updating_reason(producer, producer.span)}", span,
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
                           f"query produces updates: {updating_reason(producer, producer.span)}", span,
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
                       target=columns, span=stmt.span, event_time=_event_time(names, rowtime, columns.names))

    def _check_sink_options(self, target: CatalogTable, connector) -> None:
        """Refuse, at the option in the table's DDL, what its connector can read but not write
        (the connector's checks for the sink role beyond those CREATE TABLE made)."""
        if connector.validate is None:
            return
        options = {p.key: p for p in target.definition.options if p.key != "connector"}
        values = {k: p.value for k, p in options.items()}
        schema = target.info.columns.to_arrow()
        checked = connector.validate(values, schema, "table")
        errors = [SqlError(f"table {target.info.name!r} cannot be written: {message}",
                           options[key].span if key in options else target.definition.span)
                  for key, message in connector.validate(values, schema, "sink").items()
                  if checked.get(key) != message]
        if errors:
            raise errors[0] if len(errors) == 1 else SqlErrors(errors)

    def _rows_sink(self, rel: ir.Rel, span: Span) -> BoundStatement:
        """The rows a SHOW or DESCRIBE answers, as a bare query's."""
        self.query_count += 1
        return BoundStatement(sink=ir.Sink(input=rel, name=f"query_{self.query_count}", connector="collect",
                                           span=span), span=span)

    def query_sink(self, stmt: ast.Query) -> ir.Sink:
        rel, rowtime = self._query(stmt.query)
        self._raise_collected()
        check_ranks_limited(rel)
        self.query_count += 1
        names = rel.schema.names
        return ir.Sink(input=rel, name=f"query_{self.query_count}", connector="collect", span=stmt.span,
                       event_time=_event_time(names, rowtime, names))


def _event_time(names, rowtime: frozenset[str], sink_names) -> str | None:
    """The sink column that the query's first time attribute becomes (columns match by position)."""
    for i, name in enumerate(names):
        if name in rowtime:
            return sink_names[i]
    return None
