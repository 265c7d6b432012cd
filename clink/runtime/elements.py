"""Stream elements: what travels between operators.

A stream is a sequence of these. Batches carry rows; the others carry time and control.
"""

from __future__ import annotations

import pyarrow as pa

from clink.records import record

__all__ = ["Barrier", "Batch", "EndOfInput", "Element", "Idleness", "Watermark", "MAX_WATERMARK"]

#: The watermark a bounded source sends last, so every open window fires.
MAX_WATERMARK = 2**63 - 1


@record
class Batch:
    """A micro-batch of rows."""

    data: pa.RecordBatch


@record
class Watermark:
    """No later element carries an event time at or below ``ts`` (milliseconds since the epoch)."""

    ts: int


@record
class Barrier:
    """Checkpoint ``checkpoint_id`` separates the elements before this one from those after."""

    checkpoint_id: int


@record
class EndOfInput:
    """The input is exhausted; nothing follows."""


@record
class Idleness:
    """What feeds the sender has gone idle (``idle``), or is active again: while idle, its channel
    does not hold the receiver's watermark back (Flink's watermark status). Only crosses between
    processes: in one process, idleness is read off the sources directly."""

    idle: bool


Element = Batch | Watermark | Barrier | EndOfInput | Idleness
