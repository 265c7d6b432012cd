"""ChangelogNormalize: upserts by key into a full changelog, a whole batch at a time.

An upsert source (``upsert-kafka``) says of each key only what it is now: ``+U`` (or ``+I``)
with the new row, or ``-D``, a tombstone. What reads it needs to know what each change replaces,
so this operator keeps each key's last row (value state ``rows``: key → the row as a struct) and
emits, per change, in the order of the changes to each key:

- an upsert of a key it does not hold: ``+I`` of the row;
- an upsert of a key it holds, with a different row: ``-U`` of the old row, ``+U`` of the new;
- an upsert equal to the row held: nothing (a duplicate, as Flink drops it);
- a delete of a key it holds: ``-D`` of the old row; of a key it does not hold: nothing.

A batch may change a key several times. The rows are sorted by (key, arrival): each change's
previous row is the change before it of the same key in the batch, or for a key's first change
the stored row (read with one ``get_many``). The key's last change is written back with one
``put_many`` (a delete stores NULL, which removes the key). Keys are told apart and rows compared
by their 64-bit hashes (``hash_columns``).

With a state TTL (``table.exec.state.ttl``) each stored row carries the processing time it was
written (``_touched``): a row older than the TTL reads as absent (so the key's next upsert is a
``+I`` again, as in Flink), and a pass over the state at most every half TTL deletes such rows.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.operators.base import OperatorBase
from clink.runtime.operators.common import max_parallelism, open_state, updating_input
from clink.runtime.plan import DELETE, INSERT, ROWKIND_COLUMN, UPDATE_AFTER, UPDATE_BEFORE, ChangelogMode
from clink.runtime.state.backend import OperatorState, StateBackend, ValueStateDescriptor
from clink.runtime.state.keygroups import hash_columns

if TYPE_CHECKING:
    from clink.runtime import plan
    from clink.runtime.context import TaskContext


#: The field of a stored row that holds when it was written (with a state TTL).
_TOUCHED = "_touched"


class ChangelogNormalizeOperator(OperatorBase):
    """Run one ``plan.ChangelogNormalize`` node."""

    def __init__(self, node: plan.ChangelogNormalize, ctx: TaskContext, *, input_schema: pa.Schema,
                 input_mode: ChangelogMode, backend: StateBackend | None = None,
                 operator_id: str | None = None, ttl_ms: int | None = None) -> None:
        self.node = node
        self.ctx = ctx
        self.ttl_ms = ttl_ms
        self._where = f"changelog normalize {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("state_rows", "state_bytes"):
            self.metrics.setdefault(name, 0)
        if not updating_input(input_mode, input_schema, self._where):
            raise ValueError(f"{self._where}: the input must be an upsert stream, got {input_mode}")
        self.width = len(input_schema) - 1
        columns = pa.schema(list(input_schema)[: self.width])
        if not node.keys or any(not 0 <= k < self.width for k in node.keys):
            raise ValueError(f"{self._where}: keys {node.keys} are not columns of the input ({self.width})")
        if len(node.schema) != self.width + 1 or node.schema.names[-1] != ROWKIND_COLUMN:
            raise ValueError(f"{self._where}: the output schema must be the input's columns and {ROWKIND_COLUMN!r}")
        touched = [pa.field(_TOUCHED, pa.int64())] if ttl_ms is not None else []
        self._row_type = pa.struct([*columns, *touched])
        self._next_sweep = int(ctx.runtime.clock()) + ttl_ms if ttl_ms is not None else None
        key_schema = pa.schema([(f"k{j}", columns.field(k).type) for j, k in enumerate(node.keys)])
        self.descriptor = ValueStateDescriptor("rows", key_schema, self._row_type)
        self.descriptors = [self.descriptor]
        self.operator_id = operator_id or f"normalize-{node.id}"
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        self.descriptors, self._where)
        self._rows = self.operator_state.value_state("rows")
        self._num_keys = 0
        self._row_bytes = 16 + sum(8 if pa.types.is_primitive(f.type) else 32 for f in columns)

    def process(self, batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        width = self.width
        keys = [batch.column(k) for k in self.node.keys]
        key_hash = hash_columns(keys, n)
        kinds = batch.column(width)
        upsert = pc.invert(pc.is_in(kinds, value_set=pa.array([DELETE, UPDATE_BEFORE]))).to_numpy(
            zero_copy_only=False)
        # Changes in (key, arrival) order; each key's first and last change.
        order = np.lexsort((np.arange(n), key_hash))
        sorted_hash = key_hash[order]
        first = np.r_[True, sorted_hash[1:] != sorted_hash[:-1]]
        last = np.r_[sorted_hash[1:] != sorted_hash[:-1], True]
        firsts = order[first]
        stored = self._rows.get_many([k.take(pa.array(firsts)) for k in keys])
        held = stored.is_valid().to_numpy(zero_copy_only=False)
        now = int(self.ctx.runtime.clock())
        expired = 0
        if self.ttl_ms is not None:
            # A row not written within the TTL reads as absent; the key's last change below
            # overwrites or deletes it.
            old_enough = pc.fill_null(pc.less(stored.field(width), now - self.ttl_ms), False).to_numpy(
                zero_copy_only=False)
            expired = int((held & old_enough).sum())
            held &= ~old_enough
        # Rows 0..n-1: the batch; n..n+f-1: the stored rows of the keys' first changes.
        data = pa.Table.from_batches([batch.select(range(width))])
        old = pa.Table.from_arrays([stored.field(i) for i in range(width)], schema=data.schema)
        both = pa.concat_tables([data, old]).combine_chunks()
        # The row each change replaces: the change before it of its key, else the stored row.
        previous = np.empty(n, np.int64)
        previous[order[~first]] = order[np.flatnonzero(~first) - 1]
        previous[firsts] = n + np.arange(len(firsts))
        exists = np.empty(n, bool)
        exists[order[~first]] = upsert[order[np.flatnonzero(~first) - 1]]
        exists[firsts] = held
        value_hash = hash_columns([both.column(i) for i in range(width)], len(both))
        same = exists & upsert & (value_hash[np.arange(n)] == value_hash[previous])
        # Per change in (key, arrival) order: a retraction of the previous row, then the new row.
        retract = (exists & ~same)[order]
        emit = (upsert & ~same)[order]
        first_row = np.where(retract, previous[order], np.where(emit, order, -1))
        first_kind = np.where(retract, np.where(upsert[order], UPDATE_BEFORE, DELETE), INSERT)
        second_row = np.where(retract & emit, order, -1)
        counts = (first_row >= 0).astype(np.int64) + (second_row >= 0)
        change = np.repeat(np.arange(n), counts)
        starts = np.cumsum(counts) - counts
        is_second = (np.arange(len(change)) - starts[change]) == 1
        take = np.where(is_second, second_row[change], first_row[change])
        out_kinds = np.where(is_second, UPDATE_AFTER, first_kind[change])
        # The key's last change is what it holds now.
        lasts = order[last]
        self._store(keys, lasts, upsert, batch, now)
        self._num_keys += int(upsert[lasts].sum() - held.sum()) - expired
        if self._next_sweep is not None and now >= self._next_sweep:
            self._sweep(now)
        self.metrics["state_rows"] = self._num_keys
        self.metrics["state_bytes"] = self._num_keys * self._row_bytes
        if not len(take):
            return []
        rows = both.take(pa.array(take, pa.int64()))
        columns = [*rows.columns, pa.array(out_kinds, pa.string())]
        return [pa.RecordBatch.from_arrays([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
                                            for c in columns], schema=self.node.schema)]

    def _store(self, keys: list[pa.Array], lasts: np.ndarray, upsert: np.ndarray, batch: pa.RecordBatch,
               now: int) -> None:
        at = pa.array(lasts, pa.int64())
        fields = [batch.column(i).take(at) for i in range(self.width)]
        if self.ttl_ms is not None:
            fields.append(pa.array(np.full(len(lasts), now, np.int64)))
        values = pa.StructArray.from_arrays(fields, fields=list(self._row_type), mask=pa.array(~upsert[lasts]))
        self._rows.put_many([k.take(at) for k in keys], values)

    def _sweep(self, now: int) -> None:
        """Delete the rows not written within the TTL: a pass over the state, at most once per
        half TTL of processing time."""
        limit = now - self.ttl_ms
        for group in range(self._max_parallelism):
            expired = [key for _, key, value in self.operator_state.entries(group)
                       if value is not None and value.get(_TOUCHED, limit) < limit]
            if expired:
                columns = list(zip(*expired, strict=True))
                self._rows.put_many([pa.array(c, f.type) for c, f in zip(columns, self.descriptor.key_schema,
                                                                          strict=True)],
                                    pa.nulls(len(expired), self._row_type))
                self._num_keys -= len(expired)
        self._next_sweep = now + max(self.ttl_ms // 2, 1)

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, Any]]:
        self.operator_state.commit(checkpoint_id)
        return self.operator_state.snapshot(directory), {"keys": self._num_keys}

    def restore(self, files: list[Path], meta: dict[str, Any], *,
                key_groups: Collection[int] | None = None) -> None:
        self.operator_state.restore(files, key_groups=key_groups)
        # One snapshot: one file, or the pieces of one incremental chain (sqlite).
        one = len(files) == 1 or getattr(self.operator_state, "restored_one_chain", False)
        if key_groups is None and one and "keys" in meta:
            self._num_keys = int(meta["keys"])
        else:
            groups = range(self._max_parallelism) if key_groups is None else sorted(set(key_groups))
            self._num_keys = sum(1 for g in groups for _ in self.operator_state.entries(g))
        self.metrics["state_rows"] = self._num_keys

    def close(self) -> None:
        self.operator_state.close()
