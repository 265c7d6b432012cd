"""The job master's loop, apart from where its workers run.

``JobMaster.run`` starts an attempt (every worker, restored from the newest complete checkpoint),
then reacts to what the workers report: a worker's parts of a checkpoint (once every worker's are
in, the checkpoint completes and the sinks commit), a worker that has finished (once every one has,
a last checkpoint commits the end of the output and the workers close), a failure. It triggers a
checkpoint every ``'execution.checkpointing.interval'``. A failed attempt — a worker that raised
something other than an error in the pipeline, or that stopped answering — is stopped whole, and
the next attempt starts from the last complete checkpoint, up to the restart strategy's attempts.

Reports carry the attempt they belong to: what a worker of an earlier attempt says is ignored, and
only workers of the current attempt are told to commit (fencing).

The launcher, given an attempt number, the checkpoint to restore, a ``report`` callback and the
number of workers (one per subtask index: the job's parallelism), starts them and returns handles with ``trigger(n)``, ``commit(n, handles, close)``, ``close()``,
``stop()`` and ``alive()`` (``cluster.ray`` for Ray actors, ``cluster.local`` for threads).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

from clink.cluster.coordinator import Coordinator
from clink.errors import ClinkError, UsageError
from clink.runtime.settings import checkpoint_location, parse_duration

__all__ = ["JobFailed", "JobMaster", "RestartStrategy", "headline", "job_error"]


class JobFailed(ClinkError):
    """A cluster job that failed for good: a pipeline error, or more failures than the restart
    strategy allows."""

    exit_code = 1


class RestartStrategy:
    """Flink's ``restart-strategy.type`` ('none' or 'fixed-delay') with its attempts and delay."""

    def __init__(self, config: dict) -> None:
        kind = (config.get("restart-strategy.type") or config.get("restart-strategy") or "fixed-delay").lower()
        if kind in ("none", "off", "disable"):
            self.attempts = 0
        elif kind in ("fixed-delay", "fixeddelay"):
            self.attempts = int(config.get("restart-strategy.fixed-delay.attempts") or 3)
        else:
            raise UsageError(f"restart strategy {kind!r} is not implemented; use 'fixed-delay' or 'none'")
        self.delay_s = parse_duration(config.get("restart-strategy.fixed-delay.delay") or "1 s") / 1000


class JobMaster:
    def __init__(self, launch: Callable, *, workers: int, parallelism: int, fingerprint: str,
                 config: dict, state_dir: str | None, log: Callable[[str], None] = lambda line: None) -> None:
        self.launch = launch
        self.workers = workers
        self.config = dict(config)
        self.state_dir = state_dir
        self.log = log
        self.restarts = RestartStrategy(self.config)
        interval = self.config.get("execution.checkpointing.interval")
        self.interval_s = parse_duration(interval) / 1000 if interval else None
        if self.config.get("execution.checkpointing.interval-rows"):
            raise UsageError("'execution.checkpointing.interval-rows' counts one process's source rows; a "
                             "cluster job takes checkpoints by time: set 'execution.checkpointing.interval'")
        self.heartbeat_s = parse_duration(self.config.get("cluster.heartbeat.timeout") or "10 s") / 1000
        location = checkpoint_location(self.config)
        if state_dir is None and location is None and self.interval_s:
            raise UsageError("'execution.checkpointing.interval' needs a state directory (--state-dir) that "
                             "every worker can reach, or an 'execution.checkpointing.dir'")
        self._scratch = None
        if state_dir is None and location is not None:
            import tempfile

            self._scratch = tempfile.TemporaryDirectory(prefix="clink-master-")  # staging and downloads
        self.coordinator = (Coordinator(state_dir or (self._scratch and self._scratch.name),
                                        fingerprint=fingerprint, parallelism=parallelism, workers=workers,
                                        retained=int(self.config.get("state.checkpoints.num-retained") or 3),
                                        location=location)
                            if state_dir is not None or location is not None else None)
        self.events: queue.Queue = queue.Queue()
        self.attempt = 0
        self.failures: list[str] = []
        self.warnings: list[str] = []
        self.metrics: dict[int, dict] = {}
        self.restored_from: int | None = None
        self.state = "created"
        self.stopped_at: int | None = None
        self.checkpoint_ms: list[float] = []
        #: The last 100 checkpoints (clink.runtime.metrics.CHECKPOINT_SCHEMA's columns).
        self.checkpoint_history: list[dict] = []
        #: What each worker of the current attempt said last about itself (its heartbeat).
        self.live: dict[int, dict] = {}
        #: Wall-clock times: when each attempt had every worker running (restored), and when the
        #: first row reached a sink.
        self.up_at: dict[int, float] = {}
        self.first_output_at: float | None = None
        #: Per worker of the current attempt: the address its data streams listen on.
        self.hosts: dict[int, str] = {}

    def report(self, attempt: int, worker: int, kind: str, value) -> None:
        """What a worker says (from any thread)."""
        self.events.put((attempt, worker, kind, value))

    def command(self, name: str, *args) -> None:
        """From any thread: ``("stop", with_checkpoint)`` or ``("rescale", parallelism)``."""
        self.events.put((None, None, "command", (name, *args)))

    def run(self) -> dict:
        """Run the job to its end (or until stopped); return the workers' metrics. Raises ``JobFailed``."""
        chosen = self.config.get("execution.savepoint.path")
        while True:
            self.state = "running"
            outcome = self._attempt(chosen)
            chosen = None  # a restart resumes from the newest complete checkpoint
            if outcome is None:
                self.state = "finished"
                return self.metrics
            if outcome[0] == "stopped":
                self.state = "stopped"
                self.stopped_at = outcome[1]
                return self.metrics
            if outcome[0] == "rescale":
                self.log(f"rescaled from {self.workers} to {outcome[1]} worker(s) at checkpoint {outcome[2]}")
                self.workers = outcome[1]
                if self.coordinator is not None:
                    self.coordinator.workers = self.coordinator.parallelism = outcome[1]
                continue
            reason = outcome[1]
            self.failures.append(reason)
            if len(self.failures) > self.restarts.attempts:
                self.state = "failed"
                raise JobFailed(f"the job failed {len(self.failures)} time(s), more than the restart strategy "
                                f"allows ({self.restarts.attempts} restart(s)); the last failure:\n{reason}")
            self.log(f"attempt {self.attempt} failed: {headline(reason)}; restarting in "
                     f"{self.restarts.delay_s:g} s from the last complete checkpoint")
            self.state = "restarting"
            time.sleep(self.restarts.delay_s)

    def _attempt(self, chosen: str | None) -> tuple | None:
        """One attempt; None when the job ended, else ``("failed", why)``, ``("stopped",
        checkpoint)`` or ``("rescale", parallelism, checkpoint)``."""
        self.attempt += 1
        attempt = self.attempt
        restore = None
        if self.coordinator is not None:
            self.coordinator.abandon()
            restore, warnings = self.coordinator.resume_point(chosen)
            self.warnings.extend(warnings)
            if restore is not None:
                self.restored_from = self.coordinator.next_id - 1
        checkpoint_started = time.perf_counter()
        handles = self.launch(attempt, restore, lambda worker, kind, value: self.report(attempt, worker, kind, value),
                              self.workers)
        self.live = {}
        up: set[int] = set()
        finished: set[int] = set()
        closed: set[int] = set()
        final_checkpoint: int | None = None
        last_checkpoint = last_alive_check = time.perf_counter()
        last_seen = {w: time.perf_counter() for w in range(self.workers)}
        #: A stop asked for: ("stop" | "rescale", argument, checkpoint id once triggered).
        stopping: list | None = None
        committed: set[int] = set()
        try:
            while True:
                try:
                    event = self.events.get(timeout=0.01)
                except queue.Empty:
                    event = None
                now = time.perf_counter()
                if event is not None and event[2] == "command":
                    name, argument = event[3]
                    if self.coordinator is None or (name == "stop" and not argument):
                        return ("stopped", None)  # no checkpoint asked for (or possible): stop now
                    stopping = [name, argument, None]
                    event = None
                if event is not None:
                    event_attempt, worker, kind, value = event
                    if event_attempt != attempt:
                        continue  # an earlier attempt's worker: fenced
                    last_seen[worker] = now
                    if kind == "failed":
                        if _is_pipeline_error(value):
                            self.failures.append(value)
                            raise JobFailed(f"worker {worker}: {value}")
                        return ("failed", f"worker {worker}: {value}")
                    if kind == "alive":
                        if value is not None:  # None: alive, no metrics yet (still starting)
                            self.live[worker] = value
                        continue
                    if kind == "committed":
                        committed.add(worker)
                        if stopping is not None and stopping[2] == value and len(committed) == self.workers:
                            # The stop's checkpoint is in: the workers end, each dropping what
                            # it wrote after (nothing, as the sources read no further).
                            for handle in handles:
                                handle.close(discard=True)
                        continue
                    if kind == "output":
                        if self.first_output_at is None:
                            self.first_output_at = value
                        continue
                    if kind == "started":
                        up.add(worker)
                        if len(up) == self.workers:
                            self.up_at[attempt] = time.time()
                        if worker == 0:
                            self.warnings.extend(value["warnings"])
                        continue
                    if kind == "checkpoint":
                        checkpoint_id, parts = value
                        if self.coordinator.add(worker, checkpoint_id, parts):
                            done, sinks = self.coordinator.complete()
                            self.checkpoint_ms.append((now - checkpoint_started) * 1000)
                            alignment = max((row["alignment_ms"] for live in self.live.values()
                                             for row in live.get("operators", ())), default=0.0)
                            self.checkpoint_history = [*self.checkpoint_history[-99:], {
                                "checkpoint": done, "completed": int(time.time() * 1000),
                                "duration_ms": self.checkpoint_ms[-1], "size_bytes": self.coordinator.last_size,
                                "alignment_ms": alignment}]
                            committed = set()
                            for handle in handles:
                                # After the last checkpoint the workers close, told with the commit.
                                handle.commit(done, sinks, close=done == final_checkpoint)
                            self.coordinator.prune()
                            last_checkpoint = now
                    elif kind == "finished":
                        finished.add(worker)
                        self.metrics[worker] = value
                        if len(finished) == self.workers:
                            if self.coordinator is None:
                                for handle in handles:
                                    handle.close()
                            else:
                                if self.coordinator.pending is None:
                                    final_checkpoint = self._trigger(handles)
                                    checkpoint_started = now
                                else:
                                    final_checkpoint = -1  # after the one being taken
                    elif kind == "closed":
                        closed.add(worker)
                        self.metrics[worker] = value
                        if len(closed) == self.workers:
                            if stopping is not None and stopping[2] is not None:
                                if stopping[0] == "stop":
                                    return ("stopped", stopping[2])
                                return ("rescale", stopping[1], stopping[2])
                            return None
                if final_checkpoint == -1 and self.coordinator.pending is None:
                    final_checkpoint = self._trigger(handles)
                    checkpoint_started = now
                if (stopping is not None and stopping[2] is None and final_checkpoint is None
                        and self.coordinator.pending is None and len(up) == self.workers):
                    stopping[2] = self._trigger(handles, stop=True)
                    checkpoint_started = now
                if (self.interval_s and final_checkpoint is None and stopping is None
                        and self.coordinator.pending is None and len(up) == self.workers
                        and now - last_checkpoint >= self.interval_s):
                    self._trigger(handles)
                    last_checkpoint = checkpoint_started = now
                if now - last_alive_check >= 0.1:  # asking Ray costs; a death is found within 0.1 s
                    last_alive_check = now
                    dead = [w for w, handle in enumerate(handles) if w not in closed and not handle.alive()]
                    if dead and self.events.empty():  # a worker that failed said why first
                        return ("failed", f"worker {dead[0]} died")
                silent = [w for w, seen in last_seen.items() if w not in closed and now - seen > self.heartbeat_s]
                if silent:
                    return ("failed", f"worker {silent[0]} did not answer for {self.heartbeat_s:g} s")
        except BaseException:
            for handle in handles:
                handle.stop()
            raise
        finally:
            if len(closed) != self.workers:
                for handle in handles:
                    handle.stop()

    def _trigger(self, handles: list, stop: bool = False) -> int:
        checkpoint_id = self.coordinator.begin()
        for handle in handles:
            handle.trigger(checkpoint_id, stop)
        return checkpoint_id


def headline(reason: str) -> str:
    """A failure in one line: a Python traceback's last line (the exception), after whose it is."""
    lines = [line for line in reason.splitlines() if line.strip()]
    if len(lines) > 1 and "Traceback (most recent call last)" in lines[0]:
        who = lines[0].split("Traceback", 1)[0]
        return f"{who}{lines[-1].strip()}"
    return lines[0] if lines else reason


def job_error(text: str) -> ClinkError:
    """The error a failed cluster job raises in the client: a pipeline error a worker raised
    (``"worker 0: UsageError: ..."``) as the same class the job raises when it runs in one
    process, so a caller (and ``clink run``'s exit code) tells no difference; else ``JobFailed``."""
    from clink import errors

    kinds = {cls.__name__: cls for cls in (errors.UsageError, errors.ConnectorError, errors.PipelineError,
                                           errors.IncompatibleCheckpoint)}
    head, _, rest = text.partition(": ")
    kind, _, message = rest.partition(": ") if head.startswith("worker ") else (head, "", rest)
    if kind == "PipelineError" and "\n  while evaluating " in message:
        # Where in the SQL it failed, as the error's own text carries it across processes.
        message, _, where = message.partition("\n  while evaluating ")
        return errors.PipelineError(message, where)
    if kind in kinds and message:
        return kinds[kind](message)
    return JobFailed(text)


def _is_pipeline_error(text: str) -> bool:
    """A failure in the pipeline itself (bad data, a wrong setting): restarting would fail again."""
    return text.split(":", 1)[0] in ("PipelineError", "UsageError", "RecordError", "ConnectorError",
                                      "IncompatibleCheckpoint", "CompilerBug", "SqlError")
