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
from clink.runtime.connectors.shares import DONE, Progress, merge, share_of

__all__ = ["BlockReader"]


class BlockReader(SourceReader):
    """The shared reader: subclasses call ``_start_blocks`` and implement ``_make_block``.

    Read by several subtasks, each takes the blocks of its share (``shares.py``): block ``i``
    goes to subtask ``i % parallelism``, so together they give exactly the rows one would.
    """

    #: The key of the row count in ``position()`` (kept per connector for checkpoint files).
    position_key = "rows"

    def _start_blocks(self, *, batch_size: int, total: int | None, rate: float | None,
                      clock: Callable[[], int], subtask: int = 0, parallelism: int = 1) -> None:
        self._batch_size = batch_size
        self._total = total
        self._blocks = None if total is None else -(-total // batch_size)
        # Each subtask keeps its share of the rate.
        self._rate = None if rate is None else rate / parallelism
        self._clock = clock
        self._progress = Progress.start(subtask, parallelism)
        self._emitted = 0  # rows this reader gave out, for the rate
        self._rate_base = 0  # rows given out before the rate clock started (after a seek)
        self._started_ms: int | None = None
        self._block_index = -1
        self._block: pa.RecordBatch | None = None
        self._chunk = batch_size if self._rate is None else max(1, min(batch_size, int(self._rate // 10)))
        #: Read by the executor: an unbounded source keeps a job running until it is cancelled.
        self.bounded = total is not None
        self.metrics.update(records_in=0, skipped_records=0)
        self._settle()

    @abc.abstractmethod
    def _make_block(self, index: int, rows: int) -> pa.RecordBatch:
        """Block ``index``, ``rows`` rows long (the last block of a bounded source is shorter)."""

    def _slice(self, block: pa.RecordBatch, offset: int, count: int) -> pa.RecordBatch:
        """The rows of ``block`` numbered ``offset`` to ``offset + count`` within it (a reader whose
        blocks leave rows out maps the numbers to its rows)."""
        return block if offset == 0 and count == block.num_rows else block.slice(offset, count)

    def _rows_in(self, index: int) -> int:
        size = self._batch_size
        return size if self._total is None else min(size, self._total - index * size)

    def _block_at(self, index: int) -> pa.RecordBatch:
        if index != self._block_index:
            self._block = self._make_block(index, self._rows_in(index))
            self._block_index = index
        assert self._block is not None
        return self._block

    def _settle(self) -> None:
        """Move past the blocks of this share that are done; finished when none is left."""
        progress = self._progress
        while self._blocks is None or progress.part < self._blocks:
            if progress.offset != DONE and progress.offset < self._rows_in(progress.part):
                self.finished = False
                return
            progress.next_part()
        self.finished = True

    def position(self) -> dict:
        progress = self._progress
        if progress.parallelism == 1 and not progress.later:
            # One reader of the whole table: the count of rows given out says where it is.
            done = progress.part * self._batch_size + progress.offset
            return {self.position_key: done if self._total is None else min(done, self._total)}
        return progress.position()

    def seek(self, position: dict) -> None:
        if self.position_key in position:
            rows = int(position[self.position_key])
            part, offset = divmod(rows, self._batch_size)
            self.seek_shares([{"share": [0, 1], "part": part, "offset": offset}])
            return
        mine = Progress.of(position)
        if (mine.subtask, mine.parallelism) != (self._progress.subtask, self._progress.parallelism):
            self.seek_shares([position])
            return
        self._progress = mine
        self._restart()

    def seek_shares(self, positions: list[dict]) -> None:
        legacy = [p for p in positions if self.position_key in p]
        if legacy:
            if len(positions) != 1:
                raise ValueError(f"mixed positions: {positions}")
            self.seek(legacy[0])
            return
        first, done = merge(positions)
        self._progress = share_of(first, done, subtask=self._progress.subtask,
                                  parallelism=self._progress.parallelism)
        self._restart()

    def _restart(self) -> None:
        self._rate_base = self._emitted
        self._started_ms = None
        self._settle()

    def poll(self) -> pa.RecordBatch | None:
        if self.finished:
            return None
        progress = self._progress
        rows = self._rows_in(progress.part)
        want = rows - progress.offset
        if self._rate is not None:
            now = self._clock()
            if self._started_ms is None:
                self._started_ms = now
            due = int((now - self._started_ms) * self._rate / 1000) - (self._emitted - self._rate_base)
            if due < min(self._chunk, want):
                return None
            want = min(want, due)
        block = self._block_at(progress.part)
        offset = progress.offset
        batch = self._slice(block, offset, want)
        progress.offset += want
        self._emitted += want
        self.metrics["records_in"] += want
        if progress.offset >= rows:
            progress.next_part()
            self._settle()
        return batch
