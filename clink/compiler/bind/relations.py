"""FROM items: tables and views (scans), subqueries, and joins, with the conditions of ON and
WHERE placed as low as they may go; temporal and lookup joins. The event-time bounds of an
interval join come later, from the rewrite bound_interval_joins."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.types as pt

from clink import records
from clink.compiler import ast, ir, udfs
from clink.compiler import types as T
from clink.compiler.bind.exprs import is_builtin
from clink.compiler.bind.scope import Scope, ScopeColumn, did_you_mean, updating_reason
from clink.compiler.catalog import CatalogTable, CatalogView
from clink.compiler.functions import TABLE_FUNCTIONS, cast_to
from clink.compiler.rewrite.bound_interval_joins import time_attributes
from clink.compiler.rewrite.limit_ranks import check_ranks_limited
from clink.errors import Span, SqlError
from clink.runtime.udaf import TableUdf


class RelationBinder:
    """FROM items and joins."""

    def from_item(self, item: ast.FromItem) -> tuple[ir.Rel, Scope]:
        match item:
            case ast.TableRef(name=name):
                if item.as_of is not None:
                    raise SqlError("FOR SYSTEM_TIME AS OF belongs to the right side of a JOIN", item.as_of.span)
                entry = next((frame[name] for frame in reversed(self._ctes) if name in frame), None)
                entry = entry or self.catalog.lookup(name)
                if entry is None:
                    known = [*self.catalog.names(), *(n for frame in self._ctes for n in frame)]
                    raise SqlError(f"unknown table {name!r}", item.span,
                                   did_you_mean(name, known, "tables and views"))
                qualifier = item.alias or name.split(".")[-1]
                if isinstance(entry, CatalogView):
                    rel, rowtime = entry.rel, entry.rowtime
                else:
                    rel = self._scan(entry, item.span)
                    rowtime = frozenset([entry.info.watermark[0]]) if entry.info.watermark else frozenset()
                return rel, Scope(tuple(ScopeColumn(qualifier, f.name, f, f.name in rowtime)
                                         for f in rel.schema.fields))
            case ast.SubqueryRef(query=query, alias=alias):
                rel, rowtime = self._query(query)
                if item.columns is not None:
                    rel, rowtime = self.renamed(rel, rowtime, item.columns, item.span)
                return rel, Scope(tuple(ScopeColumn(alias, f.name, f, f.name in rowtime) for f in rel.schema.fields))
            case ast.Join():
                return self._join(item, None)
            case ast.Unnest():
                # UNNEST of constants, alone in FROM: over one row with no columns.
                one = ir.Project(input=self._values_scan(1, item.span), exprs=(), names=(), span=item.span)
                tree = self._unnest_over(one, (), item, item.span)
                return tree.rel, Scope(tree.columns)
            case ast.MatchRecognize():
                return self._match_recognize(item)
            case ast.LateralTable():
                raise SqlError("LATERAL TABLE(...) is joined to the table whose rows it reads", item.span,
                               f"FROM t, LATERAL TABLE({item.call.name}(t.x)) AS u (a, b)")
            case ast.TableFunctionRef(call=call):
                if call.name in TABLE_FUNCTIONS:
                    return self._window_tvf(call, item.alias)
                raise SqlError(f"unknown table function {call.name}", call.name_span or call.span,
                               f"table functions: {', '.join(sorted(TABLE_FUNCTIONS))}")
        raise SqlError(f"unsupported FROM item {type(item).__name__}", item.span)

    def _scan(self, table: CatalogTable, span: Span) -> ir.Rel:
        info = table.info
        if table.definition.partitioned_by:
            raise SqlError(f"reading the partitioned table {info.name!r} is not supported yet", span,
                           "a PARTITIONED BY table can be written (INSERT INTO) but not read yet")
        connector = self.connectors.get(info.connector)
        if connector is not None and connector.create_source is None:
            hint = ("reading an upsert-kafka topic (an updating source) is not implemented; read it with the "
                    "'kafka' connector and 'key.format'/'key.fields' to get every message as a row"
                    if info.connector == "upsert-kafka" else "it can only be written (INSERT INTO)")
            raise SqlError(f"table {info.name!r}: the {info.connector!r} connector cannot be read", span, hint)
        if (info.changelog.updating and not info.upserts
                and self.config.get("table.exec.source.cdc-events-duplicate", "false").lower() == "true"):
            if not info.primary_key:
                raise SqlError(f"table {info.name!r}: 'table.exec.source.cdc-events-duplicate' drops changes that "
                               "come twice by the table's primary key, and the table declares none", span,
                               f"declare PRIMARY KEY (...) NOT ENFORCED in CREATE TABLE {info.name}")
            info = records.evolve(info, deduplicated=True)
        rel: ir.Rel = ir.Scan(table=info, columns=tuple(range(len(info.columns))), span=span)
        if table.computed:
            exprs = tuple(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=span)
                          for i, f in enumerate(info.columns.fields))
            exprs += tuple(e for _, e in table.computed)
            rel = ir.Project(input=rel, exprs=exprs, names=table.schema.names, span=span)
        return rel

    def _join(self, item: ast.Join, where: ast.Expr | None) -> tuple[ir.Rel, Scope]:
        """Bind a tree of joins, with the WHERE above it (if any).

        Every condition, from ON or WHERE, is split into conjuncts and placed as low as it may
        go: a conjunct over one input of an inner join filters that input; one over both becomes
        a join key (``l = r``) or part of the join's residual condition. Outer joins keep their
        ON conditions (except those over the NULL-padded side only, which filter that side), and
        a WHERE over an outer join stays above it."""
        tree = self._join_tree(item)
        scope = Scope(tree.columns)
        conditions: list[ir.Expr] = []
        if where is not None:
            pred = self.expr(where, scope)
            self._raise_collected()
            conditions = ir.conjuncts(self._condition(pred, "WHERE", where.span))
        rel = self._build_join(tree, conditions, 0)
        fields = rel.schema.fields
        return rel, Scope(tuple(records.evolve(c, field=f) for c, f in zip(tree.columns, fields, strict=True)))

    def _condition(self, pred: ir.Expr, clause: str, span: Span) -> ir.Expr:
        if not (pt.is_boolean(pred.type) or T.is_null(pred.type)):
            raise SqlError(f"{clause} needs a BOOLEAN condition, got {T.sql_name(pred.type)}", span)
        return cast_to(pred, pa.bool_())

    def _join_tree(self, item: ast.FromItem) -> JoinTree:
        if isinstance(item, ast.Join) and isinstance(item.right, ast.Unnest):
            return self._unnest(item)
        if isinstance(item, ast.Join) and isinstance(item.right, ast.LateralTable):
            return self._lateral(item)
        if not isinstance(item, ast.Join):
            rel, scope = self.from_item(item)
            # A ROW_NUMBER in a join's input takes its limit from within the input: conditions the
            # join moves onto the input (WHERE a.rn <= 3) do not make it a Top-N.
            check_ranks_limited(rel)
            return JoinTree(columns=scope.columns, rel=rel, span=item.span)
        left = self._join_tree(item.left)
        as_of = item.right.as_of if isinstance(item.right, ast.TableRef) else None
        right = self._join_tree(records.evolve(item.right, as_of=None) if as_of is not None else item.right)
        # Columns of a regular join's output are not event-time attributes: a row may come out long
        # after the watermark passed its time.
        columns = tuple(records.evolve(c, rowtime=False) for c in left.columns + right.columns)
        on: list[ir.Expr] = []
        if item.condition is not None:
            pred = self.expr(item.condition, Scope(left.columns + right.columns))
            self._raise_collected()
            on = ir.conjuncts(self._condition(pred, "ON", item.condition.span))
        lookup, temporal, key = False, None, ()
        if as_of is not None:
            lookup, temporal, key, right = self._check_temporal(item, as_of, left, right)
        return JoinTree(columns=columns, left=left, right=right, kind=item.kind, on=tuple(on), span=item.span,
                         lookup=lookup, temporal=temporal, primary_key=key)

    def _unnest(self, item: ast.Join) -> JoinTree:
        """``left CROSS JOIN UNNEST(expr) AS u (x)``: each row of ``left`` once per element of its
        ``expr`` (an ARRAY; a MAP gives its key and value), as Flink's lateral UNNEST does."""
        unnest: ast.Unnest = item.right
        if item.kind != "inner" or item.condition is not None:
            raise SqlError("UNNEST(...) is joined with CROSS JOIN (or a comma), without ON", item.span,
                           "FROM t CROSS JOIN UNNEST(t.a) AS u (x)")
        left = self._join_tree(item.left)
        left_rel = self._build_join(left, [], 0)
        columns = tuple(records.evolve(c, field=f, rowtime=False)
                        for c, f in zip(left.columns, left_rel.schema.fields, strict=True))
        return self._unnest_over(left_rel, columns, unnest, item.span)

    def _lateral(self, item: ast.Join) -> JoinTree:
        """``left, LATERAL TABLE(f(args)) AS u (a, b)`` (or ``CROSS JOIN`` / ``JOIN ... ON TRUE``):
        each row of ``left`` once per row the Python table function ``f`` gives for it; ``LEFT
        JOIN LATERAL TABLE(...) ON TRUE`` also keeps, once with NULLs, a row it gives none for."""
        lateral: ast.LateralTable = item.right
        call = lateral.call
        on_true = isinstance(item.condition, ast.Literal) and item.condition.value is True
        if item.kind not in ("inner", "left") or (item.condition is not None and not on_true) or (
                item.kind == "left" and not on_true):
            raise SqlError("LATERAL TABLE(...) is joined with a comma, CROSS JOIN, or [LEFT] JOIN ... ON TRUE",
                           item.condition.span if item.condition is not None and not on_true else item.span,
                           "filter its rows in WHERE: FROM t, LATERAL TABLE(f(t.x)) AS u (a) WHERE u.a > 0")
        span = call.name_span or call.span
        f = self._udf(call.name, span) if not is_builtin(call.name) else None
        if f is None or f.kind != "table":
            known = sorted(n for n, u in self.udfs.items() if u.kind == "table")
            known += sorted(g.name.upper() for g in self.functions if isinstance(g, TableUdf))
            what = "a built-in function" if is_builtin(call.name) else (
                f"a Python {f.what}" if f is not None else "not a known function")
            raise SqlError(f"{f.ref.name if f is not None else call.name} is {what}, not a table function", span,
                           did_you_mean(call.name, known, "table functions") if known else
                           "define one with @clink.udtf(columns={...}) and pass it in functions=[...], or "
                           "CREATE FUNCTION ... LANGUAGE PYTHON")
        if call.distinct or call.star or call.over is not None or call.filter is not None:
            raise SqlError(f"{call.name} is a table function: DISTINCT, *, FILTER and OVER do not apply", call.span)
        left = self._join_tree(item.left)
        left_rel = self._build_join(left, [], 0)
        columns = tuple(records.evolve(c, field=f_) for c, f_ in zip(left.columns, left_rel.schema.fields, strict=True))
        args = [self.expr(a, Scope(columns)) for a in call.args]
        self._raise_collected()
        args = udfs.check_args(f, args, call.span)
        names = lateral.columns or tuple(n for n, _ in f.columns)
        if len(names) != len(f.columns):
            raise SqlError(f"table function {call.name} gives {len(f.columns)} column(s); {len(names)} name(s) given",
                           lateral.span)
        width = len(left_rel.schema)
        exprs = tuple(ir.Column(index=i, name=g.name, type=g.type, nullable=g.nullable, span=None)
                      for i, g in enumerate(left_rel.schema.fields)) + tuple(args)
        below = ir.Project(input=left_rel, exprs=exprs,
                           names=(*left_rel.schema.names, *(f"$arg{i}" for i in range(len(args)))), span=lateral.span)
        rel = ir.Lateral(input=below, fn=f.ref, args=tuple(range(width, width + len(args))), keep=width,
                         names=tuple(names), types=tuple(t for _, t in f.columns), outer=item.kind == "left",
                         span=lateral.span)
        added = tuple(ScopeColumn(lateral.alias, g.name, g) for g in rel.schema.fields[width:])
        return JoinTree(columns=columns + added, rel=rel, span=item.span)

    def _unnest_over(self, left_rel: ir.Rel, columns: tuple[ScopeColumn, ...], unnest: ast.Unnest,
                     span: Span | None) -> JoinTree:
        """Each row of ``left_rel`` (whose scope is ``columns``) once per element of ``unnest``."""
        value = self.expr(unnest.expr, Scope(columns))
        self._raise_collected()
        if not (pt.is_list(value.type) or pt.is_map(value.type)):
            raise SqlError(f"UNNEST takes an ARRAY or a MAP, got {T.sql_name(value.type)}", unnest.expr.span)
        width = 2 if pt.is_map(value.type) else 1
        defaults = ("key", "value") if width == 2 else ("EXPR$0",)
        wanted = width + unnest.ordinality
        names = unnest.columns or (*defaults, *(("ORDINALITY",) if unnest.ordinality else ()))
        if len(names) != wanted:
            raise SqlError(f"UNNEST here gives {wanted} column(s); {len(names)} name(s) given", unnest.span)
        exprs = tuple(ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=None)
                      for i, f in enumerate(left_rel.schema.fields)) + (value,)
        below = ir.Project(input=left_rel, exprs=exprs, names=(*left_rel.schema.names, "$unnest"),
                           span=unnest.span)
        rel = ir.Unnest(input=below, column=len(exprs) - 1, ordinality=unnest.ordinality, names=tuple(names),
                        span=unnest.span)
        added = tuple(ScopeColumn(unnest.alias, f.name, f) for f in rel.schema.fields[len(columns):])
        return JoinTree(columns=columns + added, rel=rel, span=span)

    def _check_temporal(self, item: ast.Join, as_of: ast.Expr, left: JoinTree,
                        right: JoinTree) -> tuple[bool, tuple[int, int] | None, tuple[str, ...], JoinTree]:
        """``JOIN t FOR SYSTEM_TIME AS OF l.x``: a lookup join when ``x`` is a processing-time
        attribute (``PROCTIME()``) of the left side; a temporal join against the versioned table
        ``t`` when ``x`` is an event-time attribute and ``t`` has a watermark and a primary key,
        or is a versioned view (``versioned_view``). Returns (lookup, (left time column, right
        time column) of a temporal join, the versioned table's key, the right side to join)."""
        time = self.expr(as_of, Scope(left.columns))
        self._raise_collected()
        if item.kind not in ("inner", "left"):
            raise SqlError(f"a join FOR SYSTEM_TIME AS OF is INNER or LEFT, not {item.kind.upper()}", item.span)
        name = item.right.name
        entry = next((frame[name] for frame in reversed(self._ctes) if name in frame), None) \
            or self.catalog.lookup(name)
        changelog = isinstance(entry, CatalogTable) and entry.info.changelog.updating
        if isinstance(time, ir.Column) and left.rel is not None and is_proctime(left.rel, time.index):
            if changelog:
                # A lookup reads the table as it is; a changelog's rows come and go as changes arrive.
                raise SqlError(f"a lookup join FOR SYSTEM_TIME AS OF a processing time needs a table of appends on "
                               f"the right; {name!r} is a changelog (its connector reads updates and deletions)",
                               item.right.span, "join it FOR SYSTEM_TIME AS OF an event time (a versioned table: "
                               "it needs a PRIMARY KEY and a WATERMARK), or with a regular JOIN ... ON")
            return True, None, (), right
        if not (isinstance(time, ir.Column) and left.columns[time.index].rowtime):
            raise SqlError("FOR SYSTEM_TIME AS OF needs a time attribute of the left side: an event-time column "
                           "(with a WATERMARK) or a processing-time one (defined as PROCTIME())", as_of.span,
                           "e.g. FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency")
        if left.rel is not None and ir.is_updating(left.rel):
            producer = ir.updating_source(left.rel)
            raise SqlError("a temporal join FOR SYSTEM_TIME AS OF an event time takes appends on the left; that "
                           "side is updating", as_of.span,
                           f"it produces updates: {updating_reason(producer, producer.span)}")
        if isinstance(entry, CatalogView) and (versioned := versioned_view(entry.rel)) is not None:
            rel, key, version_time = versioned
            names = rel.schema.names
            return False, (time.index, version_time), tuple(names[k] for k in key), records.evolve(right, rel=rel)
        if not isinstance(entry, CatalogTable) or not entry.info.primary_key or not entry.info.watermark:
            raise SqlError(f"a temporal join by event time needs a versioned table on the right: {name!r} "
                           "must be a table with a PRIMARY KEY and a WATERMARK, or a view that keeps the latest "
                           "row per key by event time", item.right.span,
                           "declare PRIMARY KEY (...) NOT ENFORCED and WATERMARK FOR its time column, or CREATE VIEW "
                           "v AS SELECT ... FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY key ORDER BY time DESC) "
                           "AS rownum FROM t) WHERE rownum = 1")
        times = [i for i, c in enumerate(right.columns) if c.rowtime]
        return False, (time.index, times[0]), entry.info.primary_key, right

    def _build_join(self, tree: JoinTree, above: list[ir.Expr], depth: int) -> ir.Rel:
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

    def _equi_join(self, tree: JoinTree, left: ir.Rel, right: ir.Rel, conditions: list[ir.Expr]) -> ir.Rel:
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
                       residual=resid, lookup=tree.lookup, temporal=tree.temporal,
                       span=tree.span)
        if left_x is left and right_x is right:
            return join
        keep = list(range(width)) + [len(left_x.schema) + i for i in range(len(right.schema))]
        fields = join.schema.fields
        exprs = tuple(ir.Column(index=i, name=fields[i].name, type=fields[i].type, nullable=fields[i].nullable,
                                span=None) for i in keep)
        return ir.Project(input=join, exprs=exprs, names=tuple(fields[i].name for i in keep), span=tree.span)


@records.record
class JoinTree:
    """A FROM clause's joins before conditions are placed: a leaf has ``rel``; a join has two
    subtrees, its kind and its ON conjuncts (over its own columns)."""

    columns: tuple[ScopeColumn, ...]
    span: Span | None
    rel: ir.Rel | None = None
    left: JoinTree | None = None
    right: JoinTree | None = None
    kind: str = "inner"
    on: tuple[ir.Expr, ...] = ()
    #: ``FOR SYSTEM_TIME AS OF`` a processing time: the right side is looked up, not joined with.
    lookup: bool = False
    #: ``FOR SYSTEM_TIME AS OF`` an event time: (left time column, right time column), and the
    #: versioned table's primary key.
    temporal: tuple[int, int] | None = None
    primary_key: tuple[str, ...] = ()


def versioned_view(rel: ir.Rel) -> tuple[ir.Rel, tuple[int, ...], int] | None:
    """A view that keeps the latest row per key by event time, as Flink's versioned views do
    (``SELECT ... FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY time DESC) AS rownum
    FROM t) WHERE rownum = 1``, over an append-only ``t`` with a watermark on ``time``): each row
    of ``t`` is a new version of its key. Returns the view with the deduplication taken out (its
    rows are the versions), the view's key columns and its version time column; None for another view."""
    chain: list[ir.Rel] = []
    node = rel
    while isinstance(node, (ir.Project, ir.Calc, ir.Filter)):
        chain.append(node)
        node = node.input
    if not (isinstance(node, ir.Rank) and node.function == "row_number" and len(node.order) == 1
            and node.order[0][1] and node.limit in (None, 1) and not ir.is_updating(node.input)):
        return None
    rank = node
    width = len(rank.input.schema)
    time_col = rank.order[0][0]
    if time_col not in time_attributes(rank.input):
        return None
    one = ir.Literal(value=1, type=pa.int64(), nullable=False, span=None)
    limited = rank.limit == 1
    # Rebuild the nodes above the deduplication over its input: the row number is 1 for every
    # version; a filter on it goes (it said rownum = 1), other conditions stay.
    below: ir.Rel = rank.input
    # Per column of ``below``, the input column it is (for the key and the time); None: computed.
    origin: list[int | None] = list(range(width))
    rank_here: int | None = width if rank.emit_rank else None
    for n in reversed(chain):
        if isinstance(n, ir.Filter):
            kept = []
            for c in ir.conjuncts(n.predicate):
                if rank_here is not None and ir.columns_used(c) == {rank_here}:
                    if _keeps_first(c, rank_here):
                        limited = True
                        continue
                    return None
                kept.append(c)
            if any(rank_here is not None and rank_here in ir.columns_used(c) for c in kept):
                return None
            if kept:
                pred = kept[0]
                for c in kept[1:]:
                    pred = ir.and_(pred, c)
                below = ir.Filter(input=below, predicate=pred, span=n.span)
            continue
        exprs = tuple(_replace_column(e, rank_here, one) if rank_here is not None else e for e in n.exprs)
        if isinstance(n, ir.Calc) and n.predicate is not None:
            return None
        new_rank = next((i for i, e in enumerate(n.exprs) if isinstance(e, ir.Column) and e.index == rank_here), None)
        origin = [origin[e.index] if isinstance(e, ir.Column) and e.index != rank_here else None for e in n.exprs]
        rank_here = new_rank
        below = ir.Project(input=below, exprs=exprs, names=n.names, span=n.span)
    if not limited:
        return None
    keys = []
    for p in rank.partition:
        if p not in origin:
            return None
        keys.append(origin.index(p))
    if time_col not in origin:
        return None
    return below, tuple(keys), origin.index(time_col)


def _keeps_first(c: ir.Expr, column: int) -> bool:
    """Whether condition ``c`` on the row number ``column`` is ``= 1``, ``<= 1`` or ``< 2``."""
    if not (isinstance(c, ir.Call) and c.fn in ("eq", "le", "lt") and len(c.args) == 2):
        return False
    a, b = c.args
    if not (isinstance(a, ir.Column) and a.index == column and isinstance(b, ir.Literal)):
        return False
    return (c.fn in ("eq", "le") and b.value == 1) or (c.fn == "lt" and b.value == 2)


def _replace_column(e: ir.Expr, index: int, by: ir.Expr) -> ir.Expr:
    return ir.transform(e, lambda n: by if isinstance(n, ir.Column) and n.index == index else n)


def is_proctime(rel: ir.Rel, index: int) -> bool:
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

