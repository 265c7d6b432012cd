"""The local executor: element flow, end of input, failure handling."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest

from clink.errors import PipelineError
from clink.runtime.connectors.base import Connector, ConnectorRegistry, SinkWriter, SourceReader
from clink.runtime.context import RuntimeContext
from clink.runtime.elements import MAX_WATERMARK
from clink.runtime.executor import Job, run_plan
from clink.runtime.plan import Chain, Plan, Sink, Source

SCHEMA = pa.schema([pa.field("a", pa.int64())])


class ListReader(SourceReader):
    """Yields the given batches, one per poll, then finishes."""

    def __init__(self, batches: list[pa.RecordBatch]) -> None:
        super().__init__()
        self.batches = list(batches)
        self.closed = False

    def poll(self) -> pa.RecordBatch | None:
        if not self.batches:
            self.finished = True
            return None
        batch = self.batches.pop(0)
        self.metrics["records_in"] = self.metrics.get("records_in", 0) + batch.num_rows
        return batch

    def close(self) -> None:
        self.closed = True


class ListWriter(SinkWriter):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []
        self.state = "open"

    def write(self, batch: pa.RecordBatch) -> None:
        assert self.state == "open"
        self.rows += batch.column(0).to_pylist()
        self.metrics["rows_out"] = len(self.rows)

    def close(self) -> None:
        self.state = "closed"

    def abort(self) -> None:
        self.state = "aborted"


def _context(reader: ListReader, writer: ListWriter) -> RuntimeContext:
    registry = ConnectorRegistry([
        Connector(name="list", description="test", create_source=lambda spec, ctx: reader,
                  create_sink=lambda spec, ctx: writer),
    ])
    return RuntimeContext(connectors=registry, stdout=io.StringIO())


def _plan(fn) -> Plan:
    return Plan(nodes=(
        Source(id=1, table="src", connector="list", schema=SCHEMA, table_schema=SCHEMA),
        Chain(id=2, fn=fn, input=1, schema=SCHEMA),
        Sink(id=3, table="dst", connector="list", input=2, schema=SCHEMA),
    ))


def _batch(values: list[int]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(values, pa.int64())], schema=SCHEMA)


def test_batches_flow_through_the_chain_and_the_sink_closes_at_the_end() -> None:
    reader, writer = ListReader([_batch([1, 2]), _batch([3])]), ListWriter()
    double = lambda batch, ctx: pa.record_batch([pa.compute.multiply(batch.column(0), 2)], schema=SCHEMA)  # noqa: E731
    metrics = run_plan(_plan(double), _context(reader, writer))
    assert writer.rows == [2, 4, 6]
    assert writer.state == "closed"
    assert reader.closed
    assert metrics.records_in == {"src": 3}
    assert metrics.records_out == {"dst": 3}
    # The bounded source's final watermark reached the sink.
    assert metrics.watermark == MAX_WATERMARK


def test_a_failing_chain_aborts_the_sink_and_reports_the_error() -> None:
    reader, writer = ListReader([_batch([1]), _batch([2])]), ListWriter()

    def fail(batch: pa.RecordBatch, ctx) -> pa.RecordBatch:
        if batch.column(0)[0].as_py() == 2:
            raise pa.ArrowInvalid("overflow")
        return batch

    with pytest.raises(PipelineError, match="integer overflow"):
        run_plan(_plan(fail), _context(reader, writer))
    assert writer.state == "aborted"
    assert writer.rows == [1]


def test_step_does_bounded_work_and_finishes() -> None:
    reader, writer = ListReader([_batch([1]), _batch([2])]), ListWriter()
    job = Job(_plan(lambda b, ctx: b), _context(reader, writer))
    assert job.step() and writer.rows == [1]
    assert job.step() and writer.rows == [1, 2]
    assert not job.finished
    job.step()
    assert job.finished and writer.state == "closed"
    assert not job.step()


class SilentReader(SourceReader):
    """A source that never ends and never has rows: an idle input."""

    bounded = False

    def poll(self) -> pa.RecordBatch | None:
        return None


def test_an_idle_source_stops_holding_the_watermark_back() -> None:
    from clink.runtime.plan import Union

    ts_schema = pa.schema([pa.field("ts", pa.timestamp("ms"))])
    batches = [pa.record_batch([pa.array([t], pa.timestamp("ms"))], schema=ts_schema) for t in (1000, 5000, 9000)]
    busy, writer = ListReader(batches), ListWriter()
    busy.bounded = False
    busy_poll = busy.poll

    def never_finish() -> pa.RecordBatch | None:
        batch = busy_poll()
        busy.finished = False  # an endless stream that has nothing more for now
        return batch

    busy.poll = never_finish
    now = [0]
    registry = ConnectorRegistry([
        Connector(name="busy", description="test", create_source=lambda spec, ctx: busy),
        Connector(name="silent", description="test", create_source=lambda spec, ctx: SilentReader()),
        Connector(name="list", description="test", create_sink=lambda spec, ctx: writer),
    ])
    watermark = lambda batch, ctx: batch.column(0)  # noqa: E731 - the event time itself
    plan = Plan(nodes=(
        Source(id=1, table="busy", connector="busy", schema=ts_schema, table_schema=ts_schema,
               watermark=watermark, idle_timeout=1000),
        Source(id=2, table="silent", connector="silent", schema=ts_schema, table_schema=ts_schema,
               watermark=watermark, idle_timeout=1000),
        Union(id=3, inputs=(1, 2), schema=ts_schema),
        Sink(id=4, table="dst", connector="list", input=3, schema=ts_schema),
    ))
    job = Job(plan, RuntimeContext(connectors=registry, clock=lambda: now[0], stdout=io.StringIO()))
    job.step()
    # The silent source has sent no watermark and is not idle yet: the union cannot move.
    assert job.metrics.watermark is None
    now[0] = 500
    job.step()
    assert job.metrics.watermark is None
    now[0] = 1500  # past the silent source's idle timeout
    job.step()
    assert job.metrics.watermark == 9000
    assert len(writer.rows) == 3
