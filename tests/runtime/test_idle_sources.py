"""Two sources feed one window aggregation; one goes silent. After its idle timeout it no
longer holds the watermark back, and windows of the other source fire."""

from __future__ import annotations

import io

import pyarrow as pa

import clink
from clink.runtime.connectors import default_registry
from clink.runtime.connectors.base import Connector, OptionSpec, SourceReader
from clink.runtime.context import RuntimeContext

S = 1000


class Feed(SourceReader):
    """An endless source: hands out the queued batches, then has nothing (but never ends)."""

    bounded = False

    def __init__(self, times: list[int], schema: pa.Schema) -> None:
        super().__init__()
        self.queue = [pa.record_batch([pa.array([t], pa.int64()).cast(pa.timestamp("ms"))], names=["ts"])
                      for t in times]

    def poll(self) -> pa.RecordBatch | None:
        return self.queue.pop(0) if self.queue else None


def test_an_idle_source_does_not_stop_windows_of_the_other_from_firing() -> None:
    now = [0]
    feeds = {"busy": [1 * S, 4 * S, 12 * S, 15 * S], "quiet": [2 * S]}
    registry = default_registry()
    registry.register(Connector(
        name="feed", description="test feed", source_options=(OptionSpec(name="which", description=""),),
        create_source=lambda spec, ctx: Feed(feeds[spec.options["which"]], spec.schema)))
    sql = [
        "CREATE TABLE busy (ts TIMESTAMP(3), WATERMARK FOR ts AS ts) "
        "WITH ('connector' = 'feed', 'which' = 'busy')",
        "CREATE TABLE quiet (ts TIMESTAMP(3), WATERMARK FOR ts AS ts) "
        "WITH ('connector' = 'feed', 'which' = 'quiet', 'scan.watermark.idle-timeout' = '10 s')",
        "CREATE VIEW both_ AS SELECT ts FROM busy UNION ALL SELECT ts FROM quiet",
        "SELECT window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE both_, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end",
    ]
    context = RuntimeContext(connectors=registry, clock=lambda: now[0], stdout=io.StringIO())
    result = clink.sql(sql, context=context)
    rows = []

    def drain(steps: int) -> None:
        for _ in range(steps):
            result.step()
        for batch in result.take():
            rows.extend(batch.to_pylist())

    drain(6)
    # The quiet source's watermark is 2 s: window [0, 10 s) cannot fire, though busy is at 15 s.
    assert rows == []
    now[0] = 11 * S  # the quiet source has had no rows for longer than its idle timeout
    drain(1)
    assert [(r["window_start"].second, r["n"]) for r in rows] == [(0, 3)]
    result.cancel()
