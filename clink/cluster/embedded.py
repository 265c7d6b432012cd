"""A pipeline an application starts on Ray: ``plan.start(config={'execution.target': 'ray'})``.

The same handle as a job embedded in the process (``clink.embedded.EmbeddedJob``) where that can
mean the same thing: ``poll``, ``batches``, ``on_rows`` give the rows of the plan's bare
``SELECT`` queries as the workers send them back; ``wait``, ``stop`` (with a checkpoint: Flink's
stop-with-savepoint), ``metrics``, ``warnings``. What needs the job inside this process is
refused with what to do instead: ``push`` tables (the workers read their input themselves),
``step``/``run_until_idle`` (the workers run on their own), ``checkpoint()`` (the job master
takes checkpoints at ``'execution.checkpointing.interval'``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import pyarrow as pa

from clink.embedded import query_name
from clink.errors import UsageError
from clink.runtime.executor import Metrics
from clink.runtime.plan import Plan as RuntimePlan

__all__ = ["RayEmbeddedJob"]

RowsCallback = Callable[[pa.RecordBatch], None]


class RayEmbeddedJob:
    """A job on Ray's workers that belongs to the application which started it (``Plan.start``
    with ``'execution.target' = 'ray'``). It runs from the start: there is no step mode."""

    def __init__(self, plan: RuntimePlan, *, source: str, settings: dict[str, str], state_dir: str | None,
                 stdout: TextIO, stderr: TextIO) -> None:
        pushed = [s.table for s in plan.sources if s.connector == "push"]
        if pushed:
            raise UsageError(f"push table(s) {', '.join(pushed)} take their rows from this process, and a job on "
                             "Ray reads its input on the workers: start it locally ('execution.target' = "
                             "'local'), or read the rows from files or Kafka")
        try:
            from clink.cluster import onray
        except ImportError as exc:
            raise UsageError(f"running on Ray needs Ray: pip install 'clink[ray]' ({exc})") from None
        from clink.runtime.artefact import artefact_bytes

        self.name = plan.name
        self._queries = {s.table: s.schema for s in plan.sinks if s.connector == "collect"}
        self._pending: dict[str, deque[pa.RecordBatch]] = {name: deque() for name in self._queries}
        self._callbacks: dict[str, RowsCallback] = {}
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._stdout, self._stderr = stdout, stderr
        self._outcome: dict | None = None
        self._error: BaseException | None = None
        self._finished = False
        parallelism = int(settings.get("parallelism.default") or 1)
        self._onray = onray
        self._started_ray = onray.ensure_ray(settings.get("ray.address"), workers=parallelism)
        try:
            artefact = artefact_bytes(module_source=source, plan=plan)
            self._job = onray.submit(artefact, config=settings, state_dir=state_dir, workers=parallelism,
                                     parallelism=parallelism, fingerprint=plan.fingerprint,
                                     host=onray.data_plane_host(self._started_ray), on_result=self._deliver,
                                     on_print=self._printed)
        except BaseException:
            if self._started_ray:
                onray.end_runtime()
            raise
        self._thread = threading.Thread(target=self._wait_for_end, name=f"clink {plan.name} on ray", daemon=True)
        self._thread.start()

    # -- what the pipeline has

    @property
    def id(self) -> str:
        """The job's id on the Ray cluster (``clink jobs ID``)."""
        return self._job.id

    @property
    def queries(self) -> list[str]:
        return list(self._queries)

    @property
    def push_tables(self) -> list[str]:
        return []

    @property
    def background(self) -> bool:
        return True

    @property
    def finished(self) -> bool:
        """True once the job has finished, was stopped, or failed."""
        return self._finished

    @property
    def warnings(self) -> list[str]:
        """Warnings from the restore (a damaged checkpoint that was skipped, for example), once the
        job has ended."""
        return list(self._outcome["warnings"]) if self._outcome is not None else []

    def schema(self, query: str | None = None) -> pa.Schema:
        return self._queries[self._query_name(query)]

    # -- what only a job inside this process can do

    def push(self, table: str, rows: Any) -> int:
        raise UsageError(f"no push table {table!r}: a job on Ray reads its input on the workers")

    def close_input(self, table: str) -> None:
        raise UsageError(f"no push table {table!r}: a job on Ray reads its input on the workers")

    def step(self) -> bool:
        raise UsageError("a job on Ray runs on its workers on its own: there is nothing to step; use wait() or poll()")

    run_until_idle = step

    def checkpoint(self) -> int:
        raise UsageError("a job on Ray checkpoints every 'execution.checkpointing.interval' (its job master "
                         "triggers them); stop(with_checkpoint=True) ends it with one")

    # -- the job's life

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the job ends; True if it has, False on timeout. Its error is raised here."""
        self._thread.join(timeout)
        with self._lock:
            self._check()
            return self._finished

    def stop(self, with_checkpoint: bool = True) -> int | None:
        """Stop the job; returns the checkpoint it stopped with (a state directory or
        'execution.checkpointing.dir' is needed for one), or None. A job started later from the
        same checkpoints continues from exactly there, locally or on Ray, at any parallelism.
        Stopping a job that has ended does nothing and returns None."""
        if self._finished:
            self._check()
            return None
        self._job.ask_stop(with_checkpoint=with_checkpoint)
        self._thread.join()
        with self._lock:
            self._check()
            return self._outcome["stopped_at"] if self._outcome is not None else None

    def metrics(self) -> Metrics:
        """Rows in per table and out per sink (summed over the workers), checkpoints completed, the
        checkpoint the job resumed from and the one it stopped with; live while it runs."""
        outcome = self._outcome
        if outcome is not None:
            return Metrics(records_in=dict(outcome["records_in"]), records_out=dict(outcome["records_out"]),
                           checkpoints=outcome["checkpoints"], restored_from=outcome["restored_from"],
                           stopped_at=outcome["stopped_at"], seconds=outcome["seconds"])
        from clink.live import cluster_metrics

        status = self._job.status() or {}
        metrics = cluster_metrics(status)  # with the operators, splits and checkpoints tables
        metrics.checkpoints = status.get("last_checkpoint") or 0
        return metrics

    # -- output

    def poll(self, query: str | None = None, *, timeout: float | None = None) -> pa.RecordBatch | None:
        """The next batch of ``query``'s rows (the only query, if there is one), or None;
        ``timeout`` (seconds) waits that long for one to arrive."""
        name = self._query_name(query)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._check()
            pending = self._pending[name]
            while not pending and deadline is not None and not self._finished:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
                self._check()
            return pending.popleft() if pending else None

    def batches(self, query: str | None = None) -> Iterator[pa.RecordBatch]:
        """Yield ``query``'s batches until the job ends."""
        name = self._query_name(query)
        while True:
            batch = self.poll(name, timeout=0.1)
            if batch is not None:
                yield batch
                continue
            with self._lock:
                self._check()
                if self._finished and not self._pending[name]:
                    return

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.batches()

    def on_rows(self, query: str | None, callback: RowsCallback) -> None:
        """Call ``callback(batch)`` with each batch of ``query`` from now on, instead of queueing it
        for ``poll``; batches already waiting are handed over at once. It runs in the thread that
        receives the workers' rows and must not block."""
        name = self._query_name(query)
        with self._lock:
            self._callbacks[name] = callback
            pending = self._pending[name]
            while pending:
                callback(pending.popleft())

    # -- context manager: stop on the way out

    def __enter__(self) -> RayEmbeddedJob:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not self._finished:
            self.stop(with_checkpoint=exc is None)

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else "finished" if self._finished else "running"
        return f"<clink.RayEmbeddedJob {self.name} {self._job.id} {state}>"

    # -- internals

    def _deliver(self, name: str, batch: pa.RecordBatch) -> None:
        with self._lock:
            callback = self._callbacks.get(name)
            if callback is not None:
                callback(batch)
            else:
                self._pending[name].append(batch)
            self._changed.notify_all()

    def _printed(self, stream: str, text: str) -> None:
        (self._stdout if stream == "stdout" else self._stderr).write(text)

    def _wait_for_end(self) -> None:
        try:
            outcome = self._job.result()
            error = None
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            outcome, error = None, exc
        finally:
            if self._started_ray:
                self._onray.end_runtime()
        with self._lock:
            self._outcome, self._error, self._finished = outcome, error, True
            self._changed.notify_all()

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def _query_name(self, query: str | None) -> str:
        return query_name(self._queries, query, "polled")
