"""Regular and interval joins: both sides kept in state, matched a whole batch at a time.

Each side's rows live in a ``KeyedRows`` store (``clink/runtime/operators/rows.py``) keyed by
the join key: table states ``left`` and ``right``, in runs indexed by sorted key hashes.

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

from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.operators.base import OperatorBase
from clink.runtime.operators.common import all_valid, epoch_ms, max_parallelism, open_state, updating_input
from clink.runtime.operators.rows import KeyedRows, net_pairs, plain_array
from clink.runtime.plan import APPEND_ONLY, DELETE, INSERT, ROWKIND_COLUMN, ChangelogMode
from clink.runtime.state.backend import (KEY_GROUP, IncompatibleState, OperatorState, StateBackend,
                                         TableStateDescriptor)
from clink.runtime.state.keygroups import group_of_hash, hash_columns

if TYPE_CHECKING:
    from clink.runtime import plan
    from clink.runtime.context import TaskContext


def _hash_is_key(keys: list[pa.Array], other: KeyedRows) -> bool:
    """Whether equal key hashes mean equal keys, so that candidate pairs need no comparison: one
    signed integer key on both sides. Its hash is a bijection of the value widened to 64 bits
    (``keygroups._hash_integers``), and rows with a NULL key are neither stored nor probed."""
    return (len(keys) == 1 and pa.types.is_signed_integer(keys[0].type)
            and pa.types.is_signed_integer(other.schema.field(other.keys[0]).type))


class JoinOperator(OperatorBase):
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
                 ttl_ms: int | None = None, left_mode: ChangelogMode = APPEND_ONLY,
                 right_mode: ChangelogMode = APPEND_ONLY) -> None:
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
        self.sides = (KeyedRows("left", left_schema, node.left_keys, self._max_parallelism,
                                updating=updating_input(left_mode, left_schema, self._where, "left input")),
                      KeyedRows("right", right_schema, node.right_keys, self._max_parallelism,
                                updating=updating_input(right_mode, right_schema, self._where, "right input")))
        left, right = self.sides
        for a, b in zip(node.left_keys, node.right_keys, strict=True):
            if left.schema.field(a).type != right.schema.field(b).type:
                raise ValueError(f"{self._where}: key columns {a} and {b} have different types "
                                 f"({left.schema.field(a).type}, {right.schema.field(b).type})")
        self.updating = node.changelog.updating
        width = left.width + right.width
        if len(node.schema) != width + self.updating:
            raise ValueError(f"{self._where}: the output schema must be the {left.width} left and {right.width} "
                             f"right columns{' and the row kind' if self.updating else ''}; got <{node.schema}>")
        self._out_fields = list(node.schema)[:width]
        self._pair_schema = pa.schema([pa.field(f"c{i}", f.type) for i, f in enumerate(self._out_fields)])
        #: Where each side's columns start in a pair, and the pair columns the residual reads.
        self._offset = (0, left.width)
        self._residual_reads = None if node.residual_reads is None else frozenset(node.residual_reads)
        self.preserves = (node.kind in ("left", "full"), node.kind in ("right", "full"))
        revises = left.updating or (not node.lookup and (right.updating or any(self.preserves)))
        if not self.updating and revises:
            raise ValueError(f"{self._where}: an outer join or an updating input makes the join updating: "
                             f"its schema must end with {ROWKIND_COLUMN!r}")
        if node.interval is not None:
            left_time, right_time, lower, upper = node.interval
            left_end, right_end = node.interval_ends or (left_time, right_time)
            # left.t + lower <= right.right_end and right.t <= left.left_end + upper, where a row
            # arriving on time has its t after the watermark: a left row can match no such right
            # row once the watermark passes left.left_end + upper; a right row no such left row
            # once it passes right.right_end - lower. (The ends are the time columns themselves
            # in a plain interval join.)
            left.time_column, left.expire_offset = left_end, -upper
            right.time_column, right.expire_offset = right_end, lower
        self.ttl_ms = ttl_ms
        self.operator_id = operator_id or f"join-{node.id}"
        self.descriptors = [left.descriptor, right.descriptor]
        #: A lookup join: left batches that arrived before the right side was complete.
        self.right_done = False
        if node.lookup:
            if node.kind not in ("inner", "left"):
                raise ValueError(f"{self._where}: a lookup join is inner or left, not {node.kind}")
            waiting = [pa.field(f"c{i}", t) for i, t in enumerate(left_schema.types)]
            self.descriptors.append(TableStateDescriptor("waiting", pa.schema([*waiting,
                                                                                 pa.field(KEY_GROUP, pa.int32())])))
        #: Outer interval joins: per preserved side, the stored rows that have met a match (by
        #: row hash; with their time, to expire with them, and key group, to rescale). Whether a
        #: match is a row's first cannot be read from the other side's rows alone, since those
        #: it met may have expired while it stays. Inputs of interval joins are append-only.
        self._met: list[_Met | None] = [None, None]
        if node.interval is not None and not any(side.updating for side in self.sides):
            for s, side in enumerate(self.sides):
                if self.preserves[s]:
                    self._met[s] = _Met()
                    self.descriptors.append(TableStateDescriptor(f"{side.name}_met", _Met.SCHEMA))
        #: The input every subtask receives whole (``node.broadcast``), or None.
        self.broadcast = node.broadcast
        #: Per side, at most one row per key ever comes (``node.unique``): the other side's rows
        #: are kept only until it comes. Only where every pair forms in one place, once: an inner
        #: join of append-only inputs, hashed on both sides.
        plain = (node.kind == "inner" and node.broadcast is None and not node.lookup and node.temporal is None
                 and not left.updating and not right.updating)
        self.unique = node.unique if plain else (False, False)
        if self.broadcast is not None and (node.kind != "inner" or node.interval is None or node.lookup):
            raise ValueError(f"{self._where}: only an inner interval join can take an input broadcast")
        self.operator_state: OperatorState = open_state(backend, self._max_parallelism, self.operator_id,
                                                        self.descriptors, self._where)
        for side in self.sides:
            side.table = self.operator_state.table_state(side.name)
        self._left_schema = left_schema
        self._waiting = self.operator_state.table_state("waiting") if node.lookup else None
        #: A lookup join whose right table is read by key (a connector with ``create_lookup``):
        #: called with a table of right-side key columns, returns the right input's rows that have
        #: those keys. Set by the executor; the right input then ends at once, holding nothing.
        self.lookup_rows: Callable[[pa.Table], pa.RecordBatch] | None = None
        for side, met in zip(self.sides, self._met, strict=True):
            if met is not None:
                met.state = self.operator_state.table_state(f"{side.name}_met")

    # -- public interface ----------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, side: int) -> list[pa.RecordBatch]:
        """Match ``batch`` (of input ``side``: 0 left, 1 right) against the other side's stored
        rows, store it, and return what the join emits."""
        if batch.num_rows == 0:
            return []
        if self.node.lookup and side == 0 and not self.right_done:
            self._wait(batch)
            return []
        if self.lookup_rows is not None and side == 0:
            return self._process_looked_up(batch)
        this = self.sides[side]
        columns, sign = this.split(batch)
        n = batch.num_rows
        now = int(self.ctx.runtime.clock())
        if self.ttl_ms is not None:
            self._expire_ttl(now)
        keys = [columns[k] for k in this.keys]
        valid = all_valid(keys, n)
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
            theirs = [plain_array(stored.column(i)) for i in range(self.sides[1 - side].width)]
            out.append((self._arrange(side, mine, theirs), sign[probe] * mult))
        # 2. this side's rows without a match, padded (outer join preserving this side)
        if self.preserves[side]:
            matches = np.bincount(probe, weights=mult, minlength=n) if len(probe) else np.zeros(n)
            alone = np.flatnonzero(matches <= 0)
            if self._met[side] is not None:
                # An interval join: a row that meets a match on arrival is never alone, even once
                # the rows it met expire before it does (no padded row was emitted to retract).
                self._remember_met(side, columns, np.flatnonzero(matches > 0), khash)
            if len(alone):
                mine = [c.take(alone) for c in columns]
                out.append((self._arrange(side, mine, self._nulls(1 - side, len(alone))), sign[alone]))
        # 3. the other side's preserved rows that gain their first or lose their last match
        if self.preserves[1 - side] and len(probe):
            gone, back = self._other_padding(side, probe, stored, mult, ids, sign)
        # 4. store this batch (a lookup join keeps only its right side)
        if self.unique[side] and len(ids):
            # The one row of its key on this side: the other side's rows it met meet no other.
            self.sides[1 - side].kill(np.unique(ids))
        if self.unique[1 - side] and 2 * len(probe) >= n:
            # The other side's one row of its key has come: a row that met it meets no other, and
            # is left out where that spares storing most of the batch (else the batch is stored
            # whole, without a copy: the rows that met theirs only wait to expire).
            kept = np.ones(n, dtype=bool)
            if probe_rows is not None:
                kept[:] = False
                kept[probe_rows] = True
            kept[probe] = False
            probe_rows = np.flatnonzero(kept)
        if self.node.lookup and side == 0:
            pass
        elif probe_rows is None:
            this.store(columns, sign, khash, now, self._times(this, columns))
        elif len(probe_rows):
            taken = [c.take(probe_rows) for c in columns]
            this.store(taken, sign[probe_rows], khash[probe_rows], now, self._times(this, taken))
        self._update_state_metrics()
        return self._emit(gone + out + back)

    def _process_looked_up(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """Match a left batch against the right rows of its keys, asked for once for the batch.

        Nothing is stored: the table is the state. Pairs come from an Arrow hash join of the key
        columns (NULL keys never match), then the residual; a LEFT join pads the rest."""
        left, right = self.sides
        columns, sign = left.split(batch)
        n = batch.num_rows
        right_names = [right.schema.names[k] for k in right.keys]
        keys = pa.table([columns[k] for k in left.keys], names=right_names)
        rows = self.lookup_rows(keys)
        names = [f"__k{i}" for i in range(len(right.keys))]
        probe_side = pa.table([*keys.columns, pa.array(np.arange(n, dtype=np.int64))], names=[*names, "__l"])
        found = pa.table([*(rows.column(k) for k in right.keys), pa.array(np.arange(rows.num_rows, dtype=np.int64))],
                         names=[*names, "__r"])
        pairs = probe_side.join(found, keys=names, join_type="inner", use_threads=False)
        probe = pairs.column("__l").to_numpy()
        theirs_at = pairs.column("__r").combine_chunks()
        mine = [c.take(pa.array(probe)) for c in columns]
        theirs = [plain_array(rows.column(i).take(theirs_at)) for i in range(right.width)]
        if self.node.residual is not None and len(probe):
            paired = pa.RecordBatch.from_arrays(self._arrange(0, mine, theirs), schema=self._pair_schema)
            keep = pc.fill_null(self.node.residual(paired, self.ctx), False)
            keep_np = keep.to_numpy(zero_copy_only=False)
            probe = probe[keep_np]
            mine = [c.filter(keep) for c in mine]
            theirs = [c.filter(keep) for c in theirs]
        out = [(self._arrange(0, mine, theirs), sign[probe])]
        if self.preserves[0]:
            alone = np.flatnonzero(np.bincount(probe, minlength=n) == 0)
            if len(alone):
                out.append(([c.take(pa.array(alone)) for c in columns] + self._nulls(1, len(alone)), sign[alone]))
        return self._emit(out)

    def end_of_input(self, side: int) -> list[pa.RecordBatch]:
        """Input ``side`` has ended. For a lookup join, the right side is now complete: the left
        rows that waited for it are matched."""
        if not self.node.lookup or side != 1 or self.right_done:
            return []
        self.right_done = True
        waiting = self._waiting.take(0)
        if waiting is None:
            return []
        columns = [plain_array(waiting.column(i)) for i in range(len(self._left_schema))]
        return self.process(pa.RecordBatch.from_arrays(columns, schema=self._left_schema), 0)

    def _wait(self, batch: pa.RecordBatch) -> None:
        keys = [batch.column(k) for k in self.sides[0].keys]
        groups = group_of_hash(hash_columns(keys, batch.num_rows), self._max_parallelism)
        names = [f"c{i}" for i in range(batch.num_columns)]
        self._waiting.add(0, pa.Table.from_arrays([*batch.columns, pa.array(groups)], names=[*names, KEY_GROUP]))
        self._update_state_metrics()

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        """Drop the rows of an interval join that no later row can match; emit nothing."""
        for side, met in zip(self.sides, self._met, strict=True):
            if side.time_column is not None and side.runs:
                side.expire(time_before=watermark + side.expire_offset)
            if met is not None:
                met.expire(watermark + side.expire_offset)
        self._update_state_metrics()
        return []

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, int]]:
        """Commit both sides' runs as of checkpoint ``checkpoint_id`` and write them to files."""
        for met in self._met:
            if met is not None:
                met.save(self._max_parallelism)
        self.operator_state.commit(checkpoint_id)
        files = self.operator_state.snapshot(directory)
        if self.broadcast is not None:
            files.append(self._write_replica(Path(directory)))
        return files, {"left_rows": self.sides[0].rows(), "right_rows": self.sides[1].rows(),
                       "right_done": int(self.right_done)}

    def _write_replica(self, directory: Path) -> Path:
        """This subtask's copy of the broadcast input, in a file of its own (``*.replica.arrow``).

        Every subtask holds every row of that input it has not yet dropped: the copies differ
        only in rows the watermark has passed, which a subtask whose watermark lags keeps longer.
        A restore takes the largest copy (it holds every other one) for every subtask, whereas
        each row of the other input is in exactly one subtask's state and goes by key group."""
        table = self.sides[self.broadcast].stored()
        path = directory / f"{quote(self.operator_id, safe='-_')}.replica.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        return path

    def restore(self, files: list[Path], meta: dict[str, int], *,
                key_groups: Collection[int] | None = None) -> None:
        """Continue from what ``snapshot`` wrote (of one or several tasks; only ``key_groups``)."""
        replicas = [f for f in files if f.name.endswith(".replica.arrow")]
        if self.broadcast is not None and not replicas:
            raise IncompatibleState("the checkpoint holds no copy of the broadcast input")
        self.operator_state.restore([f for f in files if f not in replicas], key_groups=key_groups)
        for side in self.sides:
            side.reload()
        if self.broadcast is not None:
            # The rows of the broadcast input in the states restored above are a mix of copies,
            # cut by key groups: every subtask takes the largest whole copy instead.
            copies = [pa.ipc.open_file(pa.memory_map(str(f))).read_all() for f in replicas]
            largest = max(copies, key=lambda t: t.num_rows)
            self.sides[self.broadcast].replace(largest.cast(self.sides[self.broadcast].state_schema))
        for met in self._met:
            if met is not None:
                met.load()
        self.right_done = bool(meta.get("right_done", 0))
        self._update_state_metrics()

    def close(self) -> None:
        self.operator_state.close()
        if self.lookup_rows is not None and hasattr(self.lookup_rows, "close"):
            self.lookup_rows.close()

    # -- matching --------------------------------------------------------------------------------

    def _match(self, side: int, columns: list[pa.Array], keys: list[pa.Array],
               khash: np.ndarray) -> tuple[np.ndarray, pa.Table | None, np.ndarray, np.ndarray]:
        """Pairs of the rows ``columns`` of input ``side`` with the other side's stored rows:
        (probe index, the stored rows, each one's multiplicity, each one's id), after keys and
        residual."""
        other = self.sides[1 - side]
        # The pairs as the runs give them, their stored rows left in the runs: the columns a check
        # reads are taken for every pair; whole rows only for the pairs kept, once, in probe order.
        probe, found, ids, order = other.find(khash)
        if found is None:
            return probe, None, np.zeros(0, dtype=np.int64), ids
        keep = np.ones(len(probe), dtype=bool)
        probe_arr = pa.array(probe)
        if not _hash_is_key(keys, other):
            stored_keys = found.take(columns=[other.state_schema.names[k] for k in other.keys])
            for j, key in enumerate(keys):
                # One probing row (a window's maximum against the window's rows): against its value.
                same = pc.equal(key[0] if len(key) == 1 else key.take(probe_arr), stored_keys.column(j))
                keep &= pc.fill_null(same, False).to_numpy(zero_copy_only=False)
        if self.ttl_ms is not None:
            written = found.take(columns=["_written"]).column(0).to_numpy()
            keep &= written >= int(self.ctx.runtime.clock()) - self.ttl_ms
        if self.node.residual is not None and keep.any():
            # The residual sees the candidate pairs, in probe order; only the columns it reads
            # are gathered for it (the others are NULL).
            chosen = np.flatnonzero(keep) if order is None else order[keep[order]]
            mine_picks = pa.array(probe[chosen])
            reads = self._residual_reads
            n = len(chosen)
            mine = [c.take(mine_picks) if reads is None or (j + self._offset[side]) in reads
                    else pa.nulls(n, c.type) for j, c in enumerate(columns)]
            names = other.state_schema.names
            read = [i for i in range(other.width) if reads is None or (i + self._offset[1 - side]) in reads]
            taken = dict(zip(read, found.take(chosen, [names[i] for i in read]).columns, strict=True)) if read else {}
            theirs = [plain_array(taken[i]) if i in taken else pa.nulls(n, other.state_schema.field(i).type)
                      for i in range(other.width)]
            pairs = pa.RecordBatch.from_arrays(self._arrange(side, mine, theirs), schema=self._pair_schema)
            verdict = pc.fill_null(self.node.residual(pairs, self.ctx), False).to_numpy(zero_copy_only=False)
            keep = np.zeros(len(probe), dtype=bool)
            keep[chosen[verdict]] = True
        if order is None and keep.all():
            stored = found.take()
        else:
            chosen = np.flatnonzero(keep) if order is None else order[keep[order]]
            probe, stored, ids = probe[chosen], found.take(chosen), ids[chosen]
        if other.retractions and len(probe):
            return net_pairs(probe, stored, ids)
        counts = stored.column("_count").to_numpy()
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
        their_columns = [plain_array(rows.column(i)) for i in range(other.width)]
        their_keys = [their_columns[k] for k in other.keys]
        khash = rows.column("_khash").to_numpy()
        p, _, m, _ = self._match(1 - side, their_columns, their_keys, khash)
        before = np.bincount(p, weights=m, minlength=rows.num_rows) if len(p) else np.zeros(rows.num_rows)
        met = self._met[1 - side]
        if met is not None:
            # Rows that met a match before, whose matches have expired since, are not alone.
            rhash = hash_columns([their_columns[i] for i in other.hashable], rows.num_rows)
            seen = met.has(rhash)
            before = np.where(seen, np.maximum(before, 1), before)
            first = ~seen & (before + delta > 0)
            met.add(rhash[first], rows.column("_time").to_numpy()[first], khash[first])
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
        columns = [_as(pa.concat_arrays([plain_array(cols[i]) for cols, _ in parts]) if len(parts) > 1
                       else plain_array(parts[0][0][i]), f.type)
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

    def _remember_met(self, side: int, columns: list[pa.Array], rows: np.ndarray, khash: np.ndarray) -> None:
        """Record rows ``rows`` of an arriving batch of preserved ``side`` as having met a match."""
        if not len(rows):
            return
        this, met = self.sides[side], self._met[side]
        taken = [c.take(pa.array(rows)) for c in columns]
        rhash = hash_columns([taken[i] for i in this.hashable], len(rows))
        new = ~met.has(rhash)
        met.add(rhash[new], self._times(this, taken)[new], khash[rows][new])

    def _times(self, side: KeyedRows, columns: list[pa.Array]) -> np.ndarray | None:
        # A NULL time can never satisfy the bound: such a row is dropped at the first watermark.
        return epoch_ms(columns[side.time_column]) if side.time_column is not None else None

    def _expire_ttl(self, now: int) -> None:
        for side in self.sides:
            side.expire(written_before=now - self.ttl_ms)

    def _update_state_metrics(self) -> None:
        waiting = [self._waiting] if self._waiting is not None else []
        self.metrics["state_rows"] = sum(s.rows() for s in self.sides) + sum(w.num_rows() for w in waiting)
        self.metrics["state_bytes"] = (sum(s.table.memory_bytes() for s in self.sides)
                                       + sum(w.memory_bytes() for w in waiting))



def _as(values: pa.Array, type_: pa.DataType) -> pa.Array:
    return values if values.type == type_ else pc.cast(values, type_)


class _Met:
    """The row hashes of an outer interval join's preserved rows that have met a match, in
    memory (a few bytes a row), written to the operator's state at each checkpoint."""

    SCHEMA = pa.schema([pa.field("rhash", pa.uint64()), pa.field("time", pa.int64()),
                        pa.field("khash", pa.uint64()), pa.field(KEY_GROUP, pa.int32())])

    def __init__(self) -> None:
        self.state = None
        self.rhash = np.zeros(0, dtype=np.uint64)
        self.time = np.zeros(0, dtype=np.int64)
        self.khash = np.zeros(0, dtype=np.uint64)

    def has(self, rhash: np.ndarray) -> np.ndarray:
        return np.isin(rhash, self.rhash) if len(self.rhash) else np.zeros(len(rhash), dtype=bool)

    def add(self, rhash: np.ndarray, time: np.ndarray, khash: np.ndarray) -> None:
        if len(rhash):
            self.rhash = np.concatenate([self.rhash, rhash.astype(np.uint64)])
            self.time = np.concatenate([self.time, time.astype(np.int64)])
            self.khash = np.concatenate([self.khash, khash.astype(np.uint64)])

    def expire(self, time_before: int) -> None:
        """Forget rows the watermark has passed, as their side's store does."""
        keep = self.time >= time_before
        if not keep.all():
            self.rhash, self.time, self.khash = self.rhash[keep], self.time[keep], self.khash[keep]

    def save(self, max_parallelism: int) -> None:
        groups = group_of_hash(self.khash, max_parallelism) if len(self.khash) else np.zeros(0, dtype=np.int32)
        self.state.replace(0, pa.table([pa.array(self.rhash), pa.array(self.time), pa.array(self.khash),
                                        pa.array(groups, pa.int32())], schema=self.SCHEMA))

    def load(self) -> None:
        table = self.state.get(0)
        if table is None:
            table = self.SCHEMA.empty_table()
        self.rhash = table.column("rhash").to_numpy()
        self.time = table.column("time").to_numpy()
        self.khash = table.column("khash").to_numpy()
