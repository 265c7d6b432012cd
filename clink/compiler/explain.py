"""Plans as indented text: EXPLAIN output, golden files, and the rewrite trace."""

from __future__ import annotations

from clink.compiler import ir
from clink.compiler.sqltext import expr_sql
from clink.compiler.physical import (
    ChainOp,
    ExchangeOp,
    GroupAggOp,
    JoinOp,
    OverAggOp,
    PhysicalPlan,
    MatchOp,
    NormalizeOp,
    SessionOp,
    RankOp,
    SortOp,
    SinkOp,
    SourceOp,
    UnionOp,
    PreAggOp,
    WindowAggOp,
)

def explain_logical(node: ir.Rel, indent: int = 0) -> str:
    pad = "  " * indent
    names = node.inputs[0].schema.names if node.inputs else ()
    match node:
        case ir.Sink():
            line = f"Sink(table=[{node.name}], connector=[{node.connector}], columns=[{', '.join(node.schema.names)}])"
        case ir.Calc():
            parts = []
            if node.predicate is not None:
                parts.append(f"where=[{expr_sql(node.predicate, names)}]")
            parts.append(f"select=[{_select_list(node.exprs, node.names, names)}]")
            line = f"Calc({', '.join(parts)})"
        case ir.Project():
            line = f"Project(select=[{_select_list(node.exprs, node.names, names)}])"
        case ir.Filter():
            line = f"Filter(where=[{expr_sql(node.predicate, names)}])"
        case ir.WindowTVF():
            line = f"WindowTVF(window=[{node.window.sql()}], time=[{names[node.time]}]"
            if node.partition_by:
                line += f", partition_by=[{', '.join(names[i] for i in node.partition_by)}]"
            line += ")"
        case ir.WindowAggregate():
            keys = names[: node.num_keys]
            aggs = ", ".join(_agg_sql(a, names) for a in node.aggs)
            line = (f"WindowAggregate(window=[{node.window.sql()}], time=[{names[node.time]}], "
                    f"keys=[{', '.join(keys)}], aggs=[{aggs}]")
            if node.allowed_lateness:
                line += f", allowed_lateness=[{node.allowed_lateness} ms]"
            if node.proctime:
                line += ", clock=[processing time]"
            if node.late_sink is not None:
                line += f", late_rows_to=[{node.late_sink.name}]"
            line += ")"
        case ir.GroupAggregate():
            keys = names[: node.num_keys]
            aggs = ", ".join(_agg_sql(a, names) for a in node.aggs)
            line = f"GroupAggregate(keys=[{', '.join(keys)}], aggs=[{aggs}], changelog=[+I, -U, +U, -D])"
        case ir.OverAggregate():
            aggs = ", ".join(_agg_sql(a, names) for a in node.aggs)
            line = (f"OverAggregate(partition=[{', '.join(names[p] for p in node.partition)}], "
                    f"order=[{names[node.time]}], frame=[{over_frame(node.frame, node.preceding)}], aggs=[{aggs}]"
                    f"{', changelog=[+I, -U, +U, -D]' if ir.is_updating(node) else ''}"
                    f"{f', late_rows_to=[{node.late_sink.name}]' if node.late_sink is not None else ''})")
        case ir.Rank():
            order = ", ".join(f"{names[c]}{' DESC' if d else ''}" for c, d in node.order)
            line = (f"Rank({node.function.upper()}() over partition=[{', '.join(names[p] for p in node.partition)}], "
                    f"order=[{order}], keep=[{node.rank_name} <= {node.limit}]"
                    f"{'' if node.emit_rank else ', row number not kept'}{f', partition ends=[{node.ends_sql()}]' if node.expiry else ''}, "
                    "changelog=[+I, -D])")
        case ir.Join():
            line = f"Join(kind=[{node.kind.upper()}], {_join_condition(node)}"
            if node.interval is not None:
                b = node.interval
                names = _join_names(node)
                right = len(node.left.schema)
                if b.left_end is None and b.right_end is None:
                    line += (f", interval=[{names[right + b.right_time]} - {names[b.left_time]}"
                             f" BETWEEN {b.lower} ms AND {b.upper} ms]")
                else:
                    line += (f", interval=[{names[right + b.right_expiry]} - {names[b.left_time]}"
                             f" >= {b.lower} ms AND {names[right + b.right_time]} - {names[b.left_expiry]}"
                             f" <= {b.upper} ms]")
            if node.lookup:
                line += ", lookup=[the right side as of processing time]"
            if node.temporal is not None:
                names = _join_names(node)
                line += (f", temporal=[version of the right side at {names[node.temporal[0]]}, "
                         f"by {names[len(node.left.schema) + node.temporal[1]]}]")
            if ir.is_updating(node):
                line += ", changelog=[+I, -D]"
            line += ")"
        case ir.Union():
            line = f"Union(all=[true], columns=[{', '.join(node.schema.names)}])"
        case ir.Sort():
            names = node.input.schema.names
            order = "".join(f", {names[c]}{' DESC' if d else ''}" for c, d in node.order)
            line = f"Sort(orderBy=[{names[node.time]}{order}])"
        case ir.MatchRecognize():
            names = node.input.schema.names
            pattern = " ".join(_pattern_term(node, t) for t in node.pattern)
            line = (f"MatchRecognize(partitionBy=[{', '.join(names[p] for p in node.partition)}], "
                    f"orderBy=[{names[node.time]}], pattern=[{pattern}], after=[SKIP {_SKIPS[node.skip]}"
                    f"{' ' + node.variables[node.skip_to] if node.skip_to is not None else ''}]"
                    f"{f', within=[{node.within} ms]' if node.within is not None else ''}, "
                    f"measures=[{', '.join(node.measure_names)}])")
        case ir.Unnest():
            line = (f"Unnest(column=[{node.input.schema.names[node.column]}], as=[{', '.join(node.names)}]"
                    f"{', ordinality=[true]' if node.ordinality else ''})")
        case ir.Replicate():
            line = f"Replicate(times=[{node.input.schema.names[node.count]}])"
        case ir.Lateral():
            args = ", ".join(node.input.schema.names[i] for i in node.args)
            line = (f"Lateral(function=[{node.fn.name}({args})], as=[{', '.join(node.names)}]"
                    f"{', outer=[true]' if node.outer else ''})")
        case ir.Scan():
            line = f"Scan(table=[{node.table.name}], columns=[{', '.join(node.schema.names)}]"
            if node.predicate is not None:
                line += f", where=[{expr_sql(node.predicate, node.schema.names)}]"
            if node.table.changelog.updating:
                line += f", changelog={node.table.changelog}"
            line += ")"
        case _:
            line = type(node).__name__
    return "\n".join([pad + line, *(explain_logical(child, indent + 1) for child in node.inputs)])


def over_frame(frame: str, preceding: int | None) -> str:
    if preceding is None:
        return f"{frame.upper()} BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    amount = str(preceding) if frame == "rows" else f"{preceding} ms"
    return f"{frame.upper()} BETWEEN {amount} PRECEDING AND CURRENT ROW"


def _join_names(node: ir.Join) -> tuple[str, ...]:
    """The columns a join's condition reads: left then right, marked by side where names clash."""
    left, right = node.left.schema.names, node.right.schema.names
    if not set(left) & set(right):
        return left + right
    return tuple(f"left.{n}" for n in left) + tuple(f"right.{n}" for n in right)


def _join_condition(node: ir.Join) -> str:
    names = _join_names(node)
    width = len(node.left.schema)
    keys = [f"{names[a]} = {names[width + b]}" for a, b in zip(node.left_keys, node.right_keys, strict=True)]
    text = f"keys=[{', '.join(keys)}]"
    if node.residual is not None:
        text += f", where=[{expr_sql(node.residual, names)}]"
    return text


def _agg_sql(a: ir.AggCall, names: tuple[str, ...]) -> str:
    name = {"count_star": "COUNT", "count_distinct": "COUNT"}.get(a.fn, a.fn.upper())
    inner = "*" if a.arg is None else ("DISTINCT " if a.fn == "count_distinct" else "") + names[a.arg]
    if a.udf is not None:  # a Python aggregate function, by its SQL name
        name, inner = a.udf.name, ", ".join(names[i] for i in a.args)
    text = f"{name}({inner})"
    if a.filter is not None:
        text += f" FILTER (WHERE {names[a.filter]})"
    return text


def _select_list(exprs: tuple[ir.Expr, ...], out: tuple[str, ...], names: tuple[str, ...]) -> str:
    items = []
    for e, name in zip(exprs, out, strict=True):
        text = expr_sql(e, names)
        items.append(text if text == name else f"{text} AS {name}")
    return ", ".join(items)


def explain_physical(plan: PhysicalPlan) -> str:
    lines = []
    for op in plan.ops:
        match op:
            case SourceOp(scan=scan):
                line = (f"[{op.id}] Source table=[{scan.table.name}] connector=[{scan.table.connector}] "
                        f"columns=[{', '.join(scan.schema.names)}]")
                if scan.table.changelog.updating:
                    line += f" changelog={scan.table.changelog}"
            case NormalizeOp(scan=scan):
                line = (f"[{op.id}] ChangelogNormalize state keys=[{', '.join(scan.schema.names[k] for k in op.keys)}] "
                        f"<- [{op.input}] {op.partitioning} produces updates")
            case ChainOp():
                line = f"[{op.id}] Chain chain_{op.id} <- [{op.input}] {op.partitioning}: {' -> '.join(chain_kinds(op))}"
                if op.updating:
                    line += " (passes updates on)"
            case PreAggOp(agg=agg):
                line = (f"[{op.id}] PreAggregate {agg.window.sql()} partials per key and pane <- [{op.input}] "
                        f"forward")
            case WindowAggOp(agg=agg):
                keys = agg.input.schema.names[: agg.num_keys]
                line = (f"[{op.id}] WindowAggregate {agg.window.sql()} state keys=[{', '.join(keys) or '(none)'}] "
                        f"<- [{op.input}] {op.partitioning}")
            case GroupAggOp(agg=agg):
                keys = agg.input.schema.names[: agg.num_keys]
                line = (f"[{op.id}] GroupAggregate state keys=[{', '.join(keys) or '(none)'}] "
                        f"<- [{op.input}] {op.partitioning} produces updates")
            case OverAggOp(over=over):
                names = over.input.schema.names
                line = (f"[{op.id}] OverAggregate {over_frame(over.frame, over.preceding)} state keys=["
                        f"{', '.join(names[p] for p in over.partition) or '(none)'}] <- [{op.input}] {op.partitioning}")
                if ir.is_updating(over):
                    line += " produces updates"
            case SortOp(sort=sort):
                names = sort.input.schema.names
                order = "".join(f", {names[c]}{' DESC' if d else ''}" for c, d in sort.order)
                line = (f"[{op.id}] Sort ORDER BY {names[sort.time]}{order} as the watermark passes "
                        f"<- [{op.input}] {op.partitioning}")
            case SessionOp(tvf=tvf):
                names = tvf.input.schema.names
                line = (f"[{op.id}] SessionWindows {tvf.window.sql()} state keys=["
                        f"{', '.join(names[p] for p in tvf.partition_by) or '(none)'}] as sessions end "
                        f"<- [{op.input}] {op.partitioning}")
            case MatchOp(match=m):
                names = m.input.schema.names
                line = (f"[{op.id}] MatchRecognize PATTERN ({' '.join(_pattern_term(m, t) for t in m.pattern)}) "
                        f"state keys=[{', '.join(names[p] for p in m.partition) or '(none)'}] "
                        f"as the watermark passes <- [{op.input}] {op.partitioning}")
            case RankOp(rank=rank):
                names = rank.input.schema.names
                line = (f"[{op.id}] TopN {rank.limit} state keys=[{', '.join(names[p] for p in rank.partition) or '(none)'}] "
                        f"<- [{op.input}] {op.partitioning} produces updates")
            case JoinOp(join=join):
                what = "LookupJoin" if join.lookup else "TemporalJoin" if join.temporal is not None else "Join"
                line = (f"[{op.id}] {what} {join.kind.upper()}"
                        f"{' (interval)' if join.interval is not None else ''} "
                        f"state=[{_join_state(op)}] "
                        f"<- [{op.left}, {op.right}] {op.partitioning}")
                if ir.is_updating(join):
                    line += " produces updates"
            case ExchangeOp():
                line = f"[{op.id}] Exchange {op.partitioning} <- [{op.input}]"
            case UnionOp(inputs=inputs):
                line = f"[{op.id}] Union <- [{', '.join(str(i) for i in inputs)}]"
            case SinkOp(sink=sink):
                line = f"[{op.id}] Sink table=[{sink.name}] connector=[{sink.connector}] <- [{op.input}]"
        lines.append(line)
    return "\n".join(lines)


def chain_kinds(op: ChainOp) -> list[str]:
    kinds = ["Filter"] if op.scan_predicate is not None else []
    for step in op.steps:
        if isinstance(step, ir.WindowTVF):
            kinds.append(f"Windows {step.window.sql()}")
        elif isinstance(step, ir.Unnest):
            kinds.append(f"Unnest {step.input.schema.names[step.column]}")
        elif isinstance(step, ir.Replicate):
            kinds.append(f"Repeat by {step.input.schema.names[step.count]}")
        elif isinstance(step, ir.Lateral):
            kinds.append(f"Lateral {step.fn.name}")
        else:
            kinds.append("Filter -> Project" if step.predicate is not None else "Project")
    return kinds


def explain(roots: tuple[ir.Sink, ...], physical: PhysicalPlan) -> str:
    logical = "\n".join(explain_logical(r) for r in roots)
    return f"== Logical plan ==\n{logical}\n\n== Physical plan ==\n{explain_physical(physical)}\n"


def _join_state(op: JoinOp) -> str:
    join = op.join
    if join.lookup:
        return "right side by key"
    if join.temporal is not None:
        return "versions by key, left rows until the watermark"
    if op.broadcast is not None:
        big, small = ("left", "right") if op.broadcast == 1 else ("right", "left")
        return f"{big} rows where they were made, every {small} row in every subtask"
    if any(join.unique):
        # A side with one row per key: the other side's rows wait for it, and go when it comes.
        return ", ".join(f"{side} rows by key" + (f" until their {other} row comes" if join.unique[1 - i] else "")
                         for i, (side, other) in enumerate((("left", "right"), ("right", "left"))))
    return "both sides by key"


_SKIPS = {"past_last": "PAST LAST ROW", "next_row": "TO NEXT ROW", "to_first": "TO FIRST", "to_last": "TO LAST"}


def _pattern_term(node: ir.MatchRecognize, term: tuple[int, int, int | None, bool]) -> str:
    v, low, high, greedy = term
    quantifier = {(1, 1): "", (0, None): "*", (1, None): "+", (0, 1): "?"}.get(
        (low, high), f"{{{low}}}" if low == high else f"{{{low},{'' if high is None else high}}}")
    return f"{node.variables[v]}{quantifier}{'' if greedy or not quantifier else '?'}"
