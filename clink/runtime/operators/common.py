"""What every stateful operator does the same way: find its max parallelism, open its state,
read times and keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.plan import ROWKIND_COLUMN, ChangelogMode
from clink.runtime.state.keygroups import DEFAULT_MAX_PARALLELISM
from clink.runtime.state.memory import MemoryStateBackend

if TYPE_CHECKING:
    from clink.runtime.context import TaskContext
    from clink.runtime.state.backend import OperatorState, StateBackend, StateDescriptor, TableState

#: Rows that wait for the watermark are held in buckets of this many ms of their time.
BUCKET_MS = 1000


def updating_input(mode: ChangelogMode, schema: pa.Schema, where: str, side: str = "input") -> bool:
    """Whether an input of the given changelog mode is updating; its batches must then end with
    the row-kind column (the one representation of row kinds)."""
    if mode.updating and (not len(schema) or schema.names[-1] != ROWKIND_COLUMN):
        raise ValueError(f"{where}: the {side} is updating {mode}, so its schema must end with "
                         f"{ROWKIND_COLUMN!r}; got <{schema}>")
    return mode.updating


def max_parallelism(ctx: TaskContext) -> int:
    """The job's number of key groups (``pipeline.max-parallelism``, 128 by default)."""
    return int(ctx.runtime.get("pipeline.max-parallelism") or DEFAULT_MAX_PARALLELISM)


def open_state(backend: StateBackend | None, max_parallelism: int, operator_id: str,
               descriptors: Sequence[StateDescriptor], where: str) -> OperatorState:
    """Open the operator's keyed state on ``backend`` (a memory backend if None), which must
    split keys into the job's ``max_parallelism`` key groups."""
    if backend is None:
        backend = MemoryStateBackend(max_parallelism=max_parallelism)
    elif backend.max_parallelism != max_parallelism:
        raise ValueError(f"{where}: the state backend has max parallelism {backend.max_parallelism}, "
                         f"the job {max_parallelism}")
    return backend.open(operator_id, descriptors)


def row_kinds(*runs: tuple[str, int]) -> pa.Array:
    """A row-kind column of ``(kind, count)`` runs in order (``("-D", 3), ("+I", 5)``): a take
    from the few kinds, where a column built from Python strings costs a conversion per row."""
    kinds = pa.array([kind for kind, _ in runs], pa.string())
    return pc.take(kinds, pa.array(np.repeat(np.arange(len(runs), dtype=np.int32), [n for _, n in runs])))


def epoch_ms(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A timestamp column as int64 milliseconds since the epoch; NULL as a time before any
    watermark (such a row can never be placed in time)."""
    ms = pc.cast(pc.cast(col, pa.timestamp("ms", tz=col.type.tz)), pa.int64())
    return pc.fill_null(ms, -(2**62)).to_numpy(zero_copy_only=False)


def all_valid(keys: Sequence[pa.Array], n: int) -> np.ndarray:
    """Per row, whether no key column is NULL (a NULL key matches nothing in SQL)."""
    valid = np.ones(n, dtype=bool)
    for k in keys:
        if k.null_count:
            valid &= pc.is_valid(k).to_numpy(zero_copy_only=False)
    return valid


def set_aside_late(batch: pa.RecordBatch, ts: np.ndarray, watermark: int, late_rows: list[pa.RecordBatch],
                   metrics: dict[str, int]) -> tuple[pa.RecordBatch, np.ndarray]:
    """The rows of ``batch`` (times ``ts``, ms) after ``watermark``, with their times; the others
    are late: added to ``late_rows`` (which the executor empties) and counted."""
    late = ts <= watermark
    if not late.any():
        return batch, ts
    late_rows.append(batch.filter(pa.array(late)))
    metrics["late_records"] += int(late.sum())
    return batch.filter(pa.array(~late)), ts[~late]


def hold(pending: TableState, table: pa.Table, ts: np.ndarray) -> None:
    """Keep ``table``'s rows (times ``ts``, ms) in ``pending``, one bucket per second of time."""
    buckets = ts // BUCKET_MS
    for bucket in np.unique(buckets):
        pending.add(int(bucket), table.filter(pa.array(buckets == bucket)))


def take_ready(pending: TableState, watermark: int) -> pa.Table | None:
    """Remove and return the held rows whose ``_ts`` is at or before ``watermark`` (the rest of
    the one bucket it splits goes back); None if there are none."""
    parts = [pending.take(ns) for ns in pending.namespaces(until=watermark // BUCKET_MS)]
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    held = pa.concat_tables(parts)
    ready = held.column("_ts").to_numpy() <= watermark
    if not ready.all():
        pending.add(int(watermark // BUCKET_MS), held.filter(pa.array(~ready)))
        held = held.filter(pa.array(ready))
    return held if held.num_rows else None
