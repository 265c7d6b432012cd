"""MATCH_RECOGNIZE for a pattern of fixed length, a whole batch at a time.

When every term of the pattern takes a fixed number of rows (``A B C``, ``A{2} B``), a match is
``L`` consecutive rows of a partition, and which variable each of them is mapped to is known
from its place: the row ``j`` after the start belongs to the term covering place ``j``. So every
navigation value is a row at a known place (``LAST(A.price)``: the last place of A) or an
aggregate over known places, and a row can start a match exactly when, for each place ``j``,
the row ``j`` after it meets that place's condition. That is decided for every candidate start
of every partition with a few Arrow calls per place, keeping only the survivors of one place for
the next. Which matches count then follows the skip rule: with ``SKIP TO NEXT ROW`` all of them;
otherwise a match blocks the starts before its skip target, a loop over the matches found.

A start near the end of the rows released so far waits for the partition's next rows: each
partition keeps its last rows (its undecided starts, and as many earlier ones as PREV reads) and
a cursor (its next row number, its first undecided start, and the first start the skip rule
allows), checkpointed as table state ``kept`` and ``cursors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from clink.errors import PipelineError
from clink.runtime import compute as pc
from clink.runtime.state.backend import KEY_GROUP, TableStateDescriptor
from clink.runtime.state.keygroups import group_of_hash

if TYPE_CHECKING:
    from clink.runtime import plan
    from clink.runtime.context import TaskContext
    from clink.runtime.state.backend import OperatorState

_CURSORS = pa.schema([pa.field("_h", pa.uint64()), pa.field("next_ord", pa.int64()),
                      pa.field("undecided", pa.int64()), pa.field("allowed", pa.int64()),
                      pa.field(KEY_GROUP, pa.int32())])


def places(node: plan.MatchRecognize) -> list[int] | None:
    """The variable at each place of a fixed-length pattern, or None if a term's count varies
    (or a navigation needs what this path does not compute)."""
    if any(low != high for _, low, high, _ in node.pattern):
        return None
    if any(n.kind == "avg" and pa.types.is_decimal(n.type) for n in node.navs):
        return None
    return [v for v, low, _, _ in node.pattern for _ in range(low)]


def _reads(nav: plan.Nav, place_vars: list[int], place: int | None) -> tuple[str, Any]:
    """Where ``nav`` reads, relative to a match's start: ``("at", offset or None)`` for one row
    (None: no such row, NULL), ``("agg", offsets)`` for an aggregate. ``place``: the place whose
    condition reads it (the row there counts as mapped to its variable), None for MEASURES."""
    if nav.kind == "prev":
        return "at", place - nav.offset
    end = len(place_vars) if place is None else place + 1
    mine = [p for p in range(end) if nav.variable < 0 or place_vars[p] == nav.variable]
    if nav.kind == "last":
        return "at", mine[-1 - nav.offset] if nav.offset < len(mine) else None
    if nav.kind == "first":
        return "at", mine[nav.offset] if nav.offset < len(mine) else None
    return "agg", mine


class FixedLengthMatcher:
    """The fixed-length path of one ``MatchRecognizeOperator``."""

    def __init__(self, node: plan.MatchRecognize, ctx: TaskContext, place_vars: list[int],
                 row_schema: pa.Schema, max_parallelism: int, where: str) -> None:
        self.node = node
        self.ctx = ctx
        self.places = place_vars
        self.length = len(place_vars)
        self.where = where
        self.max_parallelism = max_parallelism
        self.width = len(row_schema)
        self.row_types = list(row_schema.types)
        prev = max((n.offset for n in node.navs if n.kind == "prev"), default=0)
        #: Rows kept before a partition's first undecided start: what PREV reads.
        self.history = prev
        fields = [pa.field(f"c{i}", t) for i, t in enumerate(row_schema.types)]
        fields += [pa.field("_h", pa.uint64()), pa.field("_ord", pa.int64()), pa.field("_ts", pa.int64()),
                   pa.field(KEY_GROUP, pa.int32())]
        self.kept_schema = pa.schema(fields)
        self.descriptors = [TableStateDescriptor("kept", self.kept_schema), TableStateDescriptor("cursors", _CURSORS)]
        self.kept = self.kept_schema.empty_table()
        #: Per partition hash: [next row number, first undecided start, first start allowed].
        self.cursors: dict[int, list[int]] = {}
        skip = node.skip
        if skip in ("to_first", "to_last"):
            mine = [p for p, v in enumerate(place_vars) if v == node.skip_to]
            self.shift = mine[0] if skip == "to_first" else mine[-1]
        else:
            self.shift = self.length if skip == "past_last" else 1

    # -- state -----------------------------------------------------------------------------

    def open(self, state: OperatorState) -> None:
        self.kept_state = state.table_state("kept")
        self.cursor_state = state.table_state("cursors")

    def save(self) -> None:
        h = np.fromiter(self.cursors, dtype=np.uint64, count=len(self.cursors))
        values = np.array(list(self.cursors.values()), dtype=np.int64).reshape(-1, 3)
        groups = group_of_hash(h, self.max_parallelism) if self.node.partition else np.zeros(len(h), np.int32)
        self.cursor_state.replace(0, pa.Table.from_arrays(
            [pa.array(h, pa.uint64()), *(pa.array(values[:, i]) for i in range(3)), pa.array(groups, pa.int32())],
            schema=_CURSORS))
        self.kept_state.replace(0, self.kept)

    def load(self) -> None:
        kept = self.kept_state.get(0)
        self.kept = kept.cast(self.kept_schema) if kept is not None else self.kept_schema.empty_table()
        cursors = self.cursor_state.get(0)
        self.cursors = {}
        if cursors is not None:
            for h, a, b, c in zip(*(cursors.column(n).to_pylist() for n in ("_h", "next_ord", "undecided", "allowed")),
                                  strict=True):
                self.cursors[h] = [a, b, c]

    def rows_held(self) -> int:
        return self.kept.num_rows

    # -- matching --------------------------------------------------------------------------

    def match(self, ordered: pa.Table) -> list[pa.RecordBatch]:
        """Match the released rows ``ordered`` (sorted by partition hash, then time order) after
        their partitions' kept rows; the output rows of the matches found."""
        node = self.node
        hashes = ordered.column("_h").to_numpy()
        n = len(hashes)
        starts = np.flatnonzero(np.concatenate(([True], hashes[1:] != hashes[:-1])))
        keys = hashes[starts]
        sizes = np.diff(np.append(starts, n))
        first_ord = np.array([self.cursors.get(h, (0, 0, 0))[0] for h in keys.tolist()], dtype=np.int64)
        ords = np.repeat(first_ord - starts, sizes) + np.arange(n)
        new = pa.Table.from_arrays(
            [*(ordered.column(i) for i in range(self.width)), ordered.column("_h"), pa.array(ords),
             ordered.column("_ts"), ordered.column(KEY_GROUP)], schema=self.kept_schema)
        touched = pc.is_in(self.kept.column("_h"), value_set=pa.array(keys, pa.uint64()))
        table = pa.concat_tables([self.kept.filter(touched), new])
        self.kept = self.kept.filter(pc.invert(touched))
        table = table.take(pc.sort_indices(table, sort_keys=[("_h", "ascending"), ("_ord", "ascending")]))
        total = table.num_rows
        h_all = table.column("_h").to_numpy()
        ord_all = table.column("_ord").to_numpy()
        part_start = np.flatnonzero(np.concatenate(([True], h_all[1:] != h_all[:-1])))
        pid = np.repeat(np.arange(len(part_start)), np.diff(np.append(part_start, total)))
        part_keys = h_all[part_start].tolist()
        undecided = np.array([self.cursors.get(h, (0, 0, 0))[1] for h in part_keys], dtype=np.int64)
        allowed = np.array([self.cursors.get(h, (0, 0, 0))[2] for h in part_keys], dtype=np.int64)
        columns = [table.column(i).combine_chunks() for i in range(self.width)]
        rows = pa.RecordBatch.from_arrays(columns, names=[f"c{i}" for i in range(self.width)])
        if node.derive is not None:
            derived = node.derive(rows, self.ctx)
            rows = pa.RecordBatch.from_arrays([*rows.columns, *derived],
                                              names=[*rows.schema.names, *(f"d{i}" for i in range(len(derived)))])
        # Candidate starts: undecided, with the whole pattern's rows in the same partition.
        last = np.arange(total) + self.length - 1
        complete = last < total
        complete[complete] &= pid[last[complete]] == pid[complete]
        candidate = complete & (ord_all >= undecided[pid])
        found = np.flatnonzero(candidate)
        ts = table.column("_ts").to_numpy()
        if node.within is not None and len(found):
            found = found[ts[found + self.length - 1] - ts[found] <= node.within]
        for place, v in enumerate(self.places):
            define = node.defines[v]
            if define is None or not len(found):
                continue
            batch = self._candidates(rows, found, place, pid, total)
            ok = pc.fill_null(define(batch, self.ctx), False)
            if isinstance(ok, pa.Scalar):
                if not ok.as_py():
                    found = found[:0]
                continue
            found = found[ok.to_numpy(zero_copy_only=False)]
        matches = self._skip(found, pid, ord_all, allowed)
        # The cursors: what is decided, and the rows to keep for what is not.
        part_end = np.append(part_start[1:], total)
        last_ord = ord_all[part_end - 1]
        decided_to = np.maximum(undecided, last_ord - self.length + 2)
        keep_from = np.minimum(decided_to, last_ord + 1) - self.history
        for i, h in enumerate(part_keys):
            self.cursors[h] = [int(last_ord[i]) + 1, int(decided_to[i]), int(allowed[i])]
        keep = ord_all >= keep_from[pid]
        if keep.any():
            self.kept = pa.concat_tables([self.kept, table.filter(pa.array(keep))])
        self.kept = self.kept.combine_chunks()
        for i, h in enumerate(part_keys):
            if not keep[part_start[i]:part_end[i]].any() and self.cursors[h][2] <= self.cursors[h][0]:
                del self.cursors[h]  # nothing waits and no start is blocked: the partition starts afresh
        if not len(matches):
            return []
        return [self._output(rows, matches, pid, total)]

    def _skip(self, found: np.ndarray, pid: np.ndarray, ords: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        """The starts of ``found`` that the skip rule lets match, in order; ``allowed`` (per
        partition, the first start a match lets through) is updated."""
        if not len(found):
            return found
        if self.shift == 0:
            v = self.node.variables[self.node.skip_to]
            raise PipelineError(f"AFTER MATCH SKIP TO {'FIRST' if self.node.skip == 'to_first' else 'LAST'} {v} would "
                                "start the next match where this one started, and find it again forever",
                                self.node.span or None)
        ok = found[ords[found] >= allowed[pid[found]]]
        if self.shift > 1:
            # A match blocks the starts before its skip target: one at a time, in order.
            kept = []
            bound: dict[int, int] = {}
            for start, p, o in zip(ok.tolist(), pid[ok].tolist(), ords[ok].tolist(), strict=True):
                if o >= bound.get(p, -(2**62)):
                    kept.append(start)
                    bound[p] = o + self.shift
            ok = np.array(kept, dtype=np.int64)
            for p, b in bound.items():
                allowed[p] = max(allowed[p], b)
        elif len(ok):
            allowed[pid[ok]] = np.maximum(allowed[pid[ok]], ords[ok] + 1)
        return ok

    def _candidates(self, rows: pa.RecordBatch, starts: np.ndarray, place: int | None, pid: np.ndarray,
                    total: int) -> pa.RecordBatch:
        """The match rows for ``starts``: the row columns at ``place`` (the last place for
        MEASURES), then each navigation value (NULL where the expression does not read it)."""
        at = self.length - 1 if place is None else place
        idx = pa.array(starts + at)
        columns = [rows.column(i).take(idx) for i in range(rows.num_columns)]
        uses = self.node.nav_uses
        wanted = None if not uses else set(uses[-1] if place is None else uses[self.places[place]])
        for i, nav in enumerate(self.node.navs):
            if wanted is not None and i not in wanted:
                columns.append(pa.nulls(len(starts), nav.type))
                continue
            kind, where = _reads(nav, self.places, place)
            source = rows.column(nav.column)
            if kind == "at":
                columns.append(self._at(source, starts, where, pid, total, nav.type))
            else:
                columns.append(self._aggregate(nav, source, starts, where))
        names = [*rows.schema.names, *(f"nav{i}" for i in range(len(self.node.navs)))]
        return pa.RecordBatch.from_arrays(columns, names=names)

    @staticmethod
    def _at(source: pa.Array, starts: np.ndarray, offset: int | None, pid: np.ndarray, total: int,
            typ: pa.DataType) -> pa.Array:
        if offset is None:
            return pa.nulls(len(starts), typ)
        idx = starts + offset
        inside = (idx >= 0) & (idx < total)
        inside[inside] &= pid[idx[inside]] == pid[starts[inside]]
        values = source.take(pa.array(np.where(inside, idx, 0)))
        if not inside.all():
            values = pc.if_else(pa.array(inside), values, pa.nulls(len(starts), values.type))
        return values.cast(typ) if values.type != typ else values

    @staticmethod
    def _aggregate(nav: plan.Nav, source: pa.Array, starts: np.ndarray, offsets: list[int]) -> pa.Array:
        n = len(starts)
        if nav.kind == "count_star":
            return pa.array(np.full(n, len(offsets), np.int64))
        values = [source.take(pa.array(starts + o)) for o in offsets]
        if nav.kind == "count":
            counts = np.zeros(n, np.int64)
            for v in values:
                counts += pc.is_valid(v).to_numpy(zero_copy_only=False)
            return pa.array(counts)
        if not values:
            return pa.nulls(n, nav.type)
        if nav.kind in ("min", "max"):
            fn = pc.min_element_wise if nav.kind == "min" else pc.max_element_wise
            out = values[0] if len(values) == 1 else fn(*values, skip_nulls=True)
            return out.cast(nav.type) if out.type != nav.type else out
        typed = [v.cast(nav.type) if v.type != nav.type else v for v in values]
        total = pc.fill_null(typed[0], 0)
        present = pc.is_valid(typed[0])
        count = present.cast(pa.int64())
        for v in typed[1:]:
            total = pc.add_checked(total, pc.fill_null(v, 0))
            valid = pc.is_valid(v)
            present = pc.or_(present, valid)
            count = pc.add(count, valid.cast(pa.int64()))
        if nav.kind == "avg":
            safe = pc.max_element_wise(count, pa.scalar(1, pa.int64()))
            if pa.types.is_integer(nav.type):
                # Truncated toward zero, as Flink's AVG of integers.
                q = pc.divide(pc.abs(total).cast(pa.int64()), safe)
                total = pc.if_else(pc.less(total, pa.scalar(0, total.type)), pc.negate(q), q).cast(nav.type)
            else:
                total = pc.divide(total, safe.cast(nav.type))
        return pc.if_else(present, total, pa.nulls(n, nav.type))

    def _output(self, rows: pa.RecordBatch, matches: np.ndarray, pid: np.ndarray, total: int) -> pa.RecordBatch:
        node = self.node
        batch = self._candidates(rows, matches, None, pid, total)
        measured = node.measures(batch, self.ctx)
        keys = [rows.column(c).take(pa.array(matches)) for c in node.partition]
        return pa.RecordBatch.from_arrays([*keys, *measured], schema=node.schema)
