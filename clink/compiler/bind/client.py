"""What a SQL client user types to look around, answered as rows (a query of constants, so they
print and come back from ``to_arrow()`` as any query's rows do): ``SHOW TABLES | VIEWS |
FUNCTIONS``, ``DESCRIBE t`` (Flink's columns: name, type, null, key, extras, watermark) and
``SHOW CREATE TABLE t``; and ``RESET``, which takes a setting (or all) back to its default."""

from __future__ import annotations

import pyarrow as pa

from clink.compiler import ast, ir
from clink.compiler import types as T
from clink.compiler.bind.scope import did_you_mean
from clink.compiler.catalog import CatalogTable
from clink.compiler.functions import AGGREGATES, FUNCTIONS, TABLE_FUNCTIONS
from clink.compiler.sqltext import expr_sql
from clink.errors import Span, SqlError
from clink.runtime.settings import SETTINGS, close_settings

_STRING = pa.string()


#: The one catalog and database, named as Flink names its defaults.
DEFAULT_CATALOG = "default_catalog"
DEFAULT_DATABASE = "default_database"


class ClientBinder:
    def show(self, stmt: ast.Show) -> ir.Rel:
        if stmt.what == "CATALOGS":
            return self.rows_of(("catalog name",), [(DEFAULT_CATALOG,)], stmt.span)
        if stmt.what == "DATABASES":
            return self.rows_of(("database name",), [(DEFAULT_DATABASE,)], stmt.span)
        if stmt.what == "CURRENT CATALOG":
            return self.rows_of(("current catalog name",), [(DEFAULT_CATALOG,)], stmt.span)
        if stmt.what == "CURRENT DATABASE":
            return self.rows_of(("current database name",), [(DEFAULT_DATABASE,)], stmt.span)
        if stmt.what == "TABLES":
            return self.rows_of(("table name",), [(n,) for n in sorted(self.catalog.tables)], stmt.span)
        if stmt.what == "VIEWS":
            return self.rows_of(("view name",), [(n,) for n in sorted(self.catalog.views)], stmt.span)
        names = {*FUNCTIONS, *AGGREGATES, *TABLE_FUNCTIONS, *self.udfs, *(n.upper() for n in self.functions.names())}
        return self.rows_of(("function name",), [(n,) for n in sorted(names)], stmt.span)

    def describe(self, stmt: ast.Describe) -> ir.Rel:
        entry = self._described(stmt.name, stmt.span)
        if isinstance(entry, CatalogTable):
            rows = _table_columns(entry)
        else:
            rows = [(f.name, T.sql_name(f.type), f.nullable, None, None, None) for f in entry.rel.schema.fields]
        return self.rows_of(("name", "type", "null", "key", "extras", "watermark"), rows, stmt.span,
                            types=(_STRING, _STRING, pa.bool_(), _STRING, _STRING, _STRING))

    def show_create(self, stmt: ast.ShowCreate) -> ir.Rel:
        entry = self._described(stmt.name, stmt.span)
        if isinstance(entry, CatalogTable) != (stmt.kind == "TABLE"):
            what = "a table" if isinstance(entry, CatalogTable) else "a view"
            raise SqlError(f"{stmt.name!r} is {what}", stmt.span,
                           f"SHOW CREATE {'TABLE' if isinstance(entry, CatalogTable) else 'VIEW'} {stmt.name}")
        text = create_table_text(entry) if isinstance(entry, CatalogTable) else entry.text
        return self.rows_of(("result",), [(text,)], stmt.span)

    def use(self, stmt: ast.Use) -> None:
        """``USE CATALOG default_catalog`` and ``USE default_database`` name what is in use;
        another name is refused."""
        current = DEFAULT_CATALOG if stmt.kind == "CATALOG" else DEFAULT_DATABASE
        if stmt.name != current:
            raise SqlError(f"{stmt.kind.lower()} {stmt.name!r} does not exist: clink has one catalog, "
                           f"{DEFAULT_CATALOG}, holding one database, {DEFAULT_DATABASE}", stmt.span,
                           "name tables directly; SHOW TABLES lists them")

    def reset(self, stmt: ast.Reset) -> None:
        if stmt.key is None:
            self.config.clear()
            return
        if stmt.key not in SETTINGS:
            close = close_settings(stmt.key)
            raise SqlError(f"unknown setting {stmt.key!r}", stmt.span,
                           f"did you mean {', '.join(repr(c) for c in close)}?" if close else None)
        self.config.pop(stmt.key, None)

    def _described(self, name: str, span: Span):
        entry = self.catalog.lookup(name)
        if entry is None:
            raise SqlError(f"unknown table {name!r}", span, did_you_mean(name, self.catalog.names(), "tables and views"))
        return entry

    def rows_of(self, names: tuple[str, ...], rows: list[tuple], span: Span,
                types: tuple[pa.DataType, ...] | None = None) -> ir.Rel:
        """A relation of constant ``rows`` (strings unless ``types`` says), columns ``names``."""
        types = types or (_STRING,) * len(names)
        scan = self._values_scan(len(rows), span)
        row_number = ir.Column(index=0, name="_row", type=pa.int64(), nullable=False, span=None)
        exprs = []
        for c, t in enumerate(types):
            values = tuple(ir.Literal(value=row[c], type=t, nullable=row[c] is None, span=span) for row in rows)
            exprs.append(ir.Call(fn="pick", args=(row_number, *values), type=t, nullable=True, span=span) if rows
                         else ir.Literal(value=None, type=t, nullable=True, span=span))
        return ir.Project(input=scan, exprs=tuple(exprs), names=names, span=span)


def _table_columns(entry: CatalogTable) -> list[tuple]:
    """Per column of a table: name, type (event time marked *ROWTIME*), null, key, extras
    (a computed column's expression), watermark (its expression, on its column), as Flink shows."""
    info = entry.info
    physical = info.columns.names
    computed = dict(entry.computed)
    key = f"PRI({', '.join(info.primary_key)})" if info.primary_key else None
    rows = []
    for f in entry.schema.fields:
        rowtime = info.watermark is not None and info.watermark[0] == f.name
        type_name = T.sql_name(f.type) + (" *ROWTIME*" if rowtime else "")
        extras = f"AS {expr_sql(computed[f.name], physical)}" if f.name in computed else None
        watermark = expr_sql(info.watermark[1], entry.schema.names) if rowtime else None
        rows.append((f.name, type_name, f.nullable, key if f.name in info.primary_key else None, extras, watermark))
    return rows


def create_table_text(entry: CatalogTable) -> str:
    """The table's DDL, written back from what was declared (SHOW CREATE TABLE; the SQL client
    keeps a CREATE TABLE AS table's declaration this way)."""
    info = entry.info
    physical = info.columns.names
    computed = dict(entry.computed)
    lines = []
    for f in entry.schema.fields:
        if f.name in computed:
            lines.append(f"  `{f.name}` AS {expr_sql(computed[f.name], physical)}")
        else:
            lines.append(f"  `{f.name}` {T.sql_name(f.type)}{'' if f.nullable else ' NOT NULL'}")
    if info.watermark is not None:
        lines.append(f"  WATERMARK FOR `{info.watermark[0]}` AS {expr_sql(info.watermark[1], entry.schema.names)}")
    if info.primary_key:
        lines.append(f"  PRIMARY KEY ({', '.join(f'`{k}`' for k in info.primary_key)}) NOT ENFORCED")
    options = ",\n".join(f"  '{k}' = '{v}'" for k, v in (("connector", info.connector), *info.options))
    partitioned = (f"\nPARTITIONED BY ({', '.join(f'`{c}`' for c in info.partition_columns)})"
                   if info.partition_columns else "")
    return f"CREATE TABLE `{info.name}` (\n" + ",\n".join(lines) + f"\n){partitioned} WITH (\n{options}\n)"
