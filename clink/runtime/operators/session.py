"""``TABLE(SESSION(...))`` as a relation: each row with the session window it falls in.

A session is known only once it has ended: rows of a key whose times are at most the gap apart
share one (touching intervals merge, as in the session window aggregation), and it ends at its
last row's time plus the gap. So every row waits, with the other rows of its key, until the
watermark passes its session's end; then the session's rows come out together with their
window_start (the first row's time), window_end and window_time (window_end - 1 ms). At each
watermark the waiting rows are grouped into sessions again in one vectorized pass (the interval
merge of the window operator); those that ended go out, the rest wait on. A row whose interval
[time, time + gap) ends at or before the watermark on arrival is late: dropped and counted, as in
the session window aggregation.

State, through the state contract: ``pending`` (table state, one bucket), the waiting rows with
their arrival number, key hash and key group. Keys are told apart by the 64-bit hash of their
columns.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.operators.base import OperatorBase
from clink.runtime.operators.common import epoch_ms, max_parallelism, open_state
from clink.runtime.operators.window import _merge_intervals
from clink.runtime.state.backend import KEY_GROUP, OperatorState, StateBackend, TableStateDescriptor
from clink.runtime.state.keygroups import group_of_hash, hash_columns

if TYPE_CHECKING:
    from clink.runtime import plan
    from clink.runtime.context import TaskContext


class SessionWindowsOperator(OperatorBase):
    """Run one ``plan.SessionWindows`` node."""

    def __init__(self, node: plan.SessionWindows, ctx: TaskContext, *, input_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None) -> None:
        self.node = node
        self.ctx = ctx
        self._where = f"session windows {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("late_records", "state_rows", "state_bytes"):
            self.metrics.setdefault(name, 0)
        self.width = len(input_schema)
        if not pa.types.is_timestamp(input_schema.field(node.time).type):
            raise ValueError(f"{self._where}: column {node.time} is not a timestamp")
        if node.gap <= 0:
            raise ValueError(f"{self._where}: the gap must be positive")
        fields = [pa.field(f"c{i}", t) for i, t in enumerate(input_schema.types)]
        fields += [pa.field("_seq", pa.int64()), pa.field("_ts", pa.int64()), pa.field("_h", pa.uint64()),
                   pa.field(KEY_GROUP, pa.int32())]
        self._pending_schema = pa.schema(fields)
        self.descriptors = [TableStateDescriptor("pending", self._pending_schema)]
        self.operator_id = operator_id or f"session-{node.id}"
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        self.descriptors, self._where)
        self.pending = self.operator_state.table_state("pending")
        self.watermark = -(2**63)
        self._next_seq = 0

    def process(self, batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]:
        """Hold ``batch``'s rows until their sessions end; drop late ones (and rows without a time)."""
        if batch.num_rows == 0:
            return []
        ts = epoch_ms(batch.column(self.node.time))
        late = (ts + self.node.gap <= self.watermark) | ~pc.is_valid(batch.column(self.node.time)).to_numpy(
            zero_copy_only=False)
        if late.any():
            self.late_rows.append(batch.filter(pa.array(late)))
            self.metrics["late_records"] += int(late.sum())
            batch, ts = batch.filter(pa.array(~late)), ts[~late]
        n = batch.num_rows
        if n == 0:
            return []
        seq = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
        self._next_seq += n
        if self.node.partition:
            hashes = hash_columns([batch.column(c) for c in self.node.partition], n)
            groups = group_of_hash(hashes, self._max_parallelism)
        else:
            hashes = np.zeros(n, np.uint64)
            groups = np.zeros(n, np.int32)
        self.pending.add(0, pa.Table.from_arrays([*batch.columns, pa.array(seq), pa.array(ts), pa.array(hashes),
                                                  pa.array(groups)], schema=self._pending_schema))
        self._update_state_metrics()
        return []

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        """Emit the rows of the sessions that end at or before ``watermark``."""
        if watermark <= self.watermark:
            return []
        self.watermark = watermark
        held = self.pending.take(0)
        if held is None or not held.num_rows:
            return []
        ts = held.column("_ts").to_numpy()
        h = held.column("_h").to_numpy()
        _, gid = np.unique(h, return_inverse=True)
        start, end = _merge_intervals(gid.reshape(-1).astype(np.int64), ts, ts + self.node.gap)
        ended = end <= watermark
        if not ended.all():
            self.pending.add(0, held.filter(pa.array(~ended)))
        self._update_state_metrics()
        if not ended.any():
            return []
        done = held.filter(pa.array(ended))
        start, end = start[ended], end[ended]
        order = np.lexsort((done.column("_seq").to_numpy(), done.column("_ts").to_numpy(), h[ended], end))
        take = pa.array(order)
        stamp = pa.timestamp("ms")
        window = [pc.cast(pa.array(start[order]), stamp), pc.cast(pa.array(end[order]), stamp),
                  pc.cast(pa.array(end[order] - 1), self.node.schema.field(self.width + 2).type)]
        columns = [done.column(i).take(take).combine_chunks() for i in range(self.width)]
        return [pa.RecordBatch.from_arrays([*columns, *window], schema=self.node.schema)]

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, int]]:
        self.operator_state.commit(checkpoint_id)
        return self.operator_state.snapshot(directory), {"watermark": self.watermark, "next_seq": self._next_seq}

    def restore(self, files: list[Path], meta: dict[str, int], *,
                key_groups: Collection[int] | None = None) -> None:
        self.operator_state.restore(files, key_groups=key_groups)
        self.watermark = int(meta.get("watermark", self.watermark))
        held = self.pending.get(0)
        # Arrival numbers break ties: new ones come after every held one (also after a merge of
        # several subtasks' key groups).
        top = pc.max(held.column("_seq")).as_py() if held is not None and held.num_rows else -1
        self._next_seq = max(int(meta.get("next_seq", 0)), top + 1)
        self._update_state_metrics()

    def close(self) -> None:
        self.operator_state.close()

    def _update_state_metrics(self) -> None:
        self.metrics["state_rows"] = self.pending.num_rows()
        self.metrics["state_bytes"] = self.pending.memory_bytes()
