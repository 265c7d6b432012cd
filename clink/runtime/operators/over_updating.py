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
from clink.runtime.operators.common import epoch_ms, max_parallelism, open_state
from clink.runtime.operators.over import _AGGREGATES, frame_aggregate
from clink.runtime.operators.rows import KeyedRows, NumberedRowsOperator, net_pairs, plain_array
from clink.runtime.plan import DELETE, INSERT, ROWKIND_COLUMN, UPDATE_AFTER, UPDATE_BEFORE
from clink.runtime.state.backend import OperatorState, StateBackend
from clink.runtime.state.keygroups import hash_columns

if TYPE_CHECKING:

    from clink.runtime import plan
    from clink.runtime.context import TaskContext


class UpdatingOverOperator(NumberedRowsOperator):
    """Run one ``plan.OverAggregate`` node whose input is updating: ``process(batch)`` returns
    the changes to the results."""

    def __init__(self, node: plan.OverAggregate, ctx: TaskContext, *, input_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None) -> None:
        self.node = node
        self.ctx = ctx
        self._where = f"over aggregate {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("state_rows", "state_bytes", "unmatched_retractions"):
            self.metrics.setdefault(name, 0)
        if not len(input_schema) or input_schema.names[-1] != ROWKIND_COLUMN:
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

    def process(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        kinds = batch.column(self.width)
        retract = pc.or_(pc.equal(kinds, UPDATE_BEFORE), pc.equal(kinds, DELETE)).to_numpy(zero_copy_only=False)
        columns = [plain_array(batch.column(i)) for i in range(self.width)]
        khash = hash_columns([columns[p] for p in self.node.partition], n)
        # 1. the live rows of the touched partitions
        probe, stored, ids = self.rows.lookup(np.unique(khash))
        names = [f"c{i}" for i in range(self.width)]
        added = np.flatnonzero(~retract)
        seq = np.arange(self._next_seq, self._next_seq + len(added), dtype=np.int64)
        self._next_seq += len(added)
        fresh = pa.table([*(c.take(pa.array(added)) for c in columns), pa.array(seq), pa.array(khash[added])],
                         names=[*names, "_seq", "_khash"])
        n_old = 0
        if stored is not None:
            _, stored, _, _ = net_pairs(probe, stored, ids)
            n_old = stored.num_rows
            old = pa.table([*(plain_array(stored.column(i)) for i in range(self.width + 1)),
                            plain_array(stored.column("_khash"))], names=[*names, "_seq", "_khash"])
            pool = pa.concat_tables([old, fresh.cast(old.schema)]).combine_chunks()
        else:
            pool = fresh
        # 2. retractions remove the latest equal live row
        removed = self._match_retractions(pool, [c.filter(pa.array(retract)) for c in columns])
        is_old = np.zeros(pool.num_rows, dtype=bool)
        is_old[:n_old] = True
        # 3. results before and after
        before = self._results(pool, is_old)
        after_rows = ~removed
        after = self._results(pool, after_rows)
        out = self._changes(pool, is_old, after_rows, before, after)
        # 4. the live rows follow
        now = int(self.ctx.runtime.clock())
        self.rows.store_rows(pool, np.flatnonzero(is_old & removed), -1, now)
        self.rows.store_rows(pool, np.flatnonzero(~is_old & ~removed), 1, now)
        self._update_state_metrics()
        return out

    # -- steps -----------------------------------------------------------------------------------

    def _match_retractions(self, pool: pa.Table, retracted: list[pa.Array]) -> np.ndarray:
        """Which pool rows the retractions remove: for each distinct row retracted r times, the r
        equal pool rows that arrived last."""
        removed = np.zeros(pool.num_rows, dtype=bool)
        count = len(retracted[0]) if retracted else 0
        if count == 0:
            return removed
        wanted = hash_columns([retracted[i] for i in self._hashable], count)
        have = hash_columns([pool.column(i) for i in self._hashable], pool.num_rows)
        distinct, times = np.unique(wanted, return_counts=True)
        order = np.lexsort((-pool.column("_seq").to_numpy(), have))
        sorted_have = have[order]
        position = np.arange(len(order), dtype=np.int64)
        starts = np.ones(len(order), dtype=bool)
        starts[1:] = sorted_have[1:] != sorted_have[:-1]
        nth = position - np.maximum.accumulate(np.where(starts, position, 0))
        slot = np.minimum(np.searchsorted(distinct, sorted_have), len(distinct) - 1)
        need = np.where(distinct[slot] == sorted_have, times[slot], 0)
        removed[order] = nth < need
        self.metrics["unmatched_retractions"] += count - int(removed.sum())
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
        kinds = np.concatenate([np.full(len(gone), DELETE, dtype=object), np.full(len(old_side), UPDATE_BEFORE,
                                                                                  dtype=object),
                                np.full(len(new_side), UPDATE_AFTER, dtype=object),
                                np.full(len(came), INSERT, dtype=object)])
        columns.append(pa.array(kinds, pa.string()))
        columns = [plain_array(c) for c in columns]
        columns = [c if c.type == f.type else pc.cast(c, f.type) for c, f in zip(columns, self.node.schema, strict=True)]
        return [pa.RecordBatch.from_arrays(columns, schema=self.node.schema)]
