"""The ``push`` source: rows that the application running the pipeline hands to it.

A table declared ``WITH ('connector' = 'push')`` has no outside source. An application starts
the plan with ``Plan.start()`` and calls ``push(table, rows)``; the rows wait in the table's
reader (a deque of record batches) until the executor polls it. The table is unbounded until the
application closes it with ``close_input(table)``.

Positions count rows: a checkpoint records how many rows of the table the pipeline had been
given. Rows pushed after that are not in the checkpoint; after a restore the application pushes
again from ``pushed_position(table)`` (docs/embedding.md, "Checkpoints and restarts").

Only a job started with ``Plan.start()`` can take pushed rows: it registers its own ``push``
connector (``PushInputs.connector()``) in its context. The ``push`` connector of the default
registry lets the compiler accept such tables and refuses to run them anywhere else, with a
message that says why.
"""

from __future__ import annotations

import difflib
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from clink.errors import UsageError
from clink.runtime import compute as pc
from clink.runtime.connectors.base import Connector, SourceReader, TableSpec

if TYPE_CHECKING:
    from clink.runtime.context import RuntimeContext

__all__ = ["PUSH", "PushInputs", "PushReader", "to_table_rows"]

_DESCRIPTION = "rows pushed by the application that runs the pipeline (Plan.start(); unbounded until closed)"


class PushReader(SourceReader):
    """Hands out the rows pushed into one table, every buffered row at each poll.

    Rows are numbered from 0 in the order the application pushed them. ``_handed`` rows have
    gone to the pipeline (the position); ``_accepted`` rows have been pushed (or covered by a
    restored checkpoint). The buffer holds the rows in between.
    """

    def __init__(self, spec: TableSpec) -> None:
        super().__init__()
        self.spec = spec
        self._buffer: deque[pa.RecordBatch] = deque()
        self._handed = 0
        self._accepted = 0
        self._closed = False
        #: The position this reader gave the newest checkpoint (read by ``PushInputs``).
        self.reported = 0
        #: Unbounded until the application closes the input.
        self.bounded = False
        self.metrics.update(records_in=0)

    @property
    def handed(self) -> int:
        return self._handed

    @property
    def has_buffered_rows(self) -> bool:
        return bool(self._buffer)

    def offer(self, rows: pa.Table, start: int) -> None:
        """Buffer ``rows`` (the table's physical columns), the first of which is row ``start``.

        Rows this reader has already accepted are skipped: after a restore, two readers of one
        table (two queries over it) may have been checkpointed at different rows.
        """
        total = rows.num_rows
        skip = self._accepted - start
        if skip >= total:
            return
        if skip > 0:
            rows = rows.slice(skip)
        projected = rows.select(self.spec.schema.names)
        for batch in projected.to_batches():
            if batch.num_rows:
                self._buffer.append(pa.RecordBatch.from_arrays(batch.columns, schema=self.spec.schema))
        self._accepted = start + total

    def close_input(self) -> None:
        self._closed = True
        self.bounded = True
        if not self._buffer:
            self.finished = True

    def poll(self) -> pa.RecordBatch | None:
        if not self._buffer:
            if self._closed:
                self.finished = True
            return None
        batches = list(self._buffer)
        self._buffer.clear()
        if len(batches) == 1:
            batch = batches[0]
        else:  # one batch per round, however many pushes it took in (pa.concat_batches needs pyarrow 19)
            batch = pa.Table.from_batches(batches, schema=self.spec.schema).combine_chunks().to_batches()[0]
        self._handed += batch.num_rows
        self.metrics["records_in"] += batch.num_rows
        if self._closed:
            self.finished = True
        return batch

    def position(self) -> dict:
        self.reported = self._handed
        return {"rows": self._handed}

    def metrics_position(self) -> dict:
        return {"rows": self._handed}  # not what a checkpoint took: ``reported`` stays

    def seek(self, position: dict) -> None:
        self._handed = self._accepted = self.reported = int(position["rows"])
        self._buffer.clear()


class PushInputs:
    """The push tables of one job: converts what the application pushes and hands it to the
    readers of each table.

    Not thread-safe by itself: the embedding API calls ``offer``, ``close`` and the position
    methods under its own lock; ``convert`` touches no shared state and may run outside it.
    """

    def __init__(self) -> None:
        self._readers: dict[str, list[PushReader]] = {}
        self._schemas: dict[str, pa.Schema] = {}
        self._pushed: dict[str, int] = {}
        self._checkpointed: dict[str, int] = {}
        self._closed: set[str] = set()

    def connector(self) -> Connector:
        """A ``push`` connector whose readers take their rows from this object."""
        return Connector(name="push", description=_DESCRIPTION, create_source=self._create_reader)

    def _create_reader(self, spec: TableSpec, ctx: RuntimeContext) -> PushReader:
        reader = PushReader(spec)
        self._readers.setdefault(spec.name, []).append(reader)
        self._schemas[spec.name] = spec.table_schema
        return reader

    def started(self) -> None:
        """Call once the job exists (and has restored its checkpoint, if any): each table
        continues at the first row that no reader of it has been given."""
        for table, readers in self._readers.items():
            resume = min(r.handed for r in readers)
            self._pushed[table] = resume
            self._checkpointed[table] = resume

    @property
    def tables(self) -> list[str]:
        return list(self._readers)

    def has_buffered_rows(self) -> bool:
        """True if some pushed rows have not been handed to the pipeline yet."""
        return any(r.has_buffered_rows for readers in self._readers.values() for r in readers)

    def _check_table(self, table: str) -> None:
        if table in self._readers:
            return
        tables = ", ".join(self._readers) or "none"
        near = difflib.get_close_matches(table, list(self._readers), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise UsageError(f"no push table named {table!r} is read by this pipeline{hint} "
                         f"(push tables it reads: {tables})")

    def convert(self, table: str, data: Any) -> pa.Table:
        """``data`` as a table with ``table``'s physical columns, or a ``UsageError`` saying
        which column is wrong and why."""
        self._check_table(table)
        return to_table_rows(table, data, self._schemas[table])

    def offer(self, table: str, rows: pa.Table) -> None:
        """Give converted ``rows`` to every reader of ``table``."""
        self._check_table(table)
        if table in self._closed:
            raise UsageError(f"push table {table!r} is closed: close_input({table!r}) ended it, "
                             "so it takes no more rows")
        start = self._pushed[table]
        for reader in self._readers[table]:
            reader.offer(rows, start)
        self._pushed[table] = start + rows.num_rows

    def close(self, table: str) -> None:
        self._check_table(table)
        self._closed.add(table)
        for reader in self._readers[table]:
            reader.close_input()

    def pushed_position(self, table: str) -> int:
        """Rows of ``table`` accounted for: those the restored checkpoint covers, plus every
        row pushed since."""
        self._check_table(table)
        return self._pushed[table]

    def checkpointed_position(self, table: str) -> int:
        """Rows of ``table`` covered by the newest checkpoint (taken or restored)."""
        self._check_table(table)
        return self._checkpointed[table]

    def checkpoint_taken(self) -> None:
        """Record the positions the readers gave the checkpoint that just completed."""
        for table, readers in self._readers.items():
            self._checkpointed[table] = min(r.reported for r in readers)


# --- conversion -------------------------------------------------------------------------------


def _as_arrow(table: str, data: Any) -> pa.Table:
    """Whatever the application pushed, as an Arrow table with the columns it named."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        return _from_dicts(table, data)
    # Only an object of one of these libraries can be one of their frames, and creating it
    # imported the library: look it up rather than import it.
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(data, pandas.DataFrame):
        try:
            return pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise UsageError(f"cannot push this pandas DataFrame into table {table!r}: {exc}") from exc
    polars = sys.modules.get("polars")
    if polars is not None and isinstance(data, polars.DataFrame):
        return data.to_arrow()
    if hasattr(data, "__arrow_c_stream__"):  # any other Arrow-compatible table
        return pa.table(data)
    raise UsageError(f"push() into table {table!r} takes a pyarrow RecordBatch or Table, a list of dicts, "
                     f"or a pandas or polars DataFrame; got {type(data).__name__}")


def _from_dicts(table: str, rows: Sequence[Any]) -> pa.Table:
    if not rows:
        return pa.table({})
    try:
        # pa.array infers one struct type from every row (Table.from_pylist reads only the
        # first row's keys), so a key that only later rows have is not lost.
        structs = pa.array(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _explain_bad_dicts(table, rows, exc) from exc
    if not pa.types.is_struct(structs.type):
        raise UsageError(f"push() into table {table!r}: a list must hold one dict per row (column name to "
                         f"value); got a list of {type(rows[0]).__name__}")
    if structs.null_count:
        raise UsageError(f"push() into table {table!r}: a list must hold one dict per row; it holds None")
    return pa.Table.from_struct_array(structs)


def _explain_bad_dicts(table: str, rows: Sequence[Any], exc: Exception) -> UsageError:
    """Find the column whose values do not agree on a type. Runs only when conversion failed,
    so looking at each row here costs nothing on the normal path."""
    if not all(isinstance(r, Mapping) for r in rows):
        odd = next(r for r in rows if not isinstance(r, Mapping))
        return UsageError(f"push() into table {table!r}: a list must hold one dict per row (column name to "
                          f"value); it holds {type(odd).__name__}")
    names = list(dict.fromkeys(k for r in rows for k in r))
    for name in names:
        try:
            pa.array([r.get(name) for r in rows])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as column_exc:
            return UsageError(f"cannot push into table {table!r}: the values of column {name!r} do not have "
                              f"one type ({column_exc})")
    return UsageError(f"cannot push into table {table!r}: {exc}")


def to_table_rows(table: str, data: Any, schema: pa.Schema) -> pa.Table:
    """Convert pushed ``data`` to ``schema`` (a table's physical columns, in order).

    Columns are matched by name. A column the table does not have is an error; a nullable
    column the data lacks is NULL; every column is cast to the table's type (timestamps may lose
    precision below the column's unit, other values may not change).

    >>> to_table_rows("t", [{"a": 1}], pa.schema([("a", pa.int32()), ("b", pa.string())])).to_pylist()
    [{'a': 1, 'b': None}]
    """
    given = _as_arrow(table, data)
    names = given.column_names
    if not names and given.num_rows == 0:  # an empty list: no rows, and no columns to check
        return schema.empty_table()
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise UsageError(f"cannot push into table {table!r}: column {twice[0]!r} is given twice")
    unknown = [n for n in names if schema.get_field_index(n) < 0]
    if unknown:
        near = difflib.get_close_matches(unknown[0], schema.names, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise UsageError(f"cannot push into table {table!r}: it has no column {unknown[0]!r}{hint} "
                         f"(columns of {table!r}: {', '.join(schema.names)})")
    n = given.num_rows
    columns = []
    for field in schema:
        if field.name not in names:
            if not field.nullable:
                raise UsageError(f"cannot push into table {table!r}: column {field.name!r} is NOT NULL, "
                                 "and the pushed rows do not have it")
            columns.append(pa.nulls(n, field.type))
            continue
        column = given.column(field.name)
        if column.type != field.type:
            if pa.types.is_decimal(field.type) and pa.types.is_integer(column.type):
                # Arrow casts an integer only to a decimal wide enough for every int64: go through
                # the widest one, and let the cast below refuse a value that does not fit.
                column = pc.cast(column, pa.decimal128(38, field.type.scale))
            try:
                column = pc.cast(column, options=pc.CastOptions(field.type, allow_time_truncate=True))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                reason = str(exc).splitlines()[0]
                raise UsageError(f"cannot push into table {table!r}: column {field.name!r} is "
                                 f"{_sql_type(field.type)}, and the pushed {_sql_type(column.type)} values "
                                 f"do not convert: {reason}") from exc
        if not field.nullable and column.null_count:
            raise UsageError(f"cannot push into table {table!r}: column {field.name!r} is NOT NULL, and "
                             f"{column.null_count} pushed row(s) have NULL in it")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


_SQL_NAMES = {
    pa.bool_(): "BOOLEAN", pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
    pa.int64(): "BIGINT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.string(): "STRING",
    pa.large_string(): "STRING", pa.binary(): "BYTES", pa.date32(): "DATE",
}
_TIMESTAMP_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def _sql_type(t: pa.DataType) -> str:
    """A type as the SQL names it, where the name is plain (the Arrow name otherwise)."""
    if t in _SQL_NAMES:
        return _SQL_NAMES[t]
    if pa.types.is_timestamp(t):
        return f"TIMESTAMP{'_LTZ' if t.tz else ''}({_TIMESTAMP_DIGITS[t.unit]})"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    return str(t)


# --- the connector of the default registry ----------------------------------------------------


def _refuse(spec: TableSpec, ctx: RuntimeContext) -> SourceReader:
    raise UsageError(f"table {spec.name!r} uses the 'push' connector: its rows come from the application "
                     "that runs the pipeline, so start it with plan.start() and call push() "
                     "(docs/embedding.md)")


PUSH = Connector(name="push", description=_DESCRIPTION, create_source=_refuse)
