"""OVER aggregation: ``agg(x) OVER (PARTITION BY p ORDER BY ts <frame>)`` in event-time order.

Each input row comes out once, with the aggregates over its frame: the rows of its partition
up to and including it in (``ts``, arrival) order — the ``n`` rows before it (``ROWS n
PRECEDING``), those with a time in ``[ts - x, ts]`` (``RANGE x PRECEDING``, with the rows of
the same time: peers), or all (``UNBOUNDED PRECEDING``). As in Flink, rows wait until the
watermark passes their time, so that they are aggregated in time order; a row that arrives at
or behind the watermark is late: dropped and counted.

State, through the state contract:

- ``pending`` (table state): rows waiting for the watermark, in buckets of a second by time;
- ``history`` (bounded frames; a ``KeyedRows`` store keyed by partition): the rows a later row's
  frame can still reach — the last ``n`` of each partition (``ROWS``), or those newer than the
  watermark minus ``x`` (``RANGE``; older ones are dropped as the watermark passes);
- ``totals`` (unbounded frames; ``KeyedRows``): one row of running accumulators per partition.

When the watermark passes, the ready rows are processed in one vectorized step: sorted with the
touched partitions' history by (partition, time, arrival); each row's frame becomes a range of
positions ``[lo, hi]`` (``searchsorted`` for ``RANGE``); COUNT, SUM and AVG come from prefix sums
(value at ``hi`` minus value before ``lo``); MIN and MAX from ``ufunc.reduceat`` over the ranges
(bounded) or a running minimum per partition (unbounded). Partitions are told apart by the 64-bit
hash of their columns.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime import kernels as K
from clink.runtime.operators.base import OperatorBase
from clink.runtime.operators.common import epoch_ms, hold, max_parallelism, open_state, set_aside_late, take_ready
from clink.runtime.operators.rows import KeyedRows, net_pairs, plain_array
from clink.runtime.state.backend import KEY_GROUP, OperatorState, StateBackend, TableStateDescriptor
from clink.runtime.state.keygroups import group_of_hash, hash_columns

if TYPE_CHECKING:
    from pathlib import Path

    from clink.runtime import plan
    from clink.runtime.context import TaskContext

_AGGREGATES = ("count_star", "count", "sum", "avg", "min", "max", "lag")


class OverAggregateOperator(OperatorBase):
    """Run one ``plan.OverAggregate`` node: ``process`` holds rows back, ``on_watermark`` emits
    the rows the watermark has passed, each with its aggregates."""

    def __init__(self, node: plan.OverAggregate, ctx: TaskContext, *, input_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None) -> None:
        self.node = node
        self.ctx = ctx
        self._where = f"over aggregate {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("late_records", "state_rows", "state_bytes"):
            self.metrics.setdefault(name, 0)
        self.width = len(input_schema)
        self.input_schema = input_schema
        if any(a.fn == "lag" for a in node.aggs) and not (
                node.frame == "rows" and node.preceding is not None
                and node.preceding >= max(a.param[0] for a in node.aggs if a.fn == "lag")):
            raise ValueError(f"{self._where}: LAG needs a ROWS frame reaching back at least its offset")
        if node.frame not in ("rows", "range"):
            raise ValueError(f"{self._where}: the frame is ROWS or RANGE, got {node.frame!r}")
        if not pa.types.is_timestamp(input_schema.field(node.time).type):
            raise ValueError(f"{self._where}: column {node.time} is not a timestamp")
        for a in node.aggs:
            if a.fn not in _AGGREGATES:
                raise ValueError(f"{self._where}: {a.fn} is not an OVER aggregate ({', '.join(_AGGREGATES)})")
        if len(node.schema) != self.width + len(node.aggs):
            raise ValueError(f"{self._where}: the output schema must be the {self.width} input columns and "
                             f"{len(node.aggs)} aggregate(s); got <{node.schema}>")
        self.bounded = node.preceding is not None
        self._args = sorted({a.arg for a in node.aggs if a.arg is not None})
        pending_fields = [pa.field(f"c{i}", t) for i, t in enumerate(input_schema.types)]
        pending_fields += [pa.field("_seq", pa.int64()), pa.field("_ts", pa.int64()), pa.field("_khash", pa.uint64()),
                           pa.field(KEY_GROUP, pa.int32())]
        self._pending_schema = pa.schema(pending_fields)
        descriptors: list = [TableStateDescriptor("pending", self._pending_schema)]
        if self.bounded:
            # history rows: ts, seq, then each argument column
            schema = pa.schema([("ts", pa.int64()), ("seq", pa.int64()),
                                *((f"a{i}", input_schema.field(i).type) for i in self._args)])
            self.store = KeyedRows("history", schema, (), self._max_parallelism, retractions=True)
        else:
            schema = pa.schema([("rows", pa.int64()), *self._total_fields()])
            self.store = KeyedRows("totals", schema, (), self._max_parallelism, retractions=True)
        descriptors.append(self.store.descriptor)
        self.operator_id = operator_id or f"over-{node.id}"
        self.descriptors = descriptors
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        descriptors, self._where)
        self.pending = self.operator_state.table_state("pending")
        self.store.table = self.operator_state.table_state(self.store.descriptor.name)
        self.watermark = -(2**63)
        self._next_seq = 0

    # -- public interface ----------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, index: int = 0) -> list[pa.RecordBatch]:
        """Hold ``batch``'s rows until the watermark passes their time; drop late ones."""
        n = batch.num_rows
        if n == 0:
            return []
        batch, ts = set_aside_late(batch, epoch_ms(batch.column(self.node.time)), self.watermark, self.late_rows,
                                   self.metrics)
        n = batch.num_rows
        if n == 0:
            return []
        seq = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
        self._next_seq += n
        khash = hash_columns([batch.column(p) for p in self.node.partition], n)
        table = pa.Table.from_arrays(
            [*batch.columns, pa.array(seq), pa.array(ts), pa.array(khash),
             pa.array(group_of_hash(khash, self._max_parallelism))], schema=self._pending_schema)
        hold(self.pending, table, ts)
        self._update_state_metrics()
        return []

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        """Emit every held row at or before ``watermark``, in time order per partition."""
        if watermark <= self.watermark:
            return []
        self.watermark = watermark
        held = take_ready(self.pending, watermark)
        out = [self._fire(held)] if held is not None else []
        if self.bounded and self.node.frame == "range":
            # A later row's frame starts after watermark - x: older history can go.
            self.store.expire(time_before=watermark + 1 - self.node.preceding)
        self._update_state_metrics()
        return out

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, int]]:
        self.operator_state.commit(checkpoint_id)
        files = self.operator_state.snapshot(directory)
        return files, {"watermark": self.watermark, "next_seq": self._next_seq}

    def restore(self, files: list[Path], meta: dict[str, int], *,
                key_groups: Collection[int] | None = None) -> None:
        self.operator_state.restore(files, key_groups=key_groups)
        self.store.reload()
        self.watermark = int(meta.get("watermark", self.watermark))
        self._next_seq = int(meta.get("next_seq", 0))
        self._update_state_metrics()

    def close(self) -> None:
        self.operator_state.close()

    # -- firing ----------------------------------------------------------------------------------

    def _fire(self, held: pa.Table) -> pa.RecordBatch:
        khash = held.column("_khash").to_numpy()
        ts = held.column("_ts").to_numpy()
        seq = held.column("_seq").to_numpy()
        if self.bounded:
            return self._fire_bounded(held, khash, ts, seq)
        return self._fire_unbounded(held, khash, ts, seq)

    def _fire_bounded(self, held: pa.Table, khash: np.ndarray, ts: np.ndarray, seq: np.ndarray) -> pa.RecordBatch:
        n_new = held.num_rows
        probe, stored, ids = self.store.lookup(K.sorted_unique(khash))
        old = None
        if stored is not None:
            probe, old, _, _ = net_pairs(probe, stored, ids)
        k_old = old.column("_khash").to_numpy() if old is not None else np.zeros(0, np.uint64)
        all_k = np.concatenate([k_old, khash])
        all_ts = np.concatenate([old.column("c0").to_numpy() if old is not None else np.zeros(0, np.int64), ts])
        all_seq = np.concatenate([old.column("c1").to_numpy() if old is not None else np.zeros(0, np.int64), seq])
        order = np.lexsort((all_seq, all_ts, all_k))
        k, t = all_k[order], all_ts[order]
        m = len(order)
        position = np.arange(m, dtype=np.int64)
        starts = np.ones(m, dtype=bool)
        starts[1:] = k[1:] != k[:-1]
        part_start = np.maximum.accumulate(np.where(starts, position, 0))
        if self.node.frame == "rows":
            lo = np.maximum(part_start, position - self.node.preceding)
            hi = position
        else:
            pid = np.cumsum(starts) - 1
            span = int(t.max() - t.min()) + self.node.preceding + 1
            key = pid * span + (t - t.min())
            lo = np.searchsorted(key, key - self.node.preceding, side="left")
            hi = np.searchsorted(key, key, side="right") - 1
        # Argument values in sorted order: history's columns, then the held rows'.
        values = {}
        for j, i in enumerate(self._args):
            new = plain_array(held.column(i))
            col = pa.concat_arrays([plain_array(old.column(2 + j)), new]) if old is not None else new
            values[i] = plain_array(col.take(pa.array(order)))
        is_new = order >= (m - n_new)
        new_positions = np.flatnonzero(is_new)
        results = [frame_aggregate(a, values, lo[new_positions], hi[new_positions]) for a in self.node.aggs]
        # The held rows in output order.
        rows = held.take(pa.array(order[new_positions] - (m - n_new)))
        self._keep_history(old, held, order, k, position, starts, m, n_new)
        return self._batch(rows, results)

    def _keep_history(self, old: pa.Table | None, held: pa.Table, order: np.ndarray, k: np.ndarray,
                      position: np.ndarray, starts: np.ndarray, m: int, n_new: int) -> None:
        """The rows later frames can reach: ROWS n keeps the last n of each partition (the rest of
        the old history is retracted); RANGE keeps every new row (``expire`` drops old ones)."""
        keep_sorted = np.ones(m, dtype=bool)
        if self.node.frame == "rows":
            ends = np.ones(m, dtype=bool)
            ends[:-1] = starts[1:]
            part_end = np.minimum.accumulate(np.where(ends, position, m)[::-1])[::-1]
            keep_sorted = part_end - position < self.node.preceding
        keep = np.zeros(m, dtype=bool)
        keep[order] = keep_sorted
        n_old = m - n_new
        if old is not None and not keep[:n_old].all():
            gone = old.filter(pa.array(~keep[:n_old]))
            self.store.store([plain_array(gone.column(i)) for i in range(self.store.width)],
                             np.full(gone.num_rows, -1, np.int64), gone.column("_khash").to_numpy(),
                             int(self.ctx.runtime.clock()), gone.column("_time").to_numpy())
        fresh = np.flatnonzero(keep[n_old:])
        if len(fresh):
            taken = held.take(pa.array(fresh))
            ts = taken.column("_ts").to_numpy()
            columns = [pa.array(ts), plain_array(taken.column("_seq")),
                       *(plain_array(taken.column(i)) for i in self._args)]
            self.store.store(columns, np.ones(len(fresh), np.int64), taken.column("_khash").to_numpy(),
                             int(self.ctx.runtime.clock()), ts)

    def _fire_unbounded(self, held: pa.Table, khash: np.ndarray, ts: np.ndarray, seq: np.ndarray) -> pa.RecordBatch:
        order = np.lexsort((seq, ts, khash))
        k, t = khash[order], ts[order]
        m = len(order)
        position = np.arange(m, dtype=np.int64)
        starts = np.ones(m, dtype=bool)
        starts[1:] = k[1:] != k[:-1]
        pid = np.cumsum(starts) - 1
        part_start = np.flatnonzero(starts)
        part_hash = k[part_start]
        # Each row's frame ends at its last peer (RANGE) or at itself (ROWS).
        if self.node.frame == "range":
            same = np.zeros(m, dtype=bool)  # the next row is a peer of this one
            same[:-1] = (k[1:] == k[:-1]) & (t[1:] == t[:-1])
            hi = np.minimum.accumulate(np.where(~same, position, m)[::-1])[::-1]
        else:
            hi = position
        totals = self._load_totals(part_hash)
        rows = held.take(pa.array(order))
        results = []
        new_totals: list[np.ndarray] = []
        counts_all = _segment_cumsum(np.ones(m, np.int64), pid, starts) + totals["rows"][pid]
        ends = np.append(part_start[1:], m) - 1
        new_totals.append(counts_all[ends])
        for j, agg in enumerate(self.node.aggs):
            if agg.fn == "count_star":
                results.append(pa.array(counts_all[hi], pa.int64()))
                new_totals += [counts_all[ends], np.zeros(len(ends)), np.zeros(len(ends)), np.zeros(len(ends))]
                continue
            col = plain_array(rows.column(agg.arg))
            valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
            n = _segment_cumsum(valid.astype(np.int64), pid, starts) + totals[f"n{j}"][pid]
            numbers, kind = _numbers(col, valid, agg.fn if agg.fn in ("min", "max") else "sum")
            if agg.fn in ("min", "max"):
                running = _segment_extreme(numbers, part_start, agg.fn)
                stored = totals[f"x{j}"][pid]
                stored_n = totals[f"n{j}"][pid]
                ufunc = np.minimum if agg.fn == "min" else np.maximum
                running = np.where(stored_n > 0, ufunc(running, stored.astype(running.dtype)), running)
                results.append(_typed(running[hi], n[hi] == 0, agg.type, kind))
                new_totals += [np.zeros(len(ends)), n[ends], np.zeros(len(ends)), running[ends].astype(np.float64)]
            else:
                sums = _segment_cumsum(numbers, pid, starts) + totals[f"s{j}"][pid].astype(numbers.dtype)
                if agg.fn == "count":
                    results.append(pa.array(n[hi], pa.int64()))
                elif agg.fn == "avg":
                    results.append(_typed(_average(sums[hi], n[hi]), n[hi] == 0, agg.type))
                else:
                    results.append(_typed(sums[hi], n[hi] == 0, agg.type))
                new_totals += [np.zeros(len(ends)), n[ends], sums[ends].astype(np.float64), np.zeros(len(ends))]
        self._store_totals(part_hash, totals, new_totals)
        return self._batch(rows, results)

    def _total_fields(self) -> list[tuple[str, pa.DataType]]:
        fields = []
        for j, _ in enumerate(self.node.aggs):
            # per aggregate: rows counted, their sum, and the extreme (MIN/MAX), as float64/int64
            fields += [(f"q{j}", pa.int64()), (f"n{j}", pa.int64()), (f"s{j}", pa.float64()), (f"x{j}", pa.float64())]
        return fields

    def _load_totals(self, part_hash: np.ndarray) -> dict[str, np.ndarray]:
        """Each touched partition's accumulators (zeros for a new one), in ``part_hash`` order."""
        names = ["rows", *(name for name, _ in self._total_fields())]
        out = {name: np.zeros(len(part_hash), dtype=np.float64 if name[0] in "sx" else np.int64) for name in names}
        probe, stored, ids = self.store.lookup(part_hash)
        self._old_totals = None
        if stored is not None:
            probe, stored, _, _ = net_pairs(probe, stored, ids)
            for c, name in enumerate(names):
                out[name][probe] = stored.column(c).to_numpy()
            self._old_totals = stored
        return out

    def _store_totals(self, part_hash: np.ndarray, totals: dict, new: list[np.ndarray]) -> None:
        now = int(self.ctx.runtime.clock())
        old = self._old_totals
        if old is not None:
            self.store.store([plain_array(old.column(i)) for i in range(self.store.width)],
                             np.full(old.num_rows, -1, np.int64), old.column("_khash").to_numpy(), now, None)
        types = self.store.schema.types
        columns = [pa.array(values.astype(np.int64 if types[i] == pa.int64() else np.float64), types[i])
                   for i, values in enumerate(new)]
        self.store.store(columns, np.ones(len(part_hash), np.int64), part_hash, now, None)

    # -- output ----------------------------------------------------------------------------------

    def _batch(self, rows: pa.Table, results: list[pa.Array]) -> pa.RecordBatch:
        columns = [plain_array(rows.column(i)) for i in range(self.width)]
        columns += [r if r.type == f.type else pc.cast(r, f.type)
                    for r, f in zip(results, list(self.node.schema)[self.width:], strict=True)]
        return pa.RecordBatch.from_arrays(columns, schema=self.node.schema)

    def _update_state_metrics(self) -> None:
        self.metrics["state_rows"] = self.pending.num_rows() + self.store.rows()
        self.metrics["state_bytes"] = self.pending.memory_bytes() + self.store.table.memory_bytes()


def frame_aggregate(agg, values: dict, lo: np.ndarray, hi: np.ndarray, *, running: bool = False) -> pa.Array:
    """``agg`` over each frame ``[lo, hi]`` (positions into ``values``, an argument column by
    input index, in frame order). ``running``: every frame starts at its partition's first row
    and ``lo`` holds every partition's start, so MIN and MAX are running extremes (linear time)."""
    if agg.fn == "count_star":
        return pa.array(hi - lo + 1, pa.int64())
    col = values[agg.arg]
    if agg.fn == "lag":
        # The row ``offset`` before: in the frame (ROWS offset PRECEDING at least) unless it is
        # before the partition's first row.
        offset, default = agg.param
        target = hi - offset
        inside = target >= lo
        taken = col.take(pa.array(np.where(inside, target, 0)))
        fill = pa.scalar(default, agg.type) if default is not None else pa.nulls(1, agg.type)[0]
        return taken if inside.all() else pc.if_else(pa.array(inside), taken, fill)
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    counts = _prefix(valid.astype(np.int64))
    n = counts[hi + 1] - counts[lo]
    if agg.fn == "count":
        return pa.array(n, pa.int64())
    numbers, kind = _numbers(col, valid, agg.fn)
    if agg.fn in ("sum", "avg"):
        sums = _prefix(numbers)
        total = sums[hi + 1] - sums[lo]
        if agg.fn == "avg":
            return _typed(_average(total, n), n == 0, agg.type)
        return _typed(total, n == 0, agg.type)
    if running:
        return _typed(_running_extreme(numbers, lo, agg.fn)[hi], n == 0, agg.type, kind)
    # MIN / MAX over each [lo, hi]: reduceat over interleaved bounds takes every other result.
    padded = np.append(numbers, numbers[:1])
    bounds = np.empty(2 * len(lo), dtype=np.int64)
    bounds[0::2] = lo
    bounds[1::2] = hi + 1
    ufunc = np.minimum if agg.fn == "min" else np.maximum
    extreme = ufunc.reduceat(padded, bounds)[0::2]
    return _typed(extreme, n == 0, agg.type, kind)


def _average(total: np.ndarray, n: np.ndarray) -> np.ndarray:
    """SUM / COUNT: exact integer division truncating toward zero for integer sums (AVG of an
    integer column is of its type, as in Flink), a float division for float sums."""
    count = np.maximum(n, 1)
    if total.dtype.kind == "f":
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / count
    quotient = np.abs(total) // count
    return np.where(total < 0, -quotient, quotient)


def _prefix(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values) + 1, dtype=values.dtype)
    np.cumsum(values, out=out[1:])
    return out


def _segment_cumsum(values: np.ndarray, pid: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running sums that restart at each partition start."""
    total = np.cumsum(values)
    before = (total - values)[starts]
    return total - before[pid]


def _segment_extreme(values: np.ndarray, part_start: np.ndarray, fn: str) -> np.ndarray:
    """Running MIN/MAX per partition (one ufunc.accumulate per partition touched)."""
    ufunc = np.minimum if fn == "min" else np.maximum
    out = np.empty_like(values)
    for s, e in itertools.pairwise([*part_start.tolist(), len(values)]):
        out[s:e] = ufunc.accumulate(values[s:e])
    return out


def _running_extreme(values: np.ndarray, part_start: np.ndarray, fn: str) -> np.ndarray:
    """Running MIN/MAX that restarts at each position in ``part_start``, in one pass: values are
    replaced by their dense rank, offset by partition so that a later partition's ranks exceed
    every earlier one's; a running maximum of that never crosses a partition start."""
    if not len(values):
        return values
    distinct, rank = np.unique(values, return_inverse=True)
    rank = rank.astype(np.int64)
    if fn == "min":
        rank = len(distinct) - 1 - rank
    starts = np.zeros(len(values), dtype=bool)
    starts[part_start] = True
    offset = (np.cumsum(starts) - 1) * len(distinct)
    best = np.maximum.accumulate(rank + offset) - offset
    return distinct[len(distinct) - 1 - best if fn == "min" else best]


def _numbers(col: pa.Array, valid: np.ndarray, fn: str) -> tuple[np.ndarray, str]:
    """``col`` as numbers for prefix sums or extremes: NULLs as 0 (sums) or as the value that
    never wins (MIN/MAX); times as integers. Returns the values and their kind."""
    t = col.type
    if pa.types.is_temporal(t):
        values = pc.cast(col, pa.int64()) if not pa.types.is_timestamp(t) else pc.cast(pc.cast(col, pa.timestamp(
            t.unit, tz=t.tz)), pa.int64())
        kind = "int"
    elif pa.types.is_floating(t):
        values, kind = pc.cast(col, pa.float64()), "float"
    else:
        values, kind = pc.cast(col, pa.int64()), "int"
    dtype = np.float64 if kind == "float" else np.int64
    array = pc.fill_null(values, pa.scalar(0, values.type)).to_numpy(zero_copy_only=False).astype(dtype)
    filler = 0
    if fn == "min":
        filler = np.inf if kind == "float" else np.iinfo(np.int64).max
    elif fn == "max":
        filler = -np.inf if kind == "float" else np.iinfo(np.int64).min
    return np.where(valid, array, filler).astype(dtype), kind


def _typed(values: np.ndarray, null: np.ndarray, type_: pa.DataType, kind: str = "") -> pa.Array:
    mask = null if null.any() else None
    if pa.types.is_temporal(type_):
        return pc.cast(pa.array(values.astype(np.int64), pa.int64(), mask=mask), type_)
    if pa.types.is_floating(type_):
        return pa.array(values.astype(np.float64), pa.float64(), mask=mask).cast(type_)
    return pc.cast(pa.array(values.astype(np.int64) if values.dtype != np.int64 else values, pa.int64(), mask=mask),
                   type_)
