"""Window state: partial aggregates per window, kept in a ``TableState``.

Each window (named by its end, in milliseconds since the epoch) is one bucket of the table
state; its rows are partial tables, oldest first, every row with its ``_key_group`` so state can
be split by key group on rescale. The order of the parts is arrival order, which FIRST_VALUE /
LAST_VALUE rely on. Which backend holds the rows (memory, or SQLite on disk) is the table
state's business; this class adds compaction and the window vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa

from clink.runtime.state.backend import KEY_GROUP, TableState, TableStateDescriptor
from clink.runtime.state.memory import MemoryStateBackend, split_by_namespace

__all__ = ["KEY_GROUP", "WINDOW_END", "WindowState", "split_by_window"]

#: The column that names the window in tables that hold several windows.
WINDOW_END = "_window_end"

Merge = Callable[[pa.Table], pa.Table]


class WindowState:
    """Partial aggregates per window end.

    ``merge`` re-aggregates a table of partials into one row per group (the operator's merge
    step); when a window has collected ``compact_after`` parts they are merged into one, so a
    window that receives many batches holds at most one row per group plus a few recent parts.
    Without ``table``, the state lives in memory with the schema ``schema``.
    """

    def __init__(self, merge: Merge | None = None, *, compact_after: int = 16, table: TableState | None = None,
                 schema: pa.Schema | None = None) -> None:
        if table is None:
            if schema is None:
                raise ValueError("WindowState needs a table state or the schema of its partial tables")
            operator = MemoryStateBackend().open("window", [TableStateDescriptor("windows", schema)])
            table = operator.table_state("windows")
        self._merge = merge
        self._compact_after = compact_after
        self._table = table
        self._checked: pa.Schema | None = None

    @property
    def table(self) -> TableState:
        return self._table

    # -- writing -----------------------------------------------------------------------------

    def add(self, window_end: int, partials: pa.Table) -> None:
        """Append ``partials`` (which must have a ``_key_group`` column) to window ``window_end``."""
        if partials.num_rows == 0:
            return
        # The parts of one split share their schema: check it once (session windows add thousands).
        if partials.schema is not self._checked and partials.schema.get_field_index(KEY_GROUP) < 0:
            raise ValueError(f"partial tables need a {KEY_GROUP!r} column, got {partials.column_names}")
        self._checked = partials.schema
        window_end = int(window_end)
        self._table.add(window_end, partials)
        if self._merge is not None and self._table.parts(window_end) >= self._compact_after:
            parts = self._table.get(window_end)
            assert parts is not None
            self._table.replace(window_end, self._merge(parts))

    # -- reading -----------------------------------------------------------------------------

    def windows(self) -> list[int]:
        """Every window end that holds state, ascending."""
        return self._table.namespaces()

    def windows_until(self, ts: int) -> list[int]:
        """The window ends ``<= ts`` that hold state, ascending."""
        return self._table.namespaces(until=ts)

    def windows_after(self, ts: int) -> list[int]:
        """The window ends ``> ts`` that hold state, ascending."""
        return self._table.namespaces(after=ts)

    def __contains__(self, window_end: int) -> bool:
        return self._table.parts(window_end) > 0

    def __len__(self) -> int:
        return len(self._table.namespaces())

    def peek(self, window_end: int) -> pa.Table | None:
        """All partials of window ``window_end``, oldest first, or None if it holds nothing."""
        return self._table.get(window_end)

    def window_rows(self, window_end: int) -> int:
        """Partial rows held for window ``window_end``."""
        return self._table.num_rows(window_end)

    def take(self, window_end: int) -> pa.Table | None:
        """Remove window ``window_end`` and return its partials (as ``peek``)."""
        return self._table.take(window_end)

    def take_many(self, window_ends: Iterable[int]) -> pa.Table | None:
        """Remove the given windows and return their partials in one table, with a
        ``_window_end`` column (int64) first; windows in the order given."""
        tables, ends, counts = [], [], []
        for end in window_ends:
            table = self.take(end)
            if table is not None:
                tables.append(table)
                ends.append(end)
                counts.append(table.num_rows)
        if not tables:
            return None
        # One column for all windows (a session window state takes thousands at a time).
        column = pa.array(np.repeat(np.array(ends, np.int64), counts))
        return pa.concat_tables(tables).add_column(0, WINDOW_END, column)

    def num_rows(self) -> int:
        """Partial rows held (a proxy for the number of open (window, key) groups)."""
        return self._table.num_rows()

    def nbytes(self) -> int:
        """Bytes of partial tables held in memory."""
        return self._table.memory_bytes()


def split_by_window(table: pa.Table, column: str = WINDOW_END) -> list[tuple[int, pa.Table]]:
    """Cut a table into one table per value of its window column (ascending), without that
    column, keeping row order within each window."""
    return split_by_namespace(table, column)
