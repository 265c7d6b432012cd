"""GROUP BY: window aggregations (by window_start, window_end of a window table function, or by a
group window), updating aggregations without a window, HAVING, and the aggregate calls."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.types as pt

from clink import records
from clink.compiler import ast, ir, udfs
from clink.compiler import types as T
from clink.compiler.bind.exprs import WINDOW_PROPERTY
from clink.compiler.bind.scope import Scope, ast_walk, derive_name, unique_names, updating_reason
from clink.compiler.functions import AGGREGATES, TABLE_FUNCTIONS, arithmetic, cast_to, json_member
from clink.errors import SqlError


class AggregateBinder:
    """GROUP BY, HAVING and aggregate calls; ``_agg`` is the aggregation being bound."""

    def _aggregate(self, q: ast.Select, rel: ir.Rel, scope: Scope) -> tuple[ir.Rel, frozenset[str]]:
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
            rel = records.evolve(tvf, input=ir.Filter(input=tvf.input, predicate=rel.predicate, span=rel.span))
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
            attached = self._attached_window(group, scope, rel)
            if attached is None:
                return self._group_aggregate(q, rel, scope)
            window, window_cols, time_expr = attached
            below, proctime = rel, False
        keys, key_names, seen = self._group_keys(group, scope, window_cols)
        if window_cols and not window.attached and not {0, 1} <= seen:
            where = q.group_by[0].span if q.group_by else q.span
            raise SqlError("a window aggregation must GROUP BY window_start and window_end", where,
                           "add window_start, window_end to GROUP BY")
        if window.kind == "session":
            self._check_session_keys(rel, keys, q)
        self._raise_collected()
        if not window.attached:
            time_expr = ir.Column(index=time, name=below.schema[time].name, type=below.schema[time].type,
                                  nullable=below.schema[time].nullable, span=q.span)
        window_time = ir.window_time_type(time_expr.type)
        context, bound, having = self._bind_aggregates(q, scope, base=len(keys) + 1, window_time=window_time)
        num_keys = len(keys)
        rebase = _rebaser(keys, key_names, window_cols=window_cols)

        inputs = [*keys, time_expr, *context.inputs]
        names = [*key_names, "__time", *(f"__arg{i}" for i in range(len(context.inputs)))]
        late = self._late_output(q, below)
        late_columns: tuple[int, ...] = ()
        if late is not None:
            # Late rows go out whole: the operator's input carries every column of the relation.
            late_columns = tuple(range(len(inputs), len(inputs) + len(below.schema)))
            inputs += [ir.Column(index=i, name=f.name, type=f.type, nullable=f.nullable, span=None)
                       for i, f in enumerate(below.schema.fields)]
            names += [f"__late_{f.name}" for f in below.schema.fields]
        pre = ir.Project(input=below, exprs=tuple(inputs), names=unique_names(names), span=q.span)
        agg_rel: ir.Rel = ir.WindowAggregate(
            uid=self._uid, input=pre, window=window, num_keys=num_keys, time=num_keys, aggs=tuple(context.aggs),
            agg_names=tuple(f"agg{i}" for i in range(len(context.aggs))),
            allowed_lateness=self._allowed_lateness(q), late_sink=late, late_columns=late_columns, proctime=proctime,
            span=q.span)
        project = self._select_over_aggregate(q, agg_rel, bound, having, rebase)
        rowtime = frozenset(n for n, e in zip(project.names, project.exprs, strict=True)
                            if isinstance(e, ir.Column) and e.index == num_keys + 2)
        return project, rowtime

    def _attached_window(self, group: list[ast.Expr], scope: Scope,
                         rel: ir.Rel) -> tuple[ir.WindowDef, dict[int, int], ir.Expr] | None:
        """GROUP BY the window_start and window_end of a window aggregation or window table
        function below (as Flink plans it): a window aggregation over the windows the rows
        already carry. Each window closes, and its result comes out once, when the watermark
        passes its end, as the window below closed; its rows are append-only, where a GROUP BY
        without a window would revise each window's row as its rows arrive.

        Returns the window, the grouped window columns (window_end: 1, window_time: 2; the
        window's start is a key) and the time the rows are windowed by (window_end - 1 ms);
        None when the GROUP BY is not one of these."""
        if ir.is_updating(rel):
            return None
        found: dict[int, dict[int, int]] = {}
        origins: dict[int, ir.Rel] = {}
        for g in group:
            e = self.expr(g, scope)
            origin = ir.window_origin(rel, e.index) if isinstance(e, ir.Column) else None
            if origin is not None:
                node, role = origin
                origins[id(node)] = node
                found.setdefault(id(node), {}).setdefault(role, e.index)
        for key, roles in found.items():
            node = origins[key]
            if not {0, 1} <= set(roles) or not ir.attachable(node):
                continue
            end = rel.schema[roles[1]]
            time = arithmetic("-", ir.Column(index=roles[1], name=end.name, type=end.type, nullable=False,
                                             span=None), ir.Literal(value=1, type=pa.duration("ms"), span=None),
                              None)
            window = ir.WindowDef("tumble", size=1, attached=node.window.sql())
            window_cols = {roles[1]: 1} | ({roles[2]: 2} if 2 in roles else {})
            return window, window_cols, time
        return None

    def _group_keys(self, group: list[ast.Expr], scope: Scope,
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
                key_names.append(derive_name(g, len(key_names)) if not isinstance(g, ast.ColumnRef) else g.name)
        return keys, key_names, seen

    def _bind_aggregates(self, q: ast.Select, scope: Scope, base: int, group_input: ir.Rel | None = None,
                         window_time: pa.DataType = ir.WINDOW_TIME_TYPE,
                         ) -> tuple[AggContext, list[tuple[ast.AliasedExpr, ir.Expr]], ir.Expr | None]:
        """Bind the SELECT list and HAVING of an aggregation, collecting its aggregate calls and
        their input columns (numbered from ``base``)."""
        context = AggContext(base=base, group_input=group_input, window_time=window_time)
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
                names.append(item.alias or derive_name(item.expr, len(names)))
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
        return ir.Project(input=agg_rel, exprs=tuple(exprs), names=unique_names(names), span=q.span)

    def _group_aggregate(self, q: ast.Select, rel: ir.Rel, scope: Scope) -> tuple[ir.Rel, frozenset[str]]:
        """GROUP BY without a window: an updating aggregation over every row so far."""
        keys, key_names, _ = self._group_keys(list(q.group_by), scope, {})
        self._raise_collected()
        context, bound, having = self._bind_aggregates(q, scope, base=len(keys), group_input=rel)
        num_keys = len(keys)
        rebase = _rebaser(keys, key_names, window_cols=None)

        names = [*key_names, *(f"__arg{i}" for i in range(len(context.inputs)))]
        pre = ir.Project(input=rel, exprs=(*keys, *context.inputs), names=unique_names(names), span=q.span)
        agg_rel = ir.GroupAggregate(uid=self._uid, input=pre, num_keys=num_keys, aggs=tuple(context.aggs),
                                    agg_names=tuple(f"agg{i}" for i in range(len(context.aggs))), span=q.span)
        # The result has no event time: an update is not an event at a time.
        return self._select_over_aggregate(q, agg_rel, bound, having, rebase), frozenset()

    def _aggregate_call(self, e: ast.FunctionCall, scope: Scope, python: udfs.BoundUdf | None = None) -> ir.Expr:
        context = self._agg
        span = e.name_span or e.span
        if python is not None:
            return self._python_aggregate_call(e, scope, python)
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
        if fn in ("json_objectagg", "json_arrayagg"):
            filter_ = context.add_input(cast_to(condition, pa.bool_())) if condition is not None else None
            return self._json_aggregate(e, fn, args, filter_, context)
        arg = context.add_input(args[0]) if args else None
        filter_ = context.add_input(cast_to(condition, pa.bool_())) if condition is not None else None
        call = ir.AggCall(fn=fn, arg=arg, filter=filter_, type=typ, nullable=nullable, sql=agg_sql(e),
                          param=listagg_separator(args) if fn == "listagg" else None)
        if context.group_input is not None and fn in ("listagg", "collect"):
            return self._builtin_group_aggregate(e, fn, typ, args, filter_, context)
        if context.group_input is not None:
            if fn not in GROUP_AGGREGATES:
                raise SqlError(f"{agg_sql(e)} is not supported in a GROUP BY without a window yet", span,
                               f"supported: {', '.join(GROUP_AGGREGATE_NAMES)}; or aggregate over windows")
            if fn in ("min", "max") and ir.is_updating(context.group_input):
                producer = ir.updating_source(context.group_input)
                raise SqlError(f"{e.name} over an updating input is not supported yet", span,
                               f"the input is updating: {updating_reason(producer, producer.span)}")
        return ir.Call(fn="__agg__", args=(), params=(context.add_agg(call),), type=typ, nullable=nullable,
                       span=e.span)


    def _builtin_group_aggregate(self, e: ast.FunctionCall, fn: str, typ: pa.DataType, args: list[ir.Expr],
                                 filter_: int | None, context) -> ir.Expr:
        """LISTAGG and COLLECT in a GROUP BY without a window: aggregate functions of the ``udaf``
        contract (``runtime/builtin_aggregates.py``), whose accumulators the group operator keeps
        (over an updating input LISTAGG keeps its values as a list, to take one out again)."""
        columns = [context.add_input(args[0])]
        name = attribute = fn.upper()
        if fn == "listagg":
            separator = ir.Literal(value=listagg_separator(args), type=pa.string(), nullable=False, span=e.span)
            columns.append(context.add_input(separator))
            if ir.is_updating(context.group_input):
                # Its input is revised: the values are kept as a list a retraction can take one out of.
                attribute = "LISTAGG_RETRACT"
                accumulator = pa.struct([pa.field("items", pa.list_(pa.string())), pa.field("sep", pa.string())])
            else:
                accumulator = pa.struct([pa.field("text", pa.string())])
        else:
            accumulator = pa.struct([pa.field("bag", typ)])
        ref = ir.UdfRef(name=name, vectorized=True, module="clink.runtime.builtin_aggregates", attribute=attribute,
                        kind="aggregate")
        call = ir.AggCall(fn="udaf", arg=None, args=tuple(columns), filter=filter_, type=typ, nullable=True,
                          udf=ref, accumulator=accumulator, sql=agg_sql(e))
        return ir.Call(fn="__agg__", args=(), params=(context.add_agg(call),), type=typ, nullable=True, span=e.span)

    def _json_aggregate(self, e: ast.FunctionCall, fn: str, args: list[ir.Expr], filter_: int | None,
                        context: AggContext) -> ir.Expr:
        """JSON_OBJECTAGG and JSON_ARRAYAGG, in a GROUP BY (over an updating input too: both take
        rows back) and in window aggregations: aggregate functions of the ``udaf`` contract
        (``runtime/builtin_aggregates.py``) over the JSON text of each value (``json_member``)."""
        name = e.name
        keep_null = dict(e.options).get("on_null", "NULL" if name == "JSON_OBJECTAGG" else "ABSENT") == "NULL"
        *keys, value = args
        columns = [context.add_input(cast_to(k, pa.string())) for k in keys]
        columns.append(context.add_input(json_member(name, value, keep_null)))
        if name == "JSON_OBJECTAGG":
            entry = pa.struct([pa.field("k", pa.string()), pa.field("v", pa.string()), pa.field("n", pa.int64())])
            accumulator = pa.struct([pa.field("entries", pa.list_(entry))])
        else:
            accumulator = pa.struct([pa.field("items", pa.list_(pa.string()))])
        ref = ir.UdfRef(name=name, vectorized=True, module="clink.runtime.builtin_aggregates", attribute=name,
                        kind="aggregate")
        call = ir.AggCall(fn="udaf", arg=None, args=tuple(columns), filter=filter_, type=pa.string(), nullable=False,
                          udf=ref, accumulator=accumulator, sql=agg_sql(e))
        return ir.Call(fn="__agg__", args=(), params=(context.add_agg(call),), type=pa.string(), nullable=False,
                       span=e.span)

    def _python_aggregate_call(self, e: ast.FunctionCall, scope: Scope, f: udfs.BoundUdf) -> ir.Expr:
        """A call of a Python aggregate function (``clink.udaf``): its arguments (checked against
        its declared types) become input columns of the aggregation."""
        context = self._agg
        span = e.name_span or e.span
        if context is None:
            raise SqlError(f"aggregate function {e.name} is not allowed here", span,
                           "aggregates belong in the SELECT list or HAVING of a GROUP BY query")
        if e.distinct or e.star:
            raise SqlError(f"{e.name}({'DISTINCT ...' if e.distinct else '*'}) is not supported for a Python "
                           "aggregate function", e.span, f"write {e.name}(x, ...)")
        if context.inside:
            raise SqlError(f"aggregate function {e.name} inside another aggregate", span)
        context.inside = True
        try:
            args = [self._expr(a, scope) for a in e.args]
            condition = self._expr(e.filter, scope) if e.filter is not None else None
        finally:
            context.inside = False
        args = udfs.check_args(f, args, e.span)
        if condition is not None and not (pt.is_boolean(condition.type) or T.is_null(condition.type)):
            raise SqlError(f"FILTER needs a BOOLEAN condition, got {T.sql_name(condition.type)}", e.filter.span)
        if context.group_input is not None and ir.is_updating(context.group_input) and not f.retractable:
            raise SqlError(f"the Python aggregate function {f.ref.name} has no retract method, and its input is "
                           "updating (rows are revised, so some must be taken away again)", span,
                           f"give {f.ref.name} a retract(acc, groups, *args) method, or aggregate an append-only "
                           "input")
        columns = tuple(context.add_input(a) for a in args)
        filter_ = context.add_input(cast_to(condition, pa.bool_())) if condition is not None else None
        call = ir.AggCall(fn="udaf", arg=None, args=columns, filter=filter_, type=f.returns, nullable=True,
                          udf=f.ref, accumulator=f.accumulator, sql=agg_sql(e))
        return ir.Call(fn="__agg__", args=(), params=(context.add_agg(call),), type=f.returns, nullable=True,
                       span=e.span)


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


@records.record(frozen=False)
class AggContext:
    """While binding the SELECT list and HAVING of an aggregation: the aggregates found, and
    the extra input columns they read (placed after the keys and the time column)."""

    base: int
    #: For a GROUP BY without a window: its input, whose aggregates are checked as they are bound.
    group_input: ir.Rel | None = None
    #: The type of the window's ``*_ROWTIME`` (TIMESTAMP_LTZ over a TIMESTAMP_LTZ time column).
    window_time: pa.DataType = ir.WINDOW_TIME_TYPE
    aggs: list[ir.AggCall] = records.field(factory=list)
    inputs: list[ir.Expr] = records.field(factory=list)
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
    if name == "LISTAGG" and len(args) in (1, 2):
        if e.distinct:
            raise SqlError("LISTAGG(DISTINCT ...) is not supported yet", e.span)
        if not (T.is_string(args[0].type) or T.is_null(args[0].type)):
            raise SqlError(f"LISTAGG joins strings, got {T.sql_name(args[0].type)}", args[0].span, "CAST it AS STRING")
        listagg_separator(args)
        return "listagg", pa.string(), True
    if name in ("JSON_OBJECTAGG", "JSON_ARRAYAGG"):
        return _json_aggregate_signature(e, args)
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
        case "AVG" | "STDDEV_POP" | "STDDEV_SAMP" | "VAR_POP" | "VAR_SAMP" | "VARIANCE":
            if not (T.is_numeric(t) or T.is_null(t)):
                raise SqlError(f"{name} needs a number, got {T.sql_name(t)}", arg.span)
            if name == "VARIANCE":  # Flink's synonym of VAR_SAMP
                name = "VAR_SAMP"
            return name.lower(), T.aggregate_type(name, t), True
        case "MIN" | "MAX":
            if pt.is_struct(t) or pt.is_list(t) or pt.is_map(t):
                raise SqlError(f"{name} cannot compare {T.sql_name(t)} values", arg.span)
            return name.lower(), t if not T.is_null(t) else pa.int32(), True
        case "FIRST_VALUE" | "LAST_VALUE":
            return name.lower(), t if not T.is_null(t) else pa.int32(), True
        case "COLLECT":
            # Flink's MULTISET<T> is a MAP<T, INT> here: each distinct value and how many rows hold it.
            if pt.is_struct(t) or pt.is_list(t) or pt.is_map(t) or T.is_null(t):
                raise SqlError(f"COLLECT of {T.sql_name(t)} values is not supported", arg.span,
                               "COLLECT takes scalar values (they become the keys of a MAP)")
            return "collect", pa.map_(t, pa.int32()), False
    raise SqlError(f"aggregate function {name} is not supported yet", span)


def _json_aggregate_signature(e: ast.FunctionCall, args: list[ir.Expr]) -> tuple[str, pa.DataType, bool]:
    """JSON_OBJECTAGG(key VALUE value), JSON_ARRAYAGG(item): a STRING that is never NULL, as Flink's."""
    if e.name == "JSON_OBJECTAGG":
        key = args[0]
        if T.is_null(key.type):
            raise SqlError("the key of JSON_OBJECTAGG must not be NULL", key.span)
        if not T.is_string(key.type):
            raise SqlError(f"the key of JSON_OBJECTAGG must be a string, got {T.sql_name(key.type)}", key.span,
                           "CAST it AS STRING")
    json_member(e.name, args[-1], keep_null=False)  # a value JSON cannot write is refused here
    return e.name.lower(), pa.string(), False


def listagg_separator(args: list[ir.Expr]) -> str:
    """LISTAGG's separator: its second argument, a constant string (',' when left out)."""
    if len(args) < 2:
        return ","
    sep = args[1]
    if not isinstance(sep, ir.Literal) or not isinstance(sep.value, str):
        raise SqlError("the separator of LISTAGG must be a constant string", sep.span)
    return sep.value


def agg_sql(e: ast.FunctionCall) -> str:
    if e.star:
        return f"{e.name}(*)"
    return f"{e.name}({'DISTINCT ' if e.distinct else ''}...)"


def has_aggregate(items: tuple[ast.SelectItem, ...], udaf: Callable[[str], bool] = lambda name: False) -> bool:
    """Whether the SELECT list calls an aggregate (``udaf``: whether a name is a Python one)."""
    # An aggregate with OVER (...) is an OVER window function, not a grouping aggregate.
    return any(isinstance(n, ast.FunctionCall) and n.over is None
               and (n.name in AGGREGATES or WINDOW_PROPERTY.fullmatch(n.name) or udaf(n.name))
               for item in items for n in ast_walk(item))
