"""Sources whose rows are a pure function of their number (datagen, nexmark).

Such a source generates rows a block of ``batch_size`` at a time (block ``i`` holds rows
``i * batch_size`` onwards) and hands them out in order. Its position is the count of rows
handed out; seeking to a count regenerates the block that holds it, so replay is exact. With a
rate, rows come out no faster than ``rate`` per second of the context's clock, in chunks worth
about a tenth of a second.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

import pyarrow as pa

from clink.runtime.connectors.base import SourceReader

__all__ = ["BlockReader"]


class BlockReader(SourceReader):
    """The shared reader: subclasses call ``_start_blocks`` and implement ``_make_block``."""

    #: The key of the row count in ``position()`` (kept per connector for checkpoint files).
    position_key = "rows"

    def _start_blocks(self, *, batch_size: int, total: int | None, rate: float | None,
                      clock: Callable[[], int]) -> None:
        self._batch_size = batch_size
        self._total = total
        self._rate = rate
        self._clock = clock
        self._emitted = 0
        self._rate_base = 0  # rows given out before the rate clock started (after a seek)
        self._started_ms: int | None = None
        self._block_index = -1
        self._block: pa.RecordBatch | None = None
        self._chunk = batch_size if rate is None else max(1, min(batch_size, int(rate // 10)))
        #: Read by the executor: an unbounded source keeps a job running until it is cancelled.
        self.bounded = total is not None
        self.metrics.update(records_in=0, skipped_records=0)
        if total == 0:
            self.finished = True

    @abc.abstractmethod
    def _make_block(self, index: int, rows: int) -> pa.RecordBatch:
        """Block ``index``, ``rows`` rows long (the last block of a bounded source is shorter)."""

    def _block_at(self, index: int) -> pa.RecordBatch:
        if index != self._block_index:
            size = self._batch_size
            rows = size if self._total is None else min(size, self._total - index * size)
            self._block = self._make_block(index, rows)
            self._block_index = index
        assert self._block is not None
        return self._block

    def position(self) -> dict:
        return {self.position_key: self._emitted}

    def seek(self, position: dict) -> None:
        self._emitted = int(position[self.position_key])
        self._rate_base = self._emitted
        self._started_ms = None
        self.finished = self._total is not None and self._emitted >= self._total

    def poll(self) -> pa.RecordBatch | None:
        if self.finished:
            return None
        size = self._batch_size
        want = size if self._total is None else min(size, self._total - self._emitted)
        if self._rate is not None:
            now = self._clock()
            if self._started_ms is None:
                self._started_ms = now
            due = int((now - self._started_ms) * self._rate / 1000) - (self._emitted - self._rate_base)
            if due < min(self._chunk, want):
                return None
            want = min(want, due)
        index, offset = divmod(self._emitted, size)
        block = self._block_at(index)
        want = min(want, block.num_rows - offset)
        batch = block if offset == 0 and want == block.num_rows else block.slice(offset, want)
        self._emitted += want
        self.metrics["records_in"] += want
        if self._total is not None and self._emitted >= self._total:
            self.finished = True
        return batch
