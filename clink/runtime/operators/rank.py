"""Top-N: ``ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) ... WHERE rn <= N``, a whole batch at a time.

State is the current top N rows of every partition, in a ``KeyedRows`` store
(``clink/runtime/operators/rows.py``, table state ``rows``) keyed by the partition columns. Each
row carries ``_seq``, its arrival number, which breaks ties in the order (the earlier row ranks
first) and makes every stored row distinct.

A batch is processed in four vectorized steps:

1. the stored top rows of the partitions the batch touches are read with one lookup;
2. those rows and the batch's rows are sorted together by (partition hash, order columns, ``_seq``)
   with one Arrow ``sort_indices``, and numbered within their partition (only the sort's columns
   are joined for it; the output takes the other columns from the stored rows and the batch);
3. a stored row numbered past N leaves the top: ``-D``; a batch row numbered N or less enters it:
   ``+I``. When the row number is part of the output, a stored row whose number changed is
   retracted with its old number and emitted with the new one (its old number is its new one
   minus the batch rows that sorted before it);
4. the rows that left are removed from the store in place (``KeyedRows.kill``; a store restored
   from a checkpoint that holds rows of count -1 removes them by storing their retraction
   instead), those that entered are stored.

Over an append-only input a partition's rows beyond its top N can never come back, so they are
not kept. Over an updating input (a GROUP BY's counts ranked, say) a retraction can bring one
back: every row is kept, as Flink's retractable Top-N does, and a batch is applied to the rows of
the partitions it touches (its inserts added, each retraction removing one stored or new row
with its values), the top N numbered before and after, and the difference emitted. Partitions
are told apart by the 64-bit hash of their columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime import kernels as K
from clink.runtime.operators.common import (
    all_valid,
    epoch_ms,
    max_parallelism,
    open_state,
    row_kinds,
    set_aside_late,
    updating_input,
)
from clink.runtime.operators.rows import KeyedRows, NumberedRowsOperator, plain_array
from clink.runtime.plan import APPEND_ONLY, DELETE, INSERT, ROWKIND_COLUMN, UPDATE_AFTER, ChangelogMode
from clink.runtime.state.backend import OperatorState, StateBackend
from clink.runtime.state.keygroups import hash_columns

if TYPE_CHECKING:
    from collections.abc import Collection
    from pathlib import Path

    from clink.runtime import plan
    from clink.runtime.context import TaskContext

#: A partition end no watermark reaches, and a watermark before every end.
_NEVER = np.iinfo(np.int64).max
_NEVER_LATE = np.iinfo(np.int64).min


class RankOperator(NumberedRowsOperator):
    """Run one ``plan.Rank`` node: ``process(batch)`` returns the changes to the top N."""

    def __init__(self, node: plan.Rank, ctx: TaskContext, *, input_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None,
                 ttl_ms: int | None = None, input_mode: ChangelogMode = APPEND_ONLY) -> None:
        self.node = node
        self.ttl_ms = ttl_ms
        self.ctx = ctx
        self._where = f"top-n {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("state_rows", "state_bytes", "late_records"):
            self.metrics.setdefault(name, 0)
        self.updating = updating_input(input_mode, input_schema, self._where)
        if self.updating:
            input_schema = pa.schema(list(input_schema)[:-1])
        if node.function not in ("row_number", "rank", "dense_rank"):
            raise ValueError(f"{self._where}: rows are numbered by row_number, rank or dense_rank, not {node.function!r}")
        if node.limit < 1:
            raise ValueError(f"{self._where}: the limit must be at least 1, got {node.limit}")
        self.width = len(input_schema)
        for c in [*node.partition, *(c for c, _ in node.order)]:
            if not 0 <= c < self.width:
                raise ValueError(f"{self._where}: column {c} is not an input column (the input has {self.width})")
        expected = self.width + node.emit_rank + 1
        if len(node.schema) != expected or node.schema.names[-1] != ROWKIND_COLUMN:
            raise ValueError(f"{self._where}: the output schema must be the {self.width} input columns"
                             f"{', the row number' if node.emit_rank else ''} and {ROWKIND_COLUMN!r}; "
                             f"got <{node.schema}>")
        for c, _ in node.expiry:
            if not (0 <= c < self.width and pa.types.is_timestamp(input_schema.field(c).type)):
                raise ValueError(f"{self._where}: a partition's end is read from timestamp input columns, "
                                 f"not column {c}")
        if node.expiry and self.updating:
            raise ValueError(f"{self._where}: partitions end only over an append-only input")
        #: The watermark: a partition whose end (``node.expiry``) it has reached is forgotten.
        self._watermark = _NEVER_LATE
        stored = pa.schema([*input_schema, pa.field("_seq", pa.int64())])
        # Each row's arrival number is unique: it alone tells stored rows apart.
        self.rows = KeyedRows("rows", stored, node.partition, self._max_parallelism, retractions=True,
                              identity=(self.width,))
        self.operator_id = operator_id or f"rank-{node.id}"
        self.descriptors = [self.rows.descriptor]
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        self.descriptors, self._where)
        self.rows.table = self.operator_state.table_state("rows")
        self._next_seq = 0
        self._sort_keys = [("_khash", "ascending", "at_end"),
                           *((f"c{c}", "descending" if d else "ascending", "at_end") for c, d in node.order),
                           ("_seq", "ascending", "at_end")]

    # -- public interface ----------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        if self.updating:
            return self._process_updating(batch)
        ends = None
        if self.node.expiry:
            # A row whose partition has ended is late (only a row late upstream comes after it).
            ends = self._ends([batch.column(i) for i in range(self.width)], n)
            batch, ends = set_aside_late(batch, ends, self._watermark, self.late_rows, self.metrics)
            n = batch.num_rows
            if n == 0:
                return []
        seq = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
        self._next_seq += n
        fresh = [batch.column(i) for i in range(self.width)]
        khash = hash_columns([fresh[p] for p in self.node.partition], n)
        # 1. the current top rows of the partitions this batch touches
        touched = K.sorted_unique(khash)
        # In any order: they are sorted below with the batch (by partition, order and arrival).
        stored, ids = self._live(touched, ordered=False)
        old_count = 0 if stored is None else stored.num_rows
        old = [] if stored is None else [plain_array(stored.column(i)) for i in range(self.width)]
        # 2. old and new rows sorted together, numbered within their partition. Only the sort's
        # columns are put together: the others are taken from the stored rows or the batch as
        # the output needs them (a copy of the batch's strings would cost more than the sort).
        if old_count:
            seqs = np.concatenate([stored.column(self.width).to_numpy(), seq])
            hashes = np.concatenate([stored.column("_khash").to_numpy(), khash])
        else:
            seqs, hashes = seq, khash
        keys = {"_khash": hashes, "_seq": seqs}
        for c, _ in self.node.order:
            keys[f"c{c}"] = pa.concat_arrays([old[c], plain_array(fresh[c])]) if old_count else fresh[c]
        both = pa.table(keys)
        order = pc.sort_indices(both, sort_keys=self._sort_keys).to_numpy()
        total = len(order)
        sorted_hash = hashes[order]
        starts = np.ones(total, dtype=bool)
        starts[1:] = sorted_hash[1:] != sorted_hash[:-1]
        is_old = np.zeros(total, dtype=bool)
        is_old[:old_count] = True
        rank = np.empty(total, dtype=np.int64)
        old_rank = np.empty(total, dtype=np.int64)
        if self.node.function == "row_number":
            position = np.arange(total, dtype=np.int64)
            rank_sorted = position - np.maximum.accumulate(np.where(starts, position, 0)) + 1
            rank[order] = rank_sorted
            # A stored row's number before this batch: its number now minus the batch rows ahead of it.
            fresh_sorted = (~is_old[order]).astype(np.int64)
            ahead = np.cumsum(fresh_sorted) - fresh_sorted
            group_first = np.maximum.accumulate(np.where(starts, position, 0))
            ahead_in_partition = ahead - ahead[group_first]
            old_rank[order] = rank_sorted - ahead_in_partition
        else:
            # RANK and DENSE_RANK: rows equal in the order columns share a number. Numbered over
            # all rows now, and over the stored rows alone for the numbers they had.
            rank[order] = self._numbers(both, order, starts)
            old_sorted = order[is_old[order]]
            if len(old_sorted):
                old_starts = np.ones(len(old_sorted), dtype=bool)
                old_hash = hashes[old_sorted]
                old_starts[1:] = old_hash[1:] != old_hash[:-1]
                old_rank[old_sorted] = self._numbers(both, old_sorted, old_starts)
        # 3. the changes
        limit = self.node.limit
        leaving = is_old & (rank > limit)
        entering = ~is_old & (rank <= limit)
        renumbered = is_old & (rank <= limit) & (old_rank != rank) if self.node.emit_rank else np.zeros(total, bool)
        retract = np.flatnonzero(leaving | renumbered)
        emit = np.flatnonzero(entering | renumbered)
        new = np.flatnonzero(entering)
        out, taken = self._changes([old, fresh] if old_count else [fresh], retract, old_rank, emit, rank)
        # 4. the stored top rows follow
        gone = np.flatnonzero(leaving)
        now = int(self.ctx.runtime.clock())
        if len(gone):
            if ids is None:  # removed by storing their retractions: the stored rows, as stored
                self.remove(stored.select([*stored.column_names[:self.width + 1], "_khash"]), gone, None, now)
            else:
                self.remove(None, gone, ids, now)
        if len(new):
            # The rows entering are the last ones emitted (the stored rows come first, and only
            # they can be renumbered): their columns are already taken.
            entered = pa.table([*taken, seqs[new], hashes[new]],
                               names=[*(f"c{i}" for i in range(self.width)), "_seq", "_khash"])
            # A row's end is kept as its ``_time``: rows leave by it as an interval join's do.
            self.rows.store_rows(entered, None, 1, now, None if ends is None else ends[new - old_count])
        self._update_state_metrics()
        return out

    def _process_updating(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """A batch of an updating input: every row of a partition is kept, so a retracted row's
        place in the top N goes to the next one."""
        n = batch.num_rows
        kinds = batch.column(self.width)
        adds = pc.is_in(kinds, value_set=pa.array([INSERT, UPDATE_AFTER])).to_numpy(zero_copy_only=False)
        seq = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
        self._next_seq += n
        columns = [*(batch.column(i) for i in range(self.width)), pa.array(seq)]
        khash = hash_columns([columns[p] for p in self.node.partition], n)
        stored, ids = self._live(K.sorted_unique(khash))
        old_count = 0 if stored is None else stored.num_rows
        names = [*(f"c{i}" for i in range(self.width)), "_seq", "_khash"]
        added = pa.table([*columns, pa.array(khash)], names=names).filter(pa.array(adds))
        if old_count:
            old = pa.table([*(plain_array(stored.column(i)) for i in range(self.width + 1)),
                            plain_array(stored.column("_khash"))], names=names)
            both = pa.concat_tables([old, added]).combine_chunks()
        else:
            both = added
        total = both.num_rows
        is_old = np.zeros(total, dtype=bool)
        is_old[:old_count] = True
        # Each retraction removes one row with its values (the oldest: equal rows look alike).
        removed = np.zeros(total, dtype=bool)
        retracted = ~adds
        if retracted.any() and total:
            values = hash_columns([both.column(i) for i in range(self.width)], total)
            gone = hash_columns([batch.column(i).filter(pa.array(retracted)) for i in range(self.width)],
                                int(retracted.sum()))
            wanted, counts = np.unique(gone, return_counts=True)
            order = np.lexsort((both.column("_seq").to_numpy(), values))
            sorted_values = values[order]
            first = np.r_[True, sorted_values[1:] != sorted_values[:-1]]
            position = np.arange(total) - np.maximum.accumulate(np.where(first, np.arange(total), 0))
            at = np.searchsorted(wanted, sorted_values)
            hit = (at < len(wanted)) & (wanted[np.minimum(at, len(wanted) - 1)] == sorted_values)
            take = np.zeros(total, dtype=bool)
            take[hit] = position[hit] < counts[at[hit]]
            removed[order] = take
        alive = ~removed
        old_rank = self._ranks(both, is_old)
        new_rank = self._ranks(both, alive)
        limit = self.node.limit
        was_in = is_old & (old_rank <= limit)
        now_in = alive & (new_rank <= limit)
        moved = (old_rank != new_rank) if self.node.emit_rank else np.zeros(total, dtype=bool)
        retract = np.flatnonzero(was_in & (~now_in | moved))
        emit = np.flatnonzero(now_in & (~was_in | moved))
        out, _ = self._changes([[both.column(i) for i in range(self.width)]], retract, old_rank, emit, new_rank)
        now = int(self.ctx.runtime.clock())
        self.remove(both, np.flatnonzero(is_old & removed), ids, now)
        self.rows.store_rows(both, np.flatnonzero(~is_old & alive), 1, now)
        self._update_state_metrics()
        return out

    def _ranks(self, both: pa.Table, rows: np.ndarray) -> np.ndarray:
        """The number of each row of ``both`` among the ``rows`` of its partition (a large number
        for the others)."""
        ranks = np.full(both.num_rows, np.iinfo(np.int64).max, dtype=np.int64)
        index = np.flatnonzero(rows)
        if not len(index):
            return ranks
        part = both.take(pa.array(index))
        order = index[pc.sort_indices(part, sort_keys=self._sort_keys).to_numpy()]
        hashes = both.column("_khash").to_numpy()[order]
        starts = np.r_[True, hashes[1:] != hashes[:-1]]
        if self.node.function == "row_number":
            position = np.arange(len(order), dtype=np.int64)
            ranks[order] = position - np.maximum.accumulate(np.where(starts, position, 0)) + 1
        else:
            ranks[order] = self._numbers(both, order, starts)
        return ranks

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        """Forget the partitions that have ended (``node.expiry``); emit nothing."""
        if self.node.expiry and watermark > self._watermark:
            self._watermark = watermark
            self.rows.expire(time_before=watermark + 1)
            self._update_state_metrics()
        return []

    def restore(self, files: list[Path], meta: dict[str, int], *,
                key_groups: Collection[int] | None = None) -> None:
        super().restore(files, meta, key_groups=key_groups)
        if self.node.expiry and self.rows.rows():
            # Each row's end again, from its columns (a checkpoint taken without ends holds none).
            stored = self.rows.stored()
            ends = self._ends([stored.column(i) for i in range(self.width)], stored.num_rows)
            at = stored.column_names.index("_time")
            self.rows.replace(stored.set_column(at, "_time", pa.array(ends)))
            self._update_state_metrics()

    # -- helpers ---------------------------------------------------------------------------------

    def _ends(self, columns: list[pa.Array | pa.ChunkedArray], n: int) -> np.ndarray:
        """Each row's partition end in ms (``node.expiry``: the largest of its columns plus their
        offsets), or a time no watermark reaches where a partition column or one of those is
        NULL: rows with a NULL key need not come from one row of the side the key is unique in."""
        ends = np.full(n, _NEVER_LATE, dtype=np.int64)
        for c, offset in self.node.expiry:
            np.maximum(ends, epoch_ms(columns[c]) + offset, out=ends)
        valid = all_valid([columns[c] for c in (*self.node.partition, *(c for c, _ in self.node.expiry))], n)
        ends[~valid] = _NEVER
        return ends

    def _numbers(self, both: pa.Table, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """RANK or DENSE_RANK of the rows ``order`` (sorted; ``starts`` marks each partition's
        first): a row equal to the one before it in every order column shares its number."""
        n = len(order)
        new_value = starts.copy()
        taken = pa.array(order)
        for c, _ in self.node.order:
            values = plain_array(both.column(f"c{c}").take(taken))
            if n > 1:
                a, b = values.slice(1), values.slice(0, n - 1)
                same = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
                both_null = np.logical_and(pc.is_null(a).to_numpy(zero_copy_only=False),
                                           pc.is_null(b).to_numpy(zero_copy_only=False))
                new_value[1:] |= ~(same | both_null)
        position = np.arange(n, dtype=np.int64)
        partition_first = np.maximum.accumulate(np.where(starts, position, 0))
        if self.node.function == "rank":
            return np.maximum.accumulate(np.where(new_value, position, 0)) - partition_first + 1
        distinct = np.cumsum(new_value)
        return distinct - distinct[partition_first] + 1

    def _changes(self, blocks: list[list[pa.Array | pa.ChunkedArray]], retract: np.ndarray, old_rank: np.ndarray,
                 emit: np.ndarray, rank: np.ndarray) -> tuple[list[pa.RecordBatch], list[pa.Array]]:
        """The output: the rows ``retract`` as -D, then the rows ``emit`` as +I (with their numbers
        before and after, if the rank is output); and the input columns of the last rows output.

        Rows are numbered across ``blocks`` (each a list of the input columns: the stored rows,
        then the batch's), and each stretch of output rows from one block is taken from it in one
        batch; a stretch that is a whole block is output as it is, without a copy."""
        if not len(retract) and not len(emit):
            return [], []
        index = np.concatenate([retract, emit])
        kinds = row_kinds((DELETE, len(retract)), (INSERT, len(emit)))
        numbers = pa.array(np.concatenate([old_rank[retract], rank[emit]])) if self.node.emit_rank else None
        sizes = np.array([len(block[0]) for block in blocks], dtype=np.int64)
        first = np.cumsum(sizes) - sizes
        block_of = np.searchsorted(first, index, side="right") - 1
        cuts = [0, *(np.flatnonzero(np.diff(block_of)) + 1).tolist(), len(index)]
        out: list[pa.RecordBatch] = []
        taken: list[pa.Array] = []
        for a, b in zip(cuts, cuts[1:]):
            k = int(block_of[a])
            rows = index[a:b] - first[k]
            whole = b - a == sizes[k] and bool((rows == np.arange(sizes[k])).all())
            taken = [plain_array(c if whole else c.take(pa.array(rows))) for c in blocks[k]]
            columns = list(taken)
            if numbers is not None:
                columns.append(numbers.slice(a, b - a))
            columns.append(kinds.slice(a, b - a))
            columns = [c if c.type == f.type else pc.cast(c, f.type)
                       for c, f in zip(columns, self.node.schema, strict=True)]
            out.append(pa.RecordBatch.from_arrays(columns, schema=self.node.schema))
        return out, taken
