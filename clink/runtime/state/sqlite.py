"""The ``sqlite`` state backend: one SQLite database per operator, behind a write-back cache.

Layout of ``<directory>/<operator id, percent-quoted>.sqlite`` (WAL journal, ``synchronous=FULL``):

- ``clink_meta(name, value)``: ``layout`` and ``codec`` format versions, ``operator``,
  ``max_parallelism``, ``committed_checkpoint``;
- ``clink_states(name, tbl, signature)``: each state's table and its declared kind and types;
- one table per state: for value state ``(kg, k, v)``, primary key ``k``, keys and values as
  ``codec`` blobs (keys canonical, so equal keys are equal bytes), with an index on ``kg`` (the key
  group) for per-group iteration and rescale; for table state ``(ns, seq, n, data)`` (see
  ``_SqliteTableState``).

Value state is read and written through an LRU cache of at most ``cache_entries`` keys; dirty
entries are written when evicted, into the state's change log ``<tbl>_log (kg, k, v, p)`` (a
NULL value for a deleted key), not its table, so a commit writes the log's few pages rather than
the table's many; reads see the log over the table. A log above ``log_fraction`` of its table is
merged into it at the first use of the state after a commit, in a transaction of its own
(``SqliteOperatorState.merge``). Everything written since the last ``commit`` sits in one open
transaction, so the database file always holds the state as of the last commit: ``commit``
writes the dirty entries and the checkpoint id and commits, durably.

Incremental checkpoints (``incremental=True``): each row of a value state's log records the piece
it was written in (``p``, against ``clink_meta.piece``, the piece being written), and a merge
keeps the rows of the current piece; each table state has a change table ``<tbl>_chg`` of the
primary keys written since the last piece. ``commit`` cuts a piece: a base, copied whole by the
next ``snapshot``, or, after the commit, a delta file of the changed rows written inside SQLite
(``_add_delta``). ``snapshot`` returns the chain of pieces, in the ``shared`` folder beside the
checkpoint's. ``restore`` applies a chain's deltas to a copy of its base. With
``local_recovery=True`` a clean ``close`` leaves a checksum beside the database, and the next
``restore`` of the same checkpoint keeps the database instead of rebuilding it. See
``docs/state.md``.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import os
import shutil
import sqlite3
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.faults import FaultPoint
from clink.runtime.fs import fsync_directory, sha256_of
from clink.runtime.state import codec
from clink.runtime.state.backend import (
    KEY_GROUP,
    IncompatibleState,
    Key,
    KeyColumns,
    KeyHelper,
    OperatorState,
    StateBackend,
    StateDescriptor,
    TableState,
    TableStateDescriptor,
    ValueState,
    ValueStateDescriptor,
    check_key_group,
    conform_table,
    descriptor_map,
    lookup,
    values_array,
)
from clink.runtime.state.keygroups import DEFAULT_MAX_PARALLELISM

__all__ = ["SqliteOperatorState", "SqliteStateBackend"]

#: Version of the table layout (``clink_meta.layout``). Layout 2 added the change log of each
#: value state (``<tbl>_log``): a snapshot of it may hold rows in its log that a reader of layout 1
#: would miss, so such readers refuse it. Layout 3 added the piece of each log row (``p``) in
#: place of a value state's change table, and its deltas hold a value state's changes as a log
#: (``<tbl>_log``, a NULL value for a deleted key) instead of rows and keys (``<tbl>``,
#: ``<tbl>_chg``). Files of layouts 1 and 2 are still read, deltas of both kinds are applied, and
#: a working database of layout 1 or 2 is upgraded in place when opened.
LAYOUT_VERSION = "3"
#: Layouts whose snapshots ``restore`` reads.
READABLE_LAYOUTS = ("1", "2", "3")
#: The share of a state's rows its log may hold before it is merged into the table (see
#: ``SqliteOperatorState.merge``), and the fewest rows a table counts as for that share, so that
#: a small state is not merged after every checkpoint.
LOG_FRACTION = 0.05
_LOG_FLOOR = 200_000
#: The smallest bucket a reader that reads buckets whole is told to build
#: (``TableState.bucket_bytes``), however small ``table_cache_bytes`` is: a join side of 10M rows
#: in runs of a few KiB would be thousands of runs, each searched by every batch that probes it.
MIN_BUCKET_BYTES = 1 << 20
#: Parameters per statement stay below SQLite's default limit (32766 since 3.32).
_CHUNK = 500
#: Rows of the log upserted by one statement from blobs (``_SqliteValueState.flush``).
_ROWS_PER_UPSERT = 1 << 20


class SqliteStateBackend(StateBackend):
    """Durable keyed state in SQLite files under ``directory``, larger than memory.

    ``cache_entries`` bounds the write-back cache (see the module docstring); a single batch may
    exceed it while it is processed. ``page_cache_kib`` is SQLite's own page cache per database.
    ``table_cache_bytes`` is what an operator's table states keep in memory, split between them;
    each tells its readers to keep buckets within a quarter of its share, or
    ``min_bucket_bytes`` if that is more (``TableState.bucket_bytes``).
    """

    def __init__(self, directory: str | Path, *, cache_entries: int = 100_000,
                 max_parallelism: int = DEFAULT_MAX_PARALLELISM, page_cache_kib: int = 65_536,
                 table_cache_bytes: int = 64 << 20, incremental: bool = False,
                 local_recovery: bool = False, log_fraction: float = LOG_FRACTION,
                 fault_point: str | None = None, min_bucket_bytes: int = MIN_BUCKET_BYTES) -> None:
        if max_parallelism <= 0:
            raise ValueError(f"max_parallelism must be positive, got {max_parallelism}")
        if cache_entries < 0:
            raise ValueError(f"cache_entries must be at least 0, got {cache_entries}")
        self.directory = Path(directory)
        self.cache_entries = cache_entries
        self.max_parallelism = max_parallelism
        self.page_cache_kib = page_cache_kib
        self.table_cache_bytes = table_cache_bytes
        self.incremental = incremental
        self.local_recovery = local_recovery
        if not log_fraction >= 0:
            raise ValueError(f"log_fraction must be at least 0, got {log_fraction}")
        self.log_fraction = log_fraction
        #: A named point of the log's merge at which to kill this process ('name:n', crash tests).
        self.fault = FaultPoint(fault_point)
        self.min_bucket_bytes = min_bucket_bytes

    def path_of(self, operator_id: str) -> Path:
        """The database file of ``operator_id``."""
        return self.directory / f"{urllib.parse.quote(operator_id, safe='-_')}.sqlite"

    def open(self, operator_id: str, descriptors: Iterable[StateDescriptor]) -> SqliteOperatorState:
        self.directory.mkdir(parents=True, exist_ok=True)
        return SqliteOperatorState(self.path_of(operator_id), operator_id, descriptor_map(operator_id, descriptors),
                                   max_parallelism=self.max_parallelism, cache_entries=self.cache_entries,
                                   page_cache_kib=self.page_cache_kib, table_cache_bytes=self.table_cache_bytes,
                                   incremental=self.incremental, local_recovery=self.local_recovery,
                                   log_fraction=self.log_fraction, fault=self.fault,
                                   min_bucket_bytes=self.min_bucket_bytes)


class _SqliteValueState(ValueState):
    """One state's table, codecs and handle logic; entries live in the operator's shared cache,
    each ``[key group, value or None]``."""

    def __init__(self, owner: SqliteOperatorState, index: int, tbl: str, descriptor: ValueStateDescriptor) -> None:
        self.owner = owner
        self.index = index
        self.tbl = tbl
        self.descriptor = descriptor
        self.keys = KeyHelper(descriptor.key_schema, owner.max_parallelism, descriptor.group_fields)
        self.encode_key = codec.row_encoder(descriptor.key_schema.types, canonical=True)
        self.decode_key = codec.row_decoder(descriptor.key_schema.types)
        self.encode_value = codec.encoder(descriptor.value_type)
        self.decode_value = codec.decoder(descriptor.value_type)
        # Whole columns at once where the types are fixed-width (None: row by row).
        self.encode_keys = codec.rows_encoder(descriptor.key_schema.types, canonical=True)
        self.encode_values = codec.rows_encoder([descriptor.value_type])
        self.count_log()

    def count_log(self) -> None:
        """Count the rows of the change log (small: it is merged before it grows large)."""
        #: Rows written to the log since it was last empty: at least the rows it holds (a key
        #: written twice counts twice), so a merge is never late.
        (self.log_rows,) = self.owner.conn.execute(f"SELECT COUNT(*) FROM {self.tbl}_log").fetchone()
        #: Rows of the main table, counted when a merge is first considered (None: not yet).
        self.main_rows: int | None = None

    def decode_or_none(self, blob: bytes | None) -> Any:
        return None if blob is None else self.decode_value(blob)

    def ckey(self, key: Any) -> tuple[int, Key]:
        return (self.index, self.keys.key(key))

    def get(self, key: Any) -> Any:
        owner = self.owner
        ck = self.ckey(key)
        entry = owner.touch(ck)
        if entry is None:
            owner.merge_if_due()
            g = self.keys.group(ck[1])
            kb = self.encode_key(ck[1])
            row = None
            if self.log_rows:  # the log's row (a NULL value: deleted) hides the table's
                row = owner.conn.execute(f"SELECT v FROM {self.tbl}_log WHERE kg = ? AND k = ?", (g, kb)).fetchone()
            if row is None:
                row = owner.conn.execute(f"SELECT v FROM {self.tbl} WHERE k = ?", (kb,)).fetchone()
            entry = [g, None if row is None else self.decode_or_none(row[0])]
            owner.add(ck, entry)
        return entry[1]

    def put(self, key: Any, value: Any) -> None:
        self.owner.write_values(self, [self.ckey(key)], None, [value])

    def delete(self, key: Any) -> None:
        self.put(key, None)

    def get_many(self, keys: KeyColumns) -> pa.Array:
        owner = self.owner
        tuples, groups = self.keys.batch(keys)
        index = self.index
        cache = owner.cache
        out: list[Any] = [None] * len(tuples)
        missing: dict[Key, list[int]] = {}
        missing_groups: dict[Key, int] = {}
        for i, (k, g) in enumerate(zip(tuples, groups.tolist())):
            entry = cache.get((index, k))
            if entry is not None:
                cache.move_to_end((index, k))
                out[i] = entry[1]
            else:
                rows = missing.get(k)
                if rows is None:
                    missing[k] = [i]
                    missing_groups[k] = g
                else:
                    rows.append(i)
        if missing:
            owner.merge_if_due()
            blobs = {self.encode_key(k): k for k in missing}
            found: dict[Key, Any] = {}
            if self.log_rows:
                # The log first: a key it holds (deleted, if its value is NULL) is not looked
                # up in the table.
                pairs = [(missing_groups[k], kb) for kb, k in blobs.items()]
                for lo in range(0, len(pairs), _CHUNK // 2):
                    chunk = pairs[lo:lo + _CHUNK // 2]
                    sql = (f"SELECT l.k, l.v FROM (VALUES {','.join(['(?, ?)'] * len(chunk))}) AS q "
                           f"CROSS JOIN {self.tbl}_log AS l ON l.kg = q.column1 AND l.k = q.column2")
                    for kb, vb in owner.conn.execute(sql, [x for pair in chunk for x in pair]):
                        found[blobs.pop(kb)] = self.decode_or_none(vb)
            items = list(blobs)
            for lo in range(0, len(items), _CHUNK):
                chunk = items[lo:lo + _CHUNK]
                sql = f"SELECT k, v FROM {self.tbl} WHERE k IN ({','.join('?' * len(chunk))})"
                for kb, vb in owner.conn.execute(sql, chunk):
                    found[blobs[kb]] = self.decode_value(vb)
            for k, rows in missing.items():
                value = found.get(k)
                for i in rows:
                    out[i] = value
                owner.add((index, k), [missing_groups[k], value], evict=False)
            owner.evict()
        return codec.from_pylist(out, self.descriptor.value_type)

    def put_many(self, keys: KeyColumns, values: pa.Array | pa.ChunkedArray) -> None:
        tuples, groups = self.keys.batch(keys)
        new = codec.to_pylist(values_array(values, self.descriptor.value_type, len(tuples)))
        index = self.index
        self.owner.write_values(self, [(index, k) for k in tuples], groups.tolist(), new)

    def flush(self, keys: list[Key], cached: list[list]) -> None:
        """Write ``keys`` with their ``cached`` entries into the change log, a deleted key as a
        NULL value, each row marked with the piece being written. The log is small, so the pages
        a commit writes are few however large the table; ``merge`` moves it into the table
        later, outside any checkpoint."""
        conn = self.owner.conn
        upsert = (f"INSERT INTO {self.tbl}_log (kg, k, v, p) {{}} "
                  "ON CONFLICT (kg, k) DO UPDATE SET v = excluded.v, p = excluded.p")
        piece = self.owner.piece()
        self.log_rows += len(keys)
        columns = self._encode_columns(keys, cached)
        if columns is not None and _json_each():
            # One statement per _ROWS_PER_UPSERT rows (the whole flush, mostly): the rows are
            # sliced out of two blobs inside SQLite, indexed by the groups' JSON array (a deleted
            # key's value starts with 0). The chunks keep blobs far below SQLite's length limit.
            groups, key_rows, value_rows = columns
            kw, vw = key_rows.shape[1], value_rows.shape[1]
            sql = upsert.format(
                f"SELECT j.value, substr(?1, j.key * {kw} + 1, {kw}), "
                f"CASE WHEN substr(?2, j.key * {vw} + 1, 1) = x'01' "
                f"THEN substr(?2, j.key * {vw} + 1, {vw}) END, {piece} FROM json_each(?3) AS j WHERE true")
            for lo in range(0, len(groups), _ROWS_PER_UPSERT):
                hi = lo + _ROWS_PER_UPSERT
                conn.execute(sql, (key_rows[lo:hi].tobytes(), value_rows[lo:hi].tobytes(),
                                   json.dumps(groups[lo:hi].tolist())))
            return
        if columns is not None:
            groups, key_rows, value_rows = columns
            n, kw, vw = len(groups), key_rows.shape[1], value_rows.shape[1]
            kbuf, vbuf = key_rows.tobytes(), value_rows.tobytes()
            value_blobs = [vbuf[i:i + vw] if vbuf[i] else None for i in range(0, n * vw, vw)]
            rows = zip(groups.tolist(), [kbuf[i:i + kw] for i in range(0, n * kw, kw)], value_blobs)
        else:
            encode_key, encode_value = self.encode_key, self.encode_value
            rows = [(e[0], encode_key(k), None if e[1] is None else encode_value(e[1]))
                    for k, e in zip(keys, cached)]
            rows.sort(key=_first_two)  # in the log's key order, so its B-tree is written page by page
        conn.executemany(upsert.format(f"VALUES (?, ?, ?, {piece})"), rows)

    def _encode_columns(self, keys: list[Key], cached: list[list]
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The log's rows of ``keys`` and their entries, encoded a column at a time, in the log's
        key order: the key groups, and the keys' and values' bytes as matrices of a row each (the
        first byte of a deleted key's value 0, a present value's 1); None where the types or
        values need ``flush``'s row by row encoding."""
        if self.encode_keys is None or self.encode_values is None or not keys:
            return None
        n = len(keys)
        width = len(keys[0])
        encoded = self.encode_keys([[k[0] for k in keys]] if width == 1 else [list(c) for c in zip(*keys)])
        if encoded is None or encoded[1].any():  # a NULL in a key: shorter bytes, row by row
            return None
        key_rows = encoded[0]
        encoded = self.encode_values([[e[1] for e in cached]])
        if encoded is None:
            return None
        value_rows, deleted = encoded
        value_rows[deleted, 0] = 0
        groups = np.array([e[0] for e in cached], np.int64)
        # The log's order (group, then key bytes): the key rows as big-endian words compare as
        # their bytes do, so a sort of a few integer columns orders them, and the log's B-tree
        # is written page by page.
        kw = key_rows.shape[1]
        padded = np.zeros((n, -(-kw // 8) * 8), np.uint8)
        padded[:, :kw] = key_rows
        words = padded.view(">u8")
        order = np.lexsort([words[:, j] for j in range(words.shape[1] - 1, -1, -1)] + [groups])
        return groups[order], key_rows[order], value_rows[order]

    def merge(self) -> None:
        """Move the log into the table (the caller has a transaction open): changed rows in
        place, deleted rows removed, in the table's key order; then empty the log, but for the
        rows of the piece being written while the next piece may be a delta: the delta is
        written from them (they hide the table's rows, which are now the same)."""
        conn, tbl = self.owner.conn, self.tbl
        # An upsert changes the row in place: a key's group never changes, so the index on
        # kg is left alone (INSERT OR REPLACE would delete and insert both entries).
        conn.execute(f"INSERT INTO {tbl} (kg, k, v) SELECT kg, k, v FROM {tbl}_log WHERE v IS NOT NULL "
                     "ORDER BY k ON CONFLICT (k) DO UPDATE SET v = excluded.v")
        conn.execute(f"DELETE FROM {tbl} WHERE k IN (SELECT k FROM {tbl}_log WHERE v IS NULL)")
        if self.owner.tracking:
            conn.execute(f"DELETE FROM {tbl}_log WHERE p <> ?", (self.owner.piece(),))
            (self.log_rows,) = conn.execute(f"SELECT COUNT(*) FROM {tbl}_log").fetchone()
        else:
            conn.execute(f"DELETE FROM {tbl}_log")
            self.log_rows = 0
        self.main_rows = None

    def scan(self, key_group: int) -> Iterator[tuple[Key, Any]]:
        """The rows of one key group: the table's where the log has no row, and the log's."""
        tbl = self.tbl
        sql = (f"SELECT k, v FROM {tbl} AS t WHERE kg = ?1 AND NOT EXISTS "
               f"(SELECT 1 FROM {tbl}_log AS l WHERE l.kg = t.kg AND l.k = t.k) "
               f"UNION ALL SELECT k, v FROM {tbl}_log WHERE kg = ?1 AND v IS NOT NULL"
               if self.log_rows else f"SELECT k, v FROM {tbl} WHERE kg = ?1")
        for kb, vb in self.owner.conn.execute(sql, (key_group,)).fetchall():
            yield self.keys.key(self.decode_key(kb)), self.decode_value(vb)


class _SqliteTableState(TableState):
    """Buckets as rows ``(ns, seq, n, data)`` of one table, ``data`` one added table as an Arrow
    IPC stream.

    Tables added since the last write wait in memory (``pending``) until the owner writes them:
    at ``commit``, or when pending and cached tables together pass its share of the operator's
    ``table_cache_bytes`` (split equally between the operator's table states). Written
    tables stay cached (``clean``, whole buckets only, oldest bucket evicted first) while they
    fit, so a bucket read soon after a checkpoint is not read back from disk. What each bucket
    holds on disk (parts, rows) is indexed in memory, so listing buckets reads nothing.
    """

    def __init__(self, owner: SqliteOperatorState, index: int, tbl: str, descriptor: TableStateDescriptor) -> None:
        self.owner = owner
        self.index = index
        self.tbl = tbl
        self.descriptor = descriptor
        # A bucket read whole (from disk, or from the cache) is at most a quarter of its cache,
        # but not smaller than the floor, whatever the cache.
        self.bucket_bytes = max(owner.table_share // 4, owner.min_bucket_bytes)
        self.pending: dict[int, list[pa.Table]] = {}
        self.pending_bytes = 0
        self.clean: dict[int, list[pa.Table]] = {}
        self.clean_bytes = 0
        # Bytes per bucket of pending and of cached tables (``nbytes`` is not free on slices).
        self.pending_size: dict[int, int] = {}
        self.clean_size: dict[int, int] = {}
        #: namespace -> [parts stored, rows stored, next seq, parts pending, rows pending]
        self.index_of: dict[int, list[int]] = {}
        self.ordered: list[int] = []
        self.reload_index()

    def reload_index(self) -> None:
        self.clear_all()
        # (Stored tables of more than one blob count as several parts after a reopen.)
        self.index_of = {ns: [parts, rows, last + 1, 0, 0] for ns, parts, rows, last in self.owner.conn.execute(
            f"SELECT ns, COUNT(*), SUM(n), MAX(seq) FROM {self.tbl} GROUP BY ns")}
        self.ordered = sorted(self.index_of)

    def _bucket(self, namespace: int) -> list[int]:
        entry = self.index_of.get(namespace)
        if entry is None:
            entry = self.index_of[namespace] = [0, 0, 0, 0, 0]
            bisect.insort(self.ordered, namespace)
        return entry

    def _uncache(self, namespace: int) -> None:
        if self.clean.pop(namespace, None) is not None:
            self.clean_bytes -= self.clean_size.pop(namespace)

    def _forget(self, namespace: int) -> None:
        if self.index_of.pop(namespace, None) is not None:
            del self.ordered[bisect.bisect_left(self.ordered, namespace)]
        if self.pending.pop(namespace, None) is not None:
            self.pending_bytes -= self.pending_size.pop(namespace)
        self._uncache(namespace)

    def _fit(self) -> None:
        """Keep pending and cached tables within the budget: evict cached buckets, then write."""
        budget = self.owner.table_share
        while self.clean and self.pending_bytes + self.clean_bytes > budget:
            self._uncache(next(iter(self.clean)))
        if self.pending_bytes > budget:
            self.owner.begin()
            self.flush()

    def add(self, namespace: int, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        table = conform_table(self.descriptor, table)
        namespace = int(namespace)
        entry = self._bucket(namespace)
        entry[3] += 1
        entry[4] += table.num_rows
        self.pending.setdefault(namespace, []).append(table)
        size = table.nbytes
        self.pending_size[namespace] = self.pending_size.get(namespace, 0) + size
        self.pending_bytes += size
        self._fit()

    def _stored(self, namespace: int) -> list[pa.Table]:
        cached = self.clean.get(namespace)
        if cached is not None:
            return cached
        rows = self.owner.conn.execute(f"SELECT data FROM {self.tbl} WHERE ns = ? ORDER BY seq", (namespace,))
        return [_from_ipc(data) for (data,) in rows]

    def get(self, namespace: int) -> pa.Table | None:
        namespace = int(namespace)
        entry = self.index_of.get(namespace)
        if entry is None:
            return None
        parts = (self._stored(namespace) if entry[0] else []) + self.pending.get(namespace, [])
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def take(self, namespace: int) -> pa.Table | None:
        namespace = int(namespace)
        table = self.get(namespace)
        entry = self.index_of.get(namespace)
        if entry is None:
            return None
        if entry[0]:
            self.owner.begin()
            if self.owner.tracking:
                self.owner.conn.execute(f"INSERT OR IGNORE INTO {self.tbl}_chg (ns, seq) "
                                        f"SELECT ns, seq FROM {self.tbl} WHERE ns = ?", (namespace,))
            self.owner.conn.execute(f"DELETE FROM {self.tbl} WHERE ns = ?", (namespace,))
        self._forget(namespace)
        return table

    def num_rows(self, namespace: int | None = None) -> int:
        if namespace is None:
            return sum(e[1] + e[4] for e in self.index_of.values())
        entry = self.index_of.get(int(namespace))
        return 0 if entry is None else entry[1] + entry[4]

    def parts(self, namespace: int) -> int:
        entry = self.index_of.get(int(namespace))
        return 0 if entry is None else entry[0] + entry[3]

    def memory_bytes(self) -> int:
        return self.pending_bytes + self.clean_bytes

    def flush(self) -> None:
        """Write every pending table (the caller has a transaction open); they stay cached when
        their whole bucket is, and there is room."""
        if not self.pending:
            return
        rows = []
        for namespace, tables in self.pending.items():
            entry = self.index_of[namespace]
            whole = entry[0] == 0 or namespace in self.clean
            # A large table goes in slices of about _BLOB_BYTES, so no blob (and no read) is huge.
            per_row = self.pending_size[namespace] // max(1, entry[4])
            step = min(max(_BLOB_BYTES // max(1, per_row), _BLOB_ROWS[0]), _BLOB_ROWS[1])
            for table in tables:
                for lo in range(0, table.num_rows, step):
                    piece = table.slice(lo, step)
                    rows.append((namespace, entry[2], piece.num_rows, _to_ipc(piece)))
                    entry[2] += 1
            entry[0] += entry[3]
            entry[1] += entry[4]
            entry[3] = entry[4] = 0
            if whole:
                self.clean.setdefault(namespace, []).extend(tables)
                size = self.pending_size[namespace]
                self.clean_size[namespace] = self.clean_size.get(namespace, 0) + size
                self.clean_bytes += size
        self.owner.conn.executemany(f"INSERT INTO {self.tbl} (ns, seq, n, data) VALUES (?, ?, ?, ?)", rows)
        if self.owner.tracking:
            self.owner.conn.executemany(f"INSERT OR IGNORE INTO {self.tbl}_chg (ns, seq) VALUES (?, ?)",
                                        [r[:2] for r in rows])
        self.pending.clear()
        self.pending_size.clear()
        self.pending_bytes = 0
        self._fit()

    def clear_all(self) -> None:
        self.pending.clear()
        self.pending_size.clear()
        self.pending_bytes = 0
        self.clean.clear()
        self.clean_size.clear()
        self.clean_bytes = 0
        self.index_of.clear()
        self.ordered.clear()

    def group_rows(self, key_group: int) -> Iterator[tuple[int, pa.Table]]:
        for namespace in list(self.ordered):
            table = self.get(namespace)
            if table is not None:
                rows = table.filter(pc.equal(table[KEY_GROUP], key_group))
                if rows.num_rows:
                    yield namespace, rows


#: Bytes per stored blob of table state, about (in whole rows, from 256 to 65,536 of them). A
#: blob is serialized and read back as one buffer; kept far below glibc's mmap threshold
#: (``runtime/allocator.py``, 4 MiB) those buffers reuse the heap's pages: at 65,536 rows of
#: ~250 bytes (16 MiB blobs), q20 on sqlite took 12 times more page faults and 3 times more
#: system time.
_BLOB_BYTES = 1 << 20
_BLOB_ROWS = (1 << 8, 1 << 16)


def _to_ipc(table: pa.Table) -> memoryview:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return memoryview(sink.getvalue())


def _from_ipc(data: bytes) -> pa.Table:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return reader.read_all()


_COLUMNS = {
    "value": ("kg INTEGER NOT NULL, k BLOB NOT NULL, v BLOB NOT NULL, PRIMARY KEY (k)", "kg, k, v"),
    "table": ("ns INTEGER NOT NULL, seq INTEGER NOT NULL, n INTEGER NOT NULL, data BLOB NOT NULL, "
              "PRIMARY KEY (ns, seq)", "ns, seq, n, data"),
}
_KINDS: dict[str, type] = {"value": _SqliteValueState, "table": _SqliteTableState}
#: A value state's change log: the rows written since the last merge, a NULL value for a key
#: deleted, and the piece each was written in. Keyed by key group first, so one group's rows are
#: a range (``entries``).
_LOG = "kg INTEGER NOT NULL, k BLOB NOT NULL, v BLOB, p INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (kg, k)"
#: A value state's changes in a delta of layout 3: its log's rows of the piece, without ``p``, in
#: the log's order. No primary key: the delta is only ever read whole, and appending to a rowid
#: table skips a B-tree search per row.
_DELTA_LOG = "kg INTEGER NOT NULL, k BLOB NOT NULL, v BLOB"
#: Per kind: the columns of a state's change table (the primary keys written since the last
#: checkpoint's piece), the key columns, and how to match them against the state's rows. (Value
#: states had one up to layout 2; their deltas of layout 2 still hold one.)
_CHANGES = {
    "value": ("k BLOB NOT NULL, PRIMARY KEY (k)", "k", "k"),
    "table": ("ns INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (ns, seq)", "ns, seq", "(ns, seq)"),
}


class SqliteOperatorState(OperatorState):
    """The states of one operator in one SQLite database (see the module docstring)."""

    def __init__(self, path: Path, operator_id: str, descriptors: dict[str, StateDescriptor], *,
                 max_parallelism: int, cache_entries: int, page_cache_kib: int,
                 table_cache_bytes: int = 64 << 20, incremental: bool = False,
                 local_recovery: bool = False, log_fraction: float = LOG_FRACTION,
                 fault: Callable[[str], None] | None = None, min_bucket_bytes: int = 0) -> None:
        self.path = path
        self.min_bucket_bytes = min_bucket_bytes
        self.log_fraction = log_fraction
        self.fault = fault or FaultPoint(None)
        #: Whether a commit since the last merge may have left a log worth merging.
        self._merge_due = False
        self.incremental = incremental
        self.page_cache_kib = page_cache_kib
        #: Pieces committed but not yet in a checkpoint's shared folder: (name, kind).
        self._unpublished: list[tuple[str, str]] = []
        #: Bytes of each piece of the chain this process wrote or restored (None: unknown).
        self._piece_bytes: dict[str, int] = {}
        #: How the last ``restore`` went: ``"local"`` (the working database was kept), or why it
        #: was not (None: no restore, or local recovery off).
        self.recovery: str | None = None
        #: A working database a clean stop left, with what it held: (path, sidecar record).
        self._candidate: tuple[Path, dict] | None = None
        self.local_recovery = local_recovery
        sidecar = _sidecar(path)
        if local_recovery and sidecar.exists():
            aside = path.with_name(path.name + ".recover")
            os.replace(path, aside)
            os.replace(sidecar, _sidecar(aside))
            for stale in ("-wal", "-shm"):  # (emptied by the clean stop)
                path.with_name(path.name + stale).unlink(missing_ok=True)
        aside = path.with_name(path.name + ".recover")
        if local_recovery and aside.exists() and _sidecar(aside).exists():
            try:
                self._candidate = (aside, json.loads(_sidecar(aside).read_text()))
            except ValueError:
                self._candidate = None
        shutil.rmtree(self._work, ignore_errors=True)
        self.operator_id = operator_id
        self.descriptors = descriptors
        self.max_parallelism = max_parallelism
        self.cache_entries = cache_entries
        self.table_cache_bytes = table_cache_bytes
        #: Each table state's share of ``table_cache_bytes``: the operator's table states (a
        #: join's two sides) split it, so that the operator holds at most that much.
        tables = sum(1 for d in descriptors.values() if isinstance(d, TableStateDescriptor))
        self.table_share = table_cache_bytes // max(1, tables)
        #: (state index, key) -> entry; least recently used first.
        self.cache: OrderedDict[tuple[int, Key], list] = OrderedDict()
        #: The dirty entries, by key: what a commit writes, without looking each up in the cache.
        self._dirty: dict[tuple[int, Key], list] = {}
        self._in_transaction = False
        self._connect()

    @property
    def _work(self) -> Path:
        """A folder beside the database for pieces written at a commit, until a snapshot puts
        them in the checkpoint's shared folder, and for chains being put together on restore."""
        return self.path.with_name(self.path.name + ".pieces")

    def _connect(self) -> None:
        path = self.path
        page_cache_kib = self.page_cache_kib
        # A URI connection, so that ATTACH (in restore) accepts read-only URIs.
        self.conn = sqlite3.connect(path.resolve().as_uri(), uri=True, isolation_level=None)
        try:
            # Space freed by deleted state (fired windows) is returned at each commit, so the file
            # and the checkpoint copies of it stay the size of the live state.
            self.conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute(f"PRAGMA cache_size=-{int(page_cache_kib)}")
            self._tables = self._open_tables()
            self._tracking = self._chain() is not None
        except BaseException:
            self.conn.close()
            raise

    def _open_tables(self) -> list[_SqliteValueState | _SqliteTableState]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS clink_meta (name TEXT PRIMARY KEY, value TEXT)")
            conn.execute("CREATE TABLE IF NOT EXISTS clink_states (name TEXT PRIMARY KEY, tbl TEXT NOT NULL, "
                         "signature TEXT NOT NULL)")
            meta = dict(conn.execute("SELECT name, value FROM clink_meta"))
            expected = {"layout": LAYOUT_VERSION, "codec": str(codec.FORMAT_VERSION), "operator": self.operator_id,
                        "max_parallelism": str(self.max_parallelism)}
            if not meta:
                conn.executemany("INSERT INTO clink_meta VALUES (?, ?)", [*expected.items(), ("committed_checkpoint", None)])
            else:
                if meta.get("layout") in ("1", "2"):  # the same tables, upgraded below
                    conn.execute("UPDATE clink_meta SET value = ? WHERE name = 'layout'", (LAYOUT_VERSION,))
                    meta["layout"] = LAYOUT_VERSION
                    # The changes since the last piece were in the value states' change tables,
                    # which go: the next checkpoint starts a new chain.
                    conn.execute("UPDATE clink_meta SET value = NULL WHERE name = 'chain'")
                _check_meta(meta, expected, str(self.path))
            # The pieces of the chain the last checkpoint is made of (JSON; NULL: the next
            # checkpoint starts a new chain with a copy of the whole database).
            conn.execute("INSERT OR IGNORE INTO clink_meta VALUES ('chain', NULL)")
            # The piece being written: the value of ``p`` in the log rows written now.
            conn.execute("INSERT OR IGNORE INTO clink_meta VALUES ('piece', '0')")
            stored = {name: (tbl, sig) for name, tbl, sig in conn.execute("SELECT name, tbl, signature FROM clink_states")}
            tables = []
            for index, (name, d) in enumerate(self.descriptors.items()):
                if name in stored:
                    tbl, sig = stored[name]
                    if sig != d.signature():
                        raise IncompatibleState(f"state {name!r} of operator {self.operator_id!r} is stored in "
                                                f"{self.path} as {sig}, but the operator declares {d.signature()}")
                else:
                    tbl = f"s{len(stored)}"
                    stored[name] = (tbl, d.signature())
                    conn.execute("INSERT INTO clink_states VALUES (?, ?, ?)", (name, tbl, d.signature()))
                    conn.execute(f"CREATE TABLE {tbl} ({_COLUMNS[d.kind][0]}) WITHOUT ROWID")
                    if d.kind != "table":
                        conn.execute(f"CREATE INDEX {tbl}_kg ON {tbl} (kg)")
                if d.kind == "value":
                    conn.execute(f"CREATE TABLE IF NOT EXISTS {tbl}_log ({_LOG}) WITHOUT ROWID")
                    if "p" not in {row[1] for row in conn.execute(f"PRAGMA table_info({tbl}_log)")}:
                        conn.execute(f"ALTER TABLE {tbl}_log ADD COLUMN p INTEGER NOT NULL DEFAULT 0")
                    conn.execute(f"DROP TABLE IF EXISTS {tbl}_chg")  # (up to layout 2)
                else:
                    conn.execute(f"CREATE TABLE IF NOT EXISTS {tbl}_chg ({_CHANGES[d.kind][0]}) WITHOUT ROWID")
                tables.append(_KINDS[d.kind](self, index, tbl, d))  # type: ignore[arg-type]
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return tables

    # -- the cache -----------------------------------------------------------------------------------

    def touch(self, ck: tuple[int, Key]) -> list | None:
        """The cached entry of ``ck`` (now the most recently used), or None."""
        entry = self.cache.get(ck)
        if entry is not None:
            self.cache.move_to_end(ck)
        return entry

    def add(self, ck: tuple[int, Key], entry: list, *, evict: bool = True) -> None:
        """Cache ``entry``, just read from its table (so not dirty), as the most recently used."""
        self.cache[ck] = entry
        if evict:
            self.evict()

    def write_values(self, table: _SqliteValueState, cks: list[tuple[int, Key]], groups: list[int] | None,
                     values: list[Any]) -> None:
        self.merge_if_due()
        cache, dirty = self.cache, self._dirty
        for i, (ck, value) in enumerate(zip(cks, values, strict=True)):
            entry = cache.get(ck)
            if entry is None:
                g = table.keys.group(ck[1]) if groups is None else groups[i]
                entry = cache[ck] = [g, value]
            else:
                cache.move_to_end(ck)
                entry[1] = value
            dirty[ck] = entry
        self.evict()

    def evict(self) -> None:
        """Drop least recently used entries until the cache fits, writing the dirty ones."""
        cache, dirty = self.cache, self._dirty
        if len(cache) <= self.cache_entries:
            return
        writes: dict[int, tuple[list[Key], list[list]]] = {}
        while len(cache) > self.cache_entries and len(cache) > 1:  # the entry in use stays
            ck, entry = cache.popitem(last=False)
            if dirty.pop(ck, None) is not None:
                keys, cached = writes.setdefault(ck[0], ([], []))
                keys.append(ck[1])
                cached.append(entry)
        self._write(writes)

    def _write(self, writes: dict[int, tuple[list[Key], list[list]]]) -> None:
        """Flush each state's keys and their entries (by state index) into the open transaction."""
        if not writes:
            return
        if not self._in_transaction:
            self.conn.execute("BEGIN")
            self._in_transaction = True
        for index, (keys, cached) in writes.items():
            self._tables[index].flush(keys, cached)  # type: ignore[attr-defined]

    def _flush_all(self) -> None:
        """Write every dirty entry (they stay cached, now clean) and every pending table."""
        writes: dict[int, tuple[list[Key], list[list]]] = {}
        if len(self._tables) == 1:  # (the common case: a pass per column, no object per entry)
            if self._dirty:
                writes[0] = ([ck[1] for ck in self._dirty], list(self._dirty.values()))
        else:
            for ck, entry in self._dirty.items():
                keys, cached = writes.setdefault(ck[0], ([], []))
                keys.append(ck[1])
                cached.append(entry)
        self._dirty = {}
        self._write(writes)
        tables = [t for t in self._tables if isinstance(t, _SqliteTableState) and t.pending]
        if tables:
            self._begin()
            for t in tables:
                t.flush()

    def begin(self) -> None:
        """Open the transaction that collects writes until the next commit (if none is open)."""
        self._begin()

    def _begin(self) -> None:
        if not self._in_transaction:
            self.conn.execute("BEGIN")
            self._in_transaction = True

    def _commit(self, checkpoint_id: int | None, *, set_id: bool) -> None:
        self._flush_all()
        self._begin()
        delta = self._cut_piece(checkpoint_id) if self.incremental else None
        if set_id:
            self.conn.execute("UPDATE clink_meta SET value = ? WHERE name = 'committed_checkpoint'",
                              (None if checkpoint_id is None else str(checkpoint_id),))
        self.conn.execute("COMMIT")
        self._in_transaction = False
        if delta is not None:
            self._add_delta(*delta, checkpoint_id)
        # (As a script: a plain execute steps the pragma once, which frees a single page.)
        self.conn.executescript("PRAGMA incremental_vacuum;")
        # Whether the logs are worth merging is decided at the next use of the state, not here:
        # the checkpoint does not wait for it.
        self._merge_due = any(isinstance(t, _SqliteValueState) and t.log_rows for t in self._tables)

    # -- the change logs -------------------------------------------------------------------------------

    def merge_if_due(self) -> bool:
        """Merge the logs into their tables if a commit left them large (see ``merge``); whether
        it did. Only between a commit and the next write, so the merge never holds uncommitted
        changes."""
        if not self._merge_due or self._in_transaction:
            return False
        self._merge_due = False
        for table in self._tables:
            if isinstance(table, _SqliteValueState) and table.log_rows:
                if table.main_rows is None:
                    (table.main_rows,) = self.conn.execute(f"SELECT COUNT(*) FROM {table.tbl}").fetchone()
                if table.log_rows > self.log_fraction * max(table.main_rows, _LOG_FLOOR):
                    return self.merge()
        return False

    def merge(self) -> bool:
        """Move every state's change log into its table, in a transaction of its own; False (and
        the merge put off until after the next commit) if writes since the last commit are open.

        The state does not change (the log's rows hide the table's, before and after), so a crash
        at any moment leaves the state of the last commit, merged or not. The merge writes the
        table's pages the logged keys fall on: at random keys, most of them; that is the cost a
        commit into the table would pay each time, paid once per ``log_fraction`` of changed rows.
        Entries only in the write-back cache are not involved.
        """
        if self._in_transaction:  # the merge must not commit them
            self._merge_due = True
            return False
        self._merge_due = False
        self.fault("after_commit_before_merge")
        self.conn.execute("BEGIN")
        try:
            for table in self._tables:
                if isinstance(table, _SqliteValueState) and table.log_rows:
                    table.merge()
            self.fault("during_merge")
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            for table in self._tables:
                if isinstance(table, _SqliteValueState):
                    table.count_log()
            raise
        self.conn.executescript("PRAGMA incremental_vacuum;")
        return True

    def _drop_cache(self) -> None:
        self.cache.clear()
        self._dirty.clear()
        for table in self._tables:
            if isinstance(table, _SqliteTableState):
                table.clear_all()

    # -- incremental checkpoints ---------------------------------------------------------------------

    def _chain(self) -> list[str] | None:
        (value,) = self.conn.execute("SELECT value FROM clink_meta WHERE name = 'chain'").fetchone()
        return None if value is None else json.loads(value)

    def _set_chain(self, chain: list[str] | None) -> None:
        self.conn.execute("UPDATE clink_meta SET value = ? WHERE name = 'chain'",
                          (None if chain is None else json.dumps(chain),))
        self._tracking = chain is not None

    @property
    def tracking(self) -> bool:
        """Whether table states' writes are recorded in their change tables, and a merge keeps
        the log rows of the piece being written: only when the next piece may be a delta
        (before a base, as on the first checkpoint, the whole database is copied anyway)."""
        return self.incremental and self._tracking

    def clear_chain(self) -> None:
        """Start a new chain at the next commit (its base a copy of the whole database)."""
        self._begin()
        self._clear_changes()
        self._set_chain(None)

    def piece(self) -> int:
        """The piece being written (see the module docstring)."""
        (value,) = self.conn.execute("SELECT value FROM clink_meta WHERE name = 'piece'").fetchone()
        return int(value)

    def _clear_changes(self) -> None:
        """Start the next piece (inside a transaction): value states' log rows written from now
        on belong to it, and the table states' change tables are emptied."""
        self.conn.execute("UPDATE clink_meta SET value = ? WHERE name = 'piece'", (str(self.piece() + 1),))
        for table in self._tables:
            if isinstance(table, _SqliteTableState):
                self.conn.execute(f"DELETE FROM {table.tbl}_chg")

    def _cut_piece(self, checkpoint_id: int | None) -> tuple[str, list[str]] | None:
        """Inside the commit's transaction: end the current piece of the chain. Either a new
        chain starts (its base, a copy of the whole database, is made by the next ``snapshot``),
        and the change tables are emptied in the same transaction; or a delta is due: its name
        and the chain it extends are returned, for ``_add_delta`` once the commit is done."""
        chain = self._chain()
        token = f"{checkpoint_id or 0:08d}.{os.urandom(5).hex()}.{self.path.stem}"
        sizes = [self._piece_bytes.get(name) for name in chain or ()]
        deltas = sum(size or 0 for size in sizes[1:])
        # A new base once the deltas outweigh it (or the chain is long): a restore then reads
        # at most about twice the state, and old pieces can go with the checkpoints that use them.
        if (chain is None or len(chain) > MAX_CHAIN or None in sizes
                or deltas > max(sizes[0] or 0, _SMALL)):
            name = f"{token}.base.sqlite"
            chain = [name]
            self._unpublished = [(name, "base")]
        else:
            return f"{token}.delta.sqlite", chain
        self._clear_changes()
        self._set_chain(chain)
        return None

    def _add_delta(self, name: str, chain: list[str], checkpoint_id: int | None) -> None:
        """After the commit: write the delta ``name`` of the rows changed since the last piece,
        then, in a transaction of its own, add it to the chain and empty the change tables.

        The delta is written by SQL inside SQLite from the committed state (its database
        attached, which SQLite allows only outside a transaction, so not in the commit's). Until
        the chain names it, the committed state still has its changes in the change tables: a
        crash or an error in between leaves a database whose next piece holds them instead, and
        a delta file no chain names, removed with the working folder."""
        target = self._work / name
        try:
            self._write_delta(target, chain, checkpoint_id)
            self.conn.execute("BEGIN")
            try:
                self._clear_changes()
                self._set_chain([*chain, name])
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                self._tracking = True
                raise
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        self._piece_bytes[name] = target.stat().st_size
        self._unpublished.append((name, "delta"))

    def _write_delta(self, target: Path, chain: list[str], checkpoint_id: int | None) -> None:
        """Write the rows changed since the last piece (outside any transaction): for a value
        state the log's rows of the piece (a NULL value: deleted), for a table state its changed
        rows as they are now and the keys of every changed row (a key without a row was
        deleted). The rows go from table to table inside SQLite, the file attached."""
        self._work.mkdir(exist_ok=True)
        target.unlink(missing_ok=True)
        conn = self.conn
        meta = dict(conn.execute("SELECT name, value FROM main.clink_meta"))
        meta.update(chain=None, committed_checkpoint=None if checkpoint_id is None else str(checkpoint_id),
                    piece_base=chain[0], piece_index=str(len(chain)))
        kinds = {t.tbl: t.descriptor.kind for t in self._tables}
        # The states this operator declares (others stay as they are in the base).
        states = [row for row in conn.execute("SELECT name, tbl, signature FROM main.clink_states")
                  if row[1] in kinds]
        with _attached(conn, target.resolve().as_uri(), "delta"):
            # A new file, of no use until whole and fsynced below: no journal needed.
            conn.execute("PRAGMA delta.journal_mode=OFF")
            conn.execute("PRAGMA delta.synchronous=OFF")
            with _transaction(conn):
                conn.execute("CREATE TABLE delta.clink_meta (name TEXT PRIMARY KEY, value TEXT)")
                conn.executemany("INSERT INTO delta.clink_meta VALUES (?, ?)", meta.items())
                conn.execute("CREATE TABLE delta.clink_states (name TEXT PRIMARY KEY, tbl TEXT NOT NULL, "
                             "signature TEXT NOT NULL)")
                conn.executemany("INSERT INTO delta.clink_states VALUES (?, ?, ?)", states)
                piece = self.piece()
                for _, tbl, _ in states:
                    kind = kinds[tbl]
                    if kind == "value":
                        # The log's rows of this piece, as they are now (a merge keeps them), in
                        # the log's order: a scan of the small log, and an append to the delta's.
                        conn.execute(f"CREATE TABLE delta.{tbl}_log ({_DELTA_LOG})")
                        conn.execute(f"INSERT INTO delta.{tbl}_log (kg, k, v) "
                                     f"SELECT kg, k, v FROM main.{tbl}_log WHERE p = ?", (piece,))
                        continue
                    columns, keys, _ = _CHANGES[kind]
                    conn.execute(f"CREATE TABLE delta.{tbl} ({_COLUMNS[kind][0]}) WITHOUT ROWID")
                    conn.execute(f"CREATE TABLE delta.{tbl}_chg ({columns}) WITHOUT ROWID")
                    cols = _COLUMNS[kind][1]
                    conn.execute(f"INSERT INTO delta.{tbl}_chg ({keys}) SELECT {keys} FROM main.{tbl}_chg")
                    # (CROSS JOIN: the few changed keys drive the lookups, whatever the planner
                    # guesses.)
                    picked = ", ".join("t." + c.strip() for c in cols.split(","))
                    conn.execute(f"INSERT INTO delta.{tbl} ({cols}) SELECT {picked} "
                                 f"FROM main.{tbl}_chg AS c CROSS JOIN main.{tbl} AS t USING ({keys})")
        with open(target, "rb+") as f:
            os.fsync(f.fileno())

    def _publish(self, shared: Path) -> None:
        """Put the pieces committed since the last snapshot into ``shared``: a base as a copy of
        the database (SQLite's backup API), a delta by moving its file."""
        if not self._unpublished:
            return
        shared.mkdir(parents=True, exist_ok=True)
        for name, kind in self._unpublished:
            target = shared / name
            if kind == "base":
                _backup(self.conn, target)
                self._piece_bytes[name] = target.stat().st_size
            else:
                shutil.copyfile(self._work / name, target)
                with open(target, "rb+") as f:
                    os.fsync(f.fileno())
                (self._work / name).unlink()
        self._unpublished = []
        fsync_directory(shared)

    # -- the contract ----------------------------------------------------------------------------------

    def _handle(self, name: str, kind: str) -> Any:
        lookup(self.operator_id, self.descriptors, name, kind)
        return self._tables[list(self.descriptors).index(name)]

    def value_state(self, name: str) -> ValueState:
        return self._handle(name, "value")

    def table_state(self, name: str) -> TableState:
        return self._handle(name, "table")

    def entries(self, key_group: int) -> Iterator[tuple[str, Key, Any]]:
        g = check_key_group(key_group, self.max_parallelism)
        self.merge_if_due()
        self._flush_all()
        for table in self._tables:
            if isinstance(table, _SqliteTableState):
                for namespace, rows in table.group_rows(g):
                    yield table.descriptor.name, (namespace,), rows
                continue
            for key, value in table.scan(g):  # type: ignore[attr-defined]
                yield table.descriptor.name, key, value

    def clear(self) -> None:
        self._drop_cache()
        self._begin()
        for table in self._tables:
            self.conn.execute(f"DELETE FROM {table.tbl}")
            if isinstance(table, _SqliteTableState):
                table.clear_all()
            else:
                self.conn.execute(f"DELETE FROM {table.tbl}_log")
                table.log_rows, table.main_rows = 0, None
        if self.incremental:  # the next checkpoint starts a new chain
            self._clear_changes()
            self._set_chain(None)

    def commit(self, checkpoint_id: int) -> None:
        self._commit(int(checkpoint_id), set_id=True)

    @property
    def committed_checkpoint(self) -> int | None:
        (value,) = self.conn.execute("SELECT value FROM clink_meta WHERE name = 'committed_checkpoint'").fetchone()
        return None if value is None else int(value)

    def snapshot(self, directory: str | Path) -> list[Path]:
        if self._dirty or self._in_transaction:
            # Changes since the last commit go into the file too; the database then no longer
            # holds the state of a checkpoint, which the missing id records.
            self._commit(None, set_id=True)
        if self.incremental:
            if self._chain() is None:  # (restored from several snapshots, or cleared and not committed)
                self._commit(self.committed_checkpoint, set_id=False)
            # The pieces live in a folder beside the checkpoint's, shared by every checkpoint
            # that uses them (the checkpoint store counts the references).
            shared = Path(directory).parent / SHARED
            self._publish(shared)
            return [shared / name for name in self._chain()]
        target = Path(directory) / self.path.name
        _backup(self.conn, target)
        return [target]

    def restore(self, files: Sequence[str | Path], *, key_groups: Collection[int] | None = None) -> None:
        conn = self.conn
        if self._in_transaction:
            conn.execute("ROLLBACK")
            self._in_transaction = False
        self._drop_cache()
        self._unpublished = []
        by_name = {t.descriptor.name: t for t in self._tables}
        filter_sql, params = "", []
        if key_groups is not None:
            groups = sorted({check_key_group(g, self.max_parallelism) for g in key_groups})
            filter_sql = f" WHERE kg IN ({','.join('?' * len(groups))})"
            params = groups
        chains = self._chains([Path(f) for f in files])
        #: Whether the last restore took exactly one snapshot (one file, or one whole chain).
        self.restored_one_chain = len(chains) == 1
        if self._recover_locally(chains, key_groups):
            return
        assembled: list[Path] = []
        try:
            self._restore_files(chains, assembled, by_name, key_groups, filter_sql, params)
        finally:
            for path in assembled:
                path.unlink(missing_ok=True)
        if self.incremental:
            # Restored from one whole chain, the next checkpoint goes on with it.
            whole = key_groups is None and len(chains) == 1 and _is_piece(chains[0][0][1], chains[0][0][0])
            conn.execute("BEGIN")
            self._clear_changes()
            self._set_chain([path.name for path, _ in chains[0]] if whole else None)
            conn.execute("COMMIT")
            if whole:
                self._piece_bytes = {path.name: path.stat().st_size for path, _ in chains[0]}

    def _restore_files(self, chains: list[list[tuple[Path, dict]]], assembled: list[Path],
                       by_name: dict, key_groups: Collection[int] | None, filter_sql: str, params: list) -> None:
        conn = self.conn
        sources = []
        for chain in chains:
            if len(chain) == 1:
                sources.append(chain[0][0])
            else:
                assembled.append(self._assemble(chain))
                sources.append(assembled[-1])
        # Checked before anything is removed, so a bad file leaves the state as it was.
        plans = [self._read_snapshot(path, by_name) for path in sources]
        conn.execute("BEGIN")
        try:
            for table in self._tables:
                conn.execute(f"DELETE FROM {table.tbl}")
                if isinstance(table, _SqliteValueState):
                    conn.execute(f"DELETE FROM {table.tbl}_log")
                    table.log_rows, table.main_rows = 0, None
            conn.execute("UPDATE clink_meta SET value = NULL WHERE name = 'committed_checkpoint'")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        for path, copies, _ in plans:
            with _attached(conn, _read_only_uri(path), "snap"):
                logs = {name for (name,) in conn.execute("SELECT name FROM snap.sqlite_master WHERE type = 'table'")}

                def logged(src: str, logs: set[str] = logs) -> bool:
                    return f"{src}_log" in logs

                with _transaction(conn):
                    for src, table in copies:
                        if isinstance(table, _SqliteTableState):
                            self._restore_table(src, table, key_groups)
                            continue
                        cols = _COLUMNS[table.descriptor.kind][1]
                        conn.execute(f"INSERT OR REPLACE INTO main.{table.tbl} ({cols}) "
                                     f"SELECT {cols} FROM snap.{src}{filter_sql}", params)
                        if logged(src):  # a snapshot of layout 2: its log over its table
                            _fold_log(conn, f"snap.{src}_log", f"main.{table.tbl}", filter_sql, params)
        for table in self._tables:
            if isinstance(table, _SqliteTableState):
                table.reload_index()
        ids = {checkpoint for _, _, checkpoint in plans}
        if len(ids) == 1 and None not in ids:  # the state is that of one checkpoint
            conn.execute("UPDATE clink_meta SET value = ? WHERE name = 'committed_checkpoint'", (ids.pop(),))

    def _chains(self, paths: list[Path]) -> list[list[tuple[Path, dict]]]:
        """The snapshots in ``paths`` as chains: a whole-database file alone, or the base of an
        incremental chain followed by its deltas in order. A chain missing a piece is refused."""
        groups: dict[str, list[tuple[int, Path, dict]]] = {}
        for path in paths:
            try:
                with contextlib.closing(sqlite3.connect(_read_only_uri(path), uri=True)) as snap:
                    meta = dict(snap.execute("SELECT name, value FROM clink_meta"))
            except sqlite3.DatabaseError as e:
                raise IncompatibleState(f"{path} is not a readable sqlite-state snapshot: {e}") from e
            if "piece_index" in meta:
                groups.setdefault(meta["piece_base"], []).append((int(meta["piece_index"]), path, meta))
            else:
                groups.setdefault(path.name if _is_piece(meta, path) else str(path), []).append((0, path, meta))
        chains = []
        for base, pieces in groups.items():
            pieces.sort(key=lambda p: p[0])
            if [p[0] for p in pieces] != list(range(len(pieces))) or (len(pieces) > 1 and pieces[0][1].name != base):
                raise IncompatibleState(f"the incremental snapshot of operator {self.operator_id!r} based on {base} "
                                        f"is incomplete: given pieces {[p[1].name for p in pieces]}")
            chains.append([(path, meta) for _, path, meta in pieces])
        return chains

    def _assemble(self, chain: list[tuple[Path, dict]]) -> Path:
        """One whole-database file from a chain: a copy of the base with each delta applied."""
        self._work.mkdir(exist_ok=True)
        target = self._work / f"assemble-{os.urandom(5).hex()}.sqlite"
        shutil.copyfile(chain[0][0], target)
        with contextlib.closing(sqlite3.connect(target.resolve().as_uri(), uri=True, isolation_level=None)) as c:
            c.execute("PRAGMA journal_mode=OFF")
            c.execute("PRAGMA synchronous=OFF")
            tables = {name: tbl for name, tbl in c.execute("SELECT name, tbl FROM clink_states")}
            present = {name for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            c.execute("BEGIN")
            for tbl in tables.values():
                if f"{tbl}_log" in present:  # the base's logs into its tables, before the deltas
                    _fold_log(c, f"main.{tbl}_log", f"main.{tbl}", "", [])
                    c.execute(f"DELETE FROM main.{tbl}_log")
            c.execute("COMMIT")
            for path, meta in chain[1:]:
                with _attached(c, _read_only_uri(path), "d"), _transaction(c):
                    in_delta = {n for (n,) in c.execute("SELECT name FROM d.sqlite_master")}
                    for name, tbl, signature in c.execute("SELECT name, tbl, signature FROM d.clink_states").fetchall():
                        kind = "table" if signature.startswith("table") else "value"
                        target_tbl = tables.get(name)
                        if target_tbl is None:  # a state first declared after the base was made
                            target_tbl = tables[name] = f"s{len(tables)}"
                            c.execute("INSERT INTO clink_states VALUES (?, ?, ?)", (name, target_tbl, signature))
                            c.execute(f"CREATE TABLE {target_tbl} ({_COLUMNS[kind][0]}) WITHOUT ROWID")
                        if kind == "value" and f"{tbl}_log" in in_delta:  # a delta of layout 3
                            _fold_log(c, f"d.{tbl}_log", f"main.{target_tbl}", "", [])
                            continue
                        _, keys, match = _CHANGES[kind]
                        cols = _COLUMNS[kind][1]
                        c.execute(f"DELETE FROM main.{target_tbl} WHERE {match} IN (SELECT {keys} FROM d.{tbl}_chg)")
                        c.execute(f"INSERT INTO main.{target_tbl} ({cols}) SELECT {cols} FROM d.{tbl}")
                    c.execute("UPDATE clink_meta SET value = ? WHERE name = 'committed_checkpoint'",
                              (meta.get("committed_checkpoint"),))
        return target

    def _recover_locally(self, chains: list[list[tuple[Path, dict]]], key_groups: Collection[int] | None) -> bool:
        """Keep the working database a clean stop left instead of restoring, when it holds the
        very state of the snapshot given: the same chain of pieces, the same committed checkpoint,
        and its checksum as recorded at the stop."""
        candidate, self._candidate = self._candidate, None
        if candidate is None:
            self.recovery = None
            return False
        aside, record = candidate
        last = chains[-1][-1][1] if chains else {}
        if key_groups is not None or len(chains) != 1:
            reason = "the operator's key groups changed"
        elif str(record.get("checkpoint")) != str(last.get("committed_checkpoint")):
            reason = (f"it holds checkpoint {record.get('checkpoint')}, the checkpoint restored is "
                      f"{last.get('committed_checkpoint')}")
        elif record.get("chain") != [path.name for path, _ in chains[0]]:
            reason = "it holds other pieces than the checkpoint's"
        elif aside.stat().st_size != record.get("size") or sha256_of(aside) != record.get("sha256"):
            reason = "it does not match its checksum"
        else:
            self.conn.close()
            for stale in ("-wal", "-shm"):
                self.path.with_name(self.path.name + stale).unlink(missing_ok=True)
            os.replace(aside, self.path)
            _sidecar(aside).unlink(missing_ok=True)
            handles = self._tables
            self._connect()
            # The handles operators hold stay valid: they take the reopened database's tables.
            for handle, table in zip(handles, self._tables, strict=True):
                handle.tbl = table.tbl
                if isinstance(handle, _SqliteTableState):
                    handle.reload_index()
                else:
                    handle.count_log()
            self._tables = handles
            self._piece_bytes = {path.name: path.stat().st_size for path, _ in chains[0]}
            self.recovery = "local"
            return True
        aside.unlink(missing_ok=True)
        _sidecar(aside).unlink(missing_ok=True)
        self.recovery = f"the working database was not reused ({reason}); restored from the checkpoint"
        return False

    def _restore_table(self, src: str, table: _SqliteTableState, key_groups: Collection[int] | None) -> None:
        """Append the buckets of snapshot table ``src`` after what ``table`` holds (several
        snapshots merge bucket by bucket), keeping only ``key_groups`` if given."""
        conn = self.conn
        next_seq = dict(conn.execute(f"SELECT ns, MAX(seq) + 1 FROM main.{table.tbl} GROUP BY ns"))
        wanted = None if key_groups is None else pa.array(sorted(set(key_groups)), pa.int32())
        rows = []
        for ns, _, data in conn.execute(f"SELECT ns, seq, data FROM snap.{src} ORDER BY ns, seq"):
            part = _from_ipc(data)
            if wanted is not None:
                part = part.filter(pc.is_in(part[KEY_GROUP], value_set=wanted))
                if part.num_rows == 0:
                    continue
                data = _to_ipc(part)
            seq = next_seq.get(ns, 0)
            next_seq[ns] = seq + 1
            rows.append((ns, seq, part.num_rows, data))
        conn.executemany(f"INSERT INTO main.{table.tbl} (ns, seq, n, data) VALUES (?, ?, ?, ?)", rows)

    def _read_snapshot(self, path: Path, by_name: dict[str, _SqliteValueState | _SqliteTableState]
                       ) -> tuple[Path, list[tuple[str, _SqliteValueState | _SqliteTableState]], str | None]:
        """Check a snapshot file against this operator: which of its tables feed which of ours,
        and the checkpoint it was committed at."""
        try:
            with contextlib.closing(sqlite3.connect(_read_only_uri(path), uri=True)) as snap:
                meta = dict(snap.execute("SELECT name, value FROM clink_meta"))
                states = snap.execute("SELECT name, tbl, signature FROM clink_states").fetchall()
        except sqlite3.DatabaseError as e:
            raise IncompatibleState(f"{path} is not a readable sqlite-state snapshot: {e}") from e
        if meta.get("layout") not in READABLE_LAYOUTS:
            raise IncompatibleState(f"{path} has layout {meta.get('layout')!r}, expected one of "
                                    f"{', '.join(repr(v) for v in READABLE_LAYOUTS)}")
        _check_meta(meta, {"codec": str(codec.FORMAT_VERSION), "max_parallelism": str(self.max_parallelism)},
                    str(path))
        copies = []
        for name, tbl, sig in states:
            table = by_name.get(name)
            if table is None:
                raise IncompatibleState(f"{path} holds state {name!r}, which operator {self.operator_id!r} does "
                                        f"not declare (it declares {sorted(by_name)})")
            if sig != table.descriptor.signature():
                raise IncompatibleState(f"state {name!r} in {path} was stored as {sig}, but operator "
                                        f"{self.operator_id!r} declares {table.descriptor.signature()}")
            copies.append((tbl, table))
        return path, copies, meta.get("committed_checkpoint")

    def close(self) -> None:
        if self.conn is None:
            return
        if self._in_transaction:
            self.conn.execute("ROLLBACK")
            self._in_transaction = False
        self._drop_cache()
        record = None
        if self.local_recovery and self.incremental and not self._unpublished:
            chain, checkpoint = self._chain(), self.committed_checkpoint
            if chain is not None and checkpoint is not None:
                # Everything into the database file, so that it alone is the state, then its
                # checksum beside it: the next start may keep it instead of restoring.
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                record = {"checkpoint": checkpoint, "chain": chain}
        self.conn.close()
        self.conn = None  # type: ignore[assignment]
        if self._candidate is not None:  # never restored into: a job without a checkpoint
            aside = self._candidate[0]
            aside.unlink(missing_ok=True)
            _sidecar(aside).unlink(missing_ok=True)
            self._candidate = None
        shutil.rmtree(self._work, ignore_errors=True)
        if record is not None:
            record.update(size=self.path.stat().st_size, sha256=sha256_of(self.path))
            sidecar = _sidecar(self.path)
            temporary = sidecar.with_name(sidecar.name + ".tmp")
            temporary.write_text(json.dumps(record))
            with temporary.open("rb") as f:
                os.fsync(f.fileno())
            os.replace(temporary, sidecar)


#: The folder beside a checkpoint's directory that holds the pieces of incremental snapshots.
SHARED = "shared"
#: Deltas after which a chain starts again from a new base.
MAX_CHAIN = 16
#: Deltas of a small state may outweigh its base up to this size before a new base is made.
_SMALL = 1 << 20


def _backup(conn: sqlite3.Connection, target: Path) -> None:
    """A consistent copy of ``conn``'s database as one self-contained file, made durable."""
    # A checkpoint id an earlier run began and never completed is used again: what that run
    # left goes, its journal too (a fresh file beside a stale journal is a disk I/O error).
    for stale in (target, *(target.with_name(target.name + s) for s in ("-journal", "-wal", "-shm"))):
        stale.unlink(missing_ok=True)
    copy = sqlite3.connect(str(target))
    try:
        conn.backup(copy)
        copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
    finally:
        copy.close()
    with open(target, "rb+") as f:
        os.fsync(f.fileno())


def _is_piece(meta: dict, path: Path) -> bool:
    """Whether a snapshot file is the base of an incremental chain (its own name first in it)."""
    if "piece_index" in meta:
        return True
    try:
        chain = json.loads(meta.get("chain") or "null")
    except ValueError:
        return False
    return bool(chain) and chain[0] == path.name


def _sidecar(path: Path) -> Path:
    """Beside a working database stopped cleanly: the checkpoint it holds and its checksum."""
    return path.with_name(path.name + ".local")


def _fold_log(conn: sqlite3.Connection, log: str, table: str, filter_sql: str, params: list) -> None:
    """Apply the change log ``log`` to ``table``: its rows upserted, its NULL values deleted."""
    where = filter_sql.replace(" WHERE ", " AND ", 1)
    conn.execute(f"INSERT INTO {table} (kg, k, v) SELECT kg, k, v FROM {log} WHERE v IS NOT NULL{where} "
                 "ORDER BY k ON CONFLICT (k) DO UPDATE SET v = excluded.v", params)
    conn.execute(f"DELETE FROM {table} WHERE k IN (SELECT k FROM {log} WHERE v IS NULL)")


@contextlib.contextmanager
def _attached(conn: sqlite3.Connection, uri: str, alias: str) -> Iterator[None]:
    """The database ``uri`` attached as ``alias`` for the block (outside a transaction: SQLite
    refuses ATTACH and DETACH inside one)."""
    conn.execute(f"ATTACH DATABASE ? AS {alias}", (uri,))
    try:
        yield
    finally:
        conn.execute(f"DETACH DATABASE {alias}")


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """The block as one transaction: committed if it ends, rolled back if it raises."""
    conn.execute("BEGIN")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@functools.cache
def _json_each() -> bool:
    """Whether this SQLite has ``json_each`` (built in since 3.38, and in most builds before)."""
    try:
        with contextlib.closing(sqlite3.connect(":memory:")) as conn:
            return conn.execute("SELECT COUNT(*) FROM json_each('[1, 2]')").fetchone() == (2,)
    except sqlite3.OperationalError:
        return False


def _first_two(row: tuple) -> tuple:
    return row[0], row[1]


def _read_only_uri(path: Path) -> str:
    return f"{path.resolve().as_uri()}?mode=ro"


def _check_meta(meta: dict[str, str], expected: dict[str, str], where: str) -> None:
    for name, value in expected.items():
        if meta.get(name) != value:
            raise IncompatibleState(f"{where} has {name} {meta.get(name)!r}, expected {value!r}")
