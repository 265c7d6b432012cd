"""Regular and interval joins: both sides kept in state, matched a whole batch at a time.

Each side's rows live in one table state (``left``, ``right``) as *runs*: immutable tables, one
per namespace, in arrival order, each indexed in memory by its key hashes (``_khash``) sorted,
with the row each belongs to. A batch on one side is matched against the other side's runs with
``numpy.searchsorted`` on those sorted hashes (one call per run, for the whole batch), the
candidate pairs are checked for equal keys and for the residual condition, and then the batch
becomes a new run of its own side. Runs merge as they grow — the newest into the one before it
while that one is at most twice its size — so a side of N rows has about log2(N / batch) runs.
A merge concatenates the two tables without copying rows and merges the two sorted indexes in
linear time; only a side that takes retractions rewrites its rows (to net them), and a run of
many chunks is copied into one. The index is rebuilt from ``_khash`` after a restore.

Columns of a run: the side's columns as ``c0`` … ``cN``, then

- ``_khash`` (uint64): hash of the key columns;
- ``_rhash`` (uint64): hash of the whole row (columns of nested types left out), which tells
  which stored row a retraction removes (0 on a side that takes no retractions);
- ``_count`` (int64): +1 for a row added, -1 for one retracted (``-U``/``-D`` input rows); a merge
  nets the counts of equal rows and drops those that reach 0, so retracted rows leave the state;
- ``_written`` (int64): when the row was stored (the context clock, ms): rows older than
  ``table.exec.state.ttl`` are ignored, and dropped once they are a quarter of their run;
- ``_time`` (int64): the row's event time in ms (interval joins; 0 otherwise);
- ``_key_group`` (int32): the key group of the join key, so that a rescaled restore splits a
  side by key like every other keyed state.

Matching a batch against the other side, vectorized throughout:

1. candidates: per run, ``searchsorted`` gives each probe row's range of equal key hashes;
   ranges expand to (probe row, stored row) pairs with ``repeat``/``arange``;
2. pairs whose keys differ (a hash collision) or whose residual is not TRUE are dropped;
3. if the stored side is updating, an Arrow ``group_by`` over (probe row, ``_rhash``) nets the
   counts, giving each distinct stored row its multiplicity;
4. pairs are emitted once per multiplicity, as ``+I`` (the probe row added) or ``-D`` (retracted).

Outer joins add NULL-padded rows: a preserved row that has no match is emitted padded when it
arrives. When the other side's first match for a stored preserved row arrives, its padded row is
retracted (``-D``), and when its last match is retracted, the padded row comes back (``+I``); the
number of matches before and after the batch is computed the same way, from the state. Rows with
a NULL key never match: they are not stored, and a preserved one is passed on padded at once.

Interval joins also drop, at each watermark, the rows no future row of the other side can match
(the bound is part of the residual too, so matching never depends on how soon rows are dropped).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.operators.common import max_parallelism, open_state
from clink.runtime.plan import DELETE, INSERT, ROWKIND_COLUMN, UPDATE_BEFORE
from clink.runtime.state.backend import (
    KEY_GROUP,
    OperatorState,
    StateBackend,
    TableState,
    TableStateDescriptor,
)
from clink.runtime.state.keygroups import hash_columns

if TYPE_CHECKING:
    from pathlib import Path

    from clink.runtime import plan
    from clink.runtime.context import TaskContext

_META = ("_khash", "_rhash", "_count", "_written", "_time")
_META_TYPES = (pa.uint64(), pa.uint64(), pa.int64(), pa.int64(), pa.int64())


@dataclass(slots=True)
class _Run:
    """One table of a side, indexed: its namespace, its key hashes sorted, the table row of
    each (``order``), and its oldest event time and write time."""

    namespace: int
    khash: np.ndarray
    order: np.ndarray
    min_time: int
    min_written: int


#: A run whose tables have more chunks than this is copied into one (reads slow down with many).
_MAX_CHUNKS = 16


class _Side:
    """The stored rows of one input of the join."""

    def __init__(self, name: str, schema: pa.Schema, keys: tuple[int, ...], max_parallelism: int) -> None:
        self.name = name
        self.updating = len(schema) > 0 and schema.names[-1] == ROWKIND_COLUMN
        self.schema = pa.schema(list(schema)[: len(schema) - self.updating])
        self.width = len(self.schema)
        self.keys = keys
        for k in keys:
            if not 0 <= k < self.width:
                raise ValueError(f"join key column {k} is not a column of the {name} input (it has {self.width})")
        self.max_parallelism = max_parallelism
        self.hashable = [i for i, t in enumerate(self.schema.types) if _hashable(t)]
        fields = [pa.field(f"c{i}", t) for i, t in enumerate(self.schema.types)]
        fields += [pa.field(n, t) for n, t in zip(_META, _META_TYPES, strict=True)]
        fields.append(pa.field(KEY_GROUP, pa.int32()))
        self.descriptor = TableStateDescriptor(name, pa.schema(fields))
        self.state_schema = self.descriptor.schema
        self.table: TableState
        self.runs: list[_Run] = []
        self.next_namespace = 0
        #: Interval joins: rows with ``_time`` below ``watermark + expire_offset`` can match no more.
        self.time_column: int | None = None
        self.expire_offset = 0

    def split(self, batch: pa.RecordBatch) -> tuple[list[pa.Array], np.ndarray]:
        """The data columns of an input batch, and each row's sign (+1 added, -1 retracted)."""
        columns = [batch.column(i) for i in range(self.width)]
        if not self.updating:
            return columns, np.ones(batch.num_rows, dtype=np.int64)
        kinds = batch.column(self.width)
        retract = pc.or_(pc.equal(kinds, UPDATE_BEFORE), pc.equal(kinds, DELETE))
        sign = np.where(retract.to_numpy(zero_copy_only=False), -1, 1).astype(np.int64)
        return columns, sign

    def rows(self) -> int:
        return self.table.num_rows()

    # -- reading

    def lookup(self, khash: np.ndarray) -> tuple[np.ndarray, pa.Table | None, np.ndarray]:
        """Every stored row whose key hash equals a probe's: (probe index per pair, the rows, an
        id per stored row: equal ids are the same stored row)."""
        probes: list[np.ndarray] = []
        parts: list[pa.Table] = []
        ids: list[np.ndarray] = []
        for run in self.runs:
            lo = np.searchsorted(run.khash, khash, side="left")
            hi = np.searchsorted(run.khash, khash, side="right")
            lengths = hi - lo
            total = int(lengths.sum())
            if total == 0:
                continue
            probe = np.repeat(np.arange(len(khash), dtype=np.int64), lengths)
            starts = np.cumsum(lengths) - lengths
            positions = np.arange(total, dtype=np.int64) - np.repeat(starts - lo, lengths)
            table = self.table.get(run.namespace)
            parts.append(table.take(run.order[positions]))
            probes.append(probe)
            ids.append(positions + (run.namespace << 32))
        if not parts:
            return np.zeros(0, dtype=np.int64), None, np.zeros(0, dtype=np.int64)
        return (np.concatenate(probes), pa.concat_tables(parts) if len(parts) > 1 else parts[0],
                np.concatenate(ids))

    # -- writing

    def store(self, columns: list[pa.Array], sign: np.ndarray, khash: np.ndarray, now: int,
              times: np.ndarray | None) -> None:
        """Add rows (with their signs) as a new run, then merge runs that have grown alike."""
        n = len(sign)
        if n == 0:
            return
        # Only retractions need to know which stored row they remove.
        rhash = hash_columns([columns[i] for i in self.hashable], n) if self.updating else np.zeros(n, np.uint64)
        time_values = times if times is not None else np.zeros(n, dtype=np.int64)
        arrays = [*columns, pa.array(khash), pa.array(rhash), pa.array(sign), pa.array(np.full(n, now, dtype=np.int64)),
                  pa.array(time_values), pa.array((khash % np.uint64(self.max_parallelism)).astype(np.int32))]
        order = np.argsort(khash, kind="stable")
        self._add_run(pa.Table.from_arrays(arrays, schema=self.state_schema), khash[order], order)
        while len(self.runs) >= 2 and len(self.runs[-2].khash) <= 2 * len(self.runs[-1].khash):
            self._merge_last_two()

    def _add_run(self, table: pa.Table, khash: np.ndarray, order: np.ndarray) -> None:
        if table.num_rows == 0:
            return
        namespace = self.next_namespace
        self.next_namespace += 1
        self.table.add(namespace, table)
        self.runs.append(_Run(namespace, khash, order, _min(table, "_time"), _min(table, "_written")))

    def _merge_last_two(self) -> None:
        """One run from the newest two. Rows stay where they are (the tables are concatenated);
        only the sorted hashes and the row order are merged, in linear time (a stable sort of two
        sorted runs). A side that takes retractions nets its rows instead, rewriting them."""
        b = self.runs.pop()
        a = self.runs.pop()
        first = self.table.take(a.namespace)
        merged = pa.concat_tables([first, self.table.take(b.namespace)])
        if self.updating:
            self._rebuild(merged)
            return
        keys = np.concatenate([a.khash, b.khash])
        rows = np.concatenate([a.order, b.order + first.num_rows])
        perm = np.argsort(keys, kind="stable")
        if merged.num_columns and merged.column(0).num_chunks > _MAX_CHUNKS:
            merged = merged.combine_chunks()
        self._add_run(merged, keys[perm], rows[perm])

    def _rebuild(self, table: pa.Table) -> None:
        """Net (a side that takes retractions) and index ``table``, and store it as one run."""
        if self.updating and table.num_rows:
            table = _net(table)
        table = table.combine_chunks()
        khash = table.column("_khash").to_numpy()
        order = np.argsort(khash, kind="stable")
        self._add_run(table, khash[order], order)

    def expire(self, *, time_before: int | None = None, written_before: int | None = None) -> None:
        """Drop rows whose ``_time`` (or ``_written``) is below the bound; rewrite a run only when
        a quarter of it or more goes, so that the work stays proportional to what is dropped."""
        runs, self.runs = self.runs, []
        for run in runs:
            old_time = time_before is not None and run.min_time < time_before
            old_write = written_before is not None and run.min_written < written_before
            if not (old_time or old_write):
                self.runs.append(run)
                continue
            table = self.table.get(run.namespace)
            keep = np.ones(table.num_rows, dtype=bool)
            if old_time:
                keep &= table.column("_time").to_numpy() >= time_before
            if old_write:
                keep &= table.column("_written").to_numpy() >= written_before
            dropped = table.num_rows - int(keep.sum())
            if dropped == 0 or (dropped * 4 < table.num_rows and keep.any()):
                self.runs.append(run)
                continue
            self.table.take(run.namespace)
            if keep.any():
                self._rebuild(table.filter(pa.array(keep)))
        self.runs.sort(key=lambda r: -len(r.khash))

    def reload(self) -> None:
        """After a restore: every stored row becomes one run (namespaces of several snapshots may
        overlap, and a key-group filter may have left gaps)."""
        parts = [self.table.take(ns) for ns in list(self.table.namespaces())]
        self.runs = []
        self.next_namespace = 0
        parts = [p for p in parts if p is not None and p.num_rows]
        if parts:
            self._rebuild(pa.concat_tables(parts))


class JoinOperator:
    """Run one ``plan.Join`` node.

    ``process(batch, side)`` takes a batch of the left (0) or right (1) input and returns the
    rows it produces: batches of ``node.schema``, whose last column is ``ROWKIND_COLUMN`` when the
    join is updating. ``on_watermark`` drops rows an interval join can no longer match.
    ``metrics`` holds ``state_rows`` (rows stored on both sides) and ``state_bytes``.
    ``ttl_ms``: rows stored longer ago than this (by the context clock) are forgotten
    (``table.exec.state.ttl``); None keeps them.
    """

    def __init__(self, node: plan.Join, ctx: TaskContext, *, left_schema: pa.Schema, right_schema: pa.Schema,
                 backend: StateBackend | None = None, operator_id: str | None = None,
                 ttl_ms: int | None = None) -> None:
        self.node = node
        self.ctx = ctx
        self._where = f"join {node.id}"
        self._max_parallelism = max_parallelism(ctx)
        self.late_rows: list[pa.RecordBatch] = []
        self.metrics: dict[str, int] = ctx.metrics
        for name in ("state_rows", "state_bytes"):
            self.metrics.setdefault(name, 0)
        if len(node.left_keys) != len(node.right_keys) or not node.left_keys:
            raise ValueError(f"{self._where}: needs as many left keys as right keys, at least one")
        self.sides = (_Side("left", left_schema, node.left_keys, self._max_parallelism),
                      _Side("right", right_schema, node.right_keys, self._max_parallelism))
        left, right = self.sides
        for a, b in zip(node.left_keys, node.right_keys, strict=True):
            if left.schema.field(a).type != right.schema.field(b).type:
                raise ValueError(f"{self._where}: key columns {a} and {b} have different types "
                                 f"({left.schema.field(a).type}, {right.schema.field(b).type})")
        self.updating = node.schema.names[-1] == ROWKIND_COLUMN if len(node.schema) else False
        width = left.width + right.width
        if len(node.schema) != width + self.updating:
            raise ValueError(f"{self._where}: the output schema must be the {left.width} left and {right.width} "
                             f"right columns{' and the row kind' if self.updating else ''}; got <{node.schema}>")
        self._out_fields = list(node.schema)[:width]
        self._pair_schema = pa.schema([pa.field(f"c{i}", f.type) for i, f in enumerate(self._out_fields)])
        self.preserves = (node.kind in ("left", "full"), node.kind in ("right", "full"))
        if not self.updating and (left.updating or right.updating or any(self.preserves)):
            raise ValueError(f"{self._where}: an outer join or an updating input makes the join updating: "
                             f"its schema must end with {ROWKIND_COLUMN!r}")
        if node.interval is not None:
            left_time, right_time, lower, upper = node.interval
            # right.t - left.t in [lower, upper]: a left row can match no right row once the
            # watermark passes left.t + upper; a right row none once it passes right.t - lower.
            left.time_column, left.expire_offset = left_time, -upper
            right.time_column, right.expire_offset = right_time, lower
        self.ttl_ms = ttl_ms
        self.operator_id = operator_id or f"join-{node.id}"
        self.descriptors = [left.descriptor, right.descriptor]
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        self.descriptors, self._where)
        for side in self.sides:
            side.table = self.operator_state.table_state(side.name)

    # -- public interface ----------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, side: int) -> list[pa.RecordBatch]:
        """Match ``batch`` (of input ``side``: 0 left, 1 right) against the other side's stored
        rows, store it, and return what the join emits."""
        if batch.num_rows == 0:
            return []
        this = self.sides[side]
        columns, sign = this.split(batch)
        n = batch.num_rows
        now = int(self.ctx.runtime.clock())
        if self.ttl_ms is not None:
            self._expire_ttl(now)
        keys = [columns[k] for k in this.keys]
        valid = _all_valid(keys, n)
        khash = hash_columns(keys, n)
        probe_rows = np.flatnonzero(valid) if not valid.all() else None
        # 1. pairs with the other side's stored rows
        if probe_rows is None:
            probe, stored, mult, ids = self._match(side, columns, keys, khash)
        else:
            taken = [c.take(probe_rows) for c in columns]
            probe, stored, mult, ids = self._match(side, taken, [taken[k] for k in this.keys], khash[probe_rows])
            probe = probe_rows[probe]
        out: list[tuple[list[pa.Array], np.ndarray]] = []
        gone: list[tuple[list[pa.Array], np.ndarray]] = []
        back: list[tuple[list[pa.Array], np.ndarray]] = []
        if len(probe):
            mine = [c.take(probe) for c in columns]
            theirs = [_array(stored.column(i)) for i in range(self.sides[1 - side].width)]
            out.append((self._arrange(side, mine, theirs), sign[probe] * mult))
        # 2. this side's rows without a match, padded (outer join preserving this side)
        if self.preserves[side]:
            matches = np.bincount(probe, weights=mult, minlength=n) if len(probe) else np.zeros(n)
            alone = np.flatnonzero(matches <= 0)
            if len(alone):
                mine = [c.take(alone) for c in columns]
                out.append((self._arrange(side, mine, self._nulls(1 - side, len(alone))), sign[alone]))
        # 3. the other side's preserved rows that gain their first or lose their last match
        if self.preserves[1 - side] and len(probe):
            gone, back = self._other_padding(side, probe, stored, mult, ids, sign)
        # 4. store this batch
        if probe_rows is None:
            this.store(columns, sign, khash, now, self._times(this, columns))
        elif len(probe_rows):
            taken = [c.take(probe_rows) for c in columns]
            this.store(taken, sign[probe_rows], khash[probe_rows], now, self._times(this, taken))
        self._update_state_metrics()
        return self._emit(gone + out + back)

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        """Drop the rows of an interval join that no later row can match; emit nothing."""
        for side in self.sides:
            if side.time_column is not None and side.runs:
                side.expire(time_before=watermark + side.expire_offset)
        self._update_state_metrics()
        return []

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, int]]:
        """Commit both sides' runs as of checkpoint ``checkpoint_id`` and write them to files."""
        self.operator_state.commit(checkpoint_id)
        files = self.operator_state.snapshot(directory)
        return files, {"left_rows": self.sides[0].rows(), "right_rows": self.sides[1].rows()}

    def restore(self, files: list[Path], meta: dict[str, int], *,
                key_groups: Collection[int] | None = None) -> None:
        """Continue from what ``snapshot`` wrote (of one or several tasks; only ``key_groups``)."""
        self.operator_state.restore(files, key_groups=key_groups)
        for side in self.sides:
            side.reload()
        self._update_state_metrics()

    def close(self) -> None:
        self.operator_state.close()

    # -- matching --------------------------------------------------------------------------------

    def _match(self, side: int, columns: list[pa.Array], keys: list[pa.Array],
               khash: np.ndarray) -> tuple[np.ndarray, pa.Table | None, np.ndarray, np.ndarray]:
        """Pairs of the rows ``columns`` of input ``side`` with the other side's stored rows:
        (probe index, the stored rows, each one's multiplicity, each one's id), after keys and
        residual."""
        other = self.sides[1 - side]
        probe, stored, ids = other.lookup(khash)
        if stored is None:
            return probe, None, np.zeros(0, dtype=np.int64), ids
        keep = np.ones(len(probe), dtype=bool)
        probe_arr = pa.array(probe)
        for key, k in zip(keys, other.keys, strict=True):
            same = pc.equal(key.take(probe_arr), stored.column(k))
            keep &= pc.fill_null(same, False).to_numpy(zero_copy_only=False)
        if self.ttl_ms is not None:
            keep &= stored.column("_written").to_numpy() >= int(self.ctx.runtime.clock()) - self.ttl_ms
        if self.node.residual is not None and keep.any():
            if not keep.all():
                probe, stored, ids = probe[keep], stored.filter(pa.array(keep)), ids[keep]
                keep = np.ones(len(probe), dtype=bool)
                probe_arr = pa.array(probe)
            mine = [c.take(probe_arr) for c in columns]
            theirs = [_array(stored.column(i)) for i in range(other.width)]
            pairs = pa.RecordBatch.from_arrays(self._arrange(side, mine, theirs), schema=self._pair_schema)
            verdict = self.node.residual(pairs, self.ctx)
            keep &= pc.fill_null(verdict, False).to_numpy(zero_copy_only=False)
        if not keep.all():
            probe, stored, ids = probe[keep], stored.filter(pa.array(keep)), ids[keep]
        counts = stored.column("_count").to_numpy()
        if other.updating and len(probe):
            grouped = pa.table({"p": probe, "r": stored.column("_rhash"), "n": counts,
                                "i": np.arange(len(probe), dtype=np.int64)}).group_by(["p", "r"]).aggregate(
                [("n", "sum"), ("i", "min")])
            net = grouped.column("n_sum").to_numpy()
            alive = net > 0
            first = grouped.column("i_min").to_numpy()[alive]
            order = np.argsort(first, kind="stable")
            first, counts = first[order], net[alive][order]
            probe, stored, ids = probe[first], stored.take(pa.array(first)), ids[first]
        return probe, stored, counts, ids

    def _other_padding(self, side: int, probe: np.ndarray, stored: pa.Table, mult: np.ndarray, ids: np.ndarray,
                       sign: np.ndarray) -> tuple[list, list]:
        """NULL-padded rows of the other (preserved) side to retract or to emit again: those whose
        number of matches goes from 0 to more, or back to 0, with this batch. Each stored row
        (``ids``) is one such row, ``mult`` times."""
        other = self.sides[1 - side]
        ident = pa.table({"id": ids, "d": sign[probe], "m": mult, "i": np.arange(len(probe), dtype=np.int64)})
        touched = ident.group_by(["id"]).aggregate([("d", "sum"), ("m", "max"), ("i", "min")])
        rows = stored.take(touched.column("i_min"))
        delta = touched.column("d_sum").to_numpy()
        their_mult = touched.column("m_max").to_numpy()
        their_columns = [_array(rows.column(i)) for i in range(other.width)]
        their_keys = [their_columns[k] for k in other.keys]
        khash = rows.column("_khash").to_numpy()
        p, _, m, _ = self._match(1 - side, their_columns, their_keys, khash)
        before = np.bincount(p, weights=m, minlength=rows.num_rows) if len(p) else np.zeros(rows.num_rows)
        after = before + delta
        gone: list = []
        back: list = []
        for select, target, kind in (((before <= 0) & (after > 0), gone, -1), ((before > 0) & (after <= 0), back, 1)):
            which = np.flatnonzero(select)
            if len(which):
                picked = [c.take(which) for c in their_columns]
                target.append((self._arrange(1 - side, picked, self._nulls(side, len(which))),
                               kind * their_mult[which]))
        return gone, back

    # -- output ----------------------------------------------------------------------------------

    def _arrange(self, side: int, mine: list, theirs: list) -> list:
        return mine + theirs if side == 0 else theirs + mine

    def _nulls(self, side: int, n: int) -> list[pa.Array]:
        return [pa.nulls(n, t) for t in self.sides[side].schema.types]

    def _emit(self, parts: list[tuple[list[pa.Array], np.ndarray]]) -> list[pa.RecordBatch]:
        """One batch from (columns, signed multiplicity) parts: each row repeated |m| times, as
        ``+I`` if m > 0 and ``-D`` if m < 0."""
        parts = [(cols, m) for cols, m in parts if len(m)]
        if not parts:
            return []
        columns = [_as(pa.concat_arrays([_array(cols[i]) for cols, _ in parts]) if len(parts) > 1
                       else _array(parts[0][0][i]), f.type)
                   for i, f in enumerate(self._out_fields)]
        m = np.concatenate([m for _, m in parts]).astype(np.int64)
        magnitude = np.abs(m)
        if not np.all(magnitude == 1):
            index = np.repeat(np.arange(len(m), dtype=np.int64), magnitude)
            columns = [c.take(pa.array(index)) for c in columns]
            m = m[index]
        if self.updating:
            kinds = pa.array(np.where(m > 0, INSERT, DELETE).astype(object), pa.string())
            columns.append(kinds)
        elif (m < 0).any():
            raise AssertionError(f"{self._where}: an append-only join produced a retraction")
        batch = pa.RecordBatch.from_arrays(columns, schema=self.node.schema)
        return [batch] if batch.num_rows else []

    # -- state -----------------------------------------------------------------------------------

    def _times(self, side: _Side, columns: list[pa.Array]) -> np.ndarray | None:
        if side.time_column is None:
            return None
        col = columns[side.time_column]
        ms = pc.cast(pc.cast(col, pa.timestamp("ms", tz=col.type.tz)), pa.int64())
        # A NULL time can never satisfy the bound: such a row is dropped at the first watermark.
        return pc.fill_null(ms, -(2**62)).to_numpy(zero_copy_only=False)

    def _expire_ttl(self, now: int) -> None:
        for side in self.sides:
            side.expire(written_before=now - self.ttl_ms)

    def _update_state_metrics(self) -> None:
        self.metrics["state_rows"] = sum(s.rows() for s in self.sides)
        self.metrics["state_bytes"] = sum(s.table.memory_bytes() for s in self.sides)


def _net(table: pa.Table) -> pa.Table:
    """Equal rows (same key and row hash) as one, with their counts summed; rows at 0 dropped."""
    index = pa.array(np.arange(table.num_rows, dtype=np.int64))
    keyed = pa.table({"k": table.column("_khash"), "r": table.column("_rhash"), "n": table.column("_count"),
                      "w": table.column("_written"), "i": index})
    grouped = keyed.group_by(["k", "r"]).aggregate([("n", "sum"), ("w", "max"), ("i", "min")])
    net = grouped.column("n_sum").to_numpy()
    alive = net != 0
    first = grouped.column("i_min").to_numpy()[alive]
    rows = table.take(pa.array(first))
    rows = rows.set_column(rows.schema.get_field_index("_count"), "_count", pa.array(net[alive]))
    return rows.set_column(rows.schema.get_field_index("_written"), "_written",
                           grouped.column("w_max").filter(pa.array(alive)))


def _hashable(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_map(t))


def _all_valid(keys: list[pa.Array], n: int) -> np.ndarray:
    valid = np.ones(n, dtype=bool)
    for k in keys:
        if k.null_count:
            valid &= pc.is_valid(k).to_numpy(zero_copy_only=False)
    return valid


def _min(table: pa.Table, column: str) -> int:
    if table.num_rows == 0:
        return 0
    return int(table.column(column).to_numpy().min())


def _as(values: pa.Array, type_: pa.DataType) -> pa.Array:
    return values if values.type == type_ else pc.cast(values, type_)


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values
