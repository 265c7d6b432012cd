"""Text rendering shared by the filesystem and print connectors (kept apart so that printing
does not import Arrow's file-format readers)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from clink.runtime import compute as pc

__all__ = ["concatenated", "join_list_text"]


def join_list_text(arr: pa.Array, encode: Callable[[pa.Array], pa.Array], separator: str) -> pa.Array:
    """Render each list (or map) of ``arr`` as its encoded elements joined by ``separator``.

    ``encode`` turns the flat child values into non-null strings; null lists come out null, empty
    lists as ``''``. Works on sliced arrays and on null lists backed by non-empty ranges.
    """
    offsets = arr.offsets
    start = offsets[0].as_py()
    values = arr.values.slice(start, offsets[-1].as_py() - start)
    encoded = encode(values)
    rebased = pc.subtract(offsets, pa.scalar(start, pa.int32()))
    mask = pc.is_null(arr) if arr.null_count else None
    return pc.binary_join(pa.ListArray.from_arrays(rebased, encoded, mask=mask), separator)


def concatenated(lines: pa.Array) -> pa.Buffer:
    """The bytes of a string array's values, back to back (its data buffer, without a copy)."""
    if len(lines) == 0:
        return pa.py_buffer(b"")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4)
    return lines.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
