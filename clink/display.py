"""Query results on a terminal: a table, a table kept up to date as changes arrive, and
Flink's tableau lines.

Shared by ``clink run`` (the table of a bounded query) and ``clink sql`` (the SQL client's
result modes, docs/client.md). Values are rendered as the print connector renders them, with
TIMESTAMP_LTZ shown in the session time zone. ``rich`` is imported only here, and only when a
result is shown.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.connectors.print import render_text
from clink.runtime.plan import INSERT, ROWKIND_COLUMN, UPDATE_AFTER, ChangelogMode

__all__ = ["Changes", "Materialized", "Tableau", "print_table", "rich_table", "rows_text", "with_op"]

_SEQ = "__seq"
_SIGN = "__sign"
_ADDED = "__added"


def rows_text(table: pa.Table, zone: str) -> list[tuple[str, ...]]:
    """Every row of ``table`` as strings, as the print connector writes its values."""
    columns = [render_text(table.column(i).combine_chunks(), zone).to_pylist() for i in range(table.num_columns)]
    return list(zip(*columns, strict=True)) if columns else []


def rich_table(table: pa.Table, zone: str, *, first: int | None = None, last: int | None = None,
               plain: bool = False):
    """A ``rich`` table of ``table``'s rows; ``first`` / ``last`` keep only that many rows from
    the top / the bottom (the rest are counted in a caption); ``plain`` draws it in ASCII."""
    from rich import box
    from rich.table import Table

    view = Table(show_lines=False, box=box.ASCII if plain else box.HEAVY_HEAD)
    for name in table.column_names:
        view.add_column(name, overflow="fold")
    shown = table
    if first is not None and table.num_rows > first:
        shown = table.slice(0, first)
        view.caption = f"... and {table.num_rows - first} more rows"
    elif last is not None and table.num_rows > last:
        shown = table.slice(table.num_rows - last)
        view.caption = f"... after {table.num_rows - last} earlier rows"
    for row in rows_text(shown, zone):
        view.add_row(*row)
    return view


def print_table(table: pa.Table, zone: str, console=None, *, footer: str | None = None,
                plain: bool = False) -> None:
    """Print the rows as a table, then ``footer`` (by default, the number of rows)."""
    from rich.console import Console

    console = console or Console()
    console.print(rich_table(table, zone, plain=plain))
    console.print(footer if footer is not None else f"{table.num_rows} row{'s' if table.num_rows != 1 else ''}")


class Materialized:
    """The table an updating result adds up to, kept as changes arrive, in the order Flink's
    SQL client shows it: an inserted row goes to the end, a retracted one (``-U``, ``-D``)
    leaves, so an updated row (``-U`` then ``+U``) moves to the end with its new values.

    Changes are taken in batches and applied when the table is asked for, all at once and
    vectorized: the rows shown so far (each with its position) and the new changes (each with
    its arrival number) are grouped by value; a group's count is its inserts less its
    retractions, its position the arrival of its latest insert.

    >>> m = Materialized(pa.schema([("k", pa.string()), ("n", pa.int64())]),
    ...                  ChangelogMode(frozenset({"+I", "-U", "+U"})))
    >>> m.add(pa.record_batch({"k": ["a", "b", "a", "a"], "n": [1, 1, 1, 2],
    ...                        "_rowkind": ["+I", "+I", "-U", "+U"]}))
    >>> m.table().to_pylist()
    [{'k': 'b', 'n': 1}, {'k': 'a', 'n': 2}]
    """

    def __init__(self, schema: pa.Schema, mode: ChangelogMode | None) -> None:
        self.updating = mode is not None and mode.updating
        self.mode = mode
        self.schema = pa.schema([f for f in schema if f.name != ROWKIND_COLUMN])
        self._rows = self.schema.empty_table().append_column(_SEQ, pa.array([], pa.int64()))
        self._pending: list[pa.RecordBatch] = []
        self._next = 0
        #: Changes taken so far.
        self.changes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self._pending.append(batch)
            self.changes += batch.num_rows

    def table(self) -> pa.Table:
        """The rows now, in display order."""
        if self._pending:
            self._apply(pa.Table.from_batches(self._pending))
            self._pending = []
        return self._rows.drop_columns([_SEQ])

    def _apply(self, changes: pa.Table) -> None:
        n = changes.num_rows
        seq = pa.array(np.arange(self._next, self._next + n, dtype=np.int64))
        self._next += n
        if not self.updating:
            self._rows = pa.concat_tables([self._rows, changes.select(self.schema.names).cast(self.schema)
                                           .append_column(_SEQ, seq)])
            return
        kinds = changes.column(ROWKIND_COLUMN)
        adds = pc.or_(pc.equal(kinds, INSERT), pc.equal(kinds, UPDATE_AFTER))
        sign = pc.if_else(adds, pa.scalar(1, pa.int64()), pa.scalar(-1, pa.int64()))
        new = (changes.select(self.schema.names).cast(self.schema)
               .append_column(_SIGN, sign).append_column(_ADDED, pc.if_else(adds, seq, pa.scalar(None, pa.int64()))))
        old = self._rows.rename_columns([*self.schema.names, _ADDED])
        old = old.add_column(len(self.schema), _SIGN, pa.array(np.ones(old.num_rows, np.int64)))
        both = pa.concat_tables([old, new.select(old.column_names)])
        names = self.schema.names
        grouped = both.group_by(names, use_threads=False).aggregate([(_SIGN, "sum"), (_ADDED, "max")])
        count = grouped.column(f"{_SIGN}_sum").to_numpy()
        if (count < 0).any():
            raise ValueError("a changelog retracts rows it never inserted")
        order = np.argsort(grouped.column(f"{_ADDED}_max").fill_null(-1).to_numpy(), kind="stable")
        order = order[count[order] > 0]
        keep = np.repeat(order, count[order])
        rows = pc.take(grouped.select(names), pa.array(keep, pa.int64()))
        positions = pc.take(grouped.column(f"{_ADDED}_max"), pa.array(keep, pa.int64()))
        self._rows = rows.cast(self.schema).append_column(_SEQ, positions)


class Changes:
    """The latest ``keep`` changes of a result, with their kind in an ``op`` column first."""

    def __init__(self, schema: pa.Schema, mode: ChangelogMode | None, keep: int = 1000) -> None:
        self.updating = mode is not None and mode.updating
        self.names = [f.name for f in schema if f.name != ROWKIND_COLUMN]
        self._batches: deque[pa.Table] = deque()
        self._held = 0
        self.keep = keep
        self.changes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self.changes += batch.num_rows
        table = with_op(pa.Table.from_batches([batch]), self.updating)
        self._batches.append(table)
        self._held += table.num_rows
        while self._held - self._batches[0].num_rows >= self.keep:
            self._held -= self._batches.popleft().num_rows

    def table(self) -> pa.Table:
        if not self._batches:
            return pa.table({"op": pa.array([], pa.string())})
        table = pa.concat_tables(list(self._batches))
        return table.slice(max(0, table.num_rows - self.keep))


def with_op(table: pa.Table, updating: bool) -> pa.Table:
    """``table`` with its row kind as a first column ``op`` (``+I`` for an append-only one)."""
    if updating:
        op = table.column(ROWKIND_COLUMN)
        table = table.drop_columns([ROWKIND_COLUMN])
    else:
        op = pa.array(np.full(table.num_rows, INSERT, dtype=object), pa.string())
    return table.add_column(0, "op", op)


# Column widths of the tableau lines, by type, as Flink's tableau mode sizes a streaming result
# (it cannot wait for the longest value): a value longer than its column ends in "...".
_MAX_WIDTH = 30


def _type_width(t: pa.DataType) -> int:
    if pa.types.is_boolean(t):
        return 5
    if pa.types.is_int8(t):
        return 4
    if pa.types.is_int16(t):
        return 6
    if pa.types.is_int32(t):
        return 11
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return 20
    if pa.types.is_decimal(t):
        return t.precision + 2
    if pa.types.is_date(t):
        return 10
    if pa.types.is_timestamp(t):
        return 23
    if pa.types.is_time(t):
        return 12
    return 20


class Tableau:
    """Rows printed as they come, in Flink's tableau format: a header, one line per change with
    its kind in an ``op`` column, a closing line and the count."""

    def __init__(self, schema: pa.Schema, mode: ChangelogMode | None, zone: str, write) -> None:
        self.updating = mode is not None and mode.updating
        fields = [f for f in schema if f.name != ROWKIND_COLUMN]
        self.widths = [2] + [min(_MAX_WIDTH, max(len(f.name), _type_width(f.type))) for f in fields]
        self.zone = zone
        self.write = write
        self.changes = 0
        self._border = "+" + "+".join("-" * (w + 2) for w in self.widths) + "+"
        self._header = self._line(["op", *(f.name for f in fields)])
        self._opened = False

    def _line(self, values) -> str:
        cells = []
        for value, width in zip(values, self.widths, strict=True):
            if len(value) > width:
                value = value[:max(0, width - 3)] + "..."
            cells.append(value.rjust(width))
        return "| " + " | ".join(cells) + " |"

    def _open(self) -> None:
        if not self._opened:
            self._opened = True
            self.write(f"{self._border}\n{self._header}\n{self._border}\n")

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self._open()
        self.changes += batch.num_rows
        table = with_op(pa.Table.from_batches([batch]), self.updating)
        # A loop over rows, but only to format lines of text for a terminal, which reads them
        # far slower than this writes them.
        self.write("".join(self._line(row) + "\n" for row in rows_text(table, self.zone)))

    def close(self, cancelled: bool = False) -> None:
        if self.changes:
            self.write(self._border + "\n")
        if cancelled:
            self.write(f"Query terminated, received a total of {self.changes} row{'s' if self.changes != 1 else ''}\n")
        elif self.changes:
            self.write(f"Received a total of {self.changes} row{'s' if self.changes != 1 else ''}\n")
        else:
            self.write("Empty set\n")

