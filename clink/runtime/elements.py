"""Stream elements: what travels between operators.

A stream is a sequence of these. Batches carry rows; the others carry time and control.
"""

from __future__ import annotations

from dataclasses import dataclass
import pyarrow as pa

__all__ = ["Barrier", "Batch", "EndOfInput", "Element", "Watermark", "MAX_WATERMARK"]

#: The watermark a bounded source sends last, so every open window fires.
MAX_WATERMARK = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Batch:
    """A micro-batch of rows."""

    data: pa.RecordBatch


@dataclass(frozen=True, slots=True)
class Watermark:
    """No later element carries an event time at or below ``ts`` (milliseconds since the epoch)."""

    ts: int


@dataclass(frozen=True, slots=True)
class Barrier:
    """Checkpoint ``checkpoint_id`` separates the elements before this one from those after."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class EndOfInput:
    """The input is exhausted; nothing follows."""


Element = Batch | Watermark | Barrier | EndOfInput
