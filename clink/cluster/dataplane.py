"""The data plane between workers: one Arrow Flight stream per channel (sender subtask → receiver
subtask), carrying batches, watermarks, barriers and the end of input in band, in order.

A batch travels as an Arrow IPC record batch; the other elements as a message of metadata alone:
``W<ms>`` (watermark), ``B<id>`` (barrier), ``E`` (end of input). Nothing is pickled.

Every stream names its job, attempt, receiver and sender in its descriptor and carries the job's
secret in a header, checked by a server middleware before the stream is read: a stream without it,
with another job's, or from another attempt of the job (a worker that should have stopped) is
refused.

Backpressure: a receiver takes at most ``inbox_size`` elements ahead of its worker; then its
stream handlers wait, gRPC's flow control stops the sender's writes, the sender's channel queue
fills, and once a channel holds more than ``channel_bytes`` the sending worker stops reading its
sources (``has_credit``). A worker always takes what arrives, so two workers that send to each
other never wait on each other.
"""

from __future__ import annotations

import hmac
import io
import queue
import threading

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.ipc

from clink.runtime.elements import Barrier, Batch, Element, EndOfInput, Idleness, Watermark

__all__ = ["FlightInbox", "FlightTransport", "ResultInbox", "ResultSender", "SECRET_HEADER"]

SECRET_HEADER = "clink-job-secret"


class _SecretCheck(flight.ServerMiddlewareFactory):
    def __init__(self, secret: str) -> None:
        super().__init__()
        self._secret = secret.encode()

    def start_call(self, info, headers):
        given = headers.get(SECRET_HEADER) or []
        if len(given) != 1 or not hmac.compare_digest(given[0].encode() if isinstance(given[0], str)
                                                      else bytes(given[0]), self._secret):
            raise flight.FlightUnauthenticatedError("wrong or missing job secret on a clink data stream")
        return None


class _SecretHeader(flight.ClientMiddlewareFactory):
    def __init__(self, secret: str) -> None:
        self._secret = secret

    def start_call(self, info):
        secret = self._secret

        class Header(flight.ClientMiddleware):
            def sending_headers(self):
                return {SECRET_HEADER: secret}

        return Header()


def aligned(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with every buffer aligned to its values. Batches read off a Flight stream point
    into gRPC's messages at any offset; Arrow's compute kernels (group-by, join) want aligned
    values and warn on each unaligned input, so such a batch is copied once, as it arrives."""
    for column in batch.columns:
        if any(buffer is not None and buffer.address % 8 for buffer in column.buffers()):
            return pa.ipc.read_record_batch(batch.serialize(), batch.schema)
    return batch


def _decode(chunk) -> Element:
    if chunk.data is not None:
        return Batch(aligned(chunk.data))
    meta = chunk.app_metadata.to_pybytes()
    kind, value = meta[:1], meta[1:]
    if kind == b"W":
        return Watermark(int(value))
    if kind == b"B":
        return Barrier(int(value))
    if kind == b"E":
        return EndOfInput()
    if kind == b"I":
        return Idleness(value == b"1")
    raise ValueError(f"unknown element {meta[:16]!r} on a clink data stream")


class FlightInbox(flight.FlightServerBase):
    """A worker's end of its channels: ``deliver(target, sender, element)`` gets every element
    of streams for this job and attempt."""

    def __init__(self, host: str, *, job: str, attempt: int, secret: str, deliver) -> None:
        super().__init__(f"grpc+tcp://{host}:0", middleware={"secret": _SecretCheck(secret)})
        self.host = host
        self.job = job
        self.attempt = attempt
        self.deliver = deliver
        self.bytes_in = 0

    @property
    def location(self) -> str:
        return f"grpc+tcp://{self.host}:{self.port}"

    def do_put(self, context, descriptor, reader, writer):
        try:
            job, attempt, target, sender = (p.decode() for p in descriptor.path)
        except ValueError:
            raise flight.FlightServerError("not a clink channel") from None
        if job != self.job or int(attempt) != self.attempt:
            raise flight.FlightUnauthenticatedError(f"a stream of job {job} attempt {attempt} reached job "
                                                    f"{self.job} attempt {self.attempt}: refused")
        target, sender = int(target), int(sender)
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                return
            element = _decode(chunk)
            if chunk.data is not None:
                self.bytes_in += chunk.data.nbytes
            self.deliver(target, sender, element)


class ResultInbox(flight.FlightServerBase):
    """Where the rows of a job's bare ``SELECT`` queries come back to the process that started
    it: ``deliver(query, batch)`` for every batch, in order per query; and the text its print
    sinks write: ``printed(stream, text)``, ``stream`` being ``"stdout"`` or ``"stderr"``."""

    def __init__(self, host: str, *, job: str, secret: str, deliver=None, printed=None) -> None:
        super().__init__(f"grpc+tcp://{host}:0", middleware={"secret": _SecretCheck(secret)})
        self.host = host
        self.job = job
        self.deliver = deliver
        self.printed = printed

    @property
    def location(self) -> str:
        return f"grpc+tcp://{self.host}:{self.port}"

    def do_put(self, context, descriptor, reader, writer):
        path = [p.decode() for p in descriptor.path]
        if len(path) != 3 or path[0] != self.job or path[1] not in ("result", "text"):
            raise flight.FlightUnauthenticatedError("not a stream of this job's results: refused")
        for chunk in reader:
            if path[1] == "text":
                if self.printed is not None:
                    for text in chunk.data.column(0).to_pylist():
                        self.printed(path[2], text)
            elif self.deliver is not None:
                self.deliver(path[2], aligned(chunk.data))


class ResultSender:
    """A worker's side of ``ResultInbox``: one stream per query, written in the worker's thread."""

    def __init__(self, location: str, *, job: str, secret: str) -> None:
        self.location = location
        self.job = job
        self._client = flight.connect(location, middleware=[_SecretHeader(secret)])
        self._writers: dict[str, tuple] = {}

    def send(self, query: str, batch: pa.RecordBatch) -> None:
        writer, schema = self._writers.get(query, (None, None))
        if writer is not None and not batch.schema.equals(schema):
            writer.done_writing()
            writer.close()
            writer = None
        if writer is None:
            descriptor = flight.FlightDescriptor.for_path(self.job, "result", query)
            writer, _ = self._client.do_put(descriptor, batch.schema)
            self._writers[query] = (writer, batch.schema)
        writer.write_batch(batch)

    def text(self, stream: str) -> _SentText:
        """A text stream (for a print sink) whose writes go to ``ResultInbox.printed``."""
        return _SentText(self, stream)

    def _send_text(self, stream: str, text: str) -> None:
        key = f"text/{stream}"
        if key not in self._writers:
            descriptor = flight.FlightDescriptor.for_path(self.job, "text", stream)
            self._writers[key] = (self._client.do_put(descriptor, _TEXT)[0], _TEXT)
        self._writers[key][0].write_batch(pa.record_batch([pa.array([text], pa.string())], schema=_TEXT))

    def close(self) -> None:
        for writer, _ in self._writers.values():
            writer.done_writing()
            writer.close()
        self._writers.clear()
        self._client.close()


_TEXT = pa.schema([("text", pa.string())])


class _SentText(io.TextIOBase):
    """What a worker's print sink writes to: each write is sent back to the submitter whole."""

    def __init__(self, sender: ResultSender, stream: str) -> None:
        super().__init__()
        self._sender = sender
        self._stream = stream

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text:
            self._sender._send_text(self._stream, text)
        return len(text)


class _Channel:
    """One outgoing channel: a queue and the thread that writes it to its stream in order."""

    def __init__(self, transport: FlightTransport, location: str, target: int, sender: int) -> None:
        self.transport = transport
        self.location = location
        self.target = target
        self.sender = sender
        self.queue: queue.Queue = queue.Queue()
        self.pending_bytes = 0
        self.pending = 0
        self.lock = threading.Lock()
        self.idle = threading.Event()
        self.idle.set()
        self.thread = threading.Thread(target=self._write, daemon=True,
                                       name=f"clink-channel-{sender}-{target}")
        self.thread.start()

    def put(self, element: Element) -> None:
        size = element.data.nbytes if isinstance(element, Batch) else 0
        with self.lock:
            self.pending_bytes += size
            self.pending += 1
            self.idle.clear()
        self.queue.put((element, size))

    def _open(self, schema: pa.Schema):
        t = self.transport
        descriptor = flight.FlightDescriptor.for_path(t.job, str(t.attempt), str(self.target), str(self.sender))
        writer, _ = t.client(self.location).do_put(descriptor, schema)
        return writer, schema

    def _write(self) -> None:
        writer = schema = None
        try:
            while True:
                element, size = self.queue.get()
                if element is None:  # the transport closes: the stream ends here
                    if writer is not None:
                        writer.done_writing()
                        writer.close()
                    return
                if isinstance(element, Batch):
                    batch = element.data
                    if writer is not None and not batch.schema.equals(schema):
                        writer.done_writing()
                        writer.close()  # waits until the receiver has read it all: order is kept
                        writer = None
                    if writer is None:
                        writer, schema = self._open(batch.schema)
                    writer.write_batch(batch)
                    self.transport.bytes_out += size
                else:
                    if writer is None:
                        writer, schema = self._open(self.transport.schema_of(self.sender))
                    if isinstance(element, Watermark):
                        writer.write_metadata(pa.py_buffer(b"W%d" % element.ts))
                    elif isinstance(element, Barrier):
                        writer.write_metadata(pa.py_buffer(b"B%d" % element.checkpoint_id))
                    elif isinstance(element, Idleness):
                        writer.write_metadata(pa.py_buffer(b"I1" if element.idle else b"I0"))
                    else:
                        writer.write_metadata(pa.py_buffer(b"E"))
                with self.lock:
                    self.pending_bytes -= size
                    self.pending -= 1
                    if not self.pending:
                        self.idle.set()
                if isinstance(element, EndOfInput):
                    writer.done_writing()
                    writer.close()
                    return
        except BaseException as exc:  # noqa: BLE001 - the worker fails with it at its next send
            self.transport.error = self.transport.error or exc
            self.idle.set()


class FlightTransport:
    """A worker's outgoing channels. ``locations[w]`` is worker ``w``'s inbox; ``schema_of(sender)``
    the schema of a sender's rows (a stream needs one before its first batch)."""

    def __init__(self, locations: list[str], *, job: str, attempt: int, secret: str, schema_of,
                 channel_bytes: int = 32 << 20) -> None:
        self.locations = locations
        self.job = job
        self.attempt = attempt
        self.schema_of = schema_of
        self.channel_bytes = channel_bytes
        self._middleware = [_SecretHeader(secret)]
        self._clients: dict[str, flight.FlightClient] = {}
        self._channels: dict[tuple[int, int], _Channel] = {}
        self.error: BaseException | None = None
        self.bytes_out = 0

    def client(self, location: str) -> flight.FlightClient:
        client = self._clients.get(location)
        if client is None:
            client = self._clients[location] = flight.connect(location, middleware=self._middleware)
        return client

    def send(self, worker: int, target: int, sender: int, element: Element) -> None:
        if self.error is not None:
            raise ConnectionError(f"a data stream to another worker failed: {self.error}")
        channel = self._channels.get((target, sender))
        if channel is None:
            channel = self._channels[(target, sender)] = _Channel(self, self.locations[worker], target, sender)
        channel.put(element)

    def has_credit(self) -> bool:
        if self.error is not None:
            raise ConnectionError(f"a data stream to another worker failed: {self.error}")
        return all(c.pending_bytes < self.channel_bytes for c in self._channels.values())

    def flush(self) -> None:
        """Wait until every element sent so far is written."""
        for channel in list(self._channels.values()):
            channel.idle.wait()
        if self.error is not None:
            raise ConnectionError(f"a data stream to another worker failed: {self.error}")

    def close(self) -> None:
        """End every channel's thread (after its job: nothing more is sent) and the connections."""
        for channel in self._channels.values():
            channel.queue.put((None, 0))
        for channel in self._channels.values():
            channel.thread.join(timeout=5)
        self._channels.clear()
        for client in self._clients.values():
            client.close()
        self._clients.clear()
