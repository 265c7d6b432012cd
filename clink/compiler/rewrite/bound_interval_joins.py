"""Give a join the event-time bounds its keys or residual condition put between its sides.

    Join(l.k = r.k, residual= r.t BETWEEN l.t - 5 s AND l.t + 10 s)
    becomes
    Join(l.k = r.k, residual= (the same), interval=[-5000, 10000] ms between l.t and r.t)

The residual still decides which pairs match; the bounds tell the join when the watermark has
passed a row by more than any partner of it could be away, so that it can forget the row. A
lookup or temporal join gets none: its sides are not kept that way.
"""

from __future__ import annotations

import datetime as dt

import pyarrow.types as pt

from clink import records
from clink.compiler import ir


def bound_interval_joins(node: ir.Rel) -> ir.Rel:
    match node:
        case ir.Join(lookup=False, temporal=None, interval=None):
            interval = _interval_bounds(node.residual, node.left, node.right, node.left_keys, node.right_keys)
            return node if interval is None else records.evolve(node, interval=interval)
    return node


def _interval_bounds(residual: ir.Expr | None, left: ir.Rel, right: ir.Rel, left_keys: tuple[int, ...],
                     right_keys: tuple[int, ...]) -> ir.IntervalBounds | None:
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

    A time column is an event-time attribute (``time_attributes``), or the ``window_end`` of a
    window aggregation (passed on unchanged, or as a key of a GROUP BY over it): rows with a
    window end at or before the watermark have all arrived, so a join on two window ends (a
    window join) or bounded by one drops state as windows close."""
    left_times = time_attributes(left) | {i for i in range(len(left.schema)) if _window_end(left, i)}
    right_times = time_attributes(right) | {i for i in range(len(right.schema)) if _window_end(right, i)}
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


def time_attributes(rel: ir.Rel) -> set[int]:
    """The columns of ``rel`` that are event-time attributes, as the binder's scopes mark them
    (``ScopeColumn.rowtime``): a table's watermark column and a window's window_time, passed on
    as they are by projections and filters, by an OVER aggregation over an append-only input, and
    by UNION ALL where every input has one.

    A column computed from one (``ts + INTERVAL ...``, a CAST) is not one, nor is a column of a
    join or of an aggregation without a window: their rows come out long after the watermark
    passed their time. Where UNION ALL casts its inputs' columns to a common type, the binder
    keeps the event time of a cast column and this does not: a TIMESTAMP cast to TIMESTAMP_LTZ
    moves against the watermark. This is read from the plan as the binder builds it, before
    other rewrites merge or move its nodes: the rule runs before them.
    """
    match rel:
        case ir.Scan(table=table, columns=columns):
            if table.watermark is None:
                return set()
            return {i for i, c in enumerate(columns) if table.columns[c].name == table.watermark[0]}
        case ir.Project(input=ir.Scan(table=table), names=names) if (
                table.watermark is not None and table.watermark[0] not in table.columns.names):
            # A table's computed columns, over its scan; the watermark column is one of them.
            return {names.index(table.watermark[0])}
        case ir.Project(exprs=exprs, input=below) | ir.Calc(exprs=exprs, input=below):
            times = time_attributes(below)
            return {i for i, e in enumerate(exprs) if isinstance(e, ir.Column) and e.index in times}
        case ir.Filter(input=below):
            return time_attributes(below)
        case ir.WindowTVF(input=below):
            return {len(below.schema) + 2}  # window_time
        case ir.WindowAggregate(num_keys=n):
            return {n + 2}  # window_time
        case ir.OverAggregate(input=below):
            # Over an updating input, rows come out as they are revised, not as time passes.
            return set() if ir.is_updating(below) else time_attributes(below)
        case ir.Union(all_inputs=inputs):
            return set.intersection(*(time_attributes(i) for i in inputs))
    return set()


def _window_end(rel: ir.Rel, index: int) -> bool:
    """Whether column ``index`` of ``rel`` is a window aggregation's window_end, passed on
    unchanged through projections, filters and the keys of GROUP BYs."""
    origin = ir.window_origin(rel, index, through_keys=True)
    if origin is None:
        return False
    node, role = origin
    # Over a TIMESTAMP_LTZ, window_end is a wall clock of the session time zone, not comparable
    # with watermarks (instants); its window_time is, and bounds joins.
    return (isinstance(node, ir.WindowAggregate) and not node.proctime and role == 1
            and node.schema[node.num_keys + 2].type == ir.WINDOW_TIME_TYPE)


def _time_term(e: ir.Expr) -> tuple[int, int] | None:
    """``column``, ``column + INTERVAL`` or ``column - INTERVAL`` over a timestamp column: (column, ms)."""
    if isinstance(e, ir.Call) and e.fn == "cast" and pt.is_timestamp(e.type) and pt.is_timestamp(e.args[0].type):
        return _time_term(e.args[0])
    if isinstance(e, ir.Column) and pt.is_timestamp(e.type):
        return e.index, 0
    if isinstance(e, ir.Call) and e.fn in ("add", "subtract") and len(e.args) == 2:
        inner, amount = e.args
        ms = duration_ms(amount)
        base = _time_term(inner)
        if base is not None and ms is not None:
            return base[0], base[1] + (ms if e.fn == "add" else -ms)
    return None


def duration_ms(e: ir.Expr) -> int | None:
    """The milliseconds of an interval literal (DAY TO SECOND); None for anything else."""
    if not (isinstance(e, ir.Literal) and pt.is_duration(e.type) and e.value is not None):
        return None
    value = e.value
    if isinstance(value, dt.timedelta):
        return value // dt.timedelta(milliseconds=1)
    return int(value) * {"s": 1000, "ms": 1, "us": 1, "ns": 1}[e.type.unit] // {"s": 1, "ms": 1, "us": 1000,
                                                                              "ns": 1_000_000}[e.type.unit]
