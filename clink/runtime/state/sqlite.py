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
entries are written when evicted. Everything written since the last ``commit`` sits in one open
transaction, so the database file always holds the state as of the last commit: ``commit``
writes the dirty entries and the checkpoint id and commits, durably.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import sqlite3
import urllib.parse
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from clink.runtime import compute as pc
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

#: Version of the table layout (``clink_meta.layout``).
LAYOUT_VERSION = "1"
#: Parameters per statement stay below SQLite's default limit (32766 since 3.32).
_CHUNK = 500


class SqliteStateBackend(StateBackend):
    """Durable keyed state in SQLite files under ``directory``, larger than memory.

    ``cache_entries`` bounds the write-back cache (see the module docstring); a single batch may
    exceed it while it is processed. ``page_cache_kib`` is SQLite's own page cache per database.
    """

    def __init__(self, directory: str | Path, *, cache_entries: int = 100_000,
                 max_parallelism: int = DEFAULT_MAX_PARALLELISM, page_cache_kib: int = 65_536,
                 table_cache_bytes: int = 64 << 20) -> None:
        if max_parallelism <= 0:
            raise ValueError(f"max_parallelism must be positive, got {max_parallelism}")
        if cache_entries < 0:
            raise ValueError(f"cache_entries must be at least 0, got {cache_entries}")
        self.directory = Path(directory)
        self.cache_entries = cache_entries
        self.max_parallelism = max_parallelism
        self.page_cache_kib = page_cache_kib
        self.table_cache_bytes = table_cache_bytes

    def path_of(self, operator_id: str) -> Path:
        """The database file of ``operator_id``."""
        return self.directory / f"{urllib.parse.quote(operator_id, safe='-_')}.sqlite"

    def open(self, operator_id: str, descriptors: Iterable[StateDescriptor]) -> SqliteOperatorState:
        self.directory.mkdir(parents=True, exist_ok=True)
        return SqliteOperatorState(self.path_of(operator_id), operator_id, descriptor_map(operator_id, descriptors),
                                   max_parallelism=self.max_parallelism, cache_entries=self.cache_entries,
                                   page_cache_kib=self.page_cache_kib, table_cache_bytes=self.table_cache_bytes)


class _SqliteValueState(ValueState):
    """One state's table, codecs and handle logic; entries live in the operator's shared cache,
    each ``[key group, value or None]``."""

    def __init__(self, owner: SqliteOperatorState, index: int, tbl: str, descriptor: ValueStateDescriptor) -> None:
        self.owner = owner
        self.index = index
        self.tbl = tbl
        self.descriptor = descriptor
        self.keys = KeyHelper(descriptor.key_schema, owner.max_parallelism)
        self.encode_key = codec.row_encoder(descriptor.key_schema.types, canonical=True)
        self.decode_key = codec.row_decoder(descriptor.key_schema.types)
        self.encode_value = codec.encoder(descriptor.value_type)
        self.decode_value = codec.decoder(descriptor.value_type)

    def ckey(self, key: Any) -> tuple[int, Key]:
        return (self.index, self.keys.key(key))

    def get(self, key: Any) -> Any:
        owner = self.owner
        ck = self.ckey(key)
        entry = owner.touch(ck)
        if entry is None:
            row = owner.conn.execute(f"SELECT v FROM {self.tbl} WHERE k = ?", (self.encode_key(ck[1]),)).fetchone()
            entry = [self.keys.group(ck[1]), None if row is None else self.decode_value(row[0])]
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
            blobs = {self.encode_key(k): k for k in missing}
            found: dict[Key, Any] = {}
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

    def flush(self, entries: list[tuple[Key, list]]) -> None:
        conn = self.owner.conn
        upserts = [(e[0], self.encode_key(k), self.encode_value(e[1])) for k, e in entries if e[1] is not None]
        deletes = [(self.encode_key(k),) for k, e in entries if e[1] is None]
        if upserts:
            upserts.sort(key=_second)  # in key order, so the B-tree is written page by page
            conn.executemany(f"INSERT OR REPLACE INTO {self.tbl} (kg, k, v) VALUES (?, ?, ?)", upserts)
        if deletes:
            conn.executemany(f"DELETE FROM {self.tbl} WHERE k = ?", deletes)

    def scan(self, key_group: int) -> Iterator[tuple[Key, Any]]:
        for kb, vb in self.owner.conn.execute(f"SELECT k, v FROM {self.tbl} WHERE kg = ?", (key_group,)).fetchall():
            yield self.keys.key(self.decode_key(kb)), self.decode_value(vb)


class _SqliteTableState(TableState):
    """Buckets as rows ``(ns, seq, n, data)`` of one table, ``data`` one added table as an Arrow
    IPC stream.

    Tables added since the last write wait in memory (``pending``) until the owner writes them:
    at ``commit``, or when pending and cached tables together pass ``table_cache_bytes``. Written
    tables stay cached (``clean``, whole buckets only, oldest bucket evicted first) while they
    fit, so a bucket read soon after a checkpoint is not read back from disk. What each bucket
    holds on disk (parts, rows) is indexed in memory, so listing buckets reads nothing.
    """

    def __init__(self, owner: SqliteOperatorState, index: int, tbl: str, descriptor: TableStateDescriptor) -> None:
        self.owner = owner
        self.index = index
        self.tbl = tbl
        self.descriptor = descriptor
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
        # (Stored tables of more than _BLOB_ROWS rows count as several parts after a reopen.)
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
        budget = self.owner.table_cache_bytes
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
            for table in tables:
                # A large table goes in slices, so no single blob (and no single read) is huge.
                for lo in range(0, table.num_rows, _BLOB_ROWS):
                    piece = table.slice(lo, _BLOB_ROWS)
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


#: Rows per stored blob of table state.
_BLOB_ROWS = 1 << 16


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


class SqliteOperatorState(OperatorState):
    """The states of one operator in one SQLite database (see the module docstring)."""

    def __init__(self, path: Path, operator_id: str, descriptors: dict[str, StateDescriptor], *,
                 max_parallelism: int, cache_entries: int, page_cache_kib: int,
                 table_cache_bytes: int = 64 << 20) -> None:
        self.path = path
        self.operator_id = operator_id
        self.descriptors = descriptors
        self.max_parallelism = max_parallelism
        self.cache_entries = cache_entries
        self.table_cache_bytes = table_cache_bytes
        #: (state index, key) -> entry; least recently used first.
        self.cache: OrderedDict[tuple[int, Key], list] = OrderedDict()
        self._dirty: set[tuple[int, Key]] = set()
        self._in_transaction = False
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
                _check_meta(meta, expected, str(self.path))
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
        cache, dirty = self.cache, self._dirty
        for i, (ck, value) in enumerate(zip(cks, values, strict=True)):
            entry = cache.get(ck)
            if entry is None:
                g = table.keys.group(ck[1]) if groups is None else groups[i]
                cache[ck] = [g, value]
            else:
                cache.move_to_end(ck)
                entry[1] = value
            dirty.add(ck)
        self.evict()

    def evict(self) -> None:
        """Drop least recently used entries until the cache fits, writing the dirty ones."""
        cache, dirty = self.cache, self._dirty
        if len(cache) <= self.cache_entries:
            return
        writes: dict[int, list[tuple[Key, list]]] = {}
        while len(cache) > self.cache_entries and len(cache) > 1:  # the entry in use stays
            ck, entry = cache.popitem(last=False)
            if ck in dirty:
                dirty.discard(ck)
                writes.setdefault(ck[0], []).append((ck[1], entry))
        self._write(writes)

    def _write(self, writes: dict[int, list[tuple[Key, list]]]) -> None:
        if not writes:
            return
        if not self._in_transaction:
            self.conn.execute("BEGIN")
            self._in_transaction = True
        for index, entries in writes.items():
            self._tables[index].flush(entries)  # type: ignore[attr-defined]

    def _flush_all(self) -> None:
        """Write every dirty entry (they stay cached, now clean) and every pending table."""
        writes: dict[int, list[tuple[Key, list]]] = {}
        for ck in self._dirty:
            writes.setdefault(ck[0], []).append((ck[1], self.cache[ck]))
        self._dirty.clear()
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
        if set_id:
            self.conn.execute("UPDATE clink_meta SET value = ? WHERE name = 'committed_checkpoint'",
                              (None if checkpoint_id is None else str(checkpoint_id),))
        self.conn.execute("COMMIT")
        self._in_transaction = False
        # (As a script: a plain execute steps the pragma once, which frees a single page.)
        self.conn.executescript("PRAGMA incremental_vacuum;")

    def _drop_cache(self) -> None:
        self.cache.clear()
        self._dirty.clear()
        for table in self._tables:
            if isinstance(table, _SqliteTableState):
                table.clear_all()

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
        target = Path(directory) / self.path.name
        # A checkpoint id an earlier run began and never completed is used again: what that run
        # left goes, its journal too (a fresh file beside a stale journal is a disk I/O error).
        for stale in (target, *(target.with_name(target.name + s) for s in ("-journal", "-wal", "-shm"))):
            stale.unlink(missing_ok=True)
        copy = sqlite3.connect(str(target))
        try:
            self.conn.backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
        finally:
            copy.close()
        with open(target, "rb+") as f:
            os.fsync(f.fileno())
        return [target]

    def restore(self, files: Sequence[str | Path], *, key_groups: Collection[int] | None = None) -> None:
        conn = self.conn
        if self._in_transaction:
            conn.execute("ROLLBACK")
            self._in_transaction = False
        self._drop_cache()
        by_name = {t.descriptor.name: t for t in self._tables}
        filter_sql, params = "", []
        if key_groups is not None:
            groups = sorted({check_key_group(g, self.max_parallelism) for g in key_groups})
            filter_sql = f" WHERE kg IN ({','.join('?' * len(groups))})"
            params = groups
        # Checked before anything is removed, so a bad file leaves the state as it was.
        plans = [self._read_snapshot(Path(f), by_name) for f in files]
        conn.execute("BEGIN")
        try:
            for table in self._tables:
                conn.execute(f"DELETE FROM {table.tbl}")
            conn.execute("UPDATE clink_meta SET value = NULL WHERE name = 'committed_checkpoint'")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        for path, copies, _ in plans:
            conn.execute("ATTACH DATABASE ? AS snap", (_read_only_uri(path),))
            try:
                conn.execute("BEGIN")
                for src, table in copies:
                    if isinstance(table, _SqliteTableState):
                        self._restore_table(src, table, key_groups)
                        continue
                    cols = _COLUMNS[table.descriptor.kind][1]
                    conn.execute(f"INSERT OR REPLACE INTO main.{table.tbl} ({cols}) "
                                 f"SELECT {cols} FROM snap.{src}{filter_sql}", params)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            finally:
                conn.execute("DETACH DATABASE snap")
        for table in self._tables:
            if isinstance(table, _SqliteTableState):
                table.reload_index()
        ids = {checkpoint for _, _, checkpoint in plans}
        if len(ids) == 1 and None not in ids:  # the state is that of one checkpoint
            conn.execute("UPDATE clink_meta SET value = ? WHERE name = 'committed_checkpoint'", (ids.pop(),))

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
        _check_meta(meta, {"layout": LAYOUT_VERSION, "codec": str(codec.FORMAT_VERSION),
                           "max_parallelism": str(self.max_parallelism)}, str(path))
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
        self.conn.close()
        self.conn = None  # type: ignore[assignment]


def _second(row: tuple) -> Any:
    return row[1]


def _read_only_uri(path: Path) -> str:
    return f"{path.resolve().as_uri()}?mode=ro"


def _check_meta(meta: dict[str, str], expected: dict[str, str], where: str) -> None:
    for name, value in expected.items():
        if meta.get(name) != value:
            raise IncompatibleState(f"{where} has {name} {meta.get(name)!r}, expected {value!r}")
