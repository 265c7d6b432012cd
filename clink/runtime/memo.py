"""What a task remembers of the values it has seen, to spare work on values that repeat.

String functions such as ``REGEXP_EXTRACT`` and ``SPLIT_INDEX`` run once per distinct value and
keep their results per function and fixed argument (``kernels._per_value``). That memory belongs
to one task (``TaskContext.memo``), never to the process: subtasks, and jobs that share a
process, each keep their own.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ValueMemo"]


class ValueMemo:
    """The values a task's string functions have seen, and the last arrays they looked at."""

    __slots__ = ("last_distinct", "last_lookup", "last_split", "seen")

    def __init__(self) -> None:
        #: Per (function, fixed argument): (the distinct values seen, per parameter their results).
        self.seen: dict[tuple, tuple[Any, dict[int, Any]]] = {}
        #: The last look-up, (array, values seen, positions): calls on that very array share it.
        self.last_lookup: tuple | None = None
        #: The last array ``_distinct`` looked at, with its verdict.
        self.last_distinct: tuple | None = None
        #: The separators found in the last array split on a byte.
        self.last_split: tuple | None = None
