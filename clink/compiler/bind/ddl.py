"""DDL and settings: CREATE TABLE (columns, connector options, watermark, PARTITIONED BY),
CREATE VIEW, CREATE FUNCTION and SET."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow.types as pt

from clink import records
from clink.compiler import ast, ir, udfs
from clink.compiler import types as T
from clink.compiler.bind.exprs import is_builtin
from clink.compiler.bind.scope import Scope, ScopeColumn, did_you_mean
from clink.compiler.catalog import CatalogTable, CatalogView, nearest
from clink.errors import SqlError, SqlErrors
from clink.runtime.plan import APPEND_ONLY, UPDATE_AFTER, UPDATE_BEFORE, ChangelogMode
from clink.runtime.settings import SETTINGS, check_setting, close_settings, parse_duration

#: Connectors that write PARTITIONED BY tables (one directory per partition value).
PARTITIONED_CONNECTORS = frozenset({"filesystem"})
#: The option that names a table's METADATA columns and their keys for its connector.
METADATA_OPTION = "clink.metadata-columns"  # read by clink.runtime.connectors.kafka
#: Options every source table accepts, whatever its connector, with their value parsers.
SOURCE_OPTIONS = {"scan.watermark.idle-timeout": parse_duration}


class DdlBinder:
    """Statements that declare: they fill the binder's ``catalog``, ``udfs`` and ``config``."""

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

    def create_function(self, stmt: ast.CreateFunction) -> None:
        key = stmt.name.upper()
        if is_builtin(key):
            raise SqlError(f"{stmt.name} is a built-in function", stmt.span, "give the Python function another name")
        if key in self.udfs or self.functions.get(key) is not None:
            if stmt.if_not_exists:
                return
            raise SqlError(f"function {stmt.name} already exists", stmt.span, "use CREATE FUNCTION IF NOT EXISTS")
        self.udfs[key] = udfs.create_function(stmt)

    def create_table_as(self, stmt: ast.CreateTableAs) -> ast.Insert | None:
        """``CREATE TABLE t WITH (...) AS query``: the table, declared with the query's columns
        (names, types, NULL-ability), and the INSERT that fills it (None: it existed, IF NOT EXISTS)."""
        if self.catalog.lookup(stmt.name) is not None:
            if stmt.if_not_exists:
                return None
            raise SqlError(f"table or view {stmt.name!r} already exists", stmt.span)
        rel, _ = self._query(stmt.query)
        self._raise_collected()
        columns = tuple(ast.ColumnDef(name=f.name, type=f.type, nullable=f.nullable, span=stmt.span)
                        for f in rel.schema.fields)
        self.create_table(ast.CreateTable(name=stmt.name, columns=columns, options=stmt.options, span=stmt.span))
        return ast.Insert(table=stmt.name, query=stmt.query, table_span=stmt.span, span=stmt.span)

    def create_table(self, stmt: ast.CreateTable) -> None:
        if self.catalog.lookup(stmt.name) is not None:
            if stmt.if_not_exists:
                return
            raise SqlError(f"table or view {stmt.name!r} already exists", stmt.span)
        if stmt.like is not None:
            stmt = self._like(stmt)
        physical: list[ir.Field] = []
        seen: set[str] = set()
        for col in stmt.columns:
            if col.name in seen:
                raise SqlError(f"column {col.name!r} is declared twice in table {stmt.name!r}", col.span)
            seen.add(col.name)
            if isinstance(col, ast.ColumnDef | ast.MetadataColumn):
                physical.append(ir.Field(col.name, col.type, getattr(col, "nullable", True)))
        for key in stmt.primary_key:
            if key not in {f.name for f in physical}:
                raise SqlError(f"primary key column {key!r} is not a physical column of {stmt.name!r}", stmt.span,
                               did_you_mean(key, [f.name for f in physical]))
        # Primary key columns are NOT NULL, as in Flink.
        physical = [records.evolve(f, nullable=False) if f.name in stmt.primary_key else f for f in physical]
        options = {p.key: p for p in stmt.options}
        connector = self._check_connector(stmt, options, ir.Schema(tuple(physical)))
        metadata = self._metadata_columns(stmt, connector, options)
        changelog = self._source_changelog(connector, options)
        if UPDATE_AFTER in changelog.kinds and UPDATE_BEFORE not in changelog.kinds and not stmt.primary_key:
            raise SqlError(f"table {stmt.name!r}: the {connector!r} connector reads upserts by key, and the table "
                           "declares no key", options["connector"].span,
                           f"declare the key of its rows: PRIMARY KEY (...) NOT ENFORCED in CREATE TABLE {stmt.name}")
        idle = options.get("scan.watermark.idle-timeout")
        self._check_partitioned_by(stmt, connector, ir.Schema(tuple(physical)))
        info = ir.TableInfo(name=stmt.name, connector=connector,
                            options=tuple((k, p.value) for k, p in options.items()
                                          if k != "connector" and k not in SOURCE_OPTIONS) + metadata,
                            columns=ir.Schema(tuple(physical)), primary_key=stmt.primary_key,
                            partition_columns=stmt.partitioned_by,
                            idle_timeout=parse_duration(idle.value) if idle is not None else None,
                            changelog=changelog,
                            unique_fields=_declared_fields(self.connectors.get(connector).unique_fields, physical))
        # Computed columns see the physical columns, in declaration order; the one the watermark
        # is declared on is the rowtime attribute (CURRENT_WATERMARK may name it).
        rowtime = stmt.watermark.column if stmt.watermark is not None else None
        scope = Scope(tuple(ScopeColumn(stmt.name, f.name, f, rowtime=f.name == rowtime) for f in physical))
        computed: list[tuple[str, ir.Expr]] = []
        for col in stmt.columns:
            if isinstance(col, ast.ComputedColumn):
                expr = self.expr(col.expr, scope)
                self._raise_collected()
                computed.append((col.name, expr))
        schema = ir.Schema(tuple(physical) + tuple(ir.Field(n, e.type, e.nullable) for n, e in computed))
        if stmt.watermark is not None:
            info = records.evolve(info, watermark=self._watermark(stmt, schema, computed, physical))
        self.catalog.tables[stmt.name] = CatalogTable(info=info, computed=tuple(computed), schema=schema,
                                                      definition=stmt)

    def _source_changelog(self, connector: str, options: Mapping[str, ast.Property]) -> ChangelogMode:
        """The row kinds a scan of the table reads: what its connector says for these options."""
        declare = self.connectors.get(connector).source_changelog
        if declare is None:
            return APPEND_ONLY
        return declare({k: p.value for k, p in options.items() if k != "connector"})

    def _like(self, stmt: ast.CreateTable) -> ast.CreateTable:
        """``CREATE TABLE t2 [(...)] WITH (...) LIKE t1``, as Flink's default: t1's columns, then
        the new ones; its watermark, primary key and partitioning unless this one declares them;
        its options, which this one's override."""
        source = self.catalog.lookup(stmt.like)
        if not isinstance(source, CatalogTable):
            raise SqlError(f"LIKE {stmt.like}: no table of that name", stmt.span,
                           did_you_mean(stmt.like, sorted(self.catalog.tables), "tables"))
        base = source.definition
        options = {p.key: p for p in base.options}
        options.update({p.key: p for p in stmt.options})
        return records.evolve(stmt, like=None, columns=base.columns + stmt.columns,
                            watermark=stmt.watermark or base.watermark,
                            primary_key=stmt.primary_key or base.primary_key,
                            partitioned_by=stmt.partitioned_by or base.partitioned_by,
                            options=tuple(options.values()))

    def _watermark(self, stmt: ast.CreateTable, schema: ir.Schema, computed, physical) -> tuple[str, ir.Expr]:
        wm = stmt.watermark
        assert wm is not None
        if wm.column not in schema.names:
            raise SqlError(f"the watermark column {wm.column!r} is not a column of {stmt.name!r}", wm.span,
                           did_you_mean(wm.column, list(schema.names)))
        field = schema.fields[schema.names.index(wm.column)]
        if not pt.is_timestamp(field.type):
            raise SqlError(f"the watermark column {wm.column!r} must be a TIMESTAMP or TIMESTAMP_LTZ, "
                           f"got {T.sql_name(field.type)}", wm.span)
        scope = Scope(tuple(ScopeColumn(stmt.name, f.name, f) for f in schema.fields))
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

    def _metadata_columns(self, stmt: ast.CreateTable, connector: str,
                          options: Mapping[str, ast.Property]) -> tuple[tuple[str, str], ...]:
        """The table's METADATA columns, checked against what its connector fills, as the one
        option that tells the connector which physical columns are metadata (none: nothing)."""
        columns = [c for c in stmt.columns if isinstance(c, ast.MetadataColumn)]
        if not columns:
            return ()
        known = self.connectors.get(connector).metadata
        problem = self.connectors.get(connector).metadata_problem
        for col in columns:
            if problem is not None:
                why = problem({k: p.value for k, p in options.items() if k != "connector"}, col.key)
                if why is not None:
                    raise SqlError(f"column {col.name!r}: {why}", col.span,
                                   f"write {col.name} <type> METADATA FROM '<key>' with one of those keys")
                continue
            if not known:
                raise SqlError(f"the {connector!r} connector has no metadata: column {col.name!r} cannot be "
                               "declared METADATA", col.span, "declare it as an ordinary column, or remove it")
            if col.key not in known:
                raise SqlError(f"the {connector!r} connector has no metadata {col.key!r} (column {col.name!r})",
                               col.span, f"its metadata: {', '.join(known)}; write {col.name} <type> METADATA FROM "
                               "'<key>'")
        return ((METADATA_OPTION, ";".join(f"{c.name}={c.key}" for c in columns)),)

    def _check_partitioned_by(self, stmt: ast.CreateTable, connector: str, schema: ir.Schema) -> None:
        """Check PARTITIONED BY: its columns reach the sink as ``TableSpec.partition_columns``."""
        if not stmt.partitioned_by:
            return
        names = list(schema.names)
        if connector not in PARTITIONED_CONNECTORS:
            raise SqlError(f"table {stmt.name!r}: the {connector!r} connector does not write partitioned tables",
                           stmt.span, "remove PARTITIONED BY, or use the 'filesystem' connector")
        seen: set[str] = set()
        for column in stmt.partitioned_by:
            if column not in names:
                raise SqlError(f"partition column {column!r} is not a physical column of {stmt.name!r}",
                               stmt.span, did_you_mean(column, names))
            if column in seen:
                raise SqlError(f"partition column {column!r} is listed twice in PARTITIONED BY of {stmt.name!r}",
                               stmt.span)
            seen.add(column)
        if len(seen) == len(names):
            raise SqlError(f"table {stmt.name!r}: every column is a partition column, so the files would hold "
                           "no column", stmt.span, "leave at least one column out of PARTITIONED BY")
        for column in stmt.partitioned_by:
            t = schema[names.index(column)].type
            if pt.is_nested(t) or pt.is_binary(t):
                # Each value becomes the name of a directory (col=value).
                raise SqlError(f"table {stmt.name!r}: partition column {column!r} is {T.sql_name(t)}; a partition "
                               "value must be a flat value that reads as text (a string, number, boolean, date or "
                               "time)", stmt.span)

    def _check_connector(self, stmt: ast.CreateTable, options: Mapping[str, ast.Property],
                         schema: ir.Schema) -> str:
        if "connector" not in options:
            raise SqlError(f"table {stmt.name!r} has no 'connector' option", stmt.span,
                           f"add WITH ('connector' = '...'); connectors: {', '.join(self._public_connectors())}")
        prop = options["connector"]
        connector = self.connectors.get(prop.value)
        if connector is None or prop.value == "collect":
            raise SqlError(f"unknown connector {prop.value!r}", prop.span,
                           did_you_mean(prop.value, self._public_connectors(), "connectors"))
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
            # Which columns are metadata (checked first, at the column): not read from the values.
            values.update(self._metadata_columns(stmt, prop.value, options))
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
        if stmt.columns is not None:
            rel, rowtime = self.renamed(rel, rowtime, stmt.columns, stmt.span)
        self.catalog.views[stmt.name] = CatalogView(name=stmt.name, rel=rel, rowtime=rowtime, text=stmt.text)


def _declared_fields(paths: tuple[tuple[str, ...], ...], physical: list[ir.Field]) -> tuple[tuple[str, ...], ...]:
    """The unique field paths a connector declares that the table's columns hold (a table may
    declare fewer columns, or ROW types with fewer fields)."""
    kept = []
    for path in paths:
        fields: dict | None = {f.name: f.type for f in physical}
        t = None
        for name in path:
            t = fields.get(name) if fields is not None else None
            if t is None:
                break
            fields = {t.field(i).name: t.field(i).type for i in range(t.num_fields)} if pt.is_struct(t) else None
        if t is not None and not pt.is_nested(t):
            kept.append(path)
    return tuple(kept)
