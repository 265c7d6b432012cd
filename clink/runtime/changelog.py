"""Updating (changelog) streams: rows that carry a kind, and the table they add up to.

An updating stream's batches end with ``ROWKIND_COLUMN``: ``+I`` inserts a row, ``-U`` retracts
the old row of an update and ``+U`` inserts its new one, ``-D`` retracts a row. A retraction
always carries the exact row it retracts, so the table a changelog adds up to is the multiset of
inserted rows minus the multiset of retracted ones, whatever the order in between.

>>> import pyarrow as pa
>>> from clink.runtime.plan import UPDATING
>>> log = pa.table({"k": ["a", "a", "a", "b"], "n": [1, 1, 2, 1], "_rowkind": ["+I", "-U", "+U", "+I"]})
>>> sorted(materialize(log, UPDATING).to_pylist(), key=str)
[{'k': 'a', 'n': 2}, {'k': 'b', 'n': 1}]
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc
from clink.runtime.plan import DELETE, INSERT, ROWKIND_COLUMN, UPDATE_AFTER, UPDATE_BEFORE, ChangelogMode

__all__ = ["materialize"]

_SIGN = "__sign"
_ROW = "__row"


def materialize(table: pa.Table, mode: ChangelogMode) -> pa.Table:
    """The rows ``table`` (a stream of changelog ``mode``) adds up to, without the row-kind
    column; an append-only table is returned as it is."""
    if not mode.updating:
        return table
    kinds = table.column(ROWKIND_COLUMN)
    rows = table.drop_columns([ROWKIND_COLUMN])
    unknown = pc.invert(pc.is_in(kinds, value_set=pa.array([INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE])))
    if pc.any(unknown).as_py():
        raise ValueError(f"unknown row kinds in a changelog: {pc.unique(pc.filter(kinds, unknown)).to_pylist()}")
    adds = pc.or_(pc.equal(kinds, INSERT), pc.equal(kinds, UPDATE_AFTER))
    sign = pc.if_else(adds, pa.scalar(1, pa.int64()), pa.scalar(-1, pa.int64()))
    names = rows.column_names
    keyed = rows
    for i, field in enumerate(rows.schema):
        if pa.types.is_nested(field.type):
            # Arrow cannot group by a map, list or row: by its text instead (a result's nested
            # values, once, when a final table is asked for).
            text = pa.array([None if v is None else repr(v) for v in rows.column(i).to_pylist()], pa.string())
            keyed = keyed.set_column(i, field.name, text)
    keyed = keyed.append_column(_ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    counted = keyed.append_column(_SIGN, sign).group_by(names, use_threads=False).aggregate(
        [(_SIGN, "sum"), (_ROW, "min")])
    net = counted.column(f"{_SIGN}_sum").to_numpy()
    if (net < 0).any():
        raise ValueError("a changelog retracts rows it never inserted")
    keep = np.repeat(counted.column(f"{_ROW}_min").to_numpy(), net)
    return pc.take(rows, pa.array(keep, pa.int64())).cast(rows.schema)
