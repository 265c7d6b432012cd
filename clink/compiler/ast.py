"""The syntax tree: what the user wrote, with a span on every node.

Nodes are frozen records (``clink.records``) built from the parse tree by ``clink.compiler.parse``. Names are
kept as written (identifiers are case-sensitive, as in Flink SQL); types are already Arrow types,
because the dialect's type names map one to one onto them (``clink.compiler.types``).
Spans do not take part in equality, so two trees that differ only in layout are equal.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from clink import records
from clink.errors import Span

_span = records.field(eq=False, repr=False)
_extra_span = records.field(eq=False, repr=False, default=None)


@records.record(kw_only=True)
class Node:
    span: Span = _span


# ---------------------------------------------------------------- expressions


@records.record(kw_only=True)
class Expr(Node):
    pass


@records.record(kw_only=True)
class Literal(Expr):
    """A literal; ``kind`` is int, decimal, double, string, bool, null, date, time, timestamp, timestamp_ltz."""

    kind: str
    value: Any


@records.record(kw_only=True)
class IntervalLiteral(Expr):
    """``INTERVAL '5' SECOND``; ``text`` is the quoted value, ``to_unit`` set for ``HOUR TO MINUTE``."""

    text: str
    unit: str
    to_unit: str | None = None


@records.record(kw_only=True)
class ColumnRef(Expr):
    name: str


@records.record(kw_only=True)
class FieldAccess(Expr):
    """``expr.name``: a qualified column (``o.price``) or a field of a ROW (``r.f``); the binder decides."""

    expr: Expr
    name: str


@records.record(kw_only=True)
class QualifiedStar(Expr):
    """``o.*`` in a select list."""

    qualifier: Expr


@records.record(kw_only=True)
class Subscript(Expr):
    """``arr[i]`` (1-based) or ``map['key']``."""

    expr: Expr
    index: Expr


@records.record(kw_only=True)
class BinaryOp(Expr):
    """Arithmetic (``+ - * / %``) and string concatenation (``||``)."""

    op: str
    left: Expr
    right: Expr


@records.record(kw_only=True)
class UnaryOp(Expr):
    op: str
    operand: Expr


@records.record(kw_only=True)
class Comparison(Expr):
    op: str
    left: Expr
    right: Expr


@records.record(kw_only=True)
class And(Expr):
    left: Expr
    right: Expr


@records.record(kw_only=True)
class Or(Expr):
    left: Expr
    right: Expr


@records.record(kw_only=True)
class Not(Expr):
    operand: Expr


@records.record(kw_only=True)
class IsNull(Expr):
    operand: Expr
    negated: bool


@records.record(kw_only=True)
class IsBool(Expr):
    """``x IS [NOT] TRUE|FALSE``: never NULL."""

    operand: Expr
    value: bool
    negated: bool


@records.record(kw_only=True)
class Between(Expr):
    """``x [NOT] BETWEEN [ASYMMETRIC | SYMMETRIC] low AND high``."""

    operand: Expr
    low: Expr
    high: Expr
    negated: bool
    symmetric: bool = False


@records.record(kw_only=True)
class ArrayValue(Expr):
    """``ARRAY[e, ...]``."""

    items: tuple[Expr, ...]


@records.record(kw_only=True)
class MapValue(Expr):
    """``MAP[key, value, ...]``."""

    items: tuple[Expr, ...]


@records.record(kw_only=True)
class InSubquery(Expr):
    """``operand [NOT] IN (query)``: the query has one column."""

    operand: Expr
    query: QueryExpr
    negated: bool


@records.record(kw_only=True)
class Exists(Expr):
    """``EXISTS (query)``: whether the query has a row."""

    query: QueryExpr


@records.record(kw_only=True)
class ScalarSubquery(Expr):
    """``(query)`` as a value: its one column of its one row."""

    query: QueryExpr


@records.record(kw_only=True)
class InList(Expr):
    operand: Expr
    items: tuple[Expr, ...]
    negated: bool


@records.record(kw_only=True)
class Like(Expr):
    operand: Expr
    pattern: Expr
    escape: str | None
    negated: bool


@records.record(kw_only=True)
class SimilarTo(Expr):
    """``s [NOT] SIMILAR TO pattern [ESCAPE 'c']``: a SQL regular expression, whole-string."""

    operand: Expr
    pattern: Expr
    escape: str | None
    negated: bool


@records.record(kw_only=True)
class Overlaps(Expr):
    """``(start1, end1) OVERLAPS (start2, end2)``: each end a time point or an interval."""

    start1: Expr
    end1: Expr
    start2: Expr
    end2: Expr


@records.record(kw_only=True)
class WindowSpec(Node):
    """``OVER (PARTITION BY ... ORDER BY ... [frame])``; bound by later operators."""

    partition_by: tuple[Expr, ...]
    order_by: tuple[tuple[Expr, bool], ...]
    frame: tuple[str, Expr | None] | None


@records.record(kw_only=True)
class NamedWindow(Node):
    """``OVER w``: a window of the ``WINDOW`` clause, replaced by its definition when the SELECT
    block is built."""

    name: str


@records.record(kw_only=True)
class FunctionCall(Expr):
    """``name(args)``; ``star`` for ``COUNT(*)``, ``distinct`` for ``COUNT(DISTINCT x)``;
    ``options``: the words of an aggregate's SQL/JSON clause (JSON_OBJECTAGG, JSON_ARRAYAGG:
    ``("on_null", "ABSENT")``), as ``JsonCall`` keeps them."""

    name: str
    args: tuple[Expr, ...]
    distinct: bool = False
    star: bool = False
    over: WindowSpec | NamedWindow | None = None
    filter: Expr | None = None
    options: tuple[tuple[str, str], ...] = ()
    name_span: Span | None = _extra_span


@records.record(kw_only=True)
class Cast(Expr):
    operand: Expr
    type: pa.DataType
    type_span: Span | None = _extra_span
    try_: bool = False


@records.record(kw_only=True)
class JsonCall(Expr):
    """JSON_VALUE, JSON_QUERY, JSON_EXISTS, JSON_OBJECT, JSON_ARRAY or ``IS JSON``, with the words
    of their SQL/JSON clauses in ``options`` (``("on_empty", "DEFAULT")``, ``("wrapper",
    "CONDITIONAL")``, ...), the type of RETURNING and the expressions of DEFAULT ... ON EMPTY / ON
    ERROR (``("EMPTY", expr)``). JSON_OBJECT's ``args`` alternate keys and values."""

    name: str
    args: tuple[Expr, ...]
    options: tuple[tuple[str, str], ...] = ()
    returning: pa.DataType | None = None
    defaults: tuple[tuple[str, Expr], ...] = ()
    name_span: Span | None = _extra_span


@records.record(kw_only=True)
class Extract(Expr):
    unit: str
    operand: Expr


@records.record(kw_only=True)
class Case(Expr):
    """Searched (``operand`` is None) or simple ``CASE``."""

    operand: Expr | None
    whens: tuple[tuple[Expr, Expr], ...]
    else_: Expr | None


@records.record(kw_only=True)
class CurrentTime(Expr):
    """``CURRENT_TIMESTAMP``, ``LOCALTIMESTAMP``, ``NOW()``, ``CURRENT_DATE``, ``CURRENT_TIME``,
    ``LOCALTIME``."""

    kind: str


@records.record(kw_only=True)
class Descriptor(Expr):
    names: tuple[str, ...]


@records.record(kw_only=True)
class NamedArg(Expr):
    """``NAME => value``: an argument given by its parameter's name (window table functions)."""

    name: str
    value: Expr


@records.record(kw_only=True)
class TableArg(Expr):
    """``TABLE t [PARTITION BY k, ...]``: the table argument of a window table function."""

    name: str
    partition_by: tuple[str, ...] = ()


# ---------------------------------------------------------------- queries


@records.record(kw_only=True)
class SelectItem(Node):
    pass


@records.record(kw_only=True)
class Star(SelectItem):
    """``*`` or ``q.*``."""

    qualifier: str | None = None


@records.record(kw_only=True)
class AliasedExpr(SelectItem):
    expr: Expr
    alias: str | None = None


@records.record(kw_only=True)
class FromItem(Node):
    alias: str | None = None


@records.record(kw_only=True)
class TableRef(FromItem):
    name: str
    #: ``FOR SYSTEM_TIME AS OF expr``: the table as it is at that time (temporal join).
    as_of: Expr | None = None


@records.record(kw_only=True)
class QueryExpr(Node):
    """A query: a SELECT block, VALUES, a set operation of two queries, or a WITH."""


@records.record(kw_only=True)
class SetOp(QueryExpr):
    """``left UNION | INTERSECT | EXCEPT [ALL | DISTINCT] right``: columns matched by position;
    ``all``: duplicates kept (``UNION ALL``), else each distinct row once."""

    op: str
    all: bool
    left: QueryExpr
    right: QueryExpr


@records.record(kw_only=True)
class OrderedQuery(QueryExpr):
    """``query ORDER BY ... [LIMIT n | FETCH FIRST n ROWS ONLY]`` (``order`` may be empty with a
    limit): (expression, descending) pairs, each an output column's name or position, or an
    expression over the FROM of a SELECT block."""

    query: QueryExpr
    order: tuple[tuple[Expr, bool], ...]
    limit: int | None = None


@records.record(kw_only=True)
class Values(QueryExpr):
    """``VALUES (e, ...), ...``: constant rows."""

    rows: tuple[tuple[Expr, ...], ...]


@records.record(kw_only=True)
class Cte(Node):
    """``name [(columns)] AS (query)`` of a WITH."""

    name: str
    columns: tuple[str, ...] | None
    query: QueryExpr


@records.record(kw_only=True)
class With(QueryExpr):
    """``WITH cte, ... query``: each common table expression is a view seen by the ones after
    it and by ``query``."""

    ctes: tuple[Cte, ...]
    query: QueryExpr


@records.record(kw_only=True)
class SubqueryRef(FromItem):
    query: QueryExpr
    #: ``(query) AS t (a, b)``: the names of its columns.
    columns: tuple[str, ...] | None = None


@records.record(kw_only=True)
class TableFunctionRef(FromItem):
    call: FunctionCall


@records.record(kw_only=True)
class LateralTable(FromItem):
    """``LATERAL TABLE(f(args)) [AS alias (columns)]`` after CROSS JOIN, a comma, or ``LEFT JOIN ... ON
    TRUE``: the rows the table function ``f`` gives for each row to its left."""

    call: FunctionCall
    columns: tuple[str, ...] | None = None


@records.record(kw_only=True)
class Unnest(FromItem):
    """``UNNEST(expr) [WITH ORDINALITY] [AS alias (columns)]`` after CROSS JOIN (or a comma): a row
    per element of the array (or entry of the map) ``expr`` of each row to its left."""

    expr: Expr
    ordinality: bool = False
    columns: tuple[str, ...] | None = None


@records.record(kw_only=True)
class PatternTerm(Node):
    """One pattern variable of a ``PATTERN`` with its quantifier: ``low`` to ``high`` rows (None:
    no upper bound); ``greedy`` unless the quantifier ends in ``?`` (reluctant)."""

    variable: str
    low: int = 1
    high: int | None = 1
    greedy: bool = True


@records.record(kw_only=True)
class MatchRecognize(FromItem):
    """``input MATCH_RECOGNIZE (...) [AS alias]``: the rows of ``input``, per partition in
    ``order_by`` order, searched for ``pattern``; one row per match: the partition columns, then
    the ``measures``. ``skip``: where the next match may start (``past_last``, ``next_row``,
    ``to_first`` or ``to_last`` with ``skip_to``, a variable); ``within``: the longest time a
    match may span; ``defines``: each variable's condition (``AliasedExpr`` named by the variable)."""

    input: FromItem
    partition_by: tuple[Expr, ...]
    order_by: tuple[tuple[Expr, bool], ...]
    measures: tuple[AliasedExpr, ...]
    skip: str = "past_last"
    skip_to: str | None = None
    skip_span: Span | None = _extra_span
    pattern: tuple[PatternTerm, ...]
    within: Expr | None = None
    defines: tuple[AliasedExpr, ...]


@records.record(kw_only=True)
class Join(FromItem):
    """``left [INNER | LEFT | RIGHT | FULL] JOIN right ON condition``; ``left, right`` and
    ``CROSS JOIN`` are inner joins without a condition (``kind`` is ``'inner'``)."""

    left: FromItem
    right: FromItem
    kind: str
    condition: Expr | None = None


@records.record(kw_only=True)
class GroupingSets(Expr):
    """``GROUPING SETS ((a, b), (a), ())`` in a GROUP BY: the groupings to aggregate by."""

    sets: tuple[tuple[Expr, ...], ...]


@records.record(kw_only=True)
class Select(QueryExpr):
    items: tuple[SelectItem, ...]
    #: None: ``SELECT`` without ``FROM`` (one row).
    from_: FromItem | None
    where: Expr | None = None
    group_by: tuple[Expr, ...] = ()
    having: Expr | None = None
    distinct: bool = False
    #: ``SELECT /*+ UID('name') */``: the name the block's stateful operators keep in checkpoints.
    uid: str | None = None


# ---------------------------------------------------------------- statements


@records.record(kw_only=True)
class Statement(Node):
    pass


@records.record(kw_only=True)
class ColumnDef(Node):
    name: str
    type: pa.DataType
    nullable: bool = True


@records.record(kw_only=True)
class MetadataColumn(Node):
    """``name TYPE METADATA [FROM 'key'] [VIRTUAL]``: filled by the connector from the record's
    metadata ``key`` (the column's name when no FROM is given)."""

    name: str
    type: pa.DataType
    key: str
    virtual: bool = False


@records.record(kw_only=True)
class ComputedColumn(Node):
    name: str
    expr: Expr


@records.record(kw_only=True)
class WatermarkDef(Node):
    column: str
    expr: Expr


@records.record(kw_only=True)
class Property(Node):
    key: str
    value: str


@records.record(kw_only=True)
class CreateTable(Statement):
    name: str
    columns: tuple[ColumnDef | ComputedColumn | MetadataColumn, ...]
    #: ``LIKE t``: the table whose declaration this one starts from.
    like: str | None = None
    watermark: WatermarkDef | None = None
    primary_key: tuple[str, ...] = ()
    partitioned_by: tuple[str, ...] = ()
    options: tuple[Property, ...] = ()
    if_not_exists: bool = False
    temporary: bool = False


@records.record(kw_only=True)
class CreateView(Statement):
    name: str
    query: QueryExpr
    #: ``CREATE VIEW v (a, b) AS ...``: the view's column names.
    columns: tuple[str, ...] | None = None
    #: The statement as written (SHOW CREATE VIEW shows it).
    text: str = records.field(default="", eq=False, repr=False)
    if_not_exists: bool = False
    temporary: bool = False


@records.record(kw_only=True)
class CreateFunction(Statement):
    """``CREATE [TEMPORARY [SYSTEM]] FUNCTION name AS 'module.function' [LANGUAGE PYTHON]``."""

    name: str
    path: str
    language: str | None = None
    if_not_exists: bool = False
    temporary: bool = False
    path_span: Span | None = _extra_span
    language_span: Span | None = _extra_span


@records.record(kw_only=True)
class CreateTableAs(Statement):
    """``CREATE TABLE t WITH (...) AS query``."""

    name: str
    options: tuple[Property, ...]
    query: QueryExpr
    if_not_exists: bool = False


@records.record(kw_only=True)
class StatementSetMark(Statement):
    """``BEGIN STATEMENT SET`` (``begin``) or ``END`` around INSERTs (the SQL client's spelling)."""

    begin: bool


@records.record(kw_only=True)
class Show(Statement):
    """``SHOW TABLES | VIEWS | FUNCTIONS``."""

    what: str


@records.record(kw_only=True)
class ShowCreate(Statement):
    """``SHOW CREATE TABLE | VIEW name``."""

    kind: str
    name: str


@records.record(kw_only=True)
class Describe(Statement):
    """``DESCRIBE name``: its columns."""

    name: str


@records.record(kw_only=True)
class Use(Statement):
    """``USE CATALOG name`` (``kind`` ``CATALOG``) or ``USE name`` (``DATABASE``)."""

    kind: str
    name: str


@records.record(kw_only=True)
class CreateCatalog(Statement):
    name: str


@records.record(kw_only=True)
class Reset(Statement):
    """``RESET ['key']``: a setting (or all) back to its default."""

    key: str | None


@records.record(kw_only=True)
class SetStmt(Statement):
    key: str
    value: str
    key_span: Span | None = records.field(default=None, eq=False, repr=False)
    value_span: Span | None = records.field(default=None, eq=False, repr=False)


@records.record(kw_only=True)
class Insert(Statement):
    table: str
    query: QueryExpr
    table_span: Span | None = _extra_span


@records.record(kw_only=True)
class Query(Statement):
    query: QueryExpr


@records.record(kw_only=True)
class Explain(Statement):
    statement: Insert | Query


@records.record(kw_only=True)
class Script(Node):
    """Every statement of one file, in order."""

    statements: tuple[Statement, ...]


def rewrite(node, visit):
    """``node`` with nodes replaced: ``visit(n)`` returns the replacement of ``n``, ``n`` itself
    to keep it whole, or None to look inside it. Unchanged parts are kept, not copied."""
    if isinstance(node, tuple):
        new = tuple(rewrite(n, visit) for n in node)
        return node if all(a is b for a, b in zip(new, node, strict=True)) else new
    if not isinstance(node, Node):
        return node
    replaced = visit(node)
    if replaced is not None:
        return replaced
    changes = {}
    for field in records.fields(type(node)):
        value = getattr(node, field.name)
        if isinstance(value, (Node, tuple)):
            new = rewrite(value, visit)
            if new is not value:
                changes[field.name] = new
    return records.evolve(node, **changes) if changes else node
