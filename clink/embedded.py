"""Run a compiled pipeline inside an application: push rows in, poll results out as Arrow.

``Plan.start()`` returns an ``EmbeddedJob``. The application pushes rows into the tables
declared ``WITH ('connector' = 'push')`` and polls the rows of the script's bare ``SELECT``
queries. The job runs either when the application steps it (``step()``, ``run_until_idle()``,
or implicitly in ``poll()``), or by itself in a background thread (``background=True``). Every
method is safe to call from any thread: one lock guards the job, the push buffers and the
result queues. docs/embedding.md is the user's guide to all of this.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Self

import pyarrow as pa

from clink.errors import UsageError
from clink.records import evolve
from clink.runtime.connectors.base import ConnectorRegistry
from clink.runtime.connectors.push import PushInputs
from clink.runtime.context import RuntimeContext
from clink.runtime.executor import Job, Metrics
from clink.runtime.plan import Plan as RuntimePlan

__all__ = ["EmbeddedJob", "QueryStream"]

RowsCallback = Callable[[pa.RecordBatch], None]


class EmbeddedJob:
    """A running pipeline that belongs to the application which started it.

    Made by ``Plan.start()``; see there for the arguments. ``idle_sleep`` is the longest the
    background thread (or ``wait()``) sleeps after a round in which nothing happened; a push
    wakes the background thread at once.
    """

    def __init__(self, plan: RuntimePlan, *, state_dir: str | Path | None = None,
                 config: Mapping[str, str] | None = None, background: bool = False,
                 context: RuntimeContext | None = None, idle_sleep: float = 0.01) -> None:
        self._queries: dict[str, pa.Schema] = {
            s.table: s.schema for s in plan.sinks if s.connector == "collect"}
        self._pending: dict[str, deque[pa.RecordBatch]] = {name: deque() for name in self._queries}
        self._callbacks: dict[str, RowsCallback] = {}
        self._inputs = PushInputs()
        # One lock for everything the job touches. Re-entrant: results are delivered, and
        # callbacks called, by whichever thread is stepping the job while it holds the lock.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._error: BaseException | None = None
        self._idle_sleep = idle_sleep
        self._halt = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

        if context is None:
            ctx = RuntimeContext()
            registry = ctx.connectors  # a fresh registry of our own: register into it
        else:
            ctx = context
            # The caller's registry may be shared with other jobs: give this job a copy.
            registry = ConnectorRegistry(context.connectors.as_mapping().values())
        registry.register(self._inputs.connector())
        ctx = evolve(ctx.with_config(dict(config or {})), connectors=registry, on_result=self._deliver)
        if state_dir is not None:
            # A plain path or a file:// URI (RuntimeContext refuses other URIs).
            ctx = evolve(ctx, state_dir=state_dir if isinstance(state_dir, Path) else str(state_dir))
        self._job = Job(plan, ctx)
        self._has_state_dir = ctx.state_dir is not None
        self._seen_checkpoints = self._job.metrics.checkpoints
        self._inputs.started()
        if background:
            self._thread = threading.Thread(target=self._run_in_background, name=f"clink {plan.name}",
                                            daemon=True)
            self._thread.start()

    # -- what the pipeline has

    @property
    def queries(self) -> list[str]:
        """Names of the result streams ``poll`` reads: ``query_1``, ``query_2``, … for the bare
        ``SELECT``s in script order."""
        return list(self._queries)

    @property
    def push_tables(self) -> list[str]:
        """The tables declared with ``'connector' = 'push'`` that the pipeline reads."""
        return self._inputs.tables

    @property
    def background(self) -> bool:
        return self._thread is not None

    @property
    def finished(self) -> bool:
        """True once every input has ended and the job has finished, or it was stopped or failed."""
        return self._job.finished

    @property
    def warnings(self) -> list[str]:
        """Warnings from the restore (a damaged checkpoint that was skipped, for example)."""
        return list(self._job.warnings)

    def schema(self, query: str | None = None) -> pa.Schema:
        """The schema of ``query``'s batches."""
        return self._queries[self._query_name(query)]

    # -- input

    def push(self, table: str, rows: Any) -> int:
        """Hand ``rows`` to push table ``table``; returns how many rows were pushed.

        ``rows`` is a pyarrow ``RecordBatch`` or ``Table``, a list of dicts (one per row), or a
        pandas or polars DataFrame. Columns are matched by name and cast to the table's types;
        a nullable column that is missing is NULL. Bad input raises ``UsageError`` naming the
        table and the column, and pushes nothing.
        """
        self._check()  # a failed job says so before anything is said about the rows
        # Converting touches nothing shared, so it runs outside the lock, in parallel with the job.
        converted = self._inputs.convert(table, rows)
        with self._lock:
            self._check()
            if self._job.finished:
                raise UsageError(f"cannot push into table {table!r}: the job has ended")
            self._inputs.offer(table, converted)
        self._wake.set()
        return converted.num_rows

    def close_input(self, table: str) -> None:
        """End push table ``table``: the rows pushed so far are its last. Once every input has
        ended, windows still open fire and the job finishes."""
        with self._lock:
            self._check()
            self._inputs.close(table)
        self._wake.set()

    def pushed_position(self, table: str) -> int:
        """How many rows of ``table`` the job has: those covered by the checkpoint it restored
        (0 on a fresh start) plus every row pushed since. Right after ``start()`` this is where
        the application resumes pushing: the row numbered ``pushed_position`` comes next."""
        with self._lock:
            return self._inputs.pushed_position(table)

    def checkpointed_position(self, table: str) -> int:
        """How many rows of ``table`` the newest checkpoint covers (taken in this run, or
        restored). The application must keep the rows after it until a later checkpoint covers
        them: they are what it pushes again after a restart."""
        with self._lock:
            return self._inputs.checkpointed_position(table)

    # -- running

    def step(self) -> bool:
        """Do one round of work (poll every source once); True if anything happened."""
        with self._lock:
            self._check()
            return self._step_locked()

    def run_until_idle(self) -> bool:
        """Step until a round does nothing: every pushed row has gone through the pipeline.
        True if anything happened. With an endless source such as unbounded ``datagen`` there is
        always work, so this would not return: it is meant for pipelines fed by ``push``."""
        with self._lock:
            self._check()
            worked = False
            while self._step_locked():
                worked = True
            return worked

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the job finishes (every input ended); True if it has, False on timeout.

        In background mode this waits for the thread; otherwise it steps the job itself. A
        pipeline error is raised here. Without a timeout, a job with an input that never ends
        (an open push table, unbounded ``datagen``) is refused rather than waited for forever.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._thread is not None:
            self._thread.join(timeout)
            with self._lock:
                self._check()
                return self._job.finished
        with self._lock:
            self._check()
            open_inputs = list(dict.fromkeys(self._job.unbounded_sources))
            if timeout is None and open_inputs and not self._job.finished:
                raise UsageError(f"wait() would never return: input(s) {', '.join(open_inputs)} never end; "
                                 "close_input() each push table first, or pass a timeout")
        while True:
            with self._lock:
                self._check()
                if self._job.finished:
                    return True
                worked = self._step_locked()
            if deadline is not None and time.monotonic() >= deadline:
                with self._lock:
                    return self._job.finished
            if not worked:
                time.sleep(self._idle_sleep)

    def advance_watermark(self, table: str, ms: int) -> None:
        """Move push table ``table``'s watermark to ``ms`` (ms since the epoch) now, after every
        row pushed so far has gone through; windows it closes fire. For a table whose rows alone
        would not move its watermark far enough yet (an input that is quiet, a test)."""
        with self._lock:
            self._check()
            self._inputs.pushed_position(table)  # an unknown table is refused by name
            while self._step_locked():
                pass
            try:
                self._job.advance_watermark(table, ms)
            except BaseException as exc:
                self._failed(exc)
                raise
            while self._step_locked():
                pass

    def checkpoint(self) -> int:
        """Take a checkpoint now; returns its id. Needs ``state_dir``.

        Rows pushed before the call go through the pipeline first, so the checkpoint covers
        every one of them: afterwards ``checkpointed_position`` equals ``pushed_position``.
        """
        with self._lock:
            self._check()
            if not self._has_state_dir:
                raise UsageError("checkpoints need a state directory: start the plan with "
                                 "plan.start(state_dir=...)")
            if self._job.finished:
                raise UsageError("the job has ended: there is nothing left to checkpoint")
            self._hand_over_pushed_rows()
            if self._job.finished:  # that was the last of the input: the job checkpointed as it ended
                return self._last_checkpoint()
            try:
                checkpoint_id = self._job.checkpoint()
            except BaseException as exc:
                self._failed(exc)
                raise
            self._note_checkpoints()
            return checkpoint_id

    def stop(self, with_checkpoint: bool = True) -> int | None:
        """Stop the job now; returns the id of the checkpoint it stopped with, or None.

        With ``with_checkpoint`` and a state directory, a last checkpoint is taken first, and a
        job started later on the same state directory continues from exactly here (the rows
        pushed so far are all in it). Either way the job ends at once: windows that have not
        fired do not fire, and sinks are aborted. To finish the pipeline instead, close every
        push input and ``wait()``. Batches already produced can still be polled. Stopping a
        job that has finished does nothing and returns None.
        """
        self._stop_thread()
        with self._lock:
            self._check()
            if self._job.finished:
                return None
            try:
                if with_checkpoint and self._has_state_dir:
                    self._hand_over_pushed_rows()
                    if self._job.finished:
                        return self._last_checkpoint()
                    checkpoint_id = self._job.stop_with_checkpoint()
                    self._note_checkpoints()
                else:
                    self._job.cancel()
                    checkpoint_id = None
            except BaseException as exc:
                self._failed(exc)
                raise
            self._changed.notify_all()
            return checkpoint_id

    def metrics(self) -> Metrics:
        """A snapshot of the job's counters: rows in per table, rows out per sink, watermark,
        checkpoints taken, the checkpoint it restored (``restored_from``). It is also an Arrow
        table of one row per operator and subtask (``pa.table(job.metrics())``, DuckDB, polars);
        ``.to_arrow("splits")`` and ``.to_arrow("checkpoints")`` give the others
        (docs/observability.md)."""
        with self._lock:
            self._job.refresh_metrics()
            return copy.deepcopy(self._job.metrics)

    @property
    def metrics_url(self) -> str | None:
        """The Prometheus endpoint's address, when ``'metrics.port'`` is set."""
        endpoint = self._job.metrics_endpoint
        return endpoint.url if endpoint is not None else None

    # -- state

    def operators(self) -> list[dict]:
        """The job's stateful operators, sources and sinks: ``id`` (what ``state`` takes), ``kind``,
        ``position`` in the SQL and ``subtasks``."""
        with self._lock:
            return self._job.operators()

    def state(self, operator_id: str, *, state: str | None = None) -> pa.Table:
        """The current keyed state of stateful operator ``operator_id`` as a ``pyarrow.Table``
        (docs/embedding.md): for a group aggregate a row per key with its aggregates, for a window
        aggregate a row per open window and key. Read between two steps of the job, so it holds
        whole batches only; a copy, which the job's later work does not change."""
        with self._lock:
            return self._job.state(operator_id, state=state)

    # -- output

    def poll(self, query: str | None = None, *, timeout: float | None = None) -> pa.RecordBatch | None:
        """The next batch of ``query``'s rows (the only query, if there is one), or None.

        In step mode, when no batch is waiting, the job first runs until it is idle. In
        background mode, ``timeout`` (seconds) waits that long for a batch to arrive; without it
        ``poll`` returns at once. A query that has an ``on_rows`` callback is never polled.
        """
        name = self._query_name(query)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._check()
            pending = self._pending[name]
            if not pending and self._thread is None and not self._job.finished:
                while self._step_locked():
                    pass
            while not pending and deadline is not None and self._thread is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._job.finished or self._error is not None:
                    break
                self._changed.wait(remaining)
                self._check()
            return pending.popleft() if pending else None

    def batches(self, query: str | None = None) -> Iterator[pa.RecordBatch]:
        """Yield ``query``'s batches until the job finishes. Blocks while the job has open
        inputs: in step mode only another thread's ``push`` and ``close_input`` can end that."""
        name = self._query_name(query)
        while True:
            batch = self.poll(name, timeout=0.1 if self._thread is not None else None)
            if batch is not None:
                yield batch
                continue
            with self._lock:
                self._check()
                if self._job.finished and not self._pending[name]:
                    return
            if self._thread is None:
                time.sleep(self._idle_sleep)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.batches()

    def stream(self, query: str | None = None) -> QueryStream:
        """``query``'s live output as an Arrow C stream (the Arrow PyCapsule interface).

        Whatever reads Arrow streams reads it without a copy, batch by batch as the job makes
        them, until the job finishes: ``pa.RecordBatchReader.from_stream(job.stream())``,
        ``duckdb.sql("SELECT ... FROM s")``, ``polars.DataFrame(s)``. It takes its batches from
        the queue ``poll`` reads, so read a query one way or the other. An updating query's
        batches are its changes, with their kind in ``_rowkind``.

        >>> import clink
        >>> job = clink.compile("CREATE TABLE t (a BIGINT) WITH ('connector' = 'push'); "
        ...                     "SELECT a + 1 AS b FROM t").start()
        >>> job.push("t", [{"a": 1}, {"a": 2}]); job.close_input("t")
        2
        >>> pa.RecordBatchReader.from_stream(job.stream()).read_all().column("b").to_pylist()
        [2, 3]
        """
        name = self._query_name(query)
        return QueryStream(name, self._queries[name], self.batches(name))

    def on_rows(self, query: str | None, callback: RowsCallback) -> None:
        """Call ``callback(batch)`` with each batch of ``query`` from now on, instead of queueing
        it for ``poll``; batches already waiting are handed over at once. The callback runs in
        the thread that steps the job (the background thread, in background mode) and must not
        block; an exception in it fails the job like a pipeline error."""
        name = self._query_name(query)
        with self._lock:
            self._check()
            self._callbacks[name] = callback
            pending = self._pending[name]
            while pending:
                callback(pending.popleft())

    # -- context manager: stop on the way out

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._error is not None or exc is not None:
            self._stop_thread()
            with self._lock:
                self._job.cancel()
            return
        self.stop(with_checkpoint=True)

    def __repr__(self) -> str:
        mode = "background" if self._thread is not None else "step"
        state = "failed" if self._error is not None else "finished" if self._job.finished else "running"
        return f"<clink.EmbeddedJob {self._job.plan.name} {mode} {state}>"

    # -- internals

    def _deliver(self, name: str, batch: pa.RecordBatch) -> None:
        # Called by the collect sink, inside a step, so the stepping thread holds the lock.
        callback = self._callbacks.get(name)
        if callback is not None:
            callback(batch)
        else:
            self._pending[name].append(batch)
        self._changed.notify_all()

    def _query_name(self, query: str | None) -> str:
        return query_name(self._queries, query, "polled")

    def _check(self) -> None:
        """Raise the pipeline's failure, if it has failed (the original exception, with its SQL
        position), in whichever thread the application calls from."""
        if self._error is not None:
            raise self._error

    def _failed(self, exc: BaseException) -> None:
        self._error = exc
        self._changed.notify_all()

    def _step_locked(self) -> bool:
        if self._job.finished:
            return False
        try:
            worked = self._job.step()
        except BaseException as exc:
            self._failed(exc)
            raise
        self._note_checkpoints()
        if self._job.finished:
            self._changed.notify_all()
        return worked

    def _hand_over_pushed_rows(self) -> None:
        # A round polls every source once, and a push source hands out all it has buffered:
        # after it, every row pushed so far is in the pipeline, so a checkpoint covers it.
        if self._inputs.has_buffered_rows():
            self._step_locked()

    def _last_checkpoint(self) -> int | None:
        """The id of the newest checkpoint of this state directory (ids count up from 1)."""
        metrics = self._job.metrics
        if not metrics.checkpoints:
            return metrics.restored_from
        return (metrics.restored_from or 0) + metrics.checkpoints

    def _note_checkpoints(self) -> None:
        if self._job.metrics.checkpoints != self._seen_checkpoints:
            self._seen_checkpoints = self._job.metrics.checkpoints
            self._inputs.checkpoint_taken()

    def _run_in_background(self) -> None:
        try:
            while not self._halt.is_set():
                # Cleared before the round: a push during the round sets it again, so the wait
                # below returns at once and the next round takes the new rows.
                self._wake.clear()
                with self._lock:
                    if self._job.finished:
                        return
                    worked = self._step_locked()
                if not worked:
                    self._wake.wait(self._idle_sleep)
        except BaseException as exc:  # noqa: BLE001 - the application's next call raises it
            with self._lock:
                if self._error is None:  # a failing step has stored it already
                    self._failed(exc)

    def _stop_thread(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._halt.set()
        self._wake.set()
        if thread is not threading.current_thread():
            thread.join()


class QueryStream:
    """One query's batches as an Arrow C stream that is read once (made by ``EmbeddedJob.stream``).

    The batches pass to the reader as the job made them: ``__arrow_c_stream__`` hands out a
    ``RecordBatchReader`` over them, and the reader ends when the job finishes.
    """

    def __init__(self, query: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> None:
        self.query = query
        self.schema = schema
        self._batches: Iterator[pa.RecordBatch] | None = batches

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        if self._batches is None:
            # Its batches went to the first reader: a second one would see a part of them.
            raise UsageError(f"the stream of {self.query} has been read already; call job.stream() "
                             "again for the batches from now on")
        batches, self._batches = self._batches, None
        reader = pa.RecordBatchReader.from_batches(self.schema, batches)
        return reader.__arrow_c_stream__(requested_schema)

    def __repr__(self) -> str:
        state = "read" if self._batches is None else "unread"
        return f"<clink.QueryStream {self.query} {state}>"


def query_name(queries: Iterable[str], query: str | None, how: str) -> str:
    """``query`` if the script has it, else the script's only query; a clear error otherwise
    (``how``: what the rows could be, for the message)."""
    names = list(queries)
    if query is not None:
        if query not in names:
            raise UsageError(f"no query named {query!r}; queries: {', '.join(names) or 'none'}")
        return query
    if len(names) == 1:
        return names[0]
    if not names:
        raise UsageError(f"the script has no SELECT query whose rows could be {how}")
    raise UsageError(f"the script has {len(names)} queries; name one: {', '.join(names)}")
