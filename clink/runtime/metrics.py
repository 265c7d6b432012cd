"""What a running job measures about itself, one model for every way of reading it.

The executor keeps a ``Meter`` per subtask (plain counters it bumps per batch, never per row) and a
``Latency`` histogram per sink. ``operator_rows`` turns them, with what the operators and readers
report, into one row per operator and subtask; ``job.metrics()`` hands those rows out as an Arrow
table, the Prometheus endpoint (``clink.runtime.prometheus``) and the dashboard read the same
rows. Names follow Flink's where Flink has the metric (numRecordsIn → ``records_in``,
busyTimeMsPerSecond → ``busy_ms``, backPressuredTimeMsPerSecond → ``backpressured_ms``,
currentInputWatermark → ``watermark``).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow as pa


class Meter:
    """Counters of one subtask. Rows and bytes are counted per batch; ``busy_ns`` is the time the
    subtask spent on its own work, ``blocked_ns`` the time it waited for its output to be taken
    (the operators below it, in this process; the network, to another worker)."""

    __slots__ = ("records_in", "bytes_in", "records_out", "bytes_out", "busy_ns", "blocked_ns",
                 "alignment_ns", "aligning_since")

    def __init__(self) -> None:
        self.records_in = 0
        self.bytes_in = 0
        self.records_out = 0
        self.bytes_out = 0
        self.busy_ns = 0
        self.blocked_ns = 0
        #: How long the last checkpoint barrier took to arrive on every input (0 for one input).
        self.alignment_ns = 0
        self.aligning_since = 0


class Latency:
    """A histogram of latencies in milliseconds: 16 buckets per power of two from 0.125 ms to
    about 35 years (replayed history is old), so a quantile is read to within 4.4% of its value.
    ``add`` takes a whole batch's latencies at once."""

    EDGES = np.exp2(np.arange(-3 * 16, 40 * 16 + 1) / 16.0)
    #: A batch's latencies are read from at most this many of its rows, evenly spaced, each
    #: standing for its share of the batch: a quantile of a sample that size is as good as the
    #: buckets, and a large batch costs no more than a small one.
    SAMPLE = 512

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = np.zeros(len(self.EDGES) + 1, dtype=np.float64)
        self.total = 0

    def add(self, ms: np.ndarray, rows: int | None = None) -> None:
        """The latencies of a batch's rows, or of an even sample of ``rows`` rows."""
        n = len(ms) if rows is None else rows
        if n:
            sample = ms[::-(-len(ms) // self.SAMPLE)] if len(ms) > self.SAMPLE else ms
            self.counts += np.bincount(np.searchsorted(self.EDGES, sample), minlength=len(self.counts)) * (
                n / len(sample))
            self.total += n

    def add_one(self, ms: float, count: int) -> None:
        """``count`` rows that all waited ``ms``."""
        if count:
            self.counts[np.searchsorted(self.EDGES, ms)] += count
            self.total += count

    def quantile(self, q: float) -> float | None:
        """The upper edge of the bucket holding quantile ``q``; None before the first row."""
        if not self.total:
            return None
        index = int(np.searchsorted(np.cumsum(self.counts), q * self.total))
        return float(self.EDGES[min(index, len(self.EDGES) - 1)])


OPERATOR_SCHEMA = pa.schema([
    ("operator", pa.string()),       # the stable id (source:<table>, sink:<table>, a stateful uid) or kind-node
    ("kind", pa.string()),           # source, chain, exchange, sink, or the stateful operator's kind
    ("node", pa.int32()),
    ("subtask", pa.int32()),
    ("name", pa.string()),           # the table, or what a chain computes
    ("sql", pa.string()),            # where in the SQL the operator comes from (file:line:column)
    ("inputs", pa.list_(pa.int32())),  # the nodes it reads from
    ("records_in", pa.int64()),
    ("records_out", pa.int64()),
    ("bytes_in", pa.int64()),
    ("bytes_out", pa.int64()),
    ("records_in_per_s", pa.float64()),
    ("records_out_per_s", pa.float64()),
    ("watermark", pa.timestamp("ms", tz="UTC")),
    ("watermark_lag_ms", pa.int64()),
    ("late_records", pa.int64()),
    ("skipped_records", pa.int64()),
    ("state_rows", pa.int64()),
    ("state_bytes", pa.int64()),
    ("busy_ms", pa.float64()),
    ("backpressured_ms", pa.float64()),
    ("busy_ratio", pa.float64()),
    ("backpressured_ratio", pa.float64()),
    ("alignment_ms", pa.float64()),
    ("latency_p50_ms", pa.float64()),      # event time -> written by the sink
    ("latency_p99_ms", pa.float64()),
    ("ingestion_latency_p50_ms", pa.float64()),  # read by the source -> written by the sink
    ("ingestion_latency_p99_ms", pa.float64()),
])

SPLIT_SCHEMA = pa.schema([
    ("operator", pa.string()),
    ("subtask", pa.int32()),
    ("split", pa.string()),
    ("position", pa.string()),   # the reader's position, as its checkpoint records it (JSON)
    ("lag", pa.int64()),         # records behind the end of the split (Kafka: the consumer lag); null: unknown
    ("watermark", pa.timestamp("ms", tz="UTC")),
])

CHECKPOINT_SCHEMA = pa.schema([
    ("checkpoint", pa.int64()),
    ("completed", pa.timestamp("ms", tz="UTC")),
    ("duration_ms", pa.float64()),
    ("size_bytes", pa.int64()),
    ("alignment_ms", pa.float64()),
])

TABLES = {"operators": OPERATOR_SCHEMA, "splits": SPLIT_SCHEMA, "checkpoints": CHECKPOINT_SCHEMA}


def to_table(rows: list[dict], what: str) -> pa.Table:
    """``rows`` (plain values, as ``operator_rows`` makes them) as a table of schema ``TABLES[what]``."""
    schema = TABLES.get(what)
    if schema is None:
        raise ValueError(f"no metrics table {what!r}: there are {', '.join(TABLES)}")
    return pa.Table.from_pylist(rows, schema=schema)


def position_text(position: object) -> str | None:
    if position is None:
        return None
    try:
        return json.dumps(position, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(position)


class Rates:
    """Per second, for each subtask, how fast its counters grew over the last stretch of at least
    a second (since the start, for the first): rows in and out, and the share of the time it was
    busy or blocked on its output."""

    FIELDS = ("records_in", "records_out", "busy_ns", "blocked_ns")

    def __init__(self, started: float) -> None:
        self._then = started
        self._counts: dict[int, tuple[int, ...]] = {}
        self._rates: dict[int, tuple[float, ...]] = {}

    def update(self, meters: dict[int, Meter], now: float) -> None:
        elapsed = now - self._then
        if elapsed <= 0 or (elapsed < 1.0 and self._rates):
            return
        counts = {sid: tuple(getattr(m, f) for f in self.FIELDS) for sid, m in list(meters.items())}
        zero = (0,) * len(self.FIELDS)
        self._rates = {sid: tuple((v - w) / elapsed for v, w in zip(c, self._counts.get(sid, zero), strict=True))
                       for sid, c in counts.items()}
        self._counts = counts
        self._then = now

    def of(self, sid: int) -> dict[str, float]:
        """records_in/out per second, and busy/blocked as a share of the time (0..1)."""
        r = self._rates.get(sid, (0.0,) * len(self.FIELDS))
        return {"records_in_per_s": r[0], "records_out_per_s": r[1],
                "busy_ratio": min(r[2] / 1e9, 1.0), "backpressured_ratio": min(r[3] / 1e9, 1.0)}


def wall_ms() -> int:
    return time.time_ns() // 1_000_000
