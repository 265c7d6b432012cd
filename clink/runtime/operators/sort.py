"""``ORDER BY`` an event time on a stream: rows wait until the watermark passes their time, then
come out sorted.

As in Flink, the first ORDER BY key of a streaming query is an event-time column, ascending: a
row can come out once no earlier row can arrive, which is what the watermark says. Each
watermark releases the held rows at or before it, sorted by (time, the other keys, arrival) in
one Arrow sort, so the output is in order across watermarks too. A row at or behind the
watermark when it arrives is late: dropped and counted (it would break the order).

State, through the state contract: ``pending`` (table state), the rows waiting for the
watermark in buckets of a second by time, each with its arrival number. The operator runs in one
subtask (its input arrives through a ``single`` exchange), so all its rows are in one key group.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.operators.base import OperatorBase
from clink.runtime.operators.common import epoch_ms, hold, max_parallelism, open_state, set_aside_late, take_ready
from clink.runtime.state.backend import KEY_GROUP, OperatorState, StateBackend, TableStateDescriptor

if TYPE_CHECKING:
    from clink.runtime import plan
    from clink.runtime.context import TaskContext


class SortOperator(OperatorBase):
    """Run one ``plan.Sort`` node: ``process`` holds rows back, ``on_watermark`` emits the rows the
    watermark has passed, in order."""

    def __init__(self, node: plan.Sort, ctx: TaskContext, *, input_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None) -> None:
        self.node = node
        self.ctx = ctx
        self._where = f"sort {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("late_records", "state_rows", "state_bytes"):
            self.metrics.setdefault(name, 0)
        self.width = len(input_schema)
        if not pa.types.is_timestamp(input_schema.field(node.time).type):
            raise ValueError(f"{self._where}: column {node.time} is not a timestamp")
        for c, _ in node.order:
            if not 0 <= c < self.width:
                raise ValueError(f"{self._where}: column {c} is not an input column (the input has {self.width})")
        if node.schema.names != input_schema.names:
            raise ValueError(f"{self._where}: the output schema must be the input's; got <{node.schema}>")
        fields = [pa.field(f"c{i}", t) for i, t in enumerate(input_schema.types)]
        fields += [pa.field("_seq", pa.int64()), pa.field("_ts", pa.int64()), pa.field(KEY_GROUP, pa.int32())]
        self._pending_schema = pa.schema(fields)
        self.descriptors = [TableStateDescriptor("pending", self._pending_schema)]
        self.operator_id = operator_id or f"sort-{node.id}"
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        self.descriptors, self._where)
        self.pending = self.operator_state.table_state("pending")
        self._sort_keys = [("_ts", "ascending", "at_end"),
                           *((f"c{c}", "descending" if d else "ascending", "at_end") for c, d in node.order),
                           ("_seq", "ascending", "at_end")]
        self.watermark = -(2**63)
        self._next_seq = 0

    # -- public interface ----------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]:
        """Hold ``batch``'s rows until the watermark passes their time; drop late ones."""
        if batch.num_rows == 0:
            return []
        batch, ts = set_aside_late(batch, epoch_ms(batch.column(self.node.time)), self.watermark, self.late_rows,
                                   self.metrics)
        n = batch.num_rows
        if n == 0:
            return []
        seq = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
        self._next_seq += n
        # One subtask holds every row: they are all in key group 0.
        table = pa.Table.from_arrays([*batch.columns, pa.array(seq), pa.array(ts), pa.array(np.zeros(n, np.int32))],
                                     schema=self._pending_schema)
        hold(self.pending, table, ts)
        self._update_state_metrics()
        return []

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        """Emit every held row at or before ``watermark``, in order."""
        if watermark <= self.watermark:
            return []
        self.watermark = watermark
        held = take_ready(self.pending, watermark)
        self._update_state_metrics()
        if held is None:
            return []
        ordered = held.take(pc.sort_indices(held, sort_keys=self._sort_keys))
        columns = [ordered.column(i).combine_chunks() for i in range(self.width)]
        return [pa.RecordBatch.from_arrays(columns, schema=self.node.schema)]

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, int]]:
        self.operator_state.commit(checkpoint_id)
        return self.operator_state.snapshot(directory), {"watermark": self.watermark, "next_seq": self._next_seq}

    def restore(self, files: list[Path], meta: dict[str, int], *,
                key_groups: Collection[int] | None = None) -> None:
        self.operator_state.restore(files, key_groups=key_groups)
        self.watermark = int(meta.get("watermark", self.watermark))
        self._next_seq = int(meta.get("next_seq", 0))
        self._update_state_metrics()

    def close(self) -> None:
        self.operator_state.close()

    def _update_state_metrics(self) -> None:
        self.metrics["state_rows"] = self.pending.num_rows()
        self.metrics["state_bytes"] = self.pending.memory_bytes()
