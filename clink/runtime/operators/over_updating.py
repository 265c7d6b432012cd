"""OVER aggregation over an updating input: ``agg(x) OVER (PARTITION BY p ORDER BY o <frame>)``
where rows of the input can later be retracted (the winning bid of an auction, kept by a Top-1,
changes when a higher bid arrives).

The result is itself updating. Its meaning is the materialized one: at any moment, every live
input row once, with the aggregates over its frame among the live rows of its partition, in
(``o``, arrival) order. When a row comes or goes, the rows after it whose frame reached it
change too: each such row's old result is retracted (``-U``) and its new one emitted (``+U``); a
row that comes is ``+I``, one that goes ``-D``. Nothing waits for the watermark (an update can
correct any earlier result), so no row is late.

State, through the state contract: the live rows of every partition, in a ``KeyedRows`` store
(table state ``rows``) keyed by the partition columns, each with ``_seq``, its arrival number,
which orders peers and tells equal rows apart.

A batch is processed in one vectorized pass over the partitions it touches:

1. their live rows are read with one lookup;
2. a retraction removes the most recently arrived live row (or row of this batch) equal to it,
   matched by a 64-bit hash of all columns; a retraction that matches nothing is counted
   (``unmatched_retractions``) and ignored;
3. the frames and aggregates of the touched partitions are computed before and after the change
   (sorted by partition hash, order value, arrival; prefix sums for COUNT/SUM/AVG, ``reduceat``
   or running extremes for MIN/MAX) and compared row by row;
4. removed rows are stored with count -1 (they net away at the next merge), new ones with +1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime import kernels as K
from clink.runtime.operators.common import epoch_ms, max_parallelism, open_state, row_kinds, updating_input
from clink.runtime.operators.over import _AGGREGATES, frame_aggregate
from clink.runtime.operators.rows import KeyedRows, NumberedRowsOperator, plain_array
from clink.runtime.plan import DELETE, INSERT, ROWKIND_COLUMN, UPDATE_AFTER, UPDATE_BEFORE, UPDATING, ChangelogMode
from clink.runtime.state.backend import OperatorState, StateBackend
from clink.runtime.state.keygroups import hash_columns

if TYPE_CHECKING:

    from clink.runtime import plan
    from clink.runtime.context import TaskContext


class UpdatingOverOperator(NumberedRowsOperator):
    """Run one ``plan.OverAggregate`` node whose input is updating: ``process(batch)`` returns
    the changes to the results."""

    def __init__(self, node: plan.OverAggregate, ctx: TaskContext, *, input_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None,
                 ttl_ms: int | None = None, input_mode: ChangelogMode = UPDATING) -> None:
        self.node = node
        self.ttl_ms = ttl_ms
        self.ctx = ctx
        self._where = f"over aggregate {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("state_rows", "state_bytes", "unmatched_retractions"):
            self.metrics.setdefault(name, 0)
        if not updating_input(input_mode, input_schema, self._where):
            raise ValueError(f"{self._where}: the input is append-only; this operator takes an updating one")
        self.width = len(input_schema) - 1
        if node.frame not in ("rows", "range"):
            raise ValueError(f"{self._where}: the frame is ROWS or RANGE, got {node.frame!r}")
        order_type = input_schema.field(node.time).type
        if not (pa.types.is_timestamp(order_type) or pa.types.is_integer(order_type) or pa.types.is_date(order_type)):
            raise ValueError(f"{self._where}: ORDER BY column {node.time} is a {order_type}; "
                             "a timestamp, date or integer is needed")
        if node.frame == "range" and node.preceding is not None and pa.types.is_date(order_type):
            # ``preceding`` is in ms for a timestamp, in the column's own units for an integer
            raise ValueError(f"{self._where}: RANGE ... PRECEDING needs a timestamp or integer ORDER BY column")
        for a in node.aggs:
            if a.fn not in _AGGREGATES:
                raise ValueError(f"{self._where}: {a.fn} is not an OVER aggregate ({', '.join(_AGGREGATES)})")
        expected = self.width + len(node.aggs) + 1
        if len(node.schema) != expected or node.schema.names[-1] != ROWKIND_COLUMN:
            raise ValueError(f"{self._where}: the output schema must be the {self.width} input columns, "
                             f"{len(node.aggs)} aggregate(s) and {ROWKIND_COLUMN!r}; got <{node.schema}>")
        self.input_schema = input_schema
        stored = pa.schema([*list(input_schema)[: self.width], pa.field("_seq", pa.int64())])
        self.rows = KeyedRows("rows", stored, node.partition, self._max_parallelism, retractions=True,
                              identity=(self.width,))
        self.operator_id = operator_id or f"over-{node.id}"
        self.descriptors = [self.rows.descriptor]
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        self.descriptors, self._where)
        self.rows.table = self.operator_state.table_state("rows")
        self._hashable = [i for i in range(self.width) if not pa.types.is_nested(input_schema.field(i).type)]
        self._next_seq = 0

    # -- public interface ----------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        kinds = batch.column(self.width)
        retract = pc.or_(pc.equal(kinds, UPDATE_BEFORE), pc.equal(kinds, DELETE)).to_numpy(zero_copy_only=False)
        columns = [plain_array(batch.column(i)) for i in range(self.width)]
        khash = hash_columns([columns[p] for p in self.node.partition], n)
        # 1. the live rows of the touched partitions
        stored, ids = self._live(K.sorted_unique(khash))
        names = [f"c{i}" for i in range(self.width)]
        added = np.flatnonzero(~retract)
        seq = np.arange(self._next_seq, self._next_seq + len(added), dtype=np.int64)
        self._next_seq += len(added)
        fresh = pa.table([*(c.take(pa.array(added)) for c in columns), pa.array(seq), pa.array(khash[added])],
                         names=[*names, "_seq", "_khash"])
        n_old = 0
        if stored is not None:
            n_old = stored.num_rows
            old = pa.table([*(plain_array(stored.column(i)) for i in range(self.width + 1)),
                            plain_array(stored.column("_khash"))], names=[*names, "_seq", "_khash"])
            pool = pa.concat_tables([old, fresh.cast(old.schema)]).combine_chunks()
        else:
            pool = fresh
        # 2. retractions remove the latest equal live row
        removed = self._match_retractions(pool, n_old, retract, columns)
        is_old = np.zeros(pool.num_rows, dtype=bool)
        is_old[:n_old] = True
        # 3. results before and after
        before = self._results(pool, is_old)
        after_rows = ~removed
        after = self._results(pool, after_rows)
        out = self._changes(pool, is_old, after_rows, before, after)
        # 4. the live rows follow
        now = int(self.ctx.runtime.clock())
        self.remove(pool, np.flatnonzero(is_old & removed), ids, now)
        self.rows.store_rows(pool, np.flatnonzero(~is_old & ~removed), 1, now)
        self._update_state_metrics()
        return out

    # -- steps -----------------------------------------------------------------------------------

    def _match_retractions(self, pool: pa.Table, n_old: int, retract: np.ndarray, columns: list[pa.Array]
                           ) -> np.ndarray:
        """Which pool rows the batch's retractions remove. Per distinct row (by hash), the stored
        rows in arrival order and then the batch's inserts and retractions in batch order form a
        stack: a retraction removes the latest equal row inserted before it (one with nothing to
        remove is unmatched). A row survives exactly when the stack never falls below the height
        it was pushed at: one segmented running sum and one suffix minimum, no loop over rows."""
        removed = np.zeros(pool.num_rows, dtype=bool)
        gone = np.flatnonzero(retract)
        if not len(gone):
            return removed
        wanted = hash_columns([columns[i].take(pa.array(gone)) for i in self._hashable], len(gone))
        have = hash_columns([pool.column(i) for i in self._hashable], pool.num_rows)
        # Only rows equal to a retracted one can go.
        candidates = np.flatnonzero(np.isin(have, wanted))
        inserted = np.flatnonzero(~retract)  # batch position of each fresh pool row
        base = int(pool.column("_seq").to_numpy()[:n_old].max()) + 1 if n_old else 0
        when = np.where(candidates < n_old, pool.column("_seq").to_numpy()[candidates],
                        base + inserted[np.maximum(candidates - n_old, 0)] if len(inserted) else 0)
        hashes = np.concatenate([have[candidates], wanted])
        order_key = np.concatenate([when, base + gone])
        step = np.concatenate([np.ones(len(candidates), np.int64), np.full(len(gone), -1, np.int64)])
        row = np.concatenate([candidates, np.full(len(gone), -1, np.int64)])
        order = np.lexsort((order_key, hashes))
        hashes, step, row = hashes[order], step[order], row[order]
        m = len(order)
        starts = np.ones(m, dtype=bool)
        starts[1:] = hashes[1:] != hashes[:-1]
        group = np.cumsum(starts) - 1
        total = np.cumsum(step)
        height = total - (total - step)[starts][group]  # the running sum within each group
        # A retraction on an empty stack is unmatched: the height is clamped at 0.
        width = 2 * m + 1
        lowest = np.maximum.accumulate(group * width + (m - height)) - group * width  # m - running min
        floor = np.minimum(0, m - lowest)
        height = height - floor
        # The lowest height from each position to the end of its group, then after it.
        last = group.max()
        reverse = (last - group[::-1]) * width + (m - height[::-1])
        after_min = m - (np.maximum.accumulate(reverse) - (last - group[::-1]) * width)[::-1]
        later = np.full(m, m + 1, dtype=np.int64)
        same = ~starts[1:]
        later[:-1][same] = after_min[1:][same]
        survives = later >= height
        pushed = step > 0
        removed[row[pushed & ~survives]] = True
        self.metrics["unmatched_retractions"] += len(gone) - int((pushed & ~survives).sum())
        return removed

    def _results(self, pool: pa.Table, live: np.ndarray) -> list[np.ndarray | pa.Array]:
        """The aggregates of each live pool row over its frame among the live rows (aligned with
        the pool; rows not live get whatever is there)."""
        index = np.flatnonzero(live)
        m = len(index)
        if m == 0:
            return [pa.nulls(pool.num_rows, a.type) for a in self.node.aggs]
        k = pool.column("_khash").to_numpy()[index]
        o = self._order_values(pool.column(self.node.time).take(pa.array(index)))
        s = pool.column("_seq").to_numpy()[index]
        order = np.lexsort((s, o, k))
        k, o = k[order], o[order]
        position = np.arange(m, dtype=np.int64)
        starts = np.ones(m, dtype=bool)
        starts[1:] = k[1:] != k[:-1]
        part_start = np.maximum.accumulate(np.where(starts, position, 0))
        preceding = self.node.preceding
        if self.node.frame == "rows":
            hi = position
            lo = part_start if preceding is None else np.maximum(part_start, position - preceding)
        else:
            # Peers (same order value) share a frame, which ends at the last of them.
            peer = np.zeros(m, dtype=bool)
            peer[:-1] = (k[1:] == k[:-1]) & (o[1:] == o[:-1])
            hi = np.minimum.accumulate(np.where(~peer, position, m)[::-1])[::-1]
            if preceding is None:
                lo = part_start
            else:
                pid = np.cumsum(starts) - 1
                span = int(o.max() - o.min()) + preceding + 1
                key = pid * span + (o - o.min())
                lo = np.searchsorted(key, key - preceding, side="left")
        taken = pa.array(index[order])
        values = {i: plain_array(pool.column(i).take(taken)) for i in {a.arg for a in self.node.aggs} - {None}}
        results = []
        back = np.empty(pool.num_rows, dtype=np.int64)  # pool row -> position in frame order
        back[index[order]] = position
        back[~live] = 0
        for a in self.node.aggs:
            result = frame_aggregate(a, values, lo, hi, running=preceding is None)
            results.append(result.take(pa.array(back)))
        return results

    def _order_values(self, col: pa.Array) -> np.ndarray:
        """The ORDER BY column as int64, NULLs last."""
        t = col.type
        if pa.types.is_timestamp(t):
            values = epoch_ms(col)
            if col.null_count:
                values = np.where(pc.is_valid(col).to_numpy(zero_copy_only=False), values, np.iinfo(np.int64).max)
            return values
        ints = pc.cast(col, pa.int32() if pa.types.is_date(t) else pa.int64()).cast(pa.int64())
        return pc.fill_null(ints, np.iinfo(np.int64).max).to_numpy(zero_copy_only=False)

    def _changes(self, pool: pa.Table, was: np.ndarray, now: np.ndarray, before: list, after: list,
                 ) -> list[pa.RecordBatch]:
        both = was & now
        changed = np.zeros(pool.num_rows, dtype=bool)
        for b, a in zip(before, after, strict=True):
            same = pc.fill_null(pc.equal(b, a), False).to_numpy(zero_copy_only=False)
            same |= (pc.is_null(b).to_numpy(zero_copy_only=False) & pc.is_null(a).to_numpy(zero_copy_only=False))
            changed |= ~same
        gone = np.flatnonzero(was & ~now)
        old_side = np.flatnonzero(both & changed)
        new_side = old_side
        came = np.flatnonzero(~was & now)
        if not (len(gone) or len(old_side) or len(came)):
            return []
        # Retractions first: a key's -U always comes before its +U.
        retracted = np.concatenate([gone, old_side])
        emitted = np.concatenate([new_side, came])
        index = pa.array(np.concatenate([retracted, emitted]))
        columns = [pool.column(i).take(index) for i in range(self.width)]
        for b, a in zip(before, after, strict=True):
            columns.append(pa.concat_arrays([plain_array(b.take(pa.array(retracted))),
                                             plain_array(a.take(pa.array(emitted)))]))
        columns.append(row_kinds((DELETE, len(gone)), (UPDATE_BEFORE, len(old_side)), (UPDATE_AFTER, len(new_side)),
                                 (INSERT, len(came))))
        columns = [plain_array(c) for c in columns]
        columns = [c if c.type == f.type else pc.cast(c, f.type) for c, f in zip(columns, self.node.schema, strict=True)]
        return [pa.RecordBatch.from_arrays(columns, schema=self.node.schema)]
