"""Tell a Top-N when each of its partitions ends, where its input says so.

    Rank(partition=[a.id], ...) <- Join(a.id = b.auction, interval: a.t <= b.t <= a.expires)
    becomes
    Rank(partition=[a.id], ..., expiry=[(expires, 0 ms), (a.t, 0 ms)])

A window Top-N (partitioned by the window_end of a window aggregation or table function whose
windows close by event time, each at its end, with no row after: ``ir.attachable``)
gets its window's end: a window's rows all arrive before the watermark passes it.

Over an interval join, a partition ends when no row arriving on time can join it. That takes
two things:

- **One row of a side per partition.** The partition columns hold a unique key of one side of
  an inner interval join (``unique_keys``): every row of a partition pairs the same row of that
  side, so all of them carry its columns.
- **A last time for that row.** An interval join pairs a left row ``x`` only with right rows
  ``y`` for which ``y.t <= x.end + upper``. A right row arriving on time is after the watermark,
  so once the watermark passes ``x.end + upper`` no new right row pairs ``x``, and ``x`` itself
  has come (it arrived on time: after the watermark then, so before ``x.t``). The partition ends
  at the later of ``x.end + upper`` and ``x.t``: rows the join emits from inputs arriving on
  time are never after it. (The right side mirrors it: ``y.end - lower`` and ``y.t``.)

The Top-N forgets a partition once the watermark passes its end, and drops a row arriving after
its partition's end as late; only a row that came late to the join can. Both columns are passed
on to the Top-N where its input leaves them out (a projection above it drops them again), and
``prune_projections`` keeps them there.
"""

from __future__ import annotations

from clink import records
from clink.compiler import ir
from clink.compiler.rewrite.unique_join_sides import holds_unique_key


def end_ranks(node: ir.Rel) -> ir.Rel:
    match node:
        case ir.Rank(expiry=()) if not ir.is_updating(node.input):
            return _ended(node)
    return node


def _ended(rank: ir.Rank) -> ir.Rel:
    """``rank`` with the (input column, offset ms) pairs whose largest sum is when a partition
    ends (see the module docstring), or ``rank`` itself. The columns are passed on to the Top-N
    where its input does not carry them, and a projection above it leaves them out again."""
    for p in rank.partition:
        # A window Top-N: the rows of a window all come before the watermark passes its end.
        origin = ir.window_origin(rank.input, p)
        if origin is not None and origin[1] == 1 and ir.attachable(origin[0]):
            return records.evolve(rank, expiry=((p, 0),))
    # Down from the Top-N's input to a join, through projections and filters: which join column
    # each input column passes on unchanged.
    rel = rank.input
    origin = {i: i for i in range(len(rel.schema))}
    while isinstance(rel, ir.Project | ir.Calc | ir.Filter):
        if not isinstance(rel, ir.Filter):
            origin = {i: e.index for i, e in ((i, rel.exprs[j]) for i, j in origin.items())
                      if isinstance(e, ir.Column)}
        rel = rel.input
    if not (isinstance(rel, ir.Join) and rel.kind == "inner" and rel.interval is not None
            and not rel.lookup and rel.temporal is None):
        return rank
    join, bounds = rel, rel.interval
    width = len(join.left.schema)
    partition = {origin[p] for p in rank.partition if p in origin}
    sides = (
        (join.left, 0, bounds.left_expiry, bounds.upper, bounds.left_time),
        (join.right, width, width + bounds.right_expiry, -bounds.lower, width + bounds.right_time),
    )
    for side, first, end, offset, time in sides:
        mine = {j - first for j in partition if first <= j < first + len(side.schema)}
        if holds_unique_key(side, mine):
            break
    else:
        return rank
    new_input, at = _pass_on(rank.input, (end, time))
    expiry = ((at[end], max(offset, 0)),) if end == time else ((at[end], offset), (at[time], 0))
    ended = records.evolve(rank, input=new_input, expiry=expiry)
    width = len(rank.input.schema)
    if len(new_input.schema) == width:
        return ended
    # The columns added for the Top-N go no further: its output stays as it was.
    kept = [*range(width), *([len(new_input.schema)] if rank.emit_rank else [])]
    fields = ended.schema.fields
    return ir.Project(input=ended, exprs=tuple(ir.Column(index=i, name=fields[i].name, type=fields[i].type,
                                                         nullable=fields[i].nullable) for i in kept),
                      names=rank.schema.names, span=rank.span)


def _pass_on(rel: ir.Rel, columns: tuple[int, ...]) -> tuple[ir.Rel, dict[int, int]]:
    """``rel`` (projections and filters over a join) passing on the join's ``columns``, added
    after its own where it does not, and where each of them is in it."""
    if isinstance(rel, ir.Join):
        return rel, {c: c for c in columns}
    assert isinstance(rel, ir.Project | ir.Calc | ir.Filter)
    below, at = _pass_on(rel.input, columns)
    if isinstance(rel, ir.Filter):
        return records.evolve(rel, input=below), at
    exprs, names = list(rel.exprs), list(rel.names)
    where = {}
    for c in columns:
        passed = next((i for i, e in enumerate(exprs) if isinstance(e, ir.Column) and e.index == at[c]), None)
        if passed is None:
            field = below.schema[at[c]]
            passed = len(exprs)
            exprs.append(ir.Column(index=at[c], name=field.name, type=field.type, nullable=field.nullable))
            names.append(_fresh(field.name, names))
        where[c] = passed
    return records.evolve(rel, input=below, exprs=tuple(exprs), names=tuple(names)), where


def _fresh(name: str, taken: list[str]) -> str:
    n = 0
    while (candidate := name if n == 0 else f"{name}{n}") in taken:
        n += 1
    return candidate
