"""The Flight data plane between workers: elements arrive in order per channel, a stream without the
job's secret (or from another attempt) is refused, and a slow receiver stops its sender."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from clink.cluster.dataplane import SECRET_HEADER, FlightInbox, FlightTransport
from clink.runtime.elements import Barrier, Batch, EndOfInput, Idleness, Watermark

SCHEMA = pa.schema([("a", pa.int64()), ("s", pa.string())])


def _batch(start: int, rows: int, schema: pa.Schema = SCHEMA) -> pa.RecordBatch:
    values = list(range(start, start + rows))
    return pa.record_batch([pa.array(values, pa.int64()), pa.array([str(v) for v in values])], schema=schema)


class _Received:
    def __init__(self) -> None:
        self.items: list = []
        self.ended = threading.Event()

    def __call__(self, target: int, sender: int, element) -> None:
        self.items.append((target, sender, element))
        if isinstance(element, EndOfInput) and sum(isinstance(e, EndOfInput) for _, _, e in self.items) == 2:
            self.ended.set()


def _pair(received, *, secret: str = "s3cret", attempt: int = 1, channel_bytes: int = 32 << 20):
    inbox = FlightInbox("127.0.0.1", job="job-1", attempt=attempt, secret=secret, deliver=received)
    transport = FlightTransport([inbox.location], job="job-1", attempt=attempt, secret=secret,
                                schema_of=lambda sid: SCHEMA, channel_bytes=channel_bytes)
    return inbox, transport


def test_elements_arrive_in_order_per_channel_with_rows_intact() -> None:
    received = _Received()
    inbox, transport = _pair(received)
    try:
        sent = {7: [], 8: []}
        for i in range(20):
            for sender in (7, 8):
                element = [Batch(_batch(100 * i + sender, 50)), Watermark(1000 + i), Barrier(i),
                           Idleness(i % 2 == 0)][i % 4]
                transport.send(0, 3, sender, element)
                sent[sender].append(element)
        # A batch of another schema on the same channel: the stream is opened again, in order.
        other = pa.schema([("b", pa.float64())])
        odd = Batch(pa.record_batch([pa.array([0.5, 1.5])], schema=other))
        transport.send(0, 3, 7, odd)
        sent[7].append(odd)
        for sender in (7, 8):
            transport.send(0, 3, sender, EndOfInput())
            sent[sender].append(EndOfInput())
        transport.flush()
        assert received.ended.wait(10)
        for sender in (7, 8):
            got = [e for t, s, e in received.items if s == sender and t == 3]
            assert len(got) == len(sent[sender])
            for mine, theirs in zip(sent[sender], got, strict=True):
                assert type(mine) is type(theirs)
                if isinstance(mine, Batch):
                    assert theirs.data.equals(mine.data)
                else:
                    assert theirs == mine
        assert transport.bytes_out == sum(e.data.nbytes for es in sent.values() for e in es if isinstance(e, Batch))
    finally:
        transport.close()
        inbox.shutdown()


def _put(location: str, headers: dict, path: tuple[str, ...]) -> None:
    class Header(flight.ClientMiddlewareFactory):
        def start_call(self, info):
            class M(flight.ClientMiddleware):
                def sending_headers(self):
                    return headers
            return M()

    client = flight.connect(location, middleware=[Header()])
    try:
        writer, _ = client.do_put(flight.FlightDescriptor.for_path(*path), SCHEMA)
        writer.write_batch(_batch(0, 3))
        writer.done_writing()
        writer.close()
    finally:
        client.close()


@pytest.mark.parametrize("headers", [{}, {SECRET_HEADER: "wrong"}, {SECRET_HEADER: "s3cre"}])
def test_a_stream_without_the_jobs_secret_is_refused(headers: dict) -> None:
    received = _Received()
    inbox, transport = _pair(received)
    try:
        with pytest.raises(flight.FlightUnauthenticatedError, match="secret"):
            _put(inbox.location, headers, ("job-1", "1", "3", "7"))
        assert received.items == []
        # The right secret passes.
        _put(inbox.location, {SECRET_HEADER: "s3cret"}, ("job-1", "1", "3", "7"))
        assert [type(e) for _, _, e in received.items] == [Batch]
    finally:
        inbox.shutdown()


def test_a_stream_of_an_earlier_attempt_is_refused() -> None:
    received = _Received()
    inbox, _ = _pair(received, attempt=2)
    try:
        with pytest.raises(flight.FlightUnauthenticatedError, match="attempt 1"):
            _put(inbox.location, {SECRET_HEADER: "s3cret"}, ("job-1", "1", "3", "7"))
        assert received.items == []
    finally:
        inbox.shutdown()


def test_a_slow_receiver_stops_the_sender_at_the_channels_bound() -> None:
    gate = threading.Event()
    taken: list = []

    def slow(target: int, sender: int, element) -> None:
        gate.wait()
        taken.append(element)

    inbox, transport = _pair(slow, channel_bytes=4 << 20)
    try:
        batch = _batch(0, 50_000)  # about 1.2 MB
        sent = 0
        deadline = time.monotonic() + 10
        while transport.has_credit() and time.monotonic() < deadline:
            transport.send(0, 3, 7, Batch(batch))
            sent += 1
            time.sleep(0.01)
        assert not transport.has_credit(), "the sender never ran out of credit"
        # What waits is bounded: the channel's bound and what gRPC holds in flight, far below what
        # an unbounded sender would have queued in 10 s.
        assert sent * batch.nbytes < 64 << 20
        gate.set()
        transport.send(0, 3, 7, EndOfInput())
        transport.flush()
        assert transport.has_credit()
        deadline = time.monotonic() + 10
        while len(taken) < sent + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sum(isinstance(e, Batch) for e in taken) == sent
    finally:
        gate.set()
        transport.close()
        inbox.shutdown()
