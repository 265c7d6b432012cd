"""Text → syntax tree.

Lark parses with the dialect's LALR grammar; ``_Builder`` turns its tree into ``clink.compiler.ast``
nodes, one method per grammar rule. A syntax error becomes a ``SqlError`` that points at the
offending token and says in words what could have come there instead.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re

import lark
import pyarrow as pa
from lark import Token, Transformer, v_args

from clink.compiler import ast
from clink.compiler import types as T
from clink.errors import Span, SqlError
from clink.grammar import parser

__all__ = ["parse_script"]


def parse_script(text: str, file: str = "<sql>") -> ast.Script:
    """Parse every statement of ``text``.

    >>> parse_script("SET 'a' = 'b';").statements[0].key
    'a'
    """
    try:
        tree = parser().parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        raise _syntax_error(exc, text, file) from None
    try:
        return _Builder(file, text).transform(tree)
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, SqlError):
            raise exc.orig_exc from None
        raise


# ---------------------------------------------------------------- syntax errors

_UID_HINT = re.compile(r"\s*UID\s*\(\s*'([A-Za-z0-9_.:-]+)'\s*\)\s*", re.IGNORECASE)

_WORDS = {
    "HINT": "a query hint /*+ ... */ (taken only right after SELECT)",
    "IDENT": "a name",
    "QUOTED_IDENT": "a `quoted name`",
    "INTEGER_LIT": "a number",
    "DECIMAL_LIT": "a number",
    "STRING": "a string literal",
    "COMP_OP": "a comparison (=, <>, <, ...)",
    "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*', '/' or '%'",
    "CONCAT_OP": "'||'",
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "SEMICOLON": "';'",
    "DOT": "'.'",
    "STAR": "'*'",
    "EQ": "'='",
    "ARROW": "'=>'",
    "LT": "'<'",
    "GT": "'>'",
    "LSQB": "'['",
    "RSQB": "']'",
    "$END": "the end of the input",
}

# Terminals that stand for "an expression could start here": listed as one phrase.
_EXPRESSION_STARTERS = {
    "IDENT", "QUOTED_IDENT", "INTEGER_LIT", "DECIMAL_LIT", "STRING", "CAST", "CASE", "INTERVAL",
    "TRUE", "FALSE", "NULL", "NOT", "EXTRACT", "CURRENT_TIMESTAMP", "TIMESTAMP", "DATE", "TIME",
}


def _describe_expected(expected: set[str]) -> str:
    if len(expected & _EXPRESSION_STARTERS) >= 5:
        words = ["an expression (a column, a literal or a function call)"]
        expected = expected - _EXPRESSION_STARTERS - {
            "ADD_OP", "LPAR", "TIMESTAMP_LTZ", "TRY_CAST", "LOCALTIMESTAMP", "LOCALTIME", "NOW", "CURRENT_DATE",
            "CURRENT_TIME", "DESCRIPTOR", "TABLE", "IF", "LEFT", "RIGHT", "TRUNCATE",
        }
        expected = {e for e in expected if _WORDS.get(e) or not e.isupper() or e in ("STAR",)}
    else:
        words = []
    soft = {"YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND", "YEARS", "MONTHS", "DAYS", "HOURS",
            "MINUTES", "SECONDS", "MILLISECOND", "MILLISECONDS", "WEEK", "QUARTER", "COMMENT",
            "TEMPORARY", "WATERMARK", "ENFORCED", "PRECISION", "LOCAL", "ZONE", "ESCAPE",
            "DESCRIPTOR", "UNBOUNDED", "PRECEDING", "ROWS", "RANGE", "ROW", "PARTITION", "KEY",
            "NOW", "CURRENT", "TRY_CAST", "PARTITIONED", "EXPLAIN", "SET", "VIEW", "FILTER"}
    if "IDENT" in expected:
        # Where any name fits, the soft keywords are names too; listing them is noise.
        expected = expected - soft
    for name in sorted(expected, key=lambda n: (n not in _WORDS, n)):
        words.append(_WORDS.get(name, name.removesuffix("_KW")))
    if len(words) > 12:
        words = words[:12] + ["..."]
    return ", ".join(words)


def _syntax_error(exc: lark.exceptions.UnexpectedInput, text: str, file: str) -> SqlError:
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        token = exc.token
        if token.type == "$END":
            line, col = _end_position(text)
            span = Span(file, line, col, line, col + 1)
            message = "unexpected end of input"
        else:
            span = Span(file, token.line, token.column, token.end_line or token.line,
                        token.end_column or token.column + len(token))
            message = f"unexpected {_token_words(token)}"
            if token.type == "HINT":
                return SqlError(f"a query hint is taken only right after SELECT, not here: {' '.join(token.split())}",
                                span, "clink takes /*+ UID('name') */ after SELECT; table hints such as "
                                "/*+ OPTIONS(...) */ are not supported")
        expected = _describe_expected(set(exc.expected))
        hint = _hint_for(exc, text)
        return SqlError(message, span, hint or f"expected {expected}")
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        char = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else ""
        span = Span(file, exc.line, exc.column, exc.line, exc.column + 1)
        if char == "'":
            return SqlError("unterminated string literal", span,
                            "close it with ' (write '' for a quote inside a string)")
        if char == "`":
            return SqlError("unterminated quoted name", span, "close it with `")
        if char == '"':
            return SqlError("unexpected '\"'", span,
                            "strings use single quotes ('text'); names with odd characters use backquotes (`name`)")
        allowed = _describe_expected(set(exc.allowed or ()))
        return SqlError(f"unexpected character {char!r}", span, f"expected {allowed}" if allowed else None)
    if isinstance(exc, lark.exceptions.UnexpectedEOF):
        line, col = _end_position(text)
        return SqlError("unexpected end of input", Span(file, line, col, line, col + 1),
                        f"expected {_describe_expected(set(exc.expected))}")
    return SqlError(str(exc), Span(file, getattr(exc, "line", 1), getattr(exc, "column", 1)))


def _token_words(token: Token) -> str:
    if token.type in ("IDENT", "QUOTED_IDENT"):
        return f"name {token.value!r}"
    if token.type in ("STRING", "INTEGER_LIT", "DECIMAL_LIT"):
        return f"{_WORDS[token.type].removeprefix('a ')} {token.value}"
    if token.value.isalpha() or "_" in token.value:
        return token.value.upper()
    return repr(token.value)


def _hint_for(exc: lark.exceptions.UnexpectedToken, text: str) -> str | None:
    """Known mistakes, recognised from the token and what came just before it."""
    token = exc.token
    before = text[: token.start_pos].rstrip() if token.start_pos is not None else text.rstrip()
    if token.type == "FROM" and before.endswith(","):
        line = text[: len(before)].count("\n") + 1
        return f"expected another select item — is there a trailing comma on line {line}?"
    if token.type == "$END" and before and not before.endswith(";"):
        open_parens = before.count("(") - before.count(")")
        if open_parens > 0:
            return f"{open_parens} '(' not closed"
    if token.type in ("IDENT", "QUOTED_IDENT") and exc.expected and "FROM" in exc.expected and "COMMA" in exc.expected:
        return "a ',' may be missing between select items, or 'AS' before an alias"
    if (token.type not in _VALUE_TOKENS and token.value.replace("_", "").isalpha()
            and exc.expected and "IDENT" in exc.expected):
        return f"{token.value.upper()} is a reserved word; to use it as a name, write it in backquotes: `{token.value}`"
    if token.type == "STRING" and exc.expected and "IDENT" in exc.expected:
        return "names are written bare or in backquotes (`name`); single quotes make a string"
    return None


def _end_position(text: str) -> tuple[int, int]:
    stripped = text.rstrip()
    lines = stripped.splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


# ---------------------------------------------------------------- tree → AST


def _unquote(s: str) -> str:
    return s[1:-1].replace("''", "'")


def _with_windows(node, named: dict[str, ast.WindowSpec]):
    """``node`` with every ``OVER w`` replaced by the window ``w`` of the WINDOW clause."""

    def visit(n):
        if not isinstance(n, ast.NamedWindow):
            return None
        if n.name not in named:
            raise SqlError(f"unknown window {n.name!r}", n.span,
                           f"windows of this SELECT's WINDOW clause: {', '.join(named) or 'none'}")
        return named[n.name]

    return ast.rewrite(node, visit)


class _Row(tuple):
    """The values of one row of VALUES, with the span of its parentheses."""

    span: Span


class _Quantifier(str):
    """``ALL`` or ``DISTINCT`` of a set operation."""


def _strip_keywords(children: list) -> list:
    """Drop keyword tokens (upper-case terminal names other than values); keep nodes and values."""
    return [c for c in children if not (isinstance(c, Token) and c.type not in _VALUE_TOKENS)]


_VALUE_TOKENS = {"STRING", "INTEGER_LIT", "DECIMAL_LIT", "IDENT", "QUOTED_IDENT", "COMP_OP", "ADD_OP",
                 "MUL_OP", "CONCAT_OP"}

_UNITS = {
    "YEARS": "YEAR", "MONTHS": "MONTH", "DAYS": "DAY", "HOURS": "HOUR", "MINUTES": "MINUTE",
    "SECONDS": "SECOND", "MILLISECONDS": "MILLISECOND", "DOW": "DAYOFWEEK", "DOY": "DAYOFYEAR",
}


class _JoinKind(str):
    """inner, left, right or full."""


class _Name(str):
    """An identifier with the span it was written at."""

    span: Span


@v_args(meta=True)
class _Builder(Transformer):
    def __init__(self, file: str, text: str = "") -> None:
        super().__init__()
        self.file = file
        self.text = text

    def _span(self, meta) -> Span:
        if getattr(meta, "empty", False):
            return Span(self.file, 1, 1, 1, 2)
        return Span(self.file, meta.line, meta.column, meta.end_line, meta.end_column)

    def _tspan(self, token: Token) -> Span:
        return Span(self.file, token.line, token.column, token.end_line, token.end_column)

    # -- names

    def _name(self, token: Token, value: str) -> _Name:
        name = _Name(value)
        name.span = self._tspan(token)
        return name

    def ident(self, meta, children):
        return self._name(children[0], str(children[0]))

    def quoted_ident(self, meta, children):
        return self._name(children[0], children[0][1:-1].replace("``", "`"))

    def soft_keyword(self, meta, children):
        return self._name(children[0], str(children[0]))

    keyword_name = soft_keyword

    def qualified_name(self, meta, children):
        name = _Name(".".join(children))
        name.span = self._span(meta)
        return name

    def name_list(self, meta, children):
        return tuple(children)

    # -- script and statements

    def start(self, meta, children):
        statements: list[ast.Statement] = []
        opened: ast.StatementSetMark | None = None
        for c in children:
            if isinstance(c, tuple):  # EXECUTE STATEMENT SET BEGIN ... END: its INSERTs
                statements.extend(c)
            elif isinstance(c, ast.StatementSetMark):
                if c.begin == (opened is not None):
                    raise SqlError("BEGIN STATEMENT SET inside another" if c.begin else
                                   "END without BEGIN STATEMENT SET", c.span)
                opened = c if c.begin else None
            elif isinstance(c, ast.Statement):
                if opened is not None and not isinstance(c, ast.Insert):
                    raise SqlError("a statement set holds INSERT statements only", c.span,
                                   "END the statement set before this statement")
                statements.append(c)
        if opened is not None:
            raise SqlError("BEGIN STATEMENT SET without END", opened.span)
        return ast.Script(statements=tuple(statements), span=self._span(meta))

    def statement_set(self, meta, children):
        return tuple(c for c in children if isinstance(c, ast.Insert))

    def begin_statement_set(self, meta, children):
        return ast.StatementSetMark(begin=True, span=self._span(meta))

    def end_statement_set(self, meta, children):
        return ast.StatementSetMark(begin=False, span=self._span(meta))

    def create_table_as(self, meta, children):
        name = next(c for c in children if isinstance(c, _Name))
        options = next(c[1] for c in children if isinstance(c, tuple) and c[0] == "with")
        query = next(c for c in children if isinstance(c, ast.QueryExpr))
        return ast.CreateTableAs(name=str(name), options=options, query=query,
                                 if_not_exists=any(c == "if_not_exists" for c in children), span=self._span(meta))

    def create_table(self, meta, children):
        flags = {c.data if isinstance(c, lark.Tree) else c for c in children if isinstance(c, (str, lark.Tree))}
        name = next(c for c in children if isinstance(c, _Name))
        columns, watermark, pk, partitioned, options, like = [], None, (), (), (), None
        for child in children:
            match child:
                case ast.ColumnDef() | ast.ComputedColumn() | ast.MetadataColumn():
                    columns.append(child)
                case ast.WatermarkDef():
                    if watermark is not None:
                        raise SqlError("a table can have only one WATERMARK", child.span)
                    watermark = child
                case ("primary_key", names):
                    if pk:
                        raise SqlError("a table can have only one PRIMARY KEY", self._span(meta))
                    pk = names
                case ("partitioned_by", names):
                    partitioned = names
                case ("with", props):
                    options = props
                case ("like", source):
                    like = source
        if not columns and like is None:
            raise SqlError(f"table {str(name)!r} declares no column", self._span(meta),
                           "list its columns, or start from another table with LIKE t")
        return ast.CreateTable(
            name=str(name), columns=tuple(columns), watermark=watermark, primary_key=pk, like=like,
            partitioned_by=partitioned, options=options, if_not_exists="if_not_exists" in flags,
            temporary="temporary" in flags, span=self._span(meta),
        )

    def like_clause(self, meta, children):
        (name,) = _strip_keywords(children)
        return ("like", str(name))

    def temporary(self, meta, children):
        return "temporary"

    def if_not_exists(self, meta, children):
        return "if_not_exists"

    def column_def(self, meta, children):
        name, typ, *rest = _strip_keywords(children)
        nullable = not any(r == "not_null" for r in rest)
        return ast.ColumnDef(name=str(name), type=typ, nullable=nullable, span=self._span(meta))

    def metadata_column(self, meta, children):
        virtual = any(isinstance(c, Token) and c.type == "VIRTUAL" for c in children)
        name, typ, *rest = _strip_keywords(children)
        key = next((_unquote(str(r)) for r in rest if isinstance(r, Token) and r.type == "STRING"), str(name))
        return ast.MetadataColumn(name=str(name), type=typ, key=key, virtual=virtual, span=self._span(meta))

    def not_null(self, meta, children):
        return "not_null"

    def comment(self, meta, children):
        return "comment"

    def computed_column(self, meta, children):
        name, expr, *_ = _strip_keywords(children)
        return ast.ComputedColumn(name=str(name), expr=expr, span=self._span(meta))

    def watermark_def(self, meta, children):
        name, expr = _strip_keywords(children)
        return ast.WatermarkDef(column=str(name), expr=expr, span=self._span(meta))

    def primary_key(self, meta, children):
        (names,) = _strip_keywords(children)
        return ("primary_key", tuple(str(n) for n in names))

    def partitioned_by(self, meta, children):
        (names,) = _strip_keywords(children)
        return ("partitioned_by", tuple(str(n) for n in names))

    def with_clause(self, meta, children):
        props = tuple(c for c in children if isinstance(c, ast.Property))
        seen: dict[str, ast.Property] = {}
        for p in props:
            if p.key in seen:
                raise SqlError(f"option {p.key!r} is given twice", p.span)
            seen[p.key] = p
        return ("with", props)

    def property(self, meta, children):
        key, value = [c for c in children if c.type == "STRING"]
        return ast.Property(key=_unquote(key), value=_unquote(value), span=self._span(meta))

    def create_view(self, meta, children):
        flags = {c for c in children if isinstance(c, str) and c in ("temporary", "if_not_exists")}
        name = next(c for c in children if isinstance(c, _Name))
        query = next(c for c in children if isinstance(c, ast.QueryExpr))
        columns = next((c[1] for c in children if isinstance(c, tuple) and c[:1] == ("columns",)), None)
        written = self.text[meta.start_pos:meta.end_pos] if not getattr(meta, "empty", False) else ""
        return ast.CreateView(name=str(name), query=query, columns=columns, if_not_exists="if_not_exists" in flags,
                              temporary="temporary" in flags, text=written, span=self._span(meta))

    def column_aliases(self, meta, children):
        names = children[0]
        seen: set[str] = set()
        for n in names:
            if n.lower() in seen:
                raise SqlError(f"column {str(n)!r} is named twice", n.span)
            seen.add(n.lower())
        return ("columns", tuple(str(n) for n in names))

    def create_function(self, meta, children):
        flags = {c for c in children if isinstance(c, str) and c in ("temporary", "if_not_exists")}
        names = [c for c in children if isinstance(c, _Name)]
        path = next(c for c in children if isinstance(c, Token) and c.type == "STRING")
        language = names[1] if len(names) > 1 else None
        return ast.CreateFunction(
            name=str(names[0]), path=_unquote(path), language=str(language).upper() if language else None,
            if_not_exists="if_not_exists" in flags, temporary="temporary" in flags,
            path_span=self._tspan(path), language_span=language.span if language else None,
            span=self._span(meta),
        )

    def system(self, meta, children):
        return "system"

    def set_stmt(self, meta, children):
        key, value = [c for c in children if isinstance(c, Token) and c.type == "STRING"]
        return ast.SetStmt(key=_unquote(key), value=_unquote(value), key_span=self._tspan(key),
                           value_span=self._tspan(value), span=self._span(meta))

    def insert_stmt(self, meta, children):
        name, query = _strip_keywords(children)
        return ast.Insert(table=str(name), query=query, table_span=name.span, span=self._span(meta))

    def query_stmt(self, meta, children):
        return ast.Query(query=children[0], span=self._span(meta))

    def show_list(self, meta, children):
        what = next(c for c in children if isinstance(c, Token)
                    and c.type in ("TABLES", "VIEWS", "FUNCTIONS", "CATALOGS", "DATABASES"))
        return ast.Show(what=what.type, span=self._span(meta))

    def show_current(self, meta, children):
        what = next(c for c in children if isinstance(c, Token) and c.type in ("CATALOG", "DATABASE"))
        return ast.Show(what=f"CURRENT {what.type}", span=self._span(meta))

    def use_catalog(self, meta, children):
        (name,) = _strip_keywords(children)
        return ast.Use(kind="CATALOG", name=str(name), span=self._span(meta))

    def use_database(self, meta, children):
        (name,) = _strip_keywords(children)
        return ast.Use(kind="DATABASE", name=str(name), span=self._span(meta))

    def create_catalog(self, meta, children):
        name = next(c for c in _strip_keywords(children) if isinstance(c, _Name))
        return ast.CreateCatalog(name=str(name), span=self._span(meta))

    def show_create(self, meta, children):
        kind = next(c for c in children if isinstance(c, Token) and c.type in ("TABLE", "VIEW"))
        (name,) = _strip_keywords(children)
        return ast.ShowCreate(kind=kind.type, name=str(name), span=self._span(meta))

    def describe_stmt(self, meta, children):
        (name,) = _strip_keywords(children)
        return ast.Describe(name=str(name), span=self._span(meta))

    def reset_stmt(self, meta, children):
        keys = [c for c in children if isinstance(c, Token) and c.type == "STRING"]
        return ast.Reset(key=_unquote(keys[0]) if keys else None, span=self._span(meta))

    def explain_stmt(self, meta, children):
        (inner,) = _strip_keywords(children)
        if isinstance(inner, ast.QueryExpr):
            inner = ast.Query(query=inner, span=inner.span)
        return ast.Explain(statement=inner, span=self._span(meta))

    # -- types

    def simple_type(self, meta, children):
        return T.simple_type(children[0].type.removesuffix("_KW"))

    def decimal_type(self, meta, children):
        nums = [int(c) for c in _strip_keywords(children)]
        precision = nums[0] if nums else 10
        scale = nums[1] if len(nums) > 1 else 0
        span = self._span(meta)
        if not 1 <= precision <= 38:
            raise SqlError(f"DECIMAL precision must be between 1 and 38, got {precision}", span)
        if not 0 <= scale <= precision:
            raise SqlError(f"DECIMAL scale must be between 0 and the precision ({precision}), got {scale}", span)
        return pa.decimal128(precision, scale)

    def sized_type(self, meta, children):
        kind = children[0].type
        nums = [int(c) for c in _strip_keywords(children)]
        if kind == "TIME":
            precision = nums[0] if nums else 0
            if not 0 <= precision <= 9:
                raise SqlError(f"TIME precision must be between 0 and 9, got {precision}", self._span(meta))
            return T.time_type(precision)
        if nums and nums[0] < 1:
            raise SqlError(f"{kind} length must be at least 1, got {nums[0]}", self._span(meta))
        return T.simple_type(kind)

    def timestamp_type(self, meta, children):
        kind = children[0].type
        nums = [int(c) for c in _strip_keywords(children) if isinstance(c, Token)]
        precision = nums[0] if nums else 6
        if not 0 <= precision <= 9:
            raise SqlError(f"{kind} precision must be between 0 and 9, got {precision}", self._span(meta))
        local = kind == "TIMESTAMP_LTZ" or "with_local_time_zone" in children
        return T.timestamp_type(precision, local_time_zone=local)

    def without_time_zone(self, meta, children):
        return "without_time_zone"

    def with_local_time_zone(self, meta, children):
        return "with_local_time_zone"

    def row_type(self, meta, children):
        fields = [c for c in children if isinstance(c, pa.Field)]
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise SqlError("a ROW type has two fields with the same name", self._span(meta))
        return pa.struct(fields)

    def row_field(self, meta, children):
        name, typ, *rest = _strip_keywords(children)
        return pa.field(str(name), typ, nullable=not rest)

    def array_type(self, meta, children):
        (inner,) = _strip_keywords(children)
        return pa.list_(inner)

    def map_type(self, meta, children):
        key, value = _strip_keywords(children)
        return pa.map_(key, value)

    # -- queries

    def hint(self, meta, children):
        (token,) = children
        m = _UID_HINT.fullmatch(str(token)[3:-2])
        if m is None:
            raise SqlError(f"unknown query hint {' '.join(str(token).split())}", self._tspan(token),
                           "clink takes one hint, /*+ UID('name') */ right after SELECT: the name its stateful "
                           "operators keep in checkpoints (docs/checkpoints.md)")
        return ("uid", m[1])

    def select(self, meta, children):
        distinct = any(c == "distinct" for c in children)
        items, from_, where, group_by, having, uid, named = [], None, None, (), None, None, {}
        for child in children:
            match child:
                case ("uid", name):
                    uid = name
                case ast.SelectItem():
                    items.append(child)
                case ast.FromItem():
                    from_ = child
                case ("where", e):
                    where = e
                case ("group_by", es):
                    group_by = es
                case ("having", e):
                    having = e
                case ("windows", windows):
                    named = windows
        # OVER w: the window of the WINDOW clause (an unknown name is refused here).
        items = [_with_windows(item, named) for item in items]
        return ast.Select(items=tuple(items), from_=from_, where=where, group_by=group_by,
                          having=having, distinct=distinct, uid=uid, span=self._span(meta))

    def join(self, meta, children):
        parts = _strip_keywords(children)
        kind = parts.pop(1) if isinstance(parts[1], _JoinKind) else "inner"
        left, right, condition = parts
        return ast.Join(left=left, right=right, kind=str(kind), condition=condition, span=self._span(meta))

    def cross_join(self, meta, children):
        left, right = _strip_keywords(children)
        return ast.Join(left=left, right=right, kind="inner", span=self._span(meta))

    def join_kind(self, meta, children):
        return _JoinKind(children[0].type.lower())

    def _set_op(self, op: str, meta, children) -> ast.SetOp:
        parts = _strip_keywords(children)
        quantifier = parts.pop(1) if isinstance(parts[1], _Quantifier) else "distinct"
        left, right = parts
        return ast.SetOp(op=op, all=quantifier == "all", left=left, right=right, span=self._span(meta))

    def union(self, meta, children):
        return self._set_op("UNION", meta, children)

    def except_(self, meta, children):
        return self._set_op("EXCEPT", meta, children)

    def intersect(self, meta, children):
        return self._set_op("INTERSECT", meta, children)

    def set_quantifier(self, meta, children):
        return _Quantifier(children[0].type.lower())

    def values(self, meta, children):
        rows = [c for c in children if isinstance(c, _Row)]
        for row in rows[1:]:
            if len(row) != len(rows[0]):
                raise SqlError(f"every row of VALUES needs {len(rows[0])} value(s), as the first has; "
                               f"this one has {len(row)}", row.span)
        return ast.Values(rows=tuple(tuple(row) for row in rows), span=self._span(meta))

    def values_row(self, meta, children):
        row = _Row(_strip_keywords(children))
        row.span = self._span(meta)
        return row

    def ordered_query(self, meta, children):
        query = children[0]
        order = next((c[1] for c in children[1:] if isinstance(c, tuple) and c[0] == "order_by"), ())
        limit = next((c[1] for c in children[1:] if isinstance(c, tuple) and c[0] == "limit"), None)
        return ast.OrderedQuery(query=query, order=order, limit=limit, span=self._span(meta))

    def limit_clause(self, meta, children):
        (count,) = [c for c in children if isinstance(c, Token) and c.type == "INTEGER_LIT"]
        return ("limit", int(count))

    def with_query(self, meta, children):
        parts = _strip_keywords(children)
        ctes, query = tuple(parts[:-1]), parts[-1]
        seen: dict[str, ast.Cte] = {}
        for cte in ctes:
            if cte.name.lower() in seen:
                raise SqlError(f"WITH names {cte.name!r} twice", cte.span)
            seen[cte.name.lower()] = cte
        return ast.With(ctes=ctes, query=query, span=self._span(meta))

    def cte(self, meta, children):
        parts = _strip_keywords(children)
        name, query = parts[0], parts[-1]
        columns = parts[1][1] if len(parts) == 3 else None
        return ast.Cte(name=str(name), columns=columns, query=query, span=self._span(meta))

    def distinct(self, meta, children):
        return "distinct"

    def star(self, meta, children):
        return ast.Star(span=self._span(meta))

    def aliased_expr(self, meta, children):
        parts = _strip_keywords(children)
        expr = parts[0]
        alias = str(parts[1]) if len(parts) > 1 else None
        if isinstance(expr, ast.QualifiedStar):
            if alias is not None:
                raise SqlError("'.*' cannot have an alias", self._span(meta))
            qualifier = expr.qualifier
            if not isinstance(qualifier, ast.ColumnRef):
                raise SqlError("'.*' needs a table name or alias before it", expr.span)
            return ast.Star(qualifier=qualifier.name, span=expr.span)
        return ast.AliasedExpr(expr=expr, alias=alias, span=self._span(meta))

    def where(self, meta, children):
        return ("where", _strip_keywords(children)[0])

    def group_by(self, meta, children):
        return ("group_by", tuple(_strip_keywords(children)))

    def grouping_sets(self, meta, children):
        return ast.GroupingSets(sets=tuple(c for c in children if isinstance(c, tuple)), span=self._span(meta))

    def grouping_set(self, meta, children):
        return tuple(_strip_keywords(children))

    def having(self, meta, children):
        return ("having", _strip_keywords(children)[0])

    def _alias(self, parts: list) -> str | None:
        names = [p for p in parts if isinstance(p, _Name)]
        return str(names[-1]) if names else None

    def unnest_ref(self, meta, children):
        parts = _strip_keywords(children)
        expr, rest = parts[0], parts[1:]
        ordinality = "ordinality" in rest
        names = [p for p in rest if p != "ordinality"]
        alias = str(names[0]) if names else None
        columns = names[1][1] if len(names) > 1 else None
        return ast.Unnest(expr=expr, ordinality=ordinality, alias=alias, columns=columns, span=self._span(meta))

    def ordinality(self, meta, children):
        return "ordinality"

    def table_ref(self, meta, children):
        parts = _strip_keywords(children)
        name = parts[0]
        as_of = next((p[1] for p in parts if isinstance(p, tuple) and p[0] == "as_of"), None)
        names = [p for p in parts[1:] if not (isinstance(p, tuple) and p[0] == "as_of")]
        alias = str(names[0]) if names else None
        return ast.TableRef(name=str(name), alias=alias, as_of=as_of, span=self._span(meta))

    def for_system_time(self, meta, children):
        word, expr = _strip_keywords(children)
        if str(word).upper() != "SYSTEM_TIME":
            raise SqlError(f"expected FOR SYSTEM_TIME AS OF, got FOR {word}", word.span if hasattr(word, "span")
                           else self._span(meta))
        return ("as_of", expr)

    def subquery_ref(self, meta, children):
        parts = _strip_keywords(children)
        alias = str(parts[1]) if len(parts) > 1 else None
        columns = parts[2][1] if len(parts) > 2 else None
        return ast.SubqueryRef(query=parts[0], alias=alias, columns=columns, span=self._span(meta))

    def lateral_table_ref(self, meta, children):
        parts = _strip_keywords(children)
        call, names = parts[0], parts[1:]
        alias = str(names[0]) if names else None
        columns = names[1][1] if len(names) > 1 else None
        return ast.LateralTable(call=call, alias=alias, columns=columns, span=self._span(meta))

    def table_function_ref(self, meta, children):
        parts = _strip_keywords(children)
        alias = str(parts[1]) if len(parts) > 1 else None
        return ast.TableFunctionRef(call=parts[0], alias=alias, span=self._span(meta))

    # -- MATCH_RECOGNIZE

    def match_recognize(self, meta, children):
        parts = _strip_keywords(children)
        source, rest = parts[0], parts[1:]
        fields: dict = {"partition_by": (), "measures": (), "defines": [], "pattern": None}
        alias = None
        for p in rest:
            if isinstance(p, tuple) and p and p[0] in ("partition_by", "order_by", "measures", "skip", "within"):
                fields[p[0]] = p[1]
            elif isinstance(p, tuple) and p and p[0] == "pattern":
                fields["pattern"] = p[1]
            elif isinstance(p, ast.AliasedExpr):
                fields["defines"].append(p)
            elif isinstance(p, _Name):
                alias = str(p)
        skip = fields.pop("skip", ("past_last", None, None))
        return ast.MatchRecognize(input=source, partition_by=fields["partition_by"], order_by=fields["order_by"],
                                  measures=fields["measures"], skip=skip[0], skip_to=skip[1], skip_span=skip[2],
                                  pattern=fields["pattern"], within=fields.get("within"),
                                  defines=tuple(fields["defines"]), alias=alias, span=self._span(meta))

    def mr_measures(self, meta, children):
        return ("measures", tuple(_strip_keywords(children)))

    def mr_measure(self, meta, children):
        expr, name = _strip_keywords(children)
        return ast.AliasedExpr(expr=expr, alias=str(name), span=self._span(meta))

    def mr_define(self, meta, children):
        name, expr = _strip_keywords(children)
        return ast.AliasedExpr(expr=expr, alias=str(name), span=name.span)

    def mr_one_row(self, meta, children):
        return ("rows", "one")

    def mr_all_rows(self, meta, children):
        raise SqlError("ALL ROWS PER MATCH is not supported: clink, like Flink, gives one row per match",
                       self._span(meta), "write ONE ROW PER MATCH (or leave it out) and measure what you need "
                                         "with FIRST(), LAST() and aggregates in MEASURES")

    def mr_skip_past_last(self, meta, children):
        return ("skip", ("past_last", None, self._span(meta)))

    def mr_skip_next(self, meta, children):
        return ("skip", ("next_row", None, self._span(meta)))

    def mr_skip_first(self, meta, children):
        return ("skip", ("to_first", str(_strip_keywords(children)[0]), self._span(meta)))

    def mr_skip_last(self, meta, children):
        return ("skip", ("to_last", str(_strip_keywords(children)[0]), self._span(meta)))

    def mr_within(self, meta, children):
        return ("within", _strip_keywords(children)[0])

    def mr_subset(self, meta, children):
        raise SqlError("SUBSET is not supported in MATCH_RECOGNIZE", self._span(meta),
                       "name each variable in the expressions (aggregates over all rows: leave the variable out)")

    def mr_sequence(self, meta, children):
        return ("pattern", tuple(children))

    def mr_alternation(self, meta, children):
        raise SqlError("alternation (|) in a PATTERN is not supported", self._span(meta),
                       "write one pattern per query and UNION ALL the results")

    def mr_group(self, meta, children):
        raise SqlError("groups in a PATTERN are not supported: a quantifier applies to one variable",
                       self._span(meta), "write the variables one after another, e.g. PATTERN (A B+ C)")

    def mr_permute(self, meta, children):
        raise SqlError("PERMUTE in a PATTERN is not supported", self._span(meta),
                       "write each order as its own query and UNION ALL the results")

    def mr_anchor(self, meta, children):
        raise SqlError("anchors (^, $) in a PATTERN are not supported: a stream has no end", self._span(meta))

    def mr_exclusion(self, meta, children):
        raise SqlError("exclusions {- -} in a PATTERN are not supported (they need ALL ROWS PER MATCH)",
                       self._span(meta))

    def mr_variable(self, meta, children):
        return children[0]

    def mr_term(self, meta, children):
        name = children[0]
        if isinstance(name, tuple):  # a group: refused above
            return name
        low, high, greedy = children[1] if len(children) > 1 else (1, 1, True)
        return ast.PatternTerm(variable=str(name), low=low, high=high, greedy=greedy, span=self._span(meta))

    def mr_quantifier(self, meta, children):
        low, high = children[0]
        reluctant = len(children) > 1
        if reluctant and (low, high) == (0, 1):
            raise SqlError("the reluctant optional quantifier ?? is not supported", self._span(meta),
                           "write ? (greedy)")
        return (low, high, not reluctant)

    def mr_star(self, meta, children):
        return (0, None)

    def mr_plus(self, meta, children):
        if str(children[0]) != "+":
            raise SqlError(f"{children[0]!s} is not a quantifier", self._span(meta), "quantifiers: * + ? {n} {n,} {n,m} {,m}")
        return (1, None)

    def mr_optional(self, meta, children):
        return (0, 1)

    def mr_exactly(self, meta, children):
        n = int(children[0])
        if n < 1:
            raise SqlError("{n} must be at least 1", self._span(meta))
        return (n, n)

    def mr_from(self, meta, children):
        low = int(children[0])
        high = int(children[1]) if len(children) > 1 else None
        if high is not None and (high < low or high < 1):
            raise SqlError(f"{{{low},{high}}}: the upper bound must be at least the lower one and at least 1",
                           self._span(meta))
        return (low, high)

    def mr_up_to(self, meta, children):
        high = int(children[0])
        if high < 1:
            raise SqlError("{,m} needs m of at least 1", self._span(meta))
        return (0, high)

    # -- expressions

    def or_(self, meta, children):
        left, right = _strip_keywords(children)
        return ast.Or(left=left, right=right, span=self._span(meta))

    def and_(self, meta, children):
        left, right = _strip_keywords(children)
        return ast.And(left=left, right=right, span=self._span(meta))

    def not_(self, meta, children):
        (operand,) = _strip_keywords(children)
        return ast.Not(operand=operand, span=self._span(meta))

    def not_kw(self, meta, children):
        return "not"

    def comparison(self, meta, children):
        left, op, right = children
        op = {"!=": "<>"}.get(str(op), str(op))
        return ast.Comparison(op=op, left=left, right=right, span=self._span(meta))

    def is_null(self, meta, children):
        return ast.IsNull(operand=children[0], negated="not" in children, span=self._span(meta))

    def is_true(self, meta, children):
        return ast.IsBool(operand=children[0], value=True, negated="not" in children, span=self._span(meta))

    def is_false(self, meta, children):
        return ast.IsBool(operand=children[0], value=False, negated="not" in children, span=self._span(meta))

    def is_unknown(self, meta, children):
        # A BOOLEAN's UNKNOWN is its NULL.
        return ast.IsNull(operand=children[0], negated="not" in children, span=self._span(meta))

    def is_distinct(self, meta, children):
        left, right = [c for c in _strip_keywords(children) if c != "not"]
        span = self._span(meta)
        call = ast.FunctionCall(name="IS DISTINCT FROM", args=(left, right), span=span)
        return ast.Not(operand=call, span=span) if "not" in children else call

    def position(self, meta, children):
        call, needle, text = [c for c in children if not (isinstance(c, Token) and c.type == "IN")]
        return ast.FunctionCall(name="POSITION", args=(needle, text), name_span=self._tspan(call),
                                span=self._span(meta))

    def substring(self, meta, children):
        call, *args = [c for c in children if not (isinstance(c, Token) and c.type in ("FROM", "FOR"))]
        return ast.FunctionCall(name="SUBSTRING", args=tuple(args), name_span=self._tspan(call), span=self._span(meta))

    def trim(self, meta, children):
        call, operand = children
        return ast.FunctionCall(name="TRIM", args=(operand,), name_span=self._tspan(call), span=self._span(meta))

    def trim_side(self, meta, children):
        return ("side", children[0].type)

    def trim_from(self, meta, children):
        """``TRIM([BOTH | LEADING | TRAILING] [chars] FROM s)``: Flink's TRIM, LTRIM or RTRIM of
        ``chars`` (a space when left out)."""
        parts = [c for c in children if not (isinstance(c, Token) and c.type == "FROM")]
        call, rest = parts[0], parts[1:]
        side = next((p[1] for p in rest if isinstance(p, tuple)), "BOTH")
        values = [p for p in rest if not isinstance(p, tuple)]
        span = self._span(meta)
        chars = values[0] if len(values) == 2 else ast.Literal(kind="string", value=" ", span=span)
        name = {"BOTH": "TRIM", "LEADING": "LTRIM", "TRAILING": "RTRIM"}[side]
        return ast.FunctionCall(name=name, args=(values[-1], chars), name_span=self._tspan(call), span=span)

    def overlay(self, meta, children):
        """``OVERLAY(s PLACING r FROM i [FOR n])``: ``s`` with its ``n`` characters from the
        ``i``-th (as many as ``r`` has, by default) replaced by ``r`` — the substrings before and
        after around ``r``. Positions are constants, as SUBSTRING's are."""
        call, text, replacement, start, *length = [c for c in children if not (
            isinstance(c, Token) and c.type in ("PLACING", "FROM", "FOR"))]
        span = self._span(meta)

        def constant(e: ast.Expr, what: str) -> int:
            if not (isinstance(e, ast.Literal) and e.kind == "int"):
                raise SqlError(f"the {what} of OVERLAY must be a constant integer", e.span)
            return e.value

        first = constant(start, "position")
        if length:
            count = constant(length[0], "length")
        elif isinstance(replacement, ast.Literal) and replacement.kind == "string":
            count = len(replacement.value)
        else:
            raise SqlError("OVERLAY without FOR needs a constant replacement (its length is how many characters "
                           "go)", replacement.span, "add FOR n")

        def number(n: int) -> ast.Literal:
            return ast.Literal(kind="int", value=n, span=span)

        before = ast.FunctionCall(name="SUBSTRING", args=(text, number(1), number(max(first - 1, 0))), span=span)
        after = ast.FunctionCall(name="SUBSTRING", args=(text, number(max(first, 1) + count)), span=span)
        return ast.FunctionCall(name="CONCAT", args=(before, replacement, after), name_span=self._tspan(call),
                                span=span)

    def similar_to(self, meta, children):
        parts = [c for c in children
                 if c != "not" and not (isinstance(c, Token) and c.type in ("SIMILAR", "TO", "ESCAPE"))]
        operand, pattern = parts[0], parts[1]
        escape = _unquote(parts[2]) if len(parts) > 2 else None
        span = self._span(meta)
        if escape is not None and len(escape) != 1:
            raise SqlError(f"the ESCAPE character must be a single character, got {escape!r}", span)
        return ast.SimilarTo(operand=operand, pattern=pattern, escape=escape, negated="not" in children, span=span)

    def overlaps(self, meta, children):
        start1, end1, start2, end2 = _strip_keywords(children)
        return ast.Overlaps(start1=start1, end1=end1, start2=start2, end2=end2, span=self._span(meta))

    def floor_ceil(self, meta, children):
        call, operand, *rest = [c for c in children if not (isinstance(c, Token) and c.type == "TO")]
        word = str(call).rstrip("( \t\r\n").upper()
        name = "FLOOR" if word == "FLOOR" else "CEIL"
        span = self._span(meta)
        if not rest:
            return ast.FunctionCall(name=word, args=(operand,), name_span=self._tspan(call), span=span)
        (unit,) = rest
        unit_literal = ast.Literal(kind="string", value=str(unit), span=span)
        return ast.FunctionCall(name=f"{name} TO", args=(operand, unit_literal), name_span=self._tspan(call),
                                span=span)

    def is_json(self, meta, children):
        operand = children[0]
        kind = next((c for c in children[1:] if isinstance(c, tuple)), ("kind", "VALUE"))
        span = self._span(meta)
        call = ast.JsonCall(name="IS JSON", args=(operand,), options=(kind,), span=span)
        return ast.Not(operand=call, span=span) if "not" in children else call

    def json_kind(self, meta, children):
        return ("kind", children[0].type)

    def _json(self, meta, children, name: str) -> ast.JsonCall:
        call, *parts = children
        args, options, defaults, returning = [], [], [], None
        for p in parts:
            if isinstance(p, ast.Expr):
                args.append(p)
            elif isinstance(p, tuple) and p[0] == "returning":
                returning = p[1]
            elif isinstance(p, tuple) and p[0] == "pair":
                args += [p[1], p[2]]
            elif isinstance(p, tuple) and p[0] == "default":
                options.append((p[1], "DEFAULT"))
                defaults.append((p[1], p[2]))
            elif isinstance(p, tuple):
                options.append(p)
        return ast.JsonCall(name=name, args=tuple(args), options=tuple(options), returning=returning,
                            defaults=tuple(defaults), name_span=self._tspan(call), span=self._span(meta))

    def json_value(self, meta, children):
        return self._json(meta, children, "JSON_VALUE")

    def json_query(self, meta, children):
        return self._json(meta, children, "JSON_QUERY")

    def json_exists(self, meta, children):
        return self._json(meta, children, "JSON_EXISTS")

    def json_object(self, meta, children):
        return self._json(meta, children, "JSON_OBJECT")

    def json_array(self, meta, children):
        return self._json(meta, children, "JSON_ARRAY")

    def json_returning(self, meta, children):
        return ("returning", _strip_keywords(children)[0])

    def json_value_on(self, meta, children):
        action, *rest = children
        which = "on_empty" if rest[-1].type == "EMPTY" else "on_error"
        if action[0] == "DEFAULT":
            return ("default", which, action[1])
        return (which, action[0])

    def json_null(self, meta, children):
        return ("NULL", None)

    def json_error(self, meta, children):
        return ("ERROR", None)

    def json_default(self, meta, children):
        return ("DEFAULT", _strip_keywords(children)[0])

    def json_without_wrapper(self, meta, children):
        return ("wrapper", "WITHOUT")

    def json_with_wrapper(self, meta, children):
        conditional = any(isinstance(c, Token) and c.type == "CONDITIONAL" for c in children)
        return ("wrapper", "CONDITIONAL" if conditional else "UNCONDITIONAL")

    def json_query_on(self, meta, children):
        words = [c.type for c in children]
        on = words.index("ON")
        which = "on_empty" if words[-1] == "EMPTY" else "on_error"
        return (which, " ".join(words[:on]))

    def json_exists_on(self, meta, children):
        return ("on_error", children[0].type)

    def json_pair(self, meta, children):
        key, value = _strip_keywords(children)
        return ("pair", key, value)

    def json_on_null(self, meta, children):
        return ("on_null", children[0].type)

    def between_kind(self, meta, children):
        return children[0].type.lower()

    def _json_aggregate(self, meta, children, name: str) -> ast.FunctionCall:
        call, *parts = children
        args, options, over, filter_ = [], [], None, None
        for p in _strip_keywords(parts):
            if isinstance(p, (ast.WindowSpec, ast.NamedWindow)):
                over = p
            elif isinstance(p, tuple) and p[0] == "filter":
                filter_ = p[1]
            elif isinstance(p, tuple):
                options.append(p)
            else:
                args.append(p)
        # The name's span leaves out the parenthesis its token ends with.
        name_span = Span(self.file, call.line, call.column, call.line, call.column + len(name))
        return ast.FunctionCall(name=name, args=tuple(args), over=over, filter=filter_, options=tuple(options),
                                name_span=name_span, span=self._span(meta))

    def json_agg_order(self, meta, children):
        raise SqlError("JSON_ARRAYAGG(... ORDER BY ...) is not supported: its items come in arrival order",
                       self._span(meta), "leave ORDER BY out")

    def json_objectagg(self, meta, children):
        return self._json_aggregate(meta, children, "JSON_OBJECTAGG")

    def json_arrayagg(self, meta, children):
        return self._json_aggregate(meta, children, "JSON_ARRAYAGG")

    def between(self, meta, children):
        operand, low, high = [c for c in _strip_keywords(children) if c not in ("not", "symmetric", "asymmetric")]
        return ast.Between(operand=operand, low=low, high=high, negated="not" in children,
                           symmetric="symmetric" in children, span=self._span(meta))

    def in_list(self, meta, children):
        operand, *items = [c for c in _strip_keywords(children) if c != "not"]
        return ast.InList(operand=operand, items=tuple(items), negated="not" in children,
                          span=self._span(meta))

    def in_subquery(self, meta, children):
        operand, query = [c for c in _strip_keywords(children) if c != "not"]
        return ast.InSubquery(operand=operand, query=query, negated="not" in children, span=self._span(meta))

    def array_value(self, meta, children):
        return ast.ArrayValue(items=tuple(_strip_keywords(children)), span=self._span(meta))

    def map_value(self, meta, children):
        items = tuple(_strip_keywords(children))
        if len(items) % 2:
            raise SqlError(f"MAP[...] takes keys and values in pairs, got {len(items)} item(s)", self._span(meta))
        return ast.MapValue(items=items, span=self._span(meta))

    def exists(self, meta, children):
        (query,) = _strip_keywords(children)
        return ast.Exists(query=query, span=self._span(meta))

    def scalar_subquery(self, meta, children):
        (query,) = _strip_keywords(children)
        return ast.ScalarSubquery(query=query, span=self._span(meta))

    def like(self, meta, children):
        parts = [c for c in children if c != "not" and not (isinstance(c, Token) and c.type in ("LIKE", "ESCAPE"))]
        operand, pattern = parts[0], parts[1]
        escape = _unquote(parts[2]) if len(parts) > 2 else None
        span = self._span(meta)
        if escape is not None and len(escape) != 1:
            raise SqlError(f"the ESCAPE character must be a single character, got {escape!r}", span)
        return ast.Like(operand=operand, pattern=pattern, escape=escape, negated="not" in children, span=span)

    def binary_op(self, meta, children):
        left, op, right = children
        return ast.BinaryOp(op=str(op), left=left, right=right, span=self._span(meta))

    def unary_op(self, meta, children):
        op, operand = children
        # Fold a sign into a numeric literal, so '-9223372036854775808' stays a BIGINT.
        if isinstance(operand, ast.Literal) and operand.kind in ("int", "decimal", "double"):
            value = -operand.value if str(op) == "-" else operand.value
            return ast.Literal(kind=operand.kind, value=value, span=self._span(meta))
        return ast.UnaryOp(op=str(op), operand=operand, span=self._span(meta))

    def field_access(self, meta, children):
        expr, name = children
        return ast.FieldAccess(expr=expr, name=str(name), span=self._span(meta))

    def qualified_star(self, meta, children):
        return ast.QualifiedStar(qualifier=children[0], span=self._span(meta))

    def subscript(self, meta, children):
        expr, index = children
        return ast.Subscript(expr=expr, index=index, span=self._span(meta))

    def column_ref(self, meta, children):
        name = children[0]
        return ast.ColumnRef(name=str(name), span=name.span)

    def _call(self, meta, children, *, distinct=False, star=False):
        parts = _strip_keywords(children)
        name = parts[0]
        over = None
        filter_ = None
        args = []
        for p in parts[1:]:
            if isinstance(p, (ast.WindowSpec, ast.NamedWindow)):
                over = p
            elif isinstance(p, tuple) and p[0] == "filter":
                filter_ = p[1]
            elif p != "distinct":
                args.append(p)
        return ast.FunctionCall(name=str(name).upper(), args=tuple(args), distinct=distinct, star=star,
                                over=over, filter=filter_, name_span=name.span, span=self._span(meta))

    def named_arg(self, meta, children):
        name, value = _strip_keywords(children)
        return ast.NamedArg(name=str(name).upper(), value=value, span=self._span(meta))

    def filter_clause(self, meta, children):
        return ("filter", _strip_keywords(children)[0])

    def function_call(self, meta, children):
        return self._call(meta, children)

    def function_call_distinct(self, meta, children):
        return self._call(meta, children, distinct=True)

    def function_call_star(self, meta, children):
        return self._call(meta, children, star=True)

    def cast(self, meta, children, try_=False):
        operand, typ = _strip_keywords(children)
        return ast.Cast(operand=operand, type=typ, try_=try_, span=self._span(meta))

    def try_cast(self, meta, children):
        return self.cast(meta, children, try_=True)

    def extract(self, meta, children):
        unit, operand = _strip_keywords(children)
        word = str(unit).upper()
        return ast.Extract(unit=_UNITS.get(word, word), operand=operand, span=self._span(meta))

    def time_unit(self, meta, children):
        word = children[0].type
        return _UNITS.get(word, word)

    def case_simple(self, meta, children):
        parts = _strip_keywords(children)
        operand = parts[0]
        whens = tuple(p[1] for p in parts[1:] if isinstance(p, tuple) and p[0] == "when")
        else_ = next((p[1] for p in parts if isinstance(p, tuple) and p[0] == "else"), None)
        return ast.Case(operand=operand, whens=whens, else_=else_, span=self._span(meta))

    def case_searched(self, meta, children):
        parts = _strip_keywords(children)
        whens = tuple(p[1] for p in parts if isinstance(p, tuple) and p[0] == "when")
        else_ = next((p[1] for p in parts if isinstance(p, tuple) and p[0] == "else"), None)
        return ast.Case(operand=None, whens=whens, else_=else_, span=self._span(meta))

    def when_clause(self, meta, children):
        cond, result = _strip_keywords(children)
        return ("when", (cond, result))

    def else_clause(self, meta, children):
        return ("else", _strip_keywords(children)[0])

    def interval(self, meta, children):
        parts = _strip_keywords(children)
        text = _unquote(parts[0])
        units = [p for p in parts[1:] if isinstance(p, str)]
        return ast.IntervalLiteral(text=text, unit=units[0], to_unit=units[1] if len(units) > 1 else None,
                                   span=self._span(meta))

    def interval_number(self, meta, children):
        parts = _strip_keywords(children)
        sign = ""
        if isinstance(parts[0], Token) and parts[0].type == "ADD_OP":
            sign = str(parts.pop(0)).replace("+", "")
        number, unit = parts
        return ast.IntervalLiteral(text=f"{sign}{number.value}", unit=unit, span=self._span(meta))

    def current_timestamp(self, meta, children):
        return ast.CurrentTime(kind=children[0].type, span=self._span(meta))

    def descriptor(self, meta, children):
        names = next(c for c in children if isinstance(c, tuple))
        return ast.Descriptor(names=tuple(str(n) for n in names), span=self._span(meta))

    def table_arg(self, meta, children):
        name, *rest = _strip_keywords(children)
        keys = rest[0] if rest else ()
        partition = (str(keys),) if isinstance(keys, str) else tuple(str(n) for n in keys)
        return ast.TableArg(name=str(name), partition_by=partition, span=self._span(meta))

    def over(self, meta, children):
        partition, order, frame = (), (), None
        for child in children:
            match child:
                case ("partition_by", es):
                    partition = es
                case ("order_by", items):
                    order = items
                case ("frame", f):
                    frame = f
        return ast.WindowSpec(partition_by=partition, order_by=order, frame=frame, span=self._span(meta))

    def over_named(self, meta, children):
        (name,) = _strip_keywords(children)
        return ast.NamedWindow(name=str(name), span=self._span(meta))

    def window_clause(self, meta, children):
        named: dict[str, ast.WindowSpec] = {}
        for name, spec in _strip_keywords(children):
            if name in named:
                raise SqlError(f"window {name!r} is defined twice", spec.span)
            named[name] = spec
        return ("windows", named)

    def named_window(self, meta, children):
        name, *_ = _strip_keywords(children)
        return (str(name), self.over(meta, children[1:]))

    def partition_by(self, meta, children):
        return ("partition_by", tuple(_strip_keywords(children)))

    def order_by(self, meta, children):
        return ("order_by", tuple(c for c in children if isinstance(c, tuple)))

    def order_item(self, meta, children):
        desc = any(isinstance(c, Token) and c.type == "DESC" for c in children)
        return (_strip_keywords(children)[0], desc)

    def frame(self, meta, children):
        kind = children[0].type
        bound = next((c for c in children if isinstance(c, tuple)), None)
        return ("frame", (kind, bound))

    def frame_bound(self, meta, children):
        parts = _strip_keywords(children)
        return ("bound", parts[0] if parts else None)

    # -- literals

    def number(self, meta, children):
        text = str(children[0])
        span = self._span(meta)
        if children[0].type == "INTEGER_LIT":
            return ast.Literal(kind="int", value=int(text), span=span)
        # As in Flink: a point makes an exact DECIMAL (1.5), an exponent a DOUBLE (1.5e0).
        kind = "double" if "e" in text.lower() else "decimal"
        return ast.Literal(kind=kind, value=decimal.Decimal(text), span=span)

    def string(self, meta, children):
        return ast.Literal(kind="string", value=_unquote(children[0]), span=self._span(meta))

    def true(self, meta, children):
        return ast.Literal(kind="bool", value=True, span=self._span(meta))

    def false(self, meta, children):
        return ast.Literal(kind="bool", value=False, span=self._span(meta))

    def null(self, meta, children):
        return ast.Literal(kind="null", value=None, span=self._span(meta))

    def date_literal(self, meta, children):
        text = _unquote(children[1])
        span = self._span(meta)
        try:
            return ast.Literal(kind="date", value=dt.date.fromisoformat(text.strip()), span=span)
        except ValueError:
            raise SqlError(f"{text!r} is not a DATE", span, "write DATE 'yyyy-mm-dd'") from None

    def time_literal(self, meta, children):
        text = _unquote(children[1])
        span = self._span(meta)
        # Flink reads the hour with one digit too: TIME '2:55:00' (its documentation writes them so).
        clock = re.sub(r"^(\d):", r"0\1:", text.strip())
        try:
            return ast.Literal(kind="time", value=dt.time.fromisoformat(clock), span=span)
        except ValueError:
            raise SqlError(f"{text!r} is not a TIME", span, "write TIME 'hh:mm:ss[.fff]'") from None

    def timestamp_literal(self, meta, children, kind="timestamp"):
        text = _unquote(children[1])
        span = self._span(meta)
        value = parse_timestamp_text(text)
        if value is None:
            raise SqlError(f"{text!r} is not a TIMESTAMP", span, "write TIMESTAMP 'yyyy-mm-dd hh:mm:ss[.fff]'")
        return ast.Literal(kind=kind, value=value, span=span)

    def timestamp_ltz_literal(self, meta, children):
        return self.timestamp_literal(meta, children, kind="timestamp_ltz")


_TS = re.compile(r"^\s*\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?\s*$")


def parse_timestamp_text(text: str) -> tuple[dt.datetime, int] | None:
    """``(datetime, precision)`` for 'yyyy-mm-dd[ hh:mm[:ss[.fff]]]', or None. Precision counts
    the fraction digits, at least 3, so the literal keeps what was written."""
    if not _TS.match(text):
        return None
    text = text.strip().replace("T", " ")
    fraction = text.rsplit(".", 1)[1] if "." in text else ""
    try:
        value = dt.datetime.fromisoformat(text[: len(text) - len(fraction) - 1] if fraction else text)
    except ValueError:
        return None
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    precision = max(3, len(fraction))
    return value.replace(microsecond=nanos // 1000), precision if precision <= 6 else 9
