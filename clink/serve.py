"""Serve a running job's queries over Arrow Flight (``clink run pipeline.sql --serve PORT``).

Each bare ``SELECT`` of the script (``query_1``, ``query_2``, …) is a Flight stream: a client
lists them (``list_flights``), reads a schema (``get_schema``) and reads the rows with ``do_get``
(the ticket is the query's name) as the job produces them. An updating query's batches are its
changes, with their kind in ``_rowkind``, as ``Result`` and ``EmbeddedJob`` give them.

Every call needs the run's token: ``Authorization: Bearer <token>`` in the call's headers, or
Flight's basic-auth handshake with the token as the password (any user name), which answers with
that bearer header. Anything else is refused with ``FlightUnauthenticatedError``.

What a client gets, and what is kept for it (docs/arrow.md says the same to users):

- Each query keeps the batches it has produced since the start of the run, up to
  ``buffer_bytes`` (``--serve-buffer``). A client reads from the oldest batch still kept: one that
  connects early enough gets every row from the start.
- Beyond the bound, batches that every connected client has read are dropped, oldest first; a
  client that connects later starts after them. That is never silent: the first drop of each
  query is reported on standard error, and every batch a client gets carries, as its Flight
  ``app_metadata``, the number of its first row in the query's output (``{"first_row": N}``):
  a first batch with ``first_row`` above 0 says how many rows came before it.
- A connected client that has not read the oldest batch holds it: once a query holds more than
  the bound, the job stops reading its sources until that client reads on (backpressure, as in
  Flink: nothing is dropped for a slow client, the pipeline waits for it; said on standard error).
  A client that disconnects holds nothing.
- When a bounded pipeline ends, the run serves on until every query has been read to its end by a
  client and no client is reading, then stops; Ctrl-C stops it at once. A stream cut short by a
  stop ends with ``FlightCancelledError``; one cut by a pipeline failure with
  ``FlightServerError`` naming the error.

Nothing here is imported by the runtime, and the run path imports it only with ``--serve``.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import secrets
import sys
import threading
import time
from collections import deque
from typing import TextIO

import pyarrow as pa
import pyarrow.flight as flight

from clink.errors import UsageError

__all__ = ["QueryServer", "serve_job", "token_from_environment"]

TOKEN_VARIABLE = "CLINK_SERVE_TOKEN"
DEFAULT_BUFFER_BYTES = 64 << 20


def token_from_environment() -> tuple[str, bool]:
    """The token clients must present: ``CLINK_SERVE_TOKEN``, else a new random one; and whether
    it was made here (then the run prints it)."""
    given = os.environ.get(TOKEN_VARIABLE)
    if given is not None:
        if len(given.strip()) < 8:
            raise UsageError(f"{TOKEN_VARIABLE} is too short to guard the served queries: give at least 8 "
                             "characters, or unset it and a random token is made")
        return given.strip(), False
    return secrets.token_urlsafe(24), True


class _TokenCheck(flight.ServerMiddlewareFactory):
    """Refuse every call that does not carry the token, before the server looks at it."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token.encode()

    def start_call(self, info, headers):
        for value in headers.get("authorization") or []:
            scheme, _, credential = value.partition(" ")
            if scheme.lower() == "bearer" and hmac.compare_digest(credential.strip().encode(), self._token):
                return None
            if scheme.lower() == "basic" and info.method == flight.FlightMethod.HANDSHAKE:
                # Flight's basic-auth handshake: the token as the password; the answer is the
                # bearer header the client then sends with every call.
                try:
                    _, _, password = base64.b64decode(credential.strip()).decode().partition(":")
                except (ValueError, UnicodeDecodeError):
                    break
                if hmac.compare_digest(password.encode(), self._token):
                    return _Bearer(self._token.decode())
        raise flight.FlightUnauthenticatedError(
            "this clink run serves its queries to holders of its token only: send 'Authorization: Bearer "
            "<token>' (the token clink run printed, or CLINK_SERVE_TOKEN)")


class _Bearer(flight.ServerMiddleware):
    def __init__(self, token: str) -> None:
        self._token = token

    def sending_headers(self):
        return {"authorization": f"Bearer {self._token}"}


class _HandshakeOnly(flight.ServerAuthHandler):
    """Lets the basic-auth handshake through to ``_TokenCheck``, which has already checked it."""

    def authenticate(self, outgoing, incoming) -> None:
        return None

    def is_valid(self, token: bytes) -> bytes:
        return b""


class _Log:
    """One query's batches kept for its clients, numbered by batch (``seq``) and by row."""

    def __init__(self, name: str, schema: pa.Schema) -> None:
        self.name = name
        self.schema = schema
        self.batches: deque[tuple[int, pa.RecordBatch]] = deque()  # (first row, batch)
        self.base_seq = 0  # seq of batches[0]
        self.end_row = 0  # rows produced so far
        self.bytes = 0
        self.dropped_rows = 0
        self.ended = False
        self.read_to_end = False
        self.readers: dict[int, int] = {}  # reader id -> seq of the next batch it reads
        self.waiting_said = False

    @property
    def end_seq(self) -> int:
        return self.base_seq + len(self.batches)

    def trim(self, limit: int) -> int:
        """Drop the oldest batches beyond ``limit`` bytes that no connected reader still needs;
        the number of rows dropped."""
        dropped = 0
        needed = min(self.readers.values(), default=self.end_seq)
        while self.bytes > limit and self.batches and self.base_seq < needed:
            _, batch = self.batches.popleft()
            self.base_seq += 1
            self.bytes -= batch.nbytes
            dropped += batch.num_rows
        self.dropped_rows += dropped
        return dropped


class QueryServer(flight.FlightServerBase):
    """A Flight server of a job's queries; ``publish`` is what the job's result callback calls.

    ``schemas``: each query's name and schema. Bound to ``host:port`` (port 0: a free one,
    then ``port`` says which).
    """

    def __init__(self, schemas: dict[str, pa.Schema], *, token: str, host: str = "127.0.0.1", port: int = 0,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES, err: TextIO | None = None) -> None:
        try:
            bound = f"[{host}]" if ":" in host else host  # an IPv6 address goes in brackets
            super().__init__(f"grpc+tcp://{bound}:{port}", auth_handler=_HandshakeOnly(),
                             middleware={"token": _TokenCheck(token)})
        except (pa.ArrowException, OSError) as exc:
            raise UsageError(f"cannot serve on {host}:{port}: {exc}") from None
        self.host = host
        self.buffer_bytes = buffer_bytes
        self._err = err if err is not None else sys.stderr
        self._logs = {name: _Log(name, schema) for name, schema in schemas.items()}
        self._changed = threading.Condition()
        self._stopped: BaseException | None = None
        self._next_reader = 0

    # -- the job's side

    def publish(self, query: str, batch: pa.RecordBatch) -> None:
        """Keep ``batch`` of ``query`` for the clients and wake the ones waiting for it."""
        log = self._logs[query]
        if batch.num_rows == 0:
            return
        if not batch.schema.equals(log.schema):
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=log.schema)
        with self._changed:
            log.batches.append((log.end_row, batch))
            log.end_row += batch.num_rows
            log.bytes += batch.nbytes
            self._trim(log)
            self._changed.notify_all()

    def wait_for_room(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for room; True when there is. There is none while a
        query holds more than the buffer because a connected client has not read its oldest
        batches: the job should then wait (backpressure)."""
        with self._changed:
            if not self._has_room():
                self._changed.wait(timeout)
            return self._has_room()

    def finish(self) -> None:
        """The pipeline has ended: each stream ends after its last batch."""
        with self._changed:
            for log in self._logs.values():
                log.ended = True
            self._changed.notify_all()

    def drained(self) -> bool:
        """Every query has been read to its end by some client, and no client is reading."""
        with self._changed:
            return self._drained_locked()

    def wait_drained(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``drained``; whether it is."""
        with self._changed:
            if not self._drained_locked():
                self._changed.wait(timeout)
            return self._drained_locked()

    def stop(self, reason: BaseException, *, grace: float = 5.0) -> bool:
        """End every stream now with ``reason``, then shut the server down, waiting at most
        ``grace`` seconds for the streams to end; False if a stream did not end in that time."""
        with self._changed:
            if self._stopped is None:
                self._stopped = reason
            self._changed.notify_all()
        # A client that has stopped reading leaves its stream blocked inside gRPC's flow control,
        # and a shutdown waits for every stream: it must not keep the run from ending.
        shutting = threading.Thread(target=self.shutdown, name="clink serve shutdown", daemon=True)
        shutting.start()
        shutting.join(grace)
        if shutting.is_alive():
            print(f"serve: a client stopped reading without closing its stream; not waiting for it after "
                  f"{grace:g} s", file=self._err, flush=True)
            return False
        return True

    # -- Flight

    def list_flights(self, context, criteria):
        for name in self._logs:
            yield self._info(name)

    def get_flight_info(self, context, descriptor):
        return self._info(self._name_of(descriptor))

    def get_schema(self, context, descriptor):
        return flight.SchemaResult(self._logs[self._name_of(descriptor)].schema)

    def do_get(self, context, ticket):
        name = ticket.ticket.decode("utf-8", "replace")
        log = self._logs.get(name)
        if log is None:
            raise flight.FlightServerError(f"no query named {name!r}; this run serves {', '.join(self._logs)}")
        with self._changed:
            reader = self._next_reader
            self._next_reader += 1
        return flight.GeneratorStream(log.schema, self._stream(log, reader, context))

    def _stream(self, log: _Log, reader: int, context):
        # Registered once the stream starts: a generator that never starts never runs its
        # ``finally``, and a reader left behind would hold the pipeline back for ever.
        with self._changed:
            log.readers[reader] = log.base_seq  # from the oldest batch still kept
        try:
            while True:
                with self._changed:
                    while True:
                        if self._stopped is not None:
                            raise self._refusal(log)
                        seq = log.readers[reader]
                        if seq < log.end_seq:
                            first_row, batch = log.batches[seq - log.base_seq]
                            log.readers[reader] = seq + 1
                            self._trim(log)
                            self._changed.notify_all()  # the job may be waiting for this read
                            break
                        if log.ended:
                            log.read_to_end = True
                            return
                        if context.is_cancelled():
                            return
                        self._changed.wait(0.2)
                yield batch, json.dumps({"first_row": first_row}).encode()
        finally:
            with self._changed:
                log.readers.pop(reader, None)
                self._trim(log)
                self._changed.notify_all()

    # -- internals

    def _info(self, name: str) -> flight.FlightInfo:
        log = self._logs[name]
        with self._changed:
            rows = log.end_row - log.dropped_rows if log.ended else -1
        # No locations: the ticket is redeemed on this server, over the client's connection.
        return flight.FlightInfo(log.schema, flight.FlightDescriptor.for_path(name),
                                 [flight.FlightEndpoint(name.encode(), [])], rows, -1)

    def _name_of(self, descriptor) -> str:
        if descriptor.descriptor_type == flight.DescriptorType.PATH and len(descriptor.path) == 1:
            name = descriptor.path[0].decode("utf-8", "replace")
        else:
            name = (descriptor.command or b"").decode("utf-8", "replace")
        if name not in self._logs:
            raise flight.FlightServerError(f"no query named {name!r}; this run serves {', '.join(self._logs)}")
        return name

    def _has_room(self) -> bool:
        for log in self._logs.values():
            if log.bytes > self.buffer_bytes and log.readers:
                if not log.waiting_said:
                    log.waiting_said = True
                    print(f"serve: a client of {log.name} is more than {_size(self.buffer_bytes)} behind: the "
                          "pipeline waits for it to read on (backpressure)", file=self._err, flush=True)
                return False
        return True

    def _drained_locked(self) -> bool:
        return all(log.read_to_end and not log.readers for log in self._logs.values())

    def _trim(self, log: _Log) -> None:
        before = log.dropped_rows
        if log.trim(self.buffer_bytes) and before == 0:
            print(f"serve: {log.name} keeps its newest {_size(self.buffer_bytes)} for clients that connect "
                  f"later; its first {log.dropped_rows} row(s) are no longer served (--serve-buffer)",
                  file=self._err, flush=True)

    def _refusal(self, log: _Log) -> Exception:
        reason = self._stopped
        if isinstance(reason, (KeyboardInterrupt, _Stopped)):
            return flight.FlightCancelledError(f"the clink run was stopped before {log.name} ended")
        return flight.FlightServerError(f"the pipeline failed, so {log.name} ends here: {reason}")


class _Stopped(Exception):
    """The run was stopped on request (with a checkpoint, or by --stop-with-checkpoint-after)."""


def _size(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):g} MB"
    return f"{n / (1 << 10):g} kB" if n >= 1 << 10 else f"{n} bytes"


def serve_job(job, server: QueryServer, *, stop_after_checkpoints: int | None = None,
              err: TextIO | None = None, idle_sleep: float = 0.005) -> None:
    """Run ``job`` while ``server`` serves its queries; return when the pipeline has ended and its
    queries have been read to their ends, or it was stopped. The server is shut down on the way
    out, also by an error or Ctrl-C (which end the clients' streams with a refusal)."""
    err = err if err is not None else sys.stderr
    try:
        while not job.finished:
            if not server.wait_for_room(0.1):
                if job.stop_requested:
                    job.stop_with_checkpoint()
                continue
            if not job.step():
                time.sleep(idle_sleep)
            if stop_after_checkpoints is not None and job.metrics.checkpoints >= stop_after_checkpoints:
                job.request_stop()
            if job.stop_requested and not job.finished:
                job.stop_with_checkpoint()
        if job.metrics.stopped_at is not None or job.stop_requested:
            server.stop(_Stopped())
            return
        server.finish()
        if not server.drained():
            print("serve: the pipeline has ended; serving until every query has been read to its end "
                  "(Ctrl-C stops)", file=err, flush=True)
        # A stop asked for now (Ctrl-C or SIGTERM with a state directory) ends the serving too.
        while not server.wait_drained(0.2) and not job.stop_requested:
            pass
        if not server.stop(_Stopped()):
            _exit_without_waiting(0)
    except BaseException as exc:
        if not server.stop(exc):
            code = 130 if isinstance(exc, KeyboardInterrupt) else getattr(exc, "exit_code", 1)
            _exit_without_waiting(code)
        if isinstance(exc, KeyboardInterrupt):
            job.cancel()
        raise


def _exit_without_waiting(code: int) -> None:
    """End the process with ``code`` once the command is done, without the wait that pyarrow's
    exit hook would make for the server's blocked stream (it waits for the client to read, which
    may be never). Registered last, the hook runs before pyarrow's."""
    import atexit

    def leave() -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)

    atexit.register(leave)
