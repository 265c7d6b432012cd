"""The ``sqlite`` sink: rows into a table of a SQLite database file, appended or upserted by key.

The table (``table-name``, by default the SQL table's name) is created when missing, with one
column per column of the SQL table; an existing table must have the same column names. Values
are stored as SQLite's own types where there is one (``INTEGER``, ``REAL``, ``TEXT``, ``BLOB``)
and as text that sorts and compares correctly otherwise: ``DECIMAL`` as its exact digits,
``DATE`` as ``2026-01-31``, ``TIME`` as ``12:00:00.500`` and ``TIMESTAMP`` as
``2026-01-31 12:00:00.500`` (as many fraction digits as the type's precision; a
``TIMESTAMP_LTZ`` is written in UTC and ends in ``Z``).

Append or upsert. A table without a primary key takes only inserts: every row is appended. A
table declared with ``PRIMARY KEY (...) NOT ENFORCED`` (``TableSpec.primary_key``) takes an
updating stream, as Flink's upsert sinks do: ``+I`` and ``+U`` insert or replace the row with
that key, ``-D`` deletes it and ``-U`` is ignored (the ``+U`` that follows replaces the row).

Rows are buffered in memory and reach the table in one SQLite transaction: at ``close`` in a run
without checkpoints, at each checkpoint's ``commit`` otherwise. ``pre_commit`` stores the rows of
the checkpoint as Arrow IPC in the staging table ``_clink_pending`` of the same database (durable,
not visible); ``commit`` applies them, deletes them and records the checkpoint in
``_clink_sink_meta`` in one transaction, so a commit done twice, or replayed after a restore,
changes nothing. Output is exactly-once.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from clink.errors import ConnectorError
from clink.runtime import compute as pc
from clink.runtime.connectors.base import Connector, OptionSpec, SinkWriter, TableSpec
from clink.runtime.plan import DELETE, INSERT, ROWKIND_COLUMN, UPDATE_AFTER, UPDATE_BEFORE

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext

__all__ = ["META_TABLE", "PENDING_TABLE", "SQLITE", "SqliteSinkWriter", "check_kinds", "last_change_per_key", "removes", "sqlite_type",
           "sqlite_values"]

#: Staging table: the rows each pre-committed checkpoint holds, as Arrow IPC streams.
PENDING_TABLE = "_clink_pending"
#: Ledger: per table, the newest checkpoint whose rows were applied, the lineage (state
#: directory token) of the job that applied them, and ``undo_after``: the undo log holds every
#: commit of a later checkpoint.
META_TABLE = "_clink_sink_meta"
#: Undo log: one row per applied checkpoint; for an appending table the rowids it added.
UNDO_TABLE = "_clink_undo"
#: Buffered rows, in a keyed table, beyond which the buffer is reduced to the last change per
#: key (then again each time it has doubled): an aggregate that revises a few keys many times
#: keeps a few rows, not every revision, until the next checkpoint.
COMPACT_ROWS = 1 << 16
#: Upper bound of one staged blob; SQLite refuses values over 1 GB by default.
BLOB_BYTES = 64 << 20
#: Seconds to wait for another connection's lock on the database before failing.
BUSY_TIMEOUT_S = 30.0

_KINDS = pa.array([INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE])

SINK_OPTIONS = (
    OptionSpec(name="path", required=True,
               description="the SQLite database file; it and its directory are created when missing"),
    OptionSpec(name="table-name",
               description="the table in the database to write (default: the SQL table's name)"),
)


# --- options --------------------------------------------------------------------------------


def sqlite_type(t: pa.DataType) -> str | None:
    """The SQLite column type that holds values of ``t``, or None when none does.

    >>> sqlite_type(pa.decimal128(10, 2))
    'TEXT'
    """
    if pa.types.is_boolean(t) or (pa.types.is_integer(t) and t != pa.uint64()):
        return "INTEGER"
    if pa.types.is_floating(t) and t != pa.float16():
        return "REAL"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "BLOB"
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_decimal(t)
            or pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_timestamp(t)):
        return "TEXT"
    if pa.types.is_null(t):
        return ""  # no declared type: the column only ever holds NULL
    return None


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "ARRAY"
    if pa.types.is_struct(t):
        return "ROW"
    if pa.types.is_map(t):
        return "MAP"
    return str(t).upper()


def parse_options(options: Mapping[str, str], table_schema: pa.Schema) -> tuple[
        tuple[str, str | None] | None, dict[str, str]]:
    """Parse and check a sqlite table's options: ``(path, table name or None)``, or the errors
    keyed by option."""
    errors: dict[str, str] = {}
    path = options.get("path", "").strip()
    if not path:
        errors["path"] = "the sqlite connector needs a 'path' (the SQLite database file)"
    table = options.get("table-name")
    if table is not None:
        table = table.strip()
        if not table:
            errors["table-name"] = "the table name is empty"
        elif table.lower().startswith(("_clink_", "sqlite_")):
            errors["table-name"] = (f"{table!r} is reserved (for SQLite itself, or for the connector's "
                                    f"{PENDING_TABLE}, {META_TABLE}, {UNDO_TABLE} and other _clink_ tables)")
    for f in table_schema:
        if sqlite_type(f.type) is None:
            errors["connector"] = (f"column {f.name!r} of type {_type_name(f.type)} cannot be stored in "
                                   "SQLite; store a flat value instead (a number, string, bytes, date or time)")
    if errors:
        return None, errors
    return (path, table), {}


def validate(options: Mapping[str, str], table_schema: pa.Schema, role: str) -> dict[str, str]:
    """Check the option values of a sqlite table; returns messages keyed by option."""
    return parse_options(options, table_schema)[1]


# --- values ---------------------------------------------------------------------------------


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sqlite_values(arr: pa.ChunkedArray | pa.Array) -> list:
    """The values of ``arr`` as Python objects sqlite3 stores as the column's SQLite type.

    The conversion to text (decimals, dates, times, timestamps) is one Arrow cast per column.
    """
    t = arr.type
    if pa.types.is_decimal(t) or pa.types.is_date(t) or pa.types.is_time(t):
        arr = pc.cast(arr, pa.string())
    elif pa.types.is_timestamp(t):
        if t.tz is not None:
            arr = pc.cast(arr, pa.timestamp(t.unit, "UTC"))  # the same instant, written in UTC
        arr = pc.cast(arr, pa.string())
    return arr.to_pylist()


def _rows(table: pa.Table) -> Iterator[tuple]:
    """``table``'s rows as tuples for ``executemany``; the columns are converted as a whole."""
    return zip(*(sqlite_values(c) for c in table.columns), strict=True)


def last_change_per_key(changes: pa.Table, key: tuple[str, ...], updating: bool = True) -> pa.Table:
    """The last row of each key in ``changes`` (a changelog if ``updating``, else inserts only:
    each an upsert), in order of arrival: applying it (see ``removes``) gives what applying every
    row in turn gives.

    >>> log = pa.table({"k": [1, 1, 2, 1], "v": [1, 1, 5, 2], "_rowkind": ["+I", "-U", "+I", "+U"]})
    >>> last_change_per_key(log, ("k",)).to_pylist()
    [{'k': 2, 'v': 5, '_rowkind': '+I'}, {'k': 1, 'v': 2, '_rowkind': '+U'}]
    """
    row = "__row"
    while row in key:
        row += "_"
    indexed = changes.select(list(key)).append_column(row, pa.array(np.arange(changes.num_rows, dtype=np.int64)))
    last = indexed.group_by(list(key), use_threads=False).aggregate([(row, "max")]).column(f"{row}_max")
    if len(last) == changes.num_rows:
        return changes  # every key once: nothing to drop, and the order is the arrival order
    return pc.take(changes, pa.array(np.sort(last.to_numpy()), pa.int64()))


def check_kinds(kinds: pa.Array, *, keyed: bool, table: str, sink: str) -> None:
    """Refuse row kinds an upsert sink cannot apply: unknown ones, and any but ``+I`` without a key."""
    bad = pc.invert(pc.is_in(kinds, value_set=_KINDS if keyed else _KINDS[:1]))
    if not pc.any(bad).as_py():
        return
    found = ", ".join(sorted(repr(k) for k in pc.unique(pc.filter(kinds, bad)).to_pylist()))
    if keyed:
        raise ConnectorError(f"table {table!r}: unknown row kinds {found} in a changelog")
    raise ConnectorError(f"table {table!r}: the {sink} sink got {found} rows (updates or deletes), but the "
                         "table declares no PRIMARY KEY to apply them by; without one it only appends inserts")


def removes(last: pa.Table) -> np.ndarray:
    """Which rows of a ``last_change_per_key`` result remove their key: a ``-D``, or a ``-U`` that
    no ``+U`` followed (a filter after the update let the old row through and kept the new one
    back), as Flink's upsert sinks read a ``-U``.

    >>> removes(pa.table({"k": [1, 2, 3], "_rowkind": ["-U", "+U", "-D"]})).tolist()
    [True, False, True]
    """
    kinds = last.column(ROWKIND_COLUMN)
    return pc.or_(pc.equal(kinds, DELETE), pc.equal(kinds, UPDATE_BEFORE)).to_numpy(zero_copy_only=False)


# --- sink -----------------------------------------------------------------------------------


class SqliteSinkWriter(SinkWriter):
    """Buffers rows, and applies them to the SQLite table in one transaction per commit.

    The writer checks at start that an existing table fits (its column names, and its key for a
    keyed table); the table is created, when missing, by the first transaction that writes it,
    so a run that fails before then leaves the database as it was.
    """

    def __init__(self, spec: TableSpec, ctx: RuntimeContext) -> None:
        super().__init__()
        # An updating stream's batches end with the row kind, which is not a column of the table.
        rows_schema = pa.schema(list(spec.schema)[:-1]) if spec.updating else spec.schema
        parsed, errors = parse_options(spec.options, rows_schema)
        if parsed is None:
            details = "; ".join(f"'{k}': {v}" for k, v in errors.items())
            raise ConnectorError(f"table {spec.name!r}: bad sqlite options: {details}")
        self._path, table = parsed
        self._key = spec.primary_key
        self._name = spec.name
        self._table = table or spec.name
        self._schema = spec.schema
        self._updating = spec.updating
        self._columns = rows_schema.names
        for name in self._key:
            if name not in self._columns:
                raise ConnectorError(f"table {spec.name!r}: primary key column {name!r} is not a column of the "
                                     "table")
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_rows = 0
        self._compact_at = COMPACT_ROWS
        self._conn: sqlite3.Connection | None = None
        #: The state directory's token (from ``recover``), recorded with each commit.
        self._lineage = ""
        # Commits undone by a restore from an older checkpoint: as many as the job keeps
        # checkpoints to fall back to, and one more.
        self._undo_kept = int(ctx.get("state.checkpoints.num-retained") or 3) + 1
        self._accept_duplicates = (ctx.get("execution.recovery.accept-duplicates") or "").lower() == "true"
        token = hashlib.sha256(self._table.encode()).hexdigest()[:12]
        #: Keyed tables: the keys each checkpoint touched, and their rows before it.
        self._undo_keys = f"_clink_undo_keys_{token}"
        self._undo_rows = f"_clink_undo_rows_{token}"
        self.metrics["rows_out"] = 0
        try:
            if folder := os.path.dirname(self._path):
                os.makedirs(folder, exist_ok=True)
            self._check_existing_table(self._connect())
        except (OSError, sqlite3.Error) as e:
            self._disconnect()
            raise ConnectorError(f"table {self._name!r}: cannot open the SQLite database {self._path!r}: {e}") from None
        except ConnectorError:
            self._disconnect()
            raise

    # -- the database

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            # Autocommit mode: every transaction is an explicit BEGIN IMMEDIATE ... COMMIT.
            self._conn = sqlite3.connect(self._path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self._conn.execute("PRAGMA synchronous = FULL")  # a committed transaction survives a power cut
        return self._conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    @contextlib.contextmanager
    def _transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One SQLite write transaction; a SQLite error becomes a ``ConnectorError`` saying what
        was being done, after the transaction is rolled back."""
        try:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise ConnectorError(f"table {self._name!r}: cannot {doing} in {self._path!r}: {e}") from None
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as e:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.Error):
                raise ConnectorError(f"table {self._name!r}: cannot {doing} in SQLite table {self._table!r} "
                                     f"of {self._path!r}: {e}") from None
            raise

    def _check_existing_table(self, conn: sqlite3.Connection) -> None:
        info = conn.execute(f"PRAGMA table_info({_quote(self._table)})").fetchall()
        if not info:
            return
        existing = [row[1] for row in info]
        if {n.lower() for n in existing} != {n.lower() for n in self._columns}:
            raise ConnectorError(
                f"table {self._name!r}: the SQLite table {self._table!r} in {self._path!r} has the columns "
                f"({', '.join(existing)}), but the SQL table has ({', '.join(self._columns)}); "
                "use another 'table-name', or drop or alter the SQLite table")
        if not self._key:
            return
        wanted = {n.lower() for n in self._key}
        unique = [{row[1].lower() for row in info if row[5]}]
        for index in conn.execute(f"PRAGMA index_list({_quote(self._table)})").fetchall():
            if index[2]:  # a unique index
                unique.append({r[2].lower() for r in conn.execute(f"PRAGMA index_info({_quote(index[1])})")})
        if wanted not in unique:
            declared = ", ".join(row[1] for row in sorted(info, key=lambda r: r[5]) if row[5]) or "none"
            raise ConnectorError(
                f"table {self._name!r}: the SQLite table {self._table!r} in {self._path!r} has the primary key "
                f"({declared}), but the SQL table declares PRIMARY KEY ({', '.join(self._key)}); upserts need "
                "that key to be the table's primary key (or a unique index)")

    def _create_table(self, conn: sqlite3.Connection) -> None:
        columns = [f"{_quote(f.name)} {sqlite_type(f.type)}".rstrip()
                   for f in self._schema if f.name in self._columns]
        if self._key:
            columns.append(f"PRIMARY KEY ({', '.join(_quote(k) for k in self._key)})")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {_quote(self._table)} ({', '.join(columns)})")

    @staticmethod
    def _create_staging(conn: sqlite3.Connection) -> None:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {PENDING_TABLE} (tbl TEXT NOT NULL, checkpoint INTEGER NOT NULL, "
                     "seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (tbl, checkpoint, seq))")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {META_TABLE} (tbl TEXT PRIMARY KEY, committed INTEGER NOT NULL, "
                     "lineage TEXT NOT NULL DEFAULT '', undo_after INTEGER NOT NULL DEFAULT 0)")
        columns = {row[1] for row in conn.execute(f"PRAGMA table_info({META_TABLE})")}
        if "lineage" not in columns:
            # A ledger from before the undo log: nothing committed so far can be undone.
            conn.execute(f"ALTER TABLE {META_TABLE} ADD COLUMN lineage TEXT NOT NULL DEFAULT ''")
            conn.execute(f"ALTER TABLE {META_TABLE} ADD COLUMN undo_after INTEGER NOT NULL DEFAULT 0")
            conn.execute(f"UPDATE {META_TABLE} SET undo_after = committed")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {UNDO_TABLE} (tbl TEXT NOT NULL, checkpoint INTEGER NOT NULL, "
                     "lo INTEGER, hi INTEGER, PRIMARY KEY (tbl, checkpoint))")

    def _create_undo(self, conn: sqlite3.Connection) -> None:
        """The keyed table's undo tables: its key columns (and all its columns), plus the checkpoint."""
        keys = ", ".join(_quote(k) for k in self._key)
        conn.execute(f"CREATE TABLE IF NOT EXISTS {_quote(self._undo_keys)} AS SELECT {keys}, 0 AS _clink_checkpoint "
                     f"FROM {_quote(self._table)} WHERE 0")
        conn.execute(f"CREATE INDEX IF NOT EXISTS {_quote(self._undo_keys + '_by')} ON {_quote(self._undo_keys)} "
                     f"(_clink_checkpoint, {keys})")
        names = ", ".join(_quote(c) for c in self._columns)
        conn.execute(f"CREATE TABLE IF NOT EXISTS {_quote(self._undo_rows)} AS SELECT {names}, 0 AS _clink_checkpoint "
                     f"FROM {_quote(self._table)} WHERE 0")

    def _apply(self, conn: sqlite3.Connection, changes: pa.Table, checkpoint_id: int | None = None) -> None:
        """Apply ``changes`` (batches of the sink's schema, in order) to the table; with a
        ``checkpoint_id``, first log what undoes them."""
        self._create_table(conn)
        if changes.num_rows == 0:
            return
        table = _quote(self._table)
        names = ", ".join(_quote(c) for c in self._columns)
        marks = ", ".join("?" * len(self._columns))
        if not self._key:
            rows = changes.drop_columns([ROWKIND_COLUMN]) if self._updating else changes
            (lo,) = conn.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {table}").fetchone()
            conn.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", _rows(rows))
            if checkpoint_id is not None:
                # New rows take rowids above the largest (nothing else writes while we hold the lock).
                (hi,) = conn.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {table}").fetchone()
                conn.execute(f"INSERT OR REPLACE INTO {UNDO_TABLE} (tbl, checkpoint, lo, hi) VALUES (?, ?, ?, ?)",
                             (self._table, checkpoint_id, lo, hi))
            return
        last = last_change_per_key(changes, self._key, self._updating)
        if checkpoint_id is not None:
            self._log_before_images(conn, last.select(list(self._key)), checkpoint_id)
        if not self._updating:
            # An insert-only stream into a keyed table: every row is an upsert.
            conn.executemany(f"INSERT OR REPLACE INTO {table} ({names}) VALUES ({marks})",
                             _rows(last.select(self._columns)))
            return
        deleted = pa.array(removes(last))
        gone = pc.filter(last.select(list(self._key)), deleted)
        kept = pc.filter(last.select(self._columns), pc.invert(deleted))
        # Keys are unique in ``last``: deletes and upserts touch different rows, in either order.
        if gone.num_rows:
            where = " AND ".join(f"{_quote(k)} = ?" for k in self._key)
            conn.executemany(f"DELETE FROM {_quote(self._table)} WHERE {where}", _rows(gone))
        if kept.num_rows:
            conn.executemany(f"INSERT OR REPLACE INTO {_quote(self._table)} ({names}) VALUES ({marks})", _rows(kept))

    def _log_before_images(self, conn: sqlite3.Connection, keys: pa.Table, checkpoint_id: int) -> None:
        """Record the keys checkpoint ``checkpoint_id`` changes, and their rows before it."""
        self._create_undo(conn)
        key_names = ", ".join(_quote(k) for k in self._key)
        conn.executemany(f"INSERT INTO {_quote(self._undo_keys)} ({key_names}, _clink_checkpoint) VALUES "
                         f"({', '.join('?' * len(self._key))}, {int(checkpoint_id)})", _rows(keys))
        match = " AND ".join(f"u.{_quote(k)} = t.{_quote(k)}" for k in self._key)
        names = ", ".join(f"t.{_quote(c)}" for c in self._columns)
        conn.execute(f"INSERT INTO {_quote(self._undo_rows)} SELECT {names}, ? FROM {_quote(self._table)} t WHERE "
                     f"EXISTS (SELECT 1 FROM {_quote(self._undo_keys)} u WHERE u._clink_checkpoint = ? AND {match})",
                     (checkpoint_id, checkpoint_id))
        conn.execute(f"INSERT OR REPLACE INTO {UNDO_TABLE} (tbl, checkpoint, lo, hi) VALUES (?, ?, NULL, NULL)",
                     (self._table, checkpoint_id))

    def _undo(self, conn: sqlite3.Connection, checkpoint_id: int, lo: int | None, hi: int | None) -> None:
        """Take back what checkpoint ``checkpoint_id`` applied (later ones are undone already)."""
        table = _quote(self._table)
        if not self._key:
            conn.execute(f"DELETE FROM {table} WHERE rowid > ? AND rowid <= ?", (lo, hi))
            return
        match = " AND ".join(f"u.{_quote(k)} = {table}.{_quote(k)}" for k in self._key)
        conn.execute(f"DELETE FROM {table} WHERE EXISTS (SELECT 1 FROM {_quote(self._undo_keys)} u "
                     f"WHERE u._clink_checkpoint = ? AND {match})", (checkpoint_id,))
        names = ", ".join(_quote(c) for c in self._columns)
        conn.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {_quote(self._undo_rows)} "
                     "WHERE _clink_checkpoint = ?", (checkpoint_id,))

    def _forget_undo(self, conn: sqlite3.Connection, *, after: int | None = None, upto: int | None = None) -> None:
        """Drop undo records of checkpoints ``> after`` or ``<= upto``."""
        op, arg = (">", after) if after is not None else ("<=", upto)
        conn.execute(f"DELETE FROM {UNDO_TABLE} WHERE tbl = ? AND checkpoint {op} ?", (self._table, arg))
        for shadow in (self._undo_keys, self._undo_rows):
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (shadow,)).fetchone():
                conn.execute(f"DELETE FROM {_quote(shadow)} WHERE _clink_checkpoint {op} ?", (arg,))

    # -- rows

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.schema != self._schema:
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=self._schema)  # nullability, metadata
        if self._updating and batch.num_rows:
            check_kinds(batch.column(ROWKIND_COLUMN), keyed=bool(self._key), table=self._name, sink="sqlite")
        self.metrics["rows_out"] += batch.num_rows
        if batch.num_rows == 0:
            return
        self._buffer.append(batch)
        self._buffered_rows += batch.num_rows
        if self._key and self._buffered_rows >= self._compact_at:
            reduced = last_change_per_key(self._buffered(), self._key, self._updating)
            self._buffer = reduced.to_batches()
            self._buffered_rows = reduced.num_rows
            self._compact_at = max(COMPACT_ROWS, 2 * reduced.num_rows)

    def _buffered(self) -> pa.Table:
        return pa.Table.from_batches(self._buffer, schema=self._schema)

    def _take_buffer(self) -> pa.Table:
        table = self._buffered()
        if self._key and table.num_rows:
            table = last_change_per_key(table, self._key, self._updating)
        self._buffer = []
        self._buffered_rows = 0
        self._compact_at = COMPACT_ROWS
        return table

    def close(self) -> None:
        if self._conn is None and not self._buffer:
            return  # closed already
        try:
            changes = self._take_buffer()
            with self._transaction("write the rows") as conn:
                self._apply(conn, changes)
        finally:
            self._disconnect()

    def abort(self) -> None:
        self._buffer = []
        self._buffered_rows = 0
        self._disconnect()

    # -- two-phase commit: the staging table holds each checkpoint's rows until its commit

    def pre_commit(self, checkpoint_id: int) -> dict:
        changes = self._take_buffer()
        if changes.num_rows:
            row_bytes = max(1, changes.nbytes // changes.num_rows)
            blobs = [_ipc_bytes(b) for b in changes.to_batches(max_chunksize=max(1, BLOB_BYTES // row_bytes))]
            with self._transaction(f"stage the rows of checkpoint {checkpoint_id}") as conn:
                self._create_staging(conn)
                (last,) = conn.execute(f"SELECT COALESCE(MAX(seq), 0) FROM {PENDING_TABLE} WHERE tbl = ?",
                                       (self._table,)).fetchone()
                conn.executemany(f"INSERT INTO {PENDING_TABLE} (tbl, checkpoint, seq, data) VALUES (?, ?, ?, ?)",
                                 [(self._table, checkpoint_id, last + 1 + i, blob) for i, blob in enumerate(blobs)])
        return {"table": self._table, "rows": changes.num_rows}

    def commit(self, checkpoint_id: int, handle: dict | None) -> None:
        if not self._has_staged(checkpoint_id):
            return  # nothing to apply: an empty checkpoint leaves the database as it is
        with self._transaction(f"commit checkpoint {checkpoint_id}") as conn:
            self._commit_staged(conn, checkpoint_id)

    def _has_staged(self, checkpoint_id: int) -> bool:
        """Whether rows of checkpoints up to ``checkpoint_id`` are staged (read without locking)."""
        conn = self._connect()
        try:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (PENDING_TABLE,)).fetchone() is None:
                return False
            return conn.execute(f"SELECT 1 FROM {PENDING_TABLE} WHERE tbl = ? AND checkpoint <= ? LIMIT 1",
                                (self._table, checkpoint_id)).fetchone() is not None
        except sqlite3.Error as e:
            raise ConnectorError(f"table {self._name!r}: cannot read the staged rows in {self._path!r}: {e}") from None

    def _commit_staged(self, conn: sqlite3.Connection, checkpoint_id: int) -> None:
        """Inside a transaction: apply the staged rows of checkpoints up to ``checkpoint_id`` unless
        the ledger says they were applied already, then delete them."""
        self._create_staging(conn)
        row = conn.execute(f"SELECT committed, undo_after FROM {META_TABLE} WHERE tbl = ?", (self._table,)).fetchone()
        committed, undo_after = row if row else (0, 0)
        if checkpoint_id > committed:
            blobs = conn.execute(f"SELECT checkpoint, data FROM {PENDING_TABLE} WHERE tbl = ? AND checkpoint <= ? "
                                 "ORDER BY checkpoint, seq", (self._table, checkpoint_id)).fetchall()
            if blobs:
                changes = pa.concat_tables([self._read_staged(c, b) for c, b in blobs])
                self._apply(conn, changes, checkpoint_id)
                horizon = checkpoint_id - self._undo_kept
                if horizon > undo_after:
                    self._forget_undo(conn, upto=horizon)
                    undo_after = horizon
                conn.execute(f"INSERT OR REPLACE INTO {META_TABLE} (tbl, committed, lineage, undo_after) "
                             "VALUES (?, ?, ?, ?)", (self._table, checkpoint_id, self._lineage, undo_after))
        # Applied now, or before (rows staged again by a replay after falling back): gone either way.
        conn.execute(f"DELETE FROM {PENDING_TABLE} WHERE tbl = ? AND checkpoint <= ?", (self._table, checkpoint_id))

    def _read_staged(self, checkpoint_id: int, blob: bytes) -> pa.Table:
        table = pa.ipc.open_stream(blob).read_all()
        if table.schema.names != self._schema.names:
            raise ConnectorError(
                f"table {self._name!r}: the rows staged for checkpoint {checkpoint_id} in {self._path!r} have the "
                f"columns ({', '.join(table.schema.names)}), but the sink has ({', '.join(self._schema.names)})")
        try:
            return pa.Table.from_arrays(table.columns, schema=self._schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
            raise ConnectorError(f"table {self._name!r}: the rows staged for checkpoint {checkpoint_id} in "
                                 f"{self._path!r} do not have the sink's column types: {e}") from None

    def recover(self, checkpoint_id: int, handle: dict | None, *, lineage: str = "") -> str | None:
        self._lineage = lineage
        with self._transaction(f"recover checkpoint {checkpoint_id}") as conn:
            self._create_staging(conn)
            # Rows staged after the checkpoint are replayed from the sources: discard them.
            conn.execute(f"DELETE FROM {PENDING_TABLE} WHERE tbl = ? AND checkpoint > ?", (self._table, checkpoint_id))
            note = None
            row = conn.execute(f"SELECT committed, lineage, undo_after FROM {META_TABLE} WHERE tbl = ?",
                               (self._table,)).fetchone()
            if row is not None and row[1] != lineage:
                # Committed by another state directory's job: its rows are the table's data now.
                conn.execute(f"DELETE FROM {META_TABLE} WHERE tbl = ?", (self._table,))
                self._forget_undo(conn, upto=row[0])
            elif row is not None and row[0] > checkpoint_id:
                note = self._roll_back(conn, checkpoint_id, *row[::2])
            if checkpoint_id == 0:
                # No checkpoint: the job starts afresh, and so do its checkpoint ids.
                conn.execute(f"DELETE FROM {META_TABLE} WHERE tbl = ?", (self._table,))
            else:
                self._commit_staged(conn, checkpoint_id)
        return note

    def _roll_back(self, conn: sqlite3.Connection, checkpoint_id: int, committed: int, undo_after: int) -> str:
        """Undo the commits of checkpoints after ``checkpoint_id``, newest first: the run
        resumes from ``checkpoint_id`` and writes their rows again."""
        resumed = f"checkpoint {checkpoint_id}" if checkpoint_id else "the start"
        if checkpoint_id < undo_after:
            message = (f"table {self._name!r}: the SQLite table {self._table!r} in {self._path!r} holds rows of "
                       f"checkpoints up to {committed}, committed after {resumed} which this run resumes from, "
                       f"and only those after checkpoint {undo_after} can be rolled back")
            if not self._accept_duplicates:
                raise ConnectorError(f"{message}; resuming would write them twice. Set "
                                     "'execution.recovery.accept-duplicates' = 'true' to resume anyway")
            conn.execute(f"UPDATE {META_TABLE} SET committed = ?, undo_after = ? WHERE tbl = ?",
                         (checkpoint_id, checkpoint_id, self._table))
            self._forget_undo(conn, after=checkpoint_id)
            return f"{message}; resuming anyway ('execution.recovery.accept-duplicates'): rows may repeat"
        undone = conn.execute(f"SELECT checkpoint, lo, hi FROM {UNDO_TABLE} WHERE tbl = ? AND checkpoint > ? "
                              "ORDER BY checkpoint DESC", (self._table, checkpoint_id)).fetchall()
        for n, lo, hi in undone:
            self._undo(conn, n, lo, hi)
        self._forget_undo(conn, after=checkpoint_id)
        conn.execute(f"UPDATE {META_TABLE} SET committed = ? WHERE tbl = ?", (checkpoint_id, self._table))
        ids = ", ".join(str(n) for n, _, _ in reversed(undone)) or "none"
        return (f"table {self._name!r}: rolled back what checkpoint(s) {ids} wrote to the SQLite table "
                f"{self._table!r}, committed after {resumed} which this run resumes from; those rows are written again")


def _ipc_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


SQLITE = Connector(
    name="sqlite",
    description="rows into a table of a SQLite database file; upserts by PRIMARY KEY, exactly-once",
    sink_options=SINK_OPTIONS,
    create_sink=SqliteSinkWriter,
    validate=validate,
    upserts=True,
)
