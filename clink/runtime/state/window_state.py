"""Window state: partial aggregates per window, as Arrow tables.

Each window (named by its end, in milliseconds since the epoch) holds a list of partial tables,
oldest first; every table carries a ``_key_group`` column so state can be split by key group on
rescale. The order of the parts is arrival order, which FIRST_VALUE / LAST_VALUE rely on.

This is the in-memory backend; a durable one implements the same methods.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["KEY_GROUP", "WINDOW_END", "WindowState", "split_by_window"]

#: The column of every partial table that holds the row's key group.
KEY_GROUP = "_key_group"
#: The column that names the window in a snapshot.
WINDOW_END = "_window_end"

Merge = Callable[[pa.Table], pa.Table]


class WindowState:
    """Partial aggregates per window end, in memory.

    ``merge`` re-aggregates a table of partials into one row per group (the operator's merge
    step); when a window has collected ``compact_after`` parts they are merged into one, so a
    window that receives many batches holds at most one row per group plus a few recent parts.
    ``schema`` is the schema of a partial table; it is needed only to snapshot an empty state.
    """

    def __init__(self, merge: Merge | None = None, *, compact_after: int = 16,
                 schema: pa.Schema | None = None) -> None:
        self._merge = merge
        self._compact_after = compact_after
        self._schema = schema
        self._parts: dict[int, list[pa.Table]] = {}
        self._ends: list[int] = []  # sorted keys of _parts
        self._rows = 0
        self._bytes = 0

    # -- writing -----------------------------------------------------------------------------

    def add(self, window_end: int, partials: pa.Table) -> None:
        """Append ``partials`` (which must have a ``_key_group`` column) to window ``window_end``."""
        if partials.num_rows == 0:
            return
        if KEY_GROUP not in partials.column_names:
            raise ValueError(f"partial tables need a {KEY_GROUP!r} column, got {partials.column_names}")
        if self._schema is None:
            self._schema = partials.schema
        window_end = int(window_end)
        parts = self._parts.get(window_end)
        if parts is None:
            parts = self._parts[window_end] = []
            bisect.insort(self._ends, window_end)
        parts.append(partials)
        self._account(partials, +1)
        if self._merge is not None and len(parts) >= self._compact_after:
            self._compact(window_end)

    def _compact(self, window_end: int) -> None:
        assert self._merge is not None
        parts = self._parts[window_end]
        merged = self._merge(pa.concat_tables(parts))
        for part in parts:
            self._account(part, -1)
        self._parts[window_end] = [merged]
        self._account(merged, +1)

    def _account(self, table: pa.Table, sign: int) -> None:
        self._rows += sign * table.num_rows
        self._bytes += sign * table.nbytes

    # -- reading -----------------------------------------------------------------------------

    def windows(self) -> list[int]:
        """Every window end that holds state, ascending."""
        return list(self._ends)

    def windows_until(self, ts: int) -> list[int]:
        """The window ends ``<= ts`` that hold state, ascending."""
        return self._ends[: bisect.bisect_right(self._ends, ts)]

    def windows_after(self, ts: int) -> list[int]:
        """The window ends ``> ts`` that hold state, ascending."""
        return self._ends[bisect.bisect_right(self._ends, ts):]

    def __contains__(self, window_end: int) -> bool:
        return window_end in self._parts

    def __len__(self) -> int:
        return len(self._ends)

    def peek(self, window_end: int) -> pa.Table | None:
        """All partials of window ``window_end``, oldest first, or None if it holds nothing."""
        parts = self._parts.get(window_end)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def window_rows(self, window_end: int) -> int:
        """Partial rows held for window ``window_end``."""
        return sum(part.num_rows for part in self._parts.get(window_end, ()))

    def take(self, window_end: int) -> pa.Table | None:
        """Remove window ``window_end`` and return its partials (as ``peek``)."""
        table = self.peek(window_end)
        parts = self._parts.pop(window_end, None)
        if parts is None:
            return None
        del self._ends[bisect.bisect_left(self._ends, window_end)]
        for part in parts:
            self._account(part, -1)
        return table

    def take_many(self, window_ends: Iterable[int]) -> pa.Table | None:
        """Remove the given windows and return their partials in one table, with a
        ``_window_end`` column (int64) first; windows in the order given."""
        tables = []
        for end in window_ends:
            table = self.take(end)
            if table is not None:
                tables.append(_with_window(table, end))
        return pa.concat_tables(tables) if tables else None

    def num_rows(self) -> int:
        """Partial rows held (a proxy for the number of open (window, key) groups)."""
        return self._rows

    def nbytes(self) -> int:
        """Bytes held by the partial tables."""
        return self._bytes

    # -- checkpoint and rescale ----------------------------------------------------------------

    def snapshot(self) -> pa.Table:
        """Everything held, as one table: ``_window_end`` (int64) then the partial columns, in
        window order and, within a window, in arrival order. Suitable for Arrow IPC."""
        tables = [_with_window(self.peek(end), end) for end in self._ends]  # type: ignore[arg-type]
        if tables:
            return pa.concat_tables(tables)
        schema = self._schema if self._schema is not None else pa.schema([(KEY_GROUP, pa.int32())])
        return _with_window(schema.empty_table(), None)

    def restore(self, table: pa.Table) -> None:
        """Replace everything held with the contents of a ``snapshot()`` table."""
        self._parts.clear()
        self._ends.clear()
        self._rows = self._bytes = 0
        if self._schema is None:
            self._schema = table.schema.remove(table.schema.get_field_index(WINDOW_END))
        for end, part in split_by_window(table):
            self.add(end, part)

    def split(self, key_groups: set[int]) -> WindowState:
        """A new state holding only the rows whose key group is in ``key_groups``; this one is
        unchanged. Restoring each split of a snapshot on its own task is how state rescales."""
        other = WindowState(self._merge, compact_after=self._compact_after, schema=self._schema)
        wanted = pa.array(sorted(key_groups), pa.int32())
        for end in self._ends:
            for part in self._parts[end]:
                mask = pc.is_in(part[KEY_GROUP], value_set=wanted)
                other.add(end, part.filter(mask))
        return other


def _with_window(table: pa.Table, end: int | None) -> pa.Table:
    values = pa.nulls(0, pa.int64()) if end is None else pa.array(np.full(table.num_rows, end, np.int64))
    return table.add_column(0, WINDOW_END, values)


def split_by_window(table: pa.Table, column: str = WINDOW_END) -> list[tuple[int, pa.Table]]:
    """Cut a table into one table per value of its window column (ascending), without that
    column, keeping row order within each window."""
    if table.num_rows == 0:
        return []
    ends = table[column].to_numpy()
    rest = table.drop_columns([column])
    if (ends[1:] < ends[:-1]).any():
        order = np.argsort(ends, kind="stable")
        rest = rest.take(order)
        ends = ends[order]
    cuts = np.flatnonzero(ends[1:] != ends[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(ends)]
    return [(int(ends[lo]), rest.slice(lo, hi - lo)) for lo, hi in itertools.pairwise(bounds)]
