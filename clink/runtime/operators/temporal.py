"""Temporal join: ``JOIN versioned FOR SYSTEM_TIME AS OF l.ts ON l.k = v.k``, by event time.

The right side is a versioned table: each of its rows is a version of its key, valid from its
time until the key's next version. A left row meets the version of its key valid at its own time
— the one with the latest time at or before it — once the watermark has passed its time (so that
every version up to then has arrived). The result is append-only: ``INNER`` drops a left row
without a version, ``LEFT`` pads it with NULLs.

The right side may be a changelog (a table with a primary key read from Debezium, Canal or
upsert-kafka): as in Flink, its ``+I`` and ``+U`` rows are versions, ``-U`` rows are passed over
(the ``+U`` after them is the new version), and a ``-D`` row says that from its time on the key
has no row: it is stored as a version with ``_count`` -1, and a left row whose chosen version is
one meets nothing. Of versions of one key with equal times, the one stored last counts.

State, through the state contract:

- ``pending`` (table state): left rows waiting for the watermark, in buckets of a second;
- ``versions`` (a ``KeyedRows`` store keyed by the join key): the right rows. A version older
  than the newest one at or before the watermark can no longer be chosen (later left rows have
  later times) and is dropped; the store is compacted so when it has doubled since the last time.

A firing is vectorized: one lookup of the ready rows' keys, the candidate versions at or before
each row's time kept, and per row the latest one chosen with one sort.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.operators.base import OperatorBase
from clink.runtime.operators.common import all_valid, epoch_ms, hold, max_parallelism, open_state, take_ready, updating_input
from clink.runtime.operators.rows import KeyedRows, plain_array
from clink.runtime.plan import APPEND_ONLY, DELETE, UPDATE_BEFORE, ChangelogMode
from clink.runtime.state.backend import KEY_GROUP, OperatorState, StateBackend, TableStateDescriptor
from clink.runtime.state.keygroups import group_of_hash, hash_columns

if TYPE_CHECKING:
    from pathlib import Path

    from clink.runtime import plan
    from clink.runtime.context import TaskContext

class TemporalJoinOperator(OperatorBase):
    """Run a ``plan.Join`` with ``temporal`` set: ``process(batch, side)`` holds left rows and
    stores versions; ``on_watermark`` emits the left rows the watermark has passed."""

    def __init__(self, node: plan.Join, ctx: TaskContext, *, left_schema: pa.Schema, right_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None,
                 left_mode: ChangelogMode = APPEND_ONLY,
                 right_mode: ChangelogMode = APPEND_ONLY) -> None:
        self.node = node
        self.ctx = ctx
        self._where = f"temporal join {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("state_rows", "state_bytes"):
            self.metrics.setdefault(name, 0)
        if node.kind not in ("inner", "left"):
            raise ValueError(f"{self._where}: a temporal join is inner or left, not {node.kind}")
        if updating_input(left_mode, left_schema, self._where, "left input"):
            raise ValueError(f"{self._where}: the left input is updating; a temporal join takes appends on the left")
        #: The right input is a changelog: its batches end with the row kind.
        self._changes = updating_input(right_mode, right_schema, self._where, "right input")
        if self._changes:
            right_schema = pa.schema(list(right_schema)[:-1])
        self.left_schema, self.right_schema = left_schema, right_schema
        self.left_time, self.right_time = node.temporal
        self._out_schema = node.schema
        pending = [pa.field(f"c{i}", t) for i, t in enumerate(left_schema.types)]
        pending += [pa.field("_ts", pa.int64()), pa.field("_khash", pa.uint64()), pa.field(KEY_GROUP, pa.int32())]
        self._pending_schema = pa.schema(pending)
        self.versions = KeyedRows("versions", right_schema, node.right_keys, self._max_parallelism)
        self.operator_id = operator_id or f"join-{node.id}"
        self.descriptors = [TableStateDescriptor("pending", self._pending_schema), self.versions.descriptor]
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        self.descriptors, self._where)
        self.pending = self.operator_state.table_state("pending")
        self.versions.table = self.operator_state.table_state("versions")
        self.watermark = -(2**63)
        self._compacted_at = 0

    # -- public interface ----------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, side: int) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        if side == 1:
            columns = [batch.column(i) for i in range(len(self.right_schema))]
            keys = [columns[k] for k in self.node.right_keys]
            valid = all_valid(keys, n)
            sign = np.ones(n, np.int64)
            if self._changes:
                kinds = batch.column(len(self.right_schema))
                valid &= pc.not_equal(kinds, UPDATE_BEFORE).to_numpy(zero_copy_only=False)
                sign[pc.equal(kinds, DELETE).to_numpy(zero_copy_only=False)] = -1
            if not valid.all():  # a version without a key is never met; a -U is no version
                keep = pa.array(valid)
                columns = [pc.filter(c, keep) for c in columns]
                keys = [columns[k] for k in self.node.right_keys]
                sign = sign[valid]
            if len(sign):
                self.versions.store(columns, sign, hash_columns(keys, len(columns[0])),
                                    int(self.ctx.runtime.clock()), epoch_ms(columns[self.right_time]))
        else:
            ts = epoch_ms(batch.column(self.left_time))
            khash = hash_columns([batch.column(k) for k in self.node.left_keys], n)
            table = pa.Table.from_arrays(
                [*batch.columns, pa.array(ts), pa.array(khash),
                 pa.array(group_of_hash(khash, self._max_parallelism))], schema=self._pending_schema)
            hold(self.pending, table, ts)
        self._update_state_metrics()
        return []

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        if watermark <= self.watermark:
            return []
        self.watermark = watermark
        held = take_ready(self.pending, watermark)
        out = self._fire(held) if held is not None else []
        if self.versions.rows() >= 2 * max(self._compacted_at, 1024):
            self._compact(watermark)
        self._update_state_metrics()
        return out

    def end_of_input(self, side: int) -> list[pa.RecordBatch]:
        return []

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, int]]:
        self.operator_state.commit(checkpoint_id)
        files = self.operator_state.snapshot(directory)
        return files, {"watermark": self.watermark}

    def restore(self, files: list[Path], meta: dict[str, int], *,
                key_groups: Collection[int] | None = None) -> None:
        self.operator_state.restore(files, key_groups=key_groups)
        self.versions.reload()
        self.watermark = int(meta.get("watermark", self.watermark))
        self._update_state_metrics()

    def close(self) -> None:
        self.operator_state.close()

    # -- firing ----------------------------------------------------------------------------------

    def _fire(self, held: pa.Table) -> list[pa.RecordBatch]:
        n = held.num_rows
        width = len(self.left_schema)
        left_columns = [plain_array(held.column(i)) for i in range(width)]
        ts = held.column("_ts").to_numpy()
        keys = [left_columns[k] for k in self.node.left_keys]
        valid = all_valid(keys, n)
        probe, stored, _ = self.versions.lookup(held.column("_khash").to_numpy())
        chosen = np.full(n, -1, dtype=np.int64)
        if stored is not None:
            keep = valid[probe]
            for key, k in zip(keys, self.node.right_keys, strict=True):
                same = pc.equal(key.take(pa.array(probe)), stored.column(k))
                keep &= pc.fill_null(same, False).to_numpy(zero_copy_only=False)
            version_time = stored.column("_time").to_numpy()
            keep &= version_time <= ts[probe]
            candidates = np.flatnonzero(keep)
            if len(candidates):
                # Per left row, the latest version at or before its time (the last stored of equal times).
                order = np.lexsort((candidates, version_time[candidates], probe[candidates]))
                ranked = candidates[order]
                last = np.ones(len(ranked), dtype=bool)
                last[:-1] = probe[ranked][1:] != probe[ranked][:-1]
                best = ranked[last]
                # A deletion chosen: the key has no row at that time.
                best = best[stored.column("_count").to_numpy()[best] > 0]
                chosen[probe[best]] = best
        matched = np.flatnonzero(chosen >= 0)
        right_width = len(self.right_schema)
        if len(matched):
            versions = stored.take(pa.array(chosen[matched]))
            pairs = [c.take(pa.array(matched)) for c in left_columns]
            pairs += [plain_array(versions.column(i)) for i in range(right_width)]
            if self.node.residual is not None:
                names = [f"c{i}" for i in range(len(pairs))]
                verdict = self.node.residual(pa.RecordBatch.from_arrays(pairs, names=names), self.ctx)
                passes = pc.fill_null(verdict, False).to_numpy(zero_copy_only=False)
                if not passes.all():
                    chosen[matched[~passes]] = -1
                    matched = matched[passes]
                    pairs = [pc.filter(c, pa.array(passes)) for c in pairs]
        out = []
        if len(matched):
            out.append(self._batch(pairs))
        if self.node.kind == "left":
            alone = np.flatnonzero(chosen < 0)
            if len(alone):
                padded = [c.take(pa.array(alone)) for c in left_columns]
                padded += [pa.nulls(len(alone), t) for t in self.right_schema.types]
                out.append(self._batch(padded))
        return out

    def _batch(self, columns: list[pa.Array]) -> pa.RecordBatch:
        columns = [c if c.type == f.type else pc.cast(c, f.type) for c, f in zip(columns, self._out_schema, strict=True)]
        return pa.RecordBatch.from_arrays(columns, schema=self._out_schema)

    def _compact(self, watermark: int) -> None:
        """Drop every version older than its key's newest version at or before ``watermark``."""
        parts = [self.versions.table.get(ns) for ns in list(self.versions.table.namespaces())]
        parts = [p for p in parts if p is not None and p.num_rows]
        if parts:
            table = pa.concat_tables(parts).combine_chunks()
            khash = table.column("_khash").to_numpy()
            times = table.column("_time").to_numpy()
            settled = times <= watermark
            # The newest settled time of each key: a version before it can never be chosen again.
            order = np.lexsort((times, khash))
            k, t, s = khash[order], times[order], settled[order]
            newest = np.where(s, t, np.iinfo(np.int64).min)
            starts = np.ones(len(k), dtype=bool)
            starts[1:] = k[1:] != k[:-1]
            group = np.cumsum(starts) - 1
            best = np.full(group[-1] + 1, np.iinfo(np.int64).min)
            np.maximum.at(best, group, newest)
            keep_sorted = t >= best[group]
            keep = np.empty(len(k), dtype=bool)
            keep[order] = keep_sorted
            self.versions.replace(table.filter(pa.array(keep)))
        self._compacted_at = self.versions.rows()

    def _update_state_metrics(self) -> None:
        self.metrics["state_rows"] = self.pending.num_rows() + self.versions.rows()
        self.metrics["state_bytes"] = self.pending.memory_bytes() + self.versions.table.memory_bytes()
