"""A worker: runs its share of a plan's subtasks, apart from how it is placed or reached.

Every worker builds the same ``Job`` over the same plan, restricted by a ``Placement`` to the
subtasks whose index it owns; elements for a subtask elsewhere go to ``transport.send`` and arrive
at the other worker's ``deliver``. One thread (``run``) does all of a worker's work, in turn:
control messages from the job master (take a checkpoint, commit one, close), elements that other
workers sent, then one round of its own sources. A worker stops reading its sources while any of
its outgoing channels is full (``transport.has_credit``), but always takes what arrives, so that
two workers sending to each other never wait on each other.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback

from clink.runtime.context import RuntimeContext
from clink.runtime.elements import Element
from clink.runtime.executor import Job, Placement
from clink.runtime.plan import Plan

__all__ = ["HEARTBEAT_S", "Worker", "describe"]

#: How often a worker tells the job master it is alive: from a thread of its own, so a long
#: step (restoring a large checkpoint, a slow snapshot) on a busy machine is no silence.
HEARTBEAT_S = 0.5


class Worker:
    """``worker`` of ``workers``; ``report(kind, value)`` tells the job master what happens:
    ``("checkpoint", (id, parts))``, ``("finished", metrics)``, ``("failed", text)``."""

    def __init__(self, plan: Plan, ctx: RuntimeContext, *, worker: int, workers: int, transport,
                 report, inbox_size: int = 0) -> None:
        self.index = worker
        self.transport = transport
        self.report = report
        #: Elements from other workers; with ``inbox_size``, a sender waits while it is full.
        self.inbox: queue.Queue = queue.Queue(inbox_size)
        self.control: queue.Queue = queue.Queue()
        self.plan = plan
        self.ctx = ctx
        self.placement = Placement(worker, workers, send=self._send,
                                   snapshot_done=lambda n, parts: report("checkpoint", (n, parts)))
        #: Made in the worker's own thread (``run``): connections such as SQLite's stay in the
        #: thread that opened them. ``on_job(job)``, if set, sees it first.
        self.job: Job | None = None
        self.on_job = None
        #: Called in the worker's thread once it has closed, before it says so (flush results).
        self.on_close = None
        self._owner: dict[int, int] = {}
        self._stopped = threading.Event()
        #: Set once ``run`` has returned: the heartbeat ends with it.
        self._ended = threading.Event()
        #: The metrics the heartbeat carries: the worker's thread renews them between rounds.
        self._alive: dict | None = None
        self.thread: threading.Thread | None = None

    # -- called from other threads

    def deliver(self, target: int, sender: int, element: Element) -> None:
        """An element from another worker, for subtask ``target`` of this one."""
        self.inbox.put((target, sender, element))

    def trigger(self, checkpoint_id: int, stop: bool = False) -> None:
        """Take checkpoint ``checkpoint_id``; ``stop``: it is the last one (a stop with a
        checkpoint, or a rescale), so the sources here read nothing after its barrier."""
        self.control.put(("trigger", checkpoint_id, stop))

    def commit(self, checkpoint_id: int, handles: dict) -> None:
        self.control.put(("commit", checkpoint_id, handles))

    def close(self, discard: bool = False) -> None:
        """End the worker: close its sinks (their last output becomes visible), or with
        ``discard`` (after a stop with a checkpoint) drop whatever no checkpoint has committed."""
        self.control.put(("close", discard))

    def stop(self) -> None:
        """Stop at once (the job failed or is cancelled elsewhere): sinks abort."""
        self._stopped.set()
        try:
            self.inbox.put_nowait(None)  # wakes the worker if it waits for elements
        except queue.Full:
            pass

    def start(self) -> threading.Thread:
        self.thread = threading.Thread(target=self.run, name=f"clink-worker-{self.index}", daemon=True)
        self.thread.start()
        threading.Thread(target=self._beat, name=f"clink-heartbeat-{self.index}", daemon=True).start()
        return self.thread

    def _beat(self) -> None:
        """Tell the job master every ``HEARTBEAT_S`` that this process lives (the last metrics
        the worker's thread took), until the worker has ended."""
        while not self._ended.wait(HEARTBEAT_S):
            try:
                self.report("alive", self._alive)
            except Exception:  # noqa: BLE001 - the job master is gone: nobody to tell
                return

    # -- the worker's own thread

    def _send(self, target: int, sender: int, element: Element) -> None:
        self.transport.send(self._owner[target], target, sender, element)

    def run(self) -> None:
        try:
            self._run()
        finally:
            self._ended.set()

    def _run(self) -> None:
        try:
            job = self.job = Job(self.plan, self.ctx, placement=self.placement)
            self._owner = {sid: self.placement.worker_of(job._index_of[sid]) for sid in job._node_of}
            if self.on_job is not None:
                self.on_job(job)
        except BaseException as exc:  # noqa: BLE001 - reported to the job master
            self.report("failed", describe(exc))
            return
        self.report("started", {"warnings": list(job.warnings), "restored_from": job.metrics.restored_from})
        finished_reported = False
        writers = list(job._writers.values())
        first_output = not writers  # this worker writes nothing: nothing to say
        beat = time.perf_counter()
        try:
            while not self._stopped.is_set():
                if time.perf_counter() - beat >= HEARTBEAT_S:
                    beat = time.perf_counter()
                    job.refresh_metrics()
                    self._alive = self._metrics()  # the heartbeat carries them
                closed = self._control()
                if closed:
                    return
                took = self._take_inbox()
                stepped = False
                if not job.finished and self.transport.has_credit():
                    stepped = job.step()
                if not first_output and any(w.metrics.get("rows_out") for w in writers):
                    first_output = True
                    self.report("output", time.time())  # when the first row reached a sink
                if job.finished and not finished_reported:
                    finished_reported = True
                    self.transport.flush()
                    job.refresh_metrics()
                    self.report("finished", self._metrics())
                if not took and not stepped:
                    self._wait()
        except BaseException as exc:  # noqa: BLE001 - reported to the job master, which decides
            self.report("failed", describe(exc))
            try:
                job.cancel()
            except BaseException:  # noqa: BLE001 - the first failure is the one reported
                pass
        finally:
            if self._stopped.is_set():
                try:
                    job.cancel()
                except BaseException:  # noqa: BLE001 - stopping anyway
                    pass

    def _control(self) -> bool:
        while True:
            try:
                message = self.control.get_nowait()
            except queue.Empty:
                return False
            if message[0] == "trigger":
                self.job.inject_barriers(message[1])
                if message[2]:
                    self.job.stop_sources()
            elif message[0] == "commit":
                self.job.commit_checkpoint(message[1], message[2])
                self.report("committed", message[1])
            elif message[0] == "close":
                if message[1]:
                    self.job.cancel()
                else:
                    self.job.close()
                self.transport.flush()
                if self.on_close is not None:
                    self.on_close()
                self.report("closed", self._metrics())
                return True

    def _take_inbox(self, limit: int = 64) -> bool:
        took = False
        for _ in range(limit):
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                break
            if item is None:
                continue
            took = True
            self.job.deliver(*item)
        return took

    def _wait(self) -> None:
        """Nothing to do: wait a little for elements (or a control message)."""
        try:
            item = self.inbox.get(timeout=0.002)
        except queue.Empty:
            return
        if item is not None:
            self.job.deliver(*item)

    def _metrics(self) -> dict:
        m = self.job.metrics
        return {"records_in": dict(m.records_in), "records_out": dict(m.records_out),
                "watermark": m.watermark, "bytes_out": getattr(self.transport, "bytes_out", 0),
                "late_records": {str(k): v for k, v in m.late_records.items()},
                "skipped_records": dict(m.skipped_records), "warnings": list(self.job.warnings),
                "seconds": time.perf_counter() - self.job._started,
                # Per operator subtask and source split here (clink.runtime.metrics), and where
                # this worker serves them to Prometheus ('metrics.port').
                "operators": list(m.operators), "splits": list(m.splits),
                "metrics_url": self.job.metrics_endpoint.url if self.job.metrics_endpoint is not None else None}


def describe(exc: BaseException) -> str:
    from clink.errors import ClinkError

    if isinstance(exc, ClinkError):
        return f"{type(exc).__name__}: {exc}"
    return "".join(traceback.format_exception(exc)).rstrip()
