"""Rows kept per key in table state, found a whole batch at a time: the store of joins and ranks.

A ``KeyedRows`` holds one input's rows in one table state as *runs*: immutable tables, one per
namespace, in arrival order, each indexed in memory by the hashes of its rows' keys
(``_khash``), sorted, with the row each belongs to — an index made when the run is first
searched, so that a store that is rarely probed does not sort runs it merges away. ``lookup``
finds the stored rows of a whole batch of key hashes with one ``numpy.searchsorted`` per run. ``store`` adds a batch as a new run;
the newest run merges into the one before it (in its lane) while that one is at most twice its size, so N rows
make about log2(N / batch) runs. A merge concatenates the two tables without copying rows and
merges the two sorted indexes in linear time (a stable sort of two sorted runs) when both have
one; a store that
takes retractions nets equal rows instead, rewriting them, and a run of many chunks is copied
into one. After a restore all rows form one run, indexed again from ``_khash``.

Columns of a run: the input's columns as ``c0`` … ``cN``, then

- ``_khash`` (uint64): hash of the key columns;
- ``_rhash`` (uint64): hash of the whole row (columns of nested types left out), which tells
  which stored row a retraction removes (0 in a store that takes no retractions);
- ``_count`` (int64): +1 for a row added, -1 for one retracted; a merge nets the counts of equal
  rows and drops those that reach 0, so retracted rows leave the state;
- ``_written`` (int64): when the row was stored (the context clock, ms), for state TTL;
- ``_time`` (int64): the row's event time in ms, where the owner drops rows by watermark;
- ``_key_group`` (int32): the key group of the row's key, so that a rescaled restore splits the
  rows by key like every other keyed state.

``expire`` drops rows by ``_time`` or ``_written``, rewriting a run only when a quarter of it
goes, so the work stays proportional to what is dropped; when the rows to drop lead the run (rows
arrive mostly in time order), the rest is kept as a slice, without a copy. Rows with event times
go into *lanes*: a batch joins the lane whose rows it follows in time, and runs merge only within
their lane, so that the rows of several channels, which arrive interleaved in time, still make
runs in time order. A run that has to be rewritten is stored in time order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.records import record
from clink.runtime import compute as pc
from clink.runtime.operators.base import OperatorBase
from clink.runtime.plan import DELETE, UPDATE_BEFORE
from clink.runtime.state.backend import KEY_GROUP, TableState, TableStateDescriptor
from clink.runtime.state.keygroups import group_of_hash, hash_columns

if TYPE_CHECKING:
    from collections.abc import Collection
    from pathlib import Path

    from clink.runtime.context import TaskContext
    from clink.runtime.state.backend import OperatorState

__all__ = ["Found", "KeyedRows", "NumberedRowsOperator", "net_pairs", "plain_array"]

_META = ("_khash", "_rhash", "_count", "_written", "_time")
_META_TYPES = (pa.uint64(), pa.uint64(), pa.int64(), pa.int64(), pa.int64())


@record(frozen=False)
class _Run:
    """One table of a store: its namespace, the key hash of each row (``raw``, in table order)
    until it is first searched, and from then on those hashes sorted (``khash``) with the row of
    each (``order``, int32), ``raw`` dropped (``_hashes`` gives it back), so that an indexed row
    costs 12 bytes of memory, not 24 (the rows of a disk-backed store are not in memory at all);
    its rows (``size``); the event time and write time below which ``expire`` looks at it again
    (its oldest, or once it was found not worth a rewrite, the quarter-th smallest)."""

    namespace: int
    raw: np.ndarray | None
    khash: np.ndarray | None
    order: np.ndarray | None
    min_time: int
    min_written: int
    #: The lane of the run, and its place in it (smaller: older rows).
    lane: int = 0
    seq: int = 0
    #: Rows removed in place (``KeyedRows.kill``), by table row; None: none yet.
    dead: np.ndarray | None = None
    n_dead: int = 0
    #: Rows stored with count -1 (retractions waiting for a merge to net them).
    negatives: int = 0
    size: int = 0

    def index(self) -> None:
        """Sort the run's key hashes (its first search) and drop them in table order."""
        if self.order is None:
            assert self.raw is not None
            order = np.argsort(self.raw, kind="stable")
            self.khash = self.raw[order]
            self.order = order.astype(np.int32)
            self.raw = None


#: Lookups with at most this many probes scan a run that is not indexed yet instead of sorting it.
_SCAN_PROBES = 8
#: A run whose tables have more chunks than this is copied into one (reads slow down with many).
_MAX_CHUNKS = 256
#: At most this many lanes of runs in time order (see ``KeyedRows.store``).
_LANES = 4


class KeyedRows:
    """The stored rows of one input, by key (see the module docstring)."""

    def __init__(self, name: str, schema: pa.Schema, keys: tuple[int, ...], max_parallelism: int, *,
                 retractions: bool | None = None, identity: tuple[int, ...] | None = None,
                 updating: bool = False) -> None:
        self.name = name
        #: The input is updating: its batches end with the row kind.
        self.updating = updating
        self.schema = pa.schema(list(schema)[: len(schema) - self.updating])
        #: Rows may be retracted (stored with -1): rows are hashed whole, and merges net them.
        self.retractions = self.updating if retractions is None else retractions
        self.width = len(self.schema)
        self.keys = keys
        for k in keys:
            if not 0 <= k < self.width:
                raise ValueError(f"join key column {k} is not a column of the {name} input (it has {self.width})")
        self.max_parallelism = max_parallelism
        #: The columns that tell stored rows apart (``_rhash``): all hashable ones, or fewer when
        #: the owner knows a unique one (a Top-N's arrival number).
        self.hashable = list(identity) if identity is not None else [
            i for i, t in enumerate(self.schema.types) if _hashable(t)]
        fields = [pa.field(f"c{i}", t) for i, t in enumerate(self.schema.types)]
        fields += [pa.field(n, t) for n, t in zip(_META, _META_TYPES, strict=True)]
        fields.append(pa.field(KEY_GROUP, pa.int32()))
        self.descriptor = TableStateDescriptor(name, pa.schema(fields))
        self.state_schema = self.descriptor.schema
        self.table: TableState
        self.runs: list[_Run] = []
        self.next_namespace = 0
        #: Per lane, the largest event time stored in it (see ``store``).
        self._lane_ends: dict[int, int] = {}
        self._run_seq = 0
        #: Interval joins: rows with ``_time`` below ``watermark + expire_offset`` can match no more.
        self.time_column: int | None = None
        self.expire_offset = 0
        #: The most rows of a run (``_run_rows``): False until known, None for no bound.
        self._cap: int | None | bool = False

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
        return self.table.num_rows() - sum(run.n_dead for run in self.runs)

    # -- reading

    def lookup(self, khash: np.ndarray) -> tuple[np.ndarray, pa.Table | None, np.ndarray]:
        """Every stored row whose key hash equals a probe's: (probe index per pair, the rows, an
        id per stored row: equal ids are the same stored row, and ``kill`` takes them)."""
        probe, stored, found, order = self.lookup_unordered(khash)
        if order is not None:
            probe, stored, found = probe[order], stored.take(pa.array(order)), found[order]
        return probe, stored, found

    def lookup_unordered(self, khash: np.ndarray) -> tuple[np.ndarray, pa.Table | None, np.ndarray,
                                                           np.ndarray | None]:
        """``lookup``'s pairs as the runs give them, and the order that puts them in the order of
        the probes (None: they are in it): a caller that drops pairs first takes the rows once."""
        probe, found, ids, order = self.find(khash)
        return probe, None if found is None else found.take(), ids, order

    def find(self, khash: np.ndarray) -> tuple[np.ndarray, Found | None, np.ndarray, np.ndarray | None]:
        """``lookup_unordered``, with the stored rows left in their runs (:class:`Found`): a caller
        that reads a few columns of every pair before it knows which pairs it keeps copies the
        kept rows' columns once."""
        probes: list[np.ndarray] = []
        parts: list[tuple[pa.Table, np.ndarray]] = []
        ids: list[np.ndarray] = []
        sorted_probes = probe_order = None
        for run in self.runs:
            if run.order is None and len(khash) <= _SCAN_PROBES:
                # A few probes into a run never searched: compare every row rather than index it
                # (the bids of a join with a per-window maximum are probed once per window).
                hits = [np.flatnonzero(run.raw == k) for k in khash]
                total = sum(len(h) for h in hits)
                if total == 0:
                    continue
                rows = np.concatenate(hits)
                probe = np.repeat(np.arange(len(khash), dtype=np.int64), [len(h) for h in hits])
                if run.n_dead:
                    alive = ~run.dead[rows]
                    rows, probe = rows[alive], probe[alive]
                    if not len(rows):
                        continue
                probes.append(probe)
                parts.append((self.table.get(run.namespace), rows))
                ids.append(rows + (run.namespace << 32))
                continue
            if run.order is None:
                # Indexed when first searched by many probes: a side that is rarely probed never
                # pays for sorting runs it merges away.
                run.index()
            if sorted_probes is None:
                # Probes in ascending order search faster (each search starts where the last ended).
                probe_order = np.argsort(khash, kind="stable") if len(khash) > _SCAN_PROBES else None
                sorted_probes = khash if probe_order is None else khash[probe_order]
            lo = np.searchsorted(run.khash, sorted_probes, side="left")
            # Most probes find nothing: only those that do search for the end of their keys.
            found = run.khash[np.minimum(lo, len(run.khash) - 1)] == sorted_probes
            hi = lo.copy()
            if found.any():
                hi[found] = np.searchsorted(run.khash, sorted_probes[found], side="right")
            if probe_order is not None:
                lo[probe_order], hi[probe_order] = lo.copy(), hi.copy()
            lengths = hi - lo
            total = int(lengths.sum())
            if total == 0:
                continue
            probe = np.repeat(np.arange(len(khash), dtype=np.int64), lengths)
            starts = np.cumsum(lengths) - lengths
            positions = np.arange(total, dtype=np.int64) - np.repeat(starts - lo, lengths)
            rows = run.order[positions].astype(np.int64)
            if run.n_dead:
                alive = ~run.dead[rows]
                rows, probe = rows[alive], probe[alive]
                if not len(rows):
                    continue
            parts.append((self.table.get(run.namespace), rows))
            probes.append(probe)
            ids.append(rows + (run.namespace << 32))
        if not parts:
            return np.zeros(0, dtype=np.int64), None, np.zeros(0, dtype=np.int64), None
        if len(parts) == 1:
            return probes[0], Found(parts), ids[0], None
        probe, stored, row_ids = np.concatenate(probes), Found(parts), np.concatenate(ids)
        order = None
        if (probe[1:] < probe[:-1]).any():
            # Pairs in the order of the probes (each probe's in the order of the runs), as if the
            # probes had come one at a time: what follows (a Top-N or a ROWS frame ordering peers
            # by arrival) sees the order of the input.
            order = np.argsort(probe, kind="stable")
        return probe, stored, row_ids, order

    # -- writing

    def store(self, columns: list[pa.Array], sign: np.ndarray, khash: np.ndarray, now: int,
              times: np.ndarray | None) -> None:
        """Add rows (with their signs) as a new run, then merge runs that have grown alike."""
        n = len(sign)
        if n == 0:
            return
        # Only retractions need to know which stored row they remove.
        rhash = hash_columns([columns[i] for i in self.hashable], n) if self.retractions else np.zeros(n, np.uint64)
        time_values = times if times is not None else np.zeros(n, dtype=np.int64)
        arrays = [*columns, pa.array(khash), pa.array(rhash), pa.array(sign), pa.array(np.full(n, now, dtype=np.int64)),
                  pa.array(time_values), pa.array(group_of_hash(khash, self.max_parallelism))]
        lane = self._lane_for(times) if times is not None and not self.retractions else 0
        table = pa.Table.from_arrays(arrays, schema=self.state_schema)
        self._add_run(table, khash, lane=lane, least=(int(time_values.min()), now), negatives=int((sign < 0).sum()))
        cap = self._run_rows(table)
        while True:
            mine = sorted((r for r in self.runs if r.lane == lane), key=lambda r: r.seq)
            if len(mine) < 2 or mine[-2].size > 2 * mine[-1].size:
                break
            if cap is not None and mine[-2].size + mine[-1].size > cap and not (
                    self.retractions and (mine[-2].negatives or mine[-1].negatives)):
                break  # a run at the table state's bucket size is merged no more, but to net
            self._merge(mine[-2], mine[-1])

    def _run_rows(self, stored: pa.Table | None = None) -> int | None:
        """The most rows a run may reach by merging, or None for no bound: where the table state
        reads a bucket whole from disk (``TableState.bucket_bytes``), runs stop growing at that
        many bytes (the bytes per row of ``stored``, a batch just stored, or else of the first run,
        tell how many rows that is), so that neither a
        merge nor a lookup ever holds more than a few such runs in memory. Runs that hold
        retractions (rows of count -1) still merge past it: a merge is what nets a retraction
        with the row it removes."""
        if self._cap is False:
            budget = self.table.bucket_bytes
            if budget is None or not self.runs:
                self._cap = None if budget is None else False
                return None
            first = stored if stored is not None else self.table.get(self.runs[0].namespace)
            per_row = max(1, first.nbytes // max(1, first.num_rows))
            self._cap = max(1, budget // per_row)
        return self._cap

    def _lane_for(self, times: np.ndarray) -> int:
        """The lane a batch with these event times joins: the one whose rows it follows in time
        with the least gap. Rows of several channels (an exchange from several subtasks) arrive
        interleaved in time; each channel's rows keep to one lane, in time order, so that runs
        merged in a lane stay in time order and ``expire`` drops a prefix of them, a slice."""
        first = int(times.min())
        fits = [(end, lane) for lane, end in self._lane_ends.items() if end <= first]
        if fits:
            lane = max(fits)[1]
        elif len(self._lane_ends) < _LANES:
            lane = len(self._lane_ends)
        else:  # out of order everywhere: the lane that reaches furthest
            lane = max((end, lane) for lane, end in self._lane_ends.items())[1]
        self._lane_ends[lane] = max(self._lane_ends.get(lane, first), int(times.max()))
        return lane

    def store_rows(self, table: pa.Table, rows: np.ndarray | None, sign: int, now: int,
                   times: np.ndarray | None = None) -> None:
        """Store rows ``rows`` of ``table`` (all of them if None; the store's columns first, and
        ``_khash``), each with count ``sign`` (and ``_time`` from ``times``, one per row stored)."""
        if rows is not None and not len(rows) or not table.num_rows:
            return
        taken = table if rows is None else table.take(pa.array(rows))
        self.store([plain_array(taken.column(i)) for i in range(self.width)], np.full(taken.num_rows, sign, dtype=np.int64),
                   taken.column("_khash").to_numpy(), now, times)

    def kill(self, ids: np.ndarray) -> None:
        """Remove stored rows in place, by the ids ``lookup`` gave them: marked dead in their run
        (lookups no longer find them), and left out when the run is next rewritten. A run is
        rewritten once half of it is dead, so a store whose rows are replaced (a Top-N's) holds
        at most about twice its live rows, and no row is written a second time to remove it."""
        if not len(ids):
            return
        namespaces = ids >> 32
        rows = ids & 0xFFFFFFFF
        by_namespace = {run.namespace: run for run in self.runs}
        full = []
        for namespace in np.unique(namespaces).tolist():
            run = by_namespace[namespace]
            hit = rows[namespaces == namespace]
            if run.dead is None:
                run.dead = np.zeros(run.size, dtype=bool)
            run.n_dead += int(np.count_nonzero(~run.dead[hit]))
            run.dead[hit] = True
            if run.n_dead * 2 >= run.size:
                full.append(run)
        for run in full:
            self._compact(run)

    def settle(self) -> None:
        """Rewrite every run that holds rows removed in place, so that the table state holds the
        live rows only: before a snapshot, and before the state is read as a whole."""
        for run in [r for r in self.runs if r.n_dead]:
            self._compact(run)

    def _compact(self, run: _Run) -> None:
        """Rewrite ``run`` without its dead rows, keeping its index (filtered, in linear time)."""
        self.runs.remove(run)
        table = self.table.take(run.namespace)
        keep = ~run.dead
        if not keep.any():
            return
        kept = table.filter(pa.array(keep))
        khash = order = None
        if run.order is not None:
            alive = keep[run.order]
            khash = run.khash[alive]
            order = (np.cumsum(keep) - 1)[run.order[alive]].astype(np.int32)
        if kept.num_columns and kept.column(0).num_chunks > 1:
            kept = kept.combine_chunks()
        self._add_run(kept, None if run.raw is None else run.raw[keep], khash, order, lane=run.lane, seq=run.seq,
                      least=(run.min_time, run.min_written), negatives=run.negatives)

    def largest(self, column: int) -> int:
        """The largest value of an integer column over the stored rows (-1 if none)."""
        largest = -1
        for run in self.runs:
            values = self.table.get(run.namespace).column(f"c{column}")
            if len(values):
                largest = max(largest, int(pc.max(values).as_py()))
        return largest

    def _add_run(self, table: pa.Table, raw: np.ndarray | None, khash: np.ndarray | None = None,
                 order: np.ndarray | None = None, *, lane: int = 0, seq: int | None = None,
                 least: tuple[int, int] | None = None, dead: np.ndarray | None = None,
                 negatives: int | None = None) -> None:
        """Store ``table`` as a run of ``lane``; ``seq``: its place there (None: the newest);
        ``least``: its smallest ``_time`` and ``_written`` where the caller knows them; ``dead``:
        its rows already removed in place; ``negatives``: its rows of count -1 (None: counted)."""
        if table.num_rows == 0:
            return
        namespace = self.next_namespace
        self.next_namespace += 1
        if seq is None:
            seq = self._run_seq
            self._run_seq += 1
        self.table.add(namespace, table)
        if least is None:
            least = (_min(table, "_time"), _min(table, "_written"))
        if negatives is None:
            negatives = int(np.count_nonzero(table.column("_count").to_numpy() < 0)) if self.retractions else 0
        n_dead = 0 if dead is None else int(np.count_nonzero(dead))
        self.runs.append(_Run(namespace, None if order is not None else raw, khash, order, least[0], least[1],
                              lane, seq, dead if n_dead else None, n_dead, negatives, table.num_rows))

    def _merge(self, a: _Run, b: _Run) -> None:
        """One run from runs ``a`` and ``b`` (the newer) of a lane, in the older one's place. Rows
        stay where they are (the tables are concatenated); only the sorted hashes and the row order
        are merged, in linear time (a stable sort of two sorted runs). A store that takes
        retractions nets its rows instead, rewriting them."""
        self.runs = [r for r in self.runs if r is not a and r is not b]
        first = self.table.take(a.namespace)
        merged = pa.concat_tables([first, self.table.take(b.namespace)])
        dead = None
        if a.n_dead or b.n_dead:
            dead = np.concatenate([_dead_of(a), _dead_of(b)])
        if self.retractions and (a.negatives or b.negatives):
            # Retractions to net: the rows are rewritten (those removed in place left out).
            self._rebuild(merged if dead is None else merged.filter(pa.array(~dead)), lane=a.lane, seq=a.seq)
            return
        if merged.num_columns and merged.column(0).num_chunks > _MAX_CHUNKS:
            merged = merged.combine_chunks()
        # Where expire looks at the merged run again: where it would have looked at either.
        least = (min(a.min_time, b.min_time), min(a.min_written, b.min_written))
        if a.order is None:
            # indexed when first searched
            self._add_run(merged, np.concatenate([_hashes(a), _hashes(b)]), lane=a.lane, seq=a.seq, least=least,
                          dead=dead, negatives=0)
        else:
            # The older run has been searched, so this side is probed: index the newer (smaller)
            # run now, if it is not yet, and merge in linear time, rather than sort the merged run
            # from scratch at the next search.
            b.index()
            keys, rows = _merge_sorted(a.khash, a.order, b.khash, b.order + np.int32(first.num_rows))
            self._add_run(merged, None, keys, rows, lane=a.lane, seq=a.seq, least=least, dead=dead, negatives=0)
        run = self.runs[-1]
        if run.n_dead * 2 >= run.size:
            self._compact(run)

    def _rebuild(self, table: pa.Table, *, lane: int = 0, seq: int | None = None) -> None:
        """Net (a store that takes retractions) and index ``table``, and store it as one run."""
        if self.retractions and table.num_rows and (table.column("_count").to_numpy() < 0).any():
            table = _net(table)
        table = table.combine_chunks()
        self._add_run(table, table.column("_khash").to_numpy(), lane=lane, seq=seq)

    def stored(self) -> pa.Table:
        """Every stored row, as the runs hold them (their state columns included)."""
        self.settle()
        parts = [self.table.get(ns) for ns in self.table.namespaces()]
        parts = [p for p in parts if p is not None and p.num_rows]
        return pa.concat_tables(parts) if parts else self.state_schema.empty_table()

    def replace(self, table: pa.Table) -> None:
        """Make ``table`` (rows of this store, taken out of it) its whole content, as one run."""
        for ns in list(self.table.namespaces()):
            self.table.take(ns)
        self.runs = []
        self._lane_ends = {}
        if table.num_rows:
            self._rebuild(table)

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
            times = table.column("_time").to_numpy() if old_time else None
            written = table.column("_written").to_numpy() if old_write else None
            if times is not None:
                keep &= times >= time_before
            if written is not None:
                keep &= written >= written_before
            if run.n_dead:
                keep &= ~run.dead
            dropped = table.num_rows - int(keep.sum())
            if dropped == 0 or (dropped * 4 < table.num_rows and keep.any()):
                # Not worth a rewrite yet: look again only once a quarter of the run would go by
                # one of the bounds (its quarter-th smallest value), not at every watermark.
                quarter = -(-table.num_rows // 4) - 1
                if times is not None:
                    run.min_time = int(np.partition(times, quarter)[quarter])
                if written is not None:
                    run.min_written = int(np.partition(written, quarter)[quarter])
                self.runs.append(run)
                continue
            self.table.take(run.namespace)
            if not keep.any():
                continue
            first = int(np.argmax(keep))
            if not self.retractions and not run.n_dead and first * 4 >= table.num_rows:
                # Rows mostly arrive in time order: the run's first rows, up to its first one to
                # keep, are a quarter of it or more. They go and the rest stays as a slice (no copy),
                # its hashes too, and its index keeps its order. The few later rows past the bound
                # stay until a later rewrite (a join still checks its condition on every pair).
                khash = order = None
                if run.order is not None:
                    later = run.order >= first
                    khash, order = run.khash[later], run.order[later] - first
                self._add_run(table.slice(first), None if run.raw is None else run.raw[first:], khash, order,
                              lane=run.lane, seq=run.seq)
                continue
            kept = np.flatnonzero(keep)
            if times is not None and not self.retractions:
                later = times[kept]
                if len(later) > 1 and (later[1:] < later[:-1]).any():
                    # Rows of several channels arrive interleaved in time (a join behind an
                    # exchange from several subtasks): stored in time order, the run's next
                    # expiries drop a prefix, a slice, instead of rewriting it again.
                    kept = kept[np.argsort(later, kind="stable")]
            self._rebuild(table.take(pa.array(kept)), lane=run.lane, seq=run.seq)
        self.runs.sort(key=lambda r: -r.size)

    def reload(self) -> None:
        """After a restore: every stored row becomes one run (namespaces of several snapshots may
        overlap, and a key-group filter may have left gaps) — or, where runs are bounded
        (``_run_rows``), each bucket one run of its own, read and written one at a time, so that
        a restore never holds more than one of them."""
        self.runs = []
        self._lane_ends = {}
        self._cap = False
        namespaces = list(self.table.namespaces())
        if self.table.bucket_bytes is not None:
            self.next_namespace = namespaces[-1] + 1 if namespaces else 0
            for ns in namespaces:
                part = self.table.take(ns)
                if part is not None and part.num_rows:
                    self._rebuild(part)
            return
        parts = [self.table.take(ns) for ns in namespaces]
        self.next_namespace = 0
        parts = [p for p in parts if p is not None and p.num_rows]
        if parts:
            self._rebuild(pa.concat_tables(parts))


class NumberedRowsOperator(OperatorBase):
    """What an operator whose state is one ``KeyedRows`` store ``rows`` of input rows with their
    arrival number (column ``width``, counted by ``_next_seq``) does the same way: checkpoint,
    restore, report its size. A Top-N and an OVER over an updating input are such operators."""

    rows: KeyedRows
    operator_state: OperatorState
    width: int
    metrics: dict[str, int]
    ctx: TaskContext
    _next_seq: int
    #: ``table.exec.state.ttl``: rows stored longer ago than this (by the context clock) are
    #: forgotten; None keeps them.
    ttl_ms: int | None = None

    def _live_rows(self, partitions: np.ndarray) -> pa.Table | None:
        """The stored rows of the partitions with these key hashes (each once), or None; with a
        TTL, rows stored longer ago than it are left out (and dropped from the store)."""
        return self._live(partitions)[0]

    def _live(self, partitions: np.ndarray, *, ordered: bool = True) -> tuple[pa.Table | None, np.ndarray | None]:
        """``_live_rows``, with the id of each row for ``KeyedRows.kill`` — or None for the ids
        where the store holds retractions (rows of count -1) to net: those rows are removed by
        storing their retraction. ``ordered=False``: the rows in any order (the caller sorts
        them), which spares a copy of them."""
        if self.ttl_ms is not None:
            oldest = int(self.ctx.runtime.clock()) - self.ttl_ms
            self.rows.expire(written_before=oldest)
        probe, stored, ids, order = self.rows.lookup_unordered(partitions)
        if stored is None:
            return None, None
        if order is not None and (ordered or not (stored.column("_count").to_numpy() == 1).all()):
            probe, stored, ids = probe[order], stored.take(pa.array(order)), ids[order]
        if self.ttl_ms is not None:
            # An expired run is rewritten only once a quarter of it has expired: filter the rest.
            fresh = stored.column("_written").to_numpy() >= oldest
            if not fresh.all():
                probe, stored, ids = probe[fresh], stored.filter(pa.array(fresh)), ids[fresh]
        if not (stored.column("_count").to_numpy() == 1).all():
            _, stored, _, _ = net_pairs(probe, stored, ids)
            return (stored if stored.num_rows else None), None
        # Every row counts once and each is a distinct row (its arrival number): nothing to net.
        return (stored if stored.num_rows else None), ids

    def remove(self, table: pa.Table | None, rows: np.ndarray, ids: np.ndarray | None, now: int) -> None:
        """Remove stored rows ``rows`` of ``table`` (the stored rows ``_live`` gave, first): in
        place by their ids, or by storing their retraction where ``_live`` gave no ids (only
        then is ``table`` read)."""
        if ids is not None:
            self.rows.kill(ids[rows])
        else:
            assert table is not None
            self.rows.store_rows(table, rows, -1, now)

    def settle(self) -> None:
        """Make the table state hold the live rows only (see ``KeyedRows.settle``)."""
        self.rows.settle()

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return []

    def snapshot(self, checkpoint_id: int, directory: Path) -> tuple[list[Path], dict[str, int]]:
        self.rows.settle()
        self.operator_state.commit(checkpoint_id)
        files = self.operator_state.snapshot(directory)
        return files, {"rows": self.rows.rows(), "next_seq": self._next_seq}

    def restore(self, files: list[Path], meta: dict[str, int], *,
                key_groups: Collection[int] | None = None) -> None:
        self.operator_state.restore(files, key_groups=key_groups)
        self.rows.reload()
        # Arrival numbers go on after the largest stored (or saved) one, so ties keep their order.
        self._next_seq = max(self.rows.largest(self.width) + 1, int(meta.get("next_seq", 0)))
        self._update_state_metrics()

    def close(self) -> None:
        self.operator_state.close()

    def _update_state_metrics(self) -> None:
        self.metrics["state_rows"] = self.rows.rows()
        self.metrics["state_bytes"] = self.rows.table.memory_bytes()


def net_pairs(probe: np.ndarray, stored: pa.Table, ids: np.ndarray) -> tuple[np.ndarray, pa.Table, np.ndarray,
                                                                              np.ndarray]:
    """Candidate pairs of a ``lookup`` from a store that takes retractions, netted: one pair per
    probe and distinct stored row (``_rhash``) with a positive net count. Returns the probes,
    the rows, each row's net count (its multiplicity) and its id."""
    counts = stored.column("_count").to_numpy()
    grouped = pa.table({"p": probe, "r": stored.column("_rhash"), "n": counts,
                        "i": np.arange(len(probe), dtype=np.int64)}).group_by(["p", "r"]).aggregate(
        [("n", "sum"), ("i", "min")])
    net = grouped.column("n_sum").to_numpy()
    alive = net > 0
    first = grouped.column("i_min").to_numpy()[alive]
    order = np.argsort(first, kind="stable")
    first = first[order]
    return probe[first], stored.take(pa.array(first)), net[alive][order], ids[first]


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


def _dead_of(run: _Run) -> np.ndarray:
    return run.dead if run.dead is not None else np.zeros(run.size, dtype=bool)


def _hashes(run: _Run) -> np.ndarray:
    """The key hash of each row of ``run``, in table order."""
    if run.raw is not None:
        return run.raw
    raw = np.empty(run.size, dtype=np.uint64)
    raw[run.order] = run.khash
    return raw


def _min(table: pa.Table, column: str) -> int:
    if table.num_rows == 0:
        return 0
    return int(table.column(column).to_numpy().min())


def _rows_of(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """Rows ``rows`` of ``table``. Rows stored together (a window's rows, probed by its maximum)
    are found as a few ascending stretches: those are sliced, without a copy, and only scattered
    rows are copied."""
    if len(rows) < 64:
        return take_rows(table, rows)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if len(breaks) > 8:
        return take_rows(table, rows)
    bounds = [0, *breaks.tolist(), len(rows)]
    parts = [table.slice(int(rows[a]), b - a) for a, b in zip(bounds, bounds[1:])]
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


class Found:
    """The stored rows of a lookup's pairs, still in their runs: a (run table, rows) part per run
    that had some, in the order of the pairs. Nothing is copied until a caller takes rows, so a
    join that drops pairs (a residual condition, a TTL) after reading a few of their columns copies
    only the rows it keeps; and the runs' tables are taken from as one table (their chunks put
    together without a copy), so rows of several runs are gathered chunk by chunk and put in the
    order asked for once."""

    def __init__(self, parts: list[tuple[pa.Table, np.ndarray]]) -> None:
        if len(parts) == 1:
            self.table, self.rows = parts[0]
        else:
            tables = [table for table, _ in parts]
            sizes = np.array([table.num_rows for table in tables], dtype=np.int64)
            firsts = np.cumsum(sizes) - sizes
            self.table = pa.concat_tables(tables)
            self.rows = np.concatenate([rows + first for (_, rows), first in zip(parts, firsts, strict=True)])

    def take(self, chosen: np.ndarray | None = None, columns: list[str] | None = None) -> pa.Table:
        """The rows of pairs ``chosen`` (positions among the pairs, in the order wanted; None: every
        pair, in order), of ``columns`` (None: all)."""
        table = self.table if columns is None else self.table.select(columns)
        return _rows_of(table, self.rows if chosen is None else self.rows[chosen])


def _merge_sorted(a_keys: np.ndarray, a_rows: np.ndarray, b_keys: np.ndarray,
                  b_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two runs of sorted keys (each with its rows) as one, ``b``'s after ``a``'s equal keys.

    numpy's stable sort of 64-bit keys is a timsort: it finds the two sorted runs and merges them
    in linear time, 2-3 times faster than placing ``b``'s keys by a search of ``a``'s. The keys
    are sorted in place (the same order again), so that the largest merge holds one array of
    keys fewer at its peak."""
    keys = np.concatenate([a_keys, b_keys])
    order = np.argsort(keys, kind="stable")
    keys.sort(kind="stable")
    return keys, np.concatenate([a_rows, b_rows]).take(order)


def take_rows(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table.take(rows)``, in time that grows with the rows taken rather than with the table.

    Arrow's take on a chunked table joins the chunks of every column first, so taking a few rows
    of a large store costs as much as copying it. A few rows are taken from each chunk that holds
    some instead (then put back in the order asked for); many rows go the whole-table way."""
    if len(rows) * 8 > table.num_rows:
        return pc.take(table, pa.array(rows))
    batches = [b for b in table.to_batches() if b.num_rows]
    starts = np.cumsum([0, *(b.num_rows for b in batches)])
    chunk = np.searchsorted(starts, rows, side="right") - 1
    order = np.argsort(chunk, kind="stable")
    chunks = chunk[order]
    bounds = [0, *(np.flatnonzero(np.diff(chunks)) + 1).tolist(), len(rows)]
    parts = [pc.take(batches[chunks[a]], pa.array(rows[order[a:b]] - starts[chunks[a]]))
             for a, b in zip(bounds, bounds[1:]) if b > a]
    taken = pa.Table.from_batches(parts, schema=table.schema)
    if len(order) > 1 and (order[1:] < order[:-1]).any():
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        taken = pc.take(taken, pa.array(back))
    return taken


def plain_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values
